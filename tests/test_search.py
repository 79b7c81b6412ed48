"""Capacity at SLO (``pytest_llmreplay.search.capacity``) on the offline simulator: the bracket holds the
answer an exhaustive grid finds, a capacity by rate is never above what its point carried, a
faster profile carries more, an SLO no load meets, the budget, the early stop (its rule checked
against the final statistic), and bad plans."""

from __future__ import annotations

import os
import random
import signal

import pytest
from records import make, rec

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.gate.history import t_quantile
from pytest_llmreplay.metrics.result import stats
from pytest_llmreplay.metrics.slo import Check, parse_slos
from pytest_llmreplay.metrics.units import format_figure, format_value, significant
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.report.html import load_curve_section
from pytest_llmreplay.search.capacity import CapacityPlan, Search, find_capacity, parse_capacity, run_point
from pytest_llmreplay.search.outcome import Point
from pytest_llmreplay.search.stop import QueueGrowth, StopRule
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.target import Target
from pytest_llmreplay.workloads.formats import load_workload
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

# 60 one-turn sessions: a point replays in a few hundredths of a second offline
WORKLOAD = """\
synthetic:
  sessions: 60
  input_tokens: {dist: uniform, min: 256, max: 2048}
  output_tokens: {dist: uniform, min: 32, max: 256}
  rate: 10
  seed: 3
"""
SLO = {"ttft.p90": "< 150ms", "tpot.p90": "< 30ms"}


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    path = tmp_path_factory.mktemp("wl") / "wl.yaml"
    path.write_text(WORKLOAD)
    return load_workload(path)


# 400 sessions: an open-loop point lasts long enough (seconds of schedule) for a queue's trend
LONG_WORKLOAD = WORKLOAD.replace("sessions: 60", "sessions: 400")


@pytest.fixture(scope="module")
def long_workload(tmp_path_factory):
    path = tmp_path_factory.mktemp("wl") / "long.yaml"
    path.write_text(LONG_WORKLOAD)
    return load_workload(path)


@pytest.fixture(scope="module")
def prompts():
    return PromptFactory(load_tokenizer(None), seed=0)


def target(prompts, profile="llama-3.1-8b-h100"):
    return Target("offline", profile=load_profile(profile), prompts=prompts)


def point_at(workload, prompts, plan, load, profile="llama-3.1-8b-h100"):
    """One point at ``load``, run to its end (no early stop)."""
    search = Search(workload, target(prompts, profile), prompts, plan, workers=1)
    settings = search.settings_at(load)
    return search.keep(load, "grid", settings, run_point(search.job(settings, stop=False)))


def passes(workload, prompts, plan, load, profile="llama-3.1-8b-h100"):
    """Does one point at ``load`` meet the plan's SLOs (run to its end, no early stop)?"""
    return point_at(workload, prompts, plan, load, profile).passed


@pytest.fixture(scope="module")
def grid_capacity(workload, prompts):
    """The exhaustive grid's answer for SLO by ``by``, computed once per ``by``: (the highest
    grid load that passes with every lower grid load passing too, each run to its end; the
    highest load those passing points are credited with: by rate, the lower of the rate
    offered and the rate carried)."""
    grids = {"concurrency": range(1, 61), "rate": [0.5 * k for k in range(1, 81)]}
    answers = {}

    def answer(by):
        if by not in answers:
            plan = CapacityPlan(by=by, slo=SLO)
            best, credited = None, 0.0
            for load in grids[by]:
                point = point_at(workload, prompts, plan, load)
                if not point.passed:
                    break
                best, credited = load, max(credited, point.credited)
            answers[by] = best, credited
        return answers[by]

    return answer


def ran_at(point, by, load):
    """Was ``point`` run at ``load`` in the search's own mode (not an estimate's closed loop)?"""
    if by == "concurrency":
        return point.settings.mode == "concurrency" and point.settings.concurrency == load
    return point.settings.mode == "rate" and point.settings.rate == load


@pytest.mark.parametrize(("by", "bounds"), [("concurrency", (1, 60)), ("rate", (0.5, 40)), ("rate", (None, None))])
def test_capacity_lies_within_one_resolution_step_of_an_exhaustive_grid(workload, prompts, grid_capacity, by, bounds):
    plan = CapacityPlan(by=by, slo=SLO, min=bounds[0], max=bounds[1])
    found = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    assert found.high is not None and found.low < found.high, found.reason
    best, credited = grid_capacity(by)
    assert best is not None
    step = max(plan.resolution * found.high, 1 if by == "concurrency" else 0)
    # the bisection brackets the grid's highest passing load between a pass and a failure
    top = max(p.load for p in found.load_points if p.passed)
    assert top <= best + step and best <= found.high + step
    assert abs(top - best) <= step + (1 if by == "concurrency" else 0.5)  # the grid's own spacing
    # the bracket's top is a point run at its load that failed; the highest pass is one that passed
    high = [p for p in found.points if ran_at(p, by, found.high)]
    assert high and not any(p.passed for p in high) and all(p.passed for p in found.points if ran_at(p, by, top))
    # the capacity is what the grid credits (by concurrency the same load; by rate what was carried)
    assert abs(found.low - credited) <= step + (1 if by == "concurrency" else 0.5)


