"""Run-to-run noise: ``--llm-repeat N`` (N runs per test, stored as one record of runs), the
two-level bootstrap that resamples runs then requests, and cache resets between repeats on a
server. Plugin behaviour through pytester, the statistics on synthetic arrays."""

import csv
import json

import numpy as np
import pytest
from mockserver import MockServer, ServerThread
from test_plugin_baselines import PERF_TEST, stored

from pytest_llmreplay.gate import baseline, bootstrap
from pytest_llmreplay.gate.comparison_table import comparison_table
from pytest_llmreplay.gate.repeats import pool_records, run_keys, run_samples
from pytest_llmreplay.metrics.slo import check_slos, parse_slos


def at95(draws: bootstrap.Draws) -> tuple[float, float, float]:
    """(change, low, high): a bootstrapped change with its 95% interval."""
    return (draws.point, *draws.interval(0.95))


def shifted_runs(rng: np.random.Generator, shifts: list[float], size: int = 300) -> list[np.ndarray]:
    """One run per shift: the same 300 requests' values (lognormal spread between requests),
    each run scaled as a whole by (1 + shift), plus 1% noise per request."""
    requests = rng.lognormal(0, 0.5, size)
    return [requests * (1 + shift) * rng.lognormal(0, 0.01, size) for shift in shifts]


def test_two_level_bootstrap_puts_whole_run_shifts_inside_the_interval():
    rng = np.random.default_rng(1)
    base = shifted_runs(rng, [-0.04, 0.0, 0.04])
    current = shifted_runs(np.random.default_rng(1), [0.03, -0.03, 0.05])  # the same requests
    pooled_base, pooled_current = np.concatenate(base), np.concatenate(current)
    _, flat_low, flat_high = at95(bootstrap.bootstrap_change(pooled_base, pooled_current, "p50", paired=True))
    change, low, high = at95(bootstrap.hierarchical_bootstrap_change(base, current, "p50", paired=True))
    assert change == pytest.approx(float(np.median(pooled_current) / np.median(pooled_base) - 1))
    # pooled and paired, the requests' spread cancels and the +1.7% reads as significant ...
    assert flat_low > 0
    # ... resampling the runs first sees that runs alone move the median by +-4%
    assert low < 0 < high
    assert high - low > 3 * (flat_high - flat_low)


def test_two_level_bootstrap_of_steady_runs_stays_narrow_and_finds_a_real_change():
    base = shifted_runs(np.random.default_rng(2), [0.0, 0.001, -0.001])
    current = shifted_runs(np.random.default_rng(2), [0.10, 0.101, 0.099])
    change, low, high = at95(bootstrap.hierarchical_bootstrap_change(base, current, "p50", paired=True))
    assert 0.08 < low < change < high < 0.12
    unpaired = at95(bootstrap.hierarchical_bootstrap_change(base, [run[:250] for run in current], "mean"))
    assert unpaired[1] > 0.05


def test_runs_of_other_sizes_weigh_in_resamples_as_in_the_measured_change():
    """One 60-session run and three 6-session runs 30% slower: the pooled change weighs runs by
    their sizes, but each resampled run was drawn at the side's mean size, and the measured
    +1.7% lay outside its own interval [+1.9%, +35.3%] (a statistics review)."""
    rng = np.random.default_rng(0)
    base = [rng.lognormal(0, 0.1, 60) for _ in range(4)]
    current = [rng.lognormal(0, 0.1, 60)] + [1.3 * rng.lognormal(0, 0.1, 6) for _ in range(3)]
    change, low, high = at95(bootstrap.hierarchical_bootstrap_change(base, current, "p50"))
    assert change == pytest.approx(float(np.median(np.concatenate(current)) / np.median(np.concatenate(base)) - 1))
    assert low < change < high
    equal = [rng.lognormal(0, 0.1, 60) for _ in range(3)]
    ends = at95(bootstrap.hierarchical_bootstrap_change(base, equal, "mean", seed=3))
    assert np.isfinite(ends).all() and ends[1] < ends[0] < ends[2]


