"""Capacity at SLO: the highest load an endpoint carries while every request-level SLO holds.

**Load** (``by``):

- ``rate``: sessions per second, open loop. ``arrival`` ``poisson`` (seeded) or ``constant``
  spacing at that rate, or ``trace``: the workload's own arrivals scaled, speedup = rate / the
  trace's rate ((n - 1) / span of its arrival times, n sessions);
- ``concurrency``: sessions in flight, closed loop (whole numbers).

**A point** is one ordinary replay at one load (its :class:`~pytest_llmreplay.metrics.Result`
is kept). It *passes* when every SLO of the plan holds on its summary (``ttft.p99 < 1s`` on the
point's TTFT p99) and it was not stopped early. Goodput's per-request limits are the plan's
(:func:`~pytest_llmreplay.slo.per_request_limits`). Every point starts on an empty prefix cache:
offline a fresh engine, on a server its cache reset first (:meth:`Search.fresh_server`).

**Algorithm** (:func:`find_capacity`); every run counts against ``budget``:

1. Estimates (``rate`` only, for a bound the plan leaves out; in parallel processes when the
   target is the offline simulator, whose points cannot disturb each other): as GuideLLM starts
   its sweep, the synchronous run (concurrency 1; for a missing ``min``) and the saturating run
   (every session at once; for a missing ``max``). Each is a closed loop, not a rate: its achieved
   session rate (its carried rate, below) only says where to look, and it is never the capacity
   nor an end of the bracket. They run to their end (a stopped run's rate would be no estimate).
2. The ends, two points at the load (in parallel as above): low = ``min``, else the synchronous
   run's rate; high = ``max``, else the saturating run's rate (``concurrency``: ``min``, default
   1, and ``max``, default every planned session at once, both real points already). High is
   run only when above low. If low fails, no load meets the SLOs: capacity 0, bracket [0, low].
3. Growth, when high passes (or was not above low) on a ``rate`` search with no ``max``: a
   point at twice the highest passing rate, until one fails or the budget is spent (even when
   the saturating run met the SLOs: an open-loop point may still fail, over-saturated). No load
   failed (or ``max``, or by ``concurrency`` every session at once, passed): capacity is at
   least the one of step 5, no upper bound found (``high`` None; ``at_least`` in the stored
   search), unless it is a ceiling (a load not carried, below).
4. Bisection between the highest pass and the lowest fail: while high - low > ``resolution`` *
   high (concurrency: and high - low > 1) and fewer than ``budget`` runs are done: a point at
   mid = (low + high) / 2 (concurrency: rounded down); pass: low = mid, fail: high = mid.
5. Capacity (0 when no point passed): by ``concurrency`` the highest load that passed (low); by
   ``rate`` max over the passing points of min(load, carried): never above the throughput a
   point achieved. Its uncertainty is the bracket [capacity, high], high a load run that failed.

**Carried load**: a point's carried rate c is the sessions per second it served, answered
requests / run time * sessions / requests planned (sessions / run time when all were answered).
An open loop of n sessions at λ lasts (n - 1) / λ plus the last requests' drain, so c is a little
under λ even when the load was carried; with c < :data:`CARRIED_SHARE` λ (0.8) it was not: its
SLOs held only because the run ended before its queue could build (the workload is too short for
that rate). When the point at capacity is one, the capacity is the rate it carried, a ceiling,
never ``at least``, and the reason says so in one line.

**Early stop and over-saturation**: a point's :class:`~pytest_llmreplay.search_stop.StopRule`
(on by default; the rules and their constants: :mod:`~pytest_llmreplay.search_stop`) stops it
once its SLOs are lost or its queue plainly grows without bound; a stopped point has failed.
The estimates of a ``rate`` search are never stopped (their achieved rates say where to look).
"""

from __future__ import annotations

import math
import pickle
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Callable, Mapping, Protocol, Sequence

from .driver import Replay, ReplaySettings, session_plan
from .run_records import ReplayRun, RequestRecord
from .errors import LLMReplayError
from .metrics import Result
from .prompts import PromptFactory
from .search_stop import OPEN_LOOP_MODES, QueueGrowth, StopRule
from .slo import SLO, Check, canonical, check_goodput_limits, check_slos, parse_slos, per_request_limits
from .workload import Workload

BY = ("rate", "concurrency")
ARRIVALS = ("poisson", "constant", "trace")
DEFAULT_RESOLUTION = 0.05
DEFAULT_BUDGET = 12
CARRIED_SHARE = 0.8  # a rate point carried its load when it served at least this share of it (module docstring)
PLAN_KEYS = ("by", "slo", "min", "max", "resolution", "budget", "arrival", "early_stop")
# settings the search sets itself at each point
VARIED_SETTINGS = ("mode", "rate", "concurrency", "arrival")
# roles of the closed-loop runs that only say where a rate search looks (module docstring)
ESTIMATE_ROLES = ("sync", "saturate")


