"""The load curve of a capacity search, drawn from its stored block (``record["capacity"]``:
``plan``, ``low``, ``offered``, ``points``; :meth:`~pytest_llmreplay.search.outcome.Capacity.as_dict`).

One figure, two plots side by side (:func:`~pytest_llmreplay.report.plots.new_figure`, the
report's house style), x = the offered load of each point (req/s, or sessions in flight):

- **Latency vs load**: TTFT p50, TTFT p99 and TPOT p50 of each point, plus the measured
  statistic of each SLO of ``plan.slo`` on a time metric that is not one of those (``ttft.p90``),
  and each such SLO's threshold as a horizontal line; SLOs on shares (``error_rate``,
  ``goodput``) have no line on a time axis and are left out;
- **Throughput vs load**: the request throughput each point achieved and its goodput (requests
  per second meeting every per-request SLO).

On both, the capacity is a vertical line at the load its point was offered (by concurrency the
highest load that passed; by rate the capacity is the rate that point carried, which may lie
below the rate it was offered, and the label says so: :mod:`~pytest_llmreplay.search.capacity`),
the bracket of loads offered (``offered``: passed, failed) shaded, and every failed point (a
breached SLO, or stopped early) crossed out. Written inline in
the HTML report (:func:`~pytest_llmreplay.report.html.load_curve_section`) and as
``load_curve.svg`` by ``llmreplay sweep --out``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import LLMReplayError
from ..metrics.names import GOODPUT_METRICS
from ..metrics.units import format_value, in_unit

# (point figure, series label, metric): what the latency plot draws of every point
LATENCY_SERIES = (("ttft_p50", "TTFT p50", "ttft"), ("ttft_p99", "TTFT p99", "ttft"), ("tpot_p50", "TPOT p50", "tpot"))
THROUGHPUT_SERIES = (("request_throughput", "throughput"), ("goodput_rate", "goodput"))
TIME_SLO_METRICS = GOODPUT_METRICS  # the per-request times a capacity SLO may bound (search/capacity.py)
SERIES_COLOURS = ("#1f5fa8", "#e07b00", "#2a9d8f", "#7b4fa0", "#8c564b")
FAILED, CAPACITY = "#c62828", "#2e7d32"
SLO_STYLES = ("-", (0, (5, 3)), (0, (1, 2)), (0, (6, 2, 1, 2)))


def load_label(by: str, rate_unit: str = "req/s") -> tuple[str, str]:
    """(metric whose unit the load axis takes, axis title) for a search ``by`` rate or
    concurrency; a rate of multi-turn sessions (``rate_unit`` sessions/s) in sessions/s."""
    if by != "rate":
        return "concurrency", "concurrency, sessions in flight"
    return ("session_throughput" if rate_unit == "sessions/s" else "request_throughput"), "offered load"


def time_slos(plan: Mapping[str, Any]) -> list[Any]:
    """The plan's SLOs on a time metric (those a latency axis can draw); unreadable ones skipped."""
    from ..metrics.slo import parse_slo

    found = []
    for key, text in (plan.get("slo") or {}).items():
        try:
            slo = parse_slo(key, text)
        except LLMReplayError:
            continue
        if slo.metric in TIME_SLO_METRICS:
            found.append(slo)
    return found