def record_of(runs: list[np.ndarray]) -> dict:
    """A stored record of several runs, as pool_records makes them."""
    records = [
        {
            "schema": baseline.SCHEMA,
            "summary": {"ttft": {"p50": float(np.median(r))}},
            "fingerprint": {},
            "workload": {},
            "settings": {},
            "samples": {"ttft": list(r)},
            "sample_keys": {"ttft": list(range(len(r)))},
        }
        for r in runs
    ]
    return pool_records(records, [{"seed": i, "cache_reset": None} for i in range(len(runs))])


def test_a_record_of_runs_gives_each_run_back():
    runs = shifted_runs(np.random.default_rng(3), [0.0, 0.1], size=5)
    record = record_of(runs)
    assert [list(r) for r in run_samples(record, "ttft")] == [list(r) for r in runs]
    assert run_keys(record, "ttft") == [list(range(5))] * 2
    assert record["summary"]["ttft"]["p50"] == pytest.approx(np.median([np.median(r) for r in runs]))
    assert [run["seed"] for run in record["runs"]] == [0, 1]


def test_a_figure_one_run_lacks_is_the_median_of_the_others_whichever_run_lacks_it():
    """ttfat needs a complete session: a run without one has no ttfat. The pooled figure (what
    SLOs are checked against) had been dropped when the first run lacked it (the SLO a breach,
    "not measured") and the others' median when a later run did: the order of the runs decided."""
    measured = [{"ttft": {"p50": 0.2}, "ttfat": {"p90": 5.0}}, {"ttft": {"p50": 0.3}, "ttfat": {"p90": 7.0}}]
    lacking = {"ttft": {"p50": 0.1}}
    for summaries in ([lacking, *measured], [*measured, lacking]):
        records = [{"samples": {}, "sample_keys": {}, "summary": summary} for summary in summaries]
        record = pool_records(records, [{}] * 3)
        assert record["summary"] == {"ttft": {"p50": 0.2}, "ttfat": {"p90": 6.0}}
        [check] = check_slos(record["summary"], parse_slos({"ttfat.p90": "< 10s"}))
        assert check.passed and check.measured == 6.0


def test_the_report_of_repeated_runs_sets_the_medians_server_hit_rate_beside_the_medians_client_one():
    """The pooled record had the first run's series and client hit rate beside the median server
    figures: the report's server line and its 5-point warning mixed two runs."""
    from pytest_llmreplay.report.html import server_section

    def run(server_rate: float, client_rate: float, samples: dict) -> dict:
        series = {"prefix_cache_queries": [[-1, 0], [9, 1000]], "prefix_cache_hits": [[-1, 0], [9, 1000 * server_rate]]}
        summary = {"server": {"prefix_cache_hit_rate": server_rate}}
        return {
            "test": "t",
            "samples": samples,
            "summary": summary,
            "server_metrics": series,
            "client_hit_rate": client_rate,
        }

    runs = [run(0.2, 0.21, {}), run(0.5, 0.52, {"ttfat": [1.0]}), run(0.4, 0.41, {"ttfat": [2.0]})]
    record = pool_records(runs, [{}] * 3)
    assert record["summary"]["server"]["prefix_cache_hit_rate"] == 0.4
    assert record["client_hit_rate"] == 0.41  # the median's, not the first run's 21%
    assert record["server_metrics"] == runs[-1]["server_metrics"]  # the last run's, as the terminal's tables
    assert record["samples"]["ttfat"] == [1.0, 2.0]  # kept though the first run had none
    section = server_section(record)
    assert "prefix_cache_hit_rate 40%; client prefix-cache hit rate (cached_tokens) 41%" in section
    assert "one of the two counts is wrong" not in section  # 40% and 21% had been 19 points apart


def test_compare_of_repeated_results_is_not_fooled_by_a_shifted_run():
    base = record_of(shifted_runs(np.random.default_rng(4), [-0.06, 0.0, 0.06]))
    current = record_of(shifted_runs(np.random.default_rng(4), [0.0, 0.06, 0.12]))
    [row] = baseline.compare(base, current, {"ttft.p50": 0.05}).rows
    assert row.change > 0.05 and row.paired
    assert row.verdict == "noise"  # pooled flat, the same data is a regression:
    flat = {**current, "runs": None}
    assert baseline.compare({**base, "runs": None}, flat, {"ttft.p50": 0.05}).rows[0].verdict == "regression"


