"""The Plotly figures of the site (data and layout as Plotly.js takes them: Plotly draws them).

**A figure's chart** (:func:`figure_chart`), one per gated or SLO'd figure of a test: x = the
commit's place on the reference's first-parent history (ticks named by short commit ids), y =
the figure in its display unit (:func:`~pytest_llmreplay.metrics.units.figure_unit`). Per line:
its results joined, with error bars where a result gives an interval (the range of its runs, a
capacity's bracket), its levels between change points dotted, each change point a marker
coloured by its flag (regression red, improved green, shift grey) whose hover gives the levels
and the change. The newest SLO threshold on the figure is a red dashed line named in the legend.

Hover on a result gives the commit (short id, date, subject), the value and the interval. A
point's x is also the key of its commit in the page's commit table: the page's script
(``assets/dashboard.js``) gives each trace whose hover names its ``customdata`` the commits of
its x before Plotly draws, so a commit's words are written once per page, not once per figure;
a click opens the commit through ``--commit-url``. A line's levels are drawn from where each
starts (a step line), not from every result.

**A sparkline** (:func:`sparkline`): the index's small line of one figure, each line of the
test, change points flagged regression marked; no axes, no hover; its y axis from zero, so that
a step of 20% stands out and the noise of a flat figure does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..metrics.units import UNITS, figure_unit, in_unit, significant, with_unit
from .digits import rounded, rounded_all
from .series import Floats, Line, Series, floats, ints

FLAG_COLOURS = {"regression": "#c62828", "improved": "#2e7d32", "shift": "#757575"}
THRESHOLD_COLOUR = "#c62828"
PALETTE = ("#1f77b4", "#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f")  # a line each
TICKS = 8  # commits named on a chart's x axis at most
HOVER_VALUE = "%{y:,.4~g}"  # Plotly's hover template of a value: 4 significant digits


def in_unit_all(values: Floats, unit: str | None) -> Floats:
    """:func:`~pytest_llmreplay.metrics.units.in_unit` of each of ``values``."""
    return cast(Floats, values / UNITS[unit][1]) if unit else values


def axis_unit(key: str, lines: Sequence[Line]) -> str | None:
    """One unit for every line's values of ``key`` (their largest magnitude's)."""
    largest = max((float(np.abs(line.series[key].values).max()) for line in lines if key in line.series), default=0.0)
    return figure_unit(key, largest)


def drawn_values(series: Series, unit: str | None) -> list[float]:
    """``series``' values in ``unit``, :func:`rounded`: what a chart draws; made once per unit
    (a page and the index draw the same values)."""
    if unit not in series.drawn:
        series.drawn[unit] = rounded_all(in_unit_all(series.values, unit))
    return series.drawn[unit]


def ticks(positions: Sequence[int], commits: Sequence[str]) -> dict[str, Any]:
    """At most :data:`TICKS` of ``positions`` named by their commits' short ids, the newest always."""
    drawn = sorted(set(positions))
    step = max(1, math.ceil(len(drawn) / TICKS))
    shown = drawn[::-1][::step][::-1]
    return {"tickmode": "array", "tickvals": shown, "ticktext": [commits[p][:7] for p in shown]}


def shown(value: float | None, unit: str | None) -> str:
    """``value`` written in ``unit`` (``open``: an interval's missing end)."""
    return "open" if value is None else with_unit(significant(in_unit(value, unit)), unit)


def _result_trace(line: Line, series: Series, unit: str | None, colour: str, label: str) -> dict[str, Any]:
    has_interval = ~np.isnan(series.low)
    trace: dict[str, Any] = {
        "type": "scatter",
        "mode": "lines+markers",
        "name": label,
        "legendgroup": line.id,
        "x": ints(series.positions),
        "y": drawn_values(series, unit),
        "line": {"color": colour, "width": 1.5},
        "marker": {"color": colour, "size": 5},
        "hovertemplate": (
            "<b>%{customdata[1]}</b> %{customdata[2]}<br>%{customdata[3]}<br>"
            f"{series.key}: {with_unit(HOVER_VALUE, unit)}{'%{text}' if has_interval.any() else ''}"
            f"<extra>{label}</extra>"
        ),
    }
    if has_interval.any():
        trace.update(_intervals(line, series, unit, colour, has_interval))
    return trace


def _intervals(
    line: Line, series: Series, unit: str | None, colour: str, given: npt.NDArray[np.bool_]
) -> dict[str, Any]:
    """The error bars of a series with intervals and each value's words on hover (``open``: a
    bracket without a top)."""
    open_top = np.isnan(series.high)
    down = np.where(given, series.values - series.low, 0.0)
    up = np.where(given & ~open_top, series.high - series.values, 0.0)
    what = "bracket" if series.key.startswith("capacity.") else f"range of {line.facts['runs']} runs"
    texts = [
        f"<br>{what}: {shown(low, unit)} to {shown(None if no_top else high, unit)}" if has else ""
        for has, low, high, no_top in zip(given, floats(series.low), floats(series.high), open_top, strict=True)
    ]
    return {
        "text": texts,
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": rounded_all(in_unit_all(up, unit)),
            "arrayminus": rounded_all(in_unit_all(down, unit)),
            "color": colour,
        },
    }


