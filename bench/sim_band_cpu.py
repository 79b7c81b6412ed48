"""How often a calibration's error band holds what vLLM's CPU build measured, on models it never saw.

The band (``pytest_llmreplay/sim/profile_band.py``, what ``llmreplay run --sim P --band N``
prints) draws a profile's uncertain parameters uniformly over their ranges and takes each
figure's 10th to 90th percentile over the replays: a nominal 80% band. For a profile built from
specs the ranges are the published figures' spans (``bench/sim_band.py``, on the one GPU run).
Here the profile is a calibration, and its ranges come from the calibration itself: the same
calibration fitted again on each measured run of its (model, workload) pairs, run 1, run 2 and
run 3 apart (repeats of one workload on one server, minutes apart), and each uncertain
parameter's range is the span of its fitted values. That span is what the run-to-run noise
leaves undetermined in a fit; no value comes from a run of the models it predicts. Fitted
parameters that are not uncertain fields (``layer_overhead_ms``, ``admission_overhead_ms``)
take the median of their fits, as every uncertain one does for the profile's own value.

The runs and profiles are a folder ``bench/sim_transfer.py --out`` measured (default: set B of
2026-11-27, 3 runs of each workload on 4 random-weight Llamas on vLLM 0.32's CPU build); the
calibration its best one (:data:`CALIBRATION`: small and shallow, light and chat, the three
engine parameters, the layer and admission overheads, the front end set beforehand to vLLM's
own split of the light run of the same run number). Each (model, workload) is replayed on its
own model's profile with the calibrated timing, once with the profile's own values and
:data:`DRAWS` times with drawn ones; each of its measured runs is then checked against the band
of each of :data:`FIGURES`. The models no fit saw (tiny, deep) are the out-of-sample check; small
and shallow's runs were all fitted (one fit each), so theirs is in-sample.

    .venv/bin/python bench/sim_band_cpu.py [--from DIR] [--draws 40] [--max-evals 80] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from sim_transfer import WORKLOADS, front_end_bases, light_workload, measured_front_end, read_runs
from sim_transfer_calibrations import BEST_WIDTH_512, CALIBRATIONS, FITTED_STATISTICS

from pytest_llmreplay import PromptFactory, load_tokenizer
from pytest_llmreplay.sim.calibrate_run import FitRun, calibrate_from_runs, simulate
from pytest_llmreplay.sim.measured_run import MeasuredRun
from pytest_llmreplay.sim.profile import parse_profile
from pytest_llmreplay.sim.profile_band import band, draw_profiles
from pytest_llmreplay.workloads.formats.synthetic import generate

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FOLDER = ROOT / "bench" / "results" / "sim_transfer_2026-11-27-deep-2-bf16"
CALIBRATION = next(c for c in CALIBRATIONS if c[0] == BEST_WIDTH_512)  # the transfer's best on small and shallow
DRAWS = 40
UNCERTAIN = ("mfu", "mbu", "overhead_ms", "frontend_ms")  # the fitted parameters the band may draw
FIGURES = {
    "TTFT p50": lambda run: float(np.median(run.ttft)),
    "TPOT mean": lambda run: float(np.nanmean(run.tpot)),
    "latency p50": lambda run: float(np.median(run.latency)),
}


def fit_on_run(
    folder: Path, scratch: Path, index: int, runs: dict, stored: dict, workloads: dict, prompts: Any, max_evals: int
) -> dict[str, float]:
    """:data:`CALIBRATION` fitted on run ``index`` (0-based) of its pairs, the front end set to vLLM's
    split of the same run of the fitted models' light workload; the fitted values and frontend_ms."""
    _, pairs, fit, _ = CALIBRATION
    models = {model for model, _ in pairs}
    front_end = measured_front_end(stored, models, index)
    bases = front_end_bases(folder, models, front_end, scratch, f"run{index + 1}")
    _, found = calibrate_from_runs(
        [FitRun(bases[model], workloads[workload], runs[model, workload][index]) for model, workload in pairs],
        prompts,
        fit=fit,
        max_evals=max_evals,
        statistics=FITTED_STATISTICS,
    )
    return {**found.values, "frontend_ms": round(front_end, 2)}