def test_a_comparison_row_shows_the_values_its_change_is_computed_from():
    """Runs of unequal spread: the median of the runs' p50s is not the p50 of the runs pooled,
    which is what the change compares. The row's two values are the pooled ones, so the change
    can be checked from them (issue 31 A2: '20.79 ms -> 15.98 ms -26.0%'), and the header says so."""
    rng = np.random.default_rng(5)
    base = record_of([rng.lognormal(0, s, 200) for s in (0.1, 0.5, 1.0)])
    current = record_of([rng.lognormal(-0.1, s, 200) for s in (1.0, 0.1, 0.5)])
    comparison = baseline.compare(base, current, {"ttft.p50": 0.05})
    [row] = comparison.rows
    assert row.baseline == pytest.approx(np.percentile(base["samples"]["ttft"], 50))
    assert row.current == pytest.approx(np.percentile(current["samples"]["ttft"], 50))
    assert row.change == pytest.approx(row.current / row.baseline - 1)
    assert row.baseline != pytest.approx(base["summary"]["ttft"]["p50"], rel=1e-3)  # the runs' median is another figure
    assert "baseline and current: each statistic of all 3 runs' samples pooled" in comparison_table(comparison)


# ------------------------------------------------------------------------ through the plugin


def jittery(project) -> str:
    """A profile whose runs differ (timing jitter), so that they are repeated."""
    profile = json.loads((project.path / "fast.json").read_text())
    profile["timing"]["jitter"] = 0.2
    (project.path / "jittery.json").write_text(json.dumps(profile))
    return "jittery.json"


def test_repeat_option_replays_with_a_new_seed_each_time_and_stores_one_record_of_runs(project):
    result = project.runpytest(
        "--llm-offline",
        "--llm-sim-profile",
        jittery(project),
        "--llm-seed",
        "5",
        "--llm-repeat",
        "3",
        "--llm-save",
        "-v",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["3 runs (seeds 5, 6, 7): ttft.p50 *; the table above is the last run's*"])
    [path] = stored(project.path)
    record = json.loads(path.read_text())
    assert [run["seed"] for run in record["runs"]] == [5, 6, 7]
    tpots = [run["summary"]["tpot"]["p50"] for run in record["runs"]]
    assert len(set(tpots)) == 3  # three draws of the jitter
    assert record["summary"]["tpot"]["p50"] == sorted(tpots)[1]
    assert (
        len(record["samples"]["ttft"])
        == sum(run["sizes"]["ttft"] for run in record["runs"])
        == 3 * record["runs"][0]["sizes"]["ttft"]
    )
    compared = project.runpytest(
        "--llm-offline", "--llm-sim-profile", "jittery.json", "--llm-seed", "5", "--llm-repeat", "3", "--llm-compare"
    )
    compared.assert_outcomes(passed=1)
    compared.stdout.fnmatch_lines(["ttft.p50 * +0.0% [[]*[]]*ok"])


