"""Several runs of one test (``--llm-repeat N``) as one set of figures: each figure the median
over the runs (counts: the lower median, a run's own count). What a repeated test's SLOs are
checked against, its own and its body's ``assert_slo`` alike, and what its stored result keeps
(:mod:`~pytest_llmreplay.gate.repeats`)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any


def median_summary(summaries: list[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """metric -> stat -> the median over ``summaries`` of the numbers they hold (None if none)."""
    out: dict[str, dict[str, Any]] = {}
    for metric, stats in summaries[0].items():
        if not isinstance(stats, Mapping):
            out[metric] = stats
            continue
        out[metric] = {}
        for stat in stats:
            values = [s.get(metric, {}).get(stat) for s in summaries]
            numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            counts = all(isinstance(v, int) for v in numbers)  # a count stays one run's count
            out[metric][stat] = (
                (statistics.median_low(numbers) if counts else statistics.median(numbers)) if numbers else stats[stat]
            )
    return out
