"""Results stored per commit, and the statistical comparison of two of them.

**Stored result** (one JSON file, also what ``--llm-report`` and ``llmreplay run --out`` write):
``schema``, ``test`` (pytest node id or a name), ``commit``/``dirty``/``branch`` (git, None outside
a repository), ``time`` (UTC ISO 8601), ``fingerprint`` (the endpoint: kind, model, server
version, sim profile, hardware, plus fields from plugins), ``workload`` (path, format, digest of
its content, loader options: :func:`workload_facts`), ``settings`` (the replay's), ``summary`` (as :attr:`Result.summary`), ``slo``
(checks), and ``samples``: the per-request ``ttft``, ``tpot``, ``latency`` (and ``ttfo`` in a run
with reasoning: :mod:`~pytest_llmreplay.metrics.reasoning`; a result stored before it has none,
and compares on the others); the per-session
``ttfat``, ``cache_hit_rate``, ``eligible_cache_hit_rate``; and for throughputs the rates of the
steady span's windows (:meth:`Result.window_rates`), rounded to 6 significant digits, with
``sample_keys`` naming each value's request (session * 2^20 + turn), session or window; and
``interrupted`` (the signal's name, only when one stopped the run: it measured part of its
workload, and is never taken as a baseline, see :meth:`~pytest_llmreplay.gate.store.Store.newest_complete`);
``server_metrics`` (only when the server's ``/metrics`` was scraped): its series, name ->
``[[t, value], ...]`` with ``t`` in seconds from the run's start (a repeated test keeps its
first run's), and ``client_hit_rate``, the client's Σ cached / Σ prompt tokens to set beside
the server's prefix-cache hit rate (:attr:`~pytest_llmreplay.metrics.result.Result.client_hit_rate`);
``regression`` (only when the test sets it): the test's own allowed changes (its marker's or spec
file's ``regression``), which what judges the result later (the dashboard, ``llmreplay compare
--store``) applies as the plugin's gate did; not part of what must match for two results to be
compared.

Where results are kept (a folder, a git ref, an object store) is :mod:`~pytest_llmreplay.gate.store`'s job.

**Comparison** of metric ``m.stat`` (e.g. ``ttft.p50``): change = stat(current) / stat(baseline)
- 1, each side's stat taken over its stored samples (every run's pooled; a throughput's
``steady_state``: the mean of its window rates), which are also the two values a comparison row
shows, so that a reader can check the change from them; with a bootstrap confidence interval
(:mod:`~pytest_llmreplay.gate.bootstrap`: resamples with replacement, seeded, so the same two results
give the same verdict). When both results hold the same
requests, sessions and windows (equal ``sample_keys``: the same workload and settings, every
request ok) the resampling is paired, the same indices drawn from both, so the spread between
requests cancels and the interval measures the change between the runs; otherwise each side is
resampled on its own. Noise that shifts a whole run (a slower runner) is not in either interval;
when either side holds several runs (``--llm-repeat``, :mod:`~pytest_llmreplay.gate.repeats`) the
bootstrap has two levels, runs then requests within them
(:func:`~pytest_llmreplay.gate.bootstrap.hierarchical_bootstrap_change`), which puts whole-run shifts
inside the interval. A **regression** is called only when the change is worse than the metric's
tolerance (higher for times and error rate, lower for cache hit rates and throughputs) *and*
significant: the whole interval is on the worse side of zero, each figure's interval at its level
of Holm's step-down over the test's compared figures
(:func:`~pytest_llmreplay.gate.bootstrap.holm_levels`: 99.3% down to 95% for seven figures), so that
an unchanged test calls a regression in at most 5% of comparisons, not in 5% of each of its
figures. An improvement is the mirror image. A capacity (the
highest load meeting SLOs, :mod:`~pytest_llmreplay.search.capacity`) has no samples: its interval comes
from the two searches' brackets (:func:`_capacity_change`); lower is worse. Results whose
fingerprints, workloads or settings differ are not compared by the gate. When the current run
failed a larger share of its requests than the baseline, its latency rows are not comparable (a
regression with no change: :mod:`~pytest_llmreplay.gate.survivors`), since its latencies are
over the requests that survived.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LLMReplayError
from ..metrics.names import CAPACITY_STATS, capacity_stat
from ..metrics.slo import NOT_MEASURED, refuse_a_table
from .bootstrap import Draws, bootstrap_change, hierarchical_bootstrap_change, holm_levels, statistic, tail_samples
from .repeats import run_count, run_keys, run_samples
from .stability import instability
from .stored_record import SCHEMA, identity, nothing_measured, partial_reason
from .survivors import mark_not_comparable

CONFIDENCE = 0.95  # of a test's comparison as a whole: Holm's step-down spreads 1 - CONFIDENCE over its figures
SAMPLED_REQUEST_METRICS = ("ttft", "tpot", "latency", "ttfo")
SAMPLED_SESSION_METRICS = ("ttfat", "cache_hit_rate", "eligible_cache_hit_rate")
WINDOWED_METRICS = ("output_throughput", "request_throughput")
LOWER_IS_WORSE = (
    "cache_hit_rate",
    "eligible_cache_hit_rate",
    "output_throughput",
    "request_throughput",
    "goodput",
    "decode_tps",
    "capacity",
)
# what the gate compares when a test names nothing, with the change each may make unnoticed
DEFAULT_TOLERANCES = {
    "ttft.p50": 0.05,
    "ttft.p90": 0.10,
    "tpot.p50": 0.05,
    "latency.p50": 0.05,
    "ttfat.p50": 0.05,
    "cache_hit_rate.mean": 0.02,
    "output_throughput.steady_state": 0.05,
}
# gated besides those when the run has reasoning: the time to the first answer token
REASONING_TOLERANCES = {"ttfo.p50": 0.05}
CAPACITY_TOLERANCE = 0.05  # the change of a capacity a comparison allows when the regression names none
CEILING_NOTE = (  # a capacity comparison's noise where a side is a ceiling: what the user can do about it
    "a ceiling: the workload is too short for the rates searched, so the capacity is the rate carried and its "
    "bracket reaches the rate that failed; the bracket cannot tell this change, a longer workload (more requests) "
    "measures the rate sustained"
)
BOTH_LOWER_BOUNDS = (
    "both are lower bounds: no load failed in either search; raise capacity.max (sweep --max) or budget until one does"
)


# ------------------------------------------------------------------------ recording


def _compact(values: Iterable[float | None]) -> list[float]:
    return [float(f"{v:.6g}") for v in values if v is not None and not math.isnan(v)]


KEY_TURNS = 1 << 20  # a request's key: session index * KEY_TURNS + turn index


def _keyed_samples(result: Any) -> dict[str, tuple[list[int], list[float]]]:
    """metric -> (keys, values) in workload order: requests by (session, turn), sessions by
    index, windows in time order; a key names the same request, session or window in any run of
    the same workload and settings, which is what lets a comparison pair them."""
    from ..metrics.result import request_values

    requests = sorted(result.ok, key=lambda r: (r.session_index, r.turn_index))
    request_rows = [(r.session_index * KEY_TURNS + r.turn_index, request_values(r, result.reasoning)) for r in requests]
    session_rows = sorted(((row["session_index"], row) for row in result.session_rows), key=lambda pair: pair[0])
    found = {}
    for names, rows in ((SAMPLED_REQUEST_METRICS, request_rows), (SAMPLED_SESSION_METRICS, session_rows)):
        for name in names:
            kept = [(key, row[name]) for key, row in rows if row.get(name) is not None and not math.isnan(row[name])]
            found[name] = ([key for key, _ in kept], _compact(value for _, value in kept))
    for name in WINDOWED_METRICS:
        rates = _compact(result.window_rates(name))
        found[name] = (list(range(len(rates))), rates)
    return {name: pair for name, pair in found.items() if pair[1]}


def _split(keyed: Mapping[str, tuple[list[int], list[float]]]) -> dict[str, dict[str, list]]:
    """``samples`` (metric -> values) and ``sample_keys`` (metric -> keys), as stored."""
    return {
        "samples": {name: values for name, (_, values) in keyed.items()},
        "sample_keys": {name: keys for name, (keys, _) in keyed.items()},
    }


def samples(result: Any) -> dict[str, list[float]]:
    """The per-request, per-session and per-window samples a comparison needs (see module doc)."""
    return _split(_keyed_samples(result))["samples"]


def sample_keys(result: Any) -> dict[str, list[int]]:
    """The key of each of :func:`samples`' values (see :func:`_keyed_samples`)."""
    return _split(_keyed_samples(result))["sample_keys"]


