"""When the runs of one side disagree more than the bootstrap can model: the ``unstable`` verdict.

The comparison's two-level bootstrap (:mod:`~pytest_llmreplay.gate.bootstrap`) treats the runs of a
side as draws from one distribution of runs. A side whose runs fall into two modes breaks that:
on a CPU-starved machine part of a run's responses arrive in one burst (TTFT close to the whole
latency, TPOT about 0), a share that changes from run to run, and the time figures then move
several-fold between runs of the same commit (bench/README.md, the live gate's first and fourth
runs). No interval computed from three or five such runs means anything, so the comparison is
neither a regression nor a pass: it is unstable.

**Rule** (:func:`instability`): a comparison is unstable when, on either side, one of the time
figures :data:`UNSTABLE_FIGURES` has its largest value over that side's runs more than
:data:`UNSTABLE_SPREAD` times its smallest (each run's own summary; a side of one run, or a
figure of 0, is not judged), and more than sampling alone spreads runs of so few samples
(:func:`sampling_spread`): the p90 of 8 requests moves 3x between runs of one distribution
(a statistics review: 60% of such sides of five runs were called unstable, hiding every verdict). Chosen on the simulator's noise model and the first three live runs
(bench/README.md, "The unstable verdict"): on the simulator (600 sides of 3 and 5 runs, 5% noise
per iteration, 1-2% per run) the largest spread was 1.36x; on the quiet live runs 1.86x (0 of 102
sides over 3), and 5 of 2,000 sides resampled to five runs; on the loaded first run 63 of 75
sides were over it. Judged afterwards on the fourth run: 53 of 57 five-run sides, and all of its
false alarms.

**Cause** (:func:`burst_line`): a request whose TPOT is under :data:`BURST_TPOT_S` received its
response in one burst; when the runs' shares of such requests differ by at least
:data:`BURST_SHARE_GAP`, the line says so (streams buffered by a CPU-starved client or API
server); otherwise the load on the machine changed between runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..metrics.units import format_figure
from .bootstrap import statistic
from .repeats import run_samples

UNSTABLE_FIGURES = ("ttft.p50", "ttft.p90", "tpot.p50", "latency.p50", "ttfat.p50")
UNSTABLE_SPREAD = 3.0  # largest / smallest of one side's runs' values of a figure
BURST_TPOT_S = 1e-4  # a request whose TPOT is under 0.1 ms received its response in one burst
BURST_SHARE_GAP = 0.10  # runs whose burst shares differ this much were buffered differently
SAMPLING_DRAWS = 1000  # redraws of a side's runs from their pooled samples (sampling_spread)
SAMPLING_QUANTILE = 0.998  # of the redrawn spreads: 1% for the five figures together (0.01 / 5)
# runs of this many samples each are not redrawn: the p90 of 1,000 lognormal (sigma 0.8) samples
# moved at most 1.21x over five runs (200 sides), never near 3x, and redrawing five runs of 100k
# samples took 21 s a figure
SAMPLING_ENOUGH = 1000


def run_values(record: Mapping[str, Any], key: str) -> list[float]:
    """``key``'s value (``metric.stat``) in each of the record's runs, those not measured left out;
    empty for a record of one run."""
    metric, _, stat = key.partition(".")
    values = [(run.get("summary") or {}).get(metric, {}).get(stat) for run in record.get("runs") or ()]
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def burst_line(record: Mapping[str, Any]) -> str:
    """The likely cause of a side's runs disagreeing (module docstring), in words."""
    shares = (
        [float((run < BURST_TPOT_S).mean()) if len(run) else 0.0 for run in run_samples(record, "tpot")]
        if record.get("runs")
        else []
    )
    if shares and max(shares) - min(shares) >= BURST_SHARE_GAP:
        most, least = shares.index(max(shares)), shares.index(min(shares))
        return (
            f"run {most + 1} received {max(shares):.0%} of its responses in one burst, run {least + 1} {min(shares):.0%}: "
            "the streams were buffered, likely by a CPU-starved client or API server"
        )
    return "likely another load on the machine that changed between runs"


def sampling_spread(record: Mapping[str, Any], key: str) -> float:
    """The spread (largest / smallest) of ``key`` (``metric.stat``) that sampling alone gives the
    record's runs: its :data:`SAMPLING_QUANTILE` over :data:`SAMPLING_DRAWS` redraws of every
    run, each of its own sample count, from all the runs' samples pooled (one distribution of
    requests, which is what stable runs are); 0 for a record without two runs' samples of it, or
    whose runs hold :data:`SAMPLING_ENOUGH` samples each."""
    metric, _, stat = key.partition(".")
    runs = run_samples(record, metric)
    if len(runs) < 2 or min(map(len, runs)) >= SAMPLING_ENOUGH:
        return 0.0
    pooled = np.concatenate(runs)
    rng = np.random.default_rng(0)
    chunk = max(1, min(SAMPLING_DRAWS, 2_000_000 // max(map(len, runs))))
    values = np.array(
        [
            np.concatenate(
                [
                    statistic(
                        stat, pooled[rng.integers(0, len(pooled), (min(chunk, SAMPLING_DRAWS - start), len(run)))]
                    )
                    for start in range(0, SAMPLING_DRAWS, chunk)
                ]
            )
            for run in runs
        ]
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        spreads = values.max(axis=0) / values.min(axis=0)
    return float(np.quantile(spreads, SAMPLING_QUANTILE))


def instability(record: Mapping[str, Any], side: str) -> str | None:
    """Why ``side`` (``baseline``, ``current``) of a comparison makes it unstable, or None: the
    figure whose runs disagree most beyond :data:`UNSTABLE_SPREAD`, its range and the likely
    cause (``the current's 5 runs disagree 8.3x on ttft.p90 (41 ms to 340 ms): run 2 ...``)."""
    spreads = []
    for key in UNSTABLE_FIGURES:
        values = [v for v in run_values(record, key) if v > 0]
        if len(values) >= 2 and max(values) / min(values) > UNSTABLE_SPREAD:
            chance = sampling_spread(record, key)
            if max(values) / min(values) > chance:
                spreads.append((max(values) / min(values), key, min(values), max(values), len(values), chance))
    if not spreads:
        return None
    spread, key, low, high, runs, chance = max(spreads)
    beyond = f", where sampling alone spreads them {chance:.1f}x" if chance > UNSTABLE_SPREAD else ""
    return f"the {side}'s {runs} runs disagree {spread:.1f}x on {key} ({format_figure(key, low)} to {format_figure(key, high)}{beyond}): {burst_line(record)}"
