"""History over commits: the gate that judges a change on the spread of K earlier results, and
``llmreplay history`` with Apache Otava's change points. Stores seeded with synthetic records
(known spread, a known step) in real git repositories."""

import json
import re
import sys

import numpy as np
import pytest
from test_plugin_baselines import git

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.gate import baseline
from pytest_llmreplay.gate.baseline import Comparison, Row
from pytest_llmreplay.gate.history import (
    MIN_HISTORY,
    History,
    gate_with_history,
    history_points,
    last_step,
    metric_series,
    outliers,
    prediction_t,
    t_quantile,
    t_two_sided_p,
)
from pytest_llmreplay.gate.store import FolderStore, result_folder

TEST = "tests/perf/test_chat.py::test_chat"


def record(ttft_p50: float, commit: str = "c" * 40, **changes) -> dict:
    return {
        "schema": baseline.SCHEMA,
        "test": TEST,
        "commit": commit,
        "time": "2026-01-01T00:00:00+00:00",
        "fingerprint": {"kind": "offline"},
        "workload": {"digest": "w"},
        "settings": {"concurrency": 4},
        "summary": {"ttft": {"p50": ttft_p50}, "tpot": {"p50": 0.01}},
        "samples": {"ttft": [ttft_p50] * 3},
        "sample_keys": {"ttft": [0, 1, 2]},
        **changes,
    }


def row(change: float) -> Row:
    """A ttft.p50 row the bootstrap called a regression: beyond 5%, interval clear of zero."""
    return Row(
        "ttft.p50",
        1.0,
        1.0 + change,
        change=change,
        low=change - 0.01,
        high=change + 0.01,
        tolerance=0.05,
        verdict="regression",
    )


def test_t_quantile_matches_published_tables():
    # Student's t table: t_{0.975} for 4, 9 and 19 degrees of freedom
    assert [round(t_quantile(0.975, df), 3) for df in (4, 9, 19)] == [2.776, 2.262, 2.093]
    # past 0.995, where the expansion drifts (5.052 at df 4): the history's Bonferroni levels
    assert [round(t_quantile(q, 4), 3) for q in (0.995, 0.999, 1 - 0.025 / 7)] == [4.604, 7.173, 5.068]


def test_history_spread_suppresses_a_false_alarm_that_one_run_per_side_raises():
    rng = np.random.default_rng(0)
    spread = list(1.0 + 0.04 * rng.standard_normal(10))  # ten earlier results, 4% run-to-run sd
    comparison = Comparison("base", rows=[row(0.06)])
    gate_with_history(comparison, record(float(np.mean(spread)) * 1.06), History([("c", record(v)) for v in spread]))
    [judged] = comparison.rows
    assert judged.verdict == "noise"
    assert "history t +1." in judged.note
    assert "history: 10 earlier results gate the verdicts" in comparison.header
    # a shift far beyond that spread is still a regression
    comparison = Comparison("base", rows=[row(0.30)])
    gate_with_history(comparison, record(float(np.mean(spread)) * 1.30), History([("c", record(v)) for v in spread]))
    assert comparison.rows[0].verdict == "regression"


def test_an_accepted_step_in_the_history_does_not_veto_the_next_regression():
    """Eight earlier results, a +35% step four commits ago (a change accepted then): over all
    eight, their spread is the step's, and a second +19% regression read as noise (history t
    +2.18 < 2.36). The history is the current level's: the four since the step are too few, so
    the bootstrap's call stands; with six since, their own spread judges it (and confirms it)."""
    rng = np.random.default_rng(1)
    noise = list(0.01 * rng.standard_normal(10))
    stepped = [1.0 + n for n in noise[:4]] + [1.35 + n for n in noise[4:8]]
    assert last_step(stepped) == 4
    current = 1.35 * 1.19
    comparison = Comparison("base", rows=[row(0.19)])
    gate_with_history(comparison, record(current), History([("c", record(v)) for v in stepped]))
    assert comparison.rows[0].verdict == "regression"
    assert comparison.rows[0].note == "a step 4 results ago: history unused"
    longer = stepped + [1.35 + n for n in noise[8:]]
    comparison = Comparison("base", rows=[row(0.19)])
    gate_with_history(comparison, record(current), History([("c", record(v)) for v in longer]))
    assert comparison.rows[0].verdict == "regression"
    assert re.fullmatch(r"history t \+\d+\.\d\d over the 6 since a step \(> 2\.57\)", comparison.rows[0].note)


