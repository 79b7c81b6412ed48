"""The simulator's HTTP server under 1,000 concurrent streams: its own timing error, and how far
its client-side numbers are from the offline replay of the same workload.

``llmreplay sim`` runs in its own process (``--max-num-seqs 1024`` so all streams decode at
once); this process is the client: the replay driver with HTTPEndpoint, streaming completions,
STREAMS single-turn requests of PROMPT in / OUTPUT out, all at once (concurrency = STREAMS).

- timing error: the server's ``llmreplay:sim_emit_error_seconds`` (|write time of each chunk minus
  its simulated time|, over the last 100,000 chunks) and the extremes of the signed
  ``llmreplay:sim_emit_lag_seconds``, read from ``/metrics`` after each run;
- streams: the peak of ``vllm:num_requests_running`` sampled every 0.5 s during the run;
- fidelity: TTFT p50 and TPOT mean seen by the client against the offline replay (virtual
  clock, same profile and engine settings, same workload).

``--workers N``: the client is N Ray workers on a local instance (``pytest_llmreplay.replayer.workers``,
the extra ``[ray]``), started once before the runs, instead of this process.

    .venv/bin/python bench/sim_online.py [--runs 3] [--streams 1000] [--profile qwen3-30b-a3b-h100] [--workers N]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from pytest_llmreplay import HTTPEndpoint, PromptFactory, ReplaySettings, Result, VirtualClock, load_tokenizer
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate

LLMREPLAY = Path(sys.executable).with_name("llmreplay")
SAMPLE_S = (
    0.5  # how often /metrics is read for the running gauge (a read blocks the server ~0.3 ms: quantiles in a thread)
)


def metric(text: str, name: str, label: str = "") -> float:
    found = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*{re.escape(label)}[^}}]*\}})? (\S+)$", text, re.M)
    return float(found.group(1)) if found else float("nan")


def online_run(url: str, workload, prompts: PromptFactory, streams: int, workers=None) -> dict:
    peak = [0.0]
    stop = threading.Event()

    def sample() -> None:
        with httpx.Client() as client:
            while not stop.wait(SAMPLE_S):
                peak[0] = max(peak[0], metric(client.get(f"{url}/metrics").text, "vllm:num_requests_running"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    endpoint = HTTPEndpoint(url, api="completions", extra_body={"ignore_eos": True}, timeout_s=120)
    settings = ReplaySettings(concurrency=streams, prompt_format="ids", check_idle=False)
    run = (
        workers.replay(workload, endpoint, prompts, settings)
        if workers is not None
        else replay(workload, endpoint, prompts, settings)
    )
    result = Result(run)
    wall = time.perf_counter() - started
    stop.set()
    sampler.join()
    text = httpx.get(f"{url}/metrics").text
    lag = {q: metric(text, "llmreplay:sim_emit_lag_seconds", f'quantile="{q}"') * 1000 for q in ("0.0", "1.0")}
    error = {
        q: metric(text, "llmreplay:sim_emit_error_seconds", f'quantile="{q}"') * 1000 for q in ("0.5", "0.99", "1.0")
    }
    return {
        "ok": len(result.ok),
        "peak_running": peak[0],
        "wall_s": wall,
        "error_p50_ms": error["0.5"],
        "error_p99_ms": error["0.99"],
        "error_max_ms": error["1.0"],
        "lag_min_ms": lag["0.0"],
        "lag_max_ms": lag["1.0"],
        "ttft_p50_ms": result.summary["ttft"]["p50"] * 1000,
        "tpot_mean_ms": result.summary["tpot"]["mean"] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--profile", default="qwen3-30b-a3b-h100")
    parser.add_argument("--workers", type=int, help="client: N Ray workers instead of this process")
    args = parser.parse_args()
    prompts = PromptFactory(load_tokenizer(None))
    workload = generate(
        SyntheticSpec(sessions=args.streams, input_tokens=args.prompt, output_tokens=args.output, seed=3)
    )
    max_seqs = max(1024, args.streams)
    profile = load_profile(args.profile)
    profile = dataclasses.replace(profile, engine=dataclasses.replace(profile.engine, max_num_seqs=max_seqs))
    offline = Result(
        replay(
            workload,
            SimEndpoint(profile, prompts),
            prompts,
            ReplaySettings(concurrency=args.streams),
            clock=VirtualClock(),
        )
    )
    reference = {
        "ttft_p50_ms": offline.summary["ttft"]["p50"] * 1000,
        "tpot_mean_ms": offline.summary["tpot"]["mean"] * 1000,
    }
    runs = []
    with contextlib.ExitStack() as stack:
        workers = None
        if args.workers:
            from pytest_llmreplay.replayer.workers import RayWorkers

            workers = stack.enter_context(RayWorkers(args.workers))
        for _ in range(args.runs):
            server = subprocess.Popen(
                [str(LLMREPLAY), "sim", "--profile", args.profile, "--port", "0", "--max-num-seqs", str(max_seqs)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                url = re.search(r"http://\S+", server.stdout.readline()).group(0)
                runs.append(online_run(url, workload, prompts, args.streams, workers))
            finally:
                server.terminate()
                server.wait(30)
    client = f"{args.workers} Ray workers" if args.workers else "one process"
    print(
        f"{args.streams} streams of {args.prompt} in / {args.output} out, profile {args.profile} (max_num_seqs {max_seqs}), client {client}; "
        f"median of {args.runs} runs, server restarted each run\n"
    )
    print("| figure | online (median) | runs | offline replay | online/offline |")
    print("|---|---:|---|---:|---:|")
    for key in runs[0]:
        median = statistics.median(r[key] for r in runs)
        each = ", ".join(f"{r[key]:.4g}" for r in runs)
        ref = reference.get(key)
        print(
            f"| {key} | {median:.4g} | {each} | {'' if ref is None else f'{ref:.4g}'} | {'' if ref is None else f'{median / ref:.3f}x'} |"
        )


if __name__ == "__main__":
    main()
