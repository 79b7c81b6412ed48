"""How early a simulated iteration's tokens are handed out on a wall clock.

Handing tokens out takes clock time on a wall clock (the HTTP server writes one event per stream
from ``on_emit``: about 5 ms for 1,000 streams). So an iteration's tokens are handed out early,
the timer set ``lead + late`` before its simulated end, both measured online on the machine it
runs on (:class:`WakeTiming`), so that the writes straddle the simulated instant instead of all
trailing it::

    lead = min(0.5 * median(hand-out seconds per request) * requests to hand out, MAX_LEAD_S)
    late = min(max(median(timer lateness), 0), MAX_LATE_S)

over the last ``TIMING_WINDOW`` iterations (lower medians; lateness: how long after the time asked the timer's
wake-up ran; an event loop polls in whole milliseconds, about 1 ms). Medians, not means: the
hand-out that a garbage collection or the other process stretched, or the wake-up that waited
behind a burst of requests, is rare and must not send every later iteration's tokens early.
The next iteration is still scheduled at the simulated end, so arrivals join exactly as
without the lead. On the virtual clock a hand-out takes no time, timers fire on time, and both
are exactly 0. Used by an engine (sim/engine.py) and by a lockstep group of engines
(sim/lockstep.py).
"""

from __future__ import annotations

from collections import deque

TIMING_WINDOW = 31  # iterations whose wake-up lateness and hand-out time set the next lead (medians)
MAX_LATE_S = 0.005  # bounds of the early start (module docstring): a stalled machine must not
MAX_LEAD_S = 0.025  # make every later token go out far too early


class WakeTiming:
    """How early an iteration's hand-out starts on a wall clock (module docstring): medians of
    the last ``TIMING_WINDOW`` timer latenesses and hand-out times per request, bounded."""

    def __init__(self) -> None:
        self.lateness: deque[float] = deque(maxlen=TIMING_WINDOW)
        self.per_request: deque[float] = deque(maxlen=TIMING_WINDOW)

    def early_s(self, requests: int) -> float:
        """lead + late for a hand-out to ``requests`` requests."""
        if not any(self.lateness) and not any(self.per_request):  # all 0 (the virtual clock's): no sorting
            return 0.0
        late = min(max(_median(self.lateness), 0.0), MAX_LATE_S)
        return late + min(0.5 * _median(self.per_request) * requests, MAX_LEAD_S)

    def handed_out(self, seconds: float, requests: int) -> None:
        if requests:
            self.per_request.append(seconds / requests)


def _median(values: deque[float]) -> float:
    """The (lower) median of ``values``, 0 when empty: of two values the smaller, so that one
    outlier never moves it."""
    return sorted(values)[(len(values) - 1) // 2] if values else 0.0
