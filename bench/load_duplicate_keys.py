"""What refusing duplicate JSON keys costs ``load_workload`` on the 12k-line Mooncake trace.

Three ways of reading the JSONL lines, each the whole ``load_workload`` (parse, validate, build):
``no check`` (``json.loads`` only: what main did before duplicate keys were refused), ``shipped``
(``iter_json_lines``: ``json.loads``, then a re-parse with the duplicate-key hook only when the
line has more colons than its object has keys) and ``hook on every line`` (the rejected first
version). Interleaved in one process, in rotating order, so machine load hits all three alike;
prints the median of RUNS runs of each.

    python bench/load_duplicate_keys.py [RUNS]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from pytest_llmreplay.workloads.formats import _fields, load_workload, mooncake
from pytest_llmreplay.workloads.formats._text import text_lines

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"


def no_check(path: Path):
    for number, text in text_lines(path):
        if text.strip():
            yield number, json.loads(text)


def hook_on_every_line(path: Path):
    for number, text in text_lines(path):
        if text.strip():
            yield number, json.loads(text, object_pairs_hook=_fields.unique_keys)


def load_with(reader) -> None:
    mooncake.iter_json_lines = reader
    try:
        load_workload(TRACE)
    finally:
        mooncake.iter_json_lines = _fields.iter_json_lines


def main(runs: int) -> None:
    variants = {"no check": no_check, "shipped": _fields.iter_json_lines, "hook on every line": hook_on_every_line}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for reader in variants.values():
        load_with(reader)  # warm: imports, file cache
    for run in range(runs):
        names = list(variants)
        for name in names[run % 3 :] + names[: run % 3]:
            start = time.perf_counter()
            load_with(variants[name])
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["no check"])
    print("| reader | load_workload (ms) | vs no check |\n|---|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1000:.0f} | {statistics.median(values) / base - 1:+.0%} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
