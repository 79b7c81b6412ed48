"""The replay on Ray workers (pytest_llmreplay/replayer/workers.py) against one process, on this machine.

One mock server (``tests/mockserver.py --envelope``, zero latency, a process of its own) serves
the session. Figures, each the median of ``--runs`` rounds, the configurations interleaved per
round so that a shared machine's load falls on all alike:

- **Throughput**, closed loop (concurrency 64, ``--requests`` one-turn requests, 128 input and 64
  output tokens): requests/s, and client CPU-seconds per 1,000 requests, for 1 process (today's
  path: ``Replay.run`` here), 1 Ray worker and 2 Ray workers. Client CPU = utime + stime of this
  process and every process it started (Ray's GCS, raylet and workers) except the mock, read
  from /proc before and after the run; the Ray instance and its actors start before (once).
  Coordination overhead = CPU per request on 1 Ray worker / CPU per request in 1 process - 1.
- **Schedule fidelity**, open loop: constant arrivals at 200 requests/s (``--lag-requests``),
  schedule lag p50/p99 (sent - scheduled, every request) with 1 process and with 2 workers; the
  merged send times against the planned ones: the rate of the sent stream and the largest gap
  between consecutive sends.

    .venv/bin/python bench/ray_workers.py [--runs 5] [--requests 3000] [--lag-requests 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_throughput import TICK, Mock, busy_cpu_s, free_port  # noqa: E402

from pytest_llmreplay.metrics.result import Result  # noqa: E402
from pytest_llmreplay.replayer.driver import Replay  # noqa: E402
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint  # noqa: E402
from pytest_llmreplay.replayer.plan import ReplaySettings  # noqa: E402
from pytest_llmreplay.replayer.workers import RayWorkers, start_ray  # noqa: E402
from pytest_llmreplay.workloads.prompts import PromptFactory  # noqa: E402
from pytest_llmreplay.workloads.tokenizer import load_tokenizer  # noqa: E402
from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload  # noqa: E402


def descendants(root: int) -> list[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        found += children
        frontier += children
    return found


def client_cpu_s(exclude: int) -> dict[int, float]:
    """utime + stime of this process and its descendants but ``exclude`` (the mock), per pid."""
    cpu = {}
    for pid in [os.getpid()] + descendants(os.getpid()):
        if pid == exclude:
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICK
    return cpu


def flat(requests: int, spacing: float) -> Workload:
    return Workload(
        tuple(Session(f"r{i}", i * spacing, (Turn(128, 64, Synthetic()),)) for i in range(requests)), "bench"
    )


def measure(replay_once, mock: Mock) -> dict[str, float]:
    before, busy = client_cpu_s(mock.process.pid), busy_cpu_s()
    run = replay_once()
    after, busy = client_cpu_s(mock.process.pid), busy_cpu_s() - busy
    cpu = sum(after[pid] - before.get(pid, 0.0) for pid in after)
    result = Result(run)
    summary = result.summary
    start, end = result.span
    sent = sorted(r.sent_s for r in run.records if r.sent_s is not None)
    return {
        "ok": summary["requests"]["ok"],
        "req_s": summary["requests"]["ok"] / (end - start),
        "cpu_per_1k": cpu / summary["requests"]["ok"] * 1000,
        "lag_p50_ms": summary["schedule_lag"]["p50"] * 1e3,
        "lag_p99_ms": summary["schedule_lag"]["p99"] * 1e3,
        "sent_rate": (len(sent) - 1) / (sent[-1] - sent[0]),
        "max_gap_ms": max(b - a for a, b in pairwise(sent)) * 1e3,
        "machine_busy_cores": busy / run.duration_s if run.duration_s else 0.0,
    }


def joined(runs: list[dict], key: str, spec: str) -> str:
    return ", ".join(format(run[key], spec) for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--lag-requests", type=int, default=1000)
    args = parser.parse_args()
    prompts = PromptFactory(load_tokenizer(None))
    closed, opened = (
        ReplaySettings(concurrency=64, check_idle=False),
        ReplaySettings(mode="timestamps", check_idle=False),
    )
    throughput, lag = flat(args.requests, 0.0), flat(args.lag_requests, 1 / 200)
    with tempfile.TemporaryDirectory() as tmp:
        mock = Mock(free_port(), Path(tmp) / "mock.log")
        try:
            endpoint = lambda: HTTPEndpoint(mock.url, api="completions", extra_body={"ignore_eos": True})  # noqa: E731
            start_ray(None, 3)  # one local instance (3 CPUs) for both sets of workers, as replayer/workers.py starts it
            with RayWorkers(1) as one_worker, RayWorkers(2) as two_workers:
                configs = {
                    "1 process": lambda workload, settings: Replay(workload, endpoint(), prompts, settings).run(),
                    "1 Ray worker": lambda workload, settings: one_worker.replay(
                        workload, endpoint(), prompts, settings
                    ),
                    "2 Ray workers": lambda workload, settings: two_workers.replay(
                        workload, endpoint(), prompts, settings
                    ),
                }
                results: dict[str, list[dict]] = {
                    f"{name} {kind}": [] for name in configs for kind in ("closed", "open")
                }
                for round_ in range(args.runs):
                    for name, run in configs.items():
                        results[f"{name} closed"].append(measure(lambda run=run: run(throughput, closed), mock))
                        if name != "1 Ray worker":
                            results[f"{name} open"].append(measure(lambda run=run: run(lag, opened), mock))
                    print(f"round {round_ + 1}/{args.runs} done", file=sys.stderr)
        finally:
            mock.stop()
            import ray

            ray.shutdown()
    med = lambda key, name: statistics.median(r[key] for r in results[name])  # noqa: E731
    print(f"Closed loop, concurrency 64, {args.requests} requests of 128 -> 64 tokens; median of {args.runs}\n")
    print("| client | req/s | client CPU-s / 1k req | machine busy cores | all runs req/s |\n|---|---|---|---|---|")
    for name in configs:
        key = f"{name} closed"
        print(
            f"| {name} | {med('req_s', key):.0f} | {med('cpu_per_1k', key):.3f} | {med('machine_busy_cores', key):.2f} | {joined(results[key], 'req_s', '.0f')} |"
        )
    base, ray_one = med("cpu_per_1k", "1 process closed"), med("cpu_per_1k", "1 Ray worker closed")
    print(f"\nCoordination overhead (1 Ray worker vs 1 process, CPU per request): {100 * (ray_one / base - 1):+.1f}%")
    print(f"\nOpen loop, constant 200 req/s, {args.lag_requests} requests; median of {args.runs}\n")
    print(
        "| client | lag p50 ms | lag p99 ms | sent stream req/s | largest send gap ms | all runs p99 ms |\n|---|---|---|---|---|---|"
    )
    for name in ("1 process", "2 Ray workers"):
        key = f"{name} open"
        print(
            f"| {name} | {med('lag_p50_ms', key):.2f} | {med('lag_p99_ms', key):.2f} | {med('sent_rate', key):.1f} | {med('max_gap_ms', key):.2f} | "
            f"{joined(results[key], 'lag_p99_ms', '.2f')} |"
        )


if __name__ == "__main__":
    main()
