"""SIGINT and SIGTERM over several replays in a row (``llmreplay sweep``'s points), as the
driver's ``stop_on_signals`` handles them over one (``llmreplay run``).

While a :class:`SignalStop` is entered (``with``), the first SIGINT or SIGTERM:

- stops the replay it watches (:meth:`SignalStop.watch`) at once, as ``stop_on_signals`` does:
  requests in flight are cancelled, nothing more is sent, and the run is marked ``interrupted``
  (:meth:`~pytest_llmreplay.replayer.driver.Replay.interrupt`); a replay watched after it sends nothing;
- is kept in ``signal`` (its name), for the caller to start nothing more and keep what was
  measured;
- hands both signals back to their default effect: a second Ctrl-C raises KeyboardInterrupt at
  once, a second SIGTERM ends the process.

A signal ignored when the process started is handled too (a background job of a non-interactive
shell starts with SIGINT ignored), as ``stop_on_signals`` handles it. Leaving puts back the
handlers found on entering, unless a signal came. Off the main thread, where Python delivers no
signals, nothing is installed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# what signal.signal takes: a handler, SIG_DFL or SIG_IGN (ints), or None
Handler = Callable[[int, FrameType | None], Any] | int | None
DEFAULT_EFFECTS: dict[signal.Signals, Handler] = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
}


class SignalStop:
    """See the module docstring; ``signal``: the name of the first signal, None before one."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._replay: Any = None  # the replay running now (a driver.Replay)
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        if self.signal is None:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)

    @contextmanager
    def watch(self, replay: Any) -> Iterator[None]:
        """While the block runs ``replay``, a signal interrupts it; one that came before already has."""
        if self.signal is not None:
            replay.interrupt(self.signal)
        self._replay = replay
        try:
            yield
        finally:
            self._replay = None

    def _handle(self, signum: int, frame: Any) -> None:
        for handled, effect in DEFAULT_EFFECTS.items():
            signal.signal(handled, effect)  # a second signal has its default effect
        self.signal = signal.Signals(signum).name
        if self._replay is not None:
            self._replay.interrupt(self.signal)
