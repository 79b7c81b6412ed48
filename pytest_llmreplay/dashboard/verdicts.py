"""Each line's latest verdict: what the gate says of its newest result against the one before it.

The comparison is the gate's (:func:`~pytest_llmreplay.gate.baseline.compare` of the two stored
results, over the newest result's gated figures and tolerances, then
:func:`~pytest_llmreplay.gate.history.gate_with_history` over the line's earlier results, the
newest :data:`~pytest_llmreplay.gate.history.HISTORY_WINDOW`): the verdict ``pytest
--llm-compare`` would have given the newest result. Only these two results are read whole
(their samples); the verdict is cached in the output folder by the two results' keys and those
of the earlier results that gated it, so a rebuild compares only a line that got a new result.

**In threads** (:class:`Judge`): the two results of each line to compare are read in one go in
the build's thread (:meth:`~pytest_llmreplay.gate.store.Store.read_many`), then compared in
``workers`` threads while the build draws the series and charts: most of a comparison's time is
numpy's percentiles of the bootstrap, which run outside the GIL (processes would gain little
more, and cost their start: bench/README.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import LLMReplayError
from ..gate.baseline import compare
from ..gate.history import HISTORY_WINDOW, History, gate_with_history
from ..gate.store import Store
from ..report.rows import comparison_cell
from .cache import DigestCache
from .series import Line

ONE_RESULT = {"cell": "-", "rows": [], "why": "one result: nothing to compare with"}


def summary_of(figures: Mapping[str, float]) -> Mapping[str, Any]:
    """A stored result as the history gate reads it: its ``summary`` of the extracted figures."""
    summary: dict[str, dict[str, float]] = {}
    for key, value in figures.items():
        metric, _, stat = key.partition(".")
        summary.setdefault(metric, {})[stat] = value
    return {"summary": summary}


@dataclass(frozen=True)
class Question:
    """What a line's latest verdict is made of besides its two results: the ``earlier`` result's
    key, the line's ``tolerances`` and its ``history`` (key and :func:`summary_of` of each of
    the newest :data:`~pytest_llmreplay.gate.history.HISTORY_WINDOW` results before the newest)."""

    earlier: str
    tolerances: Mapping[str, float]
    history: list[tuple[str, Mapping[str, Any]]]

    @classmethod
    def of(cls, line: Line) -> Question:
        first = max(0, len(line) - 1 - HISTORY_WINDOW)
        history = [(line.keys[i], summary_of(line.figures(i))) for i in range(first, len(line) - 1)]
        return cls(line.keys[-2], line.facts["tolerances"], history)


def judged(
    question: Question, base: dict[str, Any] | LLMReplayError, current: dict[str, Any] | LLMReplayError
) -> dict[str, Any]:
    """The verdict of a line's newest result (``current``) against the one before (``base``),
    as read from the store (module docstring): ``cell`` (``no regression``, ``REGRESSION:
    ttft.p50``, ``not compared``, ``UNSTABLE``; ``-`` for two results that cannot be read),
    ``against`` (the earlier result's key) and ``rows`` (``{key, verdict, change, low, high}``
    per compared figure)."""
    for record in (base, current):
        if isinstance(record, LLMReplayError):
            return {"cell": "-", "rows": [], "why": str(record)}
    assert isinstance(base, dict) and isinstance(current, dict)  # errors returned above
    comparison = compare(base, current, question.tolerances, label=question.earlier)
    if comparison.mismatch is None:
        gate_with_history(comparison, current, History(question.history))
    rows = [
        {"key": row.key, "verdict": row.verdict, "change": row.change, "low": row.low, "high": row.high}
        for row in comparison.rows
    ]
    as_stored = {"mismatch": comparison.mismatch, "unstable": comparison.unstable, "rows": rows}
    return {"cell": comparison_cell(as_stored), "against": question.earlier, "rows": rows}


Pending = tuple[str, "Future[dict[str, Any]]"]  # a verdict being made: its digest, its future


class Judge:
    """The latest verdicts of many lines (module docstring): :meth:`ask` starts what the cache
    does not know, :meth:`verdicts` waits for them and keeps them in the cache. A context
    manager: leaving it stops the threads."""

    def __init__(self, cache: DigestCache, store: Store, workers: int) -> None:
        self.cache, self.store = cache, store
        self.pool = ThreadPoolExecutor(workers) if workers > 1 else None

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def ask(self, lines: Sequence[Line]) -> list[Mapping[str, Any] | Pending]:
        """For each of ``lines`` its verdict, when known, else the verdict being made."""
        asked: list[Mapping[str, Any] | Pending] = []
        new: list[tuple[int, Line, str]] = []
        for line in lines:
            if len(line) < 2:
                asked.append(ONE_RESULT)
                continue
            digest, known = self.cache.find("\n".join(line.keys[-HISTORY_WINDOW - 1 :]))
            if known is None:
                new.append((len(asked), line, digest))
            asked.append(known)
        records = dict(self.store.read_many([key for _, line, _ in new for key in line.keys[-2:]]))
        for index, line, digest in new:
            base, current = (records[key] for key in line.keys[-2:])
            if self.pool is None:
                future: Future[dict[str, Any]] = Future()
                future.set_result(judged(Question.of(line), base, current))
            else:
                future = self.pool.submit(judged, Question.of(line), base, current)
            asked[index] = (digest, future)
        return asked

    def verdicts(self, asked: Sequence[Mapping[str, Any] | Pending]) -> list[Mapping[str, Any]]:
        """:meth:`ask`'s verdicts, each made one waited for and kept in the cache."""
        return [self.cache.put(item[0], item[1].result()) if isinstance(item, tuple) else item for item in asked]