def test_a_rate_the_workload_ends_before_it_is_carried_caps_the_capacity_at_the_rate_carried(workload, prompts):
    # every session at once carries ~12 sessions/s here, and a Poisson stream of the 60 sessions
    # meets the SLOs up to ~26/s offered: its arrivals last 2.3 s, and the run ends before the
    # queue builds. The search still grows the bracket past the saturating run (which only says
    # where to look), but no capacity is above what its point carried: here a ceiling, said so
    found = find_capacity(workload, target(prompts), prompts, CapacityPlan(by="rate", slo=SLO), workers=1)
    (saturating,) = [p for p in found.points if p.role == "saturate"]
    assert saturating.estimate and not saturating.passed and saturating.settings.mode == "concurrency"
    assert any(p.role == "grow" for p in found.points)
    at = found.at_capacity
    assert at.passed and at.load > 1.5 * saturating.load and at.carried < 0.6 * at.load  # offered twice what it carried
    throughput = at.result.summary["request_throughput"]["overall"]
    assert found.value == at.carried <= throughput * (1 + 1e-9)  # one-turn sessions: sessions/s is req/s
    assert all(found.value >= p.credited for p in found.load_points if p.passed)
    assert found.ceiling and not found.at_least and found.result.summary["capacity"]["rate"] == found.value
    assert found.reason == (
        f"the {at.load:.4g} req/s point met the SLOs carrying only {at.carried:.4g} req/s: the server did not keep up "
        "with that rate (its last requests drained after the arrivals ended), yet the SLOs held because the workload ended first "
        "(too short for that rate); a longer workload would measure the rate sustained, so the capacity is the rate carried, a ceiling"
    )
    assert (
        found.headline()
        == f"capacity (rate): {found.value:.4g} req/s, bracket [{found.value:.4g}, {found.high:.4g}], {len(found.points)} runs; {found.reason}"
    )
    # the table keeps the estimates apart from the rates run, and never calls them the bracket
    table = found.table()
    rates, estimates = table.split("Estimates (where to look; not rates run, never the capacity)")
    rows = [line.split()[:2] for line in rates.splitlines()[3:]]
    assert rows == [
        [f"{p.load:.4g}", "pass" if p.passed else "FAIL"] for p in sorted(found.load_points, key=lambda p: p.load)
    ]
    assert [f"{saturating.load:.4g}", "pass"] in rows  # run as a rate, that load passed; all at once it failed
    assert "saturate, 60 in flight" in estimates
    assert [p["role"] for p in found.as_dict()["estimates"]] == ["sync", "saturate"]
    assert not any(p["role"] in ("sync", "saturate") for p in found.as_dict()["points"])


CAPACITY_PLANS = {
    "rate": {"by": "rate", "slo": SLO},
    "rate, min": {"by": "rate", "slo": SLO, "min": 2},
    "rate, max": {"by": "rate", "slo": SLO, "max": 20},
    "rate, constant": {"by": "rate", "slo": SLO, "arrival": "constant", "budget": 8},
    "rate, at least": {"by": "rate", "slo": {"tpot.p90": "< 1s"}, "budget": 6},
    "rate, only the synchronous run": {"by": "rate", "slo": {"ttft.max": "< 62ms"}},
    "rate, none": {"by": "rate", "slo": {"ttft.p99": "< 1us"}},
    "concurrency": {"by": "concurrency", "slo": SLO},
    "concurrency, at least": {"by": "concurrency", "slo": {"ttft.p99": "< 1000s"}},
}


@pytest.mark.parametrize("name", list(CAPACITY_PLANS))
def test_the_capacity_always_comes_from_a_load_run_in_the_searchs_mode_that_passed(workload, prompts, name):
    # by concurrency that load; by rate the lower of the rate offered and the rate carried
    plan = parse_capacity(CAPACITY_PLANS[name])
    found = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    if found.value > 0:
        at = found.at_capacity
        assert ran_at(at, plan.by, at.load) and at.passed, (name, found.headline())
        assert found.value == (min(at.load, at.carried) if plan.by == "rate" else at.load)
    else:
        assert not any(p.passed for p in found.points if not p.estimate)
    if found.high is not None:  # the bracket's top: a load run in the search's mode that failed
        top = [p for p in found.points if ran_at(p, plan.by, found.high)]
        assert top and not any(p.passed for p in top), (name, found.headline())
    assert found.result.summary["capacity"][plan.by] == found.value


def test_an_slo_only_the_synchronous_run_meets_gives_capacity_zero(workload, prompts):
    # one request at a time: TTFT at most ~60 ms; a Poisson stream at the rate that run carried
    # lets requests overlap and fails: no rate was seen to pass, so capacity is 0, not the
    # synchronous run's rate (a closed loop, never run as a rate)
    found = find_capacity(
        workload, target(prompts), prompts, CapacityPlan(by="rate", slo={"ttft.max": "< 62ms"}), workers=1
    )
    sync = found.points[0]
    assert sync.role == "sync" and sync.passed
    assert (found.value, found.high) == (0, sync.load) and found.reason.startswith("no load meets the SLOs")
    (low,) = [p for p in found.points if p.role == "low"]
    assert ran_at(low, "rate", sync.load) and not low.passed