@pytest.mark.parametrize("repeat", ["2", "'2'"])  # a string, as --llm-repeat and a TOML spec's "2" give it
def test_repeat_key_of_the_marker_beats_the_option(project, repeat):
    project.makepyfile(
        test_perf=PERF_TEST.replace('slo={"error_rate": "== 0"}', f'slo={{"error_rate": "== 0"}}, repeat={repeat}')
    )
    project.runpytest(
        "--llm-offline", "--llm-sim-profile", jittery(project), "--llm-repeat", "4", "--llm-save"
    ).assert_outcomes(passed=1)
    [path] = stored(project.path)
    assert [run["seed"] for run in json.loads(path.read_text())["runs"]] == [0, 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--llm-repeat", "0"], "--llm-repeat / llm_repeat: expected a number of runs from 1 to 1000, got 0"),
        (["--llm-repeat", "three"], "--llm-repeat / llm_repeat: expected a number of runs from 1 to 1000, got 'three'"),
        (
            ["-o", "llm_repeat=-2"],
            "--llm-repeat / llm_repeat: expected a number of runs from 1 to 1000, got -2",
        ),  # as 0 is written
    ],
)
def test_bad_repeat_is_one_usage_error(project, args, message):
    result = project.runpytest("--llm-offline", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_bad_repeat_key_of_the_marker_fails_the_test_with_one_line(project):
    project.makepyfile(test_perf=PERF_TEST.replace('slo={"error_rate": "== 0"}', "repeat=0"))
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(errors=1)  # at set-up, as every bad marker key
    result.stdout.fnmatch_lines(["*repeat: expected a number of runs from 1 to 1000, got 0"])


def test_corrupt_runs_in_a_stored_result_is_one_line(project):
    project.runpytest(
        "--llm-offline", "--llm-sim-profile", jittery(project), "--llm-repeat", "2", "--llm-save"
    ).assert_outcomes(passed=1)
    [path] = stored(project.path)
    record = json.loads(path.read_text())
    record["runs"][0]["sizes"]["ttft"] += 1
    path.write_text(json.dumps(record))
    result = project.runpytest(
        "--llm-offline", "--llm-sim-profile", "jittery.json", "--llm-repeat", "2", "--llm-compare"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "Compared with *: no readable stored result of this test there *",
            f"skipped 1 unreadable stored result: {path}: not a stored llmreplay result (runs: the sizes of ttft do not add up to its * samples)",
        ]
    )


def test_a_body_assert_slo_after_repeats_checks_the_runs_medians_as_the_tests_own_slos_do(project):
    """The test's SLOs are checked against each figure's median over the runs; an assert_slo of
    the same key in its body had checked the last run alone: one table, two measurements."""
    body = '    llm_result.assert_slo({"ttft.p50": "< 10s", "ttft.min": "< 20ms", "goodput": "> 0%"})'
    project.makepyfile(
        test_perf=PERF_TEST.replace('slo={"error_rate": "== 0"}', 'slo={"ttft.p50": "< 10s"}').replace("    pass", body)
    )
    project.runpytest(
        "--llm-offline", "--llm-sim-profile", jittery(project), "--llm-repeat", "2", "--llm-save", "-v"
    ).assert_outcomes(passed=1)
    [path] = stored(project.path)
    record = json.loads(path.read_text())
    runs = [run["summary"]["ttft"]["p50"] for run in record["runs"]]
    assert runs[0] != runs[1]  # so the last run is not the median of the two
    measured = [(check["key"], check["measured"]) for check in record["slo"]]
    # the body's goodput counts, in each run, the requests whose TTFT is within its own 20 ms
    goodputs = [float(np.mean(ttfts <= 0.02)) for ttfts in run_samples(record, "ttft")]
    assert 0 < goodputs[0] != goodputs[1] < 1
    assert measured == [
        ("ttft.p50", pytest.approx(sum(runs) / 2)),  # the marker's
        ("ttft.p50", pytest.approx(sum(runs) / 2)),  # the body's
        ("ttft.min", record["summary"]["ttft"]["min"]),
        ("goodput", pytest.approx(sum(goodputs) / 2)),
    ]


def test_repeats_against_a_server_reset_its_prefix_cache_before_each_run(project):
    from pytest_llmreplay.sim.profile import load_profile
    from pytest_llmreplay.sim.server import SimServer
    from pytest_llmreplay.workloads.prompts import PromptFactory
    from pytest_llmreplay.workloads.tokenizer import load_tokenizer

    server = SimServer(load_profile(str(project.path / "fast.json")), PromptFactory(load_tokenizer(None)))
    with ServerThread(server) as thread:
        run = project.runpytest("--llm-endpoint", thread.url, "--llm-repeat", "2", "--llm-save", "--llm-report", "rep")
        run.assert_outcomes(passed=1)
    assert server._resets == 2
    [path] = stored(project.path)
    runs = json.loads(path.read_text())["runs"]
    assert [run["cache_reset"] for run in runs] == ["POST /reset_prefix_cache"] * 2
    assert [run["seed"] for run in runs] == [None, None]
    # the report's per-request CSV has every run's requests, which its median figures are of (it
    # had the last run's alone: 80% of the requests of a 5-run test missing)
    [table] = (project.path / "rep" / "tests").glob("*.csv")
    with table.open() as file:
        rows = list(csv.DictReader(file))
    sizes = [run["summary"]["requests"]["ok"] for run in runs]
    assert [row["run"] for row in rows] == ["1"] * sizes[0] + ["2"] * sizes[1]


