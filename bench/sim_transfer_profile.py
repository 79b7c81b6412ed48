"""The simulator profile of a vLLM CPU model on this machine from nothing that was served
(``bench/sim_transfer.py``'s "uncalibrated" profiles, its module doc): the model's figures from its
``config.json`` and ``model.safetensors``, ``peak_flops`` and ``memory_bandwidth`` from
micro-benchmarks in the engine's own torch on the core vLLM binds its worker to
(:data:`MICRO_BENCHMARK`), the engine settings ``scripts/setup_vllm_cpu.py`` gives vLLM."""

from __future__ import annotations

import json
import math
import struct
import subprocess
from pathlib import Path
from typing import Any

from machine import cpu_model

WORKER_CORE = 0  # vLLM's CPU build binds its worker to core 0 of a 2-core machine ("core ids=[0]" in its log)
BLOCK_SIZE, MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS = 32, 16, 2048
BASE_TIMING = {"kind": "roofline", "mfu": 0.5, "mbu": 0.7, "overhead_ms": 1.0}
MICRO_BENCHMARK = r"""
import json, os, statistics, time, torch
os.sched_setaffinity(0, {%(core)d}); torch.set_num_threads(1)
a, b = torch.randn(512, 512, dtype=torch.float32), torch.randn(512, 1536, dtype=torch.float32)
x16, w16 = torch.randn(512, 512, dtype=torch.bfloat16), torch.randn(1536, 512, dtype=torch.bfloat16)
x = torch.empty(128 * 1024 * 1024, dtype=torch.bfloat16); y = torch.empty_like(x)
def timed(work, repeats):
    work(); times = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(repeats): work()
        times.append((time.perf_counter() - t) / repeats)
    return statistics.median(times)
fp32 = 2 * 512 * 512 * 1536 / timed(lambda: torch.matmul(a, b), 20)
bf16 = 2 * 512 * 512 * 1536 / timed(lambda: torch.nn.functional.linear(x16, w16), 20)
flops = max(fp32, bf16)
bandwidth = 2 * x.numel() * x.element_size() / timed(lambda: y.copy_(x), 3)
print(json.dumps({"peak_flops": flops, "memory_bandwidth": bandwidth}))
"""


def micro_benchmarks(python: str) -> dict[str, float]:
    """fp32 matmul FLOP/s and copy bandwidth on the worker's core, in the engine's torch (module doc)."""
    done = subprocess.run(
        [python, "-c", MICRO_BENCHMARK % {"core": WORKER_CORE}], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def safetensors_parameters(path: Path) -> int:
    """Parameters in a ``.safetensors`` file, from its header (8-byte length, then JSON)."""
    with open(path, "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")


def base_profile(model_dir: Path, hardware: dict[str, float], kv_tokens: int) -> dict[str, Any]:
    """The roofline profile of ``model_dir`` on this machine's worker core (module doc: nothing served)."""
    config = json.loads((model_dir / "config.json").read_text())
    return {
        "name": f"{model_dir.name}-vllm-cpu",
        "description": "A random-weight Llama of the engine tests on vLLM 0.32's CPU build, one worker core of this machine.",
        "model": {
            "name": model_dir.name,
            "parameters": safetensors_parameters(model_dir / "model.safetensors"),
            "layers": config["num_hidden_layers"],
            "hidden_size": config["hidden_size"],
            "heads": config["num_attention_heads"],
            "kv_heads": config["num_key_value_heads"],
            "head_dim": config["head_dim"],
            "vocab_size": config["vocab_size"],
            "max_position_embeddings": config["max_position_embeddings"],
            "tie_word_embeddings": config["tie_word_embeddings"],
            "dtype_bytes": 2,
        },
        "hardware": {
            "name": f"{cpu_model()}, one core",
            **hardware,
            "memory_bytes": 1 << 34,
            "gpus": 1,
            "tensor_parallel": 1,
        },
        "engine": {
            "block_size": BLOCK_SIZE,
            "num_gpu_blocks": kv_tokens // BLOCK_SIZE,
            "max_num_seqs": MAX_NUM_SEQS,
            "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
        },
        "timing": dict(BASE_TIMING),
        "sources": [
            f"{model_dir}/config.json and model.safetensors",
            "peak_flops, memory_bandwidth: bench/sim_transfer.py's micro-benchmarks on the worker's core",
            "engine: scripts/setup_vllm_cpu.py's command; max_num_batched_tokens 2048 is vLLM's CPU default for the API server; KV blocks from vLLM's log",
        ],
    }