def test_a_step_is_a_level_shift_not_one_outlier():
    rng = np.random.default_rng(2)
    steady = list(1.0 + 0.04 * rng.standard_normal(12))
    assert last_step(steady) is None  # 4% noise: no step
    assert last_step([*steady[:6], 1.5, *steady[6:]]) is None  # one slow run between others
    assert last_step([*steady[:7], *(v + 0.5 for v in steady[7:])]) == 7


def test_a_regression_reverted_once_does_not_veto_the_same_regression_landing_again():
    """A new user's history: a +17% regression at one commit, reverted at the next. Kept in the
    history, that one result widened its spread until the same regression landing again read as
    noise (history t +2.15 against 2.45); left out as an outlier, the history confirms it."""
    rng = np.random.default_rng(4)
    history = list(1.0 + 0.015 * rng.standard_normal(7))
    history[5] *= 1.17  # the reverted regression
    everything_t = (1.17 - np.mean(history)) / (np.std(history, ddof=1) * np.sqrt(1 + 1 / 7))
    assert everything_t < 2.45  # what the gate judged before: a veto
    comparison = Comparison("base", rows=[row(0.17)])
    gate_with_history(comparison, record(1.17), History([("c", record(v)) for v in history]))
    assert comparison.rows[0].verdict == "regression"
    assert re.fullmatch(r"history t \+\d+\.\d\d, 1 outlying result left out \(> 2\.57\)", comparison.rows[0].note)


def test_the_baseline_itself_is_never_left_out_as_an_outlier():
    """Seven results at one level, then a 20% faster decode merged (the newest result, the
    comparison's baseline): a pull request undoing it was judged against the level before, the
    baseline left out as an outlier, and read as noise (history t -0.36). Off the rest, the
    newest result is a step too recent to see: the bootstrap's call stands."""
    rng = np.random.default_rng(6)
    history = [*(1.0 + 0.01 * rng.standard_normal(7)), 0.8]
    comparison = Comparison("base", rows=[row(0.25)])
    gate_with_history(comparison, record(1.0), History([("c", record(v)) for v in history]))
    assert comparison.rows[0].verdict == "regression"
    assert comparison.rows[0].note == "the newest result is off the rest, a step 1 result ago: history unused"


def test_outliers_leave_about_one_history_in_a_hundred_without_one_untouched():
    rng = np.random.default_rng(5)
    for length in (5, 10, 20):
        touched = sum(bool(outliers(list(rng.standard_normal(length)))) for _ in range(3000))
        assert touched <= 45, (length, touched)  # 1% of 3,000 is 30; 45 is 2.8 SDs of a binomial above it
    assert outliers([1.0, 1.0, 1.0, 1.0, 1.17, 1.0]) == {4}  # an exact simulator's history: any other value stands out
    assert outliers([1.0, 1.01, 0.99, 1.0]) == set()


def test_a_short_history_without_a_step_shows_one_in_about_one_search_in_a_hundred():
    """Five to twenty values of one level: a step found in one history in a hundred at most
    (the rule's Bonferroni bound; the robust-SD rule it replaced found one in 17% of five-value
    histories, and each such find switched the history gate off for that row)."""
    rng = np.random.default_rng(3)
    for length in (5, 8, 20):
        found = sum(last_step(list(rng.standard_normal(length))) is not None for _ in range(3000))
        assert found <= 45, (length, found)  # 1% of 3,000 is 30; 45 is 2.8 SDs of a binomial above it


def test_t_two_sided_p_matches_published_tables():
    """Two-sided 5% and 1% critical values of Student's t (any table, e.g. NIST's e-Handbook 1.3.6.7.2)."""
    for df, five, one in ((1, 12.706, 63.657), (2, 4.303, 9.925), (3, 3.182, 5.841), (10, 2.228, 3.169)):
        assert t_two_sided_p(five, df) == pytest.approx(0.05, abs=2e-5)
        assert t_two_sided_p(one, df) == pytest.approx(0.01, abs=2e-5)
    assert t_two_sided_p(0.0, 7) == pytest.approx(1.0)