def workload_digest(path: str | Path) -> str:
    """sha256 (first 16 hex digits) of a workload file's bytes, or of a directory's files in order."""
    import hashlib

    digest = hashlib.sha256()
    path = Path(path)
    for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if file.is_file():
            digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def workload_facts(path: str, format: str | None, digest: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a stored result says of its workload, for :func:`mismatch`: the file, the format it was
    named (None: detected), its bytes' :func:`workload_digest`, and the options its loader was given
    (``format_options``: a Mooncake ``block_size`` changes how many tokens a hash id stands for, so
    the prefix sharing), these only when there are any: results stored before they were recorded
    hold none, as a workload loaded without options does, and still compare."""
    facts: dict[str, Any] = {"path": path, "format": format, "digest": digest}
    if options:
        facts["format_options"] = dict(sorted(options.items()))
    return facts


def make_record(
    result: Any,
    *,
    test: str,
    fingerprint: Mapping[str, Any],
    workload: Mapping[str, Any],
    git: Mapping[str, Any],
    slo_checks: Iterable[Any] = (),
) -> dict[str, Any]:
    """The stored form of ``result`` (see the module docstring)."""
    return {
        "schema": SCHEMA,
        "test": test,
        **{key: git.get(key) for key in ("commit", "dirty", "branch")},
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "fingerprint": dict(fingerprint),
        "workload": dict(workload),
        "settings": result.run.settings,
        "duration_s": result.run.duration_s,
        "gpus": result.gpus,
        "warnings": list(result.warnings),
        "summary": result.summary,
        "slo": slo_rows(slo_checks),
        **_split(_keyed_samples(result)),
        **({"interrupted": result.run.interrupted} if result.run.interrupted else {}),
        **server_part(result),
    }


def server_part(result: Any) -> dict[str, Any]:
    """What a record keeps of the server's ``/metrics`` (module docstring): nothing when none
    was scraped."""
    if not result.run.server_metrics:
        return {}
    client = result.client_hit_rate
    return {"server_metrics": result.run.server_metrics, **({"client_hit_rate": client} if client is not None else {})}


def interrupted_note(record: Mapping[str, Any]) -> str:
    """`` (marked interrupted: never used as a comparison baseline)`` for an interrupted record
    (``incomplete`` for a capacity search its server's failure cut short; ``no request
    succeeded`` for one that measured nothing), to follow where it was written; empty otherwise."""
    reason = partial_reason(record)
    if not reason:
        return ""
    if reason != nothing_measured(record):  # stopped part-way: by a signal, or its server's failure
        reason = f"marked {'interrupted' if record.get('interrupted') else 'incomplete'}"
    return f" ({reason}: never used as a comparison baseline)"


def slo_rows(checks: Iterable[Any]) -> list[dict[str, Any]]:
    """SLO checks as stored: key, threshold, measured, passed."""
    return [{"key": c.slo.key, "threshold": c.slo.text, "measured": c.measured, "passed": c.passed} for c in checks]


# ------------------------------------------------------------------------ comparison


def parse_tolerance(key: str, value: Any) -> float | None:
    """``"10%"`` or ``0.1`` -> 0.1; ``"off"``/None -> None (not compared). A bare number over 1
    is refused (``10`` would be 1,000%: write ``"10%"``)."""
    if value is None or value == "off":
        return None
    if isinstance(value, bool):  # YAML 1.1 reads a bare off, no, on, yes as false or true
        raise LLMReplayError(
            f"regression {key!r}: expected an allowed change such as '10%', 0.1 or 'off', got {value!r}: "
            "YAML reads a bare off (or no, on, yes) as a boolean; quote it: 'off'"
        )
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*", str(value)) if isinstance(value, str) else None
        if not match:
            raise LLMReplayError(
                f"regression {key!r}: expected an allowed change such as '10%', 0.1 or 'off', got {value!r}"
            )
        if match.group(2):
            return float(Decimal(match.group(1)) / 100)
        number = float(match.group(1))
    if not 0 <= number <= 1 or math.isnan(number):
        raise LLMReplayError(
            f"regression {key!r}: expected an allowed change such as '10%', 0.1 or 'off' (a fraction from 0 to 1), got {value!r}"
        )
    return number


def tolerances(
    overrides: Mapping[str, Any] | None, defaults: Mapping[str, float] = DEFAULT_TOLERANCES
) -> dict[str, float]:
    """``defaults`` with ``overrides`` (key -> '10%' | 0.1 | 'off') applied; each key must name
    a compared metric (one with samples, or ``capacity``) and a statistic."""
    merged = dict(defaults)
    if overrides is None:
        return merged
    if not isinstance(overrides, Mapping):
        raise LLMReplayError(
            f"regression: expected a mapping of metric keys to allowed changes, got {type(overrides).__name__}"
        )
    for key, value in overrides.items():
        refuse_a_table("regression", key, value)
        metric, _, stat = str(key).partition(".")
        if metric == "capacity" and stat not in CAPACITY_STATS:
            raise LLMReplayError(f"regression {key!r}: compare capacity by {', '.join(CAPACITY_STATS)}")
        if metric != "capacity" and metric not in SAMPLED_REQUEST_METRICS + SAMPLED_SESSION_METRICS + WINDOWED_METRICS:
            raise LLMReplayError(
                f"regression {key!r}: only {', '.join(SAMPLED_REQUEST_METRICS + SAMPLED_SESSION_METRICS + WINDOWED_METRICS)} are compared"
            )
        allowed = ("steady_state",) if metric in WINDOWED_METRICS else ("mean", "p50", "p90", "p95", "p99")
        if metric != "capacity" and stat not in allowed:
            raise LLMReplayError(f"regression {key!r}: compare {metric} by one of {', '.join(allowed)}")
        tolerance = parse_tolerance(str(key), value)
        if tolerance is None:
            merged.pop(str(key), None)
        else:
            merged[str(key)] = tolerance
    return merged


def gated_tolerances(
    record: Mapping[str, Any], overrides: Mapping[str, Any] | None = None, baseline: Mapping[str, Any] | None = None
) -> dict[str, float]:
    """What comparing ``record`` with its baseline gates, each figure with its allowed change: a
    stored capacity search's capacity alone (``capacity.rate``, ``capacity.session_rate`` or ``capacity.concurrency``,
    :data:`CAPACITY_TOLERANCE`; its point's latencies are measured at a different load on each
    side), else :data:`DEFAULT_TOLERANCES`, and :data:`REASONING_TOLERANCES` when ``record`` or
    ``baseline`` has reasoning (its summary holds ``ttfo``: a run that stopped reasoning is judged
    on the figure it lost); ``overrides`` (a test's ``regression``, ``llmreplay compare
    --regression``) applied as :func:`tolerances` applies them."""
    search = record.get("capacity") or {}
    by = search.get("plan", {}).get("by")
    if by:
        stat = capacity_stat(by, search.get("rate_unit", "req/s"))
        return tolerances(overrides, {f"capacity.{stat}": CAPACITY_TOLERANCE})
    reasoned = any("ttfo" in (side.get("summary") or {}) for side in (record, baseline or {}))
    reasoning = REASONING_TOLERANCES if reasoned else {}
    return tolerances(overrides, {**DEFAULT_TOLERANCES, **reasoning})


@dataclass
class Row:
    """One metric's comparison; ``verdict``: regression, improved, ok (within tolerance), noise
    (beyond tolerance either way, but the interval crosses zero), unstable (the comparison's
    runs disagree more than the bootstrap can model: :attr:`Comparison.unstable`) or skipped
    (``note`` says why); a regression with no ``change`` has a ``note`` saying why (not measured
    in this run, or not comparable: :mod:`~pytest_llmreplay.gate.survivors`)."""

    key: str
    baseline: float | None
    current: float | None
    change: float | None = None
    low: float | None = None
    high: float | None = None
    tolerance: float | None = None
    verdict: str = "skipped"
    note: str = ""
    paired: bool = False
    confidence: float | None = None  # of the interval: its Holm step-down level (bootstrap.holm_levels)
    p_value: float | None = None  # the bootstrap's two-sided p-value of no change (bootstrap.Draws.p_value)


@dataclass
class Comparison:
    """The rows of a comparison, or why none was made (``mismatch``); ``unstable``: why its
    runs disagree too much for any verdict (:mod:`~pytest_llmreplay.gate.stability`), when they do."""

    baseline_label: str
    rows: list[Row] = field(default_factory=list)
    mismatch: str | None = None
    header: str | None = None
    baseline_samples: dict[str, list[float]] = field(default_factory=dict)
    unstable: str | None = None

    @property
    def regressions(self) -> list[Row]:
        return [row for row in self.rows if row.verdict == "regression"]


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """``key: a-value vs b-value`` for each key whose values differ."""
    return [f"{key}: {a.get(key)!r} vs {b.get(key)!r}" for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


# said over a comparison of one run against one run of a server: what its interval leaves out
ONE_RUN_NOTE = (
    "one run a side: the interval holds the spread of requests within a run, not a shift of a whole run "
    "(a slower runner, another server start); repeat the runs to put it in (pytest --llm-repeat N, llmreplay run --repeat N)"
)


def one_side_note(side: str) -> str:
    """:data:`ONE_RUN_NOTE` for a comparison of one run on ``side`` against several: the other
    side's runs put their shifts in the interval, this side's one run puts none."""
    return (
        f"one run in the {side}: the interval holds the other side's shifts of a whole run, not this one's "
        "(a slower runner, another server start); repeat its runs too (pytest --llm-repeat N, llmreplay run --repeat N)"
    )


KEYED_HINT = (
    "the offline simulator sends keyed prompts unless told otherwise: replay it with prompt_format text "
    "(llmreplay run --prompt-format text; a test's prompt_format: text) to compare it with a server's run"
)


def mismatch(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """Why two stored results must not be gated against each other, or None: their
    :func:`~pytest_llmreplay.gate.stored_record.identity` differs; where the prompt formats
    differ because one side is the offline simulator's ``keyed``, the option that fixes it."""
    for part, what in (
        ("fingerprint", "endpoint fingerprint differs"),
        ("workload", "workload differs"),
        ("settings", "replay settings differ"),
    ):
        found = differences(identity(baseline, part), identity(current, part))
        if found:
            formats = {(baseline.get(part) or {}).get("prompt_format"), (current.get(part) or {}).get("prompt_format")}
            hint = f"; {KEYED_HINT}" if part == "settings" and "keyed" in formats and len(formats) == 2 else ""
            return f"{what} ({'; '.join(found[:3])}){hint}"
    return None


