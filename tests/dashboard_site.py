"""The small synthetic store the dashboard's tests build from: bench/dashboard_store.py run as a
script, on its chat base (a 16-session chat on the simulator's H100 and H200 profiles, three
SLOs) instead of tests/perf's.

Five tests over COMMITS commits: test 0 has both profiles' results (two lines side by side) and
steps 20% slower at commit :data:`STEP` (a regression), test 2 steps 20% faster there (an
improvement), test 4 stores three runs per result (an interval per figure), tests 1 and 3 are
flat. Each result has 1.5% noise. :func:`make` runs the script once (a module's tests copy what
it made: :func:`copy_of`); :func:`add_commit` runs it again for one more commit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "dashboard_store.py"
COMMITS, TESTS, STEP = 30, 5, 22
STEPS = (f"0@{STEP}:+0.2", f"2@{STEP}:-0.2")


def store_script(out: Path, *more: str) -> str:
    """bench/dashboard_store.py on ``out`` with this store's arguments and ``more``; what it printed."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--commits", str(COMMITS), "--tests", str(TESTS), "--base", "chat"]
        + ["--steps", *STEPS, *more],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def make(out: Path, kind: str = "folder") -> Path:
    """The store made in ``out`` (``repo/``, ``store/`` for the folder kind, ``base/``); ``out``."""
    store_script(out, "--store", kind)
    return out


def copy_of(made: Path, path: Path) -> Path:
    """A copy of what :func:`make` made at ``path`` (a store the test may change); its store."""
    shutil.copytree(made, path, dirs_exist_ok=True)
    return path / "store"


def add_commit(out: Path) -> str:
    """One more commit in ``out/repo`` with a result of every test in ``out/store``; its id."""
    return store_script(out, "--add-commit").split()[-1]


def stored_test_ids() -> list[str]:
    return [f"tests/perf/test_bench_{test:02d}.py::test_{test:02d}" for test in range(TESTS)]
