"""One replay at a time against a live URL, across xdist workers and pytest processes:
:class:`live_lock`, an exclusive file lock per URL, which a signal ends while waiting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import LLMReplayError


class NotReplayed(LLMReplayError):
    """A signal (``signal``: SIGINT, SIGTERM) came while a run waited for the lock: it replayed
    nothing; the runs of its test before it were whole (:func:`~pytest_llmreplay.plugin.session.perf_run`)."""

    def __init__(self, message: str, signal: str) -> None:
        super().__init__(message)
        self.signal = signal


class live_lock:
    """Hold an exclusive file lock per live URL while replaying, across xdist workers (and any
    other pytest process on this machine); a no-op for the simulator. The lock file is removed
    as the lock is released (a declared server's URL has a new port each session: 1,098 empty
    files piled up in the temporary folder of one machine), so a waiter that then gets the lock
    on the removed file sees that the path no longer names it and locks the path again.

    A SIGINT or SIGTERM while waiting ends the wait: no replay starts after the signal
    (:mod:`.interrupt`'s contract), and ``interruption`` stops the session. An xdist worker
    waiting in a blocking lock let the signal pass, took the lock when the other test's
    interrupted replay released it, and replayed its whole test."""

    def __init__(self, target: Any, interruption: Any = None, test: str = "") -> None:
        self.path = None
        self.url, self.interruption, self.test = getattr(target, "url", None), interruption, test
        if target.kind == "live":
            import hashlib
            import tempfile

            self.path = (
                Path(tempfile.gettempdir()) / f"llmreplay-{hashlib.sha256(target.url.encode()).hexdigest()[:16]}.lock"
            )

    def __enter__(self) -> None:
        if self.path is not None:
            import os

            while True:
                self.file = open(self.path, "a")
                self._wait()
                try:
                    if os.stat(self.path).st_ino == os.fstat(self.file.fileno()).st_ino:
                        return  # locked the file the path names
                except FileNotFoundError:
                    pass
                self.file.close()  # its holder removed it as it released it: lock the path again

    def _wait(self) -> None:
        """Lock :attr:`file`, polling every :data:`LOCK_POLL_S` while another holds it, with a
        SIGINT or SIGTERM recorded instead of lost (class docstring)."""
        import fcntl
        import signal
        import threading
        import time

        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        came: list[str] = []
        main = threading.current_thread() is threading.main_thread()
        kept = {
            signum: signal.signal(signum, lambda number, _: came.append(signal.Signals(number).name))
            for signum in ((signal.SIGINT, signal.SIGTERM) if main else ())
        }
        try:
            while not came:
                try:
                    fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    time.sleep(LOCK_POLL_S)
        finally:
            for signum, handler in kept.items():
                signal.signal(signum, handler)
        self.file.close()
        if self.interruption is not None:
            self.interruption.came_while_waiting(came[0], self.test)
        raise NotReplayed(
            f"not replayed: {came[0]} came while {self.test or 'this test'} waited for another replay against "
            f"{self.url} to end; the session stops",
            came[0],
        )

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)  # while still held: no one can lock it and find it named
            self.file.close()  # closing releases the lock


LOCK_POLL_S = 0.05  # how often a replay waiting for a live URL's lock tries it again