def test_the_history_confirms_or_vetoes_the_bootstrap_never_overrules_it():
    """A regression needs both tests: a change the job's own runs do not establish (the interval
    crosses zero: runs that disagree) stays noise however far it stands out of a tight history;
    an improvement is confirmed or vetoed the same way."""
    tight = History([("c", record(1.0 + d)) for d in (0.0, 0.001, -0.001, 0.0005, -0.0005)])
    unsure = Row("ttft.p50", 1.0, 1.30, change=0.30, low=-0.20, high=0.80, tolerance=0.05, verdict="noise")
    comparison = Comparison("base", rows=[unsure])
    gate_with_history(comparison, record(1.30), tight)
    assert comparison.rows[0].verdict == "noise"
    assert comparison.rows[0].note.startswith("history t +")  # far beyond the history: t is in the hundreds
    wide = History([("c", record(v)) for v in (0.6, 1.4, 0.8, 1.2, 1.0)])
    for history, verdict in ((tight, "improved"), (wide, "noise")):
        improved = Row("ttft.p50", 1.0, 0.70, change=-0.30, low=-0.32, high=-0.28, tolerance=0.05, verdict="improved")
        comparison = Comparison("base", rows=[improved])
        gate_with_history(comparison, record(0.70), history)
        assert comparison.rows[0].verdict == verdict


def test_too_short_a_history_leaves_the_bootstrap_verdict():
    comparison = Comparison("base", rows=[row(0.06)])
    gate_with_history(
        comparison,
        record(1.06),
        History([("c", record(1.0 + i / 100)) for i in range(MIN_HISTORY - 1)], unreadable={"k": "why"}),
    )
    assert comparison.rows[0].verdict == "regression"
    assert (
        comparison.header
        == f"history: {MIN_HISTORY - 1} earlier results (< 5), verdicts from the bootstrap alone; 1 stored file unreadable, skipped"
    )
    quiet = Comparison("base", rows=[row(0.06)])
    gate_with_history(quiet, record(1.06), History([("c", record(1.0))]))
    assert quiet.header is None and quiet.rows[0].verdict == "regression"


def test_prediction_t_of_a_constant_history():
    assert prediction_t([1.0] * 5, 1.0) == 0
    assert prediction_t([1.0] * 5, 1.1) == float("inf")


def commits(path) -> list[str]:
    """Oldest first."""
    return git(path, "rev-list", "--first-parent", "--reverse", "HEAD").split()


def seed_store(path, values: list[float]) -> FolderStore:
    store = FolderStore(path / ".llmreplay")
    for commit, value in zip(commits(path)[: len(values)], values, strict=True):  # the oldest commits, one a value
        store.save(record(value, commit))
    return store


STEP = [0.100, 0.101, 0.099, 0.100, 0.102, 0.098, 0.100, 0.101, 0.120, 0.121, 0.119, 0.120, 0.122, 0.118, 0.120, 0.121]


def test_history_points_match_the_current_result_skip_others_and_count_unreadable(repo):
    store = seed_store(repo, STEP)
    store.save(record(0.5, commits(repo)[3], settings={"concurrency": 8}))  # other settings: not history
    corrupt = f"{result_folder(TEST)}/{commits(repo)[4][:12]}-zzzz.json"
    (store.root / corrupt).write_text("{not json")
    found = history_points(store, TEST, list(reversed(commits(repo))), like=record(0.1), limit=10)
    assert [value for value in found.values("ttft.p50")] == STEP[-10:]
    assert found.unreadable == {}  # the corrupt file is at an older commit than the 10 newest
    everything = history_points(store, TEST, list(reversed(commits(repo))), like=record(0.1))
    assert len(everything.points) == 16 and list(everything.unreadable) == [corrupt]
    assert everything.unreadable[corrupt].startswith(f"{store.root}/{corrupt}: not a stored llmreplay result")
    assert everything.unlike == 1  # the result with other settings, counted


def test_a_history_of_other_run_counts_is_said_not_dropped_silently():
    """A new user changed --llm-repeat: the ten earlier results (one run each) are not this
    run's history, and the header said nothing at all; it now says why the history is unused."""
    comparison = Comparison("base", rows=[row(0.30)])
    gate_with_history(comparison, record(1.3), History([], unlike=10))
    assert comparison.header == (
        "history: 0 earlier results (< 5), verdicts from the bootstrap alone; 10 stored results of this test "
        "with another endpoint, workload, settings or number of runs (--llm-repeat) not used"
    )
    assert comparison.rows[0].verdict == "regression"


