"""The table timing model: iteration time interpolated in measured points.

Notation as in :mod:`.timing`.

**table** (:class:`TableTiming`): measured points, linear interpolation clamped at both ends
(``numpy.interp``): prefill ms vs P; decode ms vs D, or bilinear in (D, K) on a grid
(interpolate each of the two bracketing D rows in K, then between them in D). Combined like the
polynomial: iteration = (prefill(P) [P > 0] + decode [D > 0]) / 1000 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .timing import Batch, decode_span_points


class TableTiming:
    """Interpolation in measured points (ms), linear and clamped; prefill + decode summed.

    ``decode_ms`` is 1-D (one value per ``decode_seqs`` point) or, with ``decode_kv_tokens``, a
    grid ``decode_ms[i][j]`` at (``decode_seqs[i]``, ``decode_kv_tokens[j]``), bilinear.
    """

    def __init__(
        self,
        prefill_tokens: Sequence[float],
        prefill_ms: Sequence[float],
        decode_seqs: Sequence[float],
        decode_ms: Sequence[float] | Sequence[Sequence[float]],
        decode_kv_tokens: Sequence[float] | None = None,
    ) -> None:
        self.prefill_tokens = np.asarray(prefill_tokens, dtype=np.float64)
        self.prefill_ms_points = np.asarray(prefill_ms, dtype=np.float64)
        self.decode_seqs = np.asarray(decode_seqs, dtype=np.float64)
        self.decode_kv_tokens = None if decode_kv_tokens is None else np.asarray(decode_kv_tokens, dtype=np.float64)
        self.decode_ms_points = np.asarray(decode_ms, dtype=np.float64)
        expected = (
            (len(self.decode_seqs),)
            if self.decode_kv_tokens is None
            else (len(self.decode_seqs), len(self.decode_kv_tokens))
        )
        if self.decode_ms_points.shape != expected:
            raise ValueError(f"decode_ms has shape {self.decode_ms_points.shape}, expected {expected}")

    def prefill_ms(self, tokens: int) -> float:
        return float(np.interp(tokens, self.prefill_tokens, self.prefill_ms_points)) if tokens > 0 else 0.0

    def decode_ms(self, seqs: int, kv_tokens: Any) -> Any:
        """Decode ms at ``seqs`` (a number) and ``kv_tokens`` (a number or an array)."""
        if self.decode_kv_tokens is None:
            value = np.interp(seqs, self.decode_seqs, self.decode_ms_points)
            return value if np.ndim(kv_tokens) == 0 else np.full(np.shape(kv_tokens), value)
        grid, rows = self.decode_seqs, self.decode_ms_points
        if len(grid) == 1:
            return np.interp(kv_tokens, self.decode_kv_tokens, rows[0])
        x = min(max(float(seqs), grid[0]), grid[-1])
        i = min(int(np.searchsorted(grid, x, side="right")) - 1, len(grid) - 2)
        f = (x - grid[i]) / (grid[i + 1] - grid[i])
        low = np.interp(kv_tokens, self.decode_kv_tokens, rows[i])
        high = np.interp(kv_tokens, self.decode_kv_tokens, rows[i + 1])
        return low * (1 - f) + high * f

    def iteration_s(self, batch: Batch) -> float:
        decode = float(self.decode_ms(batch.decode_seqs, batch.kv_tokens)) if batch.decode_seqs > 0 else 0.0
        return (self.prefill_ms(batch.prefill_tokens) + decode) / 1000

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        kv, _ = decode_span_points(seqs, kv_tokens, kv_usage, usage_step, steps)
        if seqs <= 0:
            return np.zeros(steps)
        return np.asarray(self.decode_ms(seqs, kv), dtype=np.float64) / 1000


__all__ = ["TableTiming"]
