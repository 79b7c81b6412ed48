"""Capacity at SLO: the highest load an endpoint carries while every request-level SLO holds.

**Load** (``by``):

- ``rate``: sessions per second, open loop. ``arrival`` ``poisson`` (seeded) or ``constant``
  spacing at that rate, or ``trace``: the workload's own arrivals scaled, speedup = rate / the
  trace's rate ((n - 1) / span of its arrival times, n sessions);
- ``concurrency``: sessions in flight, closed loop (whole numbers).

**A point** is one ordinary replay at one load (its :class:`~pytest_llmreplay.metrics.Result`
is kept). It *passes* when every SLO of the plan holds on its summary (``ttft.p99 < 1s`` on the
point's TTFT p99) and it was not stopped early. Goodput's per-request limits are the plan's
(:func:`~pytest_llmreplay.slo.per_request_limits`).

**Algorithm** (:func:`find_capacity`); every run counts against ``budget``:

1. Estimates (``rate`` only, for a bound the plan leaves out; in parallel processes when the
   target is the offline simulator, whose points cannot disturb each other): as GuideLLM starts
   its sweep, the synchronous run (concurrency 1; for a missing ``min``) and the saturating run
   (every session at once; for a missing ``max``). Each is a closed loop, not a rate: its achieved
   session rate (sessions / run time) only says where to look, and it is never the capacity nor
   an end of the bracket. They run to their end (a stopped run's rate would be no estimate).
2. The ends, two points at the load (in parallel as above): low = ``min``, else the synchronous
   run's rate; high = ``max``, else the saturating run's rate (``concurrency``: ``min``, default
   1, and ``max``, default every planned session at once, both real points already). High is
   run only when above low. If low fails, no load meets the SLOs: capacity 0, bracket [0, low].
3. Growth, when high passes (or was not above low) on a ``rate`` search with no ``max``: a
   point at twice the highest passing rate, until one fails or the budget is spent (even when
   the saturating run met the SLOs: an open-loop point may still fail, over-saturated). No load
   failed (or ``max``, or by ``concurrency`` every session at once, passed): capacity is at
   least the highest load that passed, no upper bound found (``high`` None; ``at_least`` in the
   stored search).
4. Bisection between the highest pass and the lowest fail: while high - low > ``resolution`` *
   high (concurrency: and high - low > 1) and fewer than ``budget`` runs are done: a point at
   mid = (low + high) / 2 (concurrency: rounded down); pass: low = mid, fail: high = mid.
5. Capacity = low: always the load of a point run at that load that passed (or 0); its
   uncertainty is the bracket [low, high], whose ends are both points run at their load.

**Early stop** (:class:`StopRule`, on by default): a point stops once its SLOs can no longer be
met whatever its remaining requests do, as GuideLLM stops an over-saturated benchmark. With N
the requests planned (an upper bound on those measured) and b the requests seen so far that
breach a limit: an upper bound on a percentile ``pq`` (``max``: q = 1) of ``ttft``, ``tpot`` or
``latency`` is lost once b >= N - floor((N - 1) q) (the value at position floor((N - 1) q) of the
sorted N is then a breaching one, and linear interpolation cannot pull the percentile under the
limit); ``error_rate < x`` (``<=``, ``==``) once failed / N is over what it allows; ``goodput >=
x`` (share) once (N - not good) / N < x. An overloaded open-loop point's queue, and so its TTFT,
grows, which is how it hits the first rule early. A stopped point has failed; the estimates of a
``rate`` search are never stopped (their achieved rates say where to look).

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
import pickle
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from functools import cached_property
from statistics import NormalDist
from typing import Any, Callable, Mapping, Protocol, Sequence

from .driver import Replay, ReplayRun, ReplaySettings, RequestRecord, session_plan
from .errors import LLMReplayError
from .metrics import Result, latency, tpot, ttft
from .prompts import PromptFactory
from .slo import OPERATORS, SLO, Check, canonical, check_slos, parse_slos, per_request_limits
from .workload import Workload

BY = ("rate", "concurrency")
ARRIVALS = ("poisson", "constant", "trace")
DEFAULT_RESOLUTION = 0.05
DEFAULT_BUDGET = 12
PLAN_KEYS = ("by", "slo", "min", "max", "resolution", "budget", "arrival", "early_stop")
# settings the search sets itself at each point
VARIED_SETTINGS = ("mode", "rate", "concurrency", "arrival")
# roles of the closed-loop runs that only say where a rate search looks (module docstring)
ESTIMATE_ROLES = ("sync", "saturate")
# per-request metrics the SLOs of a plan may bound, and the shares checked per point
REQUEST_VALUE = {"ttft": ttft, "tpot": tpot, "latency": latency}
PLAN_METRICS = ("ttft", "tpot", "latency", "itl", "error_rate", "goodput")
# over-saturation (module docstring)
SATURATION_WINDOW = 0.75
SATURATION_MIN_REQUESTS = 10
SATURATION_MIN_EFFECTIVE = 5.0
SATURATION_MIN_GROWTH = 0.1
OPEN_LOOP_MODES = ("rate", "timestamps")


class Target(Protocol):
    """Where points go: a fresh endpoint and clock per replay (:class:`~.target.Target`).
    ``kind == "offline"`` (the simulator in virtual time) lets points run in parallel processes,
    which needs the target, workload and prompts to pickle."""

    kind: str
    gpus: int

    def endpoint(self) -> Any: ...

    def clock(self) -> Any: ...


@dataclass(frozen=True)
class CapacityPlan:
    """What to search: ``by`` rate or concurrency, the SLOs each point must meet, the load's
    bounds (None: found by the bracketing step), the resolution (a fraction of the load), the
    most points to run, the arrival pattern of rate points, and whether points stop early."""

    by: str
    slo: Mapping[str, str]
    min: float | None = None
    max: float | None = None
    resolution: float = DEFAULT_RESOLUTION
    budget: int = DEFAULT_BUDGET
    arrival: str = "poisson"
    early_stop: bool = True

    @cached_property
    def slos(self) -> list[SLO]:
        return parse_slos(self.slo)

    def validate(self) -> None:
        """:class:`LLMReplayError` naming the first bad key (``capacity.<key>: ...``)."""
        if self.by not in BY:
            raise LLMReplayError(f"capacity.by: expected one of {', '.join(BY)}, got {self.by!r}")
        if self.arrival not in ARRIVALS:
            raise LLMReplayError(f"capacity.arrival: expected one of {', '.join(ARRIVALS)}, got {self.arrival!r}")
        if self.arrival != "poisson" and self.by != "rate":
            raise LLMReplayError(f"capacity.arrival: applies to a search by rate; this one is by {self.by}")
        if not isinstance(self.slo, Mapping) or not self.slo:
            raise LLMReplayError("capacity.slo: expected the SLOs each load must meet, e.g. {'ttft.p99': '< 1s'}")
        try:
            slos = self.slos
        except LLMReplayError as exc:
            raise LLMReplayError(f"capacity.slo: {exc}") from None
        for slo in slos:
            per_request = slo.metric in ("ttft", "tpot", "latency", "itl") and slo.op in ("<", "<=")
            share = slo.metric in ("error_rate", "goodput") and slo.stat == "value"
            if not (per_request or share):
                raise LLMReplayError(f"capacity.slo {slo.key!r}: cannot be evaluated per request; expected an upper bound (< or <=) on ttft, tpot, "
                                     "latency or itl, or an error_rate or goodput share")
        for name in ("min", "max"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf):
                raise LLMReplayError(f"capacity.{name}: expected a number > 0, got {value!r}")
            if value is not None and self.by == "concurrency" and value != int(value):
                raise LLMReplayError(f"capacity.{name}: a concurrency is a whole number, got {value!r}")
        if self.min is not None and self.max is not None and self.min >= self.max:
            raise LLMReplayError(f"capacity.min: expected less than the max ({self.max:g}), got {self.min:g}")
        if isinstance(self.resolution, bool) or not isinstance(self.resolution, (int, float)) or not 0 < self.resolution < 1:
            raise LLMReplayError(f"capacity.resolution: expected a share between 0 and 1 such as '5%' or 0.05, got {self.resolution!r}")
        first = self.first_runs
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < first:
            estimates = "" if first == 2 else f": {first - 2} estimate{'s' if first > 3 else ''} and the two ends"
            raise LLMReplayError(f"capacity.budget: expected a whole number of runs >= {first} (the search starts with {first}{estimates}), got {self.budget!r}")

    @property
    def first_runs(self) -> int:
        """Runs before the search can bisect: the two ends, and by rate an estimate for each
        bound left out (module docstring)."""
        return 2 + (self.by == "rate") * ((self.min is None) + (self.max is None))

    def as_dict(self) -> dict[str, Any]:
        """The plan as stored in a result's settings, its SLOs written canonically
        (:func:`~pytest_llmreplay.slo.canonical`: ``<1s`` and ``< 1000ms`` are one setting)."""
        return {key: (dict(canonical(slo) for slo in self.slos) if key == "slo" else getattr(self, key)) for key in PLAN_KEYS}


def parse_resolution(value: Any) -> Any:
    """``"5%"`` -> 0.05, ``"0.05"`` -> 0.05; a number is a fraction; anything else is returned
    as it is, for :meth:`CapacityPlan.validate` to name."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return value


