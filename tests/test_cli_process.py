"""What the ``llmreplay`` command sets up in its own process (cli/process.py): numpy's OpenBLAS
on one thread unless the user chose, and the user's environment unchanged for what it starts.
Each case runs in a fresh interpreter: OpenBLAS reads its setting once, as numpy loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "synthetic_chat.yaml"
REPORT = (
    "import json, os; print(json.dumps([len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS')]))"
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc (Linux)")


def threads_and_setting(code: str, **env: str) -> list:
    """[threads of a fresh interpreter after ``code``, its OPENBLAS_NUM_THREADS then]."""
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | env
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{REPORT}"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


COMMAND = f"from pytest_llmreplay.cli.main import main; assert main(['validate', {str(WORKLOAD)!r}]) == 0"


def test_the_command_loads_numpy_with_one_blas_thread_and_leaves_the_environment_alone():
    assert threads_and_setting(COMMAND) == [1, None]
    cores = os.cpu_count() or 1
    if cores > 1:  # the default it avoids: OpenBLAS's workers, one per core
        assert threads_and_setting("import numpy")[0] > 1


def test_a_users_blas_setting_wins():
    expected = threads_and_setting("import numpy", OPENBLAS_NUM_THREADS="2")
    assert threads_and_setting(COMMAND, OPENBLAS_NUM_THREADS="2") == expected
    assert expected[1] == "2"
