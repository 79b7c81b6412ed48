"""``llmreplay run --save-to STORE`` and ``llmreplay compare --store STORE --test TEST A B``:
runs stored per commit in any store, compared by commit; a bad store is one line before the run."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest
from mockserver import MockConfig, MockServer, ServerThread
from test_store import git

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.cli.run import RUN_STATUS
from pytest_llmreplay.gate.store_url import open_store

TEST = "llmreplay run w.jsonl"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository (the cwd) holding a small workload, on its first commit."""
    monkeypatch.chdir(tmp_path)
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "w.jsonl").write_text(
        "".join(
            json.dumps({"input_length": 40, "output_length": 6, "hash_ids": [i], "timestamp": i}) + "\n"
            for i in range(6)
        )
    )
    git(tmp_path, "add", "w.jsonl")
    git(tmp_path, "commit", "-q", "-m", "workload")
    return tmp_path


def run(url: str, *more: str) -> int:
    return main(
        ["run", "w.jsonl", "--endpoint", url, "--block-size", "64", "--api", "completions", "--speedup", "100", *more]
    )


def test_a_run_with_another_extra_body_is_another_endpoint(repo, tmp_path, capsys):
    # the plugin's live fingerprint holds --llm-extra-body; run's held nothing of --extra-body or
    # --ignore-eos, so outputs cut at their planned lengths were gated against outputs that ended
    # where the model stopped (compare says the endpoints differ, as for vLLM against SGLang)
    store = f"file://{tmp_path}/results"
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        assert run(server.url, "--save-to", store) == 0
        git(repo, "commit", "-q", "--allow-empty", "-m", "next")
        assert run(server.url, "--save-to", store, "--ignore-eos") == 0
    (key,) = open_store(store, repo).stored(TEST, git(repo, "rev-parse", "HEAD"))
    assert open_store(store, repo).read(key)["fingerprint"]["extra_body"] == {"ignore_eos": True}
    capsys.readouterr()
    main(["compare", "--store", store, "--test", TEST, "main~1", "main"])
    printed = capsys.readouterr().out
    assert "different endpoints: (extra_body: None vs {'ignore_eos': True})" in printed, printed


def test_run_repeat_keeps_its_runs_as_one_result_that_compare_resamples_run_by_run(repo, tmp_path, capsys):
    # the plugin repeats a test (--llm-repeat) so that a whole run's shift is inside the
    # comparison's interval; run had no way to: one run a side, and a busy host's slow run read
    # as a regression
    store = f"file://{tmp_path}/results"
    mock = MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))
    with ServerThread(mock) as server:
        assert run(server.url, "--repeat", "3", "--save-to", store, "--out", str(tmp_path / "out")) == 0
        printed = capsys.readouterr()
        assert mock.completions_count == 3 * 6  # the workload's six requests, three times
        git(repo, "commit", "-q", "--allow-empty", "-m", "next")
        assert run(server.url, "--repeat", "2", "--no-cache-reset", "--save-to", store) == 0
    assert (
        "note: " in printed.err and "answers neither POST /reset_prefix_cache" in printed.err
    )  # the mock has no reset
    assert "3 runs (live server): ttft.p50 " in printed.out
    (key,) = open_store(store, repo).stored(TEST, git(repo, "rev-parse", "HEAD~1"))
    record = open_store(store, repo).read(key)
    assert [r["summary"]["requests"]["ok"] for r in record["runs"]] == [6, 6, 6]
    assert len(record["samples"]["ttft"]) == 18 and "cache_reset" not in record["fingerprint"]
    lines = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    assert (
        lines[0].startswith("run,") and [line.split(",")[0] for line in lines[1:]] == ["1"] * 6 + ["2"] * 6 + ["3"] * 6
    )
    (key,) = open_store(store, repo).stored(TEST, git(repo, "rev-parse", "HEAD"))
    assert (
        open_store(store, repo).read(key)["fingerprint"]["cache_reset"] == "off"
    )  # runs on a warm cache: another endpoint
    capsys.readouterr()


def test_run_repeat_on_the_simulator_without_jitter_runs_once_and_says_why(repo, capsys):
    assert main(["run", "w.jsonl", "--sim", "llama-3.1-8b-h100", "--block-size", "64", "--repeat", "3"]) == 0
    assert (
        "ran once, not 3 times: sim:llama-3.1-8b-h100 (offline, virtual time) without timing jitter gives the same figures on every run"
        in capsys.readouterr().out
    )


