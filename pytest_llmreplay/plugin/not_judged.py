"""The perf tests a stopped session did not run to the end, for its terminal summary and reports.

A perf test (:func:`is_perf_test`) that pytest collected, and whose teardown it never reported,
did not run to the end: a KeyboardInterrupt cut it off (its body, or the gate after its replay),
or ``-x``, ``--maxfail`` or a signal during another test's replay
(:mod:`~pytest_llmreplay.plugin.interrupt`) stopped the session before it ran. Such a test has
no verdict, whatever its result would have said: the terminal summary gives it a row whose
outcome is ``not judged`` and a line naming every such test and why the session stopped, and the
report files (:class:`~pytest_llmreplay.report.rows.NotJudged`) say ``N not judged`` in their
title, name them under it, and head a result of such a test NOT JUDGED rather than PASS or FAIL.

Only a process that collected the tests knows them: under xdist the controller collects none,
so each worker hands its list to the controller in its ``workeroutput`` (xdist sends it when the
worker finishes, ``pytest_testnodedown``), with the reason it stopped (``-x`` stops the worker
itself: ``stopping after 1 failures``). A worker that crashed or was killed sends nothing: if no
worker did, the controller's reports name no test not judged. The test a worker crashed under is
failed, not unjudged (xdist reports it so, its ``when`` ``"???"``), and the worker xdist starts
in its place sends the list.
"""

from __future__ import annotations

from collections.abc import Set

import pytest

from ..report.rows import ALL_JUDGED, NotJudged

PERF_FIXTURES = {"llm_replay", "llm_result"}
WORKER_OUTPUT_KEY = "llmreplay_perf_tests"  # a worker's collected perf tests, in its xdist workeroutput


def is_perf_test(item: pytest.Item) -> bool:
    """Whether ``item`` replays a workload: a spec file's test (its item holds a :class:`PerfSpec`),
    or one that uses ``llm_replay`` or ``llm_result`` (the ``llmreplay`` marker adds
    ``llm_result``), or carries the marker."""
    from .spec import PerfSpec

    return (
        isinstance(getattr(item, "spec", None), PerfSpec)
        or item.get_closest_marker("llmreplay") is not None
        or bool(PERF_FIXTURES & set(getattr(item, "fixturenames", ())))
    )


class Unfinished:
    """Registered as a plugin: the session's perf tests as collected (after ``-k`` and ``-m``
    deselected theirs), and those whose teardown was reported."""

    def __init__(self) -> None:
        self.collected: list[str] = []
        self.ended: set[str] = set()
        self.failures: dict[str, str] = {}  # test id -> the first failure of its setup or call, in a line
        self.worker_stopped: str | None = None  # why a worker stopped its own session (xdist controller)

    @pytest.hookimpl(trylast=True)  # after every deselection
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self.collected = [item.nodeid for item in items if is_perf_test(item)]
        output = getattr(config, "workeroutput", None)  # set on an xdist worker's config
        if output is not None:
            output[WORKER_OUTPUT_KEY] = self.collected

    @pytest.hookimpl(optionalhook=True)  # xdist's hook: the controller, as a worker finishes
    def pytest_testnodedown(self, node: object, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        known = set(self.collected)
        self.collected += [test for test in output.get(WORKER_OUTPUT_KEY, ()) if test not in known]
        reason = output.get("shouldfail") or output.get("shouldstop")
        if isinstance(reason, str) and self.worker_stopped is None:
            self.worker_stopped = reason

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # "???": xdist's report of a test whose worker crashed under it: failed, so judged
        if report.when in ("teardown", "???"):
            self.ended.add(report.nodeid)
        if report.failed and report.when in ("setup", "call") and report.nodeid not in self.failures:
            crash = getattr(report.longrepr, "reprcrash", None)
            text = getattr(crash, "message", None) or report.longreprtext or "failed"
            self.failures[report.nodeid] = " ".join(str(text).split())[:300]

    def found(self, session: pytest.Session, reported: Set[str] = frozenset()) -> NotJudged:
        """The collected perf tests that did not run to the end, and why the session stopped:
        pytest's own words (``stopping after 1 failures``), the signal's, or a KeyboardInterrupt;
        and those that ran to the end but failed with no result (none in ``reported``, the tests
        with figures or tables: a declared server that did not start), with their errors."""
        tests = tuple(test for test in self.collected if test not in self.ended)
        errors = tuple(
            (test, self.failures[test])
            for test in self.collected
            if test in self.ended and test in self.failures and test not in reported
        )
        if not tests and not errors:
            return ALL_JUDGED
        reason = session.shouldfail or session.shouldstop or self.worker_stopped
        why = f"the session stopped: {reason}" if isinstance(reason, str) else "the session was interrupted"
        return NotJudged(tests, why if tests else "", errors)