def test_a_single_run_against_a_server_starts_on_an_emptied_cache_too(project):
    """With --llm-repeat 1 the cache was never reset: a test run again on the same server measured
    the cache its earlier session warmed (cache hit 79% -> 91%, nothing changed; an agent
    platform's trial), where the docs say a test's figures do not depend on what ran before."""
    from pytest_llmreplay.sim.profile import load_profile
    from pytest_llmreplay.sim.server import SimServer
    from pytest_llmreplay.workloads.prompts import PromptFactory
    from pytest_llmreplay.workloads.tokenizer import load_tokenizer

    server = SimServer(load_profile(str(project.path / "fast.json")), PromptFactory(load_tokenizer(None)))
    with ServerThread(server) as thread:
        for session in (1, 2):
            project.runpytest("--llm-endpoint", thread.url, "--llm-repeat", "1").assert_outcomes(passed=1)
            assert server._resets == session
    with ServerThread(MockServer()) as thread:  # a server without a reset: said once
        result = project.runpytest("--llm-endpoint", thread.url, "--llm-repeat", "1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "llmreplay cache: http://127.0.0.1:* answers neither POST /reset_prefix_cache *: each run may measure a "
            "prefix cache the previous one warmed"
        ]
    )


LOCK_TAKER = """
import os, signal, threading, time
from pytest_llmreplay.plugin.live_lock import live_lock
from pytest_llmreplay.target import Target

ran = []

def after_each_run(result):  # after the first run, another test takes the URL's lock, then a signal comes
    ran.append(1)
    if len(ran) == 1:
        def other_test():
            with live_lock(Target("live", url=os.environ["LOCK_URL"])):
                time.sleep(0.5)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(2)
        threading.Thread(target=other_test, daemon=True).start()
        time.sleep(0.2)
    return {}

def pytest_llmreplay_metrics():
    return {"lock_taker": after_each_run}
"""


def test_a_signal_while_a_repeat_waits_for_the_lock_keeps_the_runs_before_marked_interrupted(project, monkeypatch):
    """Ctrl-C while the second of three runs waited for another test's replay: taken for a server
    that died, the first run was stored whole, never marked, a baseline for the next comparison
    (a review of the change). It is the test's result, marked interrupted."""
    from pytest_llmreplay.sim.profile import load_profile
    from pytest_llmreplay.sim.server import SimServer
    from pytest_llmreplay.workloads.prompts import PromptFactory
    from pytest_llmreplay.workloads.tokenizer import load_tokenizer

    project.makeconftest(LOCK_TAKER)
    server = SimServer(load_profile(str(project.path / "fast.json")), PromptFactory(load_tokenizer(None)))
    with ServerThread(server) as thread:
        monkeypatch.setenv("LOCK_URL", thread.url)
        result = project.runpytest_subprocess("--llm-endpoint", thread.url, "--llm-repeat", "3", "--llm-save")
    assert "its server died" not in result.stdout.str() and "run 2 failed" not in result.stdout.str()
    [path] = stored(project.path)
    record = json.loads(path.read_text())
    assert record["interrupted"] == "SIGINT"
    assert "interrupted by SIGINT before run 2 of 3" in record["warnings"]
    result.stdout.fnmatch_lines(
        [
            "llmreplay interrupted: SIGINT came before run 2 of 3 of test_perf.py::test_chat: its 1 run before, "
            "whole, stored marked interrupted (never a baseline)"
        ]
    )