def compare(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    tolerance: Mapping[str, float] | None = None,
    *,
    label: str = "baseline",
    across_endpoints: bool = False,
    seed: int = 0,
) -> Comparison:
    """Compare two stored results metric by metric (see the module docstring).

    ``across_endpoints``: compare even when the fingerprints differ (``llmreplay compare``: vLLM
    against SGLang on one workload); the comparison's ``header`` says so. A different workload or
    different settings are never compared."""
    tolerance = DEFAULT_TOLERANCES if tolerance is None else tolerance
    empty = nothing_measured(baseline)
    if empty:  # every row would be skipped (no samples): "0 regressions" of a run that measured nothing
        return Comparison(label, mismatch=f"not compared: the baseline measured nothing ({empty})")
    found = mismatch(baseline, current)
    header = None
    if found and across_endpoints and found.startswith("endpoint fingerprint"):
        header = f"different endpoints: {found.removeprefix('endpoint fingerprint differs ')}"
        found = mismatch({**baseline, "fingerprint": {}}, {**current, "fingerprint": {}})
    if found:
        return Comparison(label, mismatch=f"not compared: {found}")
    counts = run_count(baseline), run_count(current)
    if max(counts) > 1:
        pooled = f"baseline and current: each statistic of all {counts[0] if counts[0] == counts[1] else 'the'} runs' samples pooled, the figures the change compares (the SLO table's are medians over runs)"
        header = f"{header}\n{pooled}" if header else pooled
    if min(counts) == 1 and "offline" not in (baseline["fingerprint"].get("kind"), current["fingerprint"].get("kind")):
        note = ONE_RUN_NOTE if max(counts) == 1 else one_side_note("baseline" if counts[0] == 1 else "current")
        header = f"{header}\n{note}" if header else note
    versions = [(record.get("fingerprint") or {}).get("server_version") for record in (baseline, current)]
    if versions[0] != versions[1]:  # compared: what a commit does to the engine is what the gate measures
        changed = f"server version {versions[0]} -> {versions[1]}"
        header = f"{header}\n{changed}" if header else changed
    comparison = Comparison(label, header=header, baseline_samples=dict(baseline["samples"]))
    tested: list[tuple[Row, str, Draws]] = []
    for key, allowed in tolerance.items():
        metric, _, stat = key.partition(".")
        base = np.asarray(baseline["samples"].get(metric, []), dtype=float)
        cur = np.asarray(current["samples"].get(metric, []), dtype=float)
        row = Row(
            key,
            baseline["summary"].get(metric, {}).get(stat),
            current["summary"].get(metric, {}).get(stat),
            tolerance=allowed,
        )
        comparison.rows.append(row)
        if metric == "capacity":
            _capacity_change(row, _bracket(baseline), _bracket(current))
            continue
        if len(cur) < min(len(base), 2):  # measured before, not now: the gate cannot pass what it cannot see
            row.verdict, row.note = "regression", _vanished(metric, len(cur), len(base))
            continue
        if len(base) < 2 or len(cur) < 2:
            row.note = "too few samples" if len(base) or len(cur) else "not measured"
            continue
        if min(len(base), len(cur)) < tail_samples(stat):
            row.note = f"too few samples for a {stat}: {min(len(base), len(cur))} of the {tail_samples(stat)} it needs"
            continue
        for side, values in (("baseline", base), ("current", cur)):
            if not np.isfinite(values).all():  # a NaN change fails every test and read "ok"
                raise LLMReplayError(
                    f"{key}: the {side}'s {metric} samples hold NaN or infinity; expected finite numbers"
                )
        row.baseline, row.current = (
            float(statistic(stat, base)),
            float(statistic(stat, cur)),
        )  # what the change compares
        if row.baseline == 0:
            row.note = "baseline is 0"
            continue
        if run_count(baseline) > 1 or run_count(current) > 1:
            missing: list[list[int] | None] = [None]  # a side without keys, which pairs with nothing
            keys = [*(run_keys(baseline, metric) or missing), *(run_keys(current, metric) or missing)]
            paired = keys[0] is not None and all(k == keys[0] for k in keys)
            draws = hierarchical_bootstrap_change(
                run_samples(baseline, metric), run_samples(current, metric), stat, seed, paired
            )
        else:
            sample_keys = (baseline.get("sample_keys") or {}).get(metric)
            paired = sample_keys is not None and sample_keys == (current.get("sample_keys") or {}).get(metric)
            draws = bootstrap_change(base, cur, stat, seed, paired)
        row.change, row.paired = draws.point, paired
        tested.append((row, metric, draws))
    for (row, metric, draws), (confidence, significant) in zip(
        tested, holm_levels([draws for _, _, draws in tested], 1 - CONFIDENCE), strict=True
    ):
        row.low, row.high = draws.interval(confidence)
        row.confidence, row.p_value = confidence, draws.p_value()
        _verdict(row, metric, significant)
    comparison.unstable = instability(baseline, "baseline") or instability(current, "current")
    if comparison.unstable:  # no verdict drawn from such runs holds: neither a regression nor a pass
        for row, _, _ in tested:
            row.verdict = "unstable"
    mark_not_comparable(comparison.rows, baseline, current)  # a run that lost requests: latencies over survivors
    return comparison