def test_no_failing_rate_within_the_budget_says_capacity_is_at_least(long_workload, prompts):
    # tpot.p90 < 1s holds at both ends of 400 sessions, and the top one, at the rate every session
    # at once carried, carried most of it (its arrivals last 19 s): the budget of 4 leaves no run
    # to grow the bracket, and the result says no upper bound was found
    plan = CapacityPlan(by="rate", slo={"tpot.p90": "< 1s"}, budget=4)
    found = find_capacity(long_workload, target(prompts), prompts, plan, workers=1)
    assert [p.role for p in found.points] == ["sync", "saturate", "low", "high"] and all(p.passed for p in found.points)
    high = found.points[-1]
    assert (
        0.8 * high.load <= high.carried < high.load and found.value == high.carried
    )  # carried: a lower bound, at most what it achieved
    assert (found.high, found.at_least, found.ceiling) == (None, True, False)
    assert found.reason == "no rate failed within the budget of 4 runs: capacity is at least that"
    assert found.headline().startswith(
        f"capacity (rate): at least {found.value:.4g} req/s (no upper bound found), bracket [{found.value:.4g}, -], 4 runs"
    )
    stored = found.as_dict()
    assert stored["at_least"] is True and stored["rate"] == stored["low"] == stored["high"] == found.value
    assert found.result.summary["capacity"] == {"rate": found.value, "low": found.value, "high": found.value, "runs": 4}


def test_rates_that_pass_without_being_carried_give_a_ceiling_not_at_least(workload, prompts):
    # tpot.p90 < 1s holds at any rate 60 sessions can be sent at: the bracket grows (twice the
    # highest pass each run) until the budget is spent; but the 60 sessions arrive within a
    # second at those rates, and the run ends before any queue builds: what was carried
    # (~12 sessions/s) is the capacity, a ceiling, and no lower bound on a rate never carried
    plan = CapacityPlan(by="rate", slo={"tpot.p90": "< 1s"}, budget=6)
    found = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    roles = [p.role for p in found.points]
    assert roles == ["sync", "saturate", "low", "high", "grow", "grow"]
    grown = [p for p in found.points if p.role == "grow"]
    assert grown[1].load == pytest.approx(2 * grown[0].load) and all(p.passed for p in found.points if not p.estimate)
    assert found.value == max(p.carried for p in grown) < 0.6 * grown[0].load
    assert (found.high, found.at_least, found.ceiling) == (None, False, True)
    assert found.reason.startswith(
        f"no rate failed; the {found.at_capacity.load:.4g} req/s point met the SLOs carrying only {found.value:.4g} req/s: "
    )
    assert (
        found.headline()
        == f"capacity (rate): {found.value:.4g} req/s, bracket [{found.value:.4g}, -], 6 runs; {found.reason}"
    )
    stored = found.as_dict()
    assert (
        stored["at_least"] is False
        and stored["upper_bound_found"] is False
        and stored["rate"] == stored["low"] == stored["high"] == found.value
        and stored["reason"] == found.reason
    )
    rate = format_value("request_throughput", found.value)  # the HTML report's line, as the headline: no top
    assert f"capacity (rate) {rate}, bracket [{rate}, -], 6 runs" in load_curve_section(
        {"test": "t", "capacity": stored}
    )
    assert found.result.summary["capacity"] == {"rate": found.value, "low": found.value, "high": found.value, "runs": 6}


def test_a_signal_between_points_ends_the_search_with_the_points_run(workload, prompts):
    # SIGINT as the two ends are kept (no point replaying: llmreplay sweep's handler only records
    # it): no bisection starts, and the capacity and bracket are those of the two ends
    from pytest_llmreplay.replayer.signal_stop import SignalStop

    def progress(line):
        if line.startswith("point 2/"):
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        with SignalStop() as signals:
            found = find_capacity(
                workload,
                target(prompts),
                prompts,
                CapacityPlan(by="concurrency", slo=SLO),
                progress=progress,
                workers=1,
                signals=signals,
            )
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    assert [p.role for p in found.points] == ["low", "high"] and found.interrupted == "SIGINT"
    assert (found.value, found.high) == (1, 60) and not any(p.interrupted for p in found.points)
    assert (
        found.reason == "interrupted by SIGINT after 2 of at most 12 runs"
        and found.as_dict()["interrupted"] == "SIGINT"
    )


def test_a_signal_during_the_first_point_of_a_batch_keeps_that_point_and_runs_no_other(workload, prompts):
    # the signal is there before the first of the two ends runs: it starts, at once interrupted,
    # and is kept; the second end never starts (the batch used to fail in zip(strict=True))
    from pytest_llmreplay.replayer.signal_stop import SignalStop

    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        with SignalStop() as signals:
            os.kill(os.getpid(), signal.SIGINT)
            found = find_capacity(
                workload, target(prompts), prompts, CapacityPlan(by="concurrency", slo=SLO), workers=1, signals=signals
            )
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    assert [(p.role, p.interrupted) for p in found.points] == [("low", "SIGINT")]
    assert found.reason == "interrupted by SIGINT after 1 of at most 12 runs" and found.value == 0
    assert found.result.run.interrupted == "SIGINT"


