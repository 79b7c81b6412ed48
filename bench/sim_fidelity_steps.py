"""The steps of a measured vLLM run, from its once-a-second timeseries and per-request data,
against the simulator's timing model: what ``bench/sim_fidelity.py`` reports on each run's steps
(decode-only at full batch, every batch size in steady seconds) and on the KV blocks its running
requests held at once. ``real`` is :func:`sim_fidelity.load_vllm`'s dict (its ``columns``,
``meta`` and ``run``)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from pytest_llmreplay.sim.roofline import RooflineTiming
from pytest_llmreplay.sim.timing import Batch


def full_batch_steps(real: dict[str, Any], timing: Any, seqs: int) -> list[dict[str, Any]]:
    """vLLM's steps in the seconds of its once-a-second timeseries with ``seqs`` requests running,
    each with the timing model's step for the same batch.

    Each running request gets one token per step, so steps per second = generation throughput /
    running, a step = 1 / that, and its prefill tokens = prompt throughput / steps per second
    (one fresh chunk: context = the chunk). The decoding requests' KV context at the middle of
    that second comes from the per-request data (input + tokens generated so far, linear between
    first and last token). The timeseries' t counts from the run's start, which the meta puts
    within 0.1 s of the first arrival; the first queued_ts stands for it. A data-parallel run's
    timeseries sums its dp engines (``seqs`` each): one engine's batch is a dp-th of the requests
    and their KV; of a MoE model, whose ranks step in lockstep (sim/lockstep.py), the step is
    the prefilling rank's, which holds the second's whole chunk; of a dense model, each engine a
    dp-th of the prompt tokens too (equal loads assumed).
    """
    col = real["columns"]
    dp = max(1, int(real["meta"].get("engine_kwargs", {}).get("data_parallel_size") or 1))
    chunk_share = 1 if getattr(timing, "model", None) is not None and timing.model.experts else dp
    out = []
    for row in timeseries_rows(real):
        if row["running"] != seqs * dp or row["gen_throughput"] <= 0:
            continue
        now = col["queued_ts"].min() + row["t"] - 0.5
        active = (col["scheduled_ts"] <= now) & (col["last_token_ts"] > now)
        progress = np.clip((now - col["first_token_ts"]) / (col["last_token_ts"] - col["first_token_ts"]), 0, 1)
        generated = np.where(now >= col["first_token_ts"], 1 + progress * (col["output_toks"] - 1), 0)
        kv = int(((col["input_toks"] + generated) * active).sum()) // dp
        step = row["running"] / row["gen_throughput"]
        chunk = int(round(row["prompt_throughput"] * step / chunk_share))
        batch = Batch(chunk, chunk, int(active.sum()) // dp - (1 if chunk else 0), kv, 0.0)
        out.append(
            {"t": row["t"], "prefill": chunk, "batch": batch, "measured": step, "predicted": timing.iteration_s(batch)}
        )
    return out


def timeseries_rows(real: dict[str, Any]) -> list[dict[str, float]]:
    """The measured run's once-a-second timeseries, one dict of floats per second."""
    lines = real["run"].timeseries.read_text().splitlines()
    header = lines[0].split(",")
    return [dict(zip(header, map(float, line.split(",")), strict=True)) for line in lines[1:] if line.strip()]