@pytest.mark.filterwarnings("error::RuntimeWarning")  # its throughput windows are mostly empty (6 requests)
def test_runs_saved_to_a_store_compare_by_commit(repo, tmp_path, capsys):
    store = f"file://{tmp_path}/results"
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        assert run(server.url, "--save-to", store) == 0
        first = git(repo, "rev-parse", "HEAD")
        git(repo, "commit", "-q", "--allow-empty", "-m", "next")
        assert run(server.url, "--save-to", store) == 0
    printed = capsys.readouterr().out
    assert printed.count(f"saved {tmp_path}/results/llmreplay_run_w.jsonl-") == 2
    (key,) = open_store(store, repo).stored(TEST, first)
    workload = open_store(store, repo).read(key)["workload"]  # the loader's --block-size is the workload's
    assert workload["format_options"] == {"block_size": 64} and workload["path"] == "w.jsonl"

    status = main(["compare", "--store", store, "--test", TEST, "main~1", "main"])
    printed = capsys.readouterr().out
    assert status in (0, 1)  # the verdict is the gate's; what matters here is that both were found
    assert f"A: {TEST}, commit {first[:12]}" in printed
    assert f"B: {TEST}, commit {git(repo, 'rev-parse', 'HEAD')[:12]}" in printed
    assert f"Compared with A ({tmp_path}/results/llmreplay_run_w.jsonl-" in printed


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_compare_store_gates_on_the_history_of_a(repo, tmp_path, capsys):
    """Six commits with a stored result each: comparing main~1 with main, the five results on
    main~1's first-parent history (its own included, main's left out) gate the verdicts, as the
    plugin's gate does; with fewer, the bootstrap alone decides and the header says nothing."""
    store = str(tmp_path / "results")
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        for i in range(6):
            if i:
                git(repo, "commit", "-q", "--allow-empty", "-m", f"change {i}")
            assert run(server.url, "--save-to", store) == 0
    capsys.readouterr()
    assert main(["compare", "--store", store, "--test", TEST, "main~1", "main"]) in (0, 1)
    printed = capsys.readouterr().out
    # the figures judged (those the wall-clock runs measured enough of), each at 97.5% / their count
    assert re.search(
        r"history: 5 earlier results gate the verdicts \(Student's t prediction over them, one-sided 99\.\d\d% each, "
        r"97\.5% over the \d figures: t > \d\.\d\d\)",
        printed,
    )
    assert "history t " in printed  # each judged row says its statistic
    main(["compare", "--store", store, "--test", TEST, "main~2", "main"])
    assert "history:" not in capsys.readouterr().out  # 4 results on main~2's history


def test_compare_store_takes_as_a_the_newest_result_like_b(repo, tmp_path, capsys):
    """Two runners saved at A, the other endpoint's last (an H200 job beside an H100 one): A is
    the newest result measured as B was, as the plugin's gate takes its baseline, not whichever
    runner saved last; with none alike, the newest, and the header says the endpoints differ."""
    store = tmp_path / "results"
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        assert run(server.url, "--save-to", str(store)) == 0
        assert run(server.url, "--save-to", str(store)) == 0
        alike, other = sorted(store.glob("*/*.json"), key=lambda p: p.name.split("-", 1)[1])
        record = json.loads(other.read_text())
        other.write_text(json.dumps({**record, "fingerprint": {**record["fingerprint"], "model": "other-gpu-model"}}))
        git(repo, "commit", "-q", "--allow-empty", "-m", "next")
        assert run(server.url, "--save-to", str(store)) == 0
    capsys.readouterr()
    main(["compare", "--store", str(store), "--test", TEST, "main~1", "main"])
    printed = capsys.readouterr().out
    assert f"Compared with A ({store}/{alike.parent.name}/{alike.name}" in printed
    assert "different endpoints" not in printed
    alike.unlink()
    main(["compare", "--store", str(store), "--test", TEST, "main~1", "main"])
    printed = capsys.readouterr().out
    assert f"Compared with A ({store}/{other.parent.name}/{other.name}" in printed
    assert "different endpoints: (model: 'other-gpu-model' vs " in printed


def test_compare_store_never_takes_an_interrupted_result(repo, tmp_path, capsys):
    """The newest result at a commit was interrupted (marked as a signal marks it, see
    test_replay_http.py): compare --store takes the newest complete one, or says there is none."""
    store = tmp_path / "results"
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        assert run(server.url, "--save-to", str(store)) == 0
        assert run(server.url, "--save-to", str(store)) == 0
    complete, newest = sorted(store.glob("*/*.json"), key=lambda p: p.name.split("-", 1)[1])
    newest.write_text(json.dumps({**json.loads(newest.read_text()), "interrupted": "SIGINT"}))
    capsys.readouterr()
    main(["compare", "--store", str(store), "--test", TEST, "main", "main"])
    assert f"Compared with A ({store}/{complete.parent.name}/{complete.name}" in capsys.readouterr().out
    complete.write_text(json.dumps({**json.loads(complete.read_text()), "interrupted": "SIGTERM"}))
    assert main(["compare", "--store", str(store), "--test", TEST, "main", "main"]) == 3
    head = git(repo, "rev-parse", "HEAD")[:12]
    assert capsys.readouterr().err == (
        f"error: --store: no stored result of {TEST!r} at main ({head}) in {store}: "
        "only ones that measured part or none of their workload (interrupted, or no request succeeded), which are never compared\n"
    )


