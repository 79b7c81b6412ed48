"""Capacity search speed on the offline simulator, against the same grid run exhaustively.

Workload: ../shared/data/llmservingsim/sharegpt-llama-3.1-8b-300-sps10.jsonl (300 ShareGPT
requests), profile llama-3.1-8b-h100, SLOs ttft.p99 < 1s and tpot.p99 < 50ms.

- ``search``: :func:`~pytest_llmreplay.search.capacity.find_capacity` with budget 10 and resolution 0.1%
  (so it spends all 10 points), timed from the loaded workload to the capacity, with the
  bracketing step in 2 worker processes and in this one process; median of ``--runs``.
- ``grid``: every load of a grid finer than the search's 5% default resolution, from the
  lowest to the highest load the search ran (the estimates of a rate search left out: closed
  loops, not rates), each run to its end: what a sweep without bisection (vLLM's ``bench
  sweep``, GuideLLM's) runs to say as much or more; run once. Rate: steps of 1% of the capacity
  the search found; concurrency: steps of 1, the finest there is. Its answer (the highest load
  credited to a point before the first that fails: by rate, as the search credits it, the lower
  of the rate offered and the rate carried) is compared with the search's: the difference in %,
  and whether it lies in the search's bracket (within a grid step).

    .venv/bin/python bench/sweep_speed.py --runs 5 [--by rate concurrency]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from pytest_llmreplay.search.capacity import CapacityPlan, Search, find_capacity, run_point
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.target import Target
from pytest_llmreplay.workloads.formats import load_workload
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "data" / "llmservingsim" / "sharegpt-llama-3.1-8b-300-sps10.jsonl"
SLO = {"ttft.p99": "< 1s", "tpot.p99": "< 50ms"}


def grid_step(by: str, capacity: float) -> float:
    """The grid's spacing: 1% of the capacity by rate, 1 by concurrency (module docstring)."""
    return 1.0 if by == "concurrency" else 0.01 * capacity


def grid(workload, target, prompts, plan, found) -> tuple[float, int, float | None]:
    """(seconds, points, the grid's capacity) of the exhaustive grid matching ``found``."""
    low_end = min(p.load for p in found.load_points)
    high_end = max(p.load for p in found.load_points)
    step = grid_step(plan.by, found.value)
    loads = [low_end + i * step for i in range(int((high_end - low_end) / step + 1e-9) + 1)]
    search = Search(workload, target, prompts, plan, workers=1)
    start = time.perf_counter()
    best = None
    failed = False
    for load in loads:
        settings = search.settings_at(load)
        point = search.keep(load, "grid", settings, run_point(search.job(settings, stop=False)))
        failed = failed or not point.passed
        if not failed:
            best = max(best or 0.0, point.credited)
    return time.perf_counter() - start, len(loads), best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--by", nargs="+", default=["rate", "concurrency"])
    args = parser.parse_args()
    workload = load_workload(TRACE)
    prompts = PromptFactory(load_tokenizer(None), seed=0)
    target = Target("offline", profile=load_profile("llama-3.1-8b-h100"), prompts=prompts)
    print(
        "| by | workers | points | search s (median) | min-max s | capacity | bracket | grid step | grid points | grid s | grid s / search s | grid capacity | grid vs search | in bracket |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for by in args.by:
        plan = CapacityPlan(by=by, slo=SLO, budget=10, resolution=0.001)
        times = {1: [], 2: []}
        for _ in range(args.runs):
            for workers in (2, 1):  # alternating, so that load from other users hits both alike
                start = time.perf_counter()
                found = find_capacity(workload, target, prompts, plan, workers=workers)
                times[workers].append(time.perf_counter() - start)
        grid_s, grid_points, grid_capacity = grid(workload, target, prompts, plan, found)
        step = grid_step(by, found.value)
        in_bracket = grid_capacity is not None and found.low - step - 1e-9 <= grid_capacity <= found.high + step + 1e-9
        shown, versus = (
            ("-", "-")
            if grid_capacity is None
            else (f"{grid_capacity:.4g}", f"{(grid_capacity / found.value - 1) * 100:+.1f}%")
        )
        for workers in (2, 1):
            spent = statistics.median(times[workers])
            print(
                f"| {by} | {workers} | {len(found.points)} | {spent:.2f} | {min(times[workers]):.2f}-{max(times[workers]):.2f} | {found.value:.4g} | "
                f"[{found.low:.4g}, {found.high:.4g}] | {step:.3g} | {grid_points} | {grid_s:.1f} | {grid_s / spent:.0f}x | {shown} | {versus} | {in_bracket} |"
            )


if __name__ == "__main__":
    main()