def test_a_rate_of_multi_turn_sessions_is_said_in_sessions_per_second(tmp_path, workload, prompts):
    # the rate starts sessions; with three turns each, the requests answered per second are about
    # three times the sessions carried, so a load labelled req/s contradicted its own row
    path = tmp_path / "turns.yaml"
    path.write_text(WORKLOAD.replace("sessions: 60", "sessions: 20\n  turns: 3\n  delay: 0.1"))
    plan = CapacityPlan(by="rate", slo=SLO, min=1, max=4, budget=3)
    lines: list[str] = []
    found = find_capacity(load_workload(path), target(prompts), prompts, plan, progress=lines.append, workers=1)
    assert found.rate_unit == "sessions/s" and found.as_dict()["rate_unit"] == "sessions/s"
    assert lines[0].startswith("point 1/3    low rate 1 sessions/s: ")
    assert f"capacity (rate): {found.value:.4g} sessions/s" in found.headline()
    assert "rate sessions/s" in found.table() and "req/s" in found.table()  # the requests' own columns stay req/s
    section = load_curve_section({"test": "t", "capacity": found.as_dict()})
    assert f"capacity (rate) {format_value('session_throughput', found.value)}," in section
    assert "offered load (sessions/s" in section and "offered load (req/s" not in section  # the plots' axes
    # the figure itself: stored under its own key, so every reader of a summary writes sessions/s
    capacity = found.result.summary["capacity"]
    assert capacity["session_rate"] == found.value and "rate" not in capacity
    assert format_figure("capacity.session_rate", found.value) == f"{significant(found.value)} sessions/s"
    single = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    assert single.rate_unit == "req/s"  # one request a session: the two rates are one
    assert (
        single.result.summary["capacity"]["rate"] == single.value
        and "session_rate" not in single.result.summary["capacity"]
    )


@pytest.mark.parametrize(
    ("turns", "key", "expected"),
    [
        (3, "capacity.rate", r"write capacity.session_rate \(sessions/s\)$"),
        (1, "capacity.session_rate", "write capacity.rate"),
    ],
)
def test_a_capacity_slo_on_the_other_rate_stops_before_the_first_point(tmp_path, prompts, turns, key, expected):
    # which rate a search stores is known once the workload's sessions are planned: an SLO that
    # names the other would read "not measured" after the whole search
    path = tmp_path / "turns.yaml"
    path.write_text(WORKLOAD.replace("sessions: 60", f"sessions: 20\n  turns: {turns}\n  delay: 0.1"))
    runs: list[str] = []
    with pytest.raises(LLMReplayError, match=expected) as raised:
        find_capacity(
            load_workload(path),
            target(prompts),
            prompts,
            CapacityPlan(by="rate", slo=SLO, min=1, max=4, budget=3),
            progress=runs.append,
            workers=1,
            test_slos=parse_slos({key: ">= 1"}),
        )
    assert str(raised.value).startswith(f"slo {key!r}: ") and runs == []


def test_a_point_keeps_its_commonest_errors_with_its_figures():
    # a search stores only the result at capacity: a point's own figures say why it failed
    failures = ["http: HTTP 500: boom"] * 3 + ["timeout: no data for 60 s after 2 tokens"] + ["stream: lost"] * 2
    records = [rec(i, status="failed", sent=0.1, end=0.2, error=e) for i, e in enumerate(failures)]
    records += [rec(9, status="failed", sent=0.1, end=0.2), rec(10, sent=0.1, chunks=((0.2, 1),), end=0.3)]
    point = Point(4.0, "bisect", ReplaySettings(mode="concurrency", concurrency=4), make(records), [], 1.0)
    assert point.figures()["errors"] == {
        "http: HTTP 500: boom": 3,
        "stream: lost": 2,
        "timeout: no data for 60 s after 2 tokens": 1,
    }
    assert list(point.errors(most=1)) == ["http: HTTP 500: boom"]
    clean = Point(4.0, "bisect", ReplaySettings(mode="concurrency", concurrency=4), make(records[-1:]), [], 1.0)
    assert clean.figures()["errors"] == {}


def test_equal_rate_searches_compare_within_their_step_and_a_15_percent_drop_is_a_regression():
    """A new user's pair of searches on multi-turn sessions, whose open loops carried 85% of what
    they were offered (the drain of long sessions): with the bracket's top the failing load
    offered, two equal searches compared as +0.0% [-17.7%, +21.5%] and a real 15% drop, brackets
    apart, as noise. With both ends rates carried, the equal pair's interval is the search's step
    and the drop is a regression."""
    from test_baseline import with_capacity

    from pytest_llmreplay.gate.baseline import compare
    from pytest_llmreplay.search.outcome import Capacity

    plan = CapacityPlan(by="rate", slo=SLO)
    rate = ReplaySettings(mode="rate", rate=1.0)
    run = make([rec(0, sent=0.1, chunks=((0.2, 1),), end=0.3)])
    failing = Check(parse_slos({"ttft.p90": "< 1ms"})[0], 0.1, -0.099, False)

    def stored(passed_at: float, carried: float, failed_at: float) -> dict:
        points = [
            Point(passed_at, "low", rate, run, [], carried),
            Point(failed_at, "high", rate, run, [failing], carried),
        ]
        figures = Capacity(plan, rate, points, "bracket within the 5% resolution").figures()
        return with_capacity(figures["low"], figures["high"])

    base, slow = stored(0.5486, 0.4644, 0.5642), stored(0.4591, 0.3935, 0.4732)
    (same,) = compare(base, base, {"capacity.rate": 0.05}).rows
    assert same.change == 0 and -0.03 < same.low < 0 < same.high < 0.03 and same.verdict == "ok"
    (drop,) = compare(base, slow, {"capacity.rate": 0.05}).rows
    assert drop.change == pytest.approx(0.3935 / 0.4644 - 1) and drop.high < 0 and drop.verdict == "regression"


