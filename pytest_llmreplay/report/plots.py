"""The report's plots: matplotlib figures written as inline SVG, one style for all of them.

matplotlib is imported only here, inside the functions, so it costs nothing until a report is
written. Figures are made with ``matplotlib.figure.Figure`` (no pyplot: no global figure state),
text stays text (``svg.fonttype: none``, so a browser and a test can read the axis titles), and
ids are salted with the plot's id, so several plots in one page never share an id and the same
data give the same SVG.

- :func:`new_axes` (:func:`new_figure`: plots side by side) and :func:`value_axis` give a plot the house style (size, grid, an axis in the
  metric's display unit with readable ticks, log scale when the values span more than
  :data:`LOG_SPREAD`); a later plot (a trend over commits, a load curve) uses them too.
- :func:`cdf_svg` draws the empirical CDF of this run's samples, the baseline's dashed, the
  percentiles p50/p90/p99 marked on this run's curve, and each SLO threshold as a vertical line.
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..metrics.units import display_unit, in_unit, significant

LOG_SPREAD = 30.0  # a value axis is logarithmic when its largest value is this many times its smallest
CDF_POINTS = 400  # a curve of more samples is drawn through this many quantiles
SIZE_IN = (5.2, 3.3)
THIS_RUN, BASELINE, THRESHOLD = "#1f5fa8", "#8c8c8c", "#c62828"
PERCENTILES = ((50, "p50"), (90, "p90"), (99, "p99"))


@dataclass(frozen=True)
class Threshold:
    """An SLO drawn on a value axis: its label (``ttft.p99 < 500ms``), its value in the metric's
    own unit, and whether the run met it."""

    label: str
    value: float
    passed: bool

    @property
    def legend(self) -> str:
        """``SLO ttft.p99 < 500ms``, and ``(breached)`` when the run did not meet it."""
        return f"SLO {self.label}" + ("" if self.passed else " (breached)")


def new_axes(title: str) -> tuple[Any, Any]:
    """(figure, axes) in the house style: a titled plot with a light grid."""
    figure, (axes,) = new_figure(title)
    return figure, axes


def new_figure(*titles: str) -> tuple[Any, list[Any]]:
    """(figure, axes) of plots side by side, one per title, each as :func:`new_axes` makes it."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(SIZE_IN[0] * len(titles), SIZE_IN[1]), dpi=100, layout="constrained")
    panels = list(figure.subplots(1, len(titles), squeeze=False)[0])
    for axes, title in zip(panels, titles, strict=True):
        axes.set_title(title, fontsize=11, loc="left")
        axes.grid(True, which="major", color="#dddddd", linewidth=0.8)
        axes.set_axisbelow(True)
        axes.tick_params(labelsize=8)
        for side in ("top", "right"):
            axes.spines[side].set_visible(False)
    return figure, panels


