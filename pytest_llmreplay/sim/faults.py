"""Seeded fault injection for the simulated HTTP server, so users can test their error SLOs.

The server numbers the completion requests it receives ``n = 0, 1, 2, ...`` in arrival order
(refused ones included). Request ``n`` draws ``u = uniform(0, 1)`` from a generator seeded with
``(seed, n)`` and gets at most one fault: ``u < error_rate`` -> HTTP 500 before any token;
then the next ``stall_rate`` of the unit interval -> the response stops for ``stall_s`` seconds
after a token drawn in ``[1, max(output - 1, 1)]``, then goes on (a whole response comes
``stall_s`` late); then the next ``disconnect_rate`` -> the connection is closed after such a
token. So each rate is the share of requests that get that fault: over N requests its count is
Binomial(N, rate). The same seed and arrival order give the same faults.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..errors import LLMReplayError
from ..workloads.prompts import stable_hash


@dataclass(frozen=True)
class Fault:
    kind: str  # error | stall | disconnect
    after_tokens: int = 0


@dataclass(frozen=True)
class FaultConfig:
    """Shares of requests (0..1) that fail each way; ``stall_s``: how long a stall lasts."""

    error_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 10.0
    disconnect_rate: float = 0.0
    seed: int = 0

    def validate(self) -> None:
        """Raise :class:`LLMReplayError` naming the first bad setting."""
        for name in ("error_rate", "stall_rate", "disconnect_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise LLMReplayError(f"{name}: expected a share between 0 and 1, got {value!r}")
        if self.error_rate + self.stall_rate + self.disconnect_rate > 1.0:
            raise LLMReplayError("error_rate + stall_rate + disconnect_rate: expected at most 1 in all")
        if not 0 <= self.stall_s < math.inf:
            raise LLMReplayError(f"stall_s: expected a finite number of seconds >= 0, got {self.stall_s!r}")

    @property
    def active(self) -> bool:
        return self.error_rate > 0 or self.stall_rate > 0 or self.disconnect_rate > 0

    def draw(self, request_number: int, max_tokens: int) -> Fault | None:
        """The fault of request ``request_number`` (generating ``max_tokens`` tokens), or None."""
        if not self.active:
            return None
        rng = random.Random(stable_hash("fault", self.seed, request_number))
        u = rng.random()
        if u < self.error_rate:
            return Fault("error")
        after = rng.randint(1, max(max_tokens - 1, 1))
        if u < self.error_rate + self.stall_rate:
            return Fault("stall", after)
        if u < self.error_rate + self.stall_rate + self.disconnect_rate:
            return Fault("disconnect", after)
        return None