def parse_capacity(data: Any) -> CapacityPlan:
    """A checked plan from the marker's or spec file's ``capacity`` mapping."""
    if not isinstance(data, Mapping):
        raise LLMReplayError(f"capacity: expected a mapping such as {{by: rate, slo: {{ttft.p99: '< 1s'}}}}, got {data!r}")
    unknown = [key for key in data if key not in PLAN_KEYS]
    if unknown:
        raise LLMReplayError(f"capacity.{unknown[0]}: unknown key; expected one of {', '.join(PLAN_KEYS)}")
    if "by" not in data:
        raise LLMReplayError(f"capacity.by: missing; expected one of {', '.join(BY)}")
    options = dict(data)
    if "resolution" in options:
        options["resolution"] = parse_resolution(options["resolution"])
    if "early_stop" in options and not isinstance(options["early_stop"], bool):
        raise LLMReplayError(f"capacity.early_stop: expected true or false, got {options['early_stop']!r}")
    plan = CapacityPlan(**options)
    plan.validate()
    return plan


def check_test_slos(slos: Sequence[SLO], plan: CapacityPlan | None) -> None:
    """A test's ``capacity.*`` SLOs need a search by the same load."""
    for slo in slos:
        if slo.metric == "capacity" and plan is None:
            raise LLMReplayError(f"slo {slo.key!r}: needs the capacity key (what to search: by, slo, min, max, resolution)")
        if slo.metric == "capacity" and slo.stat != plan.by:
            raise LLMReplayError(f"slo {slo.key!r}: the capacity search is by {plan.by}; write capacity.{plan.by}")


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: the normal one z corrected by the Cornish-Fisher expansion
    (Abramowitz & Stegun 26.7.5): z + (z³ + z) / 4df + (5z⁵ + 16z³ + 3z) / 96df²."""
    z = NormalDist().inv_cdf(p)
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


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
            return (f"over-saturated: the wait for a first token grows {slope:.3g} s per s of schedule (95% interval ±{half_width:.2g}) "
                    f"over the last {n} requests: arrivals outpace completions, the queue grows without bound")
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
        self.not_good += record.status == "failed" or any(values.get(name) is not None and values[name] > limit for name, limit in self.limits.items())
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


@dataclass(frozen=True)
class PointJob:
    """One point to run (picklable: it may go to another process)."""

    workload: Workload
    target: Any
    prompts: PromptFactory
    settings: ReplaySettings
    rule: StopRule | None


def run_point(job: PointJob) -> ReplayRun:
    """Replay one point, stopping it when its rule says the SLOs are lost."""
    replay = Replay(job.workload, job.target.endpoint(), job.prompts, job.settings, clock=job.target.clock())
    rule = job.rule
    if rule is not None:

        def observe(record: RequestRecord) -> None:
            why = rule.reason(record)
            if why is not None:
                replay.stop(why)

        replay.on_record = observe
    return replay.run()


@dataclass
class Point:
    """One replay of the search: its load, role, result, checks. Roles: ``sync`` and
    ``saturate``, the estimates of a rate search (closed loops: ``load`` is the session rate
    they achieved, not a rate they ran at); ``low`` and ``high``, the ends; ``grow`` and
    ``bisect``: points run at their ``load``."""

    load: float
    role: str
    settings: ReplaySettings
    result: Result
    checks: list[Check]

    @property
    def stopped(self) -> str | None:
        return self.result.run.stopped

    @property
    def passed(self) -> bool:
        return self.stopped is None and all(c.passed for c in self.checks)

    @property
    def estimate(self) -> bool:
        """A closed-loop run that only says where a rate search looks (never the capacity)."""
        return self.role in ESTIMATE_ROLES

    def figures(self) -> dict[str, Any]:
        """What is kept of the point in the stored result (and drawn in a load curve): the load,
        the verdict, each SLO's measured value, throughput, goodput, error rate and counts."""
        summary = self.result.summary
        goodput = summary.get("goodput", {})
        return {
            "load": self.load, "role": self.role, "passed": self.passed, "stopped": self.stopped,
            "settings": {key: getattr(self.settings, key) for key in ("mode", "rate", "concurrency", "arrival", "speedup")},
            "slo": {c.slo.key: c.measured for c in self.checks},
            "request_throughput": summary.get("request_throughput", {}).get("overall"),
            "output_throughput": summary.get("output_throughput", {}).get("overall"),
            "goodput": goodput.get("value"), "goodput_rate": goodput.get("rate"),
            "error_rate": summary.get("error_rate", {}).get("value"),
            "ttft_p50": summary.get("ttft", {}).get("p50"), "ttft_p99": summary.get("ttft", {}).get("p99"),
            "tpot_p50": summary.get("tpot", {}).get("p50"), "tpot_p99": summary.get("tpot", {}).get("p99"),
            "requests_ok": summary["requests"]["ok"], "requests_planned": summary["requests"]["planned"],
        }

    def line(self, index: int, budget: int, by: str) -> str:
        """The progress line of a finished point."""
        unit = " req/s" if by == "rate" else ""
        measured = "  ".join(f"{c.slo.key} {'-' if c.measured is None else c.slo.show(c.measured)}" for c in self.checks)
        figures = self.figures()
        goodput = "" if figures["goodput_rate"] is None else f"  goodput {figures['goodput_rate']:.4g} req/s ({figures['goodput'] * 100:.0f}%)"
        verdict = "pass" if self.passed else "FAIL"
        stopped = f"  (stopped early: {self.stopped})" if self.stopped else ""
        load = f"{by} {self.load:.4g}{unit}"
        if self.estimate:
            load = f"estimate, {self.settings.concurrency} in flight: carried {self.load:.4g} req/s"
        return f"point {index}/{budget} {self.role:>6} {load}: {verdict}  {measured}{goodput}{stopped}"


