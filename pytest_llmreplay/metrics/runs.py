"""Several runs of one test (``--llm-repeat N``) as one set of figures: each figure the median
over the runs (counts: the lower median, a run's own count). What a repeated test's SLOs are
checked against, its own and its body's ``assert_slo`` alike, and what its stored result keeps
(:mod:`~pytest_llmreplay.gate.repeats`)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any


def median_summary(summaries: list[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """metric -> stat -> the median over ``summaries`` of the numbers they hold, over the runs
    that measured it: a figure one run lacks (no complete session there for ``ttfat``) is the
    median of the others whichever run lacks it, the first or a later one. Metrics and statistics
    in the order they first appear."""
    first: dict[str, Any] = {}  # metric -> its first run's stats (each stat's first value), or a non-figure as is
    for summary in summaries:
        for metric, stats in summary.items():
            if not isinstance(stats, Mapping):
                first.setdefault(metric, stats)
                continue
            for stat, value in stats.items():
                first.setdefault(metric, {}).setdefault(stat, value)
    out: dict[str, Any] = {}
    for metric, stats in first.items():
        if not isinstance(stats, dict):
            out[metric] = stats
            continue
        out[metric] = {}
        for stat, fallback in stats.items():
            values = [s.get(metric, {}).get(stat) for s in summaries]
            numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            counts = all(isinstance(v, int) for v in numbers)  # a count stays one run's count
            out[metric][stat] = (
                (statistics.median_low(numbers) if counts else statistics.median(numbers)) if numbers else fallback
            )
    return out
