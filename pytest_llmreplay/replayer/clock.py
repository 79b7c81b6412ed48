"""The only place that reads time or waits: a wall clock and a virtual clock.

The replay driver and the endpoints take a :class:`Clock` and never call ``time.*`` or
``asyncio.sleep`` themselves, so the same driver runs live (wall clock, real HTTP) and offline
(virtual clock: time jumps to the next timer whenever nothing is ready to run, so an hour of
simulated traffic replays in seconds and the same inputs give the same times).

Contract of a clock:

- ``now()``: seconds since an arbitrary origin, monotonic;
- ``await sleep(seconds)`` / ``await sleep_until(t)``: return at ``now() >= t`` (at once if past);
- ``run(coroutine)``: run the coroutine to completion on an event loop whose own ``time()`` is this
  clock, so asyncio timeouts (``asyncio.wait(..., timeout=)``) agree with ``now()``;
- ``pause(seconds)``: a blocking wait outside any event loop (waiting for a server to start);
- ``await settle()``: let what else is ready at this instant run first (the virtual clock runs
  every task that can still act at ``now()``; the wall clock yields once). The simulated engine
  settles before each iteration, so a request sent at the instant an iteration starts joins it.
"""

from __future__ import annotations

import asyncio
import gc
import selectors
import time
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from ..errors import LLMReplayError

T = TypeVar("T")
SETTLE_S = 1e-9  # the virtual clock's settle step: one loop resolution
# past 2**24 s (194 days) a float's step exceeds 2 * SETTLE_S, so now + SETTLE_S == now: a settle
# never fired and the event loop spun at 100% CPU for ever (a trace's session at 9.5e6 s replayed
# at --speedup 0.5); the virtual clock refuses to go there
MAX_VIRTUAL_S = 2.0**24


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_until(self, t: float) -> None: ...

    async def settle(self) -> None: ...

    def run(self, main: Coroutine[Any, Any, T]) -> T: ...

    def pause(self, seconds: float) -> None: ...


class WallClock:
    """Real time: ``time.perf_counter`` and ``asyncio.sleep`` on a standard event loop."""

    def now(self) -> float:
        return time.perf_counter()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    async def sleep_until(self, t: float) -> None:
        await asyncio.sleep(max(t - time.perf_counter(), 0.0))

    async def settle(self) -> None:
        await asyncio.sleep(0)

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(main)

    def pause(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))

    def epoch(self) -> float:
        """Seconds since the Unix epoch (``time.time()``): an instant other processes, and
        hosts whose clocks are synchronised (NTP), can name."""
        return time.time()

    def at_epoch(self, epoch: float) -> float:
        """This clock's reading at the instant ``epoch`` (seconds since the Unix epoch)."""
        return time.perf_counter() + (epoch - time.time())


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that, instead of blocking for ``timeout`` seconds, advances the virtual clock.

    Real file descriptors (the loop's self-pipe) are still polled without waiting, so callbacks
    scheduled from other threads are not lost; with no timer pending (``timeout is None``) it
    blocks for real, as any event loop with nothing to do does.
    """

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None):
        ready = super().select(0)
        if ready or timeout is None:
            return ready or super().select(None)
        if timeout > 0:
            self._clock.advance(timeout)
        return []


def check_virtual_span(seconds: float) -> None:
    """An :class:`LLMReplayError` when a virtual clock would reach ``seconds`` >= :data:`MAX_VIRTUAL_S`."""
    if seconds >= MAX_VIRTUAL_S:
        raise LLMReplayError(
            f"the replay's virtual time would reach {seconds:,.0f} s, past {MAX_VIRTUAL_S:,.0f} s (194 days), where the "
            f"simulator's clock can no longer tell events {SETTLE_S * 1e9:g} ns apart: the trace's times and delays, a "
            "speedup below 1 or a low rate spread the run that far; replay a part of it (max_requests, duration_s) or at a "
            "higher speedup or rate"
        )


class VirtualClock:
    """Simulated time starting at ``start``: it moves only when every task is waiting on a timer,
    and then straight to the earliest timer. Deterministic: no real time is read."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on; an :class:`LLMReplayError` past :data:`MAX_VIRTUAL_S`
        (the replay checks its plan against it first, :func:`check_virtual_span`: this is the
        stop for what no plan shows, rather than a loop that spins for ever)."""
        check_virtual_span(self._now + seconds)
        self._now += seconds

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    async def sleep_until(self, t: float) -> None:
        await asyncio.sleep(max(t - self._now, 0.0))

    async def settle(self) -> None:
        """Wait :data:`SETTLE_S`: a timer that fires only once nothing else is ready."""
        await asyncio.sleep(SETTLE_S)

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` on an event loop whose time is this clock, with the cyclic garbage
        collector paused (and resumed after, if it was on): an offline replay keeps every
        record it makes and creates no reference cycles (reference counting frees the rest),
        so the collector's passes found nothing to free and only re-walked the growing list of
        records: 3% of a 100,000-request replay's instructions, and more of its time, the walks
        missing the cache (bench/README.md)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run(main)
        finally:
            if collecting:
                gc.enable()

    def _run(self, main: Coroutine[Any, Any, T]) -> T:
        loop = asyncio.SelectorEventLoop(_JumpingSelector(self))
        loop.time = self.now  # type: ignore[method-assign]  # on purpose: the loop's timers run on this virtual clock
        loop._clock_resolution = 1e-9  # type: ignore[attr-defined]  # private, not in the stubs; timers fire at their time, not a tick later
        try:
            return loop.run_until_complete(main)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def pause(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))