class CapacityResult(Result):
    """The stored face of a search: the point at capacity (the highest that passed, else the
    lowest run), with the search's settings (so two commits' searches compare) and
    ``summary["capacity"]`` = {by: capacity, ``low``, ``high`` (the bracket), ``runs``}."""

    def __init__(self, run: ReplayRun, gpus: int, goodput: Mapping[str, float], capacity: "Capacity") -> None:
        super().__init__(run, gpus, goodput)
        self.capacity = capacity
        self.summary["capacity"] = capacity.figures()


@dataclass
class Capacity:
    """The outcome of a search: every run in run order (estimates included), the bracket
    [low, high] (high None: no load failed, capacity is at least low), and why the search ended."""

    plan: CapacityPlan
    base: ReplaySettings
    points: list[Point]
    low: float
    high: float | None
    reason: str

    @property
    def value(self) -> float:
        return self.low

    @property
    def at_least(self) -> bool:
        """Some load passed and none failed: no upper bound was found."""
        return self.high is None

    @property
    def load_points(self) -> list[Point]:
        """The points run at their load (the estimates left out)."""
        return [p for p in self.points if not p.estimate]

    def figures(self) -> dict[str, float]:
        """``summary["capacity"]``; with no upper bound, ``high`` = ``low`` (the load known to pass)."""
        high = self.low if self.high is None else self.high
        return {self.plan.by: self.low, "low": self.low, "high": high, "runs": float(len(self.points))}

    @cached_property
    def at_capacity(self) -> Point:
        candidates = self.load_points or self.points
        passed = [p for p in candidates if p.passed]
        return max(passed, key=lambda p: p.load) if passed else min(candidates, key=lambda p: p.load)

    @cached_property
    def result(self) -> CapacityResult:
        point = self.at_capacity.result
        settings = {**self.base.as_dict(), "capacity": self.plan.as_dict()}
        return CapacityResult(replace(point.run, settings=settings), point.gpus, point.goodput, self)

    def as_dict(self) -> dict[str, Any]:
        """The search as stored beside the result: plan, capacity, bracket, ``at_least`` (no
        upper bound found), reason, the points run at their load and the estimates."""
        return {"plan": self.plan.as_dict(), **self.figures(), "at_least": self.at_least, "reason": self.reason,
                "points": [p.figures() for p in self.load_points], "estimates": [p.figures() for p in self.points if p.estimate]}

    def table(self) -> str:
        """A row per point run at its load, in load order; the estimates below, apart (their
        loads are what a closed loop carried, not rates run); then the headline."""
        from tabulate import tabulate

        keys = [slo.key for slo in self.plan.slos]
        unit = " req/s" if self.plan.by == "rate" else ""

        def rows(points: list[Point]) -> list[list[str]]:
            out = []
            for point in sorted(points, key=lambda p: p.load):
                f = point.figures()
                measured = {c.slo.key: ("-" if c.measured is None else c.slo.show(c.measured)) for c in point.checks}
                out.append([f"{point.load:.4g}", "pass" if point.passed else "FAIL" + (" (stopped)" if point.stopped else "")] + [measured[k] for k in keys]
                           + [_fmt(f["request_throughput"]), _fmt(f["goodput_rate"]), "-" if f["goodput"] is None else f"{f['goodput'] * 100:.0f}%"])
            return out

        tail = ["req/s", "goodput req/s", "good"]
        text = f"Capacity search by {self.plan.by}\n" + tabulate(rows(self.load_points), headers=[self.plan.by + unit, "verdict"] + keys + tail, tablefmt="simple")
        estimates = [p for p in self.points if p.estimate]
        if estimates:
            table = tabulate([[f"{p.role}, {p.settings.concurrency} in flight"] + row for p, row in zip(sorted(estimates, key=lambda p: p.load), rows(estimates))],
                             headers=["estimate (closed loop)", "carried req/s", "verdict"] + keys + tail, tablefmt="simple")
            text += "\nEstimates (where to look; not rates run, never the capacity)\n" + table
        return text + "\n" + self.headline()

    def headline(self) -> str:
        unit = " req/s" if self.plan.by == "rate" else ""
        if self.at_least:
            return (f"capacity ({self.plan.by}): at least {self.low:.4g}{unit} (no upper bound found), bracket [{self.low:.4g}, -], "
                    f"{len(self.points)} runs; {self.reason}")
        return f"capacity ({self.plan.by}): {self.low:.4g}{unit}, bracket [{self.low:.4g}, {self.high:.4g}], {len(self.points)} runs; {self.reason}"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def trace_rate(workload: Workload) -> float:
    """Sessions per second of a timed trace: (n - 1) / span of its arrivals."""
    arrivals = [s.arrival_s for s in workload.sessions]
    span = max(arrivals) - min(arrivals)
    if len(arrivals) < 2 or span <= 0:
        raise LLMReplayError("capacity.arrival: trace needs a workload whose sessions arrive over time; use poisson or constant")
    return (len(arrivals) - 1) / span


