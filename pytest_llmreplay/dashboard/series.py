"""A test's results as lines over commits, and each figure's change points.

**Lines.** A test's results are split by :func:`~.extract.line_of` (endpoint fingerprint,
workload, settings, number of runs): results of another engine, other engine arguments or
another GPU are another line, drawn beside the first and never pooled with it. A line is
labelled by what sets it apart from the test's other lines (:func:`labels`: the fingerprint's
words first, ``server.cmd vllm serve ... --max-num-seqs 64``).

**Series** (:class:`Series`): one figure of one line, its results in commit order along the
reference's first-parent history (several results at one commit in the order they were saved),
as :func:`~pytest_llmreplay.gate.history.history_points` gives them to ``llmreplay history``.

**Change points** (:class:`Change`): Apache Otava's e-divisive over the series
(:func:`~pytest_llmreplay.gate.history.change_points`, the same call ``llmreplay history`` makes),
each with the mean level before and after it (:func:`~pytest_llmreplay.gate.history.level_means`)
and its change ``after / before - 1``. A change point is flagged ``regression`` when its change
is worse than the figure's gate tolerance (higher for times, lower for throughputs, cache hit
rates and capacities: :data:`~pytest_llmreplay.gate.baseline.LOWER_IS_WORSE`), ``improved``
when it is as much better, else ``shift`` (a figure no tolerance gates, an SLO's, is always a
shift). A series' change points are cached by the digest of its values
(:func:`change_point_finder`): a rebuild runs Otava only on the series that changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..gate.baseline import LOWER_IS_WORSE
from ..gate.history import change_points, level_means
from .cache import DigestCache


@dataclass(frozen=True)
class Point:
    """One result on a line: its commit's ``position`` in the history (0 the oldest drawn), its
    store ``key`` and its extracted ``figures`` (:func:`~.extract.extract`)."""

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
    """One figure of a line over commits: ``points`` (the line's results that measured it),
    ``values``, ``intervals`` (``[low, high]`` or None per value), ``changes``."""

    key: str
    points: list[Point]
    values: list[float]
    intervals: list[list[float | None] | None]
    changes: list[Change] = field(default_factory=list)
    tolerance: float | None = None

    @property
    def levels(self) -> list[float]:
        return level_means(self.values, [c.index for c in self.changes])


@dataclass
class Line:
    """The results of one test that may be gated against each other, oldest first."""

    id: str
    points: list[Point]
    label: str = ""
    series: dict[str, Series] = field(default_factory=dict)

    @property
    def newest(self) -> Point:
        return self.points[-1]


@dataclass
class TestLines:
    """A test (``folder``: its folder in the store) and its lines, the line with the newest
    result first."""

    test: str
    folder: str
    lines: list[Line]


def change_point_finder(cache: DigestCache) -> Callable[[Sequence[float]], list[int]]:
    """:func:`~pytest_llmreplay.gate.history.change_points`, cached by the digest of the values."""
    return lambda values: cache.get(json.dumps(list(values)), lambda: change_points(list(values)))


def flag(key: str, change: float | None, tolerance: float | None) -> str:
    """regression, improved or shift (module docstring)."""
    if change is None or tolerance is None:
        return "shift"
    worse = -change if key.partition(".")[0] in LOWER_IS_WORSE else change
    return "regression" if worse > tolerance else "improved" if worse < -tolerance else "shift"


def figure_series(
    key: str, points: list[Point], tolerance: float | None, find: Callable[[Sequence[float]], list[int]]
) -> Series:
    """The series of ``key`` over ``points`` with its change points (module docstring)."""
    measured = [p for p in points if key in p.figures["figures"]]
    values = [float(p.figures["figures"][key]) for p in measured]
    series = Series(key, measured, values, [p.figures["intervals"].get(key) for p in measured], tolerance=tolerance)
    indices = find(values)
    levels = level_means(values, indices)
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
        newest = line.newest.figures
        parts = {
            **flattened(newest["fingerprint"]),
            **flattened(newest["workload"], "workload."),
            **flattened(newest["settings"], "settings."),
            "runs": str(newest["runs"]),
        }
        facts.append(parts)
    keys = [key for key in dict.fromkeys(k for parts in facts for k in parts) if len({p.get(key) for p in facts}) > 1]
    return [
        ", ".join(f"{key} {parts.get(key, '-')}" for key in keys) or f"line {i + 1}" for i, parts in enumerate(facts)
    ]


def test_lines(
    folder: str,
    results: Sequence[tuple[str, Mapping[str, Any]]],
    positions: Mapping[str, int],
    find: Callable[[Sequence[float]], list[int]],
) -> TestLines:
    """The lines of one test folder's ``results`` (``(name, figures)``; ``positions``: a
    commit's 12 hex digits -> its place in the history), each gated or SLO'd figure a series."""
    by_line: dict[str, list[Point]] = {}
    for name, figures in results:
        point = Point(positions[name[:12]], f"{folder}/{name}", figures)
        by_line.setdefault(figures["line"], []).append(point)
    lines = [Line(line_id, sorted(points, key=lambda p: (p.position, p.key))) for line_id, points in by_line.items()]
    lines.sort(key=lambda line: (-line.newest.position, line.newest.key))
    for line, label in zip(lines, labels(lines), strict=True):
        line.label = label
        newest = line.newest.figures
        keys = dict.fromkeys([*newest["tolerances"], *(slo["figure"] for slo in newest["slos"])])
        for key in keys:
            series = figure_series(key, line.points, newest["tolerances"].get(key), find)
            if series.values:
                line.series[key] = series
    return TestLines(lines[0].newest.figures["test"], folder, lines)
