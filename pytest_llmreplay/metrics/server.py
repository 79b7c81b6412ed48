"""The server's own series (scraped from its ``/metrics`` during the run) -> the ``server`` figures.

The series are :attr:`~pytest_llmreplay.replayer.records.ReplayRun.server_metrics`: name ->
``[[t, value], ...]``, ``t`` in seconds from the run's start; the first scrape comes before
the first request (``t`` < 0), the last one after the run (its counters only: the gauges of a
server the run has left idle are not the run's). Gauges are read from the scrapes at ``t >= 0``
(the run's), counters from all of them (the first is the count before the run):

- ``server.preemptions`` = the increase of the preemption counter over the run;
- ``server.kv_cache_usage.max`` / ``.mean``: of the KV-cache usage gauge (a share, 0..1);
- ``server.running.max``, ``server.waiting.max``: of the running / waiting request gauges;
- ``server.prefix_cache_hit_rate`` = increase(hit tokens) / increase(queried tokens), when
  tokens were queried.

The increase of a counter is Prometheus's: the sum of its steps, a step that goes down (the
server restarted, its counter from 0) counting as its new value. A figure whose series the
server does not report is absent (an SLO on it is not measured, a breach), never 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

SERVER_STATS = (
    "preemptions",
    "kv_cache_usage.max",
    "kv_cache_usage.mean",
    "running.max",
    "waiting.max",
    "prefix_cache_hit_rate",
)
SHARE_STATS = ("kv_cache_usage.max", "kv_cache_usage.mean", "prefix_cache_hit_rate")
HIT_RATE_GAP = 0.05  # the server's and the client's prefix-cache hit rates may differ this much unremarked


def increase(points: Sequence[Sequence[float]]) -> float:
    """A counter's increase over ``points`` (``[t, value]`` in time order; module docstring)."""
    total = 0.0
    for (_, before), (_, after) in zip(points, points[1:], strict=False):
        total += after - before if after >= before else after
    return total


def server_figures(series: Mapping[str, Sequence[Sequence[float]]]) -> dict[str, float]:
    """The ``server`` figures (:data:`SERVER_STATS`) of the scraped ``series`` that report them;
    the counts (preemptions, requests running or waiting) as integers, as Prometheus's text
    gives every sample as a float: a repeated test's median of counts is then one run's count
    (:func:`~pytest_llmreplay.metrics.runs.median_summary`), never 1.5 requests running."""
    figures: dict[str, float] = {}
    if len(series.get("preemptions", ())) > 1:
        figures["preemptions"] = round(increase(series["preemptions"]))
    for name, stats in (("kv_cache_usage", ("max", "mean")), ("running", ("max",)), ("waiting", ("max",))):
        during = [value for t, value in series.get(name, ()) if t >= 0]
        if during:
            for stat in stats:
                value = max(during) if stat == "max" else sum(during) / len(during)
                figures[f"{name}.{stat}"] = value if name == "kv_cache_usage" else round(value)
    queries, hits = series.get("prefix_cache_queries", ()), series.get("prefix_cache_hits", ())
    if len(queries) > 1 and len(hits) > 1 and increase(queries) > 0:
        figures["prefix_cache_hit_rate"] = increase(hits) / increase(queries)
    return figures


def figures_text(figures: Mapping[str, float], client_hit_rate: float | None = None) -> str:
    """``preemptions 0; kv_cache_usage.max 81.25%; ...``: each figure in its unit, then the
    client's prefix-cache hit rate (Σ cached / Σ prompt from the responses) beside the server's
    when both are known."""
    from .units import format_figure

    parts = [f"{stat} {format_figure(f'server.{stat}', value)}" for stat, value in figures.items()]
    if "prefix_cache_hit_rate" in figures and client_hit_rate is not None:
        parts.append(
            f"client prefix-cache hit rate (cached_tokens) {format_figure('cache_hit_rate.mean', client_hit_rate)}"
        )
    return "; ".join(parts)


def hit_rate_gap(server: float, client: float) -> str | None:
    """A line when the server's prefix-cache hit rate and the client's (Σcached/Σprompt from the
    responses' ``cached_tokens``) differ by more than :data:`HIT_RATE_GAP`; None otherwise."""
    if abs(server - client) <= HIT_RATE_GAP:
        return None
    return (
        f"prefix-cache hit rate: the server's /metrics says {server * 100:.1f}%, its responses' cached_tokens "
        f"{client * 100:.1f}% ({abs(server - client) * 100:.1f} points apart, more than {HIT_RATE_GAP * 100:g}): "
        "one of the two counts is wrong"
    )
