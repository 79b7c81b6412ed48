"""Where results live (pytest_llmreplay.gate.store): the folder store's never-overwriting writes
(threads and processes at once) and lookups; fsspec URLs (memory://, and S3 against moto's
standalone server started on loopback); git refs shared by clones of one bare repository, eight
processes pushing at once; and the one-line errors for a bad store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.gate import baseline
from pytest_llmreplay.gate.git_store import GitStore
from pytest_llmreplay.gate.store import (
    STALE_TEMPORARY_S,
    UNSAVED,
    FolderStore,
    FsspecStore,
    redact,
    result_folder,
    write_new,
)
from pytest_llmreplay.gate.store_url import open_store
from pytest_llmreplay.gate.stored_record import read_record

ROOT = Path(__file__).resolve().parent.parent


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


def key(path: Path) -> str:
    """A folder store file's key: <test folder>/<name>."""
    return f"{path.parent.name}/{path.name}"


# ---------------------------------------------------------------- the folder store


def test_write_new_writes_json(tmp_path):
    path = write_new(tmp_path / "deep" / "er" / "r.json", record())
    assert path == tmp_path / "deep" / "er" / "r.json"
    assert json.loads(path.read_text()) == record()
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.json"]  # no temporary file left


def test_write_new_never_overwrites(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(FileExistsError):
        write_new(path, record())
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # the temporary file is gone too


def test_a_save_clears_temporary_files_a_killed_writer_left_and_no_live_ones(tmp_path):
    exited = int(
        subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
        ).stdout
    )
    folder = tmp_path / result_folder(record()["test"])
    folder.mkdir()
    names = {
        "stale": f".a.json.{exited}.0123abcd.tmp",  # old, and its process is gone: removed
        "recent": f".b.json.{exited}.89abcdef.tmp",  # its process is gone here, but it may be another machine's: kept
        "running": f".c.json.{os.getpid()}.00ff00ff.tmp",  # old, but its process runs (a stalled write): kept
        "not ours": ".notes.tmp",
    }
    old = time.time() - STALE_TEMPORARY_S - 60
    for key, name in names.items():
        (folder / name).write_text("half a result")
        if key != "recent":
            os.utime(folder / name, (old, old))
    saved = FolderStore(tmp_path).save(record())
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([Path(saved).name, names["recent"], names["running"], names["not ours"]])


def test_result_folder_is_safe_and_unique():
    a = result_folder("tests/test_x.py::test_chat[a/b]")
    b = result_folder("tests/test_x.py::test_chat[a b]")
    assert a.startswith("tests_test_x.py_test_chat_a_b-") and b.startswith("tests_test_x.py_test_chat_a_b-")
    assert a != b  # same readable part, different digests
    assert "/" not in a and " " not in b
    assert result_folder("///").startswith("test-")
    assert len(result_folder("x" * 500)) == 80 + 9


def test_save_puts_the_commit_in_the_name(tmp_path):
    store = FolderStore(tmp_path)
    path = Path(store.save(record(commit="0123456789abcdef" * 2)))
    assert path.parent == tmp_path / result_folder(record()["test"])
    assert path.name.startswith("0123456789ab-")
    assert path.name.endswith(".json")
    nogit = Path(store.save(record(commit=None)))
    assert nogit.name.startswith("nogit-")
    assert store.stored(record()["test"], "nogit") == [key(nogit)]


def assert_all_distinct_and_readable(paths, folder, count):
    assert len(paths) == count
    assert len(set(paths)) == count
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in paths)  # nothing else, no .tmp
    for path in paths:
        assert read_record(path)["test"] == record()["test"]


def test_save_from_many_threads_at_once(tmp_path):
    store = FolderStore(tmp_path)
    threads, per_thread = 16, 8
    start = threading.Barrier(threads)
    saved, errors = [], []

    def work():
        start.wait()
        try:
            for _ in range(per_thread):
                saved.append(Path(store.save(record())))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    folder = tmp_path / result_folder(record()["test"])
    assert_all_distinct_and_readable(saved, folder, threads * per_thread)


SAVE_SCRIPT = """
import json, sys, time
from pathlib import Path
from pytest_llmreplay.gate.store import FolderStore
root, go, rec = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
while not go.exists():
    time.sleep(0.001)
store = FolderStore(root)
for _ in range(10):
    print(store.save(rec))
"""