def load_curve_svg(plot_id: str, capacity: Mapping[str, Any]) -> str | None:
    """The load curve (module docstring) as an inline ``<svg>``; None when no point is stored."""
    from .plots import new_figure, svg_of, value_axis

    points = sorted(
        (p for p in capacity.get("points") or () if isinstance(p.get("load"), (int, float))), key=lambda p: p["load"]
    )
    if not points:
        return None
    plan = capacity.get("plan") or {}
    by = plan.get("by", "rate")
    load_metric, load_title = load_label(by, capacity.get("rate_unit", "req/s"))
    # the capacity (the bracket's bottom) is drawn at the load its point was offered, the bracket in
    # loads offered, as the x axis counts them (results stored before "offered" have the capacity's own)
    offered = capacity.get("offered") or {"low": capacity.get("low"), "high": capacity.get("high")}
    value, at, top = capacity.get("low"), offered.get("low"), offered.get("high")
    figure, (latency_axes, throughput_axes) = new_figure("Latency vs load", "Throughput vs load")
    loads = [p["load"] for p in points]
    slos = time_slos(plan)
    drawn = {f"{metric}.{figure_key.split('_')[1]}" for figure_key, _, metric in LATENCY_SERIES}
    latency = [(label, [p.get(key) for p in points]) for key, label, _ in LATENCY_SERIES]
    latency += [(slo.key, [(p.get("slo") or {}).get(slo.key) for p in points]) for slo in slos if slo.key not in drawn]
    throughput = [(label, [p.get(key) for p in points]) for key, label in THROUGHPUT_SERIES]
    failed = [not p.get("passed") for p in points]
    for axes, series, metric, title in (
        (latency_axes, latency, "ttft", "latency"),
        (throughput_axes, throughput, "request_throughput", "throughput"),
    ):
        x_unit = value_axis(axes, "x", load_metric, load_title, loads)
        values = [v for _, column in series for v in column if v is not None]
        thresholds = [slo.value for slo in slos] if axes is latency_axes else []
        unit = value_axis(axes, "y", metric, title, values + thresholds)
        _draw_series(axes, f"{plot_id}-{title}", [in_unit(x, x_unit) for x in loads], series, unit, failed)
        if axes is latency_axes:
            for index, slo in enumerate(slos):
                axes.axhline(
                    in_unit(slo.value, unit),
                    color=FAILED,
                    linewidth=1.2,
                    linestyle=SLO_STYLES[index % len(SLO_STYLES)],
                    label=f"SLO {slo.key} {slo.text}",
                    gid=f"{plot_id}-slo-{index}",
                )
        _mark_capacity(
            axes, f"{plot_id}-{title}", (value, at, top), x_unit, load_metric, bool(capacity.get("at_least"))
        )
        _legend(axes)
    return svg_of(figure, plot_id, f"Load curve of the capacity search by {by}: latency and throughput vs offered load")


def _draw_series(
    axes: Any,
    plot_id: str,
    x: Sequence[float],
    series: Sequence[tuple[str, Sequence[float | None]]],
    unit: str | None,
    failed: Sequence[bool],
) -> None:
    """A line with dots per series (gaps where a point lacks the figure), failed points crossed."""
    crossed = False
    for index, (label, column) in enumerate(series):
        shown = [float("nan") if v is None else in_unit(v, unit) for v in column]
        axes.plot(
            x,
            shown,
            marker="o",
            markersize=3.5,
            linewidth=1.5,
            color=SERIES_COLOURS[index % len(SERIES_COLOURS)],
            label=label,
            gid=f"{plot_id}-{label.replace(' ', '-').replace('.', '-')}",
        )
        bad = [(px, py) for px, py, f in zip(x, shown, failed, strict=True) if f and py == py]
        if bad:
            axes.plot(
                [px for px, _ in bad],
                [py for _, py in bad],
                linestyle="none",
                marker="x",
                markersize=7,
                markeredgewidth=1.8,
                color=FAILED,
                label=None if crossed else "failed point",
                gid=f"{plot_id}-failed-{index}",
            )
            crossed = True


def _mark_capacity(
    axes: Any,
    plot_id: str,
    capacity: tuple[float | None, float | None, float | None],
    x_unit: str | None,
    load_metric: str,
    at_least: bool,
) -> None:
    """``capacity`` = (its value, the load offered at its point, the lowest load offered that
    failed): a vertical line at that load, labelled with the value ("at least" when no load
    failed: a lower bound, as the report's line above the plot says; "carried at" the load when
    the value is below it), and the bracket of loads offered shaded (none when capacity is 0)."""
    value, low, high = capacity
    if not value or not low:
        axes.text(
            0.02,
            0.97,
            "capacity 0: no load met the SLOs",
            transform=axes.transAxes,
            fontsize=8,
            color=FAILED,
            va="top",
            gid=f"{plot_id}-capacity",
        )
        return
    if high is not None and high > low:
        axes.axvspan(
            in_unit(low, x_unit),
            in_unit(high, x_unit),
            color=CAPACITY,
            alpha=0.12,
            linewidth=0,
            label="bracket",
            gid=f"{plot_id}-bracket",
        )
    axes.axvline(
        in_unit(low, x_unit),
        color=CAPACITY,
        linewidth=1.6,
        label=f"capacity {'at least ' if at_least else ''}{format_value(load_metric, value)}"
        + (f" (carried at {format_value(load_metric, low)})" if value < low else ""),
        gid=f"{plot_id}-capacity",
    )


def _legend(axes: Any) -> None:
    """The legend, the failed-point cross last, in two columns when long."""
    handles, labels = axes.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i] == "failed point")
    axes.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="best",
        fontsize=6.5,
        framealpha=0.9,
        ncols=2 if len(labels) > 5 else 1,
    )
