"""The trend of a gated figure over commits, drawn from the report's ``record["history"]``
(:func:`~pytest_llmreplay.gate.history.trend`: per figure ``commits``, ``values``, ``change_points``,
this run the last point).

One plot per figure, in the report's house style (:func:`~pytest_llmreplay.report.plots.new_axes`):
x = the results in commit order along the reference's first-parent history, oldest first, each
labelled with its commit's short id; y = the figure in its display unit
(:func:`~pytest_llmreplay.report.plots.value_axis`). Each change point is a dashed vertical line
between the last result of the old level and the first of the new one, labelled with the change
of level (``+20.0%``); each level (the mean of the results between change points,
:func:`~pytest_llmreplay.gate.history.level_means`) is a horizontal segment; this run is a larger,
differently coloured point, named in the legend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from ..wording import counted
from .plots import THIS_RUN, THRESHOLD

SHORT_ID = 7  # characters of a commit id on the x axis
MAX_TICK_LABELS = 16  # more results than this: every k-th commit labelled (always this run's)
CURRENT, LEVEL = "#e07b00", "#8c8c8c"


def tick_positions(count: int) -> list[int]:
    """The results whose commit the x axis names: all up to :data:`MAX_TICK_LABELS`, else every
    k-th (k = ceil(count / MAX_TICK_LABELS)) counted back from the last, which is always named."""
    step = max(1, math.ceil(count / MAX_TICK_LABELS))
    return list(range(count - 1, -1, -step))[::-1]


def trend_svg(plot_id: str, key: str, series: Mapping[str, Any], reference: str) -> str:
    """The trend plot of ``key`` (module docstring) as an inline ``<svg>``."""
    from matplotlib.ticker import FixedLocator

    from ..gate.history import level_means
    from ..metrics.units import in_unit
    from .plots import new_axes, svg_of, value_axis

    commits: Sequence[str] = series["commits"]
    values: Sequence[float] = series["values"]
    points: Sequence[int] = series["change_points"]
    metric = key.partition(".")[0]
    figure, axes = new_axes(f"{key} over commits")
    unit = value_axis(axes, "y", metric, key, values)
    shown = [in_unit(v, unit) for v in values]
    x = list(range(len(shown)))
    axes.plot(
        x[:-1],
        shown[:-1],
        marker="o",
        markersize=3.5,
        linewidth=1.4,
        color=THIS_RUN,
        label="stored results",
        gid=f"{plot_id}-stored",
    )
    axes.plot(x[-2:], shown[-2:], linewidth=1.4, linestyle=(0, (2, 2)), color=THIS_RUN)
    axes.plot(
        [x[-1]],
        [shown[-1]],
        linestyle="none",
        marker="o",
        markersize=8,
        markeredgecolor="#333333",
        color=CURRENT,
        label=f"this run ({commits[-1][:SHORT_ID]})",
        gid=f"{plot_id}-this-run",
        zorder=3,
    )
    levels = [in_unit(level, unit) for level in level_means(list(values), list(points))]
    bounds = [0, *points, len(values)]
    for index, (start, end) in enumerate(pairwise(bounds)):
        axes.hlines(
            levels[start],
            start - 0.3,
            end - 0.7,
            color=LEVEL,
            linewidth=2.2,
            alpha=0.7,
            label="level" if index == 0 else None,
            gid=f"{plot_id}-level-{index}",
        )
    for index, point in enumerate(points):
        axes.axvline(
            point - 0.5,
            color=THRESHOLD,
            linewidth=1.3,
            linestyle=(0, (5, 3)),
            label="change point" if index == 0 else None,
            gid=f"{plot_id}-change-{index}",
        )
        before, after = levels[point - 1], levels[point]
        if before:
            axes.annotate(
                f"{after / before - 1:+.1%}",
                (point - 0.5, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -10),
                textcoords="offset points",
                fontsize=7.5,
                color=THRESHOLD,
                gid=f"{plot_id}-change-{index}-label",
            )
    ticks = tick_positions(len(commits))
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.set_xticklabels([commits[i][:SHORT_ID] for i in ticks], rotation=60, ha="right", fontsize=7)
    axes.set_xlim(-0.6, len(commits) - 0.4)
    axes.set_xlabel(f"commit, first-parent history of {reference}", fontsize=9)
    axes.legend(loc="best", fontsize=7, framealpha=0.9)
    return svg_of(
        figure,
        plot_id,
        f"{key} per commit: {counted(len(values) - 1, 'stored result')} and this run, {counted(len(points), 'change point')}",
    )
