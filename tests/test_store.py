"""Where results live (pytest_llmreplay.store): the folder store's never-overwriting writes
(threads and processes at once) and lookups; fsspec URLs (memory://, and S3 against moto's
standalone server started on loopback); git refs shared by clones of one bare repository, eight
processes pushing at once; and the one-line errors for a bad store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_llmreplay import baseline
from pytest_llmreplay.baseline import read_record
from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.store import FolderStore, FsspecStore, GitStore, open_store, redact, result_folder, write_new

ROOT = Path(__file__).resolve().parent.parent


def record(test="tests/test_perf.py::test_chat", commit="a" * 40, **more):
    return {
        "schema": baseline.SCHEMA, "test": test, "commit": commit, "dirty": False, "branch": "main",
        "fingerprint": {"kind": "sim", "model": "m"}, "workload": {"path": "w.jsonl", "digest": "d"},
        "settings": {"concurrency": 4}, "summary": {"ttft": {"p50": 0.5}}, "samples": {"ttft": [0.4, 0.5, 0.6]},
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
from pytest_llmreplay.store import FolderStore
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
        subprocess.Popen([sys.executable, "-c", SAVE_SCRIPT, str(root), str(go), json.dumps(record())], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    go.touch()  # all start saving together
    saved = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        saved += [Path(line) for line in out.split()]
    assert_all_distinct_and_readable(saved, root / result_folder(record()["test"]), 80)


def put(store, test, commit, stamp, pid=1, token="aa"):
    """A stored file with a chosen time stamp in its name."""
    return write_new(store.root / result_folder(test) / f"{commit[:12]}-{stamp}-{pid}-{token}.json", record(test=test, commit=commit))


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


def test_latest_is_the_newest_at_the_first_commit_that_has_one(tmp_path):
    store = FolderStore(tmp_path)
    c1, c2, c3 = "1" * 40, "2" * 40, "3" * 40
    put(store, "t", c2, "20240101T000000000000Z")
    newest_c2 = put(store, "t", c2, "20240105T000000000000Z")
    put(store, "t", c1, "20250101T000000000000Z")  # newer in time, but an older commit
    assert store.latest("t", [c3, c2, c1]) == key(newest_c2)
    assert store.latest("t", [c3]) is None
    assert store.latest("t", []) is None


def test_saved_files_sort_in_saving_order(tmp_path):
    store = FolderStore(tmp_path)
    paths = [key(Path(store.save(record(summary={"n": i})))) for i in range(5)]
    assert store.stored(record()["test"], "a" * 40) == paths
    assert store.latest(record()["test"], ["a" * 40]) == paths[-1]
    assert store.read(paths[-1])["summary"] == {"n": 4}
