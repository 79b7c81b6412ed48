"""Capacity at SLO: the highest load an endpoint carries while every request-level SLO holds.

**Load** (``by``):

- ``rate``: sessions per second, open loop. ``arrival`` ``poisson`` (seeded) or ``constant``
  spacing at that rate, or ``trace``: the workload's own arrivals scaled, speedup = rate / the
  trace's rate ((n - 1) / span of its arrival times, n sessions);
- ``concurrency``: sessions in flight, closed loop (whole numbers).

**A point** is one ordinary replay at one load (its :class:`~pytest_llmreplay.metrics.result.Result`
is kept). It *passes* when every SLO of the plan holds on its summary (``ttft.p99 < 1s`` on the
point's TTFT p99) and it was not stopped early. Goodput's per-request limits are the plan's
(:func:`~pytest_llmreplay.metrics.slo.per_request_limits`). Every point starts on an empty prefix cache:
offline a fresh engine, on a server its cache reset first (:meth:`Search.fresh_server`).

**Algorithm** (:func:`find_capacity`); every run counts against ``budget``:

1. Estimates (``rate`` only, for a bound the plan leaves out; in parallel processes when the
   target is the offline simulator, whose points cannot disturb each other): as GuideLLM starts
   its sweep, the synchronous run (concurrency 1; for a missing ``min``) and the saturating run
   (every session at once; for a missing ``max``). Each is a closed loop, not a rate: its achieved
   session rate (its carried rate, step 5) only says where to look, and it is never the capacity
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
   search), unless it is a ceiling (step 5).
4. Bisection between the highest pass and the lowest fail: while high - low > ``resolution`` *
   high (concurrency: and high - low > 1) and fewer than ``budget`` runs are done: a point at
   mid = (low + high) / 2 (concurrency: rounded down); pass: low = mid, fail: high = mid.
5. Capacity (:mod:`~pytest_llmreplay.search.outcome`, with the rule's details): by
   ``concurrency`` the highest load that passed (low); by ``rate`` max over the passing points
   of min(load, carried), never above the throughput a point achieved, and a ceiling when its
   point did not carry its load (the workload too short for that rate, or requests failed that no SLO limits: the reason says which).
   Its uncertainty is the bracket [capacity, high], high a load run that failed. It is stored
   as ``capacity.rate`` (req/s), ``capacity.concurrency``, or ``capacity.session_rate`` when the
   rate starts sessions of several turns: sessions/s, about turns-per-session times fewer than the
   requests answered per second (:func:`~pytest_llmreplay.metrics.names.capacity_stat`).

**Early stop and over-saturation**: a point's :class:`~pytest_llmreplay.search.stop.StopRule`
(on by default; the rules and their constants: :mod:`~pytest_llmreplay.search.stop`) stops it
once its SLOs are lost or its queue plainly grows without bound; a stopped point has failed.
The estimates of a ``rate`` search are never stopped (their achieved rates say where to look).

**Signals** (``signals``, a :class:`~pytest_llmreplay.replayer.signal_stop.SignalStop`: ``llmreplay
sweep``): the first SIGINT or SIGTERM cuts the point replaying in this process at once (points
in worker processes, offline, run out first: seconds), starts no other, and ends the search with
every point run (``interrupted`` names the signal); an interrupted point neither passes nor fails.

**A server that fails** during the search (``check_server`` raises after a point: it died; or
the cache reset or a point's opening gets no answer) ends it with the points measured before
that one, which measured the failure, kept: ``incomplete`` holds the error (exit status, the
log's last lines). Failing before any point was measured, the error is raised.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Protocol

from ..errors import LLMReplayError
from ..metrics.names import GOODPUT_METRICS, REASONING_METRICS, capacity_stat
from ..metrics.result import Result
from ..metrics.slo import SLO, canonical, check_goodput_limits, check_slos, parse_slos, per_request_limits
from ..replayer.driver import Replay
from ..replayer.plan import ReplaySettings, session_plan
from ..replayer.records import ReplayRun, RequestRecord
from ..replayer.signal_stop import SignalStop
from ..workloads.prompts import PromptFactory
from ..workloads.workload import Session, Workload
from .outcome import Capacity, Point, carried_rate
from .stop import OPEN_LOOP_MODES, QueueGrowth, StopRule

BY = ("rate", "concurrency")
ARRIVALS = ("poisson", "constant", "trace")
DEFAULT_RESOLUTION = 0.05
DEFAULT_BUDGET = 12
PLAN_KEYS = ("by", "slo", "min", "max", "resolution", "budget", "arrival", "early_stop")
# settings the search sets itself at each point
VARIED_SETTINGS = ("mode", "rate", "concurrency", "arrival")


class Target(Protocol):
    """Where points go: a fresh endpoint and clock per replay (:class:`~pytest_llmreplay.target.Target`).
    ``kind == "offline"`` (the simulator in virtual time) lets points run in parallel processes,
    which needs the target, workload and prompts to pickle. Otherwise (a server at ``url``)
    ``reset_for_run`` empties its prefix cache before each point unless resets are off, and
    ``unreset_note`` says when a point started on a cache not emptied."""

    kind: str
    gpus: int
    url: str | None

    def endpoint(self) -> Any: ...

    def clock(self) -> Any: ...

    def reset_for_run(self) -> str | None: ...

    def unreset_note(self, reset: str | None, run: str) -> str | None: ...


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
        try:
            slos = self.slos if isinstance(self.slo, Mapping) else []
        except LLMReplayError as exc:
            raise LLMReplayError(f"capacity.slo: {exc}") from None
        if not slos:  # none, or every one 'off'
            raise LLMReplayError("capacity.slo: expected the SLOs each load must meet, e.g. {'ttft.p99': '< 1s'}")
        for slo in slos:
            per_request = slo.metric in GOODPUT_METRICS and slo.op in ("<", "<=")
            share = slo.metric in ("error_rate", "goodput") and slo.stat == "value"
            if not (per_request or share):
                raise LLMReplayError(
                    f"capacity.slo {slo.key!r}: cannot be evaluated per request; expected an upper bound (< or <=) on "
                    f"{', '.join(GOODPUT_METRICS[:-1])} or {GOODPUT_METRICS[-1]}, or an error_rate or goodput share"
                )
        check_goodput_limits(slos, slos, "capacity.slo", "the search's SLOs")
        for name in ("min", "max"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf
            ):
                raise LLMReplayError(f"capacity.{name}: expected a number > 0, got {value!r}")
            if value is not None and self.by == "concurrency" and value != int(value):
                raise LLMReplayError(f"capacity.{name}: a concurrency is a whole number, got {value!r}")
        if self.min is not None and self.max is not None and self.min >= self.max:
            raise LLMReplayError(f"capacity.min: expected less than the max ({self.max:g}), got {self.min:g}")
        if (
            isinstance(self.resolution, bool)
            or not isinstance(self.resolution, (int, float))
            or not 0 < self.resolution < 1
        ):
            raise LLMReplayError(
                f"capacity.resolution: expected a share between 0 and 1 such as '5%' or 0.05, got {self.resolution!r}"
            )
        first = self.first_runs
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < first:
            estimates = "" if first == 2 else f": {first - 2} estimate{'s' if first > 3 else ''} and the two ends"
            raise LLMReplayError(
                f"capacity.budget: expected a whole number of runs >= {first} (the search starts with {first}{estimates}), got {self.budget!r}"
            )

    @property
    def first_runs(self) -> int:
        """Runs before the search can bisect: the two ends, and by rate an estimate for each
        bound left out (module docstring)."""
        return 2 + (self.by == "rate") * ((self.min is None) + (self.max is None))

    def as_dict(self) -> dict[str, Any]:
        """The plan as stored in a result's settings, its SLOs written canonically
        (:func:`~pytest_llmreplay.metrics.slo.canonical`: ``<1s`` and ``< 1000ms`` are one setting)."""
        return {
            key: (dict(canonical(slo) for slo in self.slos) if key == "slo" else getattr(self, key))
            for key in PLAN_KEYS
        }


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
        raise LLMReplayError(
            f"capacity: expected a mapping such as {{by: rate, slo: {{ttft.p99: '< 1s'}}}}, got {data!r}"
        )
    unknown = [key for key in data if key not in PLAN_KEYS]
    if unknown:
        raise LLMReplayError(f"capacity.{unknown[0]}: unknown key; expected one of {', '.join(PLAN_KEYS)}")
    if "by" not in data:
        raise LLMReplayError(f"capacity.by: missing; expected one of {', '.join(BY)}")
    if "slo" not in data:  # a TypeError from the plan's constructor otherwise (a traceback at collection)
        raise LLMReplayError("capacity.slo: missing; expected the SLOs a load must meet, e.g. {ttft.p99: '< 1s'}")
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
        if slo.metric != "capacity":
            continue
        if plan is None:
            raise LLMReplayError(
                f"slo {slo.key!r}: needs the capacity key (what to search: by, slo, min, max, resolution)"
            )
        stats = ("rate", "session_rate") if plan.by == "rate" else (plan.by,)
        if slo.stat not in stats:
            raise LLMReplayError(f"slo {slo.key!r}: the capacity search is by {plan.by}; write capacity.{plan.by}")


def check_capacity_unit(slos: Sequence[SLO], stat: str) -> None:
    """A test's ``capacity.*`` SLOs must name the statistic the search stores its capacity under
    (``stat``: :func:`~pytest_llmreplay.metrics.names.capacity_stat`), known once the workload's
    sessions are planned: a rate over multi-turn sessions is ``capacity.session_rate``."""
    for slo in slos:
        if slo.metric != "capacity" or slo.stat == stat:
            continue
        if stat == "session_rate":
            raise LLMReplayError(
                f"slo {slo.key!r}: this workload's sessions have several turns, so the search's rate starts "
                "sessions; write capacity.session_rate (sessions/s)"
            )
        raise LLMReplayError(
            f"slo {slo.key!r}: each of this workload's sessions is one request, so the search's rate is "
            f"requests; write capacity.{stat}"
        )


@dataclass(frozen=True)
class PointJob:
    """One point to run (picklable: it may go to another process)."""

    workload: Workload
    target: Any
    prompts: PromptFactory
    settings: ReplaySettings
    rule: StopRule | None


def point_replay(job: PointJob) -> Replay:
    """The replay of one point, stopping itself when its rule says the SLOs are lost."""
    replay = Replay(job.workload, job.target.endpoint(), job.prompts, job.settings, clock=job.target.clock())
    rule = job.rule
    if rule is not None:

        def observe(record: RequestRecord) -> None:
            why = rule.reason(record)
            if why is not None:
                replay.stop(why)

        replay.on_record = observe
    return replay


def run_point(job: PointJob) -> ReplayRun:
    """Replay one point (here or in a worker process)."""
    return point_replay(job).run()


class Interrupted(Exception):
    """A signal stopped the search (:class:`~pytest_llmreplay.replayer.signal_stop.SignalStop`); its name."""


class ServerFailed(Exception):
    """The server failed during the search (module docstring); its error."""


def trace_rate(sessions: Sequence[Session]) -> float:
    """Sessions per second of a timed trace's ``sessions`` (those a plan replays, in its own
    time): (n - 1) / span of their arrivals."""
    arrivals = [s.arrival_s for s in sessions]
    span = max(arrivals) - min(arrivals)
    if len(arrivals) < 2 or span <= 0:
        raise LLMReplayError(
            "capacity.arrival: trace needs a workload whose sessions arrive over time; use poisson or constant"
        )
    return (len(arrivals) - 1) / span


def _why_the_lowest_fails(point: Point) -> str:
    """``the lowest one fails``, or, where an SLO on a reasoning figure could not be measured
    because no request reasoned (a breach, docs/perf-tests.md), that: the capacity of 0 is then
    the SLO's, not the server's."""
    unmeasured = [
        check.slo.key for check in point.checks if check.measured is None and check.slo.metric in REASONING_METRICS
    ]
    if not unmeasured or point.result.reasoning:
        return "the lowest one fails"
    return (
        f"{', '.join(unmeasured)} {'is' if len(unmeasured) == 1 else 'are'} not measured at the lowest load, where no request "
        "reasoned (a reasoning model's figure; bound ttft for a model that does not reason)"
    )


# one run to do: its load (None: an estimate, whose load is the rate it achieves), role, settings,
# and whether its stop rule applies
Run = tuple[float | None, str, ReplaySettings, bool]


class Search:
    """One capacity search (see the module docstring); :func:`find_capacity` runs it."""

    def __init__(
        self,
        workload: Workload,
        target: Target,
        prompts: PromptFactory,
        plan: CapacityPlan,
        settings: ReplaySettings = ReplaySettings(),
        progress: Callable[[str], None] | None = None,
        workers: int = 2,
        signals: SignalStop | None = None,
        test_slos: Sequence[SLO] = (),
        check_server: Callable[[], None] | None = None,
    ) -> None:
        plan.validate()
        settings.validate()
        for name in ("rate", "concurrency"):
            if getattr(settings, name) is not None:
                raise LLMReplayError(f"{name}: the capacity search sets it at each point; leave it out")
        if settings.mode != "auto":
            raise LLMReplayError("mode: the capacity search sets it at each point; leave it out")
        self.workload, self.target, self.prompts, self.plan, self.base = workload, target, prompts, plan, settings
        self.progress, self.signals, self.check_server = progress, signals, check_server
        self.workers = workers if target.kind == "offline" else 1
        planned = session_plan(workload, replace(settings, mode="concurrency"))
        self.sessions = len(planned)
        self.rate_unit = "sessions/s" if any(len(session.turns) > 1 for session in planned) else "req/s"
        check_capacity_unit(test_slos, capacity_stat(plan.by, self.rate_unit))
        # the pace of the sessions the points replay (max_requests: the trace's head), not the whole trace's
        timed = session_plan(workload, replace(settings, mode="timestamps")) if plan.arrival == "trace" else None
        self.native_rate = trace_rate(timed) if timed is not None else None
        self.limits = per_request_limits(plan.slos)
        self.points: list[Point] = []
        self.reset_missing = False  # a point started on a prefix cache not emptied was named

    def settings_at(self, load: float) -> ReplaySettings:
        if self.plan.by == "concurrency":
            return replace(self.base, mode="concurrency", concurrency=int(load))
        if self.plan.arrival == "trace":
            assert self.native_rate is not None  # read for a trace-paced plan (__init__)
            return replace(self.base, mode="timestamps", speedup=load / self.native_rate)
        return replace(self.base, mode="rate", rate=load, arrival=self.plan.arrival)

    def job(self, settings: ReplaySettings, stop: bool) -> PointJob:
        rule = None
        if stop and self.plan.early_stop:
            planned = sum(len(s.turns) for s in session_plan(self.workload, settings))
            saturation = QueueGrowth() if settings.mode in OPEN_LOOP_MODES else None
            rule = StopRule(
                self.plan.slos, planned, self.limits, settings.warmup_s, settings.warmup_requests, saturation=saturation
            )
        return PointJob(self.workload, self.target, self.prompts, settings, rule)

    def keep(self, load: float | None, role: str, settings: ReplaySettings, run: ReplayRun) -> Point:
        result = Result(run, gpus=self.target.gpus, goodput=self.limits)
        carried = carried_rate(run, self.sessions)
        point = Point(
            carried if load is None else load,
            role,
            settings,
            result,
            check_slos(result.summary, self.plan.slos),
            carried,
        )
        self.points.append(point)
        if self.progress is not None:
            self.progress(point.line(len(self.points), self.plan.budget, self.plan.by, self.rate_unit))
        return point

    @property
    def interrupted(self) -> str | None:
        """The signal that stopped the search, if one did."""
        return None if self.signals is None else self.signals.signal

    def run_all(self, runs: Sequence[Run]) -> list[Point]:
        """The runs' points, in parallel processes when the target allows (those run out). Here,
        after a signal no further point starts (the first of the runs always does, at once
        interrupted: it sends nothing); :class:`Interrupted` is raised once the points are kept.
        A server that fails (an LLMReplayError from its cache reset, the point, or
        ``check_server`` after it) ends the runs: the points before that one are kept, then
        :class:`ServerFailed` is raised."""
        jobs = [self.job(settings, stop) for _, _, settings, stop in runs]
        done = self.in_parallel(jobs) if self.workers > 1 and len(jobs) > 1 else None
        failed = None
        if done is None:
            done = []
            for job in jobs:
                if done and self.interrupted:
                    break
                try:
                    if not self.interrupted:
                        self.fresh_server()
                    run = self.run_here(job)
                    failed = self.server_died()
                    if failed is not None:
                        break
                except LLMReplayError as exc:
                    failed = self.server_died() or str(exc)
                    break
                done.append(run)
        points = [  # after a signal or a server's failure, fewer runs than planned
            self.keep(load, role, settings, run)
            for (load, role, settings, _), run in zip(runs[: len(done)], done, strict=True)
        ]
        if failed is not None:
            raise ServerFailed(failed)
        if self.interrupted:
            raise Interrupted(self.interrupted)
        return points

    def server_died(self) -> str | None:
        """``check_server``'s error (exit status, the log's last lines) if the server died, which
        says more than the request that found it gone."""
        try:
            if self.check_server is not None:
                self.check_server()
        except LLMReplayError as exc:
            return str(exc)
        return None

    def run_here(self, job: PointJob) -> ReplayRun:
        """One point in this process, cut at once by a signal (:meth:`SignalStop.watch`)."""
        replay = point_replay(job)
        with self.signals.watch(replay) if self.signals is not None else nullcontext():
            return replay.run()

    def fresh_server(self) -> None:
        """Before a point on a server: empty its prefix cache (:meth:`~pytest_llmreplay.target.Target.reset_cache`),
        as every offline point starts on a fresh engine. Every point replays the same prompts, so
        without it each point after the first hits the cache the earlier ones warmed, and its TTFT
        is that of cache hits, not of its load (a search by concurrency 1 to 32 on ``llmreplay sim``
        passed 32 at TTFT p90 145 ms, 99.8% of prompt tokens cached, which offline failed at
        974 ms). A server with no reset, or resets turned off (``--no-cache-reset``), is named once
        through ``progress``."""
        note = self.target.unreset_note(self.target.reset_for_run(), "point")
        if note is None or self.reset_missing:
            return
        self.reset_missing = True
        if self.progress is not None:
            self.progress(f"note: {note}")

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
        """The loads of the two ends, from the estimates where the plan leaves a bound out; by
        concurrency none above the sessions planned (a max of 500 over 32 reported "at least 500"
        of a run 10 deep: a note says so), by rate a max below the synchronous rate is both ends."""
        plan = self.plan
        if plan.by == "concurrency":
            top = min(plan.max or self.sessions, self.sessions)
            if (plan.max or 0) > top and self.progress is not None:
                self.progress(
                    f"note: the capacity's max {plan.max:g} is above the {top} sessions the workload plans, "
                    f"which no more concurrency can put in flight: {top} is the highest run"
                )
            return min(plan.min or 1, top), top
        runs = []
        if plan.min is None:
            runs.append((None, "sync", replace(self.base, mode="concurrency", concurrency=1), False))
        if plan.max is None:
            runs.append((None, "saturate", replace(self.base, mode="concurrency", concurrency=self.sessions), False))
        estimates = {p.role: p for p in self.run_all(runs)}
        low = plan.min if plan.min is not None else estimates["sync"].load
        high = plan.max if plan.max is not None else estimates["saturate"].load
        return min(low, high) if plan.max is not None else low, high

    def run(self) -> Capacity:
        """The search (module docstring); a signal ends it after the points run until then."""
        incomplete = None
        try:
            ended, interrupted = self.search(), None
        except Interrupted as stop:
            ended, interrupted = (
                f"interrupted by {stop} after {len(self.points)} of at most {self.plan.budget} runs",
                str(stop),
            )
        except ServerFailed as failure:
            if not self.points:
                raise LLMReplayError(str(failure)) from None
            ended, interrupted, incomplete = (
                f"stopped by the server's failure after {len(self.points)} of at most {self.plan.budget} runs",
                None,
                str(failure),
            )
        return Capacity(self.plan, self.base, self.points, ended, interrupted, self.rate_unit, incomplete)

    def search(self) -> str:
        """Steps 1 to 4 of the module docstring; why the search ended."""
        plan = self.plan
        low_end, high_end = self.ends()
        runs = [(low_end, "low", self.settings_at(low_end), True)]
        if high_end > low_end:
            runs.append((high_end, "high", self.settings_at(high_end), True))
        ends = self.run_all(runs)
        if not ends[0].passed:
            return f"no load meets the SLOs: {_why_the_lowest_fails(ends[0])}"
        low, high = low_end, None  # high None: no load failed yet
        if len(ends) > 1:
            low, high = (high_end, None) if ends[1].passed else (low_end, high_end)
        if high is None:
            if plan.max is not None or plan.by == "concurrency":
                return "the highest load meets the SLOs: capacity is at least that"
            while high is None:  # grow: twice the highest pass until a rate fails
                if len(self.points) >= plan.budget:
                    return f"no rate failed within the budget of {plan.budget} runs: capacity is at least that"
                point = self.probe(2 * low, "grow")
                low, high = (point.load, None) if point.passed else (low, point.load)
        while not self.resolved(low, high):
            if len(self.points) >= plan.budget:
                return f"budget of {plan.budget} runs spent before the {plan.resolution * 100:g}% resolution"
            mid = (low + high) // 2 if plan.by == "concurrency" else (low + high) / 2
            point = self.probe(mid, "bisect")
            low, high = (mid, high) if point.passed else (low, mid)
        if plan.by == "concurrency" and high - low > plan.resolution * high:
            return "bracket of adjacent concurrencies: no load between them to run"  # [6, 7] is 14%, not within 5%
        return f"bracket within the {plan.resolution * 100:g}% resolution"

    def resolved(self, low: float, high: float) -> bool:
        if self.plan.by == "concurrency" and high - low <= 1:
            return True
        return high - low <= self.plan.resolution * high


def find_capacity(
    workload: Workload,
    target: Target,
    prompts: PromptFactory,
    plan: CapacityPlan,
    settings: ReplaySettings = ReplaySettings(),
    progress: Callable[[str], None] | None = None,
    workers: int = 2,
    signals: SignalStop | None = None,
    test_slos: Sequence[SLO] = (),
    check_server: Callable[[], None] | None = None,
) -> Capacity:
    """Search the highest load of ``workload`` on ``target`` meeting ``plan``'s SLOs (module
    docstring); ``settings``: every other replay setting of each point; ``progress``: gets a line
    per point as it finishes; ``workers``: processes for the estimates and the ends (offline only);
    ``signals``: an entered :class:`~pytest_llmreplay.replayer.signal_stop.SignalStop`, whose first signal
    cuts the point running in this process at once and ends the search with what it measured;
    ``test_slos``: the test's own SLOs, whose ``capacity.*`` keys are checked against the
    search's (:func:`check_capacity_unit`) before any point runs; ``check_server``: raises
    LLMReplayError when the server has died, asked after each point (module docstring: a server
    that fails)."""
    return Search(workload, target, prompts, plan, settings, progress, workers, signals, test_slos, check_server).run()