def kv_held_check(real: dict[str, Any], block_size: int, num_gpu_blocks: int) -> str:
    """The KV blocks vLLM's running requests held at once, from its per-request data, against the
    simulated cache: at the middle of each second whose timeseries ``running`` equals the requests
    between scheduled and last token (so none of them was preempted then), each holds
    ceil((input + tokens generated so far) / block_size) blocks, its output linear between first
    and last token (as ``full_batch_steps``); summed over the requests and divided over the
    data-parallel engines. Prefix sharing is ignored (it would lower the sum). The run's cache
    held at least the largest such sum."""
    col = real["columns"]
    dp = max(1, int(real["meta"].get("engine_kwargs", {}).get("data_parallel_size") or 1))
    held = []
    for row in timeseries_rows(real):
        now = col["queued_ts"].min() + row["t"] - 0.5
        active = (col["scheduled_ts"] <= now) & (col["last_token_ts"] > now)
        if not active.any() or int(active.sum()) != int(row["running"]):
            continue
        progress = np.clip((now - col["first_token_ts"]) / (col["last_token_ts"] - col["first_token_ts"]), 0, 1)
        generated = np.where(now >= col["first_token_ts"], 1 + progress * (col["output_toks"] - 1), 0)
        held.append(int(np.ceil((col["input_toks"] + generated)[active] / block_size).sum()) // dp)
    if not held:
        return "- no second of vLLM's timeseries without preempted requests to count its KV blocks in."
    return (
        f"- KV blocks vLLM's running requests held at once (per-request data, {len(held)} seconds with none "
        f"preempted): median {np.median(held):,.0f}, max {max(held):,} per engine; the simulated cache has "
        f"{num_gpu_blocks:,} blocks."
    )


STEP_BINS = ((0, 1), (1, 100), (100, 250), (250, 600), (600, 10**9))  # prefill tokens a step, any batch


def step_check(real: dict[str, Any], timing: Any) -> str:
    """vLLM's steps at every batch size its timeseries shows (``full_batch_steps`` for each
    running count), against the timing model at the same batch: the median of predicted /
    measured - 1 for the steps of each bin of prefill tokens a step. Only steady seconds count,
    those whose neighbours show the same running count: ``running`` is sampled at the tick while
    the throughputs are the second's, so a second whose batch grew or shrank gives a step that
    is not one (3 running at 5.2 ms a step would read 16 GB of weights at 3 TB/s)."""
    dp = max(1, int(real["meta"].get("engine_kwargs", {}).get("data_parallel_size") or 1))
    rows = timeseries_rows(real)
    steady = {
        rows[i]["t"]
        for i in range(1, len(rows) - 1)
        if rows[i - 1]["running"] == rows[i]["running"] == rows[i + 1]["running"]
    }
    counts = sorted({int(row["running"]) // dp for row in rows if row["running"] >= dp})
    steps = [step for seqs in counts for step in full_batch_steps(real, timing, seqs) if step["t"] in steady]
    parts = []
    for low, high in STEP_BINS:
        chosen = [step for step in steps if low <= step["prefill"] < high]
        if chosen:
            errors = [step["predicted"] / step["measured"] - 1 for step in chosen]
            running = statistics.median(step["batch"].decode_seqs + (1 if step["prefill"] else 0) for step in chosen)
            what = "decode only" if high == 1 else f"{low}-{high - 1 if high < 10**9 else 'more'} prefill tokens"
            measured = statistics.median(step["measured"] for step in chosen) * 1000
            parts.append(
                f"{what}: {statistics.median(errors):+.1%} ({len(chosen)} s, ~{running:.0f} running, {measured:.1f} ms)"
            )
    if not parts:
        return "- no steady second in vLLM's timeseries to compare the timing model's step with."
    return (
        f"- steps of every batch size in vLLM's steady seconds, the timing model's step against vLLM's "
        f"(median error): {'; '.join(parts)}."
    )


def decode_step_check(real: dict[str, Any], roofline: RooflineTiming, seqs: int) -> str:
    """vLLM's decode-only step at full batch (seconds without prompt throughput, ``full_batch_steps``) against the roofline."""
    chosen = [step for step in full_batch_steps(real, roofline, seqs) if not step["prefill"]]
    if not chosen:
        return "- no decode-only full-batch second in vLLM's timeseries to compare the decode step with."
    measured = [step["measured"] for step in chosen]
    predicted = [step["predicted"] for step in chosen]
    implied = []
    for step in chosen:
        parts = roofline.breakdown(step["batch"])
        implied.append(roofline.mbu * parts["memory_s"] / (step["measured"] - parts["overhead_s"]))
    ticks = ", ".join(f"{step['t']:g}" for step in chosen)
    return (
        f"- decode-only steps at {seqs} running (vLLM timeseries seconds t = {ticks}): "
        f"measured {np.mean(measured) * 1000:.1f} ms a step (running / generation tok/s), roofline at the same KV context "
        f"{np.mean(predicted) * 1000:.1f} ms ({np.mean(predicted) / np.mean(measured) - 1:+.1%}); "
        f"the memory traffic the roofline counts would need mbu {np.mean(implied):.2f} of the profile's bandwidth to fit."
    )
