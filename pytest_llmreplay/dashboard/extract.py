"""A stored result -> what the dashboard draws of it: the small, JSON-ready dict that
:mod:`.cache` keeps per result, so that a rebuild never reads a result twice.

Of a result (:mod:`~pytest_llmreplay.gate.baseline`'s stored form) it keeps:

- ``line``: the digest of what must be equal for two results to be gated
  against each other (fingerprint, workload, settings: :func:`~pytest_llmreplay.gate.baseline.mismatch`;
  and the number of runs, as :func:`~pytest_llmreplay.gate.history.history_points` requires),
  and ``facts``, the same for every result of a line (:mod:`.cache` keeps them once per line):
  ``test``, the ``fingerprint``, ``workload``, ``settings`` and ``runs`` that label the line, and
  ``tolerances``, the gated figures and their allowed changes
  (:func:`~pytest_llmreplay.gate.baseline.gated_tolerances`: a capacity test's capacity, else the
  default seven, with the test's own ``regression`` applied where the result stored it);
- ``figures``: each gated figure and each SLO's figure (``metric.stat``), where
  measured; ``intervals``: ``[low, high]`` per figure where the result gives one: the range of
  its runs' own figures (``--llm-repeat``), a capacity's search bracket (``high`` None when no
  load failed);
- ``slo`` (the stored checks as they are), ``failed_by`` and ``plugin_metrics``, from which
  :func:`point_slos` reads the SLOs (figure, threshold in the metric's own unit, operator, text)
  and :func:`outcome` writes the headline and SLO table, of the results a page shows them of.

A result that measured part or none of its workload (:func:`~pytest_llmreplay.gate.stored_record.partial_reason`:
stopped by a signal, a capacity search its server's failure cut short, no request succeeded) is kept as
``{"partial": why}`` and one that cannot be read as ``{"unreadable": why}``: the series leave
both out, as the history and the gate do.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..errors import LLMReplayError
from ..gate.baseline import gated_tolerances
from ..gate.history import figure
from ..gate.repeats import run_count
from ..gate.stored_record import identity, partial_reason
from ..metrics.slo import KNOWN_METRICS, parse_slo
from ..report.rows import Headline, headline, slo_rows, stored_checks

VERSION = 8  # of what extract() returns and the cache keeps of it: a cache of another version is read again
OUTCOME = ("slo", "failed_by", "plugin_metrics")  # what outcome() and point_slos() read besides the figures


def line_of(record: Mapping[str, Any]) -> str:
    """The digest of the parts of ``record`` that two results gated against each other share
    (:func:`~pytest_llmreplay.gate.stored_record.identity`: an engine repository's results of
    every commit, each with its own server version, are one line)."""
    parts = [
        {key: value for key, value in identity(record, part).items() if value is not None}
        for part in ("fingerprint", "workload", "settings")
    ]
    text = json.dumps([*parts, run_count(record)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=4096)
def slo_figure(key: str, threshold: str, extra: tuple[str, ...]) -> dict[str, Any] | None:
    """An SLO's ``figure`` (``metric.stat``), ``value`` (the threshold in the metric's own unit),
    ``op`` and ``text`` (``ttft.p99 < 500ms``); None when it does not read back. Cached: the
    results of one test carry the same SLOs, read once."""
    try:
        slo = parse_slo(key, threshold, extra_metrics=extra)
    except (LLMReplayError, TypeError):
        return None
    return {"figure": f"{slo.metric}.{slo.stat}", "value": slo.value, "op": slo.op, "text": f"{slo.key} {slo.text}"}


def plugin_metrics(record: Mapping[str, Any]) -> tuple[str, ...]:
    """The metrics of ``record``'s summary that plugins add (an SLO may name them)."""
    return tuple(metric for metric in record.get("summary") or {} if metric not in KNOWN_METRICS)


def slo_figures(entries: Any, extra: tuple[str, ...]) -> list[dict[str, Any]]:
    """:func:`slo_figure` of each of a result's stored SLO ``entries`` that reads back;
    ``extra``: its :func:`plugin_metrics`."""
    found = (
        slo_figure(str(entry.get("key")), str(entry.get("threshold")), extra)
        for entry in entries or []
        if isinstance(entry, Mapping)
    )
    return [slo for slo in found if slo is not None]


def point_slos(point: Mapping[str, Any]) -> list[dict[str, Any]]:
    """:func:`slo_figures` of what :func:`extract` kept of a result."""
    return slo_figures(point["slo"], tuple(point["plugin_metrics"]))


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
    partial = partial_reason(record)
    if partial:
        return {"partial": partial}
    tolerances = gated_tolerances(record, record.get("regression"))  # the test's own allowed changes, as its gate
    keys = list(
        dict.fromkeys([*tolerances, *(slo["figure"] for slo in slo_figures(record.get("slo"), plugin_metrics(record)))])
    )
    return {
        "line": line_of(record),
        "facts": {
            "test": str(record.get("test")),
            "fingerprint": record.get("fingerprint") or {},
            "workload": record.get("workload") or {},
            "settings": record.get("settings") or {},
            "runs": run_count(record),
            "tolerances": tolerances,
        },
        "dirty": bool(record.get("dirty")),
        "figures": {key: value for key in keys if (value := figure(record, key)) is not None},
        "intervals": intervals(record, keys),
        "slo": list(record.get("slo") or []),
        "failed_by": list(record.get("failed_by") or []),
        "plugin_metrics": list(plugin_metrics(record)),
    }


def outcome(figures: Mapping[str, Any]) -> tuple[Headline, list[list[str]]]:
    """The headline and the SLO table of a result as the HTML report writes them
    (:mod:`~pytest_llmreplay.report.rows`), from what :func:`extract` kept of it: the pages
    need them of each line's newest result only."""
    record = {
        "slo": figures["slo"],
        "failed_by": figures["failed_by"],
        "summary": dict.fromkeys(figures["plugin_metrics"], {}),
    }
    checks = stored_checks(record)
    return headline(record, checks), slo_rows(record, checks)
