"""Survivorship: whether the latency figures of two stored results are over comparable requests.

A latency figure (a time: ``ttft``, ``tpot``, ``latency``, ``ttfo``, ``ttfat``) is a statistic of
the requests (or sessions) that completed; a failed request has none. When the current run
failed more of the workload than the baseline, its latencies are over the survivors only, and
the requests likeliest to fail are the slowest (a timeout, a server out of memory under load),
so a run that lost requests can look as fast as its baseline, or faster. So are the requests a
``duration_s`` limit cancelled (still running at its end, the grace past: the slowest again; a
run 1.5 times slower lost 101 of 116 requests there, the baseline 91, and its latency p50 read
15% faster). With ``ok``, ``failed`` and ``cancelled`` each side's requests
(``summary.requests``, summed over its runs) and ``lost = failed + cancelled``, the current
run **lost requests** when

    lost_current / (ok_current + lost_current) > lost_baseline / (ok_baseline + lost_baseline)

Any excess counts: the lost requests' latencies are unknown, so nothing bounds the survivors'
statistics (one lost request may be the p99). Each latency row of such a comparison that drew a
change is **not comparable**: a regression with no change, noted :func:`lost_requests`' line
(``3 of 66 requests failed in this run, 0 of 66 in the baseline``), so that the gate fails it
rather than calling it ok or improved (:func:`mark_not_comparable`). A record without request
counts (stored by hand) is taken as complete. Other figures are left as they are: a
throughput or a hit rate counts failed requests' absence against the run already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..metrics.units import unit_family


def request_counts(record: Mapping[str, Any]) -> tuple[int, int, int]:
    """(failed, cancelled, measured) requests of a stored record: each run's ``summary.requests``
    (``ok``, ``failed``, ``cancelled``) summed, or the record's own summary's for one run;
    (0, 0, 0) without counts. ``measured`` is all three."""
    summaries = [run["summary"] for run in record.get("runs") or ()] or [record.get("summary") or {}]
    counts = [summary.get("requests") or {} for summary in summaries]
    failed, cancelled = (sum(int(c.get(key, 0)) for c in counts) for key in ("failed", "cancelled"))
    return failed, cancelled, failed + cancelled + sum(int(c.get("ok", 0)) for c in counts)


def lost_requests(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """``3 of 66 requests failed in this run, 0 of 66 in the baseline`` (``failed or were
    cancelled`` where either side had some cancelled; ``none (no counts stored) in the
    baseline`` for a record without counts) when ``current`` lost a larger share of its requests
    than ``baseline`` (module docstring); None when it did not."""
    failed, cancelled, measured = request_counts(current)
    base_failed, base_cancelled, base_measured = request_counts(baseline)
    lost, base_lost = failed + cancelled, base_failed + base_cancelled
    if not lost or lost * max(base_measured, 1) <= base_lost * measured:
        return None
    base = f"{base_lost} of {base_measured}" if base_measured else "none (no counts stored)"
    how = "failed or were cancelled at the duration limit" if cancelled or base_cancelled else "failed"
    return f"{lost} of {measured} requests {how} in this run, {base} in the baseline"


def mark_not_comparable(rows: Iterable[Any], baseline: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Make each latency row of ``rows`` (:class:`~pytest_llmreplay.gate.baseline.Row`) that drew
    a change a regression with no change, noted ``not comparable: <lost_requests>; its figure is
    over the requests that survived``, when the current run lost requests (module docstring)."""
    lost = lost_requests(baseline, current)
    if lost is None:
        return
    for row in rows:
        if row.change is not None and unit_family(row.key.partition(".")[0]) == "time":
            row.change = row.low = row.high = row.confidence = row.p_value = None
            row.verdict = "regression"
            row.note = f"not comparable: {lost}; its figure is over the requests that survived"
