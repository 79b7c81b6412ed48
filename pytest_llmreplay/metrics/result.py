"""Records -> per-request, per-session and workload metrics -> :class:`Result`.

Metric names are the ones of DESIGN.md, used everywhere (reports, SLO keys, baselines). Only
*measured* requests count: not warm-up, not cancelled. Latency metrics use the ``ok`` ones.

Per request (seconds, tokens):

- ``ttft`` = first token - sent; ``latency`` = end of response - sent;
- ``tpot`` = (latency - ttft) / (output_tokens - 1), for output_tokens > 1 that arrived in more
  than one chunk: a whole (non-streamed) reply, or a stream that carried its whole output in one
  event, has no measurable decode (its TTFT is its latency; (latency - ttft) would be the time to
  read the body, a TPOT of about 0 that passes any limit);
- ``itl``: for each chunk after the first, (chunk time - previous chunk time) / tokens in the
  chunk, once per token (trie's rule; a server merging tokens per event does not inflate it).
  The tokens in a chunk are the server's count spread over the chunks (:func:`~.chunks.spread_counts`)
  where the stream's count differs from the usage's (a server that puts several tokens in an
  event without saying how many: the stream counts one an event), as ``output_tokens`` is;
- ``queue`` (simulator only), ``prompt_tokens`` (server's count, else planned),
  ``cached_tokens``, ``output_tokens``; ``schedule_lag`` = sent - scheduled (the client's own
  health: when it grows, the client is the bottleneck and TTFT is inflated);
- in a run with reasoning only: ``ttfr``, ``ttfo``, ``reasoning_tokens``, ``answer_tokens``,
  ``reasoning_decode_tps``, ``answer_decode_tps`` (:mod:`~pytest_llmreplay.metrics.reasoning`).

Per complete session (every turn measured and ok):

- ``session_latency`` = last response end - first request sent;
- ``ttfat`` = first *answer* token of the last request - first request sent (time to first
  agent token: what the agent's user waits for; a reasoning model's thinking before it answers
  counts in it, not as its end; the first answer token is content or a tool call,
  :func:`~pytest_llmreplay.metrics.reasoning.answer_start`);
- ``decode_tps`` = Σ(output_i - 1) / Σ(last token_i - first token_i), over the turns whose
  tokens arrived over time (a one-chunk answer has no measurable decode);
- ``cache_hit_rate`` = Σ cached_i / Σ prompt_i;
- ``eligible_cache_hit_rate`` = Σ min(cached_i, eligible_i) / Σ eligible_i with eligible_0 = 0
  and eligible_i = prompt_{i-1} + output_{i-1} - reasoning_{i-1} where turn i sends the server's
  own answer back (its ``history`` is ``server``: an agent loop, a chat; a reasoning model's
  reasoning is not sent back), prompt_{i-1} where it does not (a hash-id turn is its blocks
  alone, and the answer counted made a perfect cache read 94%; a ``planned`` answer, ids the
  server did not generate, is no prefix it cached): the share of the session's own history (what a
  perfect prefix cache could have kept) that was hit, from 0 to 1. Hits beyond the history (a
  system prompt shared with other sessions, on any turn) count in ``cache_hit_rate`` only;
- ``output_tokens_per_session``.

Workload, over the measured span T (first measured request sent to last one ended):

- ``request_throughput``, ``output_throughput``, ``input_throughput``,
  ``cached_input_throughput``, ``uncached_input_throughput``, each with ``overall`` (count / T),
  ``steady_state`` (count after the first 20% of T / 0.8 T: the slope once the ramp-up is
  over), ``last_30s`` (count in the last min(30 s, T) / that span) and ``per_gpu``
  (steady_state / gpus). Requests count at their end, output tokens at their chunk's arrival
  (scaled to the server's count), prompt tokens at the first token;
- ``error_rate`` = failed / (ok + failed); ``goodput``: ``value`` = requests meeting every
  per-request threshold (one that reasoned and never answered meets no ``ttfo`` threshold)
  / (ok + failed) (the share of good requests), ``rate`` = those good
  requests / T (DistServe's goodput, requests per second); ``effective_concurrency`` =
  Σ (end - sent) / T.

Server side (only when the server's ``/metrics`` was scraped): ``server`` with the figures of
:mod:`~pytest_llmreplay.metrics.server` (``server.preemptions``, ``server.kv_cache_usage.max``, ...);
:attr:`Result.client_hit_rate` = Σ cached / Σ prompt over every ok request reporting
``cached_tokens`` (warm-up included, as the server's counters include it), to set beside the
server's ``prefix_cache_hit_rate``; none when a request was not ok (the server counted its
prompt, the client could not).

Statistics of a distribution: mean, min, p50, p90, p95, p99, max, std (numpy, linear
interpolation, as vLLM's ``bench serve``) and count.

Error causes (:func:`error_causes`): the failed requests' errors, one line per cause with its
count; causes that differ only in how many tokens had arrived (``connection lost mid-response
after 423 tokens``, ``... after 21 tokens``) are one cause with the range (``after 21-423 tokens``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LLMReplayError
from ..replayer.records import ReplayRun, RequestRecord
from .chunks import Chunks, spread_counts
from .columns import complete_sessions, one_turn_session_columns, request_columns, schedule_lag_column
from .error_causes import ErrorCause, error_causes
from .names import GOODPUT_METRICS, REASONING_METRICS, REQUEST_METRICS, SESSION_METRICS
from .reasoning import (
    answer_start,
    has_reasoning,
    misses_answer_limit,
    reasoning_values,
    streamed_tokens,
    ttfo,
    unanswered,
)
from .server import hit_rate_gap, server_figures

STEADY_SKIP = 0.2
# a record's fields of reasoning, left out of the request table of a run without
REASONING_FIELDS = (
    "first_reasoning_s",
    "last_reasoning_s",
    "first_answer_s",
    "last_answer_s",
    "reasoning_tokens",
    "unstreamed_tokens",
)
LAST_WINDOW_S = 30.0
WINDOWS = 10  # windows of the steady span that repeat a throughput measurement


def stats(values: Iterable[float | None], weights: Iterable[int] | None = None) -> dict[str, float] | None:
    """mean/min/p50/p90/p95/p99/max/std/count of ``values``; None when there are none.

    ``weights`` (integers >= 1) count each value that many times, exactly as if it were repeated
    (ITL: a chunk's per-token gap once per token): percentiles are numpy's linear interpolation
    on the repeated data, at positions ``h = (N - 1) q``, element ``k`` of the repeated sorted data
    being the value whose cumulative weight first exceeds ``k``.
    """
    if isinstance(values, np.ndarray):
        array = values.astype(float)
    else:
        array = np.array(list(values), dtype=float)  # None -> NaN
    counts = (
        np.ones(array.size, dtype=np.int64)
        if weights is None
        else np.asarray(list(weights) if not isinstance(weights, np.ndarray) else weights, dtype=np.int64)
    )
    keep = ~np.isnan(array)
    array, counts = array[keep], counts[keep]
    if not array.size:
        return None
    order = np.argsort(array, kind="stable")
    array, counts = array[order], counts[order]
    cumulative = np.cumsum(counts)
    total = int(cumulative[-1])
    positions = (total - 1) * np.array([0.50, 0.90, 0.95, 0.99])
    low, high = np.floor(positions).astype(np.int64), np.ceil(positions).astype(np.int64)
    at_low = array[np.searchsorted(cumulative, low, side="right")]
    at_high = array[np.searchsorted(cumulative, high, side="right")]
    p50, p90, p95, p99 = at_low + (at_high - at_low) * (positions - low)
    mean = float((array * counts).sum() / total)
    return {
        "mean": mean,
        "min": float(array[0]),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "max": float(array[-1]),
        "std": float(np.sqrt((counts * (array - mean) ** 2).sum() / total)),
        "count": total,
    }


def ttft(record: RequestRecord) -> float | None:
    return None if record.first_token_s is None or record.sent_s is None else record.first_token_s - record.sent_s


def latency(record: RequestRecord) -> float | None:
    return None if record.end_s is None or record.sent_s is None else record.end_s - record.sent_s


def tpot(record: RequestRecord) -> float | None:
    """(latency - ttft) / (output_tokens - 1), the output tokens those the stream carried
    (:func:`~pytest_llmreplay.metrics.reasoning.streamed_tokens`: not a hidden reasoning's); None
    for one token or fewer, or for an output that arrived in one chunk (not streamed: no decode
    to measure)."""
    first, total, tokens = ttft(record), latency(record), streamed_tokens(record)
    if first is None or total is None or tokens <= 1 or len(record.chunk_times) < 2:
        return None
    return (total - first) / (tokens - 1)


def itl_chunks(record: RequestRecord) -> list[tuple[float, int]]:
    """(gap per token, tokens) of every chunk after the first: ITL's samples, each gap counted
    once per token of its chunk (trie's rule), the tokens the server's count spread over the
    chunks (:func:`spread_counts`), less a hidden reasoning's
    (:func:`~pytest_llmreplay.metrics.reasoning.streamed_tokens`)."""
    times, tokens = record.chunk_times, spread_counts(record.chunk_tokens, streamed_tokens(record))
    return [((times[i] - times[i - 1]) / tokens[i], tokens[i]) for i in range(1, len(times)) if tokens[i] > 0]


def itl(record: RequestRecord) -> list[float]:
    """Per token of every chunk after the first: the chunk's gap / its tokens."""
    return [gap for gap, count in itl_chunks(record) for _ in range(count)]


def prompt_tokens(record: RequestRecord) -> int | None:
    """The server's count, else what we planned."""
    return record.prompt_tokens if record.prompt_tokens is not None else record.planned_prompt_tokens


def schedule_lag(record: RequestRecord) -> float | None:
    return None if record.sent_s is None else record.sent_s - record.scheduled_s


def request_values(record: RequestRecord, reasoning: bool = False) -> dict[str, Any]:
    """The per-request metrics of one record (None where not defined); with ``reasoning`` (the
    record is of a run with reasoning) its reasoning metrics too."""
    values = {
        "ttft": ttft(record),
        "tpot": tpot(record),
        "latency": latency(record),
        "queue": record.queue_s,
        "prompt_tokens": prompt_tokens(record),
        "cached_tokens": record.cached_tokens,
        "output_tokens": record.output_tokens,
        "schedule_lag": schedule_lag(record),
    }
    if reasoning:
        values.update(reasoning_values(record))
    return values


def session_values(turns: list[RequestRecord]) -> dict[str, Any]:
    """The per-session metrics of one complete session's records (in turn order), in one pass."""
    first, last = turns[0], turns[-1]
    answered = answer_start(last)
    decode_tokens = decode_time = 0.0
    cached = prompts = eligible = history_hits = outputs = 0
    reported = True  # every turn has the server's cached count and a prompt count
    previous: tuple[int, int] | None = None  # the previous turn's prompt and answer tokens
    for turn in turns:
        outputs += turn.output_tokens
        first_token, last_token = turn.first_token_s, turn.last_token_s  # both set, or neither
        streamed = streamed_tokens(turn)
        if streamed > 1 and first_token is not None and last_token is not None and last_token > first_token:
            decode_tokens += streamed - 1
            decode_time += last_token - first_token
        prompt, turn_cached = prompt_tokens(turn), turn.cached_tokens
        if turn_cached is None or prompt is None:
            reported = False
        elif reported:
            cached += turn_cached
            prompts += prompt
            if previous is not None:  # what this turn could find cached: the previous prompt, and its
                # answer where this turn sends it back (hash-id turns are their blocks alone)
                history = previous[0] + (previous[1] if turn.history == "server" else 0)
                eligible += history
                history_hits += min(turn_cached, history)
            previous = (prompt, turn.output_tokens - (turn.reasoning_tokens or 0))
    return {
        "session_id": first.session_id,
        "session_index": first.session_index,
        "turns": len(turns),
        "session_latency": None if last.end_s is None or first.sent_s is None else last.end_s - first.sent_s,
        "ttfat": None if answered is None or first.sent_s is None else answered - first.sent_s,
        "decode_tps": decode_tokens / decode_time if decode_time > 0 else None,
        "cache_hit_rate": cached / prompts if reported and prompts else None,
        "eligible_cache_hit_rate": history_hits / eligible if reported and eligible else None,
        "output_tokens_per_session": outputs,
    }


def prefill_done(record: RequestRecord) -> float | None:
    """When the prompt was processed: the first token, else the end (non-streamed)."""
    return record.first_token_s if record.first_token_s is not None else record.end_s


def rates(times: np.ndarray, amounts: np.ndarray, start: float, end: float, gpus: int) -> dict[str, float]:
    """overall / steady_state / last_30s / per_gpu rates of ``amounts`` arriving at ``times``
    within [start, end]."""
    span = end - start
    if span <= 0:
        return {}
    steady_from = start + STEADY_SKIP * span
    window = min(LAST_WINDOW_S, span)
    steady = float(amounts[times >= steady_from].sum()) / (end - steady_from)
    return {
        "overall": float(amounts.sum()) / span,
        "steady_state": steady,
        "last_30s": float(amounts[times >= end - window].sum()) / window,
        "per_gpu": steady / gpus,
    }


@dataclass
class Result:
    """The outcome of a replay: records, the metrics computed from them, and writers.

    ``gpus`` divides steady-state throughput into ``per_gpu``; ``goodput`` maps per-request
    metrics (``ttft``, ``ttfo``, ``tpot``, ``latency``, ``itl`` = the request's worst gap) to the most
    seconds a good request may take.
    """

    run: ReplayRun
    gpus: int = 1
    goodput: Mapping[str, float] = field(default_factory=dict)
    slo_checks: list[Any] = field(default_factory=list, init=False, repr=False)  # every assert_slo check, in order
    # the runs of the same test before this one (--llm-repeat), set by the plugin: assert_slo checks the runs' medians
    earlier_runs: list[Result] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise LLMReplayError(f"gpus: expected an integer >= 1, got {self.gpus!r}")

    def __repr__(self) -> str:
        """One line (the records' repr ran to megabytes in a failed test's captured output)."""
        return f"Result({self.run!r})"

    @property
    def records(self) -> list[RequestRecord]:
        return self.run.records

    @property
    def warnings(self) -> list[str]:
        """The run's warnings, then :attr:`hit_rate_gap` and :attr:`unanswered`, when there are any."""
        return [*self.run.warnings, *(line for line in (self.hit_rate_gap, self.unanswered) if line)]

    @cached_property
    def unanswered(self) -> str | None:
        """The line counting the requests that reasoned and never answered
        (:func:`~pytest_llmreplay.metrics.reasoning.unanswered`); None in a run without reasoning
        or when every one answered. Counted once: the reports read :attr:`warnings` several times."""
        return unanswered(self.ok) if self.reasoning else None

    @cached_property
    def hit_rate_gap(self) -> str | None:
        """The line saying that the server's prefix-cache hit rate and :attr:`client_hit_rate`
        disagree (:func:`~pytest_llmreplay.metrics.server.hit_rate_gap`); None when they agree
        or either is missing."""
        server, client = self.summary.get("server", {}).get("prefix_cache_hit_rate"), self.client_hit_rate
        return None if server is None or client is None else hit_rate_gap(server, client)

    @cached_property
    def measured(self) -> list[RequestRecord]:
        """Records that count: not warm-up, not cancelled."""
        return [r for r in self.run.records if not r.warmup and r.status != "cancelled"]

    @cached_property
    def _chunks(self) -> Chunks:
        return Chunks(self.ok)

    @cached_property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.measured if r.status == "ok"]

    @cached_property
    def reasoning(self) -> bool:
        """Whether the run has reasoning (an ok measured request reasoned): only then does it
        show the reasoning metrics (:mod:`~pytest_llmreplay.metrics.reasoning`)."""
        return has_reasoning(self.ok)

    @cached_property
    def error_causes(self) -> list[ErrorCause]:
        """The measured failed requests' causes, grouped (:func:`error_causes`)."""
        return error_causes(self.measured)

    @cached_property
    def session_rows(self) -> list[dict[str, Any]]:
        """Per-session metrics of every complete session (all turns measured and ok)."""
        return [session_values(turns) for turns in complete_sessions(self.run.records)]

    @cached_property
    def span(self) -> tuple[float, float]:
        """(first measured request sent, last measured request ended), seconds from the start."""
        sent = [r.sent_s for r in self.measured if r.sent_s is not None]
        ended = [r.end_s for r in self.measured if r.end_s is not None]
        return (min(sent), max(ended)) if sent and ended else (0.0, 0.0)

    @cached_property
    def summary(self) -> dict[str, dict[str, float]]:
        """metric -> stat -> value. Distributions have :data:`STATS` and ``count``; throughputs
        have :data:`RATES`; single figures have ``value``. Metrics with no samples are absent."""
        summary: dict[str, dict[str, float]] = {}
        requests = request_columns(self.ok)
        samples: dict[str, Any] = {
            **requests,
            "itl": self._chunks.itl(),
            "schedule_lag": schedule_lag_column(self.measured),
        }
        if self.reasoning:
            rows = [reasoning_values(r) for r in self.ok]
            samples.update((name, list(map(itemgetter(name), rows))) for name in REASONING_METRICS)
        for name in REQUEST_METRICS + (REASONING_METRICS if self.reasoning else ()):
            found = stats(*samples[name]) if name == "itl" else stats(samples[name])
            if found:
                summary[name] = found
        singles = [r for r in self.ok if r.turns_in_session == 1]
        longer = [
            session_values(turns) for turns in complete_sessions(r for r in self.run.records if r.turns_in_session > 1)
        ]
        one_turn = one_turn_session_columns(
            singles, requests if len(singles) == len(self.ok) else request_columns(singles)
        )
        for name in SESSION_METRICS:  # stats sort their values: the order of the sessions does not count
            found = stats(np.concatenate([one_turn[name], np.array([row[name] for row in longer], dtype=float)]))
            if found:
                summary[name] = found
        summary.update(self._throughput())
        counted = [r for r in self.measured if r.status in ("ok", "failed")]
        failed = sum(r.status == "failed" for r in counted)
        if counted:
            summary["error_rate"] = {"value": failed / len(counted)}
        start, end = self.span
        if counted and self.goodput:
            summary["goodput"] = self.goodput_figures(self.goodput)
        if end > start:
            busy = sum(latency(r) or 0.0 for r in self.measured)
            summary["effective_concurrency"] = {"value": busy / (end - start)}
        server = server_figures(self.run.server_metrics)
        if server:
            summary["server"] = server
        summary["requests"] = {
            "ok": len(self.ok),
            "failed": failed,
            "cancelled": sum(r.status == "cancelled" for r in self.run.records),
            "warmup": sum(r.warmup for r in self.run.records),
            "planned": self.run.planned_requests,
            "sessions_complete": len(singles) + len(longer),
        }
        return summary

    @cached_property
    def client_hit_rate(self) -> float | None:
        """Σ cached / Σ prompt tokens over the ok requests reporting ``cached_tokens`` (module
        docstring); None when none reported it, their prompts hold no token, or a request was
        not ok (cut by the run's end, failed): the server counted prompts the client did not,
        and the two rates, set side by side (:attr:`hit_rate_gap`), would differ with no count wrong."""
        if any(r.status != "ok" for r in self.run.records):
            return None
        reported = [r for r in self.run.records if r.cached_tokens is not None]
        prompts = sum(prompt_tokens(r) or 0 for r in reported)
        return sum(r.cached_tokens or 0 for r in reported) / prompts if prompts else None

    @cached_property
    def throughput_events(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """throughput metric -> (times, amounts): requests at their end, output tokens at their
        chunks, prompt (and cached, uncached) tokens at the first token."""
        ok = self.ok
        prefilled = np.array([prefill_done(r) for r in ok], dtype=float)
        prompts = np.array([prompt_tokens(r) or 0 for r in ok], dtype=float)
        events = {
            "request_throughput": (np.array([r.end_s for r in ok], dtype=float), np.ones(len(ok))),
            "output_throughput": self._chunks.output_events(),
            "input_throughput": (prefilled, prompts),
        }
        if ok and all(r.cached_tokens is not None for r in ok):
            cached = np.array([r.cached_tokens for r in ok], dtype=float)
            events["cached_input_throughput"] = (prefilled, cached)
            events["uncached_input_throughput"] = (prefilled, prompts - cached)
        return events

    def _throughput(self) -> dict[str, dict[str, float]]:
        start, end = self.span
        out = {}
        for name, (times, amounts) in self.throughput_events.items():
            figures = rates(times, amounts, start, end, self.gpus)
            if figures:
                out[name] = figures
        return out

    def window_rates(self, name: str, windows: int = WINDOWS) -> np.ndarray:
        """The rate of throughput metric ``name`` in each of ``windows`` equal windows of the
        steady span (after the first 20% of the run): repeated measurements of
        ``steady_state``, whose mean they equal, for a statistical comparison."""
        start, end = self.span
        if end <= start or name not in self.throughput_events:
            return np.array([])
        times, amounts = self.throughput_events[name]
        edges = np.linspace(start + STEADY_SKIP * (end - start), end, windows + 1)
        totals, _ = np.histogram(times, bins=edges, weights=amounts)
        return totals / (edges[1] - edges[0])

    def goodput_figures(self, limits: Mapping[str, float]) -> dict[str, float]:
        """``goodput`` under per-request ``limits`` (metric -> most seconds): ``value`` = good /
        (ok + failed), ``rate`` = good / the measured span (module docstring)."""
        counted = sum(r.status in ("ok", "failed") for r in self.measured)
        start, end = self.span
        good = sum(self._good(r, limits, self.reasoning) for r in self.ok)
        return {"value": good / counted if counted else 0.0, "rate": good / (end - start) if end > start else 0.0}

    @staticmethod
    def _good(record: RequestRecord, limits: Mapping[str, float], reasoning: bool) -> bool:
        values = request_values(record, reasoning)
        gaps = itl_chunks(record)
        values["itl"] = max(gap for gap, _ in gaps) if gaps else None
        values["ttfo"] = ttfo(record)  # in a run without reasoning too: a request that did not reason has its TTFT
        for name, limit in limits.items():
            value = values.get(name)
            if value is not None and value > limit:
                return False
        return not ("ttfo" in limits and misses_answer_limit(record))

    def assert_slo(self, slos: Mapping[str, str], **more: str) -> None:
        """Check thresholds such as ``{"ttft.p99": "< 2s", "error_rate": "== 0"}`` (see
        :mod:`~pytest_llmreplay.metrics.slo`); raise ``SLOBreach`` (an ``AssertionError``) with every
        breached one in a table. Keyword form: ``assert_slo({}, error_rate="== 0")``.

        ``goodput`` is counted under the per-request limits of this call's own SLOs (every upper
        bound on ttft, ttfo, tpot, latency or itl, :func:`~pytest_llmreplay.metrics.slo.per_request_limits`),
        else under the test's. After ``--llm-repeat N`` runs (:attr:`earlier_runs`), each figure is
        the median over the runs (:func:`~pytest_llmreplay.metrics.runs.median_summary`), as the
        test's own SLOs are checked: one key never shows two measurements in the test's table. A
        bad threshold raises ``LLMReplayError`` naming the key, before anything is checked.
        Every check, met or not, is appended to :attr:`slo_checks`: the pytest plugin stores
        them with the run's own SLOs (report files, baseline). Under pytest the failure shows
        the test's line and the table; the library's frames are hidden."""
        __tracebackhide__ = True
        from .runs import median_summary
        from .slo import SLOBreach, assert_slos, goodput_key, parse_slos, per_request_limits

        parsed = parse_slos({**slos, **more}, extra_metrics=self.summary)
        key = goodput_key(parsed)
        limits = dict(self.goodput)
        if key is not None:
            limits = per_request_limits(parsed) or limits
            if not limits:
                raise LLMReplayError(
                    f"assert_slo {key!r}: goodput counts the requests that meet every per-request limit, and none is set; "
                    f"add an upper bound on {', '.join(GOODPUT_METRICS[:-1])} or {GOODPUT_METRICS[-1]} to this call (e.g. ttft.p99 < 1s) or to the test's slo"
                )
        runs = [*self.earlier_runs, self]
        summaries = [run._slo_summary(limits) for run in runs]
        summary = median_summary(summaries) if len(runs) > 1 else summaries[0]
        try:
            self.slo_checks.extend(assert_slos(summary, parsed, extra_metrics=self.summary))
        except SLOBreach as breach:
            self.slo_checks.extend(breach.checks)
            raise

    def _slo_summary(self, limits: Mapping[str, float]) -> Mapping[str, Mapping[str, float]]:
        """:attr:`summary`, its ``goodput`` counted under ``limits`` (a call's own per-request limits)."""
        if limits == dict(self.goodput) or not any(r.status in ("ok", "failed") for r in self.measured):
            return self.summary
        return {**self.summary, "goodput": self.goodput_figures(limits)}

    def request_table(self):
        """Every record with its per-request metrics, as a pandas DataFrame (one row each)."""
        import pandas as pd

        return pd.DataFrame([self._request_row(r, self.reasoning) for r in self.run.records])

    def session_table(self):
        """Per-session metrics of complete sessions, as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.session_rows, columns=["session_id", "session_index", "turns", *SESSION_METRICS])

    @staticmethod
    def _request_row(record: RequestRecord, reasoning: bool) -> dict[str, Any]:
        """The record's fields (those of reasoning only in a run with reasoning) and its metrics."""
        left_out = ("chunk_times", "chunk_tokens", "notes") + (() if reasoning else REASONING_FIELDS)
        row = {f.name: getattr(record, f.name) for f in fields(record) if f.name not in left_out}
        row.update(request_values(record, reasoning))
        row["chunks"] = len(record.chunk_times)
        row["notes"] = "; ".join(record.notes)
        return row

    def to_dict(self) -> dict[str, Any]:
        """What ``write_json`` writes: run facts, warnings and the summary."""
        return {
            "workload": self.run.workload,
            "endpoint": self.run.endpoint,
            "settings": self.run.settings,
            "duration_s": self.run.duration_s,
            "gpus": self.gpus,
            "goodput_thresholds": dict(self.goodput),
            "warnings": self.warnings,
            "summary": self.summary,
        }

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        return path

    def write_csv(self, path: str | Path, earlier: Iterable[Result] = ()) -> Path:
        """One row per request: the record's fields and its metrics; with ``earlier`` runs (a
        repeated test's, in order), every run's rows, a column ``run`` (1, 2, ...) first: the
        requests its median figures are of, where the last run's alone were written."""
        import pandas as pd

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        runs = [*earlier, self]
        tables = [result.request_table() for result in runs]
        if len(tables) > 1:
            for number, table in enumerate(tables, 1):
                table.insert(0, "run", number)
        pd.concat(tables, ignore_index=True).to_csv(path, index=False)
        return path