def _vanished(metric: str, count: int, baseline_count: int) -> str:
    """The note of a gated figure the baseline measured (on ``baseline_count`` samples, one
    enough) and the current run did not (``count`` 0), or measured once where the baseline had
    more, too few to compare (the same workload and settings: all but one of its requests or
    sessions failed): a regression, since what changed it (a model that stopped reasoning, or a
    server whose reasoning now streams as content; a server that no longer reports cached
    tokens; requests that all failed, or all but one; a capacity search that found none) is no
    pass; ``regression: {key: off}`` is the way to stop gating it."""
    if count:
        return f"measured on {count} sample in this run, too few to compare; the baseline's on {baseline_count}"
    why = {"ttfo": "this run has no reasoning", "capacity": "this run's search found none"}.get(
        metric, "no request of this run measured it"
    )
    return f"{NOT_MEASURED} ({why}); the baseline's was"


def _verdict(row: Row, metric: str, significant: bool = True) -> None:
    """Regression, improved, noise or ok from the row's change, interval and tolerance; a change
    beyond the tolerance that is not ``significant`` (Holm's step-down) is noise."""
    point, low, high, tolerance = row.change, row.low, row.high, row.tolerance
    assert point is not None and low is not None and high is not None  # set before a verdict is drawn
    assert tolerance is not None  # a row compared has its allowed change (compare's tolerance mapping)
    worse = -1.0 if metric in LOWER_IS_WORSE else 1.0
    change, near, far = (
        worse * point,
        min(worse * low, worse * high),
        max(worse * low, worse * high),
    )
    if change > tolerance:
        row.verdict = "regression" if near > 0 and significant else "noise"
    elif change < -tolerance:
        row.verdict = "improved" if far < 0 and significant else "noise"
    else:
        row.verdict = "ok"


