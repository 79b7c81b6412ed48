"""Running an engine's set-up script (``scripts/setup_vllm_cpu.py``, ``scripts/setup_llama_cpp.py``)
from the engine tests: it installs the engine and builds its tiny model on first use (minutes,
once per machine) and prints one JSON line, returned here; a failure fails the test with the
script's last output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
SETUP_TIMEOUT_S = 1800  # a first install on a busy 2-core machine


def run_setup(script: str, *options: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Run ``scripts/<script>`` with ``--json`` and ``options`` by this interpreter; its JSON."""
    setup = [sys.executable, str(SCRIPTS / script), "--json", *options]
    done = subprocess.run(setup, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S, env=env)
    if done.returncode != 0:
        pytest.fail(f"scripts/{script} failed (exit {done.returncode}):\n{done.stderr[-3000:]}", pytrace=False)
    return json.loads(done.stdout.strip().splitlines()[-1])
