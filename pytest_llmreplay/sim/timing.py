"""How long one engine iteration takes: the question every timing model answers, and jitter.

The engine asks one question per iteration (one forward pass, vLLM v1 style: chunked prefill and
decode in the same batch): how long does it take? A :class:`Batch` describes the pass; a
:class:`TimingModel` answers in seconds. Decode-only stretches are asked for at once
(:meth:`TimingModel.decode_span_s`, numpy, no Python loop over the steps); span step ``i``
(0-based) equals ``iteration_s`` of the decode-only batch with ``kv_tokens + i * seqs`` and
``kv_usage + i * usage_step``. An empty batch (no token computed) takes 0 s in every model.

Notation for one batch: ``P`` = ``prefill_tokens``, ``C`` = ``prefill_context``, ``D`` =
``decode_seqs``, ``K`` = ``kv_tokens``, ``u`` = ``kv_usage``, ``R`` = ``new_requests`` (only the
roofline reads it: the host's set-up of each request it schedules for the first time); ``T = P +
D`` tokens computed. A decode span admits nobody (``R`` = 0).

The models: :mod:`.roofline` (from public model and hardware specs), :mod:`.polynomial` (NVIDIA
Dynamo mocker's fit), :mod:`.timing_table` (interpolated measured points). :mod:`.profile` reads
the profile files that pick and configure one.

**jitter** (any model; ``timing.jitter`` = ``cv``, default 0): real iterations of the same batch
vary (host scheduling, kernels picked per shape, the network). With ``cv`` > 0 every iteration's
time is the model's times a factor ``exp(sigma * z - sigma^2 / 2)``, ``z`` standard normal and
``sigma^2 = ln(1 + cv^2)``: log-normal with mean 1 and coefficient of variation ``cv``, so mean
times stay the model's. Draws come from a seeded generator per engine (:class:`JitteredTiming`):
offline, the same seed gives the same numbers, another seed other numbers with the same means, as
two runs on a real server differ (what a regression gate has to tell from a regression). It
does not desynchronise requests that share every iteration (equal lengths, admitted together):
their tokens still come out together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class Batch:
    """One iteration's work, summed over its requests."""

    prefill_tokens: int  # new (uncached) prompt tokens computed this iteration (chunked prefill)
    prefill_context: (
        int  # Σ over prefilling requests of the context their chunk attends to (cached + earlier chunks + this chunk)
    )
    decode_seqs: int  # requests decoding one token this iteration
    kv_tokens: int  # Σ tokens already in KV over the decoding requests (what decode attention reads)
    kv_usage: float  # used KV blocks / total KV blocks, 0..1
    new_requests: int = 0  # requests scheduled for the first time (or again after a preemption) this iteration


class TimingModel(Protocol):
    def iteration_s(self, batch: Batch) -> float:
        """Duration of one iteration over ``batch``, in seconds."""
        ...

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        """Durations of `steps` consecutive decode-only iterations of `seqs` requests, kv_tokens growing by `seqs` and kv_usage by `usage_step` each iteration; vectorised (numpy), no Python loop over steps."""
        ...


def decode_span_points(
    seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """kv_tokens and kv_usage of each step of a decode span (step i: ``kv_tokens + i * seqs``, ``kv_usage + i * usage_step``)."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    i = np.arange(steps, dtype=np.float64)
    return kv_tokens + seqs * i, kv_usage + usage_step * i


class JitteredTiming:
    """``base``'s iteration times, each times a log-normal factor of mean 1 and coefficient of
    variation ``cv`` (module docstring), drawn from ``numpy.random.default_rng(seed)``."""

    def __init__(self, base: TimingModel, cv: float, seed: Any) -> None:
        if not cv > 0:
            raise ValueError(f"cv must be > 0, got {cv}")
        self.base = base
        self._sigma = math.sqrt(math.log1p(cv * cv))
        self._rng = np.random.default_rng(seed)

    def _factors(self, count: int) -> np.ndarray:
        return np.exp(self._sigma * self._rng.standard_normal(count) - self._sigma * self._sigma / 2)

    def iteration_s(self, batch: Batch) -> float:
        return self.base.iteration_s(batch) * float(self._factors(1)[0])

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        return self.base.decode_span_s(seqs, kv_tokens, kv_usage, usage_step, steps) * self._factors(steps)


__all__ = ["Batch", "TimingModel", "JitteredTiming", "decode_span_points"]