def _bracket(record: Mapping[str, Any]) -> dict[str, float]:
    """A record's capacity bracket {low, high}; ``high`` is infinite when its search found no
    failing load above the capacity (``record["capacity"]["at_least"]``). A ceiling whose search
    found no failing load either (its stored ``high`` the capacity repeated) reaches the load its
    point was offered and did not carry (``offered.low``, where stored): compared as
    exact numbers, 17% of unchanged pairs of such ceilings read a regression at 4% noise in the
    rate carried (a statistics review)."""
    figures = dict(record["summary"].get("capacity", {}))
    search = record.get("capacity", {})
    if figures and search.get("at_least"):
        figures["high"] = math.inf
    if figures and search.get("ceiling"):
        figures["ceiling"] = True  # the rate carried, the workload too short for the rates searched
        if not search.get("upper_bound_found", True):
            figures["high"] = max(figures["high"], (search.get("offered") or {}).get("low") or figures["high"])
    return figures


def _capacity_change(row: Row, baseline: Mapping[str, float], current: Mapping[str, float]) -> None:
    """A capacity's change, with the search's own uncertainty: each side is known only to lie
    in its bracket [low, high] (high infinite when no load failed), so the interval of
    current / baseline - 1 runs from low_current / high_baseline - 1 to
    high_current / low_baseline - 1; a regression needs the whole of it below zero (the
    brackets do not overlap) and the change beyond the tolerance. An interval open above is
    stored with ``high`` None. When both brackets are open (two lower bounds: no load failed in
    either search) nothing is known of the change, and the row is skipped with :data:`BOTH_LOWER_BOUNDS`,
    not an ``ok`` (nor a regression) drawn from two "at least"s. A ``noise`` where a side is a
    ceiling (its search's capacity is the rate it carried, the workload too short for the rates
    searched: its bracket reaches the rate that failed) says so (:data:`CEILING_NOTE`): such a
    comparison misses a drop of 20% and more. Each side's capacity is its bracket's ``low``, whatever name the
    figure is stored under: a multi-turn search's ``capacity.session_rate`` was ``capacity.rate``
    in results stored before it had its own key, and both sides of one comparison ran the same
    search on the same workload (their settings are equal). A capacity the baseline found and
    the current run did not is a regression (:func:`_vanished`), never a skipped row."""
    row.baseline, row.current = baseline.get("low"), current.get("low")
    if row.baseline is not None and row.current is None:
        row.verdict, row.note = "regression", _vanished("capacity", 0, 1)
        return
    if row.baseline is None or row.current is None:
        row.note = "not measured"
        return
    if not baseline.get("low"):
        row.note = "baseline is 0"
        return
    if math.isinf(baseline["high"]) and math.isinf(current["high"]):
        row.note = BOTH_LOWER_BOUNDS
        return
    row.change = row.current / row.baseline - 1
    row.low = current["low"] / baseline["high"] - 1
    row.high = current["high"] / baseline["low"] - 1
    _verdict(row, "capacity")
    if row.verdict == "noise" and (baseline.get("ceiling") or current.get("ceiling")):
        row.note = CEILING_NOTE
    if math.isinf(row.high):
        row.high = None
