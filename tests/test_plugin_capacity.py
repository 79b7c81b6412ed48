"""Goodput and capacity at SLO in pytest (pytester): goodput's per-request limits come from the
test's ``slo``; the ``capacity`` key searches the load; the SLO keys, the stored result and the
gate on capacity. The search itself: ``test_search.py``."""

import json
import re

import pytest

from pytest_llmreplay.metrics.units import format_figure

# 8 single-turn sessions, Poisson arrivals at 4/s (as test_plugin_perf.py's)
WORKLOAD = """\
synthetic:
  sessions: 8
  input_tokens: {dist: uniform, min: 64, max: 256}
  output_tokens: {dist: uniform, min: 8, max: 32}
  rate: 4
  seed: 7
"""


@pytest.fixture
def project(pytester):
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("wl.yaml").write_text(WORKLOAD)
    return pytester


def test_goodput_under_pytest_takes_its_per_request_limits_from_the_slo(project):
    # latency.p50 < 150ms: a good request is one whose own latency is at most 150 ms; the body
    # counts them from the request table, and the summary's share and rate must agree
    project.makepyfile(
        test_goodput="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"latency.p50": "< 150ms", "goodput": "> 0%", "goodput.rate": "> 0 req/s"})
        def test_good(llm_result):
            table = llm_result.request_table()
            good = int((table["latency"] <= 0.15).sum())
            assert 0 < good < len(table), "the limit must split the requests for this test to mean anything"
            start, end = llm_result.span
            assert llm_result.summary["goodput"]["value"] == good / len(table)
            assert llm_result.summary["goodput"]["rate"] == pytest.approx(good / (end - start))
    """
    )
    result = project.runpytest("--llm-offline", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["SLOs met: 3 of 3", "goodput*> 0%*%*ok", "goodput.rate*> 0 req/s*req/s*ok"])


def test_goodput_in_req_per_s_is_the_rate_of_good_requests(project):
    project.makepyfile(
        test_goodput="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p99": "< 1s", "goodput": ">= 1000 req/s"})
        def test_rate(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["SLO breached: 1 of 2", "goodput*>= 1000 req/s*req/s*BREACH"])


# 40 sessions: on the bundled polynomial profile a search by concurrency for ttft.p90 < 500ms
# finds 18, and 6 on the same profile three times slower (test_plugin_baselines' slow.json)
CAP_WORKLOAD = """\
synthetic:
  sessions: 40
  input_tokens: {dist: uniform, min: 256, max: 2048}
  output_tokens: {dist: uniform, min: 32, max: 256}
  rate: 10
  seed: 3
"""
CAP_TEST = """
import json

import pytest

@pytest.mark.llmreplay(workload="cap.yaml", capacity={"by": "concurrency", "slo": {"ttft.p90": "< 500ms"}, "resolution": "5%%"},
                       slo={"capacity.concurrency": ">= %(least)s", "goodput": ">= 90%%"})
def test_capacity(llm_result):
    found = llm_result.capacity
    assert llm_result.summary["capacity"]["concurrency"] == found.value
    assert found.at_capacity.passed and found.at_capacity.load == found.value
    assert len(found.points) >= 3
"""


@pytest.fixture
def capacity_project(pytester, monkeypatch):
    from test_plugin_baselines import GIT_ENV, git, write_profiles

    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("cap.yaml").write_text(CAP_WORKLOAD)
    pytester.makepyfile(test_cap=CAP_TEST % {"least": 2})
    write_profiles(pytester.path)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "capacity test")
    return pytester


def test_capacity_marker_searches_and_checks_the_capacity_slo(capacity_project):
    result = capacity_project.runpytest("--llm-offline", "--llm-sim-profile", "fast.json", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "test*outcome*TTFT p50*output tok/s*capacity",
            "test_cap.py::test_capacity*passed* ms *18",
            "Capacity search by concurrency",
            "*concurrency*verdict*ttft.p90*req/s*goodput req/s*good",
            "capacity (concurrency): 18, bracket [[]18, 19[]], * runs; bracket of adjacent concurrencies: no load between them to run",
            "SLOs met: 2 of 2",
            "capacity.concurrency*>= 2*18*ok",
        ]
    )


def test_a_capacity_with_no_failing_load_reads_at_least_in_the_summary(capacity_project):
    # both ends pass (max 8, capacity 18 on fast.json): a lower bound, written as sweep writes it
    capacity_project.makepyfile(
        test_cap="""
        import pytest

        @pytest.mark.llmreplay(workload="cap.yaml", capacity={"by": "concurrency", "slo": {"ttft.p90": "< 500ms"}, "max": 8})
        def test_capacity(llm_result):
            assert llm_result.capacity.at_least
    """
    )
    result = capacity_project.runpytest("--llm-offline", "--llm-sim-profile", "fast.json", "--junitxml=out.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test*outcome*TTFT p50*capacity", "test_cap.py::test_capacity*passed* ms *at least 8"])
    assert 'name="llmreplay.capacity.at_least" value="1.0"' in (capacity_project.path / "out.xml").read_text()


@pytest.mark.parametrize("verbosity", ["-q", "-v"])
def test_capacity_search_prints_a_line_per_point_as_it_finishes(capacity_project, verbosity):
    # past pytest's capture (in a process of its own, as a user runs it: a passing test's captured
    # output is never shown), in run order, as llmreplay sweep prints them, each on a line of its
    # own, the result letter of the test before it (-q) included
    capacity_project.makepyfile(test_a="def test_before():\n    pass\n")
    result = capacity_project.runpytest_subprocess(
        "--llm-offline", "--llm-sim-profile", "fast.json", "-p", "no:cacheprovider", verbosity
    )
    result.assert_outcomes(passed=2)
    points = [line for line in result.stdout.lines if line.startswith("point ")]
    assert points[0].startswith("point 1/12    low concurrency 1: pass  ttft.p90 ")
    assert points[1].startswith("point 2/12   high concurrency 40: FAIL  ttft.p90 ")
    assert [line.split()[1] for line in points] == [f"{i}/12" for i in range(1, len(points) + 1)]
    assert any(" concurrency 18: pass  " in line for line in points) and any(
        " concurrency 19: FAIL  " in line for line in points
    )  # the bracket


def test_capacity_search_under_xdist_prints_its_points_behind_the_workers_id(capacity_project):
    # a worker's terminal reporter writes nowhere: the lines come through its stderr
    result = capacity_project.runpytest_subprocess(
        "-n", "2", "--llm-offline", "--llm-sim-profile", "fast.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    result.stderr.fnmatch_lines(
        [
            "[[]gw[01][]] point 1/12    low concurrency 1: pass  ttft.p90 *",
            "[[]gw[01][]] point 2/12   high concurrency 40: FAIL  ttft.p90 *",
        ]
    )


def test_capacity_below_the_slo_fails_with_the_table(capacity_project):
    capacity_project.makepyfile(test_cap=CAP_TEST % {"least": 64})
    result = capacity_project.runpytest("--llm-offline", "--llm-sim-profile", "fast.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["SLO breached: 1 of 2", "capacity.concurrency*>= 64*18*-46*BREACH"])


def test_capacity_is_stored_with_every_point_and_gated_on_its_bracket(capacity_project):
    from test_plugin_baselines import stored

    capacity_project.runpytest("--llm-offline", "--llm-sim-profile", "fast.json", "--llm-save").assert_outcomes(
        passed=1
    )
    (path,) = stored(capacity_project.path, test="test_cap.py::test_capacity")
    record = json.loads(path.read_text())
    assert record["summary"]["capacity"] == {
        "concurrency": 18,
        "low": 18,
        "high": 19,
        "runs": len(record["capacity"]["points"]),
    }
    assert record["capacity"]["plan"]["by"] == "concurrency" and record["settings"]["capacity"]["resolution"] == 0.05
    loads = {p["load"]: p for p in record["capacity"]["points"]}
    assert (
        loads[18]["passed"]
        and not loads[19]["passed"]
        and loads[18]["slo"]["ttft.p90"] < 0.5 <= loads[19]["slo"]["ttft.p90"]
    )

    same = capacity_project.runpytest(
        "--llm-offline", "--llm-sim-profile", "fast.json", "--llm-compare", "--llm-fail-on-regression"
    )
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(
        ["Compared with *: 0 regressions", "capacity.concurrency*18*18*+0.0% [[]-5.3%, +5.6%[]]*5%*ok"]
    )
    assert "ttft.p50" not in same.stdout.str()  # a capacity test compares its capacity, not the latency at it

    # three times slower: 6 in [6, 7] against 18 in [18, 19]: -66.7% [-68.4%, -61.1%], a regression
    slower = capacity_project.runpytest(
        "--llm-offline", "--llm-sim-profile", "slow.json", "--llm-compare", "--llm-fail-on-regression"
    )
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(
        ["Compared with *: 1 regression", "capacity.concurrency*18*6*-66.7% [[]-68.4%, -61.1%[]]*5%*REGRESSION"]
    )


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('capacity={"slo": {"ttft.p90": "< 1s"}}', "capacity.by: missing; expected one of rate, concurrency"),
        (
            'capacity={"by": "rate", "slo": {"ttft.p90": "< 1s"}, "min": 8, "max": 2}',
            "capacity.min: expected less than the max (2), got 8",
        ),
        (
            'capacity={"by": "rate", "slo": {"ttft.p90": "< 1s"}, "resolution": 0}',
            "capacity.resolution: expected a share between 0 and 1",
        ),
        (
            'capacity={"by": "rate", "slo": {"cache_hit_rate.mean": "> 50%"}}',
            "capacity.slo 'cache_hit_rate.mean': cannot be evaluated per request",
        ),
        (
            'capacity={"by": "rate", "slo": {"ttft.p90": "< 1s"}}, concurrency=4',
            "concurrency: the capacity search sets it at each point; leave it out",
        ),
        ('slo={"capacity.rate": ">= 8 req/s"}', "slo 'capacity.rate': needs the capacity key"),
        (
            'capacity={"by": "concurrency", "slo": {"goodput": ">= 90%"}}',
            "capacity.slo 'goodput': goodput counts the requests that meet every per-request limit, "
            "and none is set by the search's SLOs; add an upper bound*",
        ),
        (
            'capacity={"by": "concurrency", "slo": {"error_rate": "== 0"}}, slo={"goodput": ">= 5 req/s"}',
            "slo 'goodput': goodput counts * and none is set by capacity.slo (a capacity test's goodput limits); add*",
        ),
        (
            'capacity={"by": "concurrency", "slo": {"ttft.p90": "< 1s"}}, slo={"capacity.rate": ">= 8 req/s"}',
            "slo 'capacity.rate': the capacity search is by concurrency; write capacity.concurrency",
        ),
    ],
)
def test_bad_capacity_keys_are_one_line_naming_the_key(project, marker, message):
    project.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", {marker})
        def test_it(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(errors=1)  # llm_result (the marker's replay) fails in set-up
    result.stdout.fnmatch_lines([message + "*"])
    assert "Traceback" not in result.stdout.str()


def test_capacity_in_a_spec_file(project):
    project.path.joinpath("cap.yaml").write_text(CAP_WORKLOAD)
    project.path.joinpath("search.llmreplay.yaml").write_text(
        "workload: cap.yaml\ncapacity: {by: rate, slo: {ttft.p90: '< 150ms'}, min: 1, max: 100, resolution: 10%}\nslo: {capacity.rate: '>= 1 req/s'}\n"
    )
    result = project.runpytest("--llm-offline", "-v")
    result.assert_outcomes(passed=1)
    # 40 sessions: the rates that meet the SLO arrive within two seconds, and their point carried less
    result.stdout.fnmatch_lines(
        [
            "Capacity search by rate",
            "capacity (rate): * req/s, bracket [[]*[]], * runs; the * req/s point met the SLOs carrying only * req/s: *",
        ]
    )


def test_a_capacity_by_rate_is_never_above_the_throughput_its_point_achieved(capacity_project):
    # issue 31 B4 under pytest: the 40 sessions at rates up to ~24/s meet ttft.p90 < 150ms only
    # because they arrive within two seconds and the run ends before a queue builds; the
    # capacity key, the SLO on it, the summary table and the stored bracket hold what that
    # point carried, a ceiling, never the rate it was offered
    from test_plugin_baselines import stored

    from pytest_llmreplay.metrics.units import format_value

    capacity_project.makepyfile(
        test_cap="""
        import pytest

        @pytest.mark.llmreplay(workload="cap.yaml", capacity={"by": "rate", "slo": {"ttft.p90": "< 150ms"}, "min": 1, "max": 100, "resolution": "10%"},
                               slo={"capacity.rate": ">= 1 req/s"})
        def test_capacity(llm_result):
            assert llm_result.capacity.at_capacity.load > 2 * llm_result.summary["capacity"]["rate"]
    """
    )
    result = capacity_project.runpytest("--llm-offline", "--llm-save", "-v")
    result.assert_outcomes(passed=1)
    (path,) = stored(capacity_project.path, test="test_cap.py::test_capacity")
    record = json.loads(path.read_text())
    capacity, summary = record["capacity"], record["summary"]
    assert (
        0 < summary["capacity"]["rate"] <= summary["request_throughput"]["overall"] * (1 + 1e-9)
    )  # the stored result is the point at capacity
    assert (
        capacity["rate"] == capacity["low"] == summary["capacity"]["rate"] == summary["capacity"]["low"]
        and capacity["at_least"] is False
    )
    assert all(min(p["load"], p["carried"]) <= capacity["rate"] for p in capacity["points"] if p["passed"])
    shown = format_value("request_throughput", capacity["rate"])
    result.stdout.fnmatch_lines(
        [f"test_cap.py::test_capacity*passed* {shown} (ceiling)", f"capacity.rate*>= 1 req/s*{shown}*ok"]
    )  # the summary row says ceiling without -v's reason line
    assert capacity["ceiling"] is True


def test_a_multi_turn_capacity_is_in_sessions_per_second_everywhere(capacity_project):
    # a rate over three-turn sessions starts sessions: the summary column, the SLO row, JUnit
    # and the gate's table all say sessions/s, where they said req/s of a figure ~3x smaller
    # than the requests answered per second
    from test_plugin_baselines import stored

    capacity_project.path.joinpath("cap.yaml").write_text(
        CAP_WORKLOAD.replace("sessions: 40", "sessions: 20\n  turns: 3\n  delay: 0.1")
    )
    capacity_project.makepyfile(
        test_cap="""
        import pytest

        @pytest.mark.llmreplay(workload="cap.yaml", capacity={"by": "rate", "slo": {"ttft.p90": "< 500ms"}, "min": 0.5, "max": 8, "budget": 4},
                               slo={"capacity.session_rate": ">= 0.5 sessions/s"})
        def test_capacity(llm_result):
            pass
    """
    )
    result = capacity_project.runpytest("--llm-offline", "--llm-save", "--junitxml=out.xml", "-v")
    result.assert_outcomes(passed=1)
    (path,) = stored(capacity_project.path, test="test_cap.py::test_capacity")
    record = json.loads(path.read_text())
    value = record["summary"]["capacity"]["session_rate"]
    assert value > 0 and "rate" not in record["summary"]["capacity"]
    shown = format_figure("capacity.session_rate", value)
    assert shown.endswith(" sessions/s")
    ceiling = " (ceiling)" if record["capacity"]["ceiling"] else ""
    result.stdout.fnmatch_lines(
        [f"test_cap.py::test_capacity*passed* {shown}{ceiling}", f"capacity.session_rate*>= 0.5 sessions/s*{shown}*ok"]
    )
    junit = re.search(
        r'name="llmreplay.capacity.session_rate" value="([0-9.]+)"', (capacity_project.path / "out.xml").read_text()
    )
    assert junit and float(junit.group(1)) == pytest.approx(value, rel=1e-5)
    again = capacity_project.runpytest("--llm-offline", "--llm-compare", "-v")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines([f"capacity.session_rate*{shown}*{shown}*+0.0%*5%*ok"])