def banded_profile(machine: dict[str, Any], fits: list[dict[str, float]]) -> dict[str, Any]:
    """``machine`` (a model's profile JSON) with the fits' median timing and an ``uncertainty``
    section: each of :data:`UNCERTAIN` over the span of its fitted values (left out where the fits
    agree: no span to draw from)."""
    median = {name: float(np.median([fit[name] for fit in fits])) for name in fits[0]}
    timing = {**machine["timing"], **median}
    uncertainty = {}
    for name in UNCERTAIN:
        low, high = min(fit[name] for fit in fits), max(fit[name] for fit in fits)
        if high > low:
            uncertainty[f"timing.{name}"] = {
                "range": [low, high],
                "source": f"the span of {CALIBRATION[0]!r} fitted on each of runs 1-{len(fits)} apart (bench/sim_band_cpu.py)",
            }
    return {**machine, "name": f"{machine['name']}-calibrated", "timing": timing, "uncertainty": uncertainty}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="folder", type=Path, default=DEFAULT_FOLDER, help="a sim_transfer.py --out folder"
    )
    parser.add_argument("--draws", type=int, default=DRAWS, help=f"replays with drawn parameters (default {DRAWS})")
    parser.add_argument("--max-evals", type=int, default=80, help="offline replays each fit may spend (default 80)")
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    args = parser.parse_args()
    started = time.perf_counter()
    tokenizer = load_tokenizer(None)

    def prompts() -> PromptFactory:
        return PromptFactory(tokenizer, seed=0)

    runs: dict[tuple[str, str], list[MeasuredRun]] = read_runs(args.folder)
    stored = json.loads((args.folder / "runs.json").read_text())
    workloads = {"light": light_workload(), **{name: generate(spec) for name, spec in WORKLOADS.items()}}
    count = min(len(measured) for measured in runs.values())
    with tempfile.TemporaryDirectory(prefix="sim-band-cpu-") as scratch:
        fits = [
            fit_on_run(args.folder, Path(scratch), index, runs, stored, workloads, prompts, args.max_evals)
            for index in range(count)
        ]
    for index, fit in enumerate(fits, start=1):
        print(f"fit on run {index}: " + ", ".join(f"{name} {value:.4g}" for name, value in fit.items()))
    models = sorted({model for model, _ in runs})
    profiles = {
        model: banded_profile(json.loads((args.folder / f"{model}-machine.json").read_text()), fits) for model in models
    }
    ranges = profiles[models[0]]["uncertainty"]
    print(
        f"\nBand: {args.draws} draws (seed {args.seed}) of "
        + ", ".join(f"{name} {r['range'][0]:.4g}-{r['range'][1]:.4g}" for name, r in ranges.items())
        + "; the other fitted values at their median; 10th-90th percentile (nominal 80%).\n"
    )
    print("| model, workload | figure | simulated (own values) | band | measured runs | held |")
    print("|---|---|---:|---:|---|:---:|")
    held = {"unseen": [0, 0], "fitted": [0, 0]}
    fitted_models = {model for model, _ in CALIBRATION[1]}
    for (model, workload), measured in runs.items():
        profile = parse_profile(profiles[model])
        own = simulate(profile, workloads[workload], prompts)
        drawn = [simulate(p, workloads[workload], prompts) for p in draw_profiles(profile, args.draws, args.seed)]
        kind = "fitted" if model in fitted_models else "unseen"
        for figure, value in FIGURES.items():
            low, high = band([value(run) for run in drawn])
            values = [value(run) for run in measured]
            inside = [low <= v <= high for v in values]
            held[kind][0] += sum(inside)
            held[kind][1] += len(inside)
            print(
                f"| {model} {workload} ({kind}) | {figure} | {value(own) * 1e3:.2f} ms | {low * 1e3:.2f} - {high * 1e3:.2f} ms | "
                + ", ".join(f"{v * 1e3:.2f}" for v in values)
                + f" | {sum(inside)}/{len(inside)} |"
            )
    for kind, (inside, total) in held.items():
        print(
            f"\n{kind} models: the band held {inside} of {total} measured figures ({inside / total:.0%}; nominal 80%)"
        )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