def test_save_from_many_processes_at_once(tmp_path):
    go = tmp_path / "go"
    root = tmp_path / "store"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SAVE_SCRIPT, str(root), str(go), json.dumps(record())],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    go.touch()  # all start saving together
    saved = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        saved += [Path(line) for line in out.split()]
    assert_all_distinct_and_readable(saved, root / result_folder(record()["test"]), 80)


def put(store, test, commit, stamp, pid=1, token="aa", **more):
    """A stored file with a chosen time stamp in its name."""
    return write_new(
        store.root / result_folder(test) / f"{commit[:12]}-{stamp}-{pid}-{token}.json",
        record(test=test, commit=commit, **more),
    )


def test_stored_oldest_first_and_only_that_commit_and_test(tmp_path):
    store = FolderStore(tmp_path)
    c1, c2 = "1" * 40, "2" * 40
    middle = put(store, "t", c1, "20240102T000000000000Z", pid=9)
    newest = put(store, "t", c1, "20240103T000000000000Z", pid=1)
    oldest = put(store, "t", c1, "20231231T235959999999Z", pid=100)
    put(store, "t", c2, "20250101T000000000000Z")
    put(store, "other", c1, "20250101T000000000000Z")
    assert store.stored("t", c1) == [key(oldest), key(middle), key(newest)]
    assert store.stored("t", c1[:12]) == [key(oldest), key(middle), key(newest)]
    assert store.stored("t", "3" * 40) == []
    assert store.stored("never saved", c1) == []


def newest_key(store, test, commits):
    return store.newest_complete(test, commits).key


def test_newest_complete_is_the_newest_at_the_first_commit_that_has_one(tmp_path):
    store = FolderStore(tmp_path)
    c1, c2, c3 = "1" * 40, "2" * 40, "3" * 40
    put(store, "t", c2, "20240101T000000000000Z")
    newest_c2 = put(store, "t", c2, "20240105T000000000000Z")
    put(store, "t", c1, "20250101T000000000000Z")  # newer in time, but an older commit
    assert newest_key(store, "t", [c3, c2, c1]) == key(newest_c2)
    assert store.newest_complete("t", [c3, c2, c1]).record == record(test="t", commit=c2)
    assert newest_key(store, "t", [c3]) is None
    assert newest_key(store, "t", []) is None


def test_newest_complete_takes_the_newest_alike_so_another_runners_result_hides_no_baseline(tmp_path):
    """A new user's two runners, H100 and H200, save to one store at every commit: the newest
    result at the reference was the other runner's whichever saved last, and the comparison said
    'not compared: endpoint fingerprint differs' though its own runner's result was there."""
    store = FolderStore(tmp_path)
    c1, c2 = "1" * 40, "2" * 40
    h100 = {"kind": "sim", "model": "m", "hardware": "H100"}
    h200 = {"kind": "sim", "model": "m", "hardware": "H200"}
    older_h100 = put(store, "t", c1, "20240101T000000000000Z", fingerprint=h100)
    mine = put(store, "t", c2, "20240102T000000000000Z", fingerprint=h100)
    theirs = put(store, "t", c2, "20240103T000000000000Z", fingerprint=h200)
    assert newest_key(store, "t", [c2, c1]) == key(theirs)  # no preference: the newest
    alike = store.newest_complete("t", [c2, c1], lambda stored: stored["fingerprint"] == h100)
    assert alike.key == key(mine)
    store.root.joinpath(key(mine)).unlink()
    assert store.newest_complete("t", [c2, c1], lambda stored: stored["fingerprint"] == h100).key == key(older_h100)
    nobody = store.newest_complete("t", [c2, c1], lambda stored: False)
    assert nobody.key == key(theirs)  # none alike: the newest, for the comparison to say why


def test_newest_complete_skips_interrupted_results(tmp_path):
    store = FolderStore(tmp_path)
    c1, c2 = "1" * 40, "2" * 40
    complete = put(store, "t", c2, "20240101T000000000000Z")
    put(store, "t", c2, "20240105T000000000000Z", interrupted="SIGINT")  # newer, but measured part of its workload
    put(store, "t", c1, "20250101T000000000000Z", interrupted="SIGTERM")
    assert newest_key(store, "t", [c2, c1]) == key(complete)
    assert newest_key(store, "t", [c1]) is None  # only an interrupted one there