def test_repeats_with_cache_resets_off_never_reset_and_say_so(project):
    from pytest_llmreplay.sim.profile import load_profile
    from pytest_llmreplay.sim.server import SimServer
    from pytest_llmreplay.workloads.prompts import PromptFactory
    from pytest_llmreplay.workloads.tokenizer import load_tokenizer

    server = SimServer(load_profile(str(project.path / "fast.json")), PromptFactory(load_tokenizer(None)))
    with ServerThread(server) as thread:
        result = project.runpytest(
            "--llm-endpoint", thread.url, "--llm-repeat", "2", "--llm-save", "--llm-cache-reset=off", "-v"
        )
    result.assert_outcomes(passed=1)
    assert server._resets == 0
    result.stdout.fnmatch_lines(
        [
            "2 runs (cache not reset between runs): ttft.p50 *",
            "llmreplay repeats: http://127.0.0.1:*: cache not reset between runs (resets turned off): "
            "each repeat may measure a prefix cache the previous one warmed",
        ]
    )
    [path] = stored(project.path)
    record = json.loads(path.read_text())
    assert [run["cache_reset"] for run in record["runs"]] == ["off", "off"]
    assert record["fingerprint"]["cache_reset"] == "off"  # never compared with runs on an emptied cache


def test_a_bad_cache_reset_mode_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-o", "llm_cache_reset=never")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-cache-reset / llm_cache_reset: expected auto or off, got 'never'*"])


def test_repeats_against_a_server_without_a_cache_reset_say_so_once(project):
    project.makepyfile(test_two=PERF_TEST.replace("test_chat", "test_other"))
    with ServerThread(MockServer()) as thread:
        result = project.runpytest("--llm-endpoint", thread.url, "--llm-repeat", "2", "--llm-save")
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("answers neither POST /reset_prefix_cache") == 1
    result.stdout.fnmatch_lines(
        [
            "llmreplay repeats: http://127.0.0.1:* answers neither POST /reset_prefix_cache (vLLM: VLLM_SERVER_DEV_MODE=1), POST /flush_cache (SGLang) nor POST /slots/{id}?action=erase (llama.cpp: --slot-save-path): *"
        ]
    )
    assert [run["cache_reset"] for run in json.loads(stored(project.path)[0].read_text())["runs"]] == [None, None]


# ------------------------------------------------------------------------ Holm's step-down


def draws_with_p(p: float, rng: np.random.Generator, size: int = 20000) -> bootstrap.Draws:
    """Resampled changes centred so that about a share ``p`` / 2 of them are <= 0."""
    from statistics import NormalDist

    return bootstrap.Draws(0.1, rng.normal(0.1, 0.1 / NormalDist().inv_cdf(1 - p / 2), size))


def test_holm_judges_the_smallest_p_value_strictest_and_stops_at_the_first_miss():
    rng = np.random.default_rng(0)
    found = bootstrap.holm_levels([draws_with_p(p, rng) for p in (0.03, 0.001, 0.2, 0.011)], alpha=0.05)
    # sorted: 0.001 at 1 - 0.05/4, 0.011 at 1 - 0.05/3 (0.011 < 0.0167: significant), then 0.03 at
    # 1 - 0.05/2 = 97.5% (0.03 > 0.025: not), so 0.2 takes that level and is not significant either
    assert [round(c, 4) for c, _ in found] == [0.975, 0.9875, 0.975, 0.9833]
    assert [s for _, s in found] == [False, True, False, True]


def test_one_figure_at_p_three_percent_is_a_regression_alone_and_noise_among_seven():
    """Each of a test's figures judged at 95% made any test of seven figures far likelier than 5%
    to call a false regression (issue 31 E); under Holm a figure must be clearer."""
    from pytest_llmreplay.gate.bootstrap import holm_levels

    rng = np.random.default_rng(1)
    marginal = draws_with_p(0.03, rng)
    assert holm_levels([marginal], 0.05) == [(0.95, True)]
    found = holm_levels([marginal] + [draws_with_p(0.5, rng) for _ in range(6)], 0.05)
    assert found[0] == (pytest.approx(1 - 0.05 / 7), False)


def test_a_p_value_is_twice_the_smaller_tail_of_the_resampled_changes():
    draws = bootstrap.Draws(0.1, np.array([-0.1, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]))
    assert draws.p_value() == pytest.approx(2 * (1 + 1) / 10)  # one change <= 0 of nine, plus one
    assert bootstrap.Draws(0.0, np.zeros(9)).p_value() == 1.0


# ------------------------------------------------------------------------ unstable runs