# one run to do: its load (None: an estimate, whose load is the rate it achieves), role, settings,
# and whether its stop rule applies
Run = tuple[float | None, str, ReplaySettings, bool]


class Search:
    """One capacity search (see the module docstring); :func:`find_capacity` runs it."""

    def __init__(self, workload: Workload, target: Target, prompts: PromptFactory, plan: CapacityPlan,
                 settings: ReplaySettings = ReplaySettings(), progress: Callable[[str], None] | None = None, workers: int = 2) -> None:
        plan.validate()
        settings.validate()
        for name in ("rate", "concurrency"):
            if getattr(settings, name) is not None:
                raise LLMReplayError(f"{name}: the capacity search sets it at each point; leave it out")
        if settings.mode != "auto":
            raise LLMReplayError("mode: the capacity search sets it at each point; leave it out")
        self.workload, self.target, self.prompts, self.plan, self.base = workload, target, prompts, plan, settings
        self.progress = progress
        self.workers = workers if target.kind == "offline" else 1
        self.sessions = len(session_plan(workload, replace(settings, mode="concurrency")))
        self.native_rate = trace_rate(workload) if plan.arrival == "trace" else None
        self.limits = per_request_limits(plan.slos)
        self.points: list[Point] = []

    def settings_at(self, load: float) -> ReplaySettings:
        if self.plan.by == "concurrency":
            return replace(self.base, mode="concurrency", concurrency=int(load))
        if self.plan.arrival == "trace":
            return replace(self.base, mode="timestamps", speedup=load / self.native_rate)
        return replace(self.base, mode="rate", rate=load, arrival=self.plan.arrival)

    def job(self, settings: ReplaySettings, stop: bool) -> PointJob:
        rule = None
        if stop and self.plan.early_stop:
            planned = sum(len(s.turns) for s in session_plan(self.workload, settings))
            saturation = QueueGrowth() if settings.mode in OPEN_LOOP_MODES else None
            rule = StopRule(self.plan.slos, planned, self.limits, settings.warmup_s, settings.warmup_requests, saturation=saturation)
        return PointJob(self.workload, self.target, self.prompts, settings, rule)

    def keep(self, load: float | None, role: str, settings: ReplaySettings, run: ReplayRun) -> Point:
        result = Result(run, gpus=self.target.gpus, goodput=self.limits)
        if load is None:  # an estimate's load is the session rate it achieved
            load = self.sessions / run.duration_s if run.duration_s > 0 else 0.0
        point = Point(load, role, settings, result, check_slos(result.summary, self.plan.slos))
        self.points.append(point)
        if self.progress is not None:
            self.progress(point.line(len(self.points), self.plan.budget, self.plan.by))
        return point

    def run_all(self, runs: Sequence[Run]) -> list[Point]:
        """The runs' points, in parallel processes when the target allows."""
        jobs = [self.job(settings, stop) for _, _, settings, stop in runs]
        done = self.in_parallel(jobs) if self.workers > 1 and len(jobs) > 1 else None
        if done is None:
            done = [run_point(job) for job in jobs]
        return [self.keep(load, role, settings, run) for (load, role, settings, _), run in zip(runs, done)]

    def probe(self, load: float, role: str) -> Point:
        """One point run at ``load``, its stop rule on."""
        return self.run_all([(load, role, self.settings_at(load), True)])[0]

    def in_parallel(self, jobs: list[PointJob]) -> list[ReplayRun] | None:
        """The jobs' runs from worker processes; None when they cannot go there (a target or
        workload that does not pickle, a pool that cannot start): the caller runs them here,
        with the same results, only slower."""
        try:
            with ProcessPoolExecutor(max_workers=min(self.workers, len(jobs))) as pool:
                return list(pool.map(run_point, jobs))
        except (pickle.PicklingError, AttributeError, TypeError, BrokenProcessPool, OSError):
            return None

    def ends(self) -> tuple[float, float]:
        """The loads of the two ends, from the estimates where the plan leaves a bound out."""
        plan = self.plan
        if plan.by == "concurrency":
            return plan.min or 1, plan.max or self.sessions
        runs = []
        if plan.min is None:
            runs.append((None, "sync", replace(self.base, mode="concurrency", concurrency=1), False))
        if plan.max is None:
            runs.append((None, "saturate", replace(self.base, mode="concurrency", concurrency=self.sessions), False))
        estimates = {p.role: p for p in self.run_all(runs)}
        low = plan.min if plan.min is not None else estimates["sync"].load
        high = plan.max if plan.max is not None else estimates["saturate"].load
        return low, high

    def run(self) -> Capacity:
        plan = self.plan
        unit = " req/s" if plan.by == "rate" else ""
        low_end, high_end = self.ends()
        runs = [(low_end, "low", self.settings_at(low_end), True)]
        if high_end > low_end:
            runs.append((high_end, "high", self.settings_at(high_end), True))
        ends = self.run_all(runs)
        if not ends[0].passed:
            return self.done(0.0, low_end, "no load meets the SLOs: the lowest one fails")
        low, high = low_end, None  # high None: no load failed yet
        if len(ends) > 1:
            low, high = (high_end, None) if ends[1].passed else (low_end, high_end)
        if high is None:
            if plan.max is not None or plan.by == "concurrency":
                return self.done(low, None, "the highest load meets the SLOs: capacity is at least that")
            while high is None:  # grow: twice the highest pass until a rate fails
                if len(self.points) >= plan.budget:
                    return self.done(low, None, f"no rate failed within the budget of {plan.budget} runs: capacity is at least {low:.4g}{unit}")
                point = self.probe(2 * low, "grow")
                low, high = (point.load, None) if point.passed else (low, point.load)
        while not self.resolved(low, high):
            if len(self.points) >= plan.budget:
                return self.done(low, high, f"budget of {plan.budget} runs spent before the {plan.resolution * 100:g}% resolution")
            mid = (low + high) // 2 if plan.by == "concurrency" else (low + high) / 2
            point = self.probe(mid, "bisect")
            low, high = (mid, high) if point.passed else (low, mid)
        return self.done(low, high, f"bracket within the {plan.resolution * 100:g}% resolution")

    def resolved(self, low: float, high: float) -> bool:
        if self.plan.by == "concurrency" and high - low <= 1:
            return True
        return high - low <= self.plan.resolution * high

    def done(self, low: float, high: float | None, reason: str) -> Capacity:
        return Capacity(self.plan, self.base, self.points, low, high, reason)


def find_capacity(workload: Workload, target: Target, prompts: PromptFactory, plan: CapacityPlan, settings: ReplaySettings = ReplaySettings(),
                  progress: Callable[[str], None] | None = None, workers: int = 2) -> Capacity:
    """Search the highest load of ``workload`` on ``target`` meeting ``plan``'s SLOs (module
    docstring); ``settings``: every other replay setting of each point; ``progress``: gets a line
    per point as it finishes; ``workers``: processes for the estimates and the ends (offline only)."""
    return Search(workload, target, prompts, plan, settings, progress, workers).run()
