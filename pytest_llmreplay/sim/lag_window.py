"""The simulated server's last emit lags, and their quantiles computed off the event loop.

Every chunk a stream writes adds one lag (write time - simulated time). A ``/metrics`` scrape
wants exact quantiles of the last ``size`` of them; sorting 100,000 values takes ~5 ms, and a
server that spends them on its event loop delays every stream's next hand-out by as much (that
pause *is* timing error). So:

- ``add``/``extend`` are a plain list's (the cheapest thing in the hand-out loop); :meth:`trim`,
  once per hand-out, copies the list into a numpy ring of ``size`` values in one slice
  assignment once it holds ``FLUSH`` values, and so does a snapshot;
- :meth:`summaries` copies the ring (a memcpy, ~0.1 ms for 100,000 values) on the loop, then
  computes the quantiles in a worker thread: numpy's partition and ``abs`` release the GIL, so
  the loop keeps handing out tokens meanwhile.

Quantiles are numpy's default (linear interpolation between order statistics), exactly as over
the last ``size`` lags.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

FLUSH = 8192  # values buffered in the list before they go into the ring


class LagWindow:
    """The last ``size`` lags (seconds)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ring = np.empty(size, dtype=np.float64)
        self._next = 0  # ring index the next flushed value goes to
        self._filled = 0  # values in the ring (<= size)
        self._pending: list[float] = []
        self.add = self._pending.append  # one C call per chunk in the hand-out loop
        self.extend = self._pending.extend

    def trim(self) -> None:
        """Move the pending values into the ring once there are ``FLUSH`` of them: call it once
        per hand-out, after the writes (memory then stays bounded by one hand-out + ``FLUSH``)."""
        if len(self._pending) >= FLUSH:
            self._flush()

    def _flush(self) -> None:
        """Copy the pending values into the ring, oldest overwritten first."""
        values = np.asarray(self._pending[-self.size :], dtype=np.float64)
        self._pending.clear()
        first = min(len(values), self.size - self._next)
        self._ring[self._next : self._next + first] = values[:first]
        self._ring[: len(values) - first] = values[first:]
        self._next = (self._next + len(values)) % self.size
        self._filled = min(self._filled + len(values), self.size)

    def values(self) -> np.ndarray:
        """A copy of the window's values (in no particular order)."""
        self._flush()
        return self._ring[: self._filled].copy()

    async def summaries(
        self, lag_quantiles: Sequence[float], error_quantiles: Sequence[float]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """(quantiles of the lags, quantiles of their absolute values, count), the sorting done
        in a worker thread; NaN quantiles while the window is empty."""
        values = self.values()
        if not len(values):
            return np.full(len(lag_quantiles), np.nan), np.full(len(error_quantiles), np.nan), 0

        def compute() -> tuple[np.ndarray, np.ndarray]:
            return np.quantile(values, lag_quantiles), np.quantile(np.abs(values), error_quantiles)

        lags, errors = await asyncio.to_thread(compute)
        return lags, errors, len(values)
