"""How fast the loaders read the real traces, against the floor of merely parsing them.

For each trace in ../shared/data: the median of RUNS wall times of ``load_workload`` (parse,
validate every field, build the canonical model) and of the peer, a bare parse of the same file
in the same process (``json.loads`` per line, or ``csv.reader``), which validates nothing.
Prints a Markdown table; ratio = load / bare parse.

    python bench/load_workloads.py [RUNS]
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import time
from pathlib import Path

from pytest_llmreplay import load_workload

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TRACES = [
    "mooncake/conversation_trace.jsonl",
    "mooncake/synthetic_trace.jsonl",
    "llmservingsim/sharegpt-llama-3.1-8b-300-sps10.jsonl",
    "llmservingsim/workload_me2_01_mixed.jsonl",
    "azure/AzureLLMInferenceTrace_conv.csv",
    "trie/office_work_8k_slice.jsonl",
]


def bare_parse(path: Path) -> int:
    with open(path, encoding="utf-8", newline="") as stream:
        if path.suffix == ".csv":
            return sum(1 for _ in csv.reader(stream))
        return sum(1 for line in stream if json.loads(line))


def median_seconds(action, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(runs: int) -> None:
    print("| trace | lines | load_workload (ms) | bare parse (ms) | ratio |\n|---|---:|---:|---:|---:|")
    for name in TRACES:
        path = DATA / name
        lines = bare_parse(path)
        load = median_seconds(lambda path=path: load_workload(path), runs)
        bare = median_seconds(lambda path=path: bare_parse(path), runs)
        print(f"| {name} | {lines:,} | {load * 1000:.0f} | {bare * 1000:.0f} | {load / bare:.1f}x |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
