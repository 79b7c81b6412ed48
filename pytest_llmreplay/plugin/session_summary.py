"""The session's terminal summary: :class:`SummaryHooks` gathers every perf test's figures and
tables from its reports (the xdist workers' too) and writes them, with the session's notes, at
the end; :func:`interrupted_report` tells a test a signal stopped from one that was skipped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .session import LLMSession


class SummaryHooks:
    """Registered as a plugin for the session ``state``: gathers every test's figures and tables
    (the workers' too, under xdist) into ``state.reports``, and writes them, with the session's
    notes, in the terminal summary."""

    def __init__(self, state: LLMSession) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and not (report.when == "setup" and not report.passed):
            return  # a setup that failed or skipped after a replay has its figures (pytest_runtest_setup)
        from .interrupt import INTERRUPTED_PROPERTY

        figures = {  # the key figures (verdict.key_figures): numbers; pytest types a property's value as object
            name: value
            for name, value in report.user_properties
            if str(name).startswith("llmreplay.") and name != INTERRUPTED_PROPERTY and isinstance(value, (int, float))
        }
        interrupted = INTERRUPTED_PROPERTY in dict(report.user_properties)
        expected = {"skipped": "xfailed", "passed": "xpassed"} if hasattr(report, "wasxfail") else {}
        outcome = (
            "interrupted"
            if interrupted_report(report)
            else expected.get(report.outcome, report.outcome) + (" (interrupted)" if interrupted else "")
        )
        texts: dict[str, str] = {}
        for name, text in report.sections:
            if name.startswith("llmreplay"):
                texts[name] = f"{texts[name]}\n\n{text}" if name in texts else text
        if figures or texts:
            self.state.reports.append((report.nodeid, outcome, figures, texts))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """An overview row per measured run (a test's second ``llm_replay`` call or a named one
        is a row of its own), and one ``not judged`` for each perf test that did not run to the
        end, ``error`` for each that errored before any result
        (:mod:`~pytest_llmreplay.plugin.not_judged`), then the baseline comparisons; with -v
        every table; tests in the order of their ids, as in the report files."""
        reported = {nodeid for nodeid, *_ in self.state.reports}
        unreported: list[tuple[str, str, dict[str, float], dict[str, str]]] = [
            (test, "not judged", {}, {}) for test in self.state.not_judged.tests if test not in reported
        ]
        unreported += [(test, "error", {}, {}) for test, _ in self.state.not_judged.errors]
        if not self.state.reports and not unreported and not self.state.notes:
            return
        from ..report.terminal import summary_table

        # by test id, as the report files and the step summary: under xdist the reports come in as
        # the workers finish, so the rows of -n 2 and of a serial run would differ in order
        reports = sorted([*self.state.reports, *unreported], key=lambda report: report[0])
        terminalreporter.write_sep("=", "llmreplay")
        if reports:  # the notes (a report that could not be written, a server's end) stand alone too
            terminalreporter.write_line(
                summary_table([(nodeid, outcome, figures) for nodeid, outcome, figures, _ in reports])
            )
        verbose = self.state.config.getoption("verbose") > 0
        for _, _, _, texts in reports:
            for name in ("llmreplay", "llmreplay baseline") if verbose else ("llmreplay baseline",):
                if texts.get(name):
                    terminalreporter.write_line("\n" + texts[name])
        for name, text in self.state.notes:
            terminalreporter.write_line(f"\n{name}: {text}")


def interrupted_report(report: pytest.TestReport) -> bool:
    """Whether ``report`` is of a test skipped because a signal stopped its replay."""
    from .interrupt import INTERRUPTED_PROPERTY

    return report.skipped and INTERRUPTED_PROPERTY in dict(report.user_properties)
