"""Stored results and their comparison: samples from a hand-built Result, reading records back,
git state and the reference's history in a scratch repository, tolerances, and the bootstrap
verdicts (the never-overwriting stores are tested in test_store.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from records import make, rec
from test_repeats import at95

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.gate import baseline, bootstrap
from pytest_llmreplay.gate.baseline import (
    compare,
    parse_tolerance,
    samples,
    tolerances,
)
from pytest_llmreplay.gate.comparison_table import change_cell, comparison_cells, comparison_table
from pytest_llmreplay.gate.git import git_state, reference_history
from pytest_llmreplay.gate.store import FolderStore, write_new
from pytest_llmreplay.gate.stored_record import read_record
from pytest_llmreplay.metrics.result import WINDOWS
from pytest_llmreplay.metrics.slo import check_slos, parse_slos

ROOT = Path(__file__).resolve().parent.parent


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- samples


def small_run():
    # session 0, two turns; session 1, one turn. Span 0 -> 10: steady span 2 -> 10 in ten 0.8 s windows.
    return make(
        [
            # ttft 1/3, latency 1.0, tpot (1 - 1/3) / 3 = 2/9; prompt 100, cached 0, output 4
            rec(0, 0, 2, sent=0.0, chunks=((1 / 3, 1), (1.0, 3)), end=1.0, prompt=100, cached=0),
            # ttft 0.5, latency 0.5, one token: no tpot; prompt 300, cached 90
            rec(0, 1, 2, sent=2.0, chunks=((2.5, 1),), end=2.5, prompt=300, cached=90, history="server"),
            # ttft 0.2, latency 7.0; prompt 50, cached 0
            rec(1, sent=3.0, chunks=((3.2, 1),), end=10.0, prompt=50, cached=0),
        ]
    )


def test_samples_by_hand():
    found = samples(small_run())
    assert found == {
        "ttft": [0.333333, 0.5, 0.2],  # 1/3 to 6 significant digits; 3.2 - 3.0 = 0.2000000000000002
        "tpot": [0.222222],  # 2/9; the one-token answers have none
        "latency": [1.0, 0.5, 7.0],
        # session 0: first token of its last turn 2.5 - first sent 0.0; session 1: its ttft
        "ttfat": [2.5, 0.2],
        "cache_hit_rate": [0.225, 0.0],  # 90 / 400; 0 / 50
        "eligible_cache_hit_rate": [0.865385],  # 90 / (100 + 4); session 1 had nothing eligible
        # output tokens in the steady span: 1 at 2.5 (window 0), 1 at 3.2 (window 1), each 1 / 0.8
        "output_throughput": [1.25, 1.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        # requests end at 2.5 (window 0) and 10.0 (window 9, its right edge included)
        "request_throughput": [1.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.25],
    }


def test_window_rates_average_to_the_steady_state():
    result = small_run()
    found = samples(result)
    for name in baseline.WINDOWED_METRICS:
        assert np.mean(found[name]) == approx(result.summary[name]["steady_state"])  # 2 / 8 = 0.25


def test_window_rates_average_to_the_steady_state_on_a_busier_run():
    rng = np.random.default_rng(7)
    records = []
    for i, sent in enumerate(np.sort(rng.uniform(0, 100, 300))):
        first = sent + rng.uniform(0.05, 0.5)
        gaps = np.cumsum(rng.uniform(0.01, 0.05, int(rng.integers(2, 20))))
        chunks = ((float(first), 1),) + tuple((float(first + g), 1) for g in gaps)
        records.append(rec(i, sent=float(sent), chunks=chunks, end=chunks[-1][0]))
    result = make(records)
    found = samples(result)
    assert len(found["output_throughput"]) == len(found["request_throughput"]) == WINDOWS == 10
    for name in baseline.WINDOWED_METRICS:
        assert np.mean(found[name]) == pytest.approx(result.summary[name]["steady_state"], rel=1e-5)


def test_samples_round_to_six_significant_digits():
    # latency 1234.56789 -> 1234.57; ttft 0.000123456789 -> 0.000123457
    result = make([rec(0, sent=0.0, chunks=((0.000123456789, 1),), end=1234.56789)])
    found = samples(result)
    assert found["latency"] == [1234.57]
    assert found["ttft"] == [0.000123457]


def test_samples_leave_out_metrics_without_values():
    # one-token answers, no cached counts, every request failed but one
    result = make(
        [
            rec(0, sent=0.0, chunks=((0.5, 1),), end=1.0),
            rec(1, status="failed", sent=0.5, end=2.0, error="server: 500"),
        ]
    )
    found = samples(result)
    assert set(found) == {"ttft", "latency", "ttfat", "output_throughput", "request_throughput"}
    assert found["ttft"] == [0.5]  # the failed one has no sample
    assert samples(make([])) == {}


# ---------------------------------------------------------------- records


def record(test="tests/test_perf.py::test_chat", commit="a" * 40, **more):
    return {
        "schema": baseline.SCHEMA,
        "test": test,
        "commit": commit,
        "dirty": False,
        "branch": "main",
        "fingerprint": {"kind": "sim", "model": "m"},
        "workload": {"path": "w.jsonl", "digest": "d"},
        "settings": {"concurrency": 4},
        "summary": {"ttft": {"p50": 0.5}},
        "samples": {"ttft": [0.4, 0.5, 0.6]},
        **more,
    }


def test_make_record_round_trips_through_the_store(tmp_path):
    result = small_run()
    checks = check_slos(result.summary, parse_slos({"ttft.p50": "< 1s", "error_rate": "> 0"}))
    made = baseline.make_record(
        result,
        test="t::x",
        fingerprint={"kind": "sim"},
        workload={"digest": "abc"},
        git={"commit": "f" * 40, "dirty": True, "branch": "dev"},
        slo_checks=checks,
    )
    assert made["schema"] == baseline.SCHEMA
    assert (made["commit"], made["dirty"], made["branch"]) == ("f" * 40, True, "dev")
    assert made["slo"] == [
        {"key": "ttft.p50", "threshold": "< 1s", "measured": 1 / 3, "passed": True},  # ttfts 1/3, 0.5, 0.2
        {"key": "error_rate", "threshold": "> 0", "measured": 0.0, "passed": False},
    ]
    assert made["samples"] == samples(result)
    path = FolderStore(tmp_path).save(made)
    assert read_record(path) == json.loads(json.dumps(made))


def test_a_saved_record_compares_cleanly_with_its_in_memory_twin(tmp_path):
    # the gate compares a record read back from disk with one made in memory: the JSON round trip
    # must not make them look like different endpoints, workloads or settings
    result = small_run()
    made = baseline.make_record(
        result, test="t", fingerprint={"kind": "sim", "hardware": None}, workload={"digest": "abc"}, git={}
    )
    made["settings"] = {"concurrency": 4, "speedup": 1.0, "rate": None, "order": "sequential"}
    again = read_record(FolderStore(tmp_path).save(made))
    comparison = compare(again, made, {"ttft.p50": 0.05, "latency.p50": 0.05})
    assert comparison.mismatch is None
    assert [row.verdict for row in comparison.rows] == ["ok", "ok"]


# ---------------------------------------------------------------- read_record


def test_read_record_round_trip(tmp_path):
    path = write_new(tmp_path / "r.json", record())
    assert read_record(path) == record()


def test_read_record_missing_file(tmp_path):
    with pytest.raises(LLMReplayError, match="no such file") as info:
        read_record(tmp_path / "absent.json")
    assert "absent.json" in str(info.value)


@pytest.mark.parametrize("content", ["{not json", "", "\xff\xfe garbage"])
def test_read_record_not_json(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(LLMReplayError, match="not a stored llmreplay result") as info:
        read_record(path)
    assert "bad.json" in str(info.value)


def test_read_record_directory(tmp_path):
    with pytest.raises(LLMReplayError, match="not a stored llmreplay result"):
        read_record(tmp_path)


@pytest.mark.parametrize(
    ("content", "missing"),
    [
        ([1, 2], "schema, summary, samples, fingerprint"),
        (None, "schema, summary, samples, fingerprint"),
        ({"summary": {}}, "schema, samples, fingerprint"),
        # what Result.write_json writes: a summary, but no schema, samples or fingerprint
        ({"workload": "w", "settings": {}, "summary": {}}, "schema, samples, fingerprint"),
        ({"schema": 1, "summary": {}, "fingerprint": {}}, "samples"),
    ],
)
def test_read_record_json_that_is_not_a_record(tmp_path, content, missing):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(content))
    with pytest.raises(LLMReplayError) as info:
        read_record(path)
    message = str(info.value)
    assert "other.json" in message and f"missing {missing}" in message


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"summary": "x"}, "summary: expected an object of metrics, got a string ('x')"),
        ({"summary": {"ttft": 3}}, "summary.ttft: expected an object of statistics, got a number"),
        ({"summary": {"ttft": {"p50": "fast"}}}, "summary.ttft.p50: expected a number, got a string ('fast')"),
        ({"samples": None}, "samples: expected an object of lists of numbers, got null"),
        ({"samples": {"ttft": "0.1"}}, "samples.ttft: expected a list of numbers, got a string ('0.1')"),
        (
            {"samples": {"ttft": [0.1, "0.2"]}},
            "samples.ttft: expected a list of numbers, got a list holding a string ('0.2')",
        ),
        ({"samples": {"ttft": [0.1, None]}}, "samples.ttft: expected a list of numbers, got a list holding null"),
        ({"fingerprint": []}, "fingerprint: expected an object, got a list"),
        ({"settings": "fast"}, "settings: expected an object, got a string ('fast')"),
        ({"sample_keys": {"ttft": [1.5]}}, "sample_keys.ttft: expected a list of integers, got 1.5 in it"),
        ({"runs": [{"sizes": {"ttft": "2"}}]}, "runs[0].sizes: expected counts"),
        ({"runs": [{"sizes": {}, "summary": []}]}, "runs[0].summary: expected an object of metrics, got a list"),
        # hand-edited results that stopped a whole dashboard build with a traceback (found by a review helper)
        ({"runs": [{"sizes": {}}]}, "runs[0].summary: expected an object of metrics, got null"),
        ({"slo": "oops"}, "slo: expected a list of objects, got a string ('oops')"),
        (
            {"slo": [{"key": "ttft.p99", "measured": "45ms"}]},
            "slo[0].measured: expected a number, got a string ('45ms')",
        ),
        ({"regression": ["ttft.p50"]}, "regression: expected an object, got a list holding a string ('ttft.p50')"),
    ],
)
def test_read_record_of_the_right_schema_and_wrong_shape_is_one_line(tmp_path, change, problem):
    """What a reader takes for granted is checked on reading (issue 31, C11): these gave an
    AttributeError or TypeError in history and compare, or were read as if fine."""
    path = write_new(tmp_path / "r.json", {**record(), **change})
    with pytest.raises(LLMReplayError) as info:
        read_record(path)
    assert str(info.value) == f"{path}: not a stored llmreplay result ({problem})"


def test_read_record_nested_too_deeply_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(
        LLMReplayError, match=r"deep.json: not a stored llmreplay result \(nested too deeply: lists or objects .*\)$"
    ):
        read_record(path)


def test_read_record_another_schema(tmp_path):
    path = write_new(tmp_path / "r.json", {**record(), "schema": 99})
    with pytest.raises(LLMReplayError, match=f"stored with schema 99, this version reads {baseline.SCHEMA}"):
        read_record(path)


# ---------------------------------------------------------------- git


@pytest.fixture
def git_env(tmp_path, monkeypatch):
    """Git that works anywhere: an author, no user or system config, no repository above tmp_path."""
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.com")
    empty = tmp_path / "gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit(repo, message, file="f.txt"):
    with open(repo / file, "a") as handle:
        handle.write(message + "\n")
    git(repo, "add", file)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(git_env):
    """main: c1 - c2 - c3; feature (checked out) from c2: f1 - f2; tag v1 on c1."""
    path = git_env / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    ids = {"c1": commit(path, "c1"), "c2": commit(path, "c2")}
    git(path, "tag", "v1", ids["c1"])
    git(path, "checkout", "-q", "-b", "feature")
    ids["f1"] = commit(path, "f1")
    ids["f2"] = commit(path, "f2")
    git(path, "checkout", "-q", "main")
    ids["c3"] = commit(path, "c3")
    git(path, "checkout", "-q", "feature")
    return path, ids


def test_git_state_clean_branch(repo):
    path, ids = repo
    assert git_state(path) == {"commit": ids["f2"], "dirty": False, "branch": "feature"}
    assert len(ids["f2"]) == 40


def test_git_state_from_a_subfolder(repo):
    path, ids = repo
    (path / "sub").mkdir()
    assert git_state(path / "sub")["commit"] == ids["f2"]


def test_git_state_dirty_only_for_tracked_changes(repo):
    path, _ = repo
    (path / "untracked.txt").write_text("new")
    assert git_state(path)["dirty"] is False
    (path / "f.txt").write_text("changed")
    assert git_state(path)["dirty"] is True


def test_git_state_detached_head(repo):
    path, ids = repo
    git(path, "checkout", "-q", ids["c1"])
    assert git_state(path) == {"commit": ids["c1"], "dirty": False, "branch": "HEAD"}


def test_git_state_outside_a_repository(git_env):
    plain = git_env / "plain"
    plain.mkdir()
    assert git_state(plain) == {"commit": None, "dirty": None, "branch": None}


def test_auto_reference_is_the_merge_base_with_main(repo):
    path, ids = repo
    for ref in (None, "auto"):
        label, history = reference_history(path, ref)
        assert label == f"merge-base with main ({ids['c2'][:12]})"
        assert history == [ids["c2"], ids["c1"]]  # newest first; not feature's own commits, not c3
    with pytest.raises(LLMReplayError, match="^--llm-compare: empty; expected a branch, tag or commit"):
        reference_history(path, "")  # the plugin passes None for an empty option; `history --ref ''` is a mistake


def test_a_shallow_clone_says_where_its_history_and_the_search_end(repo, tmp_path):
    """actions/checkout's default depth 1: the baseline search stopped at the clone's boundary
    with "no stored result ... in its 0 ancestors", and nothing said the clone was shallow (a
    stores review)."""
    path, ids = repo
    git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "main", f"file://{path}", "shallow")
    label, history = reference_history(tmp_path / "shallow", None)
    assert history == [ids["c3"]]
    assert label == (
        f"merge-base with main ({ids['c3'][:12]}) (a shallow clone: its history ends 1 commit back, where the "
        "search for a baseline ends; fetch all of it: actions/checkout's fetch-depth: 0)"
    )
    assert "shallow" not in reference_history(path, None)[0]  # a full clone says nothing


def test_auto_reference_on_main_is_head(repo):
    path, ids = repo
    git(path, "checkout", "-q", "main")
    label, history = reference_history(path, "auto")
    assert label == f"merge-base with main ({ids['c3'][:12]})"
    assert history == [ids["c3"], ids["c2"], ids["c1"]]


def test_auto_reference_falls_back_to_master(git_env):
    path = git_env / "old"
    path.mkdir()
    git(path, "init", "-q", "-b", "master")
    c1 = commit(path, "c1")
    git(path, "checkout", "-q", "-b", "topic")
    commit(path, "t1")
    label, history = reference_history(path, None)
    assert label == f"merge-base with master ({c1[:12]})"
    assert history == [c1]


def test_auto_reference_without_a_default_branch_is_head(git_env):
    path = git_env / "trunk"
    path.mkdir()
    git(path, "init", "-q", "-b", "trunk")
    c1 = commit(path, "c1")
    c2 = commit(path, "c2")
    assert reference_history(path, "auto") == ("HEAD", [c2, c1])


def test_auto_reference_prefers_origin_head(repo, git_env):
    source, ids = repo
    git(source, "checkout", "-q", "main")  # a clone's origin/HEAD is the source's checked-out branch
    clone = git_env / "clone"
    git(git_env, "clone", "-q", str(source), str(clone))  # origin/HEAD -> origin/main (c3)
    git(clone, "checkout", "-q", "feature")  # f2, from origin/feature
    label, history = reference_history(clone, "auto")
    assert label == f"merge-base with origin/HEAD ({ids['c2'][:12]})"
    assert history == [ids["c2"], ids["c1"]]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("main", ["c3", "c2", "c1"]),
        ("v1", ["c1"]),
        ("HEAD~1", ["f1", "c2", "c1"]),
        ("feature", ["f2", "f1", "c2", "c1"]),
    ],
)
def test_named_reference(repo, ref, expected):
    path, ids = repo
    label, history = reference_history(path, ref)
    assert history == [ids[name] for name in expected]
    assert label == f"{ref} ({ids[expected[0]][:12]})"


def test_named_reference_by_commit_id(repo):
    path, ids = repo
    label, history = reference_history(path, ids["c2"][:10])
    assert history == [ids["c2"], ids["c1"]]
    assert label.endswith(f"({ids['c2'][:12]})")


def test_history_follows_first_parents_only(git_env):
    # main: c1 - c2 - merge(side: s1 from c1)
    path = git_env / "merged"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    c1 = commit(path, "c1")
    git(path, "checkout", "-q", "-b", "side")
    s1 = commit(path, "s1", file="side.txt")
    git(path, "checkout", "-q", "main")
    c2 = commit(path, "c2")
    git(path, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(path, "rev-parse", "HEAD")
    _, history = reference_history(path, "main")
    assert history == [merge, c2, c1]
    assert s1 not in history


@pytest.mark.parametrize("ref", ["no-such-branch", "v2", "HEAD~10", "HEAD:f.txt", "0" * 40])
def test_unresolvable_reference(repo, ref):
    path, _ = repo
    with pytest.raises(LLMReplayError, match="cannot resolve") as info:
        reference_history(path, ref)
    assert repr(ref) in str(info.value)


def test_reference_outside_a_repository(git_env):
    plain = git_env / "plain"
    plain.mkdir()
    with pytest.raises(LLMReplayError, match="not in a git repository"):
        reference_history(plain, "auto")


def test_reference_in_a_repository_without_commits(git_env):
    empty = git_env / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    with pytest.raises(LLMReplayError, match="not in a git repository with a commit"):
        reference_history(empty, "main")


# ---------------------------------------------------------------- tolerances


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10%", 0.1),
        ("2.5%", 0.025),
        (" 7 % ", 0.07),
        ("0%", 0.0),
        (".5%", 0.005),
        (0.1, 0.1),
        ("0.1", 0.1),
        (0, 0.0),
        (1, 1.0),
    ],
)
def test_parse_tolerance(value, expected):
    assert parse_tolerance("ttft.p50", value) == approx(expected)


@pytest.mark.parametrize("value", ["off", None])
def test_parse_tolerance_off(value):
    assert parse_tolerance("ttft.p50", value) is None


@pytest.mark.parametrize("value", ["-5%", -0.1, "ten", "10 pct", "%", "", True, False, [0.1], float("nan"), "Off"])
def test_parse_tolerance_refuses(value):
    with pytest.raises(LLMReplayError) as info:
        parse_tolerance("ttft.p50", value)
    message = str(info.value)
    assert "'ttft.p50'" in message and "expected an allowed change such as '10%'" in message


def test_what_yaml_and_toml_make_of_natural_spellings_is_named():
    # YAML reads a bare off as false; TOML reads an unquoted ttft.p90 = "10%" as the table ttft
    with pytest.raises(LLMReplayError, match=r"got False: YAML reads a bare off .* quote it: 'off'"):
        parse_tolerance("ttft.p90", False)
    with pytest.raises(LLMReplayError) as info:
        tolerances({"ttft": {"p90": "10%"}})
    assert str(info.value) == (
        "regression 'ttft': its value is a table ({'p90': '10%'}), as TOML reads an unquoted dotted key "
        '(ttft.p90 = ... is the table ttft); quote the key: "ttft.p90" = ...'
    )
    with pytest.raises(LLMReplayError, match=r"^SLO 'ttft': its value is a table \(\{'p99': '< 1s'\}\)"):
        parse_slos({"ttft": {"p99": "< 1s"}})


def test_tolerances_default():
    merged = tolerances(None)
    assert merged == baseline.DEFAULT_TOLERANCES
    merged["ttft.p50"] = 1.0
    assert baseline.DEFAULT_TOLERANCES["ttft.p50"] == 0.05  # a copy, not the defaults themselves


def test_tolerances_overrides():
    merged = tolerances(
        {
            "ttft.p50": "10%",  # changed
            "ttft.p99": 0.2,  # added
            "cache_hit_rate.mean": "off",  # removed
            "eligible_cache_hit_rate.p90": "3%",
            "request_throughput.steady_state": "5%",
            "latency.p95": "off",  # not there: nothing to remove
        }
    )
    expected = dict(baseline.DEFAULT_TOLERANCES)
    del expected["cache_hit_rate.mean"]
    expected.update(
        {"ttft.p50": 0.1, "ttft.p99": 0.2, "eligible_cache_hit_rate.p90": 0.03, "request_throughput.steady_state": 0.05}
    )
    assert merged == approx(expected)
    assert list(tolerances({"ttft.p50": "off"})) == [k for k in baseline.DEFAULT_TOLERANCES if k != "ttft.p50"]


@pytest.mark.parametrize(
    ("key", "needle"),
    [
        ("itl.p50", "only ttft, tpot, latency"),  # ITL has no samples stored
        ("error_rate.value", "only ttft"),
        ("ttfb.p50", "only ttft"),
        ("ttft", "compare ttft by one of mean, p50, p90, p95, p99"),
        ("ttft.max", "compare ttft by one of"),
        ("ttft.steady_state", "compare ttft by one of"),
        ("output_throughput.p50", "compare output_throughput by one of steady_state"),
        ("request_throughput.overall", "compare request_throughput by one of steady_state"),
    ],
)
def test_tolerances_refuse_bad_keys(key, needle):
    with pytest.raises(LLMReplayError) as info:
        tolerances({key: "10%"})
    message = str(info.value)
    assert repr(key) in message and needle in message


def test_tolerances_refuse_a_bad_value_naming_the_key():
    with pytest.raises(LLMReplayError, match="'ttft.p90'"):
        tolerances({"ttft.p50": "5%", "ttft.p90": "lots"})


@pytest.mark.parametrize("overrides", [["ttft.p50"], "ttft.p50: 5%", 5])
def test_tolerances_want_a_mapping(overrides):
    with pytest.raises(LLMReplayError, match="regression: expected a mapping"):
        tolerances(overrides)


# ---------------------------------------------------------------- compare


def lognormal(n=500, median=0.2, seed=1):
    return np.random.default_rng(seed).lognormal(np.log(median), 0.5, n)


def stored(samples_, fingerprint=None, workload=None, settings=None):
    """A stored record with these samples and a summary computed from them."""
    summary = {}
    for name, values in samples_.items():
        values = np.asarray(values, dtype=float)
        if name in baseline.WINDOWED_METRICS:
            summary[name] = {"steady_state": float(values.mean())}
        else:
            summary[name] = {
                "mean": float(values.mean()),
                **{f"p{q}": float(np.percentile(values, q)) for q in (50, 90, 95, 99)},
            }
    return {
        "schema": baseline.SCHEMA,
        "fingerprint": {"kind": "offline", "model": "m", "version": "1"} if fingerprint is None else fingerprint,
        "workload": {"path": "w.jsonl", "digest": "abc"} if workload is None else workload,
        "settings": {"concurrency": 8} if settings is None else settings,
        "summary": summary,
        "samples": {name: [float(v) for v in values] for name, values in samples_.items()},
    }


def full_samples(ttft_scale=1.0, cache_scale=1.0, throughput_scale=1.0):
    rng = np.random.default_rng(3)
    return {
        "ttft": lognormal() * ttft_scale,
        "tpot": lognormal(median=0.02, seed=2),
        "latency": lognormal(median=2.0, seed=4),
        "ttfat": lognormal(median=5.0, seed=5),
        "cache_hit_rate": rng.uniform(0.3, 0.6, 200) * cache_scale,
        "output_throughput": (1000 + rng.normal(0, 10, 10)) * throughput_scale,
    }


def rows(comparison):
    return {row.key: row for row in comparison.rows}


def test_identical_samples_are_all_ok():
    record_ = stored(full_samples())
    comparison = compare(record_, record_)
    assert comparison.mismatch is None and comparison.header is None
    assert [row.key for row in comparison.rows] == list(baseline.DEFAULT_TOLERANCES)
    for row in comparison.rows:
        assert row.verdict == "ok", row
        assert row.change == 0.0
        assert row.low <= 0.0 <= row.high
        assert row.baseline == row.current
        assert row.tolerance == baseline.DEFAULT_TOLERANCES[row.key]
    assert comparison.regressions == []


def test_one_run_against_one_run_of_a_server_says_what_its_interval_leaves_out():
    # the bootstrap resamples requests within each run: a whole run's shift (a slower runner)
    # is in no interval, and a same-config pair on a busy host read +29% REGRESSION; said over
    # the table, and not of the simulator in process, whose runs have no such shift
    live = {"kind": "live", "model": "m", "version": "1"}
    one_each = compare(stored(full_samples(), live), stored(full_samples(), live))
    assert one_each.header == baseline.ONE_RUN_NOTE and baseline.ONE_RUN_NOTE in comparison_table(one_each)
    assert "llmreplay run --repeat N" in baseline.ONE_RUN_NOTE
    assert compare(stored(full_samples()), stored(full_samples())).header is None  # offline


def test_one_run_against_several_says_its_side_holds_no_shift_of_a_whole_run():
    """A one-run baseline against a five-run current: its run's shift is in no interval (8.5% of
    unchanged such pairs read REGRESSION at 6% run noise), and the one-run note was dropped
    because the other side had runs (a statistics review)."""
    from pytest_llmreplay.gate.repeats import pool_records

    live = {"kind": "live", "model": "m", "version": "1"}
    five = pool_records([stored(full_samples(), live)] * 5, [{"seed": i, "cache_reset": None} for i in range(5)])
    header = compare(stored(full_samples(), live), five).header
    assert header.splitlines()[-1] == baseline.one_side_note("baseline")
    assert header.splitlines()[-1].startswith("one run in the baseline: the interval holds the other side's shifts")
    assert compare(five, five).header.startswith("baseline and current: each statistic of all 5 runs' samples pooled")
    assert "one run" not in compare(five, five).header


def test_a_new_server_version_or_a_moved_workload_file_is_still_compared():
    # an engine repository's every commit builds another version (0.11.1.dev101+g1a2b3c4), and
    # a workload file moved or named ./w.yaml is the same bytes: "not compared" turned the gate
    # off for both; the engine (owned_by) stays in the identity, and the header names the change
    before = {"kind": "live", "model": "m", "engine": "vllm", "server_version": "0.11.1.dev101+g1a2b3c4"}
    after = {**before, "server_version": "0.11.1.dev102+g5d6e7f8"}
    base = stored(full_samples(), before, workload={"digest": "d", "path": "w.yaml"})
    cur = stored(full_samples(ttft_scale=1.3), after, workload={"digest": "d", "path": "perf/w.yaml"})
    comparison = compare(base, cur)
    assert comparison.mismatch is None and rows(comparison)["ttft.p50"].verdict == "regression"
    assert "server version 0.11.1.dev101+g1a2b3c4 -> 0.11.1.dev102+g5d6e7f8" in comparison.header.splitlines()
    sglang = stored(full_samples(), {**after, "engine": "sglang"}, workload={"digest": "d", "path": "w.yaml"})
    assert compare(base, sglang).mismatch.startswith(
        "not compared: endpoint fingerprint differs (engine: 'vllm' vs 'sglang')"
    )
    other_bytes = stored(full_samples(), after, workload={"digest": "e", "path": "w.yaml"})
    assert "workload differs (digest: 'd' vs 'e')" in compare(base, other_bytes).mismatch


def test_twenty_percent_slower_ttft_is_a_regression():
    # every ttft sample 1.2 times its baseline: every percentile and the mean move by exactly +20%
    comparison = compare(stored(full_samples()), stored(full_samples(ttft_scale=1.2)))
    found = rows(comparison)
    for key in ("ttft.p50", "ttft.p90"):
        row = found[key]
        assert row.verdict == "regression", row
        assert row.change == approx(0.2)
        assert 0 < row.low < 0.2 < row.high
        assert row.current == approx(row.baseline * 1.2)
    assert [row.key for row in comparison.regressions] == ["ttft.p50", "ttft.p90"]
    for key in ("tpot.p50", "latency.p50", "ttfat.p50", "cache_hit_rate.mean", "output_throughput.steady_state"):
        assert found[key].verdict == "ok"


def test_twenty_percent_faster_ttft_is_an_improvement():
    found = rows(compare(stored(full_samples()), stored(full_samples(ttft_scale=1 / 1.2))))
    row = found["ttft.p50"]
    assert row.verdict == "improved"
    assert row.change == approx(1 / 1.2 - 1)  # -16.7%
    assert row.high < 0


def test_higher_cache_hit_rate_and_throughput_are_improvements():
    # lower is worse for these: 20% up is better
    comparison = compare(stored(full_samples()), stored(full_samples(cache_scale=1.2, throughput_scale=1.2)))
    found = rows(comparison)
    for key in ("cache_hit_rate.mean", "output_throughput.steady_state"):
        row = found[key]
        assert row.verdict == "improved", row
        assert row.change == approx(0.2)
        assert row.low > 0
    assert comparison.regressions == []


def test_lower_cache_hit_rate_and_throughput_are_regressions():
    comparison = compare(stored(full_samples()), stored(full_samples(cache_scale=0.8, throughput_scale=0.8)))
    found = rows(comparison)
    for key in ("cache_hit_rate.mean", "output_throughput.steady_state"):
        assert found[key].verdict == "regression"
        assert found[key].change == approx(-0.2)
        assert found[key].high < 0
    assert [row.key for row in comparison.regressions] == ["cache_hit_rate.mean", "output_throughput.steady_state"]


def test_a_shift_beyond_tolerance_on_tiny_noisy_samples_is_noise():
    # p50 of [1, 3] is 2, of [1.2, 3.6] 2.4: +20%, but resampling two values gives p50s from 1.2/3
    # to 3.6/1: the interval spans zero
    comparison = compare(stored({"ttft": [1.0, 3.0]}), stored({"ttft": [1.2, 3.6]}), {"ttft.p50": 0.05})
    (row,) = comparison.rows
    assert row.change == approx(0.2)
    assert row.low < 0 < row.high
    assert row.verdict == "noise"
    assert comparison.regressions == []


def test_a_change_within_tolerance_is_ok():
    # +1% on 500 samples with 5% allowed
    (row,) = compare(stored({"ttft": lognormal()}), stored({"ttft": lognormal() * 1.01}), {"ttft.p50": 0.05}).rows
    assert row.change == approx(0.01)
    assert row.verdict == "ok"


def test_a_significant_change_within_a_wide_tolerance_is_ok():
    # +20% is clear, but 30% is allowed
    (row,) = compare(stored({"ttft": lognormal()}), stored({"ttft": lognormal() * 1.2}), {"ttft.p50": 0.3}).rows
    assert row.low > 0
    assert row.verdict == "ok"


def test_rows_without_enough_samples_are_skipped():
    base = stored({"ttft": [0.1, 0.2, 0.3], "tpot": [0.01], "latency": [0.0, 0.0, 0.0]})
    cur = stored({"ttft": [0.1, 0.2, 0.3], "tpot": [0.01, 0.02], "latency": [1.0, 2.0]})
    found = rows(compare(base, cur, {"ttft.p50": 0.05, "tpot.p50": 0.05, "ttfat.p50": 0.05, "latency.p50": 0.05}))
    assert found["ttft.p50"].verdict == "ok"
    assert (found["tpot.p50"].verdict, found["tpot.p50"].note) == ("skipped", "too few samples")
    assert (found["ttfat.p50"].verdict, found["ttfat.p50"].note) == ("skipped", "not measured")
    assert found["ttfat.p50"].baseline is None and found["ttfat.p50"].current is None
    assert (found["latency.p50"].verdict, found["latency.p50"].note) == ("skipped", "baseline is 0")
    assert found["tpot.p50"].change is None


def test_a_figure_the_baseline_measured_and_this_run_did_not_is_a_regression():
    """Every request of the current run failed (or its server stopped reporting what the figure
    needs): its gated figures have no samples, and a gate that skipped them passed the run."""
    base = stored({"ttft": [0.1, 0.2, 0.3], "tpot": [0.01, 0.02]})
    found = rows(compare(base, stored({"tpot": [0.01, 0.02]}), {"ttft.p50": 0.05, "tpot.p50": 0.05}))
    assert (found["ttft.p50"].verdict, found["ttft.p50"].note) == (
        "regression",
        "not measured in this run (no request of this run measured it); the baseline's was",
    )
    assert found["tpot.p50"].verdict == "ok"
    table = comparison_table(compare(base, stored({"tpot": [0.01, 0.02]}), {"ttft.p50": 0.05}))
    assert "REGRESSION (not measured in this run (no request of this run measured it); the baseline's was)" in table


def test_a_figure_this_run_measured_once_where_the_baseline_measured_many_is_a_regression():
    """A new user's trial: a server that failed all but one request of the workload. Its TTFAT
    and cache hit rate had one session each, 'too few samples', and were skipped, so that
    one surviving request passed what no surviving request failed (a regression)."""
    base = stored({"ttfat": [2.1, 2.4, 2.2, 2.6], "ttft": [0.1, 0.2, 0.3]})
    found = rows(
        compare(base, stored({"ttfat": [0.02], "ttft": [0.1, 0.2, 0.3]}), {"ttfat.p50": 0.05, "ttft.p50": 0.05})
    )
    assert (found["ttfat.p50"].verdict, found["ttfat.p50"].note) == (
        "regression",
        "measured on 1 sample in this run, too few to compare; the baseline's on 4",
    )
    assert found["ttft.p50"].verdict == "ok"


def test_a_figure_the_baseline_measured_once_and_this_run_never_is_a_regression():
    """A regression rule on a figure the baseline has (one session's TTFAT) and this run lacks
    altogether was skipped as 'too few samples': a pass of what the run never measured."""
    base = stored({"ttfat": [2.1], "ttft": [0.1, 0.2, 0.3]})
    (row,) = compare(base, stored({"ttft": [0.1, 0.2, 0.3]}), {"ttfat.p50": 0.05}).rows
    assert (row.verdict, row.note) == (
        "regression",
        "not measured in this run (no request of this run measured it); the baseline's was",
    )
    (both_once,) = compare(base, stored({"ttfat": [2.0]}), {"ttfat.p50": 0.05}).rows
    assert (both_once.verdict, both_once.note) == ("skipped", "too few samples")  # measured on both sides


def test_same_inputs_same_intervals():
    base, cur = stored(full_samples()), stored(full_samples(ttft_scale=1.1))
    first, second = compare(base, cur), compare(base, cur)
    assert first.rows == second.rows
    other_seed = compare(base, cur, seed=1)
    assert [r.change for r in other_seed.rows] == [r.change for r in first.rows]  # the point does not depend on it
    assert [(r.low, r.high) for r in other_seed.rows] != [(r.low, r.high) for r in first.rows]


@pytest.mark.parametrize(
    ("part", "changed", "field", "words"),
    [
        ("fingerprint", {"kind": "offline", "model": "other", "version": "1"}, "model", "endpoint fingerprint differs"),
        ("fingerprint", {"kind": "offline", "model": "m", "version": "2"}, "version", "endpoint fingerprint differs"),
        ("workload", {"path": "w.jsonl", "digest": "def"}, "digest", "workload differs"),
        ("settings", {"concurrency": 16}, "concurrency", "replay settings"),
        ("settings", {"concurrency": 8, "seed": 3}, "seed", "replay settings"),
    ],
)
def test_a_mismatch_is_not_compared(part, changed, field, words):
    base = stored(full_samples())
    cur = {**stored(full_samples(ttft_scale=2.0)), part: changed}
    comparison = compare(base, cur)
    assert comparison.rows == []
    assert comparison.regressions == []
    assert comparison.mismatch.startswith("not compared: ")
    assert words in comparison.mismatch
    assert field in comparison.mismatch
    assert comparison_table(comparison).endswith(comparison.mismatch)


def test_the_offline_simulators_keyed_prompts_against_a_servers_text_name_the_option():
    """Offline and online runs of the same simulator were never comparable with the defaults, and
    nothing said why (issue 31 B8)."""
    base = {**stored(full_samples()), "settings": {"concurrency": 8, "prompt_format": "keyed"}}
    cur = {**stored(full_samples()), "settings": {"concurrency": 8, "prompt_format": "text"}}
    found = compare(base, cur).mismatch
    assert found == f"not compared: replay settings differ (prompt_format: 'keyed' vs 'text'); {baseline.KEYED_HINT}"
    assert "--prompt-format text" in found
    ids = {**cur, "settings": {"concurrency": 8, "prompt_format": "ids"}}
    assert (
        compare(cur, ids).mismatch == "not compared: replay settings differ (prompt_format: 'text' vs 'ids')"
    )  # no simulator's keyed: no hint


def test_across_endpoints_compares_different_fingerprints_and_says_so():
    base = stored(full_samples(), fingerprint={"kind": "vllm", "model": "m"})
    cur = stored(full_samples(ttft_scale=1.2), fingerprint={"kind": "sglang", "model": "m"})
    assert compare(base, cur).mismatch is not None  # the gate does not
    comparison = compare(base, cur, across_endpoints=True)
    assert comparison.mismatch is None
    assert comparison.header.startswith("different endpoints")
    assert "kind" in comparison.header and "'vllm'" in comparison.header and "'sglang'" in comparison.header
    assert rows(comparison)["ttft.p50"].verdict == "regression"
    assert comparison.header in comparison_table(comparison)


def test_across_endpoints_still_refuses_another_workload():
    base = stored(full_samples(), fingerprint={"kind": "vllm"})
    cur = stored(full_samples(), fingerprint={"kind": "sglang"}, workload={"path": "w.jsonl", "digest": "zzz"})
    comparison = compare(base, cur, across_endpoints=True)
    assert comparison.rows == []
    assert "workload differs" in comparison.mismatch and "digest" in comparison.mismatch
    same_endpoint = compare(
        stored(full_samples()), stored(full_samples(), settings={"concurrency": 1}), across_endpoints=True
    )
    assert same_endpoint.rows == [] and "settings" in same_endpoint.mismatch


def test_comparison_table_text():
    base = stored({**full_samples(), "ttfat": [1.0, 3.0]})
    cur = stored(
        {
            **full_samples(ttft_scale=1.2, cache_scale=1.2),
            "ttfat": [1.2, 3.6],
            "latency": lognormal(median=2.0, seed=4) * 1.01,
        }
    )
    comparison = compare(base, cur, label="main (abc123)")
    found = rows(comparison)
    assert [found[k].verdict for k in ("ttft.p50", "cache_hit_rate.mean", "ttfat.p50", "latency.p50")] == [
        "regression",
        "improved",
        "noise",
        "ok",
    ]
    text = comparison_table(comparison)
    title, header, _, *body = text.splitlines()
    assert title == "Compared with main (abc123): 2 regressions"
    assert header.split()[:3] == ["metric", "baseline", "current"]
    assert len(body) == len(baseline.DEFAULT_TOLERANCES)
    for key in baseline.DEFAULT_TOLERANCES:
        assert key in text
    for word in ("REGRESSION", "improved", "noise", "ok"):
        assert word in text
    ttft = next(line for line in body if line.startswith("ttft.p50"))
    assert "+20.0% [+" in ttft and "5%" in ttft and ttft.rstrip().endswith("REGRESSION")


def test_comparison_table_singular_and_skipped_notes():
    comparison = compare(
        stored({"ttft": lognormal()}), stored({"ttft": lognormal() * 1.2}), {"ttft.p50": 0.05, "tpot.p50": 0.1}
    )
    text = comparison_table(comparison)
    assert text.splitlines()[0] == "Compared with baseline: 1 regression"
    assert "skipped (not measured)" in text
    assert "10%" in text


def test_the_same_requests_in_both_runs_are_compared_in_pairs():
    # requests differ widely (TTFT 0.1 s to 3 s), and each one is 3% slower in the second run:
    # resampled in pairs the spread between requests cancels and the +3% is significant; without
    # keys each side is resampled on its own and the spread hides it
    rng = np.random.default_rng(4)
    before = rng.lognormal(np.log(0.5), 0.8, 300)
    after = before * 1.03
    keys = {"ttft": list(range(300))}

    def stored(values, **more):
        return record(samples={"ttft": values.tolist()}, summary={"ttft": {"p50": float(np.median(values))}}, **more)

    tolerance = {"ttft.p50": 0.01}
    paired = compare(stored(before, sample_keys=keys), stored(after, sample_keys=keys), tolerance).rows[0]
    assert paired.paired and paired.verdict == "regression"
    assert paired.change == pytest.approx(0.03, abs=1e-4) and 0.02 < paired.low <= paired.high < 0.04
    unpaired = compare(stored(before), stored(after), tolerance).rows[0]
    assert not unpaired.paired and unpaired.verdict == "noise" and unpaired.low < 0 < unpaired.high
    other = compare(
        stored(before, sample_keys=keys), stored(after, sample_keys={"ttft": list(range(1, 301))}), tolerance
    ).rows[0]
    assert not other.paired  # different requests (a failed one left out): not paired


def test_sample_keys_name_each_value_in_workload_order():
    result = small_run()
    values, keys = baseline.samples(result), baseline.sample_keys(result)
    assert set(values) == set(keys) and all(len(values[name]) == len(keys[name]) for name in values)
    expected = sorted(
        r.session_index * baseline.KEY_TURNS + r.turn_index for r in result.ok if r.first_token_s is not None
    )
    assert keys["ttft"] == expected
    assert keys["output_throughput"] == list(range(len(values["output_throughput"])))


def with_capacity(low, high, at_least=False, ceiling=False):
    """A stored capacity-search result: capacity ``low`` in the bracket [low, high] (``high`` =
    ``low`` as the search stores it when no load failed, with ``at_least`` set; ``ceiling``: the
    rate carried, the workload too short)."""
    record_ = stored({"ttft": lognormal()})
    record_["summary"]["capacity"] = {"rate": low, "low": low, "high": high, "runs": 8.0}
    record_["capacity"] = {"at_least": at_least, "ceiling": ceiling}
    return record_


def test_a_ceilings_noise_says_why_the_comparison_cannot_tell():
    """Two ceilings, 14.1 in [14.1, 24.5] and 11.3 in [11.3, 18.4] (a new user's trial: a true
    -23%): the brackets overlap, noise, and the test passed with nothing said of why."""
    allowed = {"capacity.rate": 0.05}
    (row,) = compare(with_capacity(14.1, 24.5, ceiling=True), with_capacity(11.3, 18.4, ceiling=True), allowed).rows
    assert row.verdict == "noise" and row.note == baseline.CEILING_NOTE
    assert "a longer workload (more requests)" in comparison_cells(row)[-1]
    (plain,) = compare(with_capacity(14.1, 24.5), with_capacity(11.3, 18.4), allowed).rows
    assert plain.verdict == "noise" and not plain.note


def test_two_ceilings_where_no_load_failed_reach_the_loads_they_did_not_carry():
    """Both searches passed every load and carried less than offered (a workload too short): the
    stored bracket is the rate carried repeated, and two such ceilings 15.04 and 13.88 were
    compared as exact numbers, a regression (17% of unchanged pairs at 4% noise in the rate
    carried: a statistics review). Each reaches the load its point was offered, 16."""

    def ceiling(carried):
        record_ = with_capacity(carried, carried, ceiling=True)
        record_["capacity"].update(upper_bound_found=False, offered={"low": 16.0, "high": None})
        return record_

    (row,) = compare(ceiling(15.04), ceiling(13.88), {"capacity.rate": 0.05}).rows
    assert row.verdict == "noise" and row.note == baseline.CEILING_NOTE
    assert row.high == pytest.approx(16 / 15.04 - 1) and row.low == pytest.approx(13.88 / 16 - 1)
    unknown = with_capacity(15.04, 15.04, ceiling=True)  # a ceiling stored without the loads offered: as stored
    unknown["capacity"]["upper_bound_found"] = False
    (as_stored,) = compare(ceiling(13.88), unknown, {"capacity.rate": 0.05}).rows
    assert as_stored.verdict == "noise" and as_stored.high == pytest.approx(15.04 / 13.88 - 1)
    both = compare(unknown, unknown, {"capacity.rate": 0.05}).rows[0]
    assert both.verdict == "ok" and both.note != baseline.BOTH_LOWER_BOUNDS  # not two lower bounds


def test_a_capacity_with_no_failing_load_is_never_a_proven_regression():
    """10 req/s found as 'at least 10' (the budget ran out while growing) against a baseline of
    16 in [16, 17]: the true capacity may be anywhere above 10, so the change is noise, and the
    interval is open above."""
    (row,) = compare(with_capacity(16, 17), with_capacity(10, 10, at_least=True), {"capacity.rate": 0.05}).rows
    assert row.verdict == "noise" and row.change == pytest.approx(10 / 16 - 1)
    assert row.low == pytest.approx(10 / 17 - 1) and row.high is None
    assert change_cell(row.change, row.low, row.high) == "-37.5% [-41.2%, open]"
    (closed,) = compare(with_capacity(16, 17), with_capacity(10, 11), {"capacity.rate": 0.05}).rows
    assert closed.verdict == "regression" and closed.high == pytest.approx(11 / 16 - 1)


def test_a_baseline_capacity_with_no_failing_load_still_proves_a_drop_below_it():
    """Baseline 'at least 16': a current 10 in [10, 11] lies wholly below 16."""
    (row,) = compare(with_capacity(16, 16, at_least=True), with_capacity(10, 11), {"capacity.rate": 0.05}).rows
    assert row.verdict == "regression" and row.low == pytest.approx(-1.0) and row.high == pytest.approx(11 / 16 - 1)


@pytest.mark.parametrize("current", [10, 16, 30])
def test_two_capacities_with_no_failing_load_are_not_compared(current):
    """'at least 16' against 'at least 10', 16 or 30: each search stopped before any load failed,
    so neither says where its capacity is; no verdict (not 'ok', not a regression), the reason
    and what to raise in its note, both figures shown."""
    comparison = compare(
        with_capacity(16, 16, at_least=True), with_capacity(current, current, at_least=True), {"capacity.rate": 0.05}
    )
    (row,) = comparison.rows
    assert (row.verdict, row.change) == ("skipped", None) and not comparison.regressions
    assert (row.baseline, row.current) == (16, current)
    assert comparison_cells(row)[-1] == f"skipped ({baseline.BOTH_LOWER_BOUNDS})"
    assert "raise capacity.max" in row.note


def test_a_capacity_the_baseline_found_and_this_run_did_not_is_a_regression():
    """``regression: {capacity.rate: 5%}`` against a run whose summary has no capacity was a
    skipped row ('not measured'), which passed the gate."""
    comparison = compare(with_capacity(16, 17), stored({"ttft": lognormal()}), {"capacity.rate": 0.05})
    (row,) = comparison.rows
    assert (row.verdict, row.note) == (
        "regression",
        "not measured in this run (this run's search found none); the baseline's was",
    )
    assert comparison.regressions == [row]


def test_a_multi_turn_capacity_is_compared_with_one_stored_under_its_old_name():
    """A multi-turn search stored its sessions/s as ``capacity.rate`` before it had its own key:
    such a baseline still gates a new ``capacity.session_rate``, read from its bracket."""
    current = with_capacity(10, 11)
    current["summary"]["capacity"] = {"session_rate": 10, "low": 10, "high": 11, "runs": 8.0}
    current["capacity"]["rate_unit"] = "sessions/s"
    current["capacity"]["plan"] = {"by": "rate"}
    (row,) = compare(with_capacity(16, 17), current, baseline.gated_tolerances(current)).rows
    assert row.key == "capacity.session_rate" and (row.baseline, row.current) == (16, 10)
    assert row.verdict == "regression" and comparison_cells(row)[1:3] == ["16 sessions/s", "10 sessions/s"]


def test_auto_reference_falls_back_to_the_remote_tracking_default_branch(git_env):
    # a clone that knows only refs/remotes/origin/master (no local main/master, no origin/HEAD)
    forge = git_env / "forge.git"
    origin = git_env / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "master")
    c1 = commit(origin, "c1")
    git(git_env, "clone", "-q", "--bare", str(origin), str(forge))
    path = git_env / "ci"
    path.mkdir()
    git(path, "init", "-q", "-b", "scratch")
    git(path, "remote", "add", "origin", str(forge))
    git(path, "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*")
    git(path, "checkout", "-q", "-B", "topic", "refs/remotes/origin/master")
    commit(path, "t1")
    label, history = reference_history(path, None)
    assert label == f"merge-base with origin/master ({c1[:12]})"
    assert history == [c1]


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("paired", [True, False])
def test_bootstrap_of_mostly_empty_windows_has_an_unbounded_top_and_no_nan(paired):
    # a short run's throughput windows: 7 of the baseline's 10 are empty, so some resamples draw
    # only empty windows (statistic 0): their change is +inf, which numpy's interpolation turned
    # into inf - inf = NaN with a RuntimeWarning, and the interval's top into NaN
    base = np.array([0, 0, 0, 0, 0, 0, 0, 3339.6, 667.9, 667.9])
    cur = np.array([0, 667.9, 667.9, 667.9, 3339.6, 667.9, 0, 667.9, 3339.6, 667.9])
    change, low, high = at95(bootstrap.bootstrap_change(base, cur, "steady_state", seed=0, paired=paired))
    assert change == pytest.approx(cur.mean() / base.mean() - 1)
    assert np.isfinite(low) and low < change and high == np.inf


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_bootstrap_where_every_resample_is_empty_on_both_sides_is_nan_without_a_warning():
    undefined = np.full(1000, np.nan)  # every resample 0 / 0: no change to measure
    assert all(np.isnan(end) for end in bootstrap.Draws(np.nan, undefined).interval(0.95))
    assert bootstrap.Draws(np.nan, undefined).p_value() == 1.0


@pytest.mark.parametrize("length", [2, 32, 96, bootstrap.SORTED_UP_TO, bootstrap.SORTED_UP_TO + 1, 900])
@pytest.mark.parametrize("stat", ["p50", "p90", "p99", "p99.9", "mean"])
def test_a_statistic_of_resamples_is_numpys_along_each_row(length, stat):
    rng = np.random.default_rng(length)
    samples = np.round(rng.lognormal(0, 1, length), 3)  # ties among the values, as stored figures have
    draws = samples[rng.integers(0, length, (400, length))]
    expected = bootstrap.statistic(stat, draws.copy())
    assert np.array_equal(bootstrap.resampled(stat, draws), expected)  # to the last bit


def sampled_record(samples: dict[str, np.ndarray]) -> dict:
    """A stored result of one run holding ``samples`` (metric -> per-request values, request i
    the same request on every side)."""
    return {
        "fingerprint": {"kind": "http"},
        "workload": {"digest": "w"},
        "settings": {"mode": "concurrency"},
        "samples": {metric: [float(v) for v in values] for metric, values in samples.items()},
        "sample_keys": {metric: list(range(len(values))) for metric, values in samples.items()},
        "summary": {
            **{metric: {"p50": float(np.percentile(values, 50))} for metric, values in samples.items()},
            "requests": {"ok": len(next(iter(samples.values()))), "failed": 0, "cancelled": 0},
        },
    }


@pytest.mark.parametrize(
    ("pairs", "paired", "floor"),
    [(2, True, 0.5), (3, True, 0.25), (7, True, 2**-6), (41, True, 0.0), (3, False, 0.1), (30, False, 0.0)],
)
def test_the_floor_is_the_exact_randomization_tests_smallest_p(pairs, paired, floor):
    assert bootstrap.p_floor(pairs, pairs, paired) == pytest.approx(floor)


def test_a_few_requests_cannot_be_significant_however_the_resamples_agree():
    """Two paired requests, both slower: every resample above 0 and p = 2/2001, so the gate
    called a REGRESSION in 57% of unchanged two-request comparisons (a statistics review,
    400 trials); the exact sign-flip test of two pairs cannot go below p = 0.5."""
    rng = np.random.default_rng(2)
    tolerance = {"ttft.p50": 0.05, "tpot.p50": 0.05, "latency.p50": 0.05}
    false_alarms = {2: 0, 3: 0, 12: 0}
    trials = 200
    for size in false_alarms:
        for trial in range(trials):
            base = {metric: rng.lognormal(0, 0.5, size) for metric in ("ttft", "tpot", "latency")}

            a, b = (
                sampled_record({metric: values * rng.lognormal(0, 0.1, size) for metric, values in base.items()})
                for _ in range(2)
            )
            false_alarms[size] += bool(compare(a, b, tolerance, seed=trial).regressions)
    assert false_alarms[2] == false_alarms[3] == 0  # was 57% and 27%
    assert false_alarms[12] / trials <= 0.05
    doubled = compare(
        sampled_record({"ttft": np.ones(3)}), sampled_record({"ttft": 2 * np.ones(3)}), {"ttft.p50": 0.05}
    ).rows[0]
    assert (doubled.change, doubled.verdict, doubled.p_value) == (pytest.approx(1.0), "noise", 0.25)


def test_samples_that_are_not_finite_are_refused_naming_the_figure_not_judged_ok():
    """A NaN change fails every comparison, so a 2x slower run with infinite latencies read "ok"
    (records built in memory: stored ones are checked as they are read)."""
    values = np.random.default_rng(0).lognormal(0, 0.2, 50)
    slower = sampled_record({"latency": 2 * values})
    slower["samples"]["latency"][:30] = [np.inf] * 30
    with pytest.raises(LLMReplayError, match=r"^latency.p50: the current's latency samples hold NaN or infinity"):
        compare(sampled_record({"latency": values}), slower, {"latency.p50": 0.05})


def test_a_tail_percentile_of_too_few_samples_is_not_compared():
    """The bootstrap of a p99 of 20 requests never reaches past the largest: a heavy-tailed
    unchanged server read REGRESSION in 9.5% of comparisons (a statistics review). A p99 needs
    200 samples a side, a p90 20."""
    rng = np.random.default_rng(20)

    def side(size):
        values = rng.lognormal(0, 0.3, size) * (1 + 0.3 * rng.pareto(2.0, size))
        record = sampled_record({"ttft": values})
        record["summary"]["ttft"].update(
            {stat: float(np.percentile(values, float(stat[1:]))) for stat in ("p90", "p99")}
        )
        return record

    rows = compare(side(100), side(100), {"ttft.p99": 0.1, "ttft.p90": 0.1, "ttft.p50": 0.1}).rows
    assert [(row.key, row.note, row.verdict) for row in rows[:1]] == [
        ("ttft.p99", "too few samples for a p99: 100 of the 200 it needs", "skipped")
    ]
    assert rows[0].baseline is not None and rows[0].current is not None  # the figures still shown
    assert rows[1].note == rows[2].note == "" and rows[1].verdict != "skipped" != rows[2].verdict
    assert (
        compare(side(19), side(40), {"ttft.p90": 0.1}).rows[0].note
        == "too few samples for a p90: 19 of the 20 it needs"
    )