def test_the_headline_says_where_a_capacity_below_its_offered_load_was_carried():
    # the capacity is the rate carried (here 9 of 10 offered, no ceiling: over 80% carried); the
    # bracket's top is the failing load offered in the same share (10.4 x 9 / 10), so both ends are
    # rates carried and the bracket is the search's 4% step, not the 16% of [9, 10.4] it was; the
    # line gives the loads offered too, and stores them for the load curve
    from pytest_llmreplay.search.outcome import Capacity

    plan = CapacityPlan(by="rate", slo=SLO)
    rate = ReplaySettings(mode="rate", rate=10.0)
    run = make([rec(0, sent=0.1, chunks=((0.2, 1),), end=0.3)])
    failing = Check(parse_slos({"ttft.p90": "< 1ms"})[0], 0.1, -0.099, False)
    points = [Point(10.0, "low", rate, run, [], 9.0), Point(10.4, "high", rate, run, [failing], 10.3)]
    found = Capacity(plan, rate, points, "bracket within the 5% resolution")
    assert found.low == 9.0 and found.high == 10.4 and not found.ceiling
    assert found.headline() == (
        "capacity (rate): 9 req/s, carried at 10 req/s offered; bracket [9, 9.36] (offered [10, 10.4] in the share carried), "
        "2 runs; bracket within the 5% resolution"
    )
    stored = found.as_dict()
    assert (stored["low"], stored["high"], stored["offered"]) == (9.0, pytest.approx(9.36), {"low": 10.0, "high": 10.4})
    points[0] = Point(10.0, "low", rate, run, [], 10.0)  # carried all it was offered: nothing to add
    assert Capacity(plan, rate, points, "bracket within the 5% resolution").headline() == (
        "capacity (rate): 10 req/s, bracket [10, 10.4], 2 runs; bracket within the 5% resolution"
    )


def test_a_ceiling_its_failed_requests_explain_says_so_not_that_the_workload_is_too_short():
    # 22% of a 4 req/s point's requests failed (no SLO on errors), so it carried 2.87 req/s with a
    # TTFT far inside its SLO: the reason said its run ended before a queue could build and that
    # a longer workload would measure the rate sustained, and named no error
    from pytest_llmreplay.search.outcome import Capacity

    plan = CapacityPlan(by="rate", slo=SLO)
    rate = ReplaySettings(mode="rate", rate=4.0)
    ok = [rec(i, sent=0.1, chunks=((0.2, 1),), end=0.3) for i in range(7)]
    failed = [rec(7 + i, status="failed", sent=0.1, end=0.2) for i in range(2)]
    for record in failed:
        record.error = "http: HTTP 500"
    points = [
        Point(2.0, "low", rate, make(ok + failed), [], 2.0),
        Point(4.0, "high", rate, make(ok + failed), [], 2.87),
    ]
    found = Capacity(plan, rate, points, "no rate failed within the budget")
    assert found.ceiling and found.low == 2.87
    assert found.reason == (
        "no rate failed; the 4 req/s point met the SLOs carrying only 2.87 req/s: 22% of its requests failed "
        "(commonest: http: HTTP 500 (x2)) and no SLO limits errors (add one: sweep --slo 'error_rate<=1%', a test's capacity.slo "
        "error_rate), so the capacity is the rate carried, a ceiling"
    )


def test_no_end_of_the_search_lies_beyond_what_the_workload_can_run(workload, prompts):
    # by concurrency, a max of 500 over 60 sessions reported "at least 500" (a run 10 deep); by
    # rate, a max below the synchronous run's rate ran only that estimate's rate and called it
    # the capacity, above the max
    lines: list[str] = []
    deep = CapacityPlan(by="concurrency", slo={"ttft.p99": "< 10s"}, max=500)
    found = find_capacity(workload, target(prompts), prompts, deep, progress=lines.append, workers=1)
    assert found.value == 60 and max(p.load for p in found.points) == 60
    assert lines[0] == (
        "note: the capacity's max 500 is above the 60 sessions the workload plans, which no more concurrency can put in flight: "
        "60 is the highest run"
    )
    slow = CapacityPlan(by="rate", slo={"ttft.p99": "< 10s"}, max=0.05)
    found = find_capacity(workload, target(prompts), prompts, slow, workers=1)
    assert found.value <= 0.05 and [p.load for p in found.load_points] == [0.05] and found.at_least


def test_by_concurrency_the_saturating_run_is_a_real_point(workload, prompts):
    # every session at once is concurrency 60, run in closed loop like every other point: the
    # bracket's top when it fails, the capacity (at least) when it passes; no estimates
    found = find_capacity(workload, target(prompts), prompts, CapacityPlan(by="concurrency", slo=SLO), workers=1)
    (high,) = [p for p in found.points if p.role == "high"]
    assert ran_at(high, "concurrency", 60) and not high.passed and not any(p.estimate for p in found.points)
    assert found.as_dict()["estimates"] == []


@pytest.mark.parametrize("by", ["concurrency", "rate"])
def test_a_faster_profile_has_more_capacity(workload, prompts, by):
    plan = CapacityPlan(by=by, slo={"ttft.p90": "< 1s", "tpot.p90": "< 60ms"})
    slow = find_capacity(workload, target(prompts, "llama-3.1-8b-rtx-4090"), prompts, plan, workers=1)
    fast = find_capacity(workload, target(prompts, "llama-3.1-8b-h100"), prompts, plan, workers=1)
    assert 0 < slow.value < fast.value


