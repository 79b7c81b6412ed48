"""Offline simulator speed and memory, side by side with NVIDIA Dynamo 1.6.1's offline replay.

Scenarios (the issue's), each run in a fresh process, ours and Dynamo's alternating:

- ``trace``: ../shared/data/mooncake/conversation_trace.jsonl (12,031 requests, hash-id blocks of
  512 tokens, timestamps in ms) on 8 engines, round robin, block size 512, every other engine
  setting Dynamo's mocker default (num_gpu_blocks 16384, max_num_seqs 256,
  max_num_batched_tokens 8192, prefix caching, chunked prefill, polynomial timing);
- ``synthetic``: 10,000 requests of 1,000 prompt / 100 output tokens, concurrency 100 (the
  issue's; ``--concurrency N`` for another), one engine, all mocker defaults (block size 64);
- ``synthetic100k``: the same with 100,000 requests, for memory.

A third column for the synthetic scenarios, ``floor``: the same run of ours with an endpoint that
answers every request at once (1 ms of virtual time, no engine), i.e. what the replay driver,
the workload generator and the summary cost on their own.

Ours: the bundled ``dynamo-mocker-polynomial`` profile (the mocker's timing fit and engine
defaults; block size 512 for ``trace``). Timed, for every child: the whole process from the
parent (``process_wall_s``: start to exit; ``process_cpu_s``: user + system from its rusage),
interpreter and imports included, the issue's measure; and ``wall_s``, the child's own timing of
loading the workload (or generating it), replaying it on the virtual clock and computing the
summary, the same work Dynamo's one call does. Ours runs from bytecode, as an installed wheel
does: the harness byte-compiles the package before the first child; and its process set up as
the ``llmreplay`` command sets up its own (numpy's OpenBLAS on one thread: cli/process.py). Peak RSS: the child
process's ``ru_maxrss``, interpreter included for both.

    .venv/bin/python bench/sim_speed.py --runs 3 [--dynamo-python /tmp/dynamo-work/venv/bin/python] [--scenarios trace synthetic synthetic100k] [--concurrency 100]

Dynamo's venv: ``python3.11 -m venv V && V/bin/pip install --no-deps ai-dynamo==1.6.1
ai-dynamo-runtime==1.6.1 typing_extensions`` (the only dependency the replay imports).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# argparse, statistics, subprocess and the machine line are imported where used: a child that times
# ours loads this module, and the harness's own imports must not count as ours

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"
SCENARIOS = ("trace", "synthetic", "synthetic100k")
SYNTHETIC_REQUESTS = {"synthetic": 10_000, "synthetic100k": 100_000}

DYNAMO_CHILD = r"""
import json, resource, sys, time
from dynamo.replay import run_synthetic_trace_replay, run_trace_replay
scenario, trace = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if scenario == "trace":
    report = run_trace_replay(trace, trace_format="mooncake", trace_block_size=512, num_workers=8,
                              router_mode="round_robin", extra_engine_args={"engine": {"block_size": 512}})
else:
    report = run_synthetic_trace_replay(1000, 100, int(sys.argv[3]), replay_concurrency=int(sys.argv[4]), num_workers=1)
wall = time.perf_counter() - start
s = report.summary
print(json.dumps({"wall_s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "completed": s["completed_requests"], "duration_s": s["duration_ms"] / 1000,
    "ttft_mean_ms": s["mean_ttft_ms"], "ttft_p50_ms": s["median_ttft_ms"], "ttft_p99_ms": s["p99_ttft_ms"],
    "tpot_mean_ms": s["mean_tpot_ms"], "tpot_p50_ms": s["median_tpot_ms"],
    "output_tok_s": s["output_throughput_tok_s"], "cache_hit_ratio": s["prefix_cache_reused_ratio"]}))
"""


class InstantEndpoint:
    """Answers every request 1 ms (virtual) after it is sent, in two chunks: no engine at all."""

    api = "completions"
    preferred_prompt_format = "keyed"
    name = "instant"
    gpus = 1

    async def open(self, clock, concurrency) -> None:
        self.clock = clock

    async def close(self) -> None:
        pass

    async def idle_warning(self) -> None:
        return None

    async def send(self, request, response) -> None:
        count = int(request.body["max_tokens"])
        response.sent_s = self.clock.now()
        await self.clock.sleep(0.001)
        response.end_s = self.clock.now()
        response.chunk_times, response.chunk_tokens = [response.sent_s + 0.0005, response.end_s], [1, count - 1]
        response.prompt_tokens, response.cached_tokens, response.completion_tokens = (
            len(request.body["prompt"]),
            0,
            count,
        )


def scenario_inputs(scenario: str, profile: Any, concurrency: int = 100) -> tuple[Any, Any, Any, Any]:
    """(profile, workload, cluster, settings) of ``scenario`` (module docstring) from the bundled
    ``profile``: what :func:`ours` times and ``bench/sim_digest.py`` hashes. ``concurrency``:
    the synthetic scenarios'."""
    import dataclasses

    from pytest_llmreplay import ReplaySettings
    from pytest_llmreplay.sim.cluster import ClusterConfig
    from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate

    if scenario == "trace":
        from pytest_llmreplay.workloads.formats import load_workload  # every format's loader: the trace's only

        profile = dataclasses.replace(profile, engine=dataclasses.replace(profile.engine, block_size=512))
        return profile, load_workload(TRACE), ClusterConfig(engines=8, router="round_robin"), ReplaySettings()
    spec = SyntheticSpec(sessions=SYNTHETIC_REQUESTS[scenario], input_tokens=1000, output_tokens=100, seed=1)
    return profile, generate(spec), ClusterConfig(), ReplaySettings(concurrency=concurrency)