def _change_traces(line: Line, series: Series, unit: str | None, label: str, named: set[str]) -> list[dict[str, Any]]:
    """The line's levels (dotted) and its change points, one marker trace per flag (in the
    legend once per chart: ``named`` holds the flags already there)."""
    if not series.changes:
        return []
    x = ints(series.positions)
    starts = [0, *(c.index for c in series.changes)]
    means = series.levels
    levels = [rounded(in_unit(means[start], unit)) for start in starts]  # each level from where it starts
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"{label}: level",
            "legendgroup": line.id,
            "showlegend": False,
            "hoverinfo": "skip",
            "x": [x[start] for start in starts] + [x[-1]],
            "y": levels + levels[-1:],
            "line": {"color": "#9e9e9e", "width": 1, "dash": "dot", "shape": "hv"},
        }
    ]
    for name, colour in FLAG_COLOURS.items():
        changes = [c for c in series.changes if c.flag == name]
        legend = name not in named  # one legend entry per flag, whichever line has it first
        named.add(name)
        if not changes:
            continue
        texts = [
            f"{name}: level {shown(c.before, unit)} to {shown(c.after, unit)}"
            + (f" ({c.change:+.1%})" if c.change is not None else "")
            + (f", allowed {series.tolerance:.0%}" if series.tolerance is not None else "")
            for c in changes
        ]
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"change point: {name}",
                "legendgroup": f"change-{name}",
                "showlegend": legend,
                "x": [x[c.index] for c in changes],
                "y": [levels[starts.index(c.index)] for c in changes],
                "text": texts,
                "marker": {"color": colour, "size": 11, "symbol": "diamond", "line": {"color": "#fff", "width": 1}},
                "hovertemplate": "<b>%{customdata[1]}</b> %{customdata[2]}<br>%{text}<extra>" + label + "</extra>",
            }
        )
    return traces


def figure_chart(
    key: str, lines: Sequence[Line], commits: Sequence[str], reference: str, threshold: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The chart of ``key`` over every line that measured it (module docstring); ``commits``:
    each position's commit id; ``threshold``: the newest SLO on ``key`` (``value``, ``text``)."""
    drawn = [line for line in lines if key in line.series]
    unit = axis_unit(key, drawn)
    data: list[dict[str, Any]] = []
    positions: list[int] = []
    named: set[str] = set()
    for index, line in enumerate(drawn):
        series = line.series[key]
        label = line.label
        positions += ints(series.positions)
        data.append(_result_trace(line, series, unit, PALETTE[index % len(PALETTE)], label))
        data += _change_traces(line, series, unit, label, named)
    if threshold is not None:
        value = rounded(in_unit(threshold["value"], unit))
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"SLO {threshold['text']}",
                "x": [min(positions), max(positions)],
                "y": [value, value],
                "line": {"color": THRESHOLD_COLOUR, "width": 1.5, "dash": "dash"},
                "hoverinfo": "name",
            }
        )
    tolerance = next((line.series[key].tolerance for line in drawn if line.series[key].tolerance is not None), None)
    name = key.removesuffix(".value")
    title = name + (f" (gated, allowed change {tolerance:.0%})" if tolerance is not None else " (an SLO's figure)")
    layout = {
        "title": {"text": title, "font": {"size": 14}, "x": 0, "xanchor": "left"},
        "height": 380,
        "margin": {"l": 64, "r": 16, "t": 36, "b": 40},
        "hovermode": "closest",
        "xaxis": {
            "title": {"text": f"commits of {reference}, oldest to newest", "font": {"size": 11}, "standoff": 4},
            **ticks(positions, commits),
        },
        "yaxis": {"title": {"text": f"{name} ({unit})" if unit else name, "font": {"size": 11}}, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": -0.2, "yanchor": "top", "font": {"size": 10}},
        "showlegend": True,
    }
    return {"data": data, "layout": layout}


def sparkline(key: str, lines: Sequence[Line]) -> dict[str, Any]:
    """The index's small line of ``key`` (module docstring)."""
    drawn = [line for line in lines if key in line.series]
    unit = axis_unit(key, drawn)
    data = []
    for index, line in enumerate(drawn):
        series = line.series[key]
        x = ints(series.positions)
        y = drawn_values(series, unit)
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": x,
                "y": y,
                "line": {"width": 1.2, "color": PALETTE[index % len(PALETTE)]},
                "hoverinfo": "skip",
            }
        )
        flagged = [c for c in series.changes if c.flag == "regression"]
        if flagged:
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "x": [x[c.index] for c in flagged],
                    "y": [y[c.index] for c in flagged],
                    "marker": {"color": FLAG_COLOURS["regression"], "size": 5},
                    "hoverinfo": "skip",
                }
            )
    layout = {
        "height": 44,
        "width": 150,
        "margin": {"l": 2, "r": 2, "t": 2, "b": 2},
        "xaxis": {"visible": False},
        "yaxis": {"visible": False, "rangemode": "tozero"},  # from zero: a step stands out, the noise does not
        "showlegend": False,
    }
    return {"data": data, "layout": layout}