def test_metric_series_finds_the_step(repo):
    store = seed_store(repo, STEP)
    names, values, points = metric_series(history_points(store, TEST, list(reversed(commits(repo)))), "ttft.p50")
    assert names == commits(repo) and values == STEP
    assert points == [8]


def test_a_change_point_moves_the_level_by_one_percent_at_least():
    # on the simulator's near noise-free results e-divisive finds a 0.2% shift significant
    from pytest_llmreplay.gate.history import change_points, sizeable

    tiny_shift = [0.1000, 0.1001, 0.1000, 0.1001, 0.1000, 0.1001, 0.1002, 0.1003, 0.1002, 0.1003, 0.1002, 0.1003]
    assert change_points(tiny_shift) == []
    assert sizeable(STEP, [3, 8]) == [8]  # the 0.1% "level" at 3 goes, the 20% step stays
    assert change_points(STEP) == [8]


def test_history_command_prints_each_commit_and_the_change_point(repo, capsys):
    seed_store(repo, STEP)
    corrupt = f"{result_folder(TEST)}/{commits(repo)[2][:12]}-corrupt.json"
    (repo / ".llmreplay" / corrupt).write_text("[]")
    assert main(["history", TEST, "--metric", "ttft.p50"]) == 0
    out = capsys.readouterr().out
    step = commits(repo)[8][:12]
    assert f"ttft.p50: change points at {step}" in out
    assert re.search(r"16 stored results on the first-parent history of HEAD \(\w{12}\), oldest first\n", out), out
    assert (
        f"\nskipped: 1 stored file in {repo}/.llmreplay could not be read: {corrupt} (the newest: not a stored "
        "llmreplay result (missing schema, summary, samples, fingerprint); pass a baseline file or a report's JSON)\n"
    ) in out
    # in the metric's unit, as every terminal table; the change point's column only when there is one
    assert re.search(r"^commit +ttft\.p50 +change point$", out, re.M), out
    assert re.search(rf"^{step} +120 ms +level 100\.1 ms -> 120\.1 ms \(\+20\.0%\)$", out, re.M), out
    assert re.search(rf"^{commits(repo)[0][:12]} +100 ms$", out, re.M), out
    assert (
        out.count("level ") == 1
        and len([line for line in out.splitlines() if line[:12] in {c[:12] for c in commits(repo)}]) == 16
    )


