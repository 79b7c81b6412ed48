"""A test's results as lines over commits, and each figure's change points.

**Lines.** A test's results are split by :func:`~.extract.line_of` (endpoint fingerprint,
workload, settings, number of runs): results of another engine, other engine arguments or
another GPU are another line, drawn beside the first and never pooled with it. A line is
labelled by what sets it apart from the test's other lines (:func:`labels`: the fingerprint's
words first, ``server.cmd vllm serve ... --max-num-seqs 64``).

**Series** (:class:`Series`): one figure of one line, its results in commit order along the
reference's first-parent history (several results at one commit in the order they were saved),
as :func:`~pytest_llmreplay.gate.history.history_points` gives them to ``llmreplay history``.

**Change points** (:class:`Change`): Apache Otava's e-divisive over the line's whole series,
the call ``llmreplay history`` makes (:func:`~pytest_llmreplay.gate.history.change_points`;
:func:`~.changes.change_points` gives the same indices, running Otava's windows only where the
series changed). Each change point comes with the mean level before and after it
(:func:`~pytest_llmreplay.gate.history.level_means`) and its change ``after / before - 1``. A
change point is flagged ``regression`` when its change is worse than the figure's gate tolerance (higher for times, lower for throughputs, cache hit
rates and capacities: :data:`~pytest_llmreplay.gate.baseline.LOWER_IS_WORSE`), ``improved``
when it is as much better, else ``shift`` (a figure no tolerance gates, an SLO's, is always a
shift).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..gate.baseline import LOWER_IS_WORSE
from ..gate.history import level_means
from .cache import Results
from .extract import point_slos

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.intp]


def floats(array: Floats) -> list[float]:
    """A 1-D array as Python floats (what JSON, :func:`json.dumps` and :mod:`statistics` take)."""
    return cast(list[float], array.tolist())


def ints(array: Ints) -> list[int]:
    """A 1-D array as Python ints."""
    return cast(list[int], array.tolist())


@dataclass(frozen=True)
class Point:
    """One result on a line: its commit's ``position`` in the history (0 the oldest drawn), its
    store ``key`` and what a page shows of it (:meth:`~.cache.Results.outcome`: its ``figures``
    and SLO checks)."""

    position: int
    key: str
    figures: Mapping[str, Any]


@dataclass(frozen=True)
class Change:
    """A change point: ``index`` (of the series' first value at the new level), the ``before``
    and ``after`` levels, ``change`` (after / before - 1; None from a level of 0) and ``flag``:
    regression, improved or shift (module docstring)."""

    index: int
    before: float
    after: float
    change: float | None
    flag: str


@dataclass
class Series:
    """One figure of a line over commits: the ``positions`` of the line's results that measured
    it, their ``values``, each value's interval (``low`` NaN: none; ``high`` NaN with a ``low``:
    open), ``changes``; ``drawn``: the values as the charts draw them, per unit
    (:func:`~.charts.drawn_values` fills it, so that a page and the index round them once)."""

    key: str
    positions: Ints
    values: Floats
    low: Floats
    high: Floats
    changes: list[Change] = field(default_factory=list)
    tolerance: float | None = None
    drawn: dict[str | None, list[float]] = field(default_factory=dict, repr=False)

    @property
    def levels(self) -> list[float]:
        return level_means(floats(self.values), [c.index for c in self.changes])


@dataclass
class Line:
    """The results of one test that may be gated against each other, oldest first: their
    ``rows`` in the test's :class:`~.cache.Results`, store ``keys`` and ``positions``."""

    id: str
    results: Results
    rows: Ints
    keys: list[str]
    positions: Ints
    facts: Mapping[str, Any]  # the same for each result (extract.extract's facts)
    label: str = ""
    series: dict[str, Series] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.keys)

    @functools.cached_property
    def newest(self) -> Point:
        return Point(int(self.positions[-1]), self.keys[-1], self.results.outcome(int(self.rows[-1])))

    def figures(self, index: int) -> dict[str, float]:
        """The figures of the line's ``index``-th result."""
        return self.results.outcome(int(self.rows[index]))["figures"]


@dataclass
class TestLines:
    """A test (``folder``: its folder in the store) and its lines, the line with the newest
    result first."""

    test: str
    folder: str
    lines: list[Line]


