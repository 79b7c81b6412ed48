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
figure of 0, is not judged). Chosen on the simulator's noise model and the first three live runs
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

from ..metrics.units import format_figure
from .repeats import run_samples

UNSTABLE_FIGURES = ("ttft.p50", "ttft.p90", "tpot.p50", "latency.p50", "ttfat.p50")
UNSTABLE_SPREAD = 3.0  # largest / smallest of one side's runs' values of a figure
BURST_TPOT_S = 1e-4  # a request whose TPOT is under 0.1 ms received its response in one burst
BURST_SHARE_GAP = 0.10  # runs whose burst shares differ this much were buffered differently


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


def instability(record: Mapping[str, Any], side: str) -> str | None:
    """Why ``side`` (``baseline``, ``current``) of a comparison makes it unstable, or None: the
    figure whose runs disagree most beyond :data:`UNSTABLE_SPREAD`, its range and the likely
    cause (``the current's 5 runs disagree 8.3x on ttft.p90 (41 ms to 340 ms): run 2 ...``)."""
    spreads = []
    for key in UNSTABLE_FIGURES:
        values = [v for v in run_values(record, key) if v > 0]
        if len(values) >= 2:
            spreads.append((max(values) / min(values), key, min(values), max(values), len(values)))
    if not spreads or max(spreads)[0] <= UNSTABLE_SPREAD:
        return None
    spread, key, low, high, runs = max(spreads)
    return f"the {side}'s {runs} runs disagree {spread:.1f}x on {key} ({format_figure(key, low)} to {format_figure(key, high)}): {burst_line(record)}"
