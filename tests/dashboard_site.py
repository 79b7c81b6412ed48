"""Stores for the dashboard's tests: the synthetic store of bench/dashboard_store.py (real stored
results scaled per commit), small, with base results made here by the offline simulator (a
16-session chat on an H100 and an H200 profile, with three SLOs) instead of tests/perf's.

Five tests over COMMITS commits: test 0 has both profiles' results (two lines side by side) and
steps 20% slower at commit :data:`STEP` (a regression), test 2 steps 20% faster there (an
improvement), test 4 stores three runs per result (an interval per figure), tests 1 and 3 are
flat. Each result has 1.5% noise."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # the bench's store generator, which the dashboard's benchmark times

import dashboard_store  # noqa: E402

from pytest_llmreplay.cli.main import main  # noqa: E402

COMMITS, TESTS, STEP = 30, 5, 22
SLOS = (("ttft.p99", "< 500ms"), ("tpot.p50", "< 30ms"), ("error_rate", "== 0"))
WORKLOAD = (
    "synthetic:\n  sessions: 16\n  input_tokens: {dist: uniform, min: 64, max: 1024}\n"
    "  output_tokens: {dist: uniform, min: 8, max: 128}\n  rate: 4\n  seed: 7\n"
)


def base_records(folder: Path) -> dict[str, list[dict]]:
    """profile -> [one stored result of the simulator on that profile, with :data:`SLOS`]."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "chat.yaml").write_text(WORKLOAD)
    found = {}
    for profile in dashboard_store.PROFILES:
        out = folder / profile
        assert main(["run", str(folder / "chat.yaml"), "--sim", profile, "--out", str(out)]) == 0
        record = json.loads((out / "result.json").read_text())
        record["slo"] = [{"key": key, "threshold": text, "measured": None, "passed": True} for key, text in SLOS]
        found[profile] = [record]
    return found


def levels(test: int, commits: int):
    step = {0: 0.2, 2: -0.2}.get(test, 0.0)
    return lambda commit: 1 + step if commit >= STEP else 1.0


def make_repo_and_results(path: Path, base: dict[str, list[dict]]) -> tuple[list[str], list[tuple[str, bytes]]]:
    """A repository of :data:`COMMITS` commits at ``path/repo`` and the results to store."""
    ids = dashboard_store.make_repo(path / "repo", COMMITS)
    return ids, list(dashboard_store.results(base, TESTS, ids, levels_of=levels))


def stored_test_ids() -> list[str]:
    return [f"tests/perf/test_bench_{test:02d}.py::test_{test:02d}" for test in range(TESTS)]
