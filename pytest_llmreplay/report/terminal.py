"""Terminal tables of a :class:`~pytest_llmreplay.metrics.result.Result`, in the layout trie users know.

- **Per-trace metrics**: one row per statistic (mean, min, p50 ... max), one column per metric
  (latency, TTFT, TTFO, TTFAT, decode TPOT, ITL, output and reasoning tokens per turn, output
  tokens per trace, cache hit rates); columns without samples are left out (TTFO and reasoning
  tokens but in a run with reasoning). A trace is a session; a flat request is a one-turn one.
- **Workload metrics**: throughputs (requests/s, prompt, cached and uncached prompt, completion
  tokens/s) over the whole run, the last 30 s, and the steady state (after the first 20%), also
  per GPU.
- **Client** line: schedule lag p50/p99 and effective concurrency, so that an overloaded client
  is seen instead of silently inflating TTFT; on workers (:mod:`~pytest_llmreplay.replayer.workers`) one
  more line per worker with its own figures; then error causes (grouped, most frequent first)
  and warnings.
- **Server** line (when its ``/metrics`` was scraped, :mod:`~pytest_llmreplay.metrics.server`):
  the ``server.*`` figures, its prefix-cache hit rate beside the client's (from
  ``cached_tokens``); a warning among the others when the two are more than 5 points apart.

The session's **summary** (:func:`summary_table`, the plugin's terminal summary) is a row per
measured run in the report overview's columns, each value in its unit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics.result import Result
from .rows import measured_requests

ROWS = ("mean", "min", "p50", "p90", "p95", "p99", "max")
# (summary metric, column header, factor from the summary's unit)
TRACE_COLUMNS = (
    ("latency", "Latency (s)", 1.0),
    ("ttft", "TTFT (s)", 1.0),
    ("ttfo", "TTFO (s)", 1.0),
    ("ttfat", "TTFAT (s)", 1.0),
    ("tpot", "Decode TPOT (ms/tok)", 1e3),
    ("itl", "ITL (ms)", 1e3),
    ("output_tokens", "Output tokens/turn", 1.0),
    ("reasoning_tokens", "Reasoning tokens/turn", 1.0),
    ("output_tokens_per_session", "Output tokens/trace", 1.0),
    ("cache_hit_rate", "Cache hit rate (%)", 100.0),
    ("eligible_cache_hit_rate", "Eligible cache hit rate (%)", 100.0),
)
WORKLOAD_ROWS = (
    ("request_throughput", "requests/s"),
    ("input_throughput", "total prompt tok/s"),
    ("cached_input_throughput", "cached prompt tok/s"),
    ("uncached_input_throughput", "uncached prompt tok/s"),
    ("output_throughput", "completion tok/s"),
)
WORKLOAD_COLUMNS = (
    ("overall", "Overall"),
    ("last_30s", "Last 30s Window"),
    ("steady_state", "Steady State"),
    ("per_gpu", "Steady State / GPU"),
)


def trace_table(result: Result) -> str:
    from tabulate import tabulate

    summary = result.summary
    columns = [(key, header, factor) for key, header, factor in TRACE_COLUMNS if key in summary]
    if not columns:
        return "Per-trace metrics: no request completed"
    rows = [[stat] + [summary[key][stat] * factor for key, _, factor in columns] for stat in ROWS]
    return "Per-trace metrics\n" + tabulate(
        rows, headers=["Metric"] + [h for _, h, _ in columns], floatfmt=".3f", tablefmt="simple"
    )


def workload_table(result: Result) -> str:
    from tabulate import tabulate

    summary = result.summary
    counts = summary["requests"]
    sessions = len({r.session_index for r in result.measured})
    start, end = result.span
    per_second = counts["sessions_complete"] / (end - start) if end > start else 0.0
    title = f"Workload metrics\ncompleted={counts['ok']}/{measured_requests(counts)} requests  traces={counts['sessions_complete']}/{sessions}  trace/s={per_second:.2f}"
    columns = [(key, header) for key, header in WORKLOAD_COLUMNS if key != "per_gpu" or result.gpus > 1]
    rows = [[label] + [summary[key].get(col) for col, _ in columns] for key, label in WORKLOAD_ROWS if key in summary]
    if not rows:
        return title
    return (
        title + "\n" + tabulate(rows, headers=["Metric"] + [h for _, h in columns], floatfmt=".2f", tablefmt="simple")
    )


def client_line(result: Result) -> str:
    summary = result.summary
    parts = []
    lag = summary.get("schedule_lag")
    if lag:
        parts.append(f"schedule lag p50 {lag['p50'] * 1e3:.2f} ms, p99 {lag['p99'] * 1e3:.2f} ms")
    if "effective_concurrency" in summary:
        parts.append(f"effective concurrency {summary['effective_concurrency']['value']:.1f}")
    counts = summary["requests"]
    parts.append(f"failed {counts['failed']}, cancelled {counts['cancelled']}, warm-up {counts['warmup']}")
    lines = ["Client: " + "; ".join(parts)]
    for worker in result.run.workers:
        p50, p99 = worker.schedule_lag_p50, worker.schedule_lag_p99  # both None, or both set (one summary's)
        worker_lag = (
            "no request sent"
            if p50 is None or p99 is None
            else f"schedule lag p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms"
        )
        concurrency = (
            ""
            if worker.effective_concurrency is None
            else f"; effective concurrency {worker.effective_concurrency:.1f}"
        )
        died = f"; DIED: {worker.died}" if worker.died else ""
        lines.append(
            f"  worker {worker.index} ({worker.where}): {worker.records}/{worker.planned_requests} requests; {worker_lag}{concurrency}{died}"
        )
    return "\n".join(lines)


def server_line(result: Result) -> str:
    """The server's own figures in one line (each with its value, :func:`format_figure`), and
    the client's prefix-cache hit rate beside the server's; empty when the server's
    ``/metrics`` was not scraped (the warning on a gap between the two is among the warnings)."""
    from ..metrics.server import figures_text

    figures = result.summary.get("server")
    return "Server (/metrics): " + figures_text(figures, result.client_hit_rate) if figures else ""


def errors_block(result: Result, limit: int = 5) -> str:
    """The ``limit`` most frequent error causes, grouped (:func:`~pytest_llmreplay.metrics.error_causes.error_causes`), each
    with its count; then how many requests the other causes failed."""
    causes = result.error_causes
    if not causes:
        return ""
    lines = [f"  {cause}" for cause in causes[:limit]]
    rest = causes[limit:]
    if rest:
        others = sum(cause.count for cause in rest)
        lines.append(
            f"  {len(rest)} other cause{'' if len(rest) == 1 else 's'}: {others} request{'' if others == 1 else 's'} (each request's error is in the per-request CSV)"
        )
    return "Errors:\n" + "\n".join(lines)


def render(result: Result) -> str:
    """Every table and line, ready to print."""
    blocks: list[Any] = [
        trace_table(result),
        workload_table(result),
        client_line(result),
        server_line(result),
        errors_block(result),
    ]
    blocks += [f"warning: {w}" for w in result.warnings]
    return "\n\n".join(b for b in blocks if b)


def figures_by_run(nodeid: str, figures: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """A test's key figures split by run, in order: ``llmreplay.<key>`` is the test's first
    unnamed run (id ``nodeid``), ``llmreplay.<key> <run>`` its run ``nodeid::<run>`` (see
    :func:`~pytest_llmreplay.plugin.hooks.finish_runs`); a test without figures is one run with
    none (a test not judged: :mod:`~pytest_llmreplay.plugin.not_judged`), a row of dashes."""
    runs: dict[str, dict[str, float]] = {}
    for name, value in figures.items():
        key, _, run = name.partition(" ")
        runs.setdefault(f"{nodeid}::{run}" if run else nodeid, {})[key] = value
    return runs or {nodeid: {}}


def summary_table(tests: Sequence[tuple[str, str, Mapping[str, float]]]) -> str:
    """A row per measured run (:func:`figures_by_run`) of each (test id, outcome, key figures):
    the run's id, the test's outcome, and its key figures (``llmreplay.<metric>.<stat>``, as
    :func:`~pytest_llmreplay.plugin.verdict.key_figures` gives them to JUnit) in the columns of the
    report's overview (:func:`~pytest_llmreplay.report.rows.overview_columns`: ``TTFT p50 128.8 ms``;
    TTFO p50 when some run had reasoning),
    each written by :func:`~pytest_llmreplay.metrics.units.format_value`; plus a ``capacity`` column
    (``10.03 req/s``, ``3.2 sessions/s`` or a concurrency; ``at least 40`` when the search found no failing load, as
    ``llmreplay sweep`` prints it) when some run searched one."""
    from tabulate import tabulate

    from ..metrics.names import CAPACITY_STATS
    from ..metrics.units import format_figure, format_value
    from .rows import overview_columns

    def capacity(figures: Mapping[str, float]) -> str:
        at_least = "at least " if figures.get("llmreplay.capacity.at_least") else ""
        stat = next((s for s in CAPACITY_STATS if f"llmreplay.capacity.{s}" in figures), "concurrency")
        ceiling = " (ceiling)" if figures.get("llmreplay.capacity.ceiling") else ""  # the rate carried: -v says why
        return at_least + format_figure(f"capacity.{stat}", figures.get(f"llmreplay.capacity.{stat}")) + ceiling

    runs = sorted(  # by run id, as the report files (a test's named runs came in the order they ran)
        (
            (run, outcome, figures)
            for test, outcome, test_figures in tests
            for run, figures in figures_by_run(test, test_figures).items()
        ),
        key=lambda row: row[0],
    )
    searched = any(key.startswith("llmreplay.capacity.") for _, _, figures in runs for key in figures)
    columns = overview_columns(any("llmreplay.ttfo.p50" in figures for _, _, figures in runs))
    headers = ["test", "outcome", *(header for header, _, _ in columns)] + (["capacity"] if searched else [])
    rows = [
        [
            run,
            outcome,
            *(format_value(metric, figures.get(f"llmreplay.{metric}.{stat}")) for _, metric, stat in columns),
        ]
        + ([capacity(figures)] if searched else [])
        for run, outcome, figures in runs
    ]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