class Target(Protocol):
    """Where points go: a fresh endpoint and clock per replay (:class:`~.target.Target`).
    ``kind == "offline"`` (the simulator in virtual time) lets points run in parallel processes,
    which needs the target, workload and prompts to pickle. Otherwise (a server at ``url``)
    ``reset_cache`` empties its prefix cache before each point, returning None when it cannot."""

    kind: str
    gpus: int
    url: str | None

    def endpoint(self) -> Any: ...

    def clock(self) -> Any: ...

    def reset_cache(self) -> str | None: ...


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
        check_goodput_limits(slos, slos, "capacity.slo", "the search's SLOs")
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
    """A test's ``capacity.*`` SLOs need a search by the same load; its ``goodput`` needs a
    per-request limit where goodput's limits come from: the test's ``slo``, a capacity test's
    ``capacity.slo``."""
    if plan is None:
        check_goodput_limits(slos, slos, "slo", "the test's slo")
    else:
        check_goodput_limits(slos, plan.slos, "slo", "capacity.slo (a capacity test's goodput limits)")
    for slo in slos:
        if slo.metric == "capacity" and plan is None:
            raise LLMReplayError(f"slo {slo.key!r}: needs the capacity key (what to search: by, slo, min, max, resolution)")
        if slo.metric == "capacity" and slo.stat != plan.by:
            raise LLMReplayError(f"slo {slo.key!r}: the capacity search is by {plan.by}; write capacity.{plan.by}")


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
    """One replay of the search: its load, role, result, checks and ``carried``, the session
    rate it served (module docstring). Roles: ``sync`` and ``saturate``, the estimates of a rate
    search (closed loops: ``load`` is the session rate they carried, not a rate they ran at);
    ``low`` and ``high``, the ends; ``grow`` and ``bisect``: points run at their ``load``."""

    load: float
    role: str
    settings: ReplaySettings
    result: Result
    checks: list[Check]
    carried: float

    @property
    def open_loop(self) -> bool:
        return self.settings.mode in OPEN_LOOP_MODES

    @property
    def credited(self) -> float:
        """What the point counts for as a capacity: open loop min(load, carried), closed its load."""
        return min(self.load, self.carried) if self.open_loop else self.load

    @property
    def carried_its_load(self) -> bool:
        """A closed loop always; an open loop when carried >= :data:`CARRIED_SHARE` * load."""
        return not self.open_loop or self.carried >= CARRIED_SHARE * self.load

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
            "load": self.load, "role": self.role, "passed": self.passed, "stopped": self.stopped, "carried": self.carried,
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

    def verdict(self) -> str:
        """``pass``, ``pass (not carried)``, ``FAIL`` or ``FAIL (stopped)``."""
        return ("pass" if self.carried_its_load else "pass (not carried)") if self.passed else ("FAIL (stopped)" if self.stopped else "FAIL")

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
    """The outcome of a search: every run in run order (estimates included), ``high`` (the lowest
    load that failed; None: none did) and why the search ``ended``; the capacity, its point and
    whether it is a ceiling follow from the points (module docstring: step 5, carried load)."""

    plan: CapacityPlan
    base: ReplaySettings
    points: list[Point]
    high: float | None
    ended: str

    @cached_property
    def at_capacity(self) -> Point:
        """The passing point run at its load with the highest credited load, else the lowest load run."""
        candidates = self.load_points or self.points
        passed = [p for p in candidates if p.passed]
        return max(passed, key=lambda p: p.credited) if passed else min(candidates, key=lambda p: p.load)

    @property
    def low(self) -> float:
        """The capacity, the bracket's bottom: the credited load of the point at capacity (0 when none passed)."""
        point = self.at_capacity
        return point.credited if point.passed else 0.0

    @property
    def value(self) -> float:
        return self.low

    @property
    def ceiling(self) -> bool:
        """The point at capacity met the SLOs without carrying its load: the capacity is the rate it carried."""
        return self.at_capacity.passed and not self.at_capacity.carried_its_load

    @property
    def at_least(self) -> bool:
        """Some load passed and none failed, and the capacity is no ceiling: no upper bound was found."""
        return self.high is None and not self.ceiling

    @property
    def reason(self) -> str:
        """Why the search ended; for a ceiling, the one line that says why the capacity is the rate carried."""
        if not self.ceiling:
            return self.ended
        point = self.at_capacity
        return (f"the {point.load:.4g} req/s point met the SLOs carrying only {point.carried:.4g} req/s: its run ended before a queue could build "
                "(the workload is too short for that rate), so the capacity is the rate carried, a ceiling; a longer workload would measure the rate sustained")

    @property
    def load_points(self) -> list[Point]:
        """The points run at their load (the estimates left out)."""
        return [p for p in self.points if not p.estimate]

    def figures(self) -> dict[str, float]:
        """``summary["capacity"]``; with no upper bound, ``high`` = ``low`` (the capacity)."""
        high = self.low if self.high is None else self.high
        return {self.plan.by: self.low, "low": self.low, "high": high, "runs": float(len(self.points))}

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
        """A row per point run at its load, in load order (``pass (not carried)``: it met the SLOs
        carrying under :data:`CARRIED_SHARE` of its rate); the estimates below, apart (their loads
        are what a closed loop carried, not rates run); then the headline."""
        from tabulate import tabulate

        keys = [slo.key for slo in self.plan.slos]
        unit = " req/s" if self.plan.by == "rate" else ""

        def rows(points: list[Point]) -> list[list[str]]:
            out = []
            for point in sorted(points, key=lambda p: p.load):
                f = point.figures()
                measured = {c.slo.key: ("-" if c.measured is None else c.slo.show(c.measured)) for c in point.checks}
                out.append([f"{point.load:.4g}", point.verdict()] + [measured[k] for k in keys]
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
        return f"capacity ({self.plan.by}): {self.low:.4g}{unit}, bracket [{self.low:.4g}, {self.figures()['high']:.4g}], {len(self.points)} runs; {self.reason}"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def carried_rate(run: ReplayRun, sessions: int) -> float:
    """Sessions per second ``run`` served: answered requests / run time * ``sessions`` /
    requests planned (module docstring); 0 for a run of no time."""
    if run.duration_s <= 0 or not run.planned_requests:
        return 0.0
    answered = sum(record.status == "ok" for record in run.records)
    return answered / run.duration_s * sessions / run.planned_requests


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
        self.reset_missing = False  # a server that empties no prefix cache was named

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
        carried = carried_rate(run, self.sessions)
        point = Point(carried if load is None else load, role, settings, result, check_slos(result.summary, self.plan.slos), carried)
        self.points.append(point)
        if self.progress is not None:
            self.progress(point.line(len(self.points), self.plan.budget, self.plan.by))
        return point

    def run_all(self, runs: Sequence[Run]) -> list[Point]:
        """The runs' points, in parallel processes when the target allows."""
        jobs = [self.job(settings, stop) for _, _, settings, stop in runs]
        done = self.in_parallel(jobs) if self.workers > 1 and len(jobs) > 1 else None
        if done is None:
            done = []
            for job in jobs:
                self.fresh_server()
                done.append(run_point(job))
        return [self.keep(load, role, settings, run) for (load, role, settings, _), run in zip(runs, done)]

    def fresh_server(self) -> None:
        """Before a point on a server: empty its prefix cache (:meth:`~.target.Target.reset_cache`),
        as every offline point starts on a fresh engine. Every point replays the same prompts, so
        without it each point after the first hits the cache the earlier ones warmed, and its TTFT
        is that of cache hits, not of its load (a search by concurrency 1 to 32 on ``llmreplay sim``
        passed 32 at TTFT p90 145 ms, 99.8% of prompt tokens cached, which offline failed at
        974 ms). A server with no reset is named once through ``progress``."""
        if self.target.kind == "offline" or self.target.reset_cache() is not None or self.reset_missing:
            return
        self.reset_missing = True
        if self.progress is not None:
            from .target import no_cache_reset_note

            self.progress(f"note: {no_cache_reset_note(self.target.url, 'point')}")

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
        low_end, high_end = self.ends()
        runs = [(low_end, "low", self.settings_at(low_end), True)]
        if high_end > low_end:
            runs.append((high_end, "high", self.settings_at(high_end), True))
        ends = self.run_all(runs)
        if not ends[0].passed:
            return self.done(low_end, "no load meets the SLOs: the lowest one fails")
        low, high = low_end, None  # high None: no load failed yet
        if len(ends) > 1:
            low, high = (high_end, None) if ends[1].passed else (low_end, high_end)
        if high is None:
            if plan.max is not None or plan.by == "concurrency":
                return self.done(None, "the highest load meets the SLOs: capacity is at least that")
            while high is None:  # grow: twice the highest pass until a rate fails
                if len(self.points) >= plan.budget:
                    return self.done(None, f"no rate failed within the budget of {plan.budget} runs: capacity is at least that")
                point = self.probe(2 * low, "grow")
                low, high = (point.load, None) if point.passed else (low, point.load)
        while not self.resolved(low, high):
            if len(self.points) >= plan.budget:
                return self.done(high, f"budget of {plan.budget} runs spent before the {plan.resolution * 100:g}% resolution")
            mid = (low + high) // 2 if plan.by == "concurrency" else (low + high) / 2
            point = self.probe(mid, "bisect")
            low, high = (mid, high) if point.passed else (low, mid)
        return self.done(high, f"bracket within the {plan.resolution * 100:g}% resolution")

    def resolved(self, low: float, high: float) -> bool:
        if self.plan.by == "concurrency" and high - low <= 1:
            return True
        return high - low <= self.plan.resolution * high

    def done(self, high: float | None, ended: str) -> Capacity:
        return Capacity(self.plan, self.base, self.points, high, ended)


def find_capacity(workload: Workload, target: Target, prompts: PromptFactory, plan: CapacityPlan, settings: ReplaySettings = ReplaySettings(),
                  progress: Callable[[str], None] | None = None, workers: int = 2) -> Capacity:
    """Search the highest load of ``workload`` on ``target`` meeting ``plan``'s SLOs (module
    docstring); ``settings``: every other replay setting of each point; ``progress``: gets a line
    per point as it finishes; ``workers``: processes for the estimates and the ends (offline only)."""
    return Search(workload, target, prompts, plan, settings, progress, workers).run()
