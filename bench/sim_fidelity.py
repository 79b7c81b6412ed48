"""How close the offline simulator, with a profile built from public specs only, gets to a real vLLM run.

Ground truth: LLMServingSim's public benchmark of vLLM 0.19 serving Llama-3.1-8B (bf16) on one
RTX PRO 6000 (``../shared/data/llmservingsim/bench/RTXPRO6000_Llama-3.1-8B_*``), replaying the
300-request ShareGPT trace ``../shared/data/llmservingsim/sharegpt-llama-3.1-8b-300-sps10.jsonl``
(10 req/s, Llama-3 token ids, exact output lengths). The simulator replays the same trace through
``SimEndpoint`` on the virtual clock with the bundled ``llama-3.1-8b-rtx-pro-6000`` profile, as
it ships: nothing here tunes it.

Definitions (both sides measured from the request's arrival into the engine):

- vLLM: TTFT = first_token_ts - queued_ts; TPOT = (last_token_ts - first_token_ts) / (output - 1);
  E2E latency = last_token_ts - queued_ts; queue = scheduled_ts - queued_ts;
  prefill = first_token_ts - scheduled_ts (per the data README).
- ours: the records of the replay (``pytest_llmreplay.metrics.result``): TTFT = first token - sent,
  TPOT = (latency - TTFT) / (output - 1), latency = end - sent, queue = ``queue_s`` (engine
  admission - arrival), prefill = first token - (sent + queue). The replay sends each request at
  its trace arrival time (no schedule lag on the virtual clock) and the engine admits it at the
  next iteration boundary, as vLLM's scheduler does.
- span: first arrival to last token (vLLM: min queued_ts to max last_token_ts; ours: the
  result's span, first sent to last ended); throughputs are totals over that span.

Percentiles are numpy's linear interpolation on both sides (as ``vllm bench serve`` and our
metrics). Error = (simulated - measured) / measured. The issue's acceptance criterion:
|error| <= 15% for TPOT mean and TTFT p50. The last column repeats LLMServingSim's own simulator's
error from its ``*_validation_summary.txt``, for context.

Per part (``parts_report``), both sides from the request's arrival at the server: vLLM's
``arrival_time`` (the front end's wall clock) is put on the engine's monotonic clock by the
smallest ``queued_ts - arrival_time`` of the run (the hop of a request that found the engine
idle), so vLLM's parts are: arrival to ``queued_ts`` (the front end's hop beyond its fastest, and
the wait for the iteration in progress: vLLM adds a request to its scheduler between
iterations), ``queued_ts`` to ``scheduled_ts`` (the queue), ``scheduled_ts`` to the first token
(the prefill, and under async scheduling the batch in flight when it was scheduled), then the
decode (TPOT). Ours: arrival to admission (``queue_s``: the wait for the iteration boundary and
the queue), admission to first token, TPOT. The prefill is also split by load: requests vLLM
scheduled at once (``scheduled_ts - queued_ts`` < 1 ms) and the queued ones, each with a
least-squares line against prompt length. Steps at full batch come from vLLM's once-a-second
timeseries (``full_batch_steps``), against the profile's timing model at the same batch.

The simulator runs RUNS times (fresh endpoint each time); the wall time is the median of the
``replay()`` calls (the trace is loaded once, outside the timing); every run must give the same
summary (the virtual clock is deterministic).

    .venv/bin/python bench/sim_fidelity.py [--runs 3] [--profile NAME_OR_FILE] [--write FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from machine import machine_line
from sim_fidelity_runs import PROFILE, VISIBLE, MeasuredRun, add_run_option, chosen_run
from sim_fidelity_steps import decode_step_check, full_batch_steps, kv_held_check, step_check

from pytest_llmreplay import PromptFactory, ReplaySettings, Result, VirtualClock, load_tokenizer, load_workload
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.profile import Profile, load_profile
from pytest_llmreplay.sim.roofline import RooflineTiming
from pytest_llmreplay.sim.timing import Batch

STATS = ("mean", "p50", "p90", "p95", "p99")
LIMIT = 0.15  # the acceptance bound on |error|
ACCEPTANCE = (("tpot", "mean"), ("ttft", "p50"))


def stats(values: Any) -> dict[str, float]:
    array = np.asarray(list(values), dtype=np.float64)
    out = {"mean": float(array.mean())}
    for name in STATS[1:]:
        out[name] = float(np.percentile(array, float(name[1:])))
    return out


def peak_overlap(starts: np.ndarray, ends: np.ndarray) -> int:
    """Most intervals [start, end) open at once (ends sort before starts at equal times)."""
    events = sorted([(float(t), 1) for t in starts] + [(float(t), -1) for t in ends], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


# ---------------------------------------------------------------------------- the measured run


def read_trace_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a trace file, gzip-compressed (``.gz``) or not."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_vllm(run: MeasuredRun = VISIBLE) -> dict[str, Any]:
    """The measured run's per-request figures, checked request by request against its trace."""
    trace_lines = read_trace_lines(run.trace)
    path = run.requests
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if len(rows) != len(trace_lines):
        sys.exit(f"{path}: {len(rows)} requests, the trace has {len(trace_lines)}")
    if any(row["request_id"] != f"bench-{i}" for i, row in enumerate(rows)):
        sys.exit(f"{path}: request ids are not bench-0..bench-{len(rows) - 1} in order")
    col = {
        key: np.array([row[key] for row in rows], dtype=np.float64)
        for key in (
            "input_toks",
            "output_toks",
            "arrival_time",
            "queued_ts",
            "scheduled_ts",
            "first_token_ts",
            "last_token_ts",
        )
    }
    out_toks = col["output_toks"]
    trace_in = np.array([line["input_toks"] for line in trace_lines])
    trace_out = np.array([line["output_toks"] for line in trace_lines])
    trace_arrival = np.array([line["arrival_time_ns"] for line in trace_lines]) / 1e9
    queued = col["queued_ts"]
    arrived = col["arrival_time"] + (queued - col["arrival_time"]).min()  # on the engine's clock (module doc)
    metrics = {
        "ttft": col["first_token_ts"] - queued,
        "tpot": (col["last_token_ts"] - col["first_token_ts"]) / (out_toks - 1),
        "latency": col["last_token_ts"] - queued,
        "queue": col["scheduled_ts"] - queued,
        "prefill": col["first_token_ts"] - col["scheduled_ts"],
        "ttft_from_arrival": col["first_token_ts"] - arrived,
        "latency_from_arrival": col["last_token_ts"] - arrived,
        "to_scheduled": col["scheduled_ts"] - arrived,
        "to_queued": queued - arrived,
    }
    span = float(col["last_token_ts"].max() - queued.min())
    return {
        "metrics": metrics,
        "span": span,
        "requests": len(rows),
        "output_tokens": float(out_toks.sum()),
        "input_tokens": float(col["input_toks"].sum()),
        "input_mismatches": int((col["input_toks"] != trace_in).sum()),
        "output_mismatches": int((out_toks != trace_out).sum()),
        "single_token_outputs": int((out_toks <= 1).sum()),
        # arrival into the engine vs the trace's schedule, both relative to the first request
        "arrival_lag": (queued - queued[0]) - (trace_arrival - trace_arrival[0]),
        "fcfs": bool(np.array_equal(np.argsort(col["scheduled_ts"], kind="stable"), np.argsort(queued, kind="stable"))),
        "peak_running": peak_overlap(col["scheduled_ts"], col["last_token_ts"]),
        "peak_waiting": peak_overlap(queued, col["scheduled_ts"]),
        "input": col["input_toks"],
        "columns": col,
        "meta": json.loads(run.meta.read_text()),
        "run": run,
    }


