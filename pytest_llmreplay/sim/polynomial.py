"""The polynomial timing model: NVIDIA Dynamo mocker's fit of iteration time.

Notation as in :mod:`.timing`.

**polynomial** (:class:`PolynomialTiming`): the fit of NVIDIA Dynamo's mocker
(ai-dynamo/dynamo ``lib/mocker/src/common/perf_model.rs``, ``PerfModel::Polynomial``), in ms:

- prefill(T') = 4.209989e-07 * T'^2 + 1.518344e-02 * T' + 16.50142 for T' = P > 0 uncached
  batch tokens ("total new tokens across the batch"), else 0 (and never below 0);
- decode(p) = max(1, -25.74 * p^2 + 54.01 * p + 5.74) for D > 0, else 0, where p = clip(u, 0,
  1) is the share of KV blocks in use (Dynamo: active KV blocks * block size / total KV tokens);
- iteration = (prefill + decode) / 1000 s. Both are per forward pass: the mocker's vLLM
  scheduler loop (``lib/mocker/src/scheduler/vllm.rs``: ``simulate_prefill`` then
  ``simulate_decode``, each sleeping its predicted ms) runs them one after the other in every
  iteration, so a mixed batch costs the sum. (That loop sums the prefill polynomial per
  scheduled request chunk, paying the 16.5 ms constant per request; ``Batch`` carries only the
  total P, so the polynomial is applied to the total, as the perf model's own doc states.)

The coefficients (``prefill_coefficients``, ``decode_coefficients`` as [a, b, c] of a*x^2 + b*x
+ c) and the 1 ms floor (``decode_floor_ms``) are profile fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .timing import Batch, decode_span_points

DYNAMO_PREFILL = (4.209989e-07, 1.518344e-02, 1.650142e01)
DYNAMO_DECODE = (-25.74, 54.01, 5.74)
DYNAMO_DECODE_FLOOR_MS = 1.0


def _poly(coefficients: Sequence[float], x: Any) -> Any:
    a, b, c = coefficients
    return a * x * x + b * x + c


class PolynomialTiming:
    """Dynamo mocker's fit: prefill ms from batch tokens, decode ms from KV usage, summed."""

    def __init__(
        self,
        prefill_coefficients: Sequence[float] = DYNAMO_PREFILL,
        decode_coefficients: Sequence[float] = DYNAMO_DECODE,
        decode_floor_ms: float = DYNAMO_DECODE_FLOOR_MS,
    ) -> None:
        self.prefill_coefficients = tuple(float(x) for x in prefill_coefficients)
        self.decode_coefficients = tuple(float(x) for x in decode_coefficients)
        self.decode_floor_ms = decode_floor_ms

    def prefill_ms(self, tokens: int) -> float:
        return max(_poly(self.prefill_coefficients, tokens), 0.0) if tokens > 0 else 0.0

    def decode_ms(self, kv_usage: float) -> float:
        p = min(max(kv_usage, 0.0), 1.0)
        return max(_poly(self.decode_coefficients, p), self.decode_floor_ms)

    def iteration_s(self, batch: Batch) -> float:
        decode = self.decode_ms(batch.kv_usage) if batch.decode_seqs > 0 else 0.0
        return (self.prefill_ms(batch.prefill_tokens) + decode) / 1000

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        _, usage = decode_span_points(seqs, kv_tokens, kv_usage, usage_step, steps)
        if seqs <= 0:
            return np.zeros(steps)
        return np.maximum(_poly(self.decode_coefficients, np.clip(usage, 0.0, 1.0)), self.decode_floor_ms) / 1000


__all__ = ["PolynomialTiming", "DYNAMO_PREFILL", "DYNAMO_DECODE", "DYNAMO_DECODE_FLOOR_MS"]