def test_a_result_in_which_no_request_succeeded_is_neither_a_baseline_nor_a_history_point(tmp_path):
    # main's job saved a run against a broken server (every request failed): taken as the next
    # comparison's baseline, its every row was skipped, "0 regressions" for a server 2x slower
    from pytest_llmreplay.gate.history import history_points

    store = FolderStore(tmp_path)
    c1, c2 = "1" * 40, "2" * 40
    good = put(store, "t", c1, "20240101T000000000000Z", summary={"requests": {"ok": 6, "failed": 0}})
    empty = {"requests": {"ok": 0, "failed": 24}, "ttft": {}}
    put(store, "t", c2, "20240105T000000000000Z", summary=empty, samples={})
    newest = store.newest_complete("t", [c2, c1])
    assert (newest.key, newest.partial) == (key(good), 1)
    assert [commit for commit, _ in history_points(store, "t", [c2, c1]).points] == [c1]
    nothing = record(summary=empty, samples={})
    assert (
        baseline.interrupted_note(nothing) == " (no request succeeded (24 failed): never used as a comparison baseline)"
    )
    compared = baseline.compare(nothing, record())  # given as A by hand: not compared, rather than every row skipped
    assert compared.mismatch == "not compared: the baseline measured nothing (no request succeeded (24 failed))"


def test_a_capacity_search_its_server_cut_short_is_neither_a_baseline_nor_a_history_point(tmp_path):
    from pytest_llmreplay.gate.history import history_points

    store = FolderStore(tmp_path)
    c1, c2 = "1" * 40, "2" * 40
    search = {"capacity": 4.0, "points": []}
    complete = put(store, "t", c1, "20240101T000000000000Z", capacity={**search, "incomplete": None})
    put(store, "t", c2, "20240105T000000000000Z", capacity={**search, "incomplete": "server exited with status -9"})
    newest = store.newest_complete("t", [c2, c1])
    assert (newest.key, newest.partial) == (key(complete), 1)
    assert [commit for commit, _ in history_points(store, "t", [c2, c1]).points] == [c1]


def test_a_result_saved_from_a_dirty_tree_is_a_baseline_only_where_its_commit_has_no_other(tmp_path):
    # saved with tracked files changed: not the commit's code, so the commit's clean result wins
    # even when older; at a commit with none clean, the dirty one is taken (the caller says so)
    from pytest_llmreplay.gate.history import history_points

    store = FolderStore(tmp_path)
    c1, c2 = "1" * 40, "2" * 40
    clean = put(store, "t", c2, "20240101T000000000000Z")
    put(store, "t", c2, "20240105T000000000000Z", dirty=True)  # newer, from a dirty tree
    only_dirty = put(store, "t", c1, "20250101T000000000000Z", dirty=True)
    assert newest_key(store, "t", [c2, c1]) == key(clean)
    assert newest_key(store, "t", [c1]) == key(only_dirty)
    points = history_points(store, "t", [c2, c1]).points
    assert [(commit, bool(point.get("dirty"))) for commit, point in points] == [(c1, True), (c2, False)]


def test_saved_files_sort_in_saving_order(tmp_path):
    store = FolderStore(tmp_path)
    paths = [key(Path(store.save(record(summary={"n": {"value": i}})))) for i in range(5)]
    assert store.stored(record()["test"], "a" * 40) == paths
    assert newest_key(store, record()["test"], ["a" * 40]) == paths[-1]
    assert store.read(paths[-1])["summary"] == {"n": {"value": 4}}


def test_a_corrupt_stored_file_is_one_line_naming_it(tmp_path):
    store = FolderStore(tmp_path)
    saved = Path(store.save(record()))
    saved.chmod(0o644)
    os.unlink(saved)
    saved.write_text("{half a rec")
    with pytest.raises(LLMReplayError) as info:
        store.read(key(saved))
    assert str(info.value).startswith(f"{tmp_path}/{key(saved)}: not a stored llmreplay result")
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- choosing a store


def test_open_store_kinds(tmp_path):
    assert open_store(".llmreplay", tmp_path) == FolderStore(tmp_path / ".llmreplay")
    assert open_store(str(tmp_path / "abs"), "/elsewhere") == FolderStore(tmp_path / "abs")
    assert open_store(f"file://{tmp_path}/f", "/elsewhere") == FolderStore(tmp_path / "f")
    assert isinstance(open_store("memory://llmreplay-kinds", tmp_path), FsspecStore)
    found = open_store(f"git:{tmp_path}/remote.git#refs/llmreplay/results", tmp_path)
    assert isinstance(found, GitStore)
    assert (found.url, found.ref) == (f"{tmp_path}/remote.git", "refs/llmreplay/results")
    assert open_store(f"git:{tmp_path}/remote.git", tmp_path).ref == "refs/heads/llmreplay-results"
    assert open_store(f"git:{tmp_path}/remote.git#mine", tmp_path).ref == "refs/heads/mine"