def load_their_errors(run: MeasuredRun = VISIBLE) -> dict[tuple[str, str], float]:
    """LLMServingSim's own simulator errors (Diff%) from its validation summary, by (metric, stat)."""
    names = {"TTFT": "ttft", "TPOT": "tpot", "Latency": "latency"}
    stat_names = {"Mean": "mean", "Median": "p50", "P90": "p90", "P95": "p95", "P99": "p99"}
    out: dict[tuple[str, str], float] = {}
    if run.summary is None:
        return out
    for line in run.summary.read_text().splitlines():
        found = re.match(r"(\w+) (\w+)\s+[\d.]+\s+[\d.]+\s+([-+]?[\d.]+)%", line)
        if found and found[1] in names and found[2] in stat_names:
            out[(names[found[1]], stat_names[found[2]])] = float(found[3]) / 100
    return out


# ---------------------------------------------------------------------------- the simulated run


def simulate(workload, runs: int, profile_name: str | Profile = PROFILE) -> dict[str, Any]:
    """RUNS offline replays of ``workload`` on the profile (a name, a file or a :class:`Profile`)."""
    walls, summaries, last = [], [], None
    for _ in range(runs):
        profile = profile_name if isinstance(profile_name, Profile) else load_profile(profile_name)
        prompts = PromptFactory(load_tokenizer(None), seed=0)
        endpoint = SimEndpoint(profile, prompts)
        start = time.perf_counter()
        run = replay(workload, endpoint, prompts, ReplaySettings(), clock=VirtualClock())
        walls.append(time.perf_counter() - start)
        result = Result(run)
        summaries.append(json.dumps(result.summary, sort_keys=True, default=str))
        last = (profile, endpoint, run, result)
    profile, endpoint, run, result = last
    if run.settings.get("prompt_format") not in ("ids", "keyed"):  # keyed sends a trace's own ids as ids
        sys.exit(f"expected token-id prompts, the replay used {run.settings.get('prompt_format')!r}")
    ok = sorted(result.ok, key=lambda r: r.session_index)
    if len(ok) != len(run.records):
        bad = [r for r in run.records if r.status != "ok"]
        sys.exit(f"{len(bad)} simulated requests not ok, first: {bad[0].status} {bad[0].error}")
    metrics = {
        "ttft": np.array([r.first_token_s - r.sent_s for r in ok]),
        "tpot": np.array([(r.end_s - r.first_token_s) / (r.output_tokens - 1) for r in ok]),
        "latency": np.array([r.end_s - r.sent_s for r in ok]),
        "queue": np.array([r.queue_s for r in ok]),
        "prefill": np.array([r.first_token_s - (r.sent_s + r.queue_s) for r in ok]),
    }
    metrics["ttft_from_arrival"], metrics["to_scheduled"] = metrics["ttft"], metrics["queue"]
    metrics["latency_from_arrival"] = metrics["latency"]
    for name in ("ttft", "tpot", "latency", "queue"):  # the same figures as the library's own summary
        ours, theirs = stats(metrics[name]), result.summary[name]
        if any(not np.isclose(ours[k], theirs[k], rtol=1e-9) for k in STATS):
            sys.exit(f"{name}: per-record statistics {ours} differ from Result.summary {theirs}")
    admitted = np.array([r.sent_s + r.queue_s for r in ok])
    start, end = result.span
    return {
        "metrics": metrics,
        "summary": result.summary,
        "span": end - start,
        "requests": len(ok),
        "output_tokens": float(sum(r.output_tokens for r in ok)),
        "input_tokens": float(sum(r.prompt_tokens for r in ok)),
        "planned_output_mismatches": sum(r.output_tokens != r.planned_output_tokens for r in ok),
        "planned_prompt_mismatches": sum(r.prompt_tokens != r.planned_prompt_tokens for r in ok),
        "schedule_lag_max": max(r.sent_s - r.scheduled_s for r in ok),
        "virtual_duration": run.duration_s,
        "walls": walls,
        "deterministic": len(set(summaries)) == 1,
        "engine": endpoint.cluster.stats(),
        "peak_running": peak_overlap(admitted, np.array([r.end_s for r in ok])),
        "peak_waiting": peak_overlap(np.array([r.sent_s for r in ok]), admitted),
        "profile": profile,
        "warnings": list(run.warnings),
    }


