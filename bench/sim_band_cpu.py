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
calibration its best one (``BEST_WIDTH_512``: small and shallow, light and chat, the three
engine parameters, the layer and admission overheads, the front end set beforehand to vLLM's
own split of the light run of the same run number; ``--calibration`` another with the front end
so set). Each (model, workload) is replayed on its
own model's profile with the calibrated timing, once with the profile's own values and
:data:`DRAWS` times with drawn ones; each of its measured runs is then checked against the band
of each of :data:`FIGURES`. The models no fit saw (tiny, deep) are the out-of-sample check; small
and shallow's runs were all fitted (one fit each), so theirs is in-sample.

The model's structural error (``timing.discrepancy``, sim/profile_ranges.py: a factor on every
iteration's time) is what no fit's span holds. ``--discrepancy-from MODEL`` measures it on one
model the calibration did not fit, set apart for it: its range is the span of measured /
simulated TPOT mean (the profile's own values) over that model's runs, and 1; the band is then
checked on the other unseen models, which neither the fits nor the range saw.

    .venv/bin/python bench/sim_band_cpu.py [--from DIR] [--draws 40] [--max-evals 80] [--seed 0]
        [--calibration NAME] [--discrepancy-from MODEL]
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
SPLIT_FRONT_END = {c[0]: c for c in CALIBRATIONS if c[3]}  # calibrations with the front end from vLLM's split
DRAWS = 40
UNCERTAIN = ("mfu", "mbu", "overhead_ms", "frontend_ms")  # the fitted parameters the band may draw
FIGURES = {
    "TTFT p50": lambda run: float(np.median(run.ttft)),
    "TPOT mean": lambda run: float(np.nanmean(run.tpot)),
    "latency p50": lambda run: float(np.median(run.latency)),
}


def fit_on_run(
    calibration: tuple,
    folder: Path,
    scratch: Path,
    index: int,
    runs: dict,
    stored: dict,
    workloads: dict,
    prompts: Any,
    max_evals: int,
) -> dict[str, float]:
    """``calibration`` (one of :data:`SPLIT_FRONT_END`) fitted on run ``index`` (0-based) of its pairs,
    the front end set to vLLM's split of the same run of the fitted models' light workload; the
    fitted values and frontend_ms."""
    _, pairs, fit, _ = calibration
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


def banded_profile(machine: dict[str, Any], fits: list[dict[str, float]], name: str) -> dict[str, Any]:
    """``machine`` (a model's profile JSON) with the fits' median timing (of calibration ``name``) and an ``uncertainty``
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
                "source": f"the span of {name!r} fitted on each of runs 1-{len(fits)} apart (bench/sim_band_cpu.py)",
            }
    return {**machine, "name": f"{machine['name']}-calibrated", "timing": timing, "uncertainty": uncertainty}


def discrepancy_range(
    profile_json: dict[str, Any], model: str, runs: dict, workloads: dict, prompts: Any
) -> tuple[float, float, list[float]]:
    """(low, high, ratios): measured / simulated TPOT mean over ``model``'s runs, each workload
    simulated once on ``profile_json``'s own values; the range is their span and 1."""
    profile = parse_profile(profile_json)
    tpot = FIGURES["TPOT mean"]
    ratios = []
    for (name, workload), measured in runs.items():
        if name == model:
            simulated = tpot(simulate(profile, workloads[workload], prompts))
            ratios += [tpot(run) / simulated for run in measured]
    return min(1.0, *ratios), max(1.0, *ratios), ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="folder", type=Path, default=DEFAULT_FOLDER, help="a sim_transfer.py --out folder"
    )
    parser.add_argument("--draws", type=int, default=DRAWS, help=f"replays with drawn parameters (default {DRAWS})")
    parser.add_argument("--max-evals", type=int, default=80, help="offline replays each fit may spend (default 80)")
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    parser.add_argument(
        "--calibration", choices=sorted(SPLIT_FRONT_END), default=BEST_WIDTH_512, help="the calibration fitted"
    )
    parser.add_argument(
        "--discrepancy-from",
        metavar="MODEL",
        help="a model the calibration did not fit, whose runs set the timing.discrepancy range (module doc)",
    )
    args = parser.parse_args()
    calibration = SPLIT_FRONT_END[args.calibration]
    fitted_models = {model for model, _ in calibration[1]}
    if args.discrepancy_from in fitted_models:
        parser.error(
            f"--discrepancy-from: {args.discrepancy_from} is fitted by the calibration; give a model it did not see"
        )
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
            fit_on_run(calibration, args.folder, Path(scratch), index, runs, stored, workloads, prompts, args.max_evals)
            for index in range(count)
        ]
    for index, fit in enumerate(fits, start=1):
        print(f"fit on run {index}: " + ", ".join(f"{name} {value:.4g}" for name, value in fit.items()))
    models = sorted({model for model, _ in runs})
    if args.discrepancy_from and args.discrepancy_from not in models:
        parser.error(
            f"--discrepancy-from: no runs of {args.discrepancy_from} in {args.folder} (models: {', '.join(models)})"
        )
    profiles = {
        model: banded_profile(json.loads((args.folder / f"{model}-machine.json").read_text()), fits, calibration[0])
        for model in models
    }
    if args.discrepancy_from:
        low, high, ratios = discrepancy_range(
            profiles[args.discrepancy_from], args.discrepancy_from, runs, workloads, prompts
        )
        print(f"\nmeasured / simulated TPOT mean on {args.discrepancy_from}: " + ", ".join(f"{r:.3f}" for r in ratios))
        for profile_json in profiles.values():
            profile_json["uncertainty"]["timing.discrepancy"] = {
                "range": [low, high],
                "source": f"measured / simulated TPOT mean on {args.discrepancy_from}'s runs (bench/sim_band_cpu.py)",
            }
    ranges = profiles[models[0]]["uncertainty"]
    print(
        f"\nBand: {args.draws} draws (seed {args.seed}) of "
        + ", ".join(f"{name} {r['range'][0]:.4g}-{r['range'][1]:.4g}" for name, r in ranges.items())
        + "; the other fitted values at their median; 10th-90th percentile (nominal 80%).\n"
    )
    print("| model, workload | figure | simulated (own values) | band | measured runs | held |")
    print("|---|---|---:|---:|---|:---:|")
    held = {"unseen": [0, 0], "fitted": [0, 0], "set apart for the discrepancy": [0, 0]}
    for (model, workload), measured in runs.items():
        profile = parse_profile(profiles[model])
        own = simulate(profile, workloads[workload], prompts)
        drawn = [simulate(p, workloads[workload], prompts) for p in draw_profiles(profile, args.draws, args.seed)]
        kind = (
            "fitted"
            if model in fitted_models
            else "set apart for the discrepancy"
            if model == args.discrepancy_from
            else "unseen"
        )
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
        if not total:
            continue
        print(
            f"\n{kind} models: the band held {inside} of {total} measured figures ({inside / total:.0%}; nominal 80%)"
        )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
