"""When a point of a capacity search stops early (:mod:`~pytest_llmreplay.search.capacity` runs the points).

**Early stop** (:class:`StopRule`, on by default): a point stops once its SLOs can no longer be
met whatever its remaining requests do, as GuideLLM stops an over-saturated benchmark. With N
the requests planned (an upper bound on those measured) and b the requests seen so far that
breach a limit: an upper bound on a percentile ``pq`` (``max``: q = 1) of ``ttft``, ``ttfo``,
``tpot`` or ``latency`` is lost once b >= N - floor((N - 1) q) (the value at position floor((N - 1) q) of the
sorted N is then a breaching one, and linear interpolation cannot pull the percentile under the
limit); ``error_rate < x`` (``<=``, ``==``) once failed / N is over what it allows; ``goodput >=
x`` (share) once (N - not good) / N < x. An overloaded open-loop point's queue, and so its TTFT,
grows, which is how it hits the first rule early. A stopped point has failed.

**Over-saturation** (:class:`QueueGrowth`, open-loop points: ``rate`` and ``trace``): a point
also stops once its queue plainly grows without bound, whatever its SLOs (a ``tpot`` bound alone
may hold while requests pile up: the load is not carried). GuideLLM's over-saturation detector
(``--stop-over-saturated``) fits, over a window of the latest 75% of requests, the slopes of the
requests in flight and of TTFT against time, and stops when both are positive beyond their
margin of error, once 30 s have passed and half the window's TTFTs exceed 2.5 s, counting at
most one observation per second (requests close in time are correlated). Here the one signal is
each finished request's wait: w = first token - scheduled time (the client's and the server's
queues, plus prefill), against its scheduled time s; in an open loop at arrival rate λ over the
service rate μ, w grows as (λ/μ - 1) s, and stays level below μ. Over the window (the latest
75% of the finished requests seen, at least :data:`SATURATION_MIN_REQUESTS`) the least-squares
slope b of w on s, its standard error with n_eff = min(n, window span in seconds) independent
observations (se² = RSS / (n - 2) / Sxx * n / n_eff, n_eff >= 5), and t = Student's t quantile
0.975 at n_eff - 2 degrees of freedom: the point is over-saturated when b >= 0.1 (the wait grows
by at least a tenth of a second per second: λ at least ~10% over μ) and b - t se > 0 (its 95%
interval lies above 0). A stationary queue near capacity (λ < μ) does not trip it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..gate.history import t_quantile
from ..metrics.reasoning import ttfo
from ..metrics.result import latency, tpot, ttft
from ..metrics.slo import OPERATORS, SLO
from ..replayer.records import RequestRecord

# per-request metrics an SLO's percentile bound is counted on
REQUEST_VALUE = {"ttft": ttft, "ttfo": ttfo, "tpot": tpot, "latency": latency}
# over-saturation (module docstring)
SATURATION_WINDOW = 0.75
SATURATION_MIN_REQUESTS = 10
SATURATION_MIN_EFFECTIVE = 5.0
SATURATION_MIN_GROWTH = 0.1
OPEN_LOOP_MODES = ("rate", "timestamps")


@dataclass
class QueueGrowth:
    """The over-saturation test (module docstring) on finished requests' (scheduled time,
    wait), kept as running sums over the sliding window."""

    window: deque = field(default_factory=deque)
    seen: int = 0
    sums: list[float] = field(default_factory=lambda: [0.0] * 5)  # Σs, Σw, Σs², Σsw, Σw²

    def add(self, scheduled: float, wait: float) -> str | None:
        """Count one finished request; why the point is over-saturated, or None."""
        self.seen += 1
        self._shift((scheduled, wait), 1)
        while len(self.window) > math.ceil(SATURATION_WINDOW * self.seen):
            self._shift(self.window[0], -1)
        n = len(self.window)
        if n < SATURATION_MIN_REQUESTS:
            return None
        sum_s, sum_w, sum_ss, sum_sw, sum_ww = self.sums
        sxx, sxy, syy = sum_ss - sum_s**2 / n, sum_sw - sum_s * sum_w / n, sum_ww - sum_w**2 / n
        if sxx <= 0 or sxy / sxx < SATURATION_MIN_GROWTH:
            return None
        slope = sxy / sxx
        times = [s for s, _ in self.window]  # only for a steep enough slope: rare below capacity
        effective = min(n, max(times) - min(times))
        if effective < SATURATION_MIN_EFFECTIVE:
            return None
        rss = max(syy - sxy**2 / sxx, 0.0)
        half_width = t_quantile(0.975, effective - 2) * math.sqrt(rss / (n - 2) / sxx * n / effective)
        if slope - half_width > 0:
            return (
                f"over-saturated: the wait for a first token grows {slope:.3g} s per s of schedule (95% interval ±{half_width:.2g}) "
                f"over the last {n} requests: arrivals outpace completions, the queue grows without bound"
            )
        return None

    def _shift(self, point: tuple[float, float], sign: int) -> None:
        s, w = point
        for index, value in enumerate((s, w, s * s, s * w, w * w)):
            self.sums[index] += sign * value
        if sign > 0:
            self.window.append(point)
        else:
            self.window.popleft()


@dataclass
class StopRule:
    """Stops a point once its SLOs are lost (see the module docstring); ``planned`` = N.
    Records scheduled in the first ``warmup_s`` are not counted; the first ``warmup_requests``
    (by schedule, not known until the end) are allowed for: each count must exceed its limit
    by that many. ``saturation``: the over-saturation test of an open-loop point (None: a
    closed loop, whose requests in flight are bounded)."""

    slos: Sequence[SLO]
    planned: int
    limits: Mapping[str, float]
    warmup_s: float = 0.0
    warmup_requests: int = 0
    failed: int = 0
    not_good: int = 0
    breaches: dict[str, int] = field(default_factory=dict)
    saturation: QueueGrowth | None = None

    def reason(self, record: RequestRecord) -> str | None:
        """Count ``record``; why the point is lost, or None while it may still pass."""
        if record.status == "cancelled" or record.scheduled_s < self.warmup_s:
            return None
        slack = self.warmup_requests
        self.failed += record.status == "failed"
        values = {name: compute(record) for name, compute in REQUEST_VALUE.items()} if record.status == "ok" else {}
        self.not_good += record.status == "failed" or any(
            (value := values.get(name)) is not None and value > limit for name, limit in self.limits.items()
        )
        n = self.planned
        for slo in self.slos:
            if slo.metric in REQUEST_VALUE and (slo.stat == "max" or slo.stat.startswith("p")):
                value = values.get(slo.metric)
                if value is not None and not (value < slo.value if slo.op == "<" else value <= slo.value):
                    self.breaches[slo.key] = self.breaches.get(slo.key, 0) + 1
                q = 1.0 if slo.stat == "max" else float(slo.stat[1:]) / 100
                if self.breaches.get(slo.key, 0) >= n - math.floor((n - 1) * q) + slack:
                    return f"{slo.key} {slo.text} is lost: {self.breaches[slo.key]} of at most {n} requests over it"
            elif slo.metric == "error_rate" and not _holds(slo, (self.failed - slack) / n):
                return f"error_rate {slo.text} is lost: {self.failed} of at most {n} requests failed"
            elif slo.metric == "goodput" and slo.op in (">", ">=") and not _holds(slo, (n - self.not_good + slack) / n):
                return f"goodput {slo.text} is lost: {self.not_good} of at most {n} requests are not good"
        if self.saturation is not None and record.status == "ok" and record.first_token_s is not None:
            return self.saturation.add(record.scheduled_s, record.first_token_s - record.scheduled_s)
        return None


def _holds(slo: SLO, value: float) -> bool:
    return OPERATORS[slo.op](value, slo.value)
