"""A test's results as lines over commits, and each figure's change points.

**Lines.** A test's results are split by :func:`~.extract.line_of` (endpoint fingerprint,
workload, settings, number of runs): results of another engine, other engine arguments or
another GPU are another line, drawn beside the first and never pooled with it. A line is
labelled by what sets it apart from the test's other lines (:func:`labels`: the fingerprint's
words first, ``server.cmd vllm serve ... --max-num-seqs 64``).

**Series** (:class:`Series`): one figure of one line, its results in commit order along the
reference's first-parent history (several results at one commit in the order they were saved),
as :func:`~pytest_llmreplay.gate.history.history_points` gives them to ``llmreplay history``.

**Change points** (:class:`Change`): Apache Otava's e-divisive
(:func:`~pytest_llmreplay.gate.history.change_points`, the call ``llmreplay history`` makes on
the newest 200 commits), run over the series in blocks (:func:`blocks`): each block's core of
:data:`CORE` results, and :data:`CONTEXT` results on each side of it (a step at a core's edge has
a window of results on both sides), and a change point is taken from the block whose core it
lies in. A series only grows at its end, so every block but the last keeps its values, and its
change points are cached by their digest: a rebuild runs Otava on the last block of a series,
at most CORE + 2 CONTEXT results, however long the history. Each change point comes with the
mean level before and after it (:func:`~pytest_llmreplay.gate.history.level_means`) and its
change ``after / before - 1``. A change point is flagged ``regression`` when its change
is worse than the figure's gate tolerance (higher for times, lower for throughputs, cache hit
rates and capacities: :data:`~pytest_llmreplay.gate.baseline.LOWER_IS_WORSE`), ``improved``
when it is as much better, else ``shift`` (a figure no tolerance gates, an SLO's, is always a
shift).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..gate.baseline import LOWER_IS_WORSE
from ..gate.history import change_points, level_means
from .cache import DigestCache
from .extract import point_slos


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
    facts: Mapping[str, Any]  # the same for each result (extract.extract's facts)
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


CORE = 200  # results of a series whose change points one Otava run gives (llmreplay history reads 200 commits)
CONTEXT = 50  # results on each side of a core that the run sees too (Otava's own window)


def blocks(count: int) -> list[tuple[int, int, int, int]]:
    """The runs over a series of ``count`` results (module docstring): ``(start, end, core
    start, core end)`` each, the cores a partition of ``0..count``. Fixed blocks have cores of
    :data:`CORE` results and :data:`CONTEXT` more on each side; the last core holds the rest
    (from CONTEXT to CORE + CONTEXT results) with its context before it."""
    fixed = max(0, (count - CONTEXT) // CORE)
    found = [(max(0, k * CORE - CONTEXT), (k + 1) * CORE + CONTEXT, k * CORE, (k + 1) * CORE) for k in range(fixed)]
    last = fixed * CORE
    return [*found, (max(0, last - CONTEXT), count, last, count)]


def change_point_finder(cache: DigestCache) -> Callable[[Sequence[float]], list[int]]:
    """Change points of a series (module docstring): Otava's
    (:func:`~pytest_llmreplay.gate.history.change_points`) over each of its :func:`blocks`, those
    in the block's core kept; each block's cached by the digest of its values."""

    def find(values: Sequence[float]) -> list[int]:
        found = []
        for start, end, core_start, core_end in blocks(len(values)):
            part = list(values[start:end])
            points = cache.get(json.dumps(part), partial(change_points, part))
            found += [start + i for i in points if core_start <= start + i < core_end]
        return found

    return find


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


def test_lines(
    folder: str,
    results: Sequence[tuple[str, Mapping[str, Any]]],
    facts: Mapping[str, Mapping[str, Any]],
    positions: Mapping[str, int],
    find: Callable[[Sequence[float]], list[int]],
) -> TestLines:
    """The lines of one test folder's ``results`` (``(name, figures)``; ``facts``: line -> its
    facts; ``positions``: a commit's 12 hex digits -> its place in the history), each gated or
    SLO'd figure of a line's newest result a series."""
    by_line: dict[str, list[Point]] = {}
    for name, figures in results:
        point = Point(positions[name[:12]], f"{folder}/{name}", figures)
        by_line.setdefault(figures["line"], []).append(point)
    lines = [
        Line(line_id, sorted(points, key=lambda p: (p.position, p.key)), facts[line_id])
        for line_id, points in by_line.items()
    ]
    lines.sort(key=lambda line: (-line.newest.position, line.newest.key))
    for line, label in zip(lines, labels(lines), strict=True):
        line.label = label
        tolerances = line.facts["tolerances"]
        keys = dict.fromkeys([*tolerances, *(slo["figure"] for slo in point_slos(line.newest.figures))])
        for key in keys:
            series = figure_series(key, line.points, tolerances.get(key), find)
            if series.values:
                line.series[key] = series
    return TestLines(lines[0].facts["test"], folder, lines)
