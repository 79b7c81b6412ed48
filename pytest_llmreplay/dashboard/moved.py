"""What moved in the last N commits, and the index's order: tests that moved come first.

A test **moved** when one of its lines has a change point (:class:`~.series.Change`) at one of
the newest ``recent`` commits of the drawn history, or its latest verdict
(:mod:`~.verdicts`) calls a regression and its newest result is at one of them. The index lists
first the tests with a regression (a change point flagged ``regression``, or the latest
verdict's), then those with any other change point there, then the rest; each group by test id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .series import TestLines

ORDER = ("regression", "moved", "steady")


@dataclass(frozen=True)
class Move:
    """A change point at a recent commit: the figure ``key``, the line's ``label``, ``position``
    (of its first result at the new level), ``change`` (after / before - 1; None from 0) and ``flag``."""

    key: str
    label: str
    position: int
    change: float | None
    flag: str


def recent_moves(test: TestLines, since: int) -> list[Move]:
    """The change points of ``test`` at positions >= ``since``, regressions first, then by size."""
    moves = [
        Move(key, line.label, int(series.positions[change.index]), change.change, change.flag)
        for line in test.lines
        for key, series in line.series.items()
        for change in series.changes
        if series.positions[change.index] >= since
    ]
    return sorted(moves, key=lambda m: (m.flag != "regression", -abs(m.change or 0.0)))


def grouped(moves: Sequence[Move]) -> list[list[Move]]:
    """``moves`` (as :func:`recent_moves` orders them) in groups of one line, commit and flag, in
    the order of each group's first move: the figures that moved together, said once."""
    groups: dict[tuple[str, int, str], list[Move]] = {}
    for move in moves:
        groups.setdefault((move.label, move.position, move.flag), []).append(move)
    return list(groups.values())


def rank(moves: Sequence[Move], verdicts: Sequence[Mapping[str, Any]], newest: Sequence[int], since: int) -> str:
    """``regression``, ``moved`` or ``steady`` (module docstring); ``verdicts`` and ``newest``:
    each line's latest verdict and newest result's position."""
    recent_regression = any(
        v["cell"].startswith("REGRESSION") and position >= since for v, position in zip(verdicts, newest, strict=True)
    )
    if recent_regression or any(m.flag == "regression" for m in moves):
        return "regression"
    return "moved" if moves else "steady"
