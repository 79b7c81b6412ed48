"""The server's own Prometheus ``/metrics``, scraped while a replay runs.

:class:`Scraper` runs in a thread of its own (so that neither the request nor the parse ever
delays the replay's event loop): a ``GET /metrics`` when started, which :meth:`Scraper.start`
waits for (so that counters start before the first request), then every ``interval_s``, then
once more when stopped (so that counters cover the whole run; only the counters are kept from
that one: the gauges of a server the run has left idle are not the run's), each read within
:data:`TIMEOUT_S` in all. A server that answers 404 has no metrics: one note says so and scraping
stops. Failed scrapes are counted and noted once at the end. Without ``prometheus_client`` (the
``metrics`` extra) one note says scraping is off.

Each scrape is parsed with ``prometheus_client.parser.text_string_to_metric_families`` and
mapped to our series names by :data:`SERIES`: per name, the engines' sample names in order of
preference (the first present in a scrape is used, so vLLM 0.9-0.10, which exposes both
``kv_cache_usage_perc`` and the deprecated ``gpu_cache_usage_perc``, is read once); a candidate
that is a tuple of names is their sum, present when all of them are. Samples of one name with
different labels (vLLM's ``engine``, data-parallel ranks) are combined: summed, except usage (a
share), of which the highest is kept. Sources (hand-checked):

- vLLM ``vllm/v1/metrics/loggers.py``: ``num_requests_running``, ``num_requests_waiting``,
  ``kv_cache_usage_perc`` (before 0.9 ``gpu_cache_usage_perc``), counters
  ``num_preemptions``, ``prefix_cache_queries``, ``prefix_cache_hits`` (tokens; before 0.9
  ``gpu_prefix_cache_*``);
- llama.cpp ``tools/server`` (``--metrics``): ``llamacpp:requests_processing``,
  ``requests_deferred``, ``kv_cache_usage_ratio`` (older builds only), and (newer builds,
  ``0c1e57098`` as the engine tests build it) prefix-cache hits as ``prompt_tokens_cached_total``
  over that plus ``prompt_tokens_total`` (which counts only the tokens computed); no preemptions;
- SGLang ``python/sglang/srt/metrics/collector.py``: ``num_running_reqs``, ``num_queue_reqs``,
  ``token_usage``, ``num_retracted_requests_total`` (its preemption), and prefix-cache hits as
  ``cached_tokens_total`` over ``prompt_tokens_total`` (both tokens);
- our simulated server (``llmreplay sim``): vLLM's names, per engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..wording import clipped

TIMEOUT_S = 2.0  # the longest a scrape may take; the next one waits for it
USAGE = "kv_cache_usage"
COUNTERS = ("preemptions", "prefix_cache_queries", "prefix_cache_hits")
SERIES: dict[str, tuple[str | tuple[str, ...], ...]] = {
    "running": ("vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs"),
    USAGE: (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "llamacpp:kv_cache_usage_ratio",
        "sglang:token_usage",
    ),
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
    "prefix_cache_queries": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
        "sglang:prompt_tokens_total",
        ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"),
    ),
    "prefix_cache_hits": (
        "vllm:prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hits_total",
        "sglang:cached_tokens_total",
        "llamacpp:prompt_tokens_cached_total",
    ),
}


class ExpositionError(ValueError):
    """The text is not Prometheus exposition format (the parser's message)."""


def parse_exposition(text: str) -> dict[str, float]:
    """Our series (:data:`SERIES`) in one scrape's text: name -> value, for the names the text
    has. :class:`ExpositionError` when ``prometheus_client`` cannot parse it."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values.setdefault(sample.name, []).append(float(sample.value))
    except Exception as exc:  # the parser's errors are ValueErrors, and worse on some inputs
        raise ExpositionError(clipped(str(exc).splitlines()[0]) if str(exc) else "unreadable") from None
    found = {}
    for name, candidates in SERIES.items():
        for candidate in candidates:
            parts = (candidate,) if isinstance(candidate, str) else candidate
            if all(part in values for part in parts):
                found[name] = max(values[parts[0]]) if name == USAGE else sum(sum(values[part]) for part in parts)
                break
    return found


@dataclass
class Scraped:
    """What a :class:`Scraper` collected: per series, ``[[t, value], ...]`` (``t``: the clock
    reading of the scrape's answer), and notes for the run's warnings."""

    series: dict[str, list[list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def relative_to(self, start: float) -> dict[str, list[list[float]]]:
        """The series with times in seconds from ``start`` (the run's), rounded to the ms."""
        return {name: [[round(t - start, 3), v] for t, v in points] for name, points in self.series.items()}


class Scraper:
    """Scrapes ``url``/metrics every ``interval_s`` in a thread (module docstring): :meth:`start`
    once, :meth:`stop` once, then read :attr:`scraped`. ``headers``: sent with each scrape (the
    API key)."""

    def __init__(self, url: str, interval_s: float, headers: Mapping[str, str] | None = None) -> None:
        self.url = url.rstrip("/") + "/metrics"
        self.interval_s = interval_s
        self.headers = dict(headers or {})
        self.scraped = Scraped()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._first_failure = ""
        self._halted = False
        self._first = threading.Event()

    def start(self) -> None:
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            self.scraped.notes.append(
                "server metrics: not scraped, prometheus_client is not installed (pip install 'pytest-llmreplay[metrics]')"
            )
            return
        self._thread = threading.Thread(target=self._loop, name="llmreplay-metrics", daemon=True)
        self._thread.start()
        self._first.wait()  # the first scrape ends within its timeout, answered or not

    def stop(self) -> Scraped:
        """Scrape once more, end the thread and return :attr:`scraped`."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            if self._failures:
                self.scraped.notes.append(
                    f"server metrics: {self._failures} scrape{'s' if self._failures > 1 else ''} of {self.url} failed (first: {self._first_failure})"
                )
        return self.scraped

    def _loop(self) -> None:
        import httpx

        try:
            # plain http has no TLS: loading the CA certificates would cost ~30 ms of CPU per run
            secure = self.url.startswith("https:")
            with httpx.Client(headers=self.headers, timeout=TIMEOUT_S, verify=secure) as client:
                self._scrape(client)
                self._first.set()
                while not self._halted and not self._stop.wait(self.interval_s):
                    self._scrape(client)
                if not self._halted:
                    self._scrape(client, kept=COUNTERS)  # the counters at the run's end
        finally:
            self._first.set()  # start() never waits on a thread that is gone

    def _scrape(self, client: Any, kept: tuple[str, ...] | None = None) -> None:
        """One scrape into the series: every series it has, or those in ``kept``."""
        try:
            reply, text = self._get(client)
        except Exception as exc:  # a scrape that fails is counted, never raised into the run
            self._failed(f"{type(exc).__name__}: {clipped(str(exc).strip())}")
            return
        now = time.perf_counter()  # the clock of WallClock.now(), the replay's
        if reply.status_code == 404:
            self.scraped.notes.append(
                f"server metrics: {self.url} answered 404; the server has no /metrics, none scraped"
            )
            self._halted = True
            return
        if reply.status_code != 200:
            self._failed(f"HTTP {reply.status_code}")
            return
        try:
            found = parse_exposition(text)
        except ExpositionError as exc:
            self.scraped.notes.append(f"server metrics: {self.url} is not Prometheus text ({exc}); none scraped")
            self._halted = True
            return
        for name, value in found.items():
            if kept is None or name in kept:
                self.scraped.series.setdefault(name, []).append([now, value])

    def _get(self, client: Any) -> tuple[Any, str]:
        """``GET /metrics``: the reply and its text, read within :data:`TIMEOUT_S` in all (the
        client's timeout holds for each read: a server that trickles its page would hold the
        run's start, which waits for the first scrape, and its end forever)."""
        deadline = time.perf_counter() + TIMEOUT_S
        with client.stream("GET", self.url) as reply:
            pieces = []
            for piece in reply.iter_bytes():
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"the page took longer than {TIMEOUT_S:g} s")
                pieces.append(piece)
        return reply, b"".join(pieces).decode(reply.encoding or "utf-8", errors="replace")

    def _failed(self, why: str) -> None:
        self._failures += 1
        self._first_failure = self._first_failure or why
