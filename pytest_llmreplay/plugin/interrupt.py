"""Ctrl-C (SIGINT) or SIGTERM while a perf test replays: stop that replay as ``duration_s`` does,
keep what it measured, then stop the pytest session.

The contract, as ``llmreplay run`` keeps it (:mod:`~pytest_llmreplay.replayer.driver`, ``stop_on_signals``):

- the first SIGINT or SIGTERM during a replay cancels its requests in flight and sends nothing
  more; the run returns every record so far, with the warning ``interrupted by SIGINT at 3.2 s:
  requests in flight were cancelled and nothing more was sent``;
- that test's result goes through the gate as any other (:mod:`~pytest_llmreplay.plugin.verdict`): SLO
  table, comparison, ``--llm-save`` (the stored record holds ``"interrupted": "SIGINT"``; it is
  kept, but never taken as a comparison baseline or a history point, since it measured only part
  of its workload), ``--llm-report``; its JUnit properties hold ``llmreplay.interrupted``;
- it is not judged on a partial result: its body is skipped, its breached SLOs and regressions
  fail nothing, and pytest (``1 interrupted``), its summary row and its report's headline say
  ``interrupted`` (:func:`~pytest_llmreplay.plugin.hooks.skip_body_if_interrupted`);
- no further replay starts: the test's remaining repeats are skipped, and a later ``llm_replay``
  call in its body fails with one line;
- once that test is over (teardown included) the session stops (``session.shouldstop``: pytest
  prints ``Interrupted: ...``, leaves the remaining tests, writes its summary and the report
  files, and stops ``--llm-server-cmd``'s server), with pytest's exit status 2 (interrupted) for
  SIGINT and 143 (128 + 15, the shell's status of a process SIGTERM ended) for SIGTERM;
- a second signal has its default effect (the driver removes its handlers at the first): Ctrl-C
  raises KeyboardInterrupt at once, SIGTERM ends the process (the server's watchdog stops it).

A capacity search (the ``capacity`` setting) is a row of replays: the signal cuts the one
running, no other starts, and the result (the point at capacity among those run) is marked
interrupted (:class:`~pytest_llmreplay.replayer.signal_stop.SignalStop`, as ``llmreplay sweep``).

Outside a replay (collection, a test body, the gate) signals are pytest's, as ever.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from ..errors import LLMReplayError

INTERRUPTED_PROPERTY = "llmreplay.interrupted"  # JUnit property of an interrupted test: the signal's name


class Interruption:
    """The session's interrupted replay, if any (registered as a plugin: it sets the exit status)."""

    def __init__(self) -> None:
        self.signal: str | None = None  # SIGINT or SIGTERM
        self.test: str | None = None  # the run (baseline key) whose replay it stopped
        self._session: pytest.Session | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._session = session

    def observe(self, result: Any, test: str) -> bool:
        """Whether the replay of ``test`` that gave ``result`` was interrupted; the first such
        stops the session once the running test is over."""
        interrupted = result.run.interrupted
        if interrupted and self.signal is None:
            self.signal, self.test = interrupted, test
            if self._session is not None:
                self._session.shouldstop = f"llmreplay: {interrupted} stopped the replay of {test}"
        return bool(interrupted)

    def came_while_waiting(self, signal_name: str, test: str) -> None:
        """A signal came while ``test`` waited for another replay against its live URL to end
        (:class:`~pytest_llmreplay.plugin.session.live_lock`): the session stops, as after a replay
        it stopped, and nothing more is sent."""
        if self.signal is None:
            self.signal, self.test = signal_name, test
            if self._session is not None:
                self._session.shouldstop = f"llmreplay: {signal_name} came while {test} waited to replay"

    def check_not_interrupted(self) -> None:
        """Raise :class:`LLMReplayError` once a replay was interrupted: nothing more is sent."""
        if self.signal is not None:
            raise LLMReplayError(
                f"not replayed: {self.signal} stopped the replay of {self.test}, and with it the session"
            )

    def note(self) -> str:
        """The terminal summary's line on the interruption."""
        return (
            f"{self.signal} stopped the replay of {self.test}: its result covers the requests measured until then "
            "(stored marked interrupted: never used as a comparison baseline); the session stopped after that test"
        )

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session):
        result = yield  # the summary and the reports are written with pytest's status 2 (interrupted)
        if self.signal == "SIGTERM":
            session.exitstatus = 128 + signal.SIGTERM
        return result
