"""The server's own series over the run (scraped from its ``/metrics``), as one figure of panels
side by side in the house style (:mod:`~pytest_llmreplay.report.plots`), time since the run's
start on every x axis:

- **requests on the server**: running and waiting;
- **KV-cache usage**, in %;
- **preemptions** since the start (the counter's increase up to each scrape,
  :func:`~pytest_llmreplay.metrics.server.increase`).

A panel is drawn only when the server reports its series; every y axis starts at 0. Each ``server.*`` SLO is a horizontal
line on its panel (``server.kv_cache_usage.max < 90%`` on the KV-cache one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..metrics.server import increase
from ..metrics.units import in_unit
from .plots import THIS_RUN, THRESHOLD, Threshold, new_figure, svg_of, value_axis

WAITING = "#e08a00"
# (panel title, y axis label, the metric whose display unit the y axis takes, [(series, line label, colour)])
PANELS = (
    (
        "Requests on the server",
        "requests",
        "requests",
        (("running", "running", THIS_RUN), ("waiting", "waiting", WAITING)),
    ),
    ("KV-cache usage", "share of the KV cache", "cache_hit_rate", (("kv_cache_usage", "KV-cache usage", THIS_RUN),)),
    ("Preemptions since the start", "preemptions", "requests", (("preemptions", "preemptions", THIS_RUN),)),
)


def since_start(points: Sequence[Sequence[float]]) -> list[list[float]]:
    """A counter's ``[t, value]`` points as ``[t, increase since the first point]``."""
    return [[t, increase(points[: index + 1])] for index, (t, _) in enumerate(points)]


def server_svg(
    plot_id: str, series: Mapping[str, Sequence[Sequence[float]]], thresholds: Mapping[str, Sequence[Threshold]]
) -> str | None:
    """The figure (module docstring) as an inline ``<svg>``; None when no panel has a series.
    ``thresholds``: series name -> the SLOs on its figures (``kv_cache_usage`` ->
    ``server.kv_cache_usage.max < 90%``)."""
    panels = [panel for panel in PANELS if any(series.get(name) for name, _, _ in panel[3])]
    if not panels:
        return None
    figure, axes_list = new_figure(*(title for title, _, _, _ in panels))
    for axes, (_, label, metric, lines) in zip(axes_list, panels, strict=True):
        drawn = {
            name: since_start(series[name]) if name == "preemptions" else [list(p) for p in series[name]]
            for name, _, _ in lines
            if series.get(name)
        }
        marks = [mark for name, _, _ in lines for mark in thresholds.get(name, ())]
        values = [v for points in drawn.values() for _, v in points] + [mark.value for mark in marks]
        unit = value_axis(axes, "y", metric, label, values)
        axes.set_xlabel("time since the start (s)", fontsize=9)
        axes.set_ylim(bottom=0)  # counts and shares: never below 0
        for name, line, colour in lines:
            if name in drawn:
                times, shown = [t for t, _ in drawn[name]], [in_unit(v, unit) for _, v in drawn[name]]
                axes.step(times, shown, where="post", color=colour, linewidth=1.6, label=line, gid=f"{plot_id}-{name}")
        for index, mark in enumerate(marks):
            axes.axhline(
                in_unit(mark.value, unit),
                color=THRESHOLD,
                linewidth=1.2,
                label=mark.legend,
                gid=f"{plot_id}-{lines[0][0]}-slo-{index}",
            )
        axes.legend(loc="upper right", fontsize=7.5, framealpha=0.9)
    return svg_of(figure, plot_id, "The server's /metrics over the run")