def flag(key: str, change: float | None, tolerance: float | None) -> str:
    """regression, improved or shift (module docstring)."""
    if change is None or tolerance is None:
        return "shift"
    worse = -change if key.partition(".")[0] in LOWER_IS_WORSE else change
    return "regression" if worse > tolerance else "improved" if worse < -tolerance else "shift"


def figure_series(key: str, line: Line, tolerance: float | None, find: Callable[[Floats], list[int]]) -> Series | None:
    """The series of ``key`` over ``line`` with its change points (module docstring); None when
    none of its results measured it."""
    results = line.results
    try:
        column = results.keys.index(key)
    except ValueError:
        return None
    values = results.figures[line.rows, column]
    measured = ~np.isnan(values)
    if not measured.any():
        return None
    series = Series(
        key,
        line.positions[measured],
        values[measured],
        results.low[line.rows, column][measured],
        results.high[line.rows, column][measured],
        tolerance=tolerance,
    )
    indices = find(series.values)
    levels = level_means(floats(series.values), indices)
    for index in indices:
        before, after = levels[index - 1], levels[index]
        change = after / before - 1 if before else None
        series.changes.append(Change(index, before, after, change, flag(key, change, tolerance)))
    return series


def flattened(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"server": {"cmd": "x"}}`` -> ``{"server.cmd": "x"}``, empty values left out."""
    found: dict[str, str] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            found.update(flattened(value, f"{prefix}{key}."))
        elif value not in (None, "", [], ()):
            found[f"{prefix}{key}"] = str(value)
    return found


def labels(lines: Sequence[Line]) -> list[str]:
    """Each line's words that differ among ``lines``: the fingerprint's, then the workload's, the
    settings' and the number of runs (``runs 3``); one line alone is ``results``."""
    if len(lines) == 1:
        return ["results"]
    facts = []
    for line in lines:
        parts = {
            **flattened(line.facts["fingerprint"]),
            **flattened(line.facts["workload"], "workload."),
            **flattened(line.facts["settings"], "settings."),
            "runs": str(line.facts["runs"]),
        }
        facts.append(parts)
    keys = [key for key in dict.fromkeys(k for parts in facts for k in parts) if len({p.get(key) for p in facts}) > 1]
    return [
        ", ".join(f"{key} {parts.get(key, '-')}" for key in keys) or f"line {i + 1}" for i, parts in enumerate(facts)
    ]


def test_lines(folder: str, results: Results, names: Sequence[str], positions: Mapping[str, int]) -> TestLines:
    """The lines of one test folder's results ``names`` (in name order; ``positions``: a
    commit's 12 hex digits -> its place in the history), labelled; :func:`add_series` draws
    their figures. A result saved from a dirty tree is left out of its line at a commit where
    the line has a clean one (not the commit's code: the gate and ``llmreplay history`` leave
    it out too)."""
    rows = np.fromiter((results.rows[name] for name in names), dtype=np.intp, count=len(names))
    at = np.fromiter((positions[name[:12]] for name in names), dtype=np.intp, count=len(names))
    by_line: dict[str, list[int]] = {}
    for index, row in enumerate(ints(rows)):
        by_line.setdefault(results.lines[row], []).append(index)
    lines = []
    for line_id, indices in by_line.items():
        clean_at = {int(at[i]) for i in indices if not results.dirty[int(rows[i])]}
        chosen = np.array([i for i in indices if not results.dirty[int(rows[i])] or int(at[i]) not in clean_at])
        order = chosen[np.argsort(at[chosen], kind="stable")]  # by commit, then by name (saved order)
        keys = [f"{folder}/{names[i]}" for i in ints(order)]
        lines.append(Line(line_id, results, rows[order], keys, at[order], results.facts[line_id]))
    lines.sort(key=lambda line: (-line.positions[-1], line.keys[-1]))
    for line, label in zip(lines, labels(lines), strict=True):
        line.label = label
    return TestLines(lines[0].facts["test"], folder, lines)


def add_series(test: TestLines, find: Callable[[Floats], list[int]]) -> None:
    """Each gated or SLO'd figure of a line's newest result a series of the line."""
    for line in test.lines:
        tolerances = line.facts["tolerances"]
        keys = dict.fromkeys([*tolerances, *(slo["figure"] for slo in point_slos(line.newest.figures))])
        for key in keys:
            series = figure_series(key, line, tolerances.get(key), find)
            if series is not None:
                line.series[key] = series
