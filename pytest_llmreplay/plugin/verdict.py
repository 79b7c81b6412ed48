"""What happens to a test's replay once it is measured: SLO checks, the baseline comparison, the
stored result, the report files, and the verdict.

Order (nothing measured is lost): check every SLO; compare with the reference's stored result
(``--llm-compare``; with >= 5 earlier results on the reference's history, their spread
confirms or vetoes each call of the bootstrap: :mod:`~pytest_llmreplay.gate.history`); save this result (``--llm-save``); write its report files
(``--llm-report``: its record and CSV; or its record alone, for the Markdown summary of
``--llm-summary-md`` and ``$GITHUB_STEP_SUMMARY``: ``records_dir``; with ``--llm-compare`` the report's record also holds ``history``, each gated
figure over those earlier results and this run with its change points,
:func:`~pytest_llmreplay.gate.history.trend`, which the HTML report plots); then fail the test if an SLO is breached, or a regression was called and
``--llm-fail-on-regression`` is on (and then also when stored results exist but none could be
read: the gate could not run), or the result could not be saved. The report's record
holds ``failed_by`` when the test fails for a reason other than a breached SLO (those three, or
its own body raising after it measured), so its headline says FAIL as pytest does. The checks the test body made with ``Result.assert_slo`` are
stored and shown with the run's own SLOs, but do not decide here (a breach already raised). The
outcome's ``text`` (tables) goes into the test's report section, ``figures`` into its JUnit
properties. A capacity test's result
(:class:`~pytest_llmreplay.search.outcome.CapacityResult`) also stores its search (``capacity``: plan,
bracket, every point's figures), shows the points' table, and is compared on its capacity alone
unless its ``regression`` names more. A run stopped by a signal (:mod:`~pytest_llmreplay.plugin.interrupt`)
goes through the same steps; its record holds ``"interrupted": "<signal>"``, and a record that
does is never taken as the comparison's baseline (the newest stored result that was not
interrupted is) nor as a history point: it measured only part of its workload. For the same
reason its breached SLOs and regressions are shown but fail nothing (only a failed save does):
the test is reported ``interrupted``, not failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LLMReplayError
from ..gate.baseline import (
    Comparison,
    compare,
    gated_tolerances,
    interrupted_note,
    make_record,
    mismatch,
    slo_rows,
)
from ..gate.comparison_table import comparison_table
from ..gate.git import git_state
from ..gate.repeats import pool_records, repeats_line
from ..gate.store import UNSAVED, Store, result_folder, write_new
from ..metrics.slo import breach_table, check_slos, parse_slos

if TYPE_CHECKING:
    from ..gate.history import History

KEY_FIGURES = (
    "ttft.p50",
    "ttft.p99",
    "tpot.p50",
    "itl.p99",
    "ttfat.p90",
    "ttfo.p50",
    "ttfo.p90",
    "reasoning_tokens.mean",
    "cache_hit_rate.mean",
    "output_throughput.steady_state",
    "request_throughput.steady_state",
    "error_rate.value",
    "goodput.value",
    "goodput.rate",
    "capacity.rate",
    "capacity.session_rate",
    "capacity.concurrency",
)


@dataclass
class PerfRun:
    """One measured replay of a test: its baseline key (``test``), workload facts, and checks.
    With ``--llm-repeat N``: ``result`` is the last run, ``earlier`` the N - 1 before it, and
    ``facts`` each run's seed and cache reset (see :mod:`~pytest_llmreplay.gate.repeats`);
    ``repeats_note`` says why a test ran once when N runs were asked."""

    test: str
    result: Any
    workload: Mapping[str, Any]
    fingerprint: Mapping[str, Any]  # the endpoint it ran on (the session's, or its declared server's)
    slo: Mapping[str, str] = field(default_factory=dict)
    regression: Mapping[str, Any] = field(default_factory=dict)
    earlier: list[Any] = field(default_factory=list)
    facts: list[Mapping[str, Any]] = field(default_factory=list)
    repeats_note: str | None = None  # why it ran fewer times than asked (runs that cannot differ, a server that died)
    server_died: str | None = None  # the error of a declared server that died after the first run

    @property
    def results(self) -> list[Any]:
        return [*self.earlier, self.result]


@dataclass(frozen=True)
class NotCompared:
    """Why a test was not compared; ``unreadable``: stored results exist but none could be read
    (or the store could not be listed), so the gate could not run, which fails the test under
    ``--llm-fail-on-regression`` (a corrupt store never passes a regression silently)."""

    text: str
    unreadable: bool = False


@dataclass
class Outcome:
    """``text``: every table of the run; ``baseline_text``: its comparison and where it was saved."""

    text: str
    baseline_text: str
    figures: dict[str, float]
    failure: str | None
    interrupted: str | None = None  # the signal that stopped one of the runs (SIGINT, SIGTERM)


@dataclass
class Gate:
    """The session's settings for what follows a replay (see the module docstring)."""

    rootdir: Path
    store: Store
    save: bool = False
    fail_on_regression: bool = False
    fail_on_unstable: bool = False
    report_dir: Path | None = None  # --llm-report: the records, each test's CSV, and a trend per record
    records_dir: Path | None = None  # where each test's record goes (see session.records_folder)
    history: tuple[str, list[str]] | None = None  # the --llm-compare reference: (label, commits)
    _git: dict[str, Any] | None = None

    @property
    def git(self) -> dict[str, Any]:
        if self._git is None:
            self._git = git_state(self.rootdir)
        return self._git

    def finish(self, run: PerfRun, body_failure: str | None = None) -> Outcome:
        """``body_failure``: why the test's own body failed after measuring (``the test body
        raised AssertionError``), for the report's headline; the body's exception stands."""
        from ..report.terminal import render

        records = [
            make_record(result, test=run.test, fingerprint=run.fingerprint, workload=run.workload, git=self.git)
            for result in run.results
        ]
        record = pool_records(records, run.facts or [{}] * len(records))
        interrupted = record.get("interrupted")  # whichever run a signal cut short
        checks = check_slos(record["summary"], parse_slos(run.slo, extra_metrics=run.result.summary))
        every_check = (
            checks + run.result.slo_checks
        )  # the spec's, then the test body's assert_slo calls (on the same medians)
        record["slo"] = slo_rows(every_check)
        if run.regression:  # the test's own allowed changes, for whoever judges the result later
            record["regression"] = dict(run.regression)
        capacity = getattr(run.result, "capacity", None)
        if capacity is not None:
            record["capacity"] = capacity.as_dict()
        blocks = (
            [f"llmreplay: {run.test}"]
            + ([capacity.table()] if capacity is not None else [])
            + [render(run.result)]
            + ([repeats_line(record)] if len(records) > 1 else [])
            + ([run.repeats_note] if run.repeats_note else [])
            + ([breach_table(every_check)] if every_check else [])
        )
        earlier = self._earlier(run, record)
        found = self._compare(run, record, earlier) if earlier is not None else None
        comparison = found if isinstance(found, Comparison) else None
        # its table; else None, or why there is none
        compared_text = comparison_table(found) if isinstance(found, Comparison) else found.text if found else None
        baseline_blocks = [compared_text] if compared_text else []
        failures, failed_by = (
            [],
            [body_failure] if body_failure else [],
        )  # the failure texts; what failed the test besides breached SLOs (the report's headline)
        if self.save:
            try:
                saved = self.store.save_or_keep(record, self.rootdir / UNSAVED)
                baseline_blocks.append(f"saved baseline {saved}{interrupted_note(record)}")
            except LLMReplayError as exc:  # the comparison and the report are still kept
                baseline_blocks.append(f"not saved: {exc}")
                failures.append(f"--llm-save: {exc}")
                failed_by.append("not saved (--llm-save)")
        if not interrupted:  # a partial result is reported, never judged
            if not all(c.passed for c in checks):
                failures.append(breach_table(checks))
            if isinstance(found, NotCompared) and found.unreadable and self.fail_on_regression:
                failures.append(found.text)  # the gate could not run: never a silent pass
                failed_by.append("no readable stored result to gate against (--llm-fail-on-regression)")
            if comparison is not None:
                assert compared_text is not None  # the comparison's table
                if self.fail_on_regression and comparison.regressions:
                    failures.append(compared_text)
                    failed_by.append("regressions fail the test (--llm-fail-on-regression)")
                if self.fail_on_unstable and comparison.unstable:
                    failures.append(compared_text)
                    failed_by.append("an unstable comparison fails the test (--llm-fail-on-unstable)")
        if self.records_dir is not None:
            self._write_report(run, record, comparison, earlier, failed_by)
        baseline_text = "\n".join([f"llmreplay: {run.test}"] + baseline_blocks) if baseline_blocks else ""
        return Outcome(
            "\n\n".join(blocks),
            baseline_text,
            key_figures(record, comparison),
            "\n\n".join(failures) or None,
            interrupted,
        )

    def _earlier(self, run: PerfRun, record: Mapping[str, Any]) -> History | None:
        """The earlier results like ``record`` on the reference's history (a
        :class:`~pytest_llmreplay.gate.history.History`: the gate's newest ones, or a trend's when a
        report is written); None without ``--llm-compare``; none when the store cannot be listed
        (:meth:`_compare` then says so, and the result is still reported and saved or kept)."""
        if self.history is None:
            return None
        from ..gate.history import HISTORY_WINDOW, TREND_WINDOW, History, history_points

        window = TREND_WINDOW if self.report_dir is not None else HISTORY_WINDOW
        try:
            return history_points(self.store, run.test, self.history[1], like=record, limit=window)
        except LLMReplayError:  # an object store that went away mid-run: the comparison names the error
            return History([])

    def _compare(self, run: PerfRun, record: Mapping[str, Any], earlier: History) -> Comparison | NotCompared:
        assert self.history is not None  # there are earlier results only with a reference (_earlier)
        label, commits = self.history
        try:
            newest = self.store.newest_complete(run.test, commits, lambda stored: mismatch(stored, record) is None)
        except LLMReplayError as exc:  # the store could not be listed
            return NotCompared(f"Compared with {label}: cannot read the stored results ({exc})", unreadable=True)
        # the files the baseline's search and the history's passed over, named once (the history's header counts none)
        unreadable = list(dict.fromkeys([*newest.unreadable, *earlier.unreadable.values()]))
        skipped = replace(newest, unreadable=unreadable).skipped_line()
        if newest.record is None:
            readable = "readable " if skipped else ""
            passed_over = (
                f"; passed over {newest.partial} that measured part or none of the workload (interrupted, or no "
                "request succeeded: never a baseline)"
                if newest.partial
                else ""
            )
            return NotCompared(
                f"Compared with {label}: no {readable}{'complete ' if newest.partial else ''}stored result of this test there or in its "
                f"{len(commits) - 1} ancestors{passed_over} (save one with --llm-save)"
                + (f"\n{skipped}" if skipped else ""),
                unreadable=bool(skipped),
            )
        assert newest.key is not None  # found with its record
        dirty = " (saved from a dirty tree: tracked files changed)" if newest.record.get("dirty") else ""
        stored_at = f"{label}, stored {newest.key.rsplit('/', 1)[-1][:12]} {newest.record.get('time')}{dirty}"
        comparison = compare(
            newest.record, record, gated_tolerances(record, run.regression, newest.record), label=stored_at
        )
        if skipped:
            comparison.header = f"{comparison.header}\n{skipped}" if comparison.header else skipped
        if comparison.mismatch is None:
            from ..gate.history import HISTORY_WINDOW, History, gate_with_history

            gate_with_history(comparison, record, History(earlier.points[-HISTORY_WINDOW:], unlike=earlier.unlike))
        return comparison

    def _write_report(
        self,
        run: PerfRun,
        record: Mapping[str, Any],
        comparison: Comparison | None,
        earlier: History | None,
        failed_by: list[str],
    ) -> None:
        """The report's record: the stored one, plus the comparison, the trend, and
        ``failed_by`` (what failed the test besides breached SLOs: the report says FAIL)."""
        assert self.records_dir is not None  # finish writes a report only then
        folder = self.records_dir
        name = result_folder(run.test)
        stored = dict(record)
        if failed_by:
            stored["failed_by"] = failed_by
        if comparison is not None:
            stored["comparison"] = comparison_as_dict(comparison)
        if earlier is not None:  # the trend plot's series (report/trend.py), in the report only, not in the store
            from ..gate.history import trend

            assert self.history is not None  # there are earlier results only with a reference (_earlier)

            stored["history"] = trend(earlier, record, list(gated_tolerances(record, run.regression)), self.history[0])
        for old in (folder / f"{name}.json", folder / f"{name}.csv"):
            old.unlink(missing_ok=True)  # this session's rerun of the test replaces it
        write_new(folder / f"{name}.json", stored)
        if self.report_dir is not None:
            run.result.write_csv(folder / f"{name}.csv", run.results[:-1])