def test_open_store_takes_a_scheme_registered_with_fsspec_at_run_time(tmp_path, monkeypatch):
    """fsspec knows a scheme by name (``known_implementations``, what ``available_protocols``
    lists) or by a class registered at run time (``fsspec.registry``: a conftest's or a
    plugin's ``register_implementation(name, cls)``); the second was refused as unknown."""
    from fsspec.implementations.memory import MemoryFileSystem
    from fsspec.registry import _registry

    class Registered(MemoryFileSystem):
        protocol = ("llmreplay-registered",)

    monkeypatch.setitem(_registry, "llmreplay-registered", Registered)
    store = open_store("llmreplay-registered://bucket/results", tmp_path)
    assert isinstance(store, FsspecStore)
    store.save(record())
    (key,) = store.stored(record()["test"], record()["commit"])
    assert store.read(key)["commit"] == record()["commit"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "nosuch://bucket/x",
            "nosuch://bucket/x: unknown scheme 'nosuch'; expected a folder, git:REMOTE#REF, or a URL",
        ),
        (
            "s3://AKIAKEY:s3cr3t@bucket/x",
            "s3://***@bucket/x: a password in the URL; give credentials in the environment",
        ),
        (
            "git:https://user:s3cr3t@git.example.com/x.git#refs/x",
            "git:https://***@git.example.com/x.git#refs/x: a password in the URL; give credentials to git",
        ),
        ("git:#refs/x", "git:#refs/x: expected git:REMOTE#REF"),
        (
            "s3:/bucket/x",
            "s3:bucket/x: s3: without //; expected s3://bucket/x (a folder whose name starts s3: is written ./ first)",
        ),
        ("s3:/KEY:s3cr3t@bucket/x", "s3:***@bucket/x: s3: without //; expected s3://***@bucket/x"),
        # any scheme fsspec knows, not only those with an extra: not a folder named "hdfs:"
        ("hdfs:/data/x", "hdfs:data/x: hdfs: without //; expected hdfs://data/x"),
        ("sftp:host/x", "sftp:host/x: sftp: without //; expected sftp://host/x"),
        ("git:upstream#refs/x", "git:upstream#refs/x: 'upstream' is not a git remote of"),
        ("s3://", "s3://: no bucket or container; expected s3://BUCKET/PREFIX (the prefix may be left out)"),
        ("gs:///", "gs:///: no bucket or container; expected gs://BUCKET/PREFIX"),
    ],
)
def test_open_store_refuses_in_one_line(tmp_path, text, needle):
    with pytest.raises(LLMReplayError) as info:
        open_store(text, tmp_path)
    assert str(info.value).startswith(needle)
    assert "s3cr3t" not in str(info.value) and "\n" not in str(info.value)


def test_file_urls_are_absolute_local_and_percent_decoded(tmp_path):
    assert open_store(f"file://{tmp_path}/file%20store2", "/elsewhere") == FolderStore(tmp_path / "file store2")
    assert open_store(f"file://localhost{tmp_path}/f", "/elsewhere") == FolderStore(tmp_path / "f")
    assert open_store(f"FILE:{tmp_path}/f", "/elsewhere") == FolderStore(tmp_path / "f")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("file://tmp/q12/rel", "file://tmp/q12/rel: file:// URL with host 'tmp'; expected file:///ABSOLUTE/PATH"),
        ("file:relative/x", "file:relative/x: a file: URL must name an absolute path"),
        ("file://", "file://: a file: URL must name an absolute path"),
        ("file:///tmp/a#b", "file:///tmp/a#b: a file:// URL with a query or fragment; write '?' as %3F and '#' as %23"),
    ],
)
def test_file_urls_naming_no_local_absolute_folder_are_refused(tmp_path, text, needle):
    with pytest.raises(LLMReplayError) as info:
        open_store(text, tmp_path)
    assert str(info.value).startswith(needle)


def test_redact_hides_users_passwords_and_query_strings():
    assert (
        redact("push to https://x-access-token:ghs_abc@github.com/o/r.git failed")
        == "push to https://***@github.com/o/r.git failed"
    )
    assert redact("az://container/p?sv=2024&sig=SECRET and more") == "az://container/p?*** and more"
    assert redact("/a/plain/path and git@github.com:o/r") == "/a/plain/path and git@github.com:o/r"


