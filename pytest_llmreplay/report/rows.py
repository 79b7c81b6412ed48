"""What the report files say about each stored result (``tests/<test>.json`` of ``--llm-report``),
as text cells shared by the Markdown summary and the HTML page; every value in its metric's
unit (:mod:`pytest_llmreplay.metrics.units`).

- :func:`overview_row`: one row of the summary table (the outcome, requests, TTFT p50/p99, TTFO
  p50 when a run had reasoning, TPOT p50, TTFAT p90, cache hit rate, output throughput, the
  capacity when a test searched one, SLOs met, the comparison's verdict);
- :func:`stored_checks` and :func:`slo_rows`: the SLOs of the result (those of the test's marker
  or spec and those checked in code, whatever its ``slo`` list holds) read back as checks: metric,
  threshold, measured and margin in the threshold's unit, status;
- :func:`headline`: pass/fail (FAIL also when the gate failed the test for a regression or a
  result it could not save: the record's ``failed_by``), the tightest SLO and the comparison's
  verdict in one line;
- :func:`comparison_rows`: the comparison in the terminal table's cells;
- :func:`endpoint_text`: the endpoint fingerprint as ``key value`` pairs;
- :class:`NotJudged`: the perf tests a stopped session did not run to the end, and the title
  (:func:`session_title`) and headlines that say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import LLMReplayError
from ..metrics.names import CAPACITY_STATS
from ..metrics.slo import NOT_MEASURED, Check, parse_slo
from ..metrics.units import format_figure, format_value
from ..wording import counted, listed

# (column header, metric, stat); a header names its statistic where the metric's SLO keys take several
OVERVIEW = (
    ("TTFT p50", "ttft", "p50"),
    ("TTFT p99", "ttft", "p99"),
    ("TPOT p50", "tpot", "p50"),
    ("TTFAT p90", "ttfat", "p90"),
    # the mean of each session's Σ cached / Σ prompt: not the tokens' own rate
    ("cache hit, session mean", "cache_hit_rate", "mean"),
    ("steady output tok/s", "output_throughput", "steady_state"),
)
# after TTFT p99 when some run had reasoning: the wait for the answer, which TTFT (the first reasoning token) is not
REASONING_COLUMN = ("TTFO p50", "ttfo", "p50")
SLO_HEADERS = ["metric", "threshold", "measured", "margin", "status"]


def overview_columns(reasoning: bool) -> tuple[tuple[str, str, str], ...]:
    """:data:`OVERVIEW`, with :data:`REASONING_COLUMN` after TTFT p99 when some run had reasoning."""
    return OVERVIEW[:2] + (REASONING_COLUMN,) + OVERVIEW[2:] if reasoning else OVERVIEW


def reasoning_in(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some result had reasoning (its summary has ``ttfo``): the overview's TTFO column."""
    return any("ttfo" in r["summary"] for r in records)