def test_runs_that_disagree_several_fold_make_the_comparison_unstable_not_a_regression():
    """One run streamed, the others arrived in bursts (the live engine's fourth run): no interval
    from such runs holds, so the comparison is neither a regression nor a pass (issue 31 E)."""
    rng = np.random.default_rng(7)
    steady = [rng.lognormal(np.log(0.02), 0.1, 200) for _ in range(3)]
    base = record_of(steady)
    flipping = record_of([steady[0] * 1.3, steady[1] * 6.0, steady[2] * 1.3])  # run 2 took six times as long
    comparison = baseline.compare(base, flipping, {"ttft.p50": 0.05})
    assert comparison.regressions == [] and [row.verdict for row in comparison.rows] == ["unstable"]
    assert comparison.unstable.startswith("the current's 3 runs disagree 4.7x on ttft.p50 (")
    table = comparison_table(comparison)
    assert ": UNSTABLE, no verdict" in table and f"unstable: {comparison.unstable}" in table
    from pytest_llmreplay.plugin.verdict import comparison_as_dict
    from pytest_llmreplay.report.rows import comparison_cell

    assert comparison_cell(comparison_as_dict(comparison)) == "UNSTABLE"
    calm = record_of(
        [steady[0] * 1.3, steady[1] * 1.35, steady[2] * 1.3]
    )  # the same shift, runs that agree: a regression
    assert [row.verdict for row in baseline.compare(base, calm, {"ttft.p50": 0.05}).rows] == ["regression"]


def test_an_unstable_comparison_still_fails_on_requests_lost_and_says_so(tmp_path, capsys):
    """Runs that disagree leave no statistical verdict, but a run that lost requests has latencies
    over its survivors whatever the noise: a regression, in the title, the report's cell and the
    compare command's exit status (1, not 4)."""
    rng = np.random.default_rng(7)
    steady = [rng.lognormal(np.log(0.02), 0.1, 200) for _ in range(3)]
    base = record_of(steady)
    flipping = record_of([steady[0] * 1.3, steady[1] * 6.0, steady[2] * 1.3])
    for run in flipping["runs"]:
        run["summary"]["requests"] = {"ok": 190, "failed": 10}
    comparison = baseline.compare(base, flipping, {"ttft.p50": 0.05})
    assert comparison.unstable and [row.verdict for row in comparison.regressions] == ["regression"]
    title = comparison_table(comparison).splitlines()[0]
    assert title == "Compared with baseline: 1 regression, the other rows UNSTABLE, no verdict"
    from pytest_llmreplay.cli.main import main
    from pytest_llmreplay.plugin.verdict import comparison_as_dict
    from pytest_llmreplay.report.rows import comparison_cell

    assert comparison_cell(comparison_as_dict(comparison)) == "REGRESSION: ttft.p50, UNSTABLE"
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, record in zip(paths, (base, flipping), strict=True):
        path.write_text(json.dumps(record))
    assert main(["compare", str(paths[0]), str(paths[1])]) == 1
    out = capsys.readouterr().out  # the command's default tolerances judge ttft.p90 too
    assert (
        "2 regressions, the other rows UNSTABLE, no verdict" in out and "none (no counts stored) in the baseline" in out
    )
    for run in flipping["runs"]:
        del run["summary"]["requests"]
    paths[1].write_text(json.dumps(flipping))
    assert main(["compare", str(paths[0]), str(paths[1])]) == 4  # unstable, nothing lost: no verdict


def test_the_cause_names_the_runs_whose_responses_came_in_one_burst():
    from pytest_llmreplay.gate.stability import instability

    streamed = np.full(100, 0.002)
    burst = np.concatenate([np.full(40, 0.00001), np.full(60, 0.002)])
    runs = [
        {
            "schema": baseline.SCHEMA,
            "summary": {"ttft": {"p50": p50}, "tpot": {"p50": float(np.median(t))}},
            "fingerprint": {},
            "workload": {},
            "settings": {},
            "samples": {"tpot": list(t)},
            "sample_keys": {"tpot": list(range(100))},
        }
        for p50, t in ((0.02, streamed), (0.3, burst))
    ]
    record = pool_records(runs, [{"seed": None, "cache_reset": None}] * 2)
    why = instability(record, "baseline")
    assert why.startswith("the baseline's 2 runs disagree 15.0x on ttft.p50 (20 ms to 300 ms): ")
    assert why.endswith(
        "run 2 received 40% of its responses in one burst, run 1 0%: the streams were buffered, likely by a CPU-starved client or API server"
    )
    assert instability(record_of([streamed, streamed * 2.9]), "current") is None  # under 3x: the bootstrap's to judge


