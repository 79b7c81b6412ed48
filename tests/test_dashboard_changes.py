"""The dashboard's change points are ``llmreplay history``'s: :func:`~pytest_llmreplay.dashboard.
changes.change_points`, which remembers each window of Otava's split step, gives the indices of
:func:`~pytest_llmreplay.gate.history.change_points` (Otava's own ``compute_change_points``) on
series that grow one result at a time, and runs e-divisive only on the windows that reach the
new end."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pytest_llmreplay.dashboard.cache import DigestCache
from pytest_llmreplay.dashboard.changes import change_points, finder
from pytest_llmreplay.gate.history import CHANGE_POINT_WINDOW
from pytest_llmreplay.gate.history import change_points as history_change_points

LENGTH = 330


def stepped(seed: int, noise: float) -> list[float]:
    """A series of :data:`LENGTH` values with four steps of 5-20% at random places and ``noise``
    (relative, normal), rounded to 6 digits as stored figures are."""
    rng = random.Random(seed)
    steps = {rng.randrange(20, LENGTH): rng.choice((-1, 1)) * rng.uniform(0.05, 0.2) for _ in range(4)}
    level, values = 100.0, []
    for index in range(LENGTH):
        level *= 1 + steps.get(index, 0.0)
        values.append(float(f"{level * (1 + rng.gauss(0, noise)):.6g}"))
    return values


@pytest.mark.parametrize(("seed", "noise"), [(1, 0.0), (2, 0.002), (3, 0.015), (4, 0.05), (5, 0.3)])
def test_the_same_change_points_as_llmreplay_history_while_a_series_grows(tmp_path, seed, noise):
    values = stepped(seed, noise)
    windows = DigestCache(tmp_path, "windows")
    found = set()
    for length in [*range(12), *range(LENGTH - 60, LENGTH + 1)]:
        made = windows.made
        expected = history_change_points(values[:length])
        assert change_points(np.array(values[:length]), windows) == expected, length
        found.update(expected)
        if length > LENGTH - 60:  # grown by one: only the windows that reach its end are run
            assert windows.made - made <= 3, length
    assert found or noise == 0.0  # steps were found (a flat series has none to find)


def test_a_series_seen_before_is_not_run_again(tmp_path):
    listed = stepped(6, 0.015)
    values = np.array(listed)
    series, windows = DigestCache(tmp_path, "change_points"), DigestCache(tmp_path, "windows")
    find = finder(series, windows)
    first = find(values)
    assert first == history_change_points(listed) and first
    series.save()
    windows.save()
    again = DigestCache(tmp_path, "change_points")
    made = windows.made
    assert finder(again, windows)(values) == first and again.made == 0 and windows.made == made
    assert len(values) > 4 * CHANGE_POINT_WINDOW
