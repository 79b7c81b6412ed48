"""Each line's latest verdict: what the gate says of its newest result against the one before it.

The comparison is the gate's (:func:`~pytest_llmreplay.gate.baseline.compare` of the two stored
results, over the newest result's gated figures and tolerances, then
:func:`~pytest_llmreplay.gate.history.gate_with_history` over the line's earlier results, the
newest :data:`~pytest_llmreplay.gate.history.HISTORY_WINDOW`): the verdict ``pytest
--llm-compare`` would have given the newest result. Only these two results are read whole
(their samples); the verdict is cached in the output folder by the two results' keys and those
of the earlier results that gated it, so a rebuild compares only a line that got a new result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import LLMReplayError
from ..gate.baseline import compare
from ..gate.history import HISTORY_WINDOW, History, gate_with_history
from ..gate.store import Store
from ..report.rows import comparison_cell
from .cache import DigestCache
from .series import Line, Point


def summary_of(point: Point) -> dict[str, Any]:
    """A stored result as the history gate reads it: its ``summary`` of the extracted figures."""
    summary: dict[str, dict[str, float]] = {}
    for key, value in point.figures["figures"].items():
        metric, _, stat = key.partition(".")
        summary.setdefault(metric, {})[stat] = value
    return {"summary": summary}


def judged(store: Store, line: Line) -> dict[str, Any]:
    """The verdict of ``line``'s newest result (module docstring): ``cell`` (``no regression``,
    ``REGRESSION: ttft.p50``, ``not compared``, ``UNSTABLE``; ``-`` for a line of one result or
    two that cannot be read), ``against`` (the earlier result's key) and ``rows``
    (``{key, verdict, change, low, high}`` per compared figure)."""
    if len(line.points) < 2:
        return {"cell": "-", "rows": [], "why": "one result: nothing to compare with"}
    earlier, newest = line.points[-2], line.points[-1]
    records = dict(store.read_many([earlier.key, newest.key]))
    base, current = records[earlier.key], records[newest.key]
    for record in (base, current):
        if isinstance(record, LLMReplayError):
            return {"cell": "-", "rows": [], "why": str(record)}
    assert isinstance(base, dict) and isinstance(current, dict)  # errors returned above
    comparison = compare(base, current, line.facts["tolerances"], label=earlier.key)
    if comparison.mismatch is None:
        history: list[tuple[str, Mapping[str, Any]]] = [(p.key, summary_of(p)) for p in line.points[:-1]]
        history = history[-HISTORY_WINDOW:]
        gate_with_history(comparison, current, History(history))
    rows = [
        {"key": row.key, "verdict": row.verdict, "change": row.change, "low": row.low, "high": row.high}
        for row in comparison.rows
    ]
    as_stored = {"mismatch": comparison.mismatch, "unstable": comparison.unstable, "rows": rows}
    return {"cell": comparison_cell(as_stored), "against": earlier.key, "rows": rows}


def latest_verdict(cache: DigestCache, store: Store, line: Line) -> Mapping[str, Any]:
    """:func:`judged`, cached by the keys of the results it reads (module docstring)."""
    keys = [p.key for p in line.points[-HISTORY_WINDOW - 1 :]]
    return cache.get("\n".join(keys), lambda: judged(store, line))