def test_runs_of_few_requests_are_not_unstable_by_sampling_alone():
    """The p50 of 8 requests of one distribution (lognormal, sigma 0.8) moves more than 3x between
    runs: 60% of such sides of five runs were called unstable, every verdict hidden (a
    statistics review). Sampling alone explains it (stability.sampling_spread); the same spread
    between runs of 200 requests does not, and is still unstable."""
    from pytest_llmreplay.gate.stability import instability

    rng = np.random.default_rng(4)
    sides = [record_of([rng.lognormal(0, 0.8, 8) for _ in range(5)]) for _ in range(300)]
    three_fold = [side for side in sides if max(v := [r["summary"]["ttft"]["p50"] for r in side["runs"]]) > 3 * min(v)]
    assert len(three_fold) > 30  # the old rule's false alarms, on this seed
    assert sum(instability(side, "baseline") is not None for side in sides) <= 3  # 1% or less
    two_modes = [rng.lognormal(0, 0.8, 200) * (4.0 if i == 2 else 1.0) for i in range(5)]
    why = instability(record_of(two_modes), "baseline")
    assert why is not None and why.startswith("the baseline's 5 runs disagree 4.")
    from pytest_llmreplay.gate.stability import SAMPLING_ENOUGH, sampling_spread

    large = record_of([rng.lognormal(0, 0.8, SAMPLING_ENOUGH) * (4.0 if i == 2 else 1.0) for i in range(5)])
    assert sampling_spread(large, "ttft.p50") == 0  # not redrawn: sampling moves so many by far less than 3x
    assert instability(large, "current").startswith("the current's 5 runs disagree 4.")


def test_fail_on_unstable_fails_a_test_whose_baseline_runs_disagree(project):
    profile = jittery(project)
    project.runpytest("--llm-sim-profile", profile, "--llm-repeat", "2", "--llm-save").assert_outcomes(passed=1)
    [path] = stored(project.path)
    record = json.loads(path.read_text())
    record["runs"][1]["summary"]["ttft"]["p50"] *= 10  # as a run whose responses all came in one burst reads
    path.write_text(json.dumps(record))
    result = project.runpytest("--llm-sim-profile", profile, "--llm-repeat", "2", "--llm-compare")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["Compared with *: UNSTABLE, no verdict", "unstable: the baseline's 2 runs disagree *x on ttft.p50 (*"]
    )
    failed = project.runpytest(
        "--llm-sim-profile", profile, "--llm-repeat", "2", "--llm-compare", "--llm-fail-on-unstable"
    )
    failed.assert_outcomes(failed=1)


def test_paired_runs_of_few_requests_can_be_significant_by_their_runs():
    """Six sessions in each of five runs a side, every one twice as slow: the floor took the six
    pairs alone (2^-5 = 0.031), so over two figures the paired comparison read noise where the
    same data unpaired read regression (a review of the change). Five runs a side exchanged
    whole reach 2 / C(10, 5) = 0.008."""
    rng = np.random.default_rng(5)
    requests = rng.lognormal(0, 0.3, 6)
    base = [requests * rng.lognormal(0, 0.01, 6) for _ in range(5)]
    slower = [2 * requests * rng.lognormal(0, 0.01, 6) for _ in range(5)]
    draws = bootstrap.hierarchical_bootstrap_change(base, slower, "p50", paired=True)
    assert draws.floor == pytest.approx(2 / 252)
    assert [significant for _, significant in bootstrap.holm_levels([draws, draws], 0.05)] == [True, True]
    one_run = bootstrap.hierarchical_bootstrap_change(base[:1], slower[:1], "p50", paired=True)
    assert one_run.floor == pytest.approx(2**-5)  # one run a side: the pairs' floor