def test_an_slo_no_load_meets_gives_capacity_zero(workload, prompts):
    plan = CapacityPlan(by="rate", slo={"ttft.p99": "< 1us"})
    found = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    assert found.value == 0 and found.reason.startswith("no load meets the SLOs")
    assert [p.role for p in found.points] == ["sync", "saturate", "low", "high"]  # the estimates and the ends only
    assert found.result.summary["capacity"]["rate"] == 0


def test_a_reasoning_slo_on_a_model_that_does_not_reason_says_so(workload, prompts):
    """An SLO on a reasoning figure is not measured in a run without reasoning, a breach
    (docs/perf-tests.md); a search whose every point failed so said only 'the lowest one fails'
    and capacity 0, as if the server were too slow (found by a review helper)."""
    plan = CapacityPlan(by="concurrency", slo={"ttfo.p99": "< 1s", "ttft.p99": "< 1s"}, max=8)
    found = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    assert found.value == 0
    assert found.ended == (
        "no load meets the SLOs: ttfo.p99 is not measured at the lowest load, where no request reasoned "
        "(a reasoning model's figure; bound ttft for a model that does not reason)"
    )


def test_an_slo_every_load_meets_gives_the_highest_load(workload, prompts):
    plan = CapacityPlan(by="concurrency", slo={"ttft.p99": "< 1000s"})
    found = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    assert (found.value, found.high) == (60, None)  # every session at once
    assert found.reason.startswith("the highest load meets the SLOs")


def test_the_budget_bounds_the_runs(workload, prompts):
    plan = CapacityPlan(by="rate", slo=SLO, resolution=0.001, budget=7)
    lines = []
    found = find_capacity(workload, target(prompts), prompts, plan, progress=lines.append, workers=1)
    assert len(found.points) == 7 and "budget of 7 runs spent" in found.ended
    assert found.low < found.high  # 2 estimates, the ends, growth to a failing rate, one bisection
    # a progress line per point, as each finished
    assert [line.split(":")[0] for line in lines[2:]] == [
        f"point {i}/7 {p.role:>6} rate {p.load:.4g} req/s" for i, p in enumerate(found.points, 1) if not p.estimate
    ]
    assert [line.split(": carried ")[0] for line in lines[:2]] == [
        "point 1/7   sync estimate, 1 in flight",
        "point 2/7 saturate estimate, 60 in flight",
    ]


def test_parallel_bracketing_finds_what_the_serial_search_finds(workload, prompts):
    plan = CapacityPlan(by="concurrency", slo=SLO)
    serial = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    parallel = find_capacity(workload, target(prompts), prompts, plan, workers=2)
    assert [(p.load, p.passed) for p in parallel.points] == [(p.load, p.passed) for p in serial.points]
    assert parallel.result.summary["capacity"] == serial.result.summary["capacity"]


def test_trace_arrivals_scale_the_workloads_own_times(workload, prompts):
    plan = CapacityPlan(by="rate", slo=SLO, arrival="trace", min=1, max=40)
    found = find_capacity(workload, target(prompts), prompts, plan, workers=1)
    point = found.points[-1]
    assert point.settings.mode == "timestamps"
    first, last = workload.sessions[0].arrival_s, workload.sessions[-1].arrival_s
    assert point.settings.speedup == pytest.approx(point.load / (59 / (last - first)))
    assert 1 < found.value < 40


def test_trace_arrivals_are_paced_by_the_sessions_the_plan_replays(prompts):
    """With max_requests the plan replays the trace's first sessions: the native rate is theirs.
    It was the whole trace's, so every point offered a rate 2.6 times off its label on an Azure
    trace whose head arrives slower than the rest (found by a review helper)."""
    from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload

    arrivals = [float(i) for i in range(10)] + [9 + 0.1 * i for i in range(1, 91)]  # 1/s, then 10/s
    trace = Workload(tuple(Session(f"s{i}", t, (Turn(20, 2, Synthetic()),)) for i, t in enumerate(arrivals)), "test")
    plan = CapacityPlan(by="rate", slo=SLO, arrival="trace", min=1, max=40)
    head = Search(trace, target(prompts), prompts, plan, ReplaySettings(max_requests=10), workers=1)
    assert head.native_rate == pytest.approx(1.0) and head.settings_at(4).speedup == pytest.approx(4)
    whole = Search(trace, target(prompts), prompts, plan, workers=1)
    assert whole.native_rate == pytest.approx(99 / 18)


def test_a_hopeless_point_stops_early_and_fails(workload, prompts):
    plan = CapacityPlan(by="concurrency", slo={"ttft.p90": "< 150ms"}, max=60)
    search = Search(workload, target(prompts), prompts, plan, workers=1)
    settings = search.settings_at(60)
    stopped = search.keep(60, "high", settings, run_point(search.job(settings, stop=True)))
    full = search.keep(60, "high", settings, run_point(search.job(settings, stop=False)))
    assert not full.passed and full.stopped is None
    assert not stopped.passed and stopped.stopped.startswith("ttft.p90 < 150ms is lost")
    # p90 of at most 60 is lost at the 60 - floor(59 * 0.9) = 7th request over 150 ms: the run
    # stopped there, cancelling what was in flight
    slow = [r for r in stopped.result.ok if r.first_token_s - r.sent_s >= 0.15]
    assert len(slow) == 7 and "7 of at most 60" in stopped.stopped
    counts = stopped.result.summary["requests"]
    assert counts["ok"] < 60 and counts["cancelled"] > 0
    assert any("stopped (ttft.p90 < 150ms is lost" in w for w in stopped.result.warnings)


