"""Each request's TTFT and TPOT on 2 Ray workers against one process, on the simulator's HTTP server:
how far apart they are (the noise tests/test_workers.py's equivalence test allows for).

``llmreplay sim --max-num-seqs 1`` in its own process serves one request at a time; ``--requests``
one-turn requests of 256 in / ``--output`` out arrive every ``--spacing`` s, so each TTFT is mostly
a queue wait, which depends on when every earlier request was sent (the other worker's too).
Each round replays the trace in this process, then on 2 Ray workers (one local Ray instance for
the whole bench, fresh actors each round: a user's run meets fresh workers), with the server's
prefix cache reset before each; requests are paired by id. Per round: the largest and the median
|TTFT difference| and the largest |TPOT difference| of 2 workers against 1 process, and the
largest |TTFT difference| of 1 process against the offline replay (virtual clock, same profile).

    .venv/bin/python bench/ray_equivalence.py [--runs 5] [--requests 8] [--spacing 0.1] [--output 48]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from itertools import pairwise

import httpx

from pytest_llmreplay.metrics.result import tpot, ttft
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.replayer.server_process import ServerProcess
from pytest_llmreplay.replayer.workers import RayWorkers, start_ray
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.sim.server import READY
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer
from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload

PROFILE = "llama-3.1-8b-h100"


def gaps_ms(measured: dict, reference: dict, metric) -> list[float]:
    """|metric(measured) - metric(reference)| of every request, by id, in ms."""
    return [abs(metric(record) - metric(reference[request])) * 1e3 for request, record in measured.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--spacing", type=float, default=0.1)
    parser.add_argument("--output", type=int, default=48)
    args = parser.parse_args()
    prompts = PromptFactory(load_tokenizer(None))
    workload = Workload(
        tuple(Session(f"r{i}", i * args.spacing, (Turn(256, args.output, Synthetic()),)) for i in range(args.requests)),
        "bench",
    )
    settings = ReplaySettings(prompt_format="ids")
    profile = load_profile(PROFILE)
    profile = dataclasses.replace(profile, engine=dataclasses.replace(profile.engine, max_num_seqs=1))
    offline = {
        r.session_id: r
        for r in replay(workload, SimEndpoint(profile, prompts), prompts, settings, clock=VirtualClock()).records
    }
    steps = [ttft(b) - ttft(a) for a, b in pairwise(offline.values())]
    command = [
        sys.executable,
        "-m",
        "pytest_llmreplay.cli.main",
        "sim",
        "--profile",
        PROFILE,
        "--max-num-seqs",
        "1",
        "--port",
        "0",
        "--parent-pid",
        str(os.getpid()),
    ]
    rounds = []
    start_ray(None, 2)
    try:
        with ServerProcess(command, None, announce=READY, startup_timeout_s=60, die_with_parent=False) as server:
            for round_ in range(args.runs):
                runs = []
                for client in ("1 process", "2 workers"):
                    httpx.post(server.url + "/reset_prefix_cache").raise_for_status()
                    endpoint = HTTPEndpoint(server.url, api="completions")
                    if client == "1 process":
                        run = replay(workload, endpoint, prompts, settings)
                    else:
                        with RayWorkers(2) as workers:
                            run = workers.replay(workload, endpoint, prompts, settings)
                    assert {r.status for r in run.records} == {"ok"} and not run.warnings, run.warnings
                    runs.append({r.session_id: r for r in run.records})
                one, two = runs
                ttft_gaps = gaps_ms(two, one, ttft)
                rounds.append(
                    {
                        "ttft_max": max(ttft_gaps),
                        "ttft_median": statistics.median(ttft_gaps),
                        "tpot_max": max(gaps_ms(two, one, tpot)),
                        "offline_ttft_max": max(gaps_ms(one, offline, ttft)),
                    }
                )
                print(f"round {round_ + 1}/{args.runs} done", file=sys.stderr)
    finally:
        import ray

        ray.shutdown()
    print(
        f"{args.requests} requests of 256 in / {args.output} out every {args.spacing * 1e3:.0f} ms, {PROFILE} one at a time; "
        f"offline TTFT rises {min(steps) * 1e3:.0f}-{max(steps) * 1e3:.0f} ms a request; median of {args.runs} rounds\n"
    )
    print("| figure (ms) | median | rounds |\n|---|---:|---|")
    for key, name in (
        ("ttft_max", "largest TTFT gap, 2 workers vs 1 process"),
        ("ttft_median", "median TTFT gap, 2 workers vs 1 process"),
        ("tpot_max", "largest TPOT gap, 2 workers vs 1 process"),
        ("offline_ttft_max", "largest TTFT gap, 1 process vs offline"),
    ):
        print(
            f"| {name} | {statistics.median(r[key] for r in rounds):.2f} | {', '.join(f'{r[key]:.2f}' for r in rounds)} |"
        )


if __name__ == "__main__":
    main()