def test_a_folder_store_that_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    for writing in (False, True):
        with pytest.raises(LLMReplayError, match="afile is a file; expected a folder for the stored results"):
            open_store("afile", tmp_path).check(writing)


# ---------------------------------------------------------------- fsspec: memory:// and S3


def exercise(store) -> None:
    """Save, find, read back, and refuse to overwrite, as the gate uses a store."""
    store.check(writing=True)
    assert store.stored(record()["test"], "a" * 40) == []
    first = store.save(record(summary={"n": {"value": 1}}))
    second = store.save(record(summary={"n": {"value": 2}}))
    store.save(record(commit="b" * 40))
    keys = store.stored(record()["test"], "a" * 40)
    assert len(keys) == 2 and first.endswith(keys[0]) and second.endswith(keys[1])
    assert newest_key(store, record()["test"], ["c" * 40, "a" * 40, "b" * 40]) == keys[1]
    assert store.read(keys[1])["summary"] == {"n": {"value": 2}}
    with pytest.raises(FileExistsError):
        store.add(keys[0], b"{}")
    assert store.read(keys[0])["summary"] == {"n": {"value": 1}}
    skips_unreadable_results(store, keys[1])


def skips_unreadable_results(store, newest: str) -> None:
    """Two newer files that are not results (not JSON; the schema right, the samples null) are
    each skipped, named, and the newest readable result is still found (issue 31, A1)."""
    folder = newest.split("/")[0]
    store.add(f"{folder}/{'a' * 12}-29990101T000000000000Z-1-000000.json", b"{garbage")
    store.add(
        f"{folder}/{'a' * 12}-29990102T000000000000Z-1-000000.json", json.dumps({**record(), "samples": None}).encode()
    )
    found = store.newest_complete(record()["test"], ["a" * 40])
    assert found.key == newest and found.record["summary"] == {"n": {"value": 2}}
    assert len(found.unreadable) == 2
    assert (
        "29990102T" in found.unreadable[0]
        and "samples: expected an object of lists of numbers, got null" in found.unreadable[0]
    )
    assert "29990101T" in found.unreadable[1] and "not a stored llmreplay result" in found.unreadable[1]
    assert found.skipped_line().startswith("skipped 2 unreadable stored results: the newest, ")
    reads_many_in_order(store, newest, f"{folder}/{'a' * 12}-29990101T000000000000Z-1-000000.json")


def reads_many_in_order(store, readable: str, garbage: str) -> None:
    """read_many (the dashboard's, a git store's batch) gives each key its record or its error,
    in the order asked, a missing and a corrupt file in between included."""
    missing = f"{readable.split('/')[0]}/{'a' * 12}-nothing.json"
    found = list(store.read_many([readable, missing, garbage, readable]))
    assert [key for key, _ in found] == [readable, missing, garbage, readable]
    assert found[0][1]["summary"] == {"n": {"value": 2}} and found[3][1] == found[0][1]
    assert isinstance(found[1][1], LLMReplayError) and missing in str(found[1][1])
    assert isinstance(found[2][1], LLMReplayError) and "not a stored llmreplay result" in str(found[2][1])


def test_memory_store(tmp_path):
    exercise(open_store(f"memory://llmreplay-{tmp_path.name}/results", tmp_path))


def test_file_store_is_the_folder_store(tmp_path):
    store = open_store(f"file://{tmp_path}/results", "/elsewhere")
    exercise(store)
    assert len(list((tmp_path / "results").glob("*/*.json"))) == 5  # three results and the two unreadable files


def test_a_corrupt_object_is_one_line_naming_it(tmp_path):
    store = open_store(f"memory://llmreplay-{tmp_path.name}", tmp_path)
    store.add("t-00000000/aaaaaaaaaaaa-x.json", b"\xff\xfe not json")
    with pytest.raises(LLMReplayError) as info:
        store.read("t-00000000/aaaaaaaaaaaa-x.json")
    assert str(info.value).startswith(
        f"memory://llmreplay-{tmp_path.name}/t-00000000/aaaaaaaaaaaa-x.json: not a stored llmreplay result"
    )


