"""Change points as ``llmreplay history`` finds them, kept up to date at the cost of a series' end.

:func:`~pytest_llmreplay.gate.history.change_points` (what ``llmreplay history`` and the
report's trend call) is Apache Otava's ``compute_change_points``: a **split** step runs
e-divisive over sliding windows of :data:`~pytest_llmreplay.gate.history.CHANGE_POINT_WINDOW`
results (a window starts half a window after the last one, or at the last change point it
found, whichever is later) at a relaxed p-value, and a **merge** step weeds the union of what
the windows found with t-tests over the whole series. The split is nearly all of the time
(e-divisive on each window), and a window's finds depend on its values alone.

:func:`change_points` is that same computation with each window's finds remembered by the
digest of its values (:class:`~.cache.DigestCache` ``windows``): when a series grows by a
result, every window that ended before the old end holds the same values, so only the windows
that reach the end run e-divisive again; the merge runs over the whole series each time, as
Otava's does. The result is Otava's, index for index (tests/test_dashboard_changes.py checks it
against :func:`~pytest_llmreplay.gate.history.change_points` on growing series), so the
dashboard marks on each line's whole series the change points ``llmreplay history`` prints
for it. A series whose values a build has seen before is not run at all (:func:`finder`).

Both digests carry Otava's version: another Otava's windows are run again; a series' carries
the smallest level change kept (:func:`~pytest_llmreplay.gate.history.sizeable`) too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import Any

import numpy as np

from ..errors import LLMReplayError
from ..gate.history import CHANGE_POINT_PVALUE, CHANGE_POINT_WINDOW, EXTRA, MIN_LEVEL_CHANGE, sizeable
from .cache import DigestCache
from .series import Floats


def require_otava() -> None:
    """:class:`LLMReplayError` naming the extra when Apache Otava is not installed (without
    importing it: scipy's import is half a second a build that finds nothing new never pays)."""
    try:
        found = find_spec("otava")
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise LLMReplayError(f"change points need Apache Otava: {EXTRA}")


@functools.cache
def otava_version() -> bytes:
    try:
        return f"otava {version('apache-otava')}\n".encode()
    except PackageNotFoundError:
        return b"otava unknown\n"


def first_pass_pvalue(max_pvalue: float) -> float:
    """The split step's relaxed p-value (Otava's ``compute_change_points``: ten times
    ``max_pvalue`` below 0.05)."""
    return max_pvalue * 10 if max_pvalue < 0.05 else (max_pvalue * 2 if max_pvalue < 0.5 else max_pvalue)


def change_points(
    values: Sequence[float] | Floats, windows: DigestCache, max_pvalue: float = CHANGE_POINT_PVALUE
) -> list[int]:
    """:func:`~pytest_llmreplay.gate.history.change_points` of ``values``, each window's finds
    taken from ``windows`` when it knows the window's values (module docstring)."""
    try:
        from otava.analysis import TTestSignificanceTester, merge
        from otava.change_point_divisive.base import CandidateChangePoint
        from otava.change_point_divisive.calculator import PairDistanceCalculator
        from otava.change_point_divisive.detector import ChangePointDetector
    except ImportError:
        raise LLMReplayError(f"change points need Apache Otava: {EXTRA}") from None
    if len(values) < 3:
        return []
    series = np.asarray(values, dtype=np.float64)
    tester = TTestSignificanceTester(first_pass_pvalue(max_pvalue))
    detector = ChangePointDetector(significance_tester=tester, calculator=PairDistanceCalculator)
    weak: dict[int, None] = {}  # the windows' finds (an ordered set)
    start, step = 0, CHANGE_POINT_WINDOW // 2
    while start < len(series):
        window = series[start : start + CHANGE_POINT_WINDOW]
        relative: list[int] = windows.get(otava_version() + window.tobytes(), partial(split_window, detector, window))
        found = [start + index for index in relative]
        weak.update(dict.fromkeys(found))
        start = max(found[-1] if found else 0, start + step)
    candidates = [CandidateChangePoint(index, 0.0) for index in sorted(weak)]
    intervals = tester.get_intervals(candidates)
    points = [tester.change_point(candidate, series, intervals) for candidate in candidates]
    return sizeable(
        [float(v) for v in series], sorted(int(point.index) for point in merge(points, series, max_pvalue, 0.0))
    )


def split_window(detector: Any, window: Floats) -> list[int]:
    """Otava's e-divisive finds in one window of the split step (indices in the window)."""
    return [int(point.index) for point in detector.get_change_points(window)]


def finder(series: DigestCache, windows: DigestCache) -> Callable[[Floats], list[int]]:
    """:func:`change_points` of a series' values, kept in ``series`` by their digest: a series a
    build has seen before is not run again."""

    def find(values: Floats) -> list[int]:
        key = otava_version() + f"min level change {MIN_LEVEL_CHANGE}\n".encode() + values.tobytes()
        found: list[int] = series.get(key, lambda: change_points(values, windows))  # finds of another rule: not these
        return found

    return find