# ---------------------------------------------------------------------------- report


def error(sim: float, real: float) -> float:
    return (sim - real) / real


def pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


def hardware_words(meta: dict[str, Any], profile: Profile) -> str:
    """'2 x NVIDIA RTX PRO 6000 ... (data parallel 2, expert parallel)' from a run's meta; from
    the profile's hardware where the meta names none (vLLM 0.19's metas do not)."""
    kwargs, hardware = meta.get("engine_kwargs", {}), meta.get("hardware")
    if not hardware:
        return profile.hardware.name if profile.hardware is not None else "the profile's hardware"
    layout = [
        f"{name} {kwargs[key]}"
        for key, name in (("tensor_parallel_size", "tensor parallel"), ("data_parallel_size", "data parallel"))
        if (kwargs.get(key) or 1) > 1
    ]
    if kwargs.get("enable_expert_parallel"):
        layout.append("expert parallel")
    return f"{hardware.get('device_count', 1)} x {hardware.get('device_name')}" + (
        f" ({', '.join(layout)})" if layout else ""
    )


def build_report(real: dict[str, Any], sim: dict[str, Any], their: dict[tuple[str, str], float]) -> str:
    lines = ["| metric | vLLM (measured) | simulated | error | LLMServingSim's error |", "|---|---:|---:|---:|---:|"]
    errors: dict[tuple[str, str], float] = {}
    labels = {
        "ttft": ("TTFT", 1000, "ms"),
        "tpot": ("TPOT", 1000, "ms"),
        "latency": ("E2E latency", 1, "s"),
        "queue": ("queue time", 1, "s"),
        "prefill": ("prefill (scheduled to first token)", 1000, "ms"),
    }
    for metric, (label, scale, unit) in labels.items():
        measured, simulated = stats(real["metrics"][metric]), stats(sim["metrics"][metric])
        for stat in STATS:
            if metric == "prefill" and stat not in ("mean", "p50"):
                continue
            err = error(simulated[stat], measured[stat])
            errors[(metric, stat)] = err
            digits = 1 if scale == 1000 else 2
            lines.append(
                f"| {label} {stat} ({unit}) | {measured[stat] * scale:.{digits}f} | {simulated[stat] * scale:.{digits}f} "
                f"| {pct(err)} | {pct(their.get((metric, stat)))} |"
            )
    for label, key, digits in (
        ("span, first arrival to last token (s)", None, 2),
        ("request throughput (req/s)", "requests", 3),
        ("output throughput (tok/s)", "output_tokens", 0),
        ("input throughput (tok/s)", "input_tokens", 0),
    ):
        measured = real["span"] if key is None else real[key] / real["span"]
        simulated = sim["span"] if key is None else sim[key] / sim["span"]
        lines.append(
            f"| {label} | {measured:,.{digits}f} | {simulated:,.{digits}f} | {pct(error(simulated, measured))} | |"
        )
    for label, key in (("peak running requests", "peak_running"), ("peak waiting requests", "peak_waiting")):
        lines.append(f"| {label} | {real[key]} | {sim[key]} | {pct(error(sim[key], real[key]))} | |")

    verdicts = []
    for metric, stat in ACCEPTANCE:
        err = errors[(metric, stat)]
        verdicts.append(f"{metric.upper()} {stat} {pct(err)} ({'met' if abs(err) <= LIMIT else 'NOT met'})")
    met = all(abs(errors[k]) <= LIMIT for k in ACCEPTANCE)

    profile = sim["profile"]
    raw = json.loads(Path(profile.path).read_text())
    timing = raw["timing"]
    efficiency_source = next((s for s in raw.get("sources", []) if s.lower().startswith("efficiencies")), "")
    roofline = profile.timing if isinstance(profile.timing, RooflineTiming) else None
    walls = sim["walls"]
    engine = sim["engine"]
    lag = real["arrival_lag"]
    meta = real["meta"]

    out = [
        f"## Simulator fidelity: vLLM {meta.get('vllm_version')} on {hardware_words(meta, sim['profile'])}, {meta.get('model')}, "
        f"{real['run'].trace.name} ({real['requests']} requests)",
        "",
        f"Profile `{profile.name}` as shipped, timing `{timing['kind']}`: mfu {timing.get('mfu')}, mbu {timing.get('mbu')}, "
        f"overhead_ms {timing.get('overhead_ms')} (not tuned to this run). The profile's source for them: {efficiency_source}",
        "",
        f"Engine: max_num_seqs {profile.engine.max_num_seqs}, max_num_batched_tokens {profile.engine.max_num_batched_tokens}, "
        f"block_size {profile.engine.block_size}, num_gpu_blocks {profile.engine.num_gpu_blocks}.",
        "",
        *lines,
        "",
        f"Acceptance (|error| <= {LIMIT:.0%}): {'; '.join(verdicts)}: **{'met' if met else 'not met'}**.",
        "",
        f"Offline replay wall time: median {statistics.median(walls):.3f} s of {len(walls)} runs "
        f"({', '.join(f'{w:.3f}' for w in walls)} s) for a virtual duration of {sim['virtual_duration']:.2f} s "
        f"({sim['virtual_duration'] / statistics.median(walls):.0f}x real time); runs identical: {sim['deterministic']}.",
        "",
        "Checks:",
        "",
        f"- output tokens: trace = vLLM on {real['requests'] - real['output_mismatches']}/{real['requests']} requests "
        f"(total vLLM {real['output_tokens']:,.0f}, simulated {sim['output_tokens']:,.0f}); input tokens differ on "
        f"{real['input_mismatches']} (vLLM) and {sim['planned_prompt_mismatches']} (simulated) requests; "
        f"simulated outputs off plan: {sim['planned_output_mismatches']}; single-token outputs (no TPOT): {real['single_token_outputs']}.",
        f"- simulated engine: {engine['num_preemptions_total']} preemptions, prefix cache hits "
        f"{engine['prefix_cache_hits_total']:,} of {engine['prefix_cache_queries_total']:,} prompt tokens; "
        f"vLLM's data has no preemption counter (its timeseries' kv_cache_pct is 0.0 on every line); "
        f"vLLM scheduled in arrival order (FCFS): {real['fcfs']}.",
        f"- vLLM arrivals into the engine vs the trace's schedule (relative to the first request): "
        f"mean {lag.mean() * 1000:+.1f} ms, min {lag.min() * 1000:+.1f}, max {lag.max() * 1000:+.1f} ms; "
        f"simulated schedule lag max {sim['schedule_lag_max'] * 1000:.3f} ms.",
    ]
    ttft_real, ttft_sim = real["metrics"]["ttft"], sim["metrics"]["ttft"]
    out.append(
        f"- per request (matched by trace line): TTFT correlation {np.corrcoef(ttft_real, ttft_sim)[0, 1]:.4f}, "
        f"median |simulated - measured| TTFT {np.median(np.abs(ttft_sim - ttft_real)) * 1000:.0f} ms."
    )
    fits = []
    for label, values in (("vLLM", real["metrics"]["prefill"]), ("simulated", sim["metrics"]["prefill"])):
        slope, intercept = np.polyfit(real["input"], values * 1000, 1)
        fits.append(f"{label} {intercept:.1f} ms + {slope * 1000:.1f} ms per 1k prompt tokens")
    out.append(f"- prefill time (scheduled to first token) fitted against prompt length: {'; '.join(fits)}.")
    out.append(kv_held_check(real, profile.engine.block_size, profile.engine.num_gpu_blocks))
    out.append(step_check(real, profile.timing))
    if roofline is not None:
        out.append(decode_step_check(real, roofline, profile.engine.max_num_seqs))
        mean_in = real["input_tokens"] / real["requests"]
        mean_out = real["output_tokens"] / real["requests"]
        seqs = profile.engine.max_num_seqs
        decode = roofline.breakdown(Batch(0, 0, seqs, int(seqs * (mean_in + mean_out / 2)), 0.0))
        prefill = roofline.breakdown(
            Batch(profile.engine.max_num_batched_tokens, profile.engine.max_num_batched_tokens, 0, 0, 0.0)
        )
        out.append(
            f"- roofline at full load: a decode-only step of {seqs} requests at the mean context "
            f"({mean_in + mean_out / 2:,.0f} tokens) is {decode['total_s'] * 1000:.1f} ms ({decode['bound']}-bound: "
            f"memory {decode['memory_s'] * 1000:.1f}, compute {decode['compute_s'] * 1000:.1f} ms); a prefill-only step of "
            f"{profile.engine.max_num_batched_tokens} fresh tokens is {prefill['total_s'] * 1000:.1f} ms "
            f"({prefill['bound']}-bound)."
        )
    if sim["warnings"]:
        out.append(f"- replay warnings: {'; '.join(sim['warnings'])}")
    out += [
        "",
        f"{machine_line()}. Reproduce: `.venv/bin/python bench/sim_fidelity.py {' '.join(sys.argv[1:])}`.",
    ]
    return "\n".join(out) + "\n"