def test_a_put_retried_after_its_answer_was_lost_is_a_save_and_a_taken_name_keeps_the_result(tmp_path):
    """botocore retries a conditional put whose answer was lost; the retry's 412 (the object is
    there: the first try landed) raised FileExistsError, and the test was reported as errored
    before measuring, its figures gone (a stores review). Its own bytes there are a save;
    another object under the name keeps the result in the local folder."""
    store = open_store("memory://llmreplay-retried", tmp_path)
    store.check(writing=True)
    landed = store.fs.pipe_file

    def lost_answer(path, data, **kwargs):
        landed(path, data, **kwargs)  # the first try lands, then the retry finds it there
        raise FileExistsError(path)

    store.fs.pipe_file = lost_answer
    where = store.save_or_keep(record(), tmp_path / UNSAVED)
    (key,) = store.stored(record()["test"], "a" * 40)
    assert where.endswith(key) and store.read(key) == record()
    assert not (tmp_path / UNSAVED).exists()

    def taken(path, data, **kwargs):
        landed(path, b"{}", **kwargs)  # someone else's object under the name
        raise FileExistsError(path)

    store.fs.pipe_file = taken
    with pytest.raises(LLMReplayError) as info:
        store.save_or_keep(record(commit="c" * 40), tmp_path / UNSAVED)
    (kept,) = (tmp_path / UNSAVED).rglob("*.json")
    assert read_record(kept) == record(commit="c" * 40)
    assert str(info.value) == (
        f"memory://llmreplay-retried: its name holds another object; the result is kept in {kept}: "
        "copy it into the store under another name"
    )


def test_s3_store_against_a_real_s3_server(s3_env, tmp_path):
    store = open_store("s3://results/ci/perf", tmp_path)
    exercise(store)
    import boto3

    listed = boto3.client("s3").list_objects_v2(Bucket="results", Prefix="ci/perf/")["Contents"]
    assert len(listed) == 5  # three results and the two unreadable files
    body = b"".join(boto3.client("s3").get_object(Bucket="results", Key=item["Key"])["Body"].read() for item in listed)
    assert b"testing-secret" not in body and b"testing-key-id" not in body


def test_a_result_the_object_store_refuses_is_kept_in_a_local_folder(s3_env, tmp_path):
    """The store went away between start-up and the save (a new user stopped the S3 server
    mid-run; here its bucket is deleted): the measured result is kept as a file, and the error
    says where. The git store keeps its own (its outbox), so it is not copied there twice."""
    import boto3

    boto3.client("s3").create_bucket(Bucket="gone")
    store = open_store("s3://gone/ci", tmp_path)
    store.check(writing=True)
    boto3.client("s3").delete_bucket(Bucket="gone")
    with pytest.raises(LLMReplayError) as info:
        store.save_or_keep(record(), tmp_path / UNSAVED)
    (kept,) = (tmp_path / UNSAVED).rglob("*.json")
    assert read_record(kept) == record()
    assert str(info.value).startswith("s3://gone/ci/") and str(info.value).endswith(
        f"; the result is kept in {kept}: copy it into the store once it is back"
    )
    assert GitStore.keeps_unsaved and not FolderStore.keeps_unsaved


def test_s3_store_without_its_bucket(s3_env, tmp_path):
    with pytest.raises(LLMReplayError, match=r"^s3://nobucket/x: no such bucket or container$"):
        open_store("s3://nobucket/x", tmp_path).check(writing=True)