def ours(scenario: str, floor: bool = False, concurrency: int = 100) -> dict:
    """One timed run of ours in this process (call it in a fresh one); ``floor``: with
    :class:`InstantEndpoint` instead of the simulator; ``concurrency``: the synthetic scenarios'."""
    import resource
    import time

    from pytest_llmreplay import PromptFactory, Result, VirtualClock, load_tokenizer
    from pytest_llmreplay.replayer.driver import replay
    from pytest_llmreplay.sim.endpoint import SimEndpoint
    from pytest_llmreplay.sim.profile import load_profile

    prompts = PromptFactory(load_tokenizer(None))
    profile = load_profile("dynamo-mocker-polynomial")
    start = time.perf_counter()
    profile, workload, cluster, settings = scenario_inputs(scenario, profile, concurrency)
    endpoint = InstantEndpoint() if floor else SimEndpoint(profile, prompts, cluster=cluster)
    result = Result(replay(workload, endpoint, prompts, settings, clock=VirtualClock()))
    summary = result.summary
    wall = time.perf_counter() - start
    engines = {"prefix_cache_hits_total": 0, "prefix_cache_queries_total": 1} if floor else endpoint.cluster.stats()
    return {
        "wall_s": wall,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "completed": len(result.ok),
        "duration_s": result.run.duration_s,
        "ttft_mean_ms": summary["ttft"]["mean"] * 1000,
        "ttft_p50_ms": summary["ttft"]["p50"] * 1000,
        "ttft_p99_ms": summary["ttft"]["p99"] * 1000,
        "tpot_mean_ms": summary["tpot"]["mean"] * 1000,
        "tpot_p50_ms": summary["tpot"]["p50"] * 1000,
        "output_tok_s": summary["output_throughput"]["overall"],
        "cache_hit_ratio": engines["prefix_cache_hits_total"] / engines["prefix_cache_queries_total"],
    }


def child(command: list[str]) -> dict:
    """Run one child; its report plus the whole process's wall time (start to exit, interpreter
    and imports included) and CPU time (user + system, from the child's rusage)."""
    import os
    import subprocess
    import time

    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{stderr[-2000:]}")
    found = json.loads(stdout.strip().splitlines()[-1])
    return {"process_wall_s": wall, "process_cpu_s": usage.ru_utime + usage.ru_stime, **found}


def child_main(argv: list[str]) -> None:
    """The ours child (``[--concurrency N] --child SCENARIO [--floor]``, as the harness starts it):
    its arguments read by hand, so that argparse and the harness's other modules are not
    imported into the process being timed."""
    from pytest_llmreplay.cli.process import single_threaded_blas

    single_threaded_blas()  # as the llmreplay command sets up the process it owns
    concurrency = int(argv[argv.index("--concurrency") + 1]) if "--concurrency" in argv else 100
    print(json.dumps(ours(argv[argv.index("--child") + 1], "--floor" in argv, concurrency)))


def main() -> None:
    if "--child" in sys.argv:
        child_main(sys.argv[1:])
        return
    import argparse
    import compileall

    from machine import machine_line

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--dynamo-python", metavar="PATH", help="python of a venv with ai-dynamo 1.6.1 (omit: ours only)"
    )
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument(
        "--concurrency", type=int, default=100, help="sessions in flight in the synthetic scenarios (default 100)"
    )
    args = parser.parse_args()
    # ours from bytecode, as an installed wheel runs (pip compiles it; Dynamo's is): an editable
    # install under PYTHONDONTWRITEBYTECODE would compile every module in every child
    compileall.compile_dir(ROOT / "pytest_llmreplay", quiet=1, force=False)
    ours_child = [sys.executable, __file__, "--concurrency", str(args.concurrency), "--child"]
    print(f"{machine_line()}; runs: {args.runs} each, fresh processes, alternating.\n")
    for scenario in args.scenarios:
        runs: dict[str, list[dict]] = {"llmreplay": [], "Dynamo 1.6.1": [], "floor": []}
        for _ in range(args.runs):
            runs["llmreplay"].append(child([*ours_child, scenario]))
            if args.dynamo_python:
                count = str(SYNTHETIC_REQUESTS.get(scenario, 0))
                runs["Dynamo 1.6.1"].append(
                    child([args.dynamo_python, "-c", DYNAMO_CHILD, scenario, str(TRACE), count, str(args.concurrency)])
                )
            if scenario in SYNTHETIC_REQUESTS:
                runs["floor"].append(child([*ours_child, scenario, "--floor"]))
        report(scenario, {name: found for name, found in runs.items() if found})


def report(scenario: str, runs: dict[str, list[dict]]) -> None:
    """Medians per tool, and each of ours divided by Dynamo's when Dynamo ran."""
    import statistics

    names = list(runs)
    median = {name: {key: statistics.median(r[key] for r in found) for key in found[0]} for name, found in runs.items()}
    peer = "Dynamo 1.6.1" if "Dynamo 1.6.1" in runs else None
    ratios = [name for name in names if peer and name != peer]
    print(f"### {scenario}\n")
    print("| figure | " + " | ".join(names) + "".join(f" | {name}/Dynamo" for name in ratios) + " |")
    print("|---|" + "---:|" * (len(names) + len(ratios)))
    for key in median[names[0]]:
        cells = [f"{median[name][key]:,.4g}" for name in names]
        cells += [f"{median[name][key] / median[peer][key]:.2f}x" if median[peer][key] else "" for name in ratios]
        print(f"| {key} (median) | " + " | ".join(cells) + " |")
    for name, found in runs.items():
        for key in ("process_wall_s", "process_cpu_s"):
            print(f"\n{name} {key} per run: " + ", ".join(f"{r[key]:.3f}" for r in found))
    print()


if __name__ == "__main__":
    main()
