"""What the points of a capacity search say (:mod:`~pytest_llmreplay.search.capacity` runs them and says
when one passes): each point's verdict and carried rate, the capacity with its bracket, and the
table of the points.

**Carried load**: a point's carried rate c is the sessions per second it served, answered
requests / run time * sessions / requests planned (sessions / run time when all were answered;
an estimate's load is its c). An open loop (by rate) of n sessions at λ lasts (n - 1) / λ plus
the last requests' drain, so c is a little under λ even when the load was carried; with
c < :data:`CARRIED_SHARE` λ (0.8) it was not: its SLOs held only because the run ended before
they could see the rate was not sustained (the workload is too short for that rate), or its
failed requests (errors no SLO limits) are the part it did not serve.

**Capacity** (:class:`Capacity`; 0 when no point run at its load passed): by ``concurrency``
the highest load that passed; by ``rate`` max over the passing points of min(load, carried),
never above the throughput a point achieved. Its uncertainty is the bracket [capacity, high],
high the lowest load that failed (a point run at that load; a point a signal cut short neither
passed nor failed) in the share of its load the capacity's point carried (:attr:`Capacity.top`:
both ends one kind of figure), None when none did: then the capacity is ``at least`` (a lower bound). When the point at capacity did not carry its load,
the capacity is the rate it carried, a ceiling, never ``at least``, and the search's reason
says so in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from ..metrics.names import capacity_stat
from ..metrics.result import Result
from ..metrics.slo import Check
from ..replayer.plan import ReplaySettings
from ..replayer.records import ReplayRun
from .stop import OPEN_LOOP_MODES

CARRIED_SHARE = 0.8  # an open-loop point carried its load when it served at least this share of it (module docstring)
# roles of the closed-loop runs that only say where a rate search looks (search/capacity.py's docstring)
ESTIMATE_ROLES = ("sync", "saturate")


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
        """Why its stop rule ended it early (:mod:`~pytest_llmreplay.search.stop`)."""
        return self.result.run.stopped

    @property
    def interrupted(self) -> str | None:
        """The signal that cut it short (neither a pass nor a failure: a part of its load ran)."""
        return self.result.run.interrupted

    @property
    def passed(self) -> bool:
        return self.stopped is None and self.interrupted is None and all(c.passed for c in self.checks)

    @property
    def failed(self) -> bool:
        return not self.passed and self.interrupted is None

    @property
    def estimate(self) -> bool:
        """A closed-loop run that only says where a rate search looks (never the capacity)."""
        return self.role in ESTIMATE_ROLES

    def figures(self) -> dict[str, Any]:
        """What is kept of the point in the stored result (and drawn in a load curve): the load,
        the verdict, each SLO's measured value, throughput, goodput, error rate, counts and the
        commonest errors (:meth:`errors`)."""
        summary = self.result.summary
        goodput = summary.get("goodput", {})
        return {
            "load": self.load,
            "role": self.role,
            "passed": self.passed,
            "stopped": self.stopped,
            "interrupted": self.interrupted,
            "carried": self.carried,
            "settings": {
                key: getattr(self.settings, key) for key in ("mode", "rate", "concurrency", "arrival", "speedup")
            },
            "slo": {c.slo.key: c.measured for c in self.checks},
            "request_throughput": summary.get("request_throughput", {}).get("overall"),
            "output_throughput": summary.get("output_throughput", {}).get("overall"),
            "goodput": goodput.get("value"),
            "goodput_rate": goodput.get("rate"),
            "error_rate": summary.get("error_rate", {}).get("value"),
            "ttft_p50": summary.get("ttft", {}).get("p50"),
            "ttft_p99": summary.get("ttft", {}).get("p99"),
            "tpot_p50": summary.get("tpot", {}).get("p50"),
            "tpot_p99": summary.get("tpot", {}).get("p99"),
            "requests_ok": summary["requests"]["ok"],
            "requests_planned": summary["requests"]["planned"],
            "errors": self.errors(),
        }

    def errors(self, most: int = 3) -> dict[str, int]:
        """The ``most`` commonest error texts of the point's failed requests, with their counts:
        a search stores only the result at capacity, so this is what says why a point failed."""
        from collections import Counter

        found = Counter(record.error or "unknown" for record in self.result.records if record.status == "failed")
        return dict(found.most_common(most))

    def commonest_error(self) -> str:
        """The commonest error of its failed requests and how many had it: ``connect: ... (x31)``."""
        text, count = next(iter(self.errors(1).items()), ("unknown", 0))
        return f"commonest: {text} (x{count})"

    def verdict(self) -> str:
        """``pass``, ``pass (not carried)``, ``FAIL``, ``FAIL (stopped)`` or ``interrupted``."""
        if self.interrupted:
            return "interrupted"
        return (
            ("pass" if self.carried_its_load else "pass (not carried)")
            if self.passed
            else ("FAIL (stopped)" if self.stopped else "FAIL")
        )

    def line(self, index: int, budget: int, by: str, rate_unit: str = "req/s") -> str:
        """The progress line of a finished point; ``rate_unit``: what a rate counts
        (:attr:`Capacity.rate_unit`)."""
        unit = f" {rate_unit}" if by == "rate" else ""
        measured = "  ".join(
            f"{c.slo.key} {'-' if c.measured is None else c.slo.show(c.measured)}" for c in self.checks
        )
        figures = self.figures()
        goodput = (
            ""
            if figures["goodput_rate"] is None
            else f"  goodput {figures['goodput_rate']:.4g} req/s ({figures['goodput'] * 100:.0f}%)"
        )
        verdict = "interrupted" if self.interrupted else "pass" if self.passed else "FAIL"
        stopped = f"  (stopped early: {self.stopped})" if self.stopped else ""
        load = f"{by} {self.load:.4g}{unit}"
        if self.estimate:
            load = f"estimate, {self.settings.concurrency} in flight: carried {self.load:.4g} {rate_unit}"
        return f"point {index}/{budget} {self.role:>6} {load}: {verdict}  {measured}{goodput}{stopped}"


class CapacityResult(Result):
    """The stored face of a search: the point at capacity (the highest that passed, else the
    lowest run), with the search's settings (so two commits' searches compare) and
    ``summary["capacity"]`` = {by: capacity, ``low``, ``high`` (the bracket), ``runs``}."""

    def __init__(self, run: ReplayRun, gpus: int, goodput: Mapping[str, float], capacity: Capacity) -> None:
        super().__init__(run, gpus, goodput)
        self.capacity = capacity
        self.summary["capacity"] = capacity.figures()


@dataclass
class Capacity:
    """The outcome of a search: every run in run order (estimates included), why the search
    ``ended``, the signal that ``interrupted`` it, if one did, and the error of a server that
    failed during it (``incomplete``: it died, or stopped answering), if one did; the capacity,
    its point, its bracket and whether it is a ceiling follow from the points (module docstring)."""

    plan: Any  # a search.CapacityPlan (search/capacity.py imports this module)
    base: ReplaySettings
    points: list[Point]
    ended: str
    interrupted: str | None = None
    # what a rate counts: sessions start at the rate, so with multi-turn sessions it is sessions/s
    # (the requests/s columns are the requests answered); req/s when every session is one request
    rate_unit: str = "req/s"
    incomplete: str | None = None

    @property
    def high(self) -> float | None:
        """The bracket's top: the lowest load run that failed (interrupted points neither pass nor
        fail), None when none did."""
        return min((p.load for p in self.load_points if p.failed), default=None)

    @property
    def top(self) -> float | None:
        """The bracket's top in the capacity's own terms: :attr:`high` (a load offered) times
        capacity / the load offered at the capacity's point, so that both ends are one kind of
        figure. By rate the capacity is the rate its point carried, a little under the rate it was
        offered even when nothing queued (the drain, module docstring), so a bracket of the
        carried rate and the failing load offered would be wider than the search's resolution
        by that share, and two equal searches would differ by up to it; scaled, the bracket's
        width is the step between the loads that passed and failed. :attr:`high` itself when the
        capacity is its point's load (or 0) or a :attr:`ceiling` (what its point carried says
        where the capacity lies no closer than that), None when no load failed."""
        point = self.at_capacity
        if self.high is None or not self.low or point.estimate or not point.passed or self.ceiling:
            return self.high
        return self.high * self.low / point.load

    @cached_property
    def at_capacity(self) -> Point:
        """The passing point run at its load with the highest credited load, else the lowest load
        run (an estimate when a signal stopped the search before any)."""
        passed = [p for p in self.load_points if p.passed]
        return (
            max(passed, key=lambda p: p.credited)
            if passed
            else min(self.load_points or self.points, key=lambda p: p.load)
        )

    @property
    def low(self) -> float:
        """The capacity, the bracket's bottom: the credited load of the point at capacity (0 when none passed)."""
        point = self.at_capacity
        return point.credited if point.passed and not point.estimate else 0.0

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
        return self.low > 0 and self.high is None and not self.ceiling

    @property
    def reason(self) -> str:
        """Why the search ended; for a ceiling, the line that says why the capacity is the rate
        carried (after the signal that stopped the search, if one did, and ``no rate failed`` if
        none did): its point's failed requests, when with them it would have carried its load
        (no SLO limits errors), else the rate the server did not keep up with, which the SLOs
        missed because the workload ended first (its last requests drained after the arrivals:
        a queue may or may not have built, the rate was not sustained)."""
        if not self.ceiling:
            return self.ended
        point = self.at_capacity
        requests = point.result.summary["requests"]
        ok, failed = requests["ok"], requests["failed"]
        carried = f"the {point.load:.4g} {self.rate_unit} point met the SLOs carrying only {point.carried:.4g} {self.rate_unit}"
        if failed and ok and point.carried * (ok + failed) / ok >= CARRIED_SHARE * point.load:
            cause = (
                f"{failed / (ok + failed):.0%} of its requests failed ({point.commonest_error()}) and no SLO limits errors "
                "(add one: sweep --slo 'error_rate<=1%', a test's capacity.slo error_rate)"
            )
        else:
            cause = (
                "the server did not keep up with that rate (its last requests drained after the arrivals ended), yet the SLOs held "
                "because the workload ended first (too short for that rate); a longer workload would measure the rate sustained"
            )
        # the signal's line, not "bracket within ...": that is of the loads offered, not the ceiling;
        # "no rate failed" where none did, as "at least" would say, which a ceiling is not
        before = [self.ended] if self.interrupted else []
        before += ["no rate failed"] if self.high is None else []
        return "; ".join([*before, f"{carried}: {cause}, so the capacity is the rate carried, a ceiling"])

    @property
    def load_points(self) -> list[Point]:
        """The points run at their load (the estimates left out)."""
        return [p for p in self.points if not p.estimate]

    def figures(self) -> dict[str, float]:
        """``summary["capacity"]``: the capacity under its statistic (``rate``, ``session_rate`` or
        ``concurrency``: :func:`~pytest_llmreplay.metrics.names.capacity_stat`), ``low``, ``high``
        (:attr:`top`; with no upper bound, ``high`` = ``low``) and ``runs``."""
        high = self.low if self.top is None else self.top
        return {
            capacity_stat(self.plan.by, self.rate_unit): self.low,
            "low": self.low,
            "high": high,
            "runs": float(len(self.points)),
        }

    @cached_property
    def result(self) -> CapacityResult:
        """The point at capacity's result, with the search's settings; a search a signal cut
        short marks it ``interrupted`` (with a warning when that point itself ran out), so that
        it is kept but never taken as a baseline, as an interrupted replay is."""
        point = self.at_capacity.result
        settings = {**self.base.as_dict(), "capacity": self.plan.as_dict()}
        run = replace(point.run, settings=settings)
        if self.incomplete:
            run = replace(
                run,
                warnings=[
                    *run.warnings,
                    f"the capacity search is incomplete, {self.ended}: its capacity is what those runs found",
                ],
            )
        if self.interrupted and not run.interrupted:
            run = replace(
                run,
                interrupted=self.interrupted,
                warnings=[
                    *run.warnings,
                    f"the capacity search was {self.ended}: its capacity is what those runs found",
                ],
            )
        return CapacityResult(run, point.gpus, point.goodput, self)

    def as_dict(self) -> dict[str, Any]:
        """The search as stored beside the result: plan, capacity, bracket, ``at_least`` (no
        upper bound found and the capacity no ceiling), ``ceiling`` (the capacity is the rate its
        point carried, the workload too short for its rate), ``upper_bound_found`` (a failing load
        above the capacity: else the bracket's ``high`` is only the capacity repeated), reason,
        ``interrupted`` (the signal that stopped the search, or None), ``incomplete`` (the error
        of the server that failed during it, or None), the points run at their load and the estimates."""
        return {
            "plan": self.plan.as_dict(),
            **self.figures(),
            "at_least": self.at_least,
            "ceiling": self.ceiling,
            "upper_bound_found": self.high is not None,
            "offered": self.offered(),
            "rate_unit": self.rate_unit,
            "reason": self.reason,
            "interrupted": self.interrupted,
            "incomplete": self.incomplete,
            "points": [p.figures() for p in self.load_points],
            "estimates": [p.figures() for p in self.points if p.estimate],
        }

    def offered(self) -> dict[str, float | None]:
        """The bracket in loads offered, as a load curve's axis shows them: ``low`` the load the
        capacity's point ran at (0 when none passed), ``high`` the lowest that failed (None when
        none did)."""
        point = self.at_capacity
        return {"low": point.load if self.low else 0.0, "high": self.high}

    def table(self) -> str:
        """A row per point run at its load, in load order (``pass (not carried)``: it met the SLOs
        carrying under :data:`CARRIED_SHARE` of its rate; a point stopped early shows no rates:
        its requests over part of a run are no rate of its load); the estimates below, apart (their loads
        are what a closed loop carried, not rates run); then the headline."""
        from tabulate import tabulate

        keys = [slo.key for slo in self.plan.slos]
        unit = f" {self.rate_unit}" if self.plan.by == "rate" else ""

        def rows(points: list[Point]) -> list[list[str]]:
            out = []
            for point in sorted(points, key=lambda p: p.load):
                f = point.figures()
                measured = {c.slo.key: ("-" if c.measured is None else c.slo.show(c.measured)) for c in point.checks}
                out.append(
                    [f"{point.load:.4g}", point.verdict()]
                    + [measured[k] for k in keys]
                    + [
                        # a point stopped early answered for part of its run: no rate of its load
                        "-" if point.stopped else _fmt(f["request_throughput"]),
                        "-" if point.stopped else _fmt(f["goodput_rate"]),
                        "-" if f["goodput"] is None else f"{f['goodput'] * 100:.0f}%",
                    ]
                )
            return out

        tail = ["req/s", "goodput req/s", "good"]
        text = f"Capacity search by {self.plan.by}\n" + tabulate(
            rows(self.load_points), headers=[self.plan.by + unit, "verdict"] + keys + tail, tablefmt="simple"
        )
        estimates = [p for p in self.points if p.estimate]
        if estimates:
            table = tabulate(
                [
                    [f"{p.role}, {p.settings.concurrency} in flight"] + row
                    for p, row in zip(sorted(estimates, key=lambda p: p.load), rows(estimates), strict=True)
                ],
                headers=["estimate (closed loop)", f"carried {self.rate_unit}", "verdict"] + keys + tail,
                tablefmt="simple",
            )
            text += "\nEstimates (where to look; not rates run, never the capacity)\n" + table
        return text + "\n" + self.headline()

    def headline(self) -> str:
        unit = f" {self.rate_unit}" if self.plan.by == "rate" else ""
        if self.at_least:
            return (
                f"capacity ({self.plan.by}): at least {self.low:.4g}{unit} (no upper bound found), bracket [{self.low:.4g}, -], "
                f"{len(self.points)} runs; {self.reason}"
            )
        high = "-" if self.top is None else f"{self.top:.4g}"
        point = self.at_capacity
        bracket = f"bracket [{self.low:.4g}, {high}]"
        if point.passed and not point.estimate and point.credited < point.load and not self.ceiling:
            offered = "-" if self.high is None else f"{self.high:.4g}"  # a ceiling's reason says it already
            bracket = f"carried at {point.load:.4g}{unit} offered; {bracket} (offered [{point.load:.4g}, {offered}] in the share carried)"
        return f"capacity ({self.plan.by}): {self.low:.4g}{unit}, {bracket}, {len(self.points)} runs; {self.reason}"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def carried_rate(run: ReplayRun, sessions: int) -> float:
    """Sessions per second ``run`` served: answered requests / run time * ``sessions`` /
    requests planned (module docstring); 0 for a run of no time."""
    if run.duration_s <= 0 or not run.planned_requests:
        return 0.0
    answered = sum(record.status == "ok" for record in run.records)
    return answered / run.duration_s * sessions / run.planned_requests