def test_history_command_names_the_unreadable_files_and_fails_when_none_could_be_read(repo, capsys):
    folder = repo / ".llmreplay" / result_folder(TEST)
    folder.mkdir(parents=True)
    names = [f"{commit[:12]}-corrupt.json" for commit in commits(repo)[:7]]  # oldest first
    for name in names:
        (folder / name).write_text("{not json")
    assert main(["history", TEST]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    newest_first = [f"{result_folder(TEST)}/{name}" for name in reversed(names)]
    assert captured.err == (
        f"error: {TEST}: no readable stored result on the first-parent history of HEAD ({commits(repo)[-1][:12]}); "
        f"7 stored files in {repo}/.llmreplay could not be read: {', '.join(newest_first[:5])} and 2 more "
        "(the newest: not a stored llmreplay result (line 1 column 2: not valid JSON: Expecting property name enclosed in double quotes))\n"
    )


def test_history_command_counts_one_result_in_the_singular(repo, capsys):
    seed_store(repo, [0.1])
    assert main(["history", TEST, "--metric", "ttft.p50"]) == 0
    assert re.match(
        rf"{TEST}: 1 stored result on the first-parent history of HEAD \(\w{{12}}\), oldest first\n",
        capsys.readouterr().out,
    )


def test_history_command_draws_one_series_the_newest_results(repo, capsys):
    # a result of another endpoint at a commit is no point of the newest one's series: pooled,
    # it read as a +171% change point
    seed_store(repo, STEP)
    other = record(0.5, commits(repo)[10], fingerprint={"kind": "offline", "profile": "another"})
    FolderStore(repo / ".llmreplay").save(other)
    assert main(["history", TEST, "--metric", "ttft.p50"]) == 0
    out = capsys.readouterr().out
    assert (
        "oldest first; 1 of another endpoint, workload, "
        "settings or run count than the newest left out (llmreplay dashboard draws each as its own line)"
    ) in out
    assert "16 stored results on the first-parent history of HEAD" in out
    assert "500 ms" not in out and out.count("level ") == 1


def test_history_command_without_a_change_point_has_two_columns_and_reads_single_figure_keys(repo, capsys):
    seed_store(repo, [0.1] * 16)
    assert main(["history", TEST, "--metric", "tpot.p50", "--metric", "error_rate"]) == 0
    out = capsys.readouterr().out
    assert "tpot.p50: no change point" in out and "error_rate: not measured" in out
    table = out.split("tpot.p50: no change point\n")[1].split("\n\n")[0].splitlines()
    assert re.fullmatch(r"commit +tpot\.p50", table[0]) and all(
        re.fullmatch(r"[0-9a-f]{12} +10 ms", line) for line in table[2:]
    ), table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["history", TEST, "--metric", "ttft"],
            "error: --metric 'ttft': name a statistic, e.g. 'ttft.p99' (one of mean, min, *)",
        ),
        (
            ["history", TEST, "--metric", "bogus.p50"],
            "error: --metric 'bogus.p50': unknown metric 'bogus'; expected one of answer_decode_tps, *ttfo, ttfr, ttft, *",
        ),
        (
            ["history", TEST, "--metric", "ttft.p42"],
            "error: --metric 'ttft.p42': ttft has no statistic 'p42'; expected one of mean, min, *",
        ),
        (
            ["history", TEST, "--baseline-dir", "nowhere"],
            "error: --baseline-dir: */nowhere: no such folder; expected where results were stored (--llm-save, run --save-to)*",
        ),
        (
            ["history", "tests/other.py::test_x"],
            "error: tests/other.py::test_x: no stored result in */.llmreplay on the first-parent history of HEAD (*)",
        ),
        (["history", ""], "error: TEST: empty; expected a test id as stored, e.g. tests/perf/test_chat.py::test_chat"),
        (["history", " "], "error: TEST: empty; expected a test id as stored, e.g. tests/perf/test_chat.py::test_chat"),
        (
            ["history", TEST, "--ref", "no-such-branch"],
            "error: --ref: git cannot resolve 'no-such-branch' to a commit; expected a branch, tag or commit of the repository at *",
        ),
    ],
)
def test_history_command_bad_input_is_one_line_with_the_bad_input_status(repo, capsys, args, message):
    seed_store(repo, STEP)
    assert main(args) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    from fnmatch import fnmatch

    assert fnmatch(err, message), err


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (
            "no-such-branch",
            "--ref: git cannot resolve 'no-such-branch' to a commit; expected a branch, tag or commit of the repository at {cwd}",
        ),
        ("", "--ref: empty; expected a branch, tag or commit of the repository at {cwd}"),
        ("HEAD", "--ref: {cwd} is not in a git repository with a commit; baselines are kept per commit"),
    ],
)
def test_history_and_dashboard_word_a_bad_ref_alike(repo, tmp_path_factory, monkeypatch, capsys, ref, message):
    seed_store(repo, STEP)
    cwd = repo
    if ref == "HEAD":  # the store read from a folder that is no repository
        cwd = tmp_path_factory.mktemp("no_repository")
        monkeypatch.chdir(cwd)
    store = str(repo / ".llmreplay")
    assert main(["history", TEST, "--baseline-dir", store, "--ref", ref]) == 3
    history = capsys.readouterr().err
    assert main(["dashboard", "--baseline-dir", store, "--out", str(cwd / "site"), "--ref", ref]) == 3
    assert capsys.readouterr().err == history == f"error: {message.format(cwd=cwd)}\n"


def test_history_command_without_otava_names_the_extra(repo, capsys, monkeypatch):
    seed_store(repo, STEP)
    monkeypatch.setitem(sys.modules, "otava.analysis", None)  # import fails as if not installed
    assert main(["history", TEST]) == 3
    captured = capsys.readouterr()
    assert captured.err == "error: change points need Apache Otava: pip install 'pytest-llmreplay[history]'\n"
    assert captured.out == ""