PREFILL_BINS = ((1, 100), (100, 250), (250, 10**9))  # prefill tokens per step at full batch


def parts_report(real: dict[str, Any], sim: dict[str, Any]) -> str:
    """Each part of a request's time, measured against simulated (module doc), and the steps at full batch."""
    rows = ["| part | vLLM | simulated | error |", "|---|---:|---:|---:|"]

    def add(label: str, measured: float, simulated: float, unit: str = "ms") -> None:
        rows.append(f"| {label} ({unit}) | {measured:,.1f} | {simulated:,.1f} | {pct(error(simulated, measured))} |")

    parts = (
        ("TTFT from arrival", "ttft_from_arrival", 1000),
        ("arrival to scheduled (the iteration in progress, the queue)", "to_scheduled", 1000),
        ("scheduled to first token (the prefill, and the batch in flight)", "prefill", 1000),
        ("TPOT", "tpot", 1000),
    )
    for label, key, scale in parts:
        measured, simulated = stats(real["metrics"][key]), stats(sim["metrics"][key])
        for stat in ("mean", "p50"):
            add(f"{label} {stat}", measured[stat] * scale, simulated[stat] * scale)
    admitted_at_once = real["metrics"]["queue"] < 0.001
    prompt = real["input"]
    for label, chosen in (("scheduled at once", admitted_at_once), ("queued first", ~admitted_at_once)):
        measured, simulated = real["metrics"]["prefill"][chosen], sim["metrics"]["prefill"][chosen]
        add(
            f"scheduled to first token, the {chosen.sum()} requests vLLM {label}: mean",
            measured.mean() * 1000,
            simulated.mean() * 1000,
        )
        fits = []
        for values in (measured, simulated):
            slope, intercept = np.polyfit(prompt[chosen], values * 1000, 1)
            fits.append((intercept, slope * 1000))
        rows.append(
            f"| ... fitted: intercept (ms) / per 1k prompt tokens (ms) | {fits[0][0]:.1f} / {fits[0][1]:.1f} "
            f"| {fits[1][0]:.1f} / {fits[1][1]:.1f} | {pct(error(fits[1][0], fits[0][0]))} / {pct(error(fits[1][1], fits[0][1]))} |"
        )
    profile = sim["profile"]
    steps = full_batch_steps(real, profile.timing, profile.engine.max_num_seqs)
    for low, high in ((0, 1), *PREFILL_BINS):
        chosen = [step for step in steps if low <= step["prefill"] < high]
        if chosen:
            what = "decode only" if high == 1 else f"{low}-{high - 1 if high < 10**9 else 'more'} prefill tokens"
            add(
                f"step at {profile.engine.max_num_seqs} running, {what} ({len(chosen)} s of the timeseries)",
                np.mean([step["measured"] for step in chosen]) * 1000,
                np.mean([step["predicted"] for step in chosen]) * 1000,
            )
    hop = stats(real["metrics"]["to_queued"] * 1000)
    return "\n".join(
        [
            "Per part, both from the request's arrival at the server (module doc):",
            "",
            *rows,
            "",
            f"vLLM alone: arrival to queued_ts (the front end's hop beyond its fastest, and the wait for the "
            f"iteration in progress) mean {hop['mean']:.1f} ms, p50 {hop['p50']:.1f}, p90 {hop['p90']:.1f}, p99 {hop['p99']:.1f} ms.",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="simulator runs; the wall time is their median (default 3)")
    parser.add_argument(
        "--profile", default=PROFILE, help=f"the simulator profile, a bundled name or a file (default {PROFILE})"
    )
    add_run_option(parser)
    parser.add_argument("--write", metavar="FILE", help="also write the Markdown report to FILE")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    with tempfile.TemporaryDirectory() as scratch:
        run, profile = chosen_run(args.run, args.profile, Path(scratch), args.trace)
        real = load_vllm(run)
        workload = load_workload(run.trace)
        sim = simulate(workload, args.runs, profile)
        report = build_report(real, sim, load_their_errors(run)) + "\n" + parts_report(real, sim)
    print(report, end="")
    if args.write:
        Path(args.write).write_text(report)


if __name__ == "__main__":
    main()