def capacity_in(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some result is a capacity search's (its summary has ``capacity``): the overview's capacity column."""
    return any("capacity" in r["summary"] for r in records)


def overview_headers(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The summary table's headers: test, outcome, requests ok, :func:`overview_columns`,
    capacity (when :func:`capacity_in`), SLOs met, vs baseline (:func:`overview_row`)."""
    columns = [header for header, *_ in overview_columns(reasoning_in(records))]
    return ["test", "outcome", "requests ok", *columns, *(["capacity"] if capacity_in(records) else [])] + [
        "SLOs met",
        "vs baseline",
    ]


def capacity_cell(record: Mapping[str, Any]) -> str:
    """The capacity of a search's result as the terminal's summary row writes it: ``at least``
    when no load failed, ``(ceiling)`` when it is the rate its point carried; ``-`` for a test
    that searched none."""
    figures = record["summary"].get("capacity") or {}
    stat = next((s for s in CAPACITY_STATS if s in figures), None)
    if stat is None:
        return "-"
    search = record.get("capacity") or {}
    value = format_figure(f"capacity.{stat}", figures[stat])
    return ("at least " if search.get("at_least") else "") + value + (" (ceiling)" if search.get("ceiling") else "")


def measured_requests(counts: Mapping[str, float]) -> int:
    """Of a summary's ``requests`` counts, those the run meant to measure: the planned ones less
    the warm-up ones, which are recorded but left out of every metric (``ok`` counts none)."""
    return int(counts.get("planned", 0) - counts.get("warmup", 0))


def overview_row(record: Mapping[str, Any], reasoning: bool = False, capacity: bool = False) -> list[str]:
    """The summary table's row of one stored result (:func:`overview_headers`; ``reasoning``:
    whether the table has the TTFO column, ``capacity`` the capacity column)."""
    summary = record["summary"]
    counts = summary.get("requests", {})
    row = [record["test"], headline(record).status, f"{counts.get('ok', 0)}/{measured_requests(counts)}"]
    row += [format_value(metric, summary.get(metric, {}).get(stat)) for _, metric, stat in overview_columns(reasoning)]
    row += [capacity_cell(record)] if capacity else []
    checks = record.get("slo") or []
    row.append(f"{sum(bool(c['passed']) for c in checks)}/{len(checks)}" if checks else "-")
    row.append(comparison_cell(record.get("comparison")))
    return row


def comparison_cell(comparison: Mapping[str, Any] | None) -> str:
    """``-`` (not compared), ``not compared`` (a mismatch), ``UNSTABLE`` (runs that disagree too
    much for a verdict), ``no regression`` or ``REGRESSION: keys`` (``, UNSTABLE`` after it where
    the runs also disagree: regressions that no noise explains, gate/baseline.py)."""
    if not comparison:
        return "-"
    if comparison.get("mismatch"):
        return "not compared"
    regressions = [row["key"] for row in comparison["rows"] if row["verdict"] == "regression"]
    unstable = ", UNSTABLE" if comparison.get("unstable") else ""
    if regressions:
        return "REGRESSION: " + ", ".join(regressions) + unstable
    return "UNSTABLE" if unstable else "no regression"


def stored_checks(record: Mapping[str, Any]) -> list[Check | Mapping[str, Any]]:
    """Each entry of the result's ``slo`` list as a :class:`~pytest_llmreplay.metrics.slo.Check` (its
    margin recomputed from the stored measurement, its outcome the stored one), or the entry
    itself when its key or threshold cannot be read back (a newer writer's)."""
    summary = record.get("summary") or {}
    found: list[Check | Mapping[str, Any]] = []
    for entry in record.get("slo") or []:
        try:
            slo = parse_slo(entry["key"], entry["threshold"], extra_metrics=summary)
        except (LLMReplayError, KeyError, TypeError):
            found.append(entry)
            continue
        measured = entry.get("measured")
        check = Check(slo, None, None, False) if measured is None else slo.check({slo.metric: {slo.stat: measured}})
        found.append(replace(check, passed=bool(entry.get("passed"))))
    return found


def slo_rows(record: Mapping[str, Any], checks: list[Check | Mapping[str, Any]] | None = None) -> list[list[str]]:
    """:data:`SLO_HEADERS` cells of each stored SLO (see :func:`stored_checks`; ``checks``: its
    result when the caller has it)."""
    rows = []
    for check in stored_checks(record) if checks is None else checks:
        if isinstance(check, Check):
            rows.append(check.row())
        else:
            measured = check.get("measured")
            rows.append(
                [
                    str(check.get("key")),
                    str(check.get("threshold")),
                    NOT_MEASURED if measured is None else f"{measured:.4g}",
                    "",
                    "ok" if check.get("passed") else "BREACH",
                ]
            )
    return rows


def tightness(check: Check) -> float:
    """How close a check is to failing, comparable across units: its margin over the threshold
    (``margin / |threshold|``); for a threshold of 0, +inf when met with headroom (``>= 0%``
    holds whatever was measured: never the closest), else the margin itself; -inf when not
    measured."""
    if check.margin is None:
        return -math.inf
    if not check.slo.value:
        return math.inf if check.margin > 0 else check.margin
    return check.margin / abs(check.slo.value)


def is_run_of(record: Mapping[str, Any], test: str) -> bool:
    """Whether a report record is a run of ``test``: its id, or a named run's ``id::name``."""
    return record["test"] == test or record["test"].startswith(f"{test}::")


@dataclass(frozen=True)
class NotJudged:
    """The perf tests a session did not run to the end (``tests``, their ids in order: cut off by
    a KeyboardInterrupt, or never run after ``-x``, ``--maxfail`` or a signal stopped it) and
    ``why`` (``the session stopped: stopping after 1 failures``). A result of one of them
    (:meth:`mark`) measured what it measured, but its test never reached its verdict. ``errors``:
    (id, error) of the perf tests that ran but errored before any result (a declared server that
    did not start): no result file names them, so a report listed only the others, all green."""

    tests: tuple[str, ...] = ()
    why: str = ""
    errors: tuple[tuple[str, str], ...] = ()

    @property
    def any(self) -> bool:
        """Some perf test has no verdict: not run to the end, or errored before any result."""
        return bool(self.tests or self.errors)

    def mark(self, results: Sequence[dict[str, Any]]) -> None:
        """Set ``not_judged`` (:attr:`why`) in each report record of a test not judged (its id, or
        a named run's ``id::name``), which its :func:`headline` reads."""
        for record in results:
            if any(is_run_of(record, test) for test in self.tests):
                record["not_judged"] = self.why

    def line(self) -> str:
        """``not judged: 2 perf tests did not run to the end (the session stopped: ...): a, b``,
        then ``no result: 1 perf test errored before measuring: c (its error)``; empty when
        every test ran to the end and measured."""
        lines = []
        if self.tests:
            lines.append(
                f"not judged: {counted(len(self.tests), 'perf test')} did not run to the end ({self.why}): {listed(self.tests)}"
            )
        if self.errors:
            named = "; ".join(f"{test} ({error})" for test, error in self.errors)
            lines.append(f"no result: {counted(len(self.errors), 'perf test')} errored before measuring: {named}")
        return "\n".join(lines)


ALL_JUDGED = NotJudged()  # a session whose perf tests all ran to the end


def mark_test_outcomes(results: Sequence[dict[str, Any]], outcomes: Mapping[str, str]) -> None:
    """Set ``test_outcome`` in each report record from ``outcomes`` (test id -> pytest's outcome:
    ``passed``, ``failed``, ``skipped``, ``xfailed``, ``xpassed``) of its test (its id, or a named
    run's ``id::name``), which :func:`headline` reads: the outcome a report shows is the test's,
    as pytest reports it, not only its SLOs'."""
    for record in results:
        found = next((outcome for test, outcome in outcomes.items() if is_run_of(record, test)), None)
        if found is not None:
            record["test_outcome"] = found


def session_title(count: int, not_judged: NotJudged) -> str:
    """``llmreplay: 3 perf tests`` for ``count`` results; ``llmreplay: 1 perf test result; 2 perf
    tests not judged`` when the session did not run every perf test to the end (a result of one
    of them among the ``count``): a report of a stopped session never reads as a whole one."""
    if not not_judged.any:
        return f"llmreplay: {counted(count, 'perf test')}"
    unjudged = [f"{counted(len(not_judged.tests), 'perf test')} not judged"] if not_judged.tests else []
    unjudged += (
        [f"{counted(len(not_judged.errors), 'perf test')} errored before measuring"] if not_judged.errors else []
    )
    return f"llmreplay: {counted(count, 'perf test result')}; {'; '.join(unjudged)}"


@dataclass(frozen=True)
class Headline:
    """A test at a glance: ``status`` FAIL (an SLO breached, or ``failed``), else PASS (every SLO
    met) or NO SLOS; INTERRUPTED when a signal stopped the run and nothing else failed it (its
    breaches, on part of the workload, judge nothing); ``failed``: what else failed the test, from the record's ``failed_by``
    (``regressions fail the test (--llm-fail-on-regression)``); ``slos`` (``2/2 SLOs met``); ``closest``: the breached SLO furthest over, else the met one
    closest to its threshold (``==`` SLOs have no headroom and are left out), with its measured
    value and margin; ``verdict``: the comparison's (:func:`comparison_cell`); ``interrupted``:
    ``interrupted by SIGINT`` when a signal stopped the run (its figures cover part of the workload).
    NOT JUDGED, before all of these, when its test did not run to the end (the report's
    ``not_judged``, why: :meth:`NotJudged.mark`): what failed or passed it then is no verdict.
    Where pytest's outcome of the test is known (``test_outcome``, :func:`mark_test_outcomes`), it
    wins: FAIL (``the test failed``) for a failed test whatever its SLOs, SKIPPED or XFAIL for one
    pytest skipped or expected to fail."""

    status: str
    slos: str
    closest: str | None
    verdict: str
    interrupted: str | None = None
    failed: str | None = None

    def details(self) -> list[str]:
        """Every part after the status, in order."""
        return [
            part
            for part in (self.failed, self.interrupted, self.slos, self.closest, f"vs baseline: {self.verdict}")
            if part
        ]

    def text(self) -> str:
        return " · ".join([self.status, *self.details()])


def headline(record: Mapping[str, Any], stored: list[Check | Mapping[str, Any]] | None = None) -> Headline:
    """The record's :class:`Headline` (``stored``: its :func:`stored_checks` when the caller has them)."""
    checks = [c for c in (stored_checks(record) if stored is None else stored) if isinstance(c, Check)]
    entries = record.get("slo") or []
    breached = sum(not e.get("passed") for e in entries)
    if not entries:
        status, slos = "NO SLOS", "no SLOs"
    elif breached:
        status, slos = "FAIL", f"{breached} of {len(entries)} SLOs breached"
    else:
        status, slos = "PASS", f"{len(entries)}/{len(entries)} SLOs met"
    failed = "; ".join(record.get("failed_by") or ()) or None
    if failed:
        status = "FAIL"
    candidates = [c for c in checks if not c.passed] or [c for c in checks if c.slo.op != "=="]
    closest = None
    if candidates:
        check = min(candidates, key=tightness)
        key, threshold, measured, margin, _ = check.row()
        if check.measured is None:
            closest = f"worst: {key} {NOT_MEASURED} ({threshold})"
        else:
            closest = f"{'worst' if not check.passed else 'closest'}: {key} {measured} vs {threshold}, margin {margin}"
    interrupted = f"interrupted by {record['interrupted']}" if record.get("interrupted") else None
    outcome = record.get("test_outcome")  # pytest's, where known (mark_test_outcomes): the test's verdict
    if outcome == "failed" and status != "FAIL":  # a strict xfail that passed, another run of the test, ...
        status, failed = "FAIL", "the test failed"
    elif outcome in ("skipped", "xfailed"):  # pytest did not fail it, whatever its SLOs say
        status, failed = ("XFAIL" if outcome == "xfailed" else "SKIPPED"), None
    if interrupted and not failed:  # a partial result's breaches judge nothing
        status = "INTERRUPTED"
    if record.get("not_judged"):  # its test was cut off before its verdict: what failed it is no verdict either
        status, failed = "NOT JUDGED", record["not_judged"]
    return Headline(status, slos, closest, comparison_cell(record.get("comparison")), interrupted, failed)


def comparison_rows(comparison: Mapping[str, Any]) -> list[list[str]]:
    """The stored comparison's rows as the terminal table's cells
    (:func:`~pytest_llmreplay.gate.comparison_table.comparison_cells`)."""
    from ..gate.baseline import Row
    from ..gate.comparison_table import comparison_cells

    return [comparison_cells(Row(**row)) for row in comparison["rows"]]


def endpoint_text(fingerprint: Mapping[str, Any] | None) -> str:
    """``kind offline, model meta-llama/..., hardware 1 x H100``: the fingerprint's set fields in
    order, nested mappings as ``outer.inner``."""

    def pairs(mapping: Mapping[str, Any], prefix: str = "") -> list[str]:
        found = []
        for key, value in mapping.items():
            if isinstance(value, Mapping):
                found += pairs(value, f"{prefix}{key}.")
            elif value not in (None, "", [], ()):
                found.append(f"{prefix}{key} {value}")
        return found

    return ", ".join(pairs(fingerprint or {})) or "unknown"