def test_compare_is_gated_by_the_stored_history(project):
    # five commits, each with a saved result: the sixth comparison is judged on their spread
    for i in range(MIN_HISTORY):
        project.runpytest("--llm-offline", "--llm-save").assert_outcomes(passed=1)
        git(project.path, "commit", "-q", "--allow-empty", "-m", f"change {i}")
    result = project.runpytest("--llm-offline", "--llm-compare=HEAD~1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "Compared with HEAD~1 (*), stored *: 0 regressions",
            "history: 5 earlier results gate the verdicts (Student's t prediction over them, one-sided 99.50% each, 97.5% over the 5 figures: t > 4.60)",
        ]
    )
    assert "history t -inf" not in result.stdout.str()  # equal figures read as equal, not as a rounding error
    stored = [json.loads(p.read_text()) for p in (project.path / ".llmreplay").glob("*/*.json")]
    assert len(stored) == MIN_HISTORY


def test_history_of_two_results_says_they_are_too_few_for_a_change_point(repo, capsys):
    """Two results 23.5% apart printed "no change point", which reads as a verdict (a new user's
    trial): Otava is not asked below three results, and the line says so."""
    seed_store(repo, [0.100, 0.1235])
    assert main(["history", TEST, "--metric", "ttft.p50"]) == 0
    assert "ttft.p50: no change point looked for: 2 results, too few (3 at least)" in capsys.readouterr().out


class FixedHistory:
    """A history of per-figure values (``values[key]``, oldest first) for :func:`gate_with_history`."""

    def __init__(self, values: dict[str, list[float]]) -> None:
        self._values, self.unreadable, self.unlike = values, {}, 0
        self.points = [("c", {})] * len(next(iter(values.values())))

    def values(self, key: str) -> list[float]:
        return self._values[key]


def test_the_history_holds_a_tests_figures_together_to_its_rate():
    """Each figure was judged at one-sided 97.5%: over seven figures an unchanged server that the
    one-run bootstrap called worse on every figure (run-to-run noise it cannot see) kept a false
    regression in 16-20% of comparisons (a statistics review). Bonferroni over the figures judged:
    about 2.5% of such tests keep one the history judged."""
    from pytest_llmreplay.gate.history import gate_with_history

    keys = ["ttft.p50", "ttft.p90", "tpot.p50", "latency.p50", "ttfat.p50", "itl.p50", "queue.p50"]
    rng = np.random.default_rng(11)
    trials, kept = 600, 0
    for _ in range(trials):
        history = FixedHistory({key: list(1 + 0.08 * rng.standard_normal(20)) for key in keys})
        current: dict = {"summary": {}}
        for key in keys:
            metric, _, stat = key.partition(".")
            current["summary"].setdefault(metric, {})[stat] = 1 + 0.08 * rng.standard_normal()
        rows = [
            Row(key, 1.0, 1.1, change=0.1, low=0.05, high=0.15, tolerance=0.05, verdict="regression") for key in keys
        ]
        comparison = Comparison("baseline", rows=rows)
        gate_with_history(comparison, current, history)
        # a row the history judged (not one it left to the bootstrap: a step too recent, 1% a figure)
        kept += any(row.verdict == "regression" and row.note.startswith("history t") for row in comparison.rows)
    assert kept / trials <= 0.04, kept  # 2.5% nominal; was 0.16
    assert "one-sided 99.64% each, 97.5% over the 7 figures" in comparison.header
    # figures whose newest result is off the rest are left to the bootstrap: not counted (a review)
    stepped = FixedHistory({key: [1.0, 1.01, 0.99, 1.0, 1.01, 0.99, 1.0, 1.01, 0.99, 1.3] for key in keys})
    stepped._values["ttft.p50"] = [1.0, 1.01, 0.99, 1.0, 1.01, 0.99, 1.0, 1.01, 0.99, 1.0]
    rows = [Row(key, 1.0, 1.1, change=0.1, low=0.05, high=0.15, tolerance=0.05, verdict="regression") for key in keys]
    comparison = Comparison("baseline", rows=rows)
    gate_with_history(comparison, current, stepped)
    assert "97.5% over the 1 figure:" in comparison.header
    unstable = Row("ttft.p50", 1.0, 1.5, change=0.5, verdict="unstable", note="")
    alone = Comparison("baseline", rows=[unstable])
    gate_with_history(alone, current, history)
    assert (unstable.verdict, unstable.note) == ("unstable", "")  # not judged, not noted as judged (a review)
    assert alone.header == "history: 20 earlier results, no figure judged on them (each row says why)"
    assert [row.note.startswith("the newest result is off the rest") for row in comparison.rows] == [False] + [True] * 6
