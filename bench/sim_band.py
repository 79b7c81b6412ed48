"""How often the simulator's error band holds what a real vLLM run measured.

The band (``pytest_llmreplay/sim/profile_band.py``, what ``llmreplay run --sim P --band N``
prints): DRAWS offline replays with the profile's uncertain parameters (its ``uncertainty``
section) drawn uniformly over their ranges, seeded; each figure's band is the 10th to 90th
percentile over the draws, a nominal 80% band. Checked here on the real run with per-request
timings that ``bench/sim_fidelity.py`` reads (vLLM 0.19, one RTX PRO 6000, Llama-3.1-8B, the
300-request ShareGPT trace; definitions there, times from the request's arrival at the server):
TTFT, TPOT and latency at mean, p50, p90 and p99, the time from scheduled to first token (mean,
p50) and the request throughput. The figures of one run move together (one slow decode step
slows them all), so their coverage is one run's, not that many independent checks. "Draws below
vLLM's": the share of the draws whose figure is below the measured one (50% where the measured
value sits in the middle of the draws; near 0% or 100% at an edge).

    .venv/bin/python bench/sim_band.py [--draws 40] [--seed 0] [--profile NAME_OR_FILE] [--run DIR]

``--run DIR``: another measured run, in LLMServingSim's layout (``sim_fidelity_runs.public_run``),
replayed from its own requests with its engine settings.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from sim_fidelity import error, load_vllm, simulate, stats
from sim_fidelity_runs import PROFILE, add_run_option, chosen_run

from pytest_llmreplay import load_workload
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.sim.profile_band import BAND_PERCENTILES, band, draw_profiles

FIGURES = [
    *(
        (metric, stat)
        for metric in ("ttft_from_arrival", "tpot", "latency_from_arrival")
        for stat in ("mean", "p50", "p90", "p99")
    ),
    ("prefill", "mean"),
    ("prefill", "p50"),
    ("throughput", "requests/s"),
]
LABELS = {
    "ttft_from_arrival": "TTFT",
    "tpot": "TPOT",
    "latency_from_arrival": "latency",
    "prefill": "scheduled to first token",
}


def figures(run: dict) -> dict[tuple[str, str], float]:
    """The :data:`FIGURES` of a measured or simulated run (``sim_fidelity``'s dicts), in ms or req/s."""
    out = {("throughput", "requests/s"): run["requests"] / run["span"]}
    for metric, stat in FIGURES[:-1]:
        out[(metric, stat)] = stats(run["metrics"][metric])[stat] * 1000
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=40, help="replays with drawn parameters (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    parser.add_argument("--profile", default=PROFILE, help=f"a profile with an uncertainty section (default {PROFILE})")
    add_run_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        run, profile_file = chosen_run(args.run, args.profile, Path(scratch), args.trace)
        profile = load_profile(profile_file)
        if not profile.uncertainty:
            parser.error(f"profile {profile.name} states no uncertain parameters")
        real = figures(load_vllm(run))
        workload = load_workload(run.trace)
        start = time.perf_counter()
        own = figures(simulate(workload, 1, profile))
        drawn = [figures(simulate(workload, 1, p)) for p in draw_profiles(profile, args.draws, args.seed)]
        wall = time.perf_counter() - start
    ranges = ", ".join(f"{u.field} {u.low:g}-{u.high:g}" for u in profile.uncertainty)
    print(
        f"Profile `{profile.name}`, {args.draws} draws (seed {args.seed}) of {ranges}; band = "
        f"{BAND_PERCENTILES[0]:g}th-{BAND_PERCENTILES[1]:g}th percentile of the draws (nominal 80%).\n"
    )
    print(
        "| figure | vLLM | simulated (own values) | error | band | band width / simulated "
        "| draws below vLLM's | holds vLLM's |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|:---:|")
    held = 0
    for key in FIGURES:
        low, high = band([d[key] for d in drawn])
        inside = low <= real[key] <= high
        held += inside
        metric, stat = key
        unit = "req/s" if metric == "throughput" else "ms"
        label = f"{LABELS.get(metric, metric)} {stat}" if metric != "throughput" else "request throughput"
        digits = 3 if metric == "throughput" else 1
        print(
            f"| {label} ({unit}) | {real[key]:,.{digits}f} | {own[key]:,.{digits}f} | {error(own[key], real[key]):+.1%} "
            f"| {low:,.{digits}f} - {high:,.{digits}f} | {(high - low) / own[key]:.0%} "
            f"| {np.mean([d[key] < real[key] for d in drawn]):.0%} | {'yes' if inside else 'NO'} |"
        )
    print(
        f"\nThe band holds vLLM's figure for {held} of {len(FIGURES)} figures ({held / len(FIGURES):.0%}; nominal 80%). "
        f"{args.draws + 1} replays in {wall:.1f} s."
    )
    spread = np.array([[d[key] for key in FIGURES] for d in drawn])
    lowest, highest = spread.min(axis=0), spread.max(axis=0)
    outside = [
        f"{LABELS.get(k[0], k[0])} {k[1]}" for i, k in enumerate(FIGURES) if not lowest[i] <= real[k] <= highest[i]
    ]
    print(f"Outside even the draws' full range: {', '.join(outside) if outside else 'none'}.")


if __name__ == "__main__":
    main()