def test_s3_store_that_cannot_be_reached(monkeypatch, tmp_path, refused_url):
    monkeypatch.setenv("AWS_ENDPOINT_URL", refused_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    with pytest.raises(LLMReplayError) as info:
        open_store("s3://results/ci", tmp_path).check(writing=False)
    assert str(info.value).startswith("s3://results/ci: cannot reach the store (Could not connect to the endpoint URL")
    assert "\n" not in str(info.value)


def test_an_s3_endpoint_that_never_answers_is_one_line_within_the_client_settings(monkeypatch, tmp_path):
    """An endpoint that accepts connections and never answers kept start-up waiting 424 s under
    botocore's defaults (a stores review); the store's client settings bound it (here shrunk to
    one try of one second, the test's own bound)."""
    import socket

    from pytest_llmreplay.gate import store_url

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel's backlog) and never reads or answers
    monkeypatch.setattr(
        store_url, "S3_CLIENT", {"connect_timeout": 1, "read_timeout": 1, "retries": {"max_attempts": 1}}
    )
    monkeypatch.setattr(store_url, "S3_RETRIES", 1)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    try:
        store = open_store("s3://results/ci", tmp_path)
        with pytest.raises(LLMReplayError, match=r"^s3://results/ci: cannot reach the store \((Connect|Read) timeout"):
            store.check(writing=False)
    finally:
        silent.close()
    assert store.fs.retries == 1  # s3fs's own tries, each botocore's


# ---------------------------------------------------------------- git


GIT_ENV = {
    "GIT_AUTHOR_NAME": "T",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "T",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(cwd, *args) -> str:
    done = subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    )
    return done.stdout.strip()


@pytest.fixture
def remote(tmp_path) -> Path:
    """A bare repository with one commit on main: what CI clones."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(tmp_path, "clone", "-q", str(bare), "seed")
    (tmp_path / "seed" / "f.txt").write_text("x")
    git(tmp_path / "seed", "add", "f.txt")
    git(tmp_path / "seed", "commit", "-q", "-m", "first")
    git(tmp_path / "seed", "push", "-q", "origin", "HEAD:main")
    return bare


def clone(remote: Path, name: str) -> Path:
    git(remote.parent, "clone", "-q", str(remote), name)
    return remote.parent / name


def test_git_store_keeps_pushing_while_others_push_first_past_a_fixed_count_of_rounds(remote, monkeypatch):
    """Each round of jobs pushing at once lands one of them: with 24 at once and a remote taking a
    second a push, 4 gave up after their 8 rounds and their results stayed on throwaway runners
    (a stores review). Rounds go on until PUSH_DEADLINE_S; here the remote refuses 12 pushes as
    moved refs (its hook), and the 13th lands."""
    from pytest_llmreplay.gate import git_store

    hook = remote / "hooks" / "pre-receive"
    hook.write_text(
        '#!/bin/sh\ncount=$(cat "$GIT_DIR/refusals" 2>/dev/null || echo 0)\n'
        'if [ "$count" -lt 12 ]; then echo $((count + 1)) > "$GIT_DIR/refusals"; '
        'echo "error: failed to update ref" >&2; exit 1; fi\n'
    )
    hook.chmod(0o755)
    monkeypatch.setattr(git_store, "PUSH_BACKOFF_S", 0.001)
    monkeypatch.setattr(git_store, "PUSH_BACKOFF_CAP_S", 0.002)
    store = open_store("git:origin#refs/llmreplay/results", clone(remote, "job"))
    store.check(writing=True)
    saved = store.save(record())
    assert (remote / "refusals").read_text().strip() == "12"
    assert saved.split()[-1] in git(remote, "ls-tree", "-r", "--name-only", "refs/llmreplay/results").split()


def test_git_store_saves_on_the_ref_and_another_clone_reads_it(remote):
    job1, job2 = clone(remote, "job1"), clone(remote, "job2")
    store = open_store("git:origin#refs/llmreplay/results", job1)
    store.check(writing=True)
    assert store.tip is None  # the ref does not exist yet
    head_before = git(job1, "rev-parse", "HEAD")
    saved = store.save(record())
    assert saved.startswith("git:origin#refs/llmreplay/results ")
    # the user's clone is untouched: same HEAD, clean status, no ref added
    assert git(job1, "rev-parse", "HEAD") == head_before
    assert git(job1, "status", "--porcelain", "--untracked-files=no") == ""
    assert "llmreplay" not in git(job1, "for-each-ref")
    files = git(remote, "ls-tree", "-r", "--name-only", "refs/llmreplay/results").split()
    assert files == [saved.split(" ", 1)[1]]
    other = open_store("git:origin#refs/llmreplay/results", job2)
    other.check(writing=False)
    found = newest_key(other, record()["test"], ["a" * 40])
    assert other.read(found) == record()
    assert not list((store.work / "outbox").glob("*/*.json"))  # pushed: the outbox is empty
    newer = store.save(record(summary={"n": {"value": 2}})).split(" ", 1)[1]
    skips_unreadable_results(store, newer)


def test_git_store_never_commits_onto_a_ref_that_holds_other_commits(remote):
    """``git:origin#main`` named the code branch: each save committed the whole source tree plus
    the result on top of main and pushed it (found by a new user). A ref holding commits the
    store did not make is refused before anything is measured, and on a save; reading it is
    harmless (it holds no result). ``HEAD`` is refused by name."""
    job = clone(remote, "job")
    main_before = git(remote, "rev-parse", "refs/heads/main")
    store = open_store("git:origin#main", job)
    with pytest.raises(LLMReplayError) as info:
        store.check(writing=True)
    assert str(info.value) == (
        f"git:origin#refs/heads/main: refs/heads/main holds commits the store did not make (its newest, "
        f"{main_before[:12]}: 'first'); results go on top of the ref's files, so they would land on that branch: "
        "name a ref of their own, such as git:origin#llmreplay-results"
    )
    store.check(writing=False)  # reading: no result there, nothing written
    with pytest.raises(LLMReplayError, match=r"holds commits the store did not make"):
        store.save(record())
    assert git(remote, "rev-parse", "refs/heads/main") == main_before
    with pytest.raises(LLMReplayError, match=r"^git:origin#HEAD: expected a ref of the results' own"):
        open_store("git:origin#HEAD", job)
    results = open_store("git:origin#llmreplay-results", job)  # the store's own commits are its to build on
    results.check(writing=True)
    results.save(record())
    results.check(writing=True)
    results.save(record(summary={"n": {"value": 2}}))
    assert git(remote, "rev-list", "--count", "refs/heads/llmreplay-results") == "2"


def test_a_results_ref_with_a_hand_made_commit_on_top_takes_later_saves(remote):
    """A bad result removed by hand (a commit of the user's on the results' ref) made every later
    save fail, and the advice, a ref of their own, left every stored result behind (a stores
    review): a ref of the store's commits is the results', whatever is on top."""
    job = clone(remote, "job")
    store = open_store("git:origin#llmreplay-results", job)
    store.check(writing=True)
    bad = store.save(record()).split(" ", 1)[1]
    git(job, "fetch", "-q", "origin", "llmreplay-results")
    git(job, "checkout", "-q", "FETCH_HEAD")
    git(job, "rm", "-q", bad)
    git(job, "commit", "-q", "-m", "remove a result measured on a broken runner")
    git(job, "push", "-q", "origin", "HEAD:refs/heads/llmreplay-results")
    store.check(writing=True)
    kept = store.save(record(summary={"n": {"value": 2}})).split(" ", 1)[1]
    files = git(remote, "ls-tree", "-r", "--name-only", "refs/heads/llmreplay-results").split()
    assert kept in files and bad not in files  # the hand fix stays


PUSH_SCRIPT = """
import json, sys, time
from pathlib import Path
from pytest_llmreplay.gate.store_url import open_store
clone, go, rec = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
store = open_store("git:origin#refs/llmreplay/results", clone)
store.check(writing=True)
while not go.exists():
    time.sleep(0.001)
print(store.save(rec))
"""


def test_eight_jobs_pushing_at_once_lose_nothing(remote, tmp_path):
    go = tmp_path / "go"
    jobs = [clone(remote, f"job{i}") for i in range(8)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PUSH_SCRIPT, str(job), str(go), json.dumps(record(commit=f"{i}" * 40))],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, job in enumerate(jobs)
    ]
    go.touch()
    saved = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        saved.append(out.strip().split(" ", 1)[1])
    on_ref = git(remote, "ls-tree", "-r", "--name-only", "refs/llmreplay/results").split()
    assert sorted(on_ref) == sorted(saved) and len(set(saved)) == 8
    # one linear history: every job's commit built on the one before
    assert git(remote, "rev-list", "--count", "--merges", "refs/llmreplay/results") == "0"
    assert git(remote, "rev-list", "--count", "refs/llmreplay/results") == "8"


def test_a_failed_push_keeps_the_result_and_the_next_save_sends_it(remote, tmp_path):
    job = clone(remote, "job")
    store = open_store("git:origin#refs/llmreplay/results", job)
    store.check(writing=True)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'results are read-only today' >&2\nexit 1\n")
    hook.chmod(0o755)
    with pytest.raises(LLMReplayError) as info:
        store.save(record(summary={"n": {"value": 1}}))
    message = str(info.value)
    assert message.startswith("git:origin#refs/llmreplay/results: could not push the result (")
    kept = Path(message.split("it is kept in ", 1)[1].split(" and goes up", 1)[0])
    assert json.loads(kept.read_text())["summary"] == {"n": {"value": 1}}
    hook.unlink()
    store.save(record(summary={"n": {"value": 2}}))
    on_ref = git(remote, "ls-tree", "-r", "--name-only", "refs/llmreplay/results").split()
    assert len(on_ref) == 2 and key(kept) in on_ref
    assert not kept.exists()


def test_git_store_that_cannot_be_reached(tmp_path, refused_url):
    store = open_store(
        f"git:{refused_url.replace('http://', 'http://tok@')}/r.git#refs/x", tmp_path
    )  # a token as the user
    with pytest.raises(LLMReplayError) as info:
        store.check(writing=False)
    assert str(info.value).startswith("git:http://***@127.0.0.1:")
    assert "cannot fetch refs/x" in str(info.value) and "tok" not in str(info.value)
