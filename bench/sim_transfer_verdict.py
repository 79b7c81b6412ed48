"""The transfer verdict of ``bench/sim_transfer.py``: each model no calibration was fitted on, every
run predicted, against the noise of its own runs.

For each (model, workload) whose model is not among the calibration's fitted models, and each of
its runs ``i``: the prediction's error (simulated - measured) / measured on TTFT p50 and TPOT
mean (the client's), and the simulated TPOT mean against vLLM's own decode step
(``request_time_per_output_token``, engine side, where the client's bursts do not reach); beside
them the noise floor, each later run of the same workload against run 1 on the same figures (what
two runs of one server, or of two servers, differ by), and the prediction against the median of
the runs (the measured figure's central value: a single run is off it by its noise). The last
lines count the predictions within :data:`TARGET` (issue 36: cross-model transfer within 15%),
of every run and of the runs' median.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sim_transfer_parts import server_mean

from pytest_llmreplay.sim.measured_run import MeasuredRun

TARGET = 0.15


def _figures(run: MeasuredRun, stored: dict[str, Any]) -> tuple[float, float, float]:
    """(TTFT p50, TPOT mean, vLLM's own TPOT mean) of a measured run, seconds."""
    own = server_mean(stored["server"], "request_time_per_output_token_seconds") if "server" in stored else math.nan
    return float(np.median(run.ttft)), float(np.nanmean(run.tpot)), own


def _cells(values: list[float]) -> str:
    return ", ".join(f"{v:+.0%}" for v in values)


def verdict_lines(
    fitted_models: set[str],
    measured: dict[tuple[str, str], list[MeasuredRun]],
    stored: dict[str, Any],
    simulated: dict[tuple[str, str], MeasuredRun],
) -> list[str]:
    """The verdict table and counts (module doc) for one calibration; ``simulated`` holds the
    offline replay of each (model, workload) on its profile with the calibration's timing."""
    figures = ("TTFT p50", "TPOT mean", "step vs vLLM's")
    lines = [
        "| model workload | TTFT p50: runs 2.. vs 1 | predicted, runs 1.. | vs their median "
        "| TPOT mean: runs 2.. vs 1 | predicted, runs 1.. | vs their median "
        "| vLLM's step: runs 2.. vs 1 | predicted step vs vLLM's, runs 1.. | vs their median |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    hits: dict[str, list[bool]] = {figure: [] for figure in figures}
    median_hits: dict[str, list[bool]] = {figure: [] for figure in figures}
    for (model, name), runs in measured.items():
        if model in fitted_models:
            continue
        real = [_figures(run, kept) for run, kept in zip(runs, stored[model][name], strict=True)]
        sim_ttft, sim_tpot = (
            float(np.median(simulated[model, name].ttft)),
            float(np.nanmean(simulated[model, name].tpot)),
        )
        columns = []
        for index, predicted in ((0, sim_ttft), (1, sim_tpot), (2, sim_tpot)):
            noise = [(r[index] - real[0][index]) / real[0][index] for r in real[1:]]
            errors = [(predicted - r[index]) / r[index] for r in real]
            central = float(np.median([r[index] for r in real]))
            error = (predicted - central) / central
            columns += [_cells(noise), _cells(errors), _cells([error])]
            hits[figures[index]] += [abs(e) <= TARGET for e in errors if math.isfinite(e)]
            if math.isfinite(error):
                median_hits[figures[index]].append(abs(error) <= TARGET)
        lines.append(f"| {model} {name} | " + " | ".join(columns) + " |")
    lines.append("")
    lines += [f"{figure} within {TARGET:.0%}: {sum(found)} of {len(found)}" for figure, found in hits.items()]
    lines += [
        f"{figure} within {TARGET:.0%} of the runs' median: {sum(found)} of {len(found)}"
        for figure, found in median_hits.items()
    ]
    return lines