def comparison_as_dict(comparison: Comparison) -> dict[str, Any]:
    return {
        "baseline": comparison.baseline_label,
        "mismatch": comparison.mismatch,
        "header": comparison.header,
        "unstable": comparison.unstable,
        "rows": [vars(row) for row in comparison.rows],
        "baseline_samples": comparison.baseline_samples,
    }


def key_figures(record: Mapping[str, Any], comparison: Comparison | None) -> dict[str, float]:
    """``llmreplay.<metric>.<stat>`` -> value for the headline metrics of the stored ``record``,
    ``llmreplay.capacity.at_least`` (1) when its capacity search found no failing load,
    ``llmreplay.capacity.ceiling`` (1) when its capacity is a ceiling (the rate carried), and each
    compared metric's change (``llmreplay.change.<key>``): what CI dashboards read from JUnit XML
    and the terminal summary shows."""
    summary = record["summary"]
    figures = {}
    for key in KEY_FIGURES:
        metric, stat = key.split(".")
        value = summary.get(metric, {}).get(stat)
        if value is not None:
            figures[f"llmreplay.{key.removesuffix('.value')}"] = float(value)  # unrounded: the summary row formats it
    if (record.get("capacity") or {}).get("at_least"):
        figures["llmreplay.capacity.at_least"] = 1.0
    if (record.get("capacity") or {}).get("ceiling"):
        figures["llmreplay.capacity.ceiling"] = 1.0
    if comparison is not None:
        for row in comparison.rows:
            if row.change is not None:
                figures[f"llmreplay.change.{row.key}"] = row.change
    return figures