def test_a_point_stopped_early_shows_no_rate_in_the_table(workload, prompts):
    """A point stopped early showed its answered requests over its cut run as its req/s (2.8
    req/s at an offered 32: a new user's trial read a server collapse): `-` now."""
    plan = CapacityPlan(by="concurrency", slo={"ttft.p90": "< 150ms"}, max=60)
    found = Search(workload, target(prompts), prompts, plan, workers=1).run()
    stopped = [line.split() for line in found.table().splitlines() if "FAIL (stopped)" in line]
    assert stopped and all(cells[-3:-1] == ["-", "-"] for cells in stopped), found.table()
    run_through = [line.split() for line in found.table().splitlines() if " pass " in f" {line} "]
    assert run_through and all(cells[-3] != "-" for cells in run_through)


def test_the_stop_rule_only_stops_points_whose_statistic_breaches():
    # random TTFTs, a rule per percentile: whenever the rule says lost while records arrive,
    # the statistic of all of them breaches; with a single value over the limit p99 of 100
    # may still pass, so the rule must wait for the second
    rng = random.Random(5)
    for trial in range(200):
        n = rng.randint(2, 120)
        values = [rng.choice([0.1, 0.5, 2.0, rng.uniform(0, 3)]) for _ in range(n)]
        stat = rng.choice(["p50", "p90", "p95", "p99", "max"])
        slos = parse_slos({f"ttft.{stat}": "< 1s"})
        rule = StopRule(slos, n, {})
        lost = None
        for i, value in enumerate(values):
            lost = lost or rule.reason(rec(i, sent=0.0, chunks=((value, 1),), end=value))
        final = stats(values)[stat]
        if lost:
            assert final >= 1.0, (trial, values, stat)
    rule = StopRule(parse_slos({"ttft.p99": "< 1s"}), 100, {})
    assert rule.reason(rec(0, sent=0.0, chunks=((5.0, 1),), end=5.0)) is None
    assert "2 of at most 100" in rule.reason(rec(1, sent=0.0, chunks=((5.0, 1),), end=5.0))


def mean_wait(records):
    return sum(r.first_token_s - r.scheduled_s for r in records) / len(records)


def test_an_over_saturated_open_loop_point_stops_though_its_slo_would_hold(long_workload, prompts):
    # tpot.p90 < 1s holds even at 40 sessions/s (the batch is bounded; the queue is not): only
    # the over-saturation test can stop the point, and does, long before its end
    plan = CapacityPlan(by="rate", slo={"tpot.p90": "< 1s"})
    search = Search(long_workload, target(prompts), prompts, plan, workers=1)
    settings = search.settings_at(40)
    full = search.keep(40, "bisect", settings, run_point(search.job(settings, stop=False)))
    assert full.passed and full.stopped is None
    quarter = len(full.result.ok) // 4
    assert mean_wait(full.result.ok[-quarter:]) > 5 * mean_wait(full.result.ok[:quarter])  # the queue did grow
    stopped = search.keep(40, "bisect", settings, run_point(search.job(settings, stop=True)))
    assert not stopped.passed and stopped.stopped.startswith("over-saturated: the wait for a first token grows ")
    assert "the queue grows without bound" in stopped.stopped
    assert stopped.result.summary["requests"]["ok"] < 100


@pytest.mark.parametrize("rate", [3, 12, 20])
def test_a_sustainable_open_loop_point_runs_to_its_end(long_workload, prompts, rate):
    # up to about the simulated server's throughput (~20 req/s) the queue stays level
    plan = CapacityPlan(by="rate", slo={"tpot.p90": "< 1s"})
    search = Search(long_workload, target(prompts), prompts, plan, workers=1)
    settings = search.settings_at(rate)
    point = search.keep(rate, "bisect", settings, run_point(search.job(settings, stop=True)))
    assert point.stopped is None and point.passed
    assert point.result.summary["requests"]["ok"] == 400


def test_closed_loop_points_have_no_over_saturation_test(workload, prompts):
    search = Search(workload, target(prompts), prompts, CapacityPlan(by="concurrency", slo=SLO), workers=1)
    assert search.job(search.settings_at(8), stop=True).rule.saturation is None
    search = Search(workload, target(prompts), prompts, CapacityPlan(by="rate", slo=SLO), workers=1)
    assert search.job(search.settings_at(8), stop=True).rule.saturation is not None