def test_compare_store_without_a_result_at_that_commit(repo, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    status = main(["compare", "--store", str(tmp_path / "empty"), "--test", TEST, "main", "main"])
    assert status == 3  # compare's status for bad input
    assert capsys.readouterr().err == (
        f"error: --store: {tmp_path}/empty: holds no stored result; expected where results were stored "
        "(--llm-save, run --save-to)\n"
    )


def test_compare_store_with_a_test_it_does_not_hold_lists_those_it_does(repo, tmp_path, capsys):
    store = tmp_path / "results"
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        assert run(server.url, "--save-to", str(store)) == 0
    assert f"as test {TEST!r} (compare --store's --test)" in capsys.readouterr().out  # the name it is stored under
    assert main(["compare", "--store", str(store), "--test", "llmreplay run W.jsonl", "main", "main"]) == 3
    assert capsys.readouterr().err.endswith(f"; it holds no result of that test, only of {TEST!r}\n")


def test_compare_store_skips_an_unreadable_newest_result(repo, tmp_path, capsys):
    store = tmp_path / "results"
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        assert run(server.url, "--save-to", str(store)) == 0
    [complete] = store.glob("*/*.json")
    corrupt = complete.with_name(complete.name[:13] + "29990101T000000000000Z-1-000000.json")
    corrupt.write_text(json.dumps({**json.loads(complete.read_text()), "summary": "x"}))
    capsys.readouterr()
    assert main(["compare", "--store", str(store), "--test", TEST, "main", "main"]) == 0
    printed = capsys.readouterr().out
    assert (
        f"A: skipped 1 unreadable stored result: {corrupt}: not a stored llmreplay result (summary: expected an object of metrics, got a string ('x'))"
        in printed
    )
    assert f"Compared with A ({store}/{complete.parent.name}/{complete.name}" in printed


def test_compare_store_that_does_not_exist_says_so(repo, tmp_path, capsys):
    # not "no stored result": a mistyped folder is told apart from a test never stored
    assert main(["compare", "--store", str(tmp_path / "typo"), "--test", TEST, "main", "main"]) == 3
    assert capsys.readouterr().err.startswith(
        f"error: --store: {tmp_path}/typo: no such folder; expected where results were stored (--llm-save, run --save-to)"
    )


@pytest.mark.parametrize(
    ("refs", "message"),
    [
        (
            ("nonexistent-ref", "main"),
            "error: A: git cannot resolve 'nonexistent-ref' to a commit here; expected a branch, tag or commit of this repository, "
            "or a commit id of 12 hex digits or more\n",
        ),
        (
            ("main", "main~5"),
            "error: B: git cannot resolve 'main~5' to a commit here; expected a branch, tag or commit of this repository, "
            "or a commit id of 12 hex digits or more\n",
        ),
        (
            ("main", "0123456789abcdef"),
            f"error: --store: no stored result of {TEST!r} at 0123456789abcdef (0123456789ab) in *\n",
        ),  # an id from another clone is looked up
    ],
)
def test_compare_store_names_a_ref_git_cannot_resolve(repo, tmp_path, capsys, refs, message):
    store = f"file://{tmp_path}/results"
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        assert run(server.url, "--save-to", store) == 0
    capsys.readouterr()
    assert main(["compare", "--store", store, "--test", TEST, *refs]) == 3
    out, err = capsys.readouterr()
    assert out == "" and fnmatch.fnmatchcase(err, message), err


def test_compare_store_needs_a_test(repo, capsys):
    assert main(["compare", "--store", "x", "a", "b"]) == 3
    assert capsys.readouterr().err == "error: --store needs --test: the stored test whose results to compare\n"
    assert main(["compare", "--store", "", "--test", TEST, "a", "b"]) == 3  # once: "--test is read with --store only"
    assert (
        capsys.readouterr().err
        == "error: --store: empty; expected a folder, git:REMOTE#REF, or a URL such as s3://BUCKET/PREFIX\n"
    )


def test_a_bad_save_to_store_fails_before_the_run(repo, capsys, refused_url):
    with ServerThread(MockServer(MockConfig(ttft_s=0.005, itl_s=0.001))) as server:
        status = run(server.url, "--save-to", f"git:{refused_url}/r.git#refs/results")
    captured = capsys.readouterr()
    assert status == RUN_STATUS["bad_input"]
    assert captured.err.startswith(
        f"error: --save-to: git:{refused_url}/r.git#refs/results: cannot fetch refs/results ("
    )
    assert "Workload metrics" not in captured.out  # nothing was replayed


def test_save_to_in_a_repository_git_cannot_read_is_one_error_before_the_run(repo, tmp_path, capsys, monkeypatch):
    """git missing in a checkout: the run's result went under 'nogit', where no compare finds it."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert run("http://127.0.0.1:9", "--save-to", str(tmp_path / "results")) == 3
    assert (
        capsys.readouterr().err == f"error: --save-to: git cannot read the repository at {repo}: git is not installed\n"
    )
    assert not (tmp_path / "results").exists()
