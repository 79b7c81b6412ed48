"""A stored result -> what the dashboard draws of it: the small, JSON-ready dict that
:mod:`.cache` keeps per result, so that a rebuild never reads a result twice.

Of a result (:mod:`~pytest_llmreplay.gate.baseline`'s stored form) it keeps:

- ``test``, ``commit``, ``time``; ``line``: the digest of what must be equal for two results to
  be gated against each other (fingerprint, workload, settings: :func:`~pytest_llmreplay.gate.baseline.mismatch`;
  and the number of runs, as :func:`~pytest_llmreplay.gate.history.history_points` requires),
  with the ``fingerprint``, ``workload``, ``settings`` and ``runs`` themselves to label the line;
- ``tolerances``: the gated figures and their allowed changes
  (:func:`~pytest_llmreplay.gate.baseline.gated_tolerances`: a capacity test's capacity, else the
  default seven); ``figures``: each gated figure and each SLO's figure (``metric.stat``), where
  measured; ``intervals``: ``[low, high]`` per figure where the result gives one: the range of
  its runs' own figures (``--llm-repeat``), a capacity's search bracket (``high`` None when no
  load failed);
- ``slos``: each SLO's figure, threshold (in the metric's own unit), operator and text;
  ``headline``: PASS/FAIL and the SLO closest to failing, and ``slo_rows``: the SLO table, as the
  HTML report writes them (:mod:`~pytest_llmreplay.report.rows`).

A result stopped by a signal is kept as ``{"interrupted": SIGNAL}`` and one that cannot be read
as ``{"unreadable": why}``: the series leave both out, as the history does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..gate.baseline import gated_tolerances
from ..gate.history import figure
from ..gate.repeats import run_count
from ..metrics.slo import Check
from ..report.rows import headline, slo_rows, stored_checks

VERSION = 1  # of what extract() returns: a cache written by another version is read again


def line_of(record: Mapping[str, Any]) -> str:
    """The digest of the parts of ``record`` that two results gated against each other share."""
    parts = [
        {key: value for key, value in (record.get(part) or {}).items() if value is not None}
        for part in ("fingerprint", "workload", "settings")
    ]
    text = json.dumps([*parts, run_count(record)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def slo_figures(checks: list[Check | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each SLO that reads back (of the record's :func:`~pytest_llmreplay.report.rows.stored_checks`):
    its ``figure`` (``metric.stat``), ``value`` (the threshold in the metric's own unit), ``op``
    and ``text`` (``ttft.p99 < 500ms``)."""
    return [
        {
            "figure": f"{check.slo.metric}.{check.slo.stat}",
            "value": check.slo.value,
            "op": check.slo.op,
            "text": f"{check.slo.key} {check.slo.text}",
        }
        for check in checks
        if isinstance(check, Check)
    ]


def intervals(record: Mapping[str, Any], keys: list[str]) -> dict[str, list[float | None]]:
    """``[low, high]`` of each of ``keys`` where ``record`` gives one (module docstring)."""
    found: dict[str, list[float | None]] = {}
    runs = record.get("runs") or []
    if len(runs) > 1:
        for key in keys:
            values = [v for v in (figure(run, key) for run in runs) if v is not None]
            if len(values) > 1:
                found[key] = [min(values), max(values)]
    bracket = (record.get("summary") or {}).get("capacity") or {}
    for key in keys:
        if key.startswith("capacity.") and isinstance(bracket.get("low"), (int, float)):
            high = None if (record.get("capacity") or {}).get("at_least") else bracket.get("high")
            found[key] = [float(bracket["low"]), float(high) if isinstance(high, (int, float)) else None]
    return found


def extract(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the dashboard keeps of one stored result (module docstring)."""
    if record.get("interrupted"):
        return {"interrupted": str(record["interrupted"])}
    tolerances = gated_tolerances(record)
    checks = stored_checks(record)  # the SLOs read once, for the three uses below
    slos = slo_figures(checks)
    keys = list(dict.fromkeys([*tolerances, *(slo["figure"] for slo in slos)]))
    figures = {key: value for key in keys if (value := figure(record, key)) is not None}
    line = headline(record, checks)
    return {
        "test": str(record.get("test")),
        "commit": record.get("commit"),
        "time": record.get("time"),
        "line": line_of(record),
        "fingerprint": record.get("fingerprint") or {},
        "workload": record.get("workload") or {},
        "settings": record.get("settings") or {},
        "runs": run_count(record),
        "tolerances": tolerances,
        "figures": figures,
        "intervals": intervals(record, keys),
        "slos": slos,
        "headline": {"status": line.status, "slos": line.slos, "closest": line.closest},
        "slo_rows": slo_rows(record, checks),
    }