def test_queue_growth_needs_a_steep_and_certain_trend():
    rng = random.Random(3)
    level, growing, shallow = QueueGrowth(), QueueGrowth(), QueueGrowth()
    tripped = {}
    for i in range(600):  # 60 s of schedule, a request every 0.1 s
        s = i / 10
        noise = rng.uniform(-0.5, 0.5)
        for name, rule, wait in (
            ("level", level, 1 + noise),
            ("growing", growing, 1 + 0.5 * s + noise),
            ("shallow", shallow, 1 + 0.05 * s + noise),
        ):
            if name not in tripped and rule.add(s, wait):
                tripped[name] = s
    assert list(tripped) == ["growing"]
    # the window must span 5 s of schedule before the trend counts
    assert 5 <= tripped["growing"] < 8
    # Student's t at 0.975: 2.228 (10 df), 2.042 (30 df), 3.182 (3 df; the expansion is rough there)
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=0.005)
    assert t_quantile(0.975, 30) == pytest.approx(2.042, abs=0.002)
    assert t_quantile(0.975, 3) == pytest.approx(3.182, abs=0.15)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"by": "load", "slo": SLO}, "capacity.by: expected one of rate, concurrency, got 'load'"),
        ({"slo": SLO}, "capacity.by: missing"),
        ({"by": "rate"}, "capacity.slo: missing; expected the SLOs a load must meet, e.g. {ttft.p99: '< 1s'}"),
        ({"by": "rate", "slo": SLO, "min": 8, "max": 4}, "capacity.min: expected less than the max (4), got 8"),
        ({"by": "rate", "slo": SLO, "resolution": 0}, "capacity.resolution: expected a share between 0 and 1"),
        ({"by": "rate", "slo": SLO, "resolution": "0%"}, "capacity.resolution: expected a share between 0 and 1"),
        (
            {"by": "rate", "slo": {"cache_hit_rate.mean": "> 50%"}},
            "capacity.slo 'cache_hit_rate.mean': cannot be evaluated per request",
        ),
        ({"by": "rate", "slo": {"ttft.p99": "> 1s"}}, "capacity.slo 'ttft.p99': cannot be evaluated per request"),
        ({"by": "rate", "slo": {}}, "capacity.slo: expected the SLOs each load must meet"),
        ({"by": "rate", "slo": {"ttft.p99": "< 1 req/s"}}, "capacity.slo: SLO 'ttft.p99': unit 'req/s' does not fit"),
        ({"by": "concurrency", "slo": SLO, "max": 8.5}, "capacity.max: a concurrency is a whole number"),
        ({"by": "concurrency", "slo": SLO, "arrival": "trace"}, "capacity.arrival: applies to a search by rate"),
        (
            {"by": "concurrency", "slo": SLO, "budget": 1},
            "capacity.budget: expected a whole number of runs >= 2 (the search starts with 2), got 1",
        ),
        (
            {"by": "rate", "slo": SLO, "budget": 3},
            "capacity.budget: expected a whole number of runs >= 4 (the search starts with 4: 2 estimates and the two ends)",
        ),
        (
            {"by": "rate", "slo": SLO, "min": 1, "budget": 2},
            "capacity.budget: expected a whole number of runs >= 3 (the search starts with 3: 1 estimate and",
        ),
        ({"by": "rate", "slo": SLO, "step": 1}, "capacity.step: unknown key"),
    ],
)
def test_bad_plans_are_one_line_naming_the_key(data, message):
    with pytest.raises(LLMReplayError) as info:
        parse_capacity(data)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_plan_stores_its_slos_canonically_so_spellings_of_one_setting_compare():
    from pytest_llmreplay.gate.baseline import mismatch

    tight = CapacityPlan(by="rate", slo={"ttft.p99": "<1s", "tpot.p90": "<=50ms"}).as_dict()
    spaced = CapacityPlan(by="rate", slo={"ttft.p99": "< 1000ms", "tpot.p90": "<= 50 ms"}).as_dict()
    assert tight["slo"] == spaced["slo"] == {"ttft.p99": "< 1s", "tpot.p90": "<= 50ms"}
    assert mismatch({"settings": {"capacity": tight}}, {"settings": {"capacity": spaced}}) is None
    looser = CapacityPlan(by="rate", slo={"ttft.p99": "< 2s", "tpot.p90": "<= 50ms"}).as_dict()
    assert "replay settings differ" in mismatch({"settings": {"capacity": tight}}, {"settings": {"capacity": looser}})


def test_resolution_in_percent_and_settings_the_search_sets(workload, prompts):
    assert parse_capacity({"by": "rate", "slo": SLO, "resolution": "2.5%"}).resolution == pytest.approx(0.025)
    with pytest.raises(LLMReplayError, match="^concurrency: the capacity search sets it at each point"):
        Search(workload, target(prompts), prompts, CapacityPlan(by="rate", slo=SLO), ReplaySettings(concurrency=4))


def test_a_server_that_fails_during_the_search_ends_it_keeping_the_points_before(workload, prompts):
    """``check_server`` raises after the second point (the server died during it): the search
    ends with the first point only (the second measured the failure), marked incomplete with the
    server's error, in the stored search and as a warning of the result; failing after the
    first point, with nothing kept, the error is raised as it was."""
    calls = []

    def dies_after(n):
        def check():
            calls.append(1)
            if len(calls) >= n:
                raise LLMReplayError(
                    "server command 'vllm serve M' exited with status 134; last lines of its log:\nCUDA error"
                )

        return check

    plan = CapacityPlan(by="concurrency", slo={"ttft.p99": "< 60s"}, max=8)
    found = find_capacity(workload, target(prompts), prompts, plan, workers=1, check_server=dies_after(2))
    assert [point.load for point in found.points] == [1]
    assert (
        found.incomplete == "server command 'vllm serve M' exited with status 134; last lines of its log:\nCUDA error"
    )
    assert found.ended == "stopped by the server's failure after 1 of at most 12 runs"
    assert found.as_dict()["incomplete"] == found.incomplete and found.result.capacity is found
    assert found.result.run.warnings[-1].startswith(
        "the capacity search is incomplete, stopped by the server's failure"
    )
    calls.clear()
    with pytest.raises(LLMReplayError, match="exited with status 134"):
        find_capacity(workload, target(prompts), prompts, plan, workers=1, check_server=dies_after(1))