def value_axis(axes: Any, which: str, metric: str, label: str, values: Sequence[float]) -> str | None:
    """Set the ``which`` (``x`` or ``y``) axis of ``axes`` up for ``metric``'s ``values`` (own unit):
    titled ``label (unit)``, ticks written by :func:`~pytest_llmreplay.metrics.units.significant`,
    logarithmic when the positive values span more than :data:`LOG_SPREAD`. Returns the display
    unit; the caller plots values divided by it (:func:`~pytest_llmreplay.metrics.units.in_unit`)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = axes.xaxis if which == "x" else axes.yaxis
    unit = display_unit(metric, max((abs(v) for v in values), default=0.0))
    low, high = min(values, default=0.0), max(values, default=0.0)
    logarithmic = low > 0 and high / low > LOG_SPREAD
    axis.set_label_text(
        f"{label} ({unit}{', log scale' if logarithmic else ''})"
        if unit
        else label + (" (log scale)" if logarithmic else ""),
        fontsize=9,
    )
    if logarithmic:
        (axes.set_xscale if which == "x" else axes.set_yscale)("log")
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(lambda value, _: significant(value, tick_digits(axis.get_majorticklocs()))))
    return unit


def tick_digits(ticks: Sequence[float], least: int = 3) -> int:
    """Significant digits that write every one of ``ticks`` apart from its neighbour: ``least``,
    or more where the step between ticks is small against their size (ticks 12.155 to 12.175
    all read 12.2 at three digits): floor(log10 |largest|) - floor(log10 step) + 1."""
    finite = sorted({float(t) for t in ticks if math.isfinite(t)})
    steps = [b - a for a, b in itertools.pairwise(finite)]
    largest = max((abs(t) for t in finite), default=0.0)
    if not steps or largest == 0:
        return least
    return max(least, math.floor(math.log10(largest)) - math.floor(math.log10(min(steps))) + 1)


def cdf_points(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """(x, y) of the empirical CDF of ``values`` as a step curve: y = share of values <= x; more
    than :data:`CDF_POINTS` values are drawn through that many evenly spaced quantiles."""
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=float))
    count = len(ordered)
    if count > CDF_POINTS:
        shares = np.linspace(1 / CDF_POINTS, 1.0, CDF_POINTS)
        x, y = np.quantile(ordered, shares), shares
    else:
        x, y = ordered, np.arange(1, count + 1) / count
    # tolist() of 1-D float arrays: floats (numpy's stubs type it by a shape they cannot see here)
    return cast(list[float], x.tolist()), cast(list[float], y.tolist())


def cdf_svg(
    plot_id: str,
    metric: str,
    label: str,
    of: str,
    this_run: Sequence[float],
    baseline: Sequence[float] = (),
    percentiles: Mapping[str, float] | None = None,
    thresholds: Sequence[Threshold] = (),
) -> str:
    """The CDF plot of ``metric`` (see the module docstring) as an inline ``<svg>``.

    ``of``: what a sample is (``requests``, ``sessions``), for the y axis; ``percentiles``:
    ``p50``/``p90``/``p99`` -> value (own unit), the summary's, marked on this run's curve."""
    percentiles = percentiles or {}
    figure, axes = new_axes(label)
    unit = value_axis(axes, "x", metric, label, [*this_run, *baseline, *(t.value for t in thresholds)])
    axes.set_ylabel(f"share of {of}", fontsize=9)
    axes.set_ylim(0, 1.04)
    axes.yaxis.set_major_formatter(_percent_formatter())
    if baseline:
        x, y = cdf_points([in_unit(v, unit) for v in baseline])
        axes.step(
            x,
            y,
            where="post",
            color=BASELINE,
            linestyle=(0, (5, 3)),
            linewidth=1.4,
            label="baseline",
            gid=f"{plot_id}-baseline",
        )
    x, y = cdf_points([in_unit(v, unit) for v in this_run])
    axes.step(x, y, where="post", color=THIS_RUN, linewidth=1.8, label="this run", gid=f"{plot_id}-this-run")
    for percent, name in PERCENTILES:
        value = percentiles.get(name)
        if value is None:
            continue
        shown = in_unit(value, unit)
        axes.plot([shown], [percent / 100], marker="o", markersize=4, color=THIS_RUN, gid=f"{plot_id}-{name}")
        axes.annotate(
            f"{name} {significant(shown, 3)}",
            (shown, percent / 100),
            xytext=(5, -9 if percent == 90 else -2),
            textcoords="offset points",
            fontsize=7.5,
            color="#333333",
        )
    for index, threshold in enumerate(thresholds):
        axes.axvline(
            in_unit(threshold.value, unit),
            color=THRESHOLD,
            linewidth=1.3,
            label=threshold.legend,
            gid=f"{plot_id}-slo-{index}",
        )
    axes.legend(loc="lower right", fontsize=7.5, framealpha=0.9)
    return svg_of(figure, plot_id, f"{label}: CDF of {of}")


def _percent_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda share, _: f"{share * 100:.0f}%")


def svg_of(figure: Any, plot_id: str, title: str) -> str:
    """``figure`` as an ``<svg>`` element to inline in HTML: text kept as text, ids salted with
    ``plot_id``, no date, no XML prolog; ``title`` as its accessible name."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": plot_id, "font.family": "sans-serif"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
    escaped = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"(<svg[^>]*>)", rf"\1<title>{escaped}</title>", text, count=1).replace(
        "<svg ", f'<svg id="{plot_id}" role="img" ', 1
    )
