"""What the ``llmreplay`` command sets up in its own process (cli/process.py): numpy's OpenBLAS
on one thread unless the user chose, and the user's environment unchanged for what it starts;
a stdout whose reader left costs nothing the command measured.
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


def test_a_reader_that_leaves_the_pipe_loses_neither_the_files_nor_the_status(tmp_path):
    # `llmreplay run ... --out DIR | head -2`: the tables hit a closed pipe; the run still writes
    # DIR and exits with its own status, with no BrokenPipeError traceback
    command = "import sys; from pytest_llmreplay.cli.main import main; sys.exit(main(sys.argv[1:]))"
    out = tmp_path / "out"
    args = ["run", str(WORKLOAD), "--sim", "llama-3.1-8b-h100", "--max-requests", "4", "--out", str(out)]
    process = subprocess.Popen([sys.executable, "-c", command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the first line
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    measured = json.loads((out / "result.json").read_text())["summary"]["requests"]["ok"]
    assert measured >= 4  # whole sessions
    assert (out / "requests.csv").read_text().count("\n") == measured + 1  # a header and a line a request
