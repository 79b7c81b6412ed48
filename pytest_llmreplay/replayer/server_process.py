"""Launching a server command for a run (``--llm-server-cmd``, ``llmreplay run --server-cmd``).

:class:`ServerProcess` starts a server command, waits until ``/health`` or ``/v1/models``
answers (saying so while it waits), keeps its log while it runs, and stops its whole process group
(TERM, then KILL), also when this process dies first (a watchdog process does it then).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from . import watchdog
from .clock import Clock, WallClock
from .endpoints import base_url


class ServerProcess:
    """A server started from a command line, for the length of a ``with`` block.

    ``start()`` launches ``command`` in its own process group with stdout and stderr going to a
    log file, then polls ``url`` + ``/health`` (or ``/v1/models`` when that is 404; only
    ``url`` + ``health`` when that path is given) until it answers 200, the process exits (error with the log's last lines) or ``startup_timeout_s``
    passes (error naming ``timeout_option``, the option that sets it; process stopped). While it
    waits, ``progress(line)`` is called at once and then every ``progress_every_s``. ``stop()``
    sends SIGTERM to the group, waits up to ``stop_timeout_s``, then SIGKILL. ``exit_message()``
    says whether it died while in use (None once ``stop()`` ran: the end is then ours, or was
    already raised by ``start()``).

    ``log_path`` None: the log goes to a temporary folder made by ``start()`` and removed by
    ``stop()``, so messages quote its last lines but not its path; a given ``log_path`` is kept.

    ``die_with_parent``: a :mod:`~pytest_llmreplay.replayer.watchdog` process stops the group the same
    way if this process dies without calling ``stop()`` (SIGTERM, SIGKILL, a crash), and removes
    the temporary log folder.

    ``url`` None: the command picks its own port (binding port 0 leaves no window in which
    another process can take it) and prints a line matching ``announce``, whose first group is
    its URL; ``url`` is then that, read from what the command wrote to the log since ``start()``.
    """

    def __init__(
        self,
        command: str | Sequence[str],
        url: str | None,
        *,
        announce: re.Pattern[str] | None = None,
        startup_timeout_s: float = 600.0,
        stop_timeout_s: float = 15.0,
        log_path: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        die_with_parent: bool = True,
        progress: Callable[[str], None] | None = None,
        progress_every_s: float = 10.0,
        timeout_option: str | None = None,
        health: str | None = None,
    ) -> None:
        self.args = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.args:
            raise LLMReplayError("server command: empty")
        if url is None and announce is None:
            raise ValueError("a server without a url must announce it")
        self.url = base_url(url) if url else None
        self.announce = announce
        self._log_start = 0  # log offset where this start's output begins
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.log_path: Path | None = Path(log_path) if log_path else None
        self._temporary_log = log_path is None
        self._stopped = False
        self.env = {**os.environ, **(env or {})}
        self.clock = clock or WallClock()
        self.die_with_parent = die_with_parent
        self.progress = progress
        self.progress_every_s = progress_every_s
        self.timeout_option = timeout_option
        self.probes = (health,) if health else ("/health", "/v1/models")
        self.process: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._stopped = False
        if self.url is not None and _listening(self.url):
            raise LLMReplayError(
                f"server command {shlex.join(self.args)!r}: something already answers at {self.url} before it starts "
                "(a server left running by an earlier job?); stop it, or give the command another port"
            )
        if self._temporary_log:
            self.log_path = Path(tempfile.mkdtemp(prefix="llmreplay-server-")) / "server.log"
        assert self.log_path is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            try:
                self.process = subprocess.Popen(
                    self.args,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError as exc:
                self._remove_temporary_log()
                raise LLMReplayError(
                    f"server command {shlex.join(self.args)!r}: cannot start: {_not_run(self.args[0], exc)}"
                ) from None
        try:
            if self.die_with_parent:
                folder = (
                    [str(self.log_path.parent)] if self._temporary_log else []
                )  # removed by the watchdog if this process dies first
                self._watchdog = subprocess.Popen(
                    [
                        sys.executable,
                        watchdog.__file__,
                        str(os.getpid()),
                        str(self.process.pid),
                        str(self.stop_timeout_s),
                        *folder,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,
                )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        import httpx

        started = next_report = self.clock.now()
        with httpx.Client(timeout=2.0) as client:
            while True:
                message = self.exit_message()
                if message:
                    raise LLMReplayError(message)
                if self.url is None:
                    self.url = self._announced_url()
                if self.url is not None and _answers(client, self.url, self.probes):
                    return
                elapsed = self.clock.now() - started
                if elapsed >= self.startup_timeout_s:
                    where = f"at {self.url}{self.probes[0]}" if self.url else "(it never printed the URL it listens on)"
                    longer = f" (raise {self.timeout_option} if it needs longer)" if self.timeout_option else ""
                    raise LLMReplayError(
                        f"server command {shlex.join(self.args)!r} was not ready {where} within {self.startup_timeout_s:g} s{longer}; "
                        f"last lines of its log{self._log_named()}:\n{self.log_tail()}"
                    )
                if self.progress is not None and self.clock.now() >= next_report:
                    where = f"at {self.url}" if self.url else "(at the URL it will print)"
                    self.progress(
                        f"waiting for {shlex.join(self.args)} {where} to become healthy: {elapsed:.0f} s of {self.startup_timeout_s:g} s"
                    )
                    next_report += self.progress_every_s
                self.clock.pause(0.25)

    def _announced_url(self) -> str | None:
        """The URL the command printed (``announce``'s first group) since this start, or None."""
        assert self.log_path is not None  # start() sets it before it waits
        assert self.announce is not None  # asked only while there is no url, so there is a pattern (__init__)
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                found = self.announce.search(log.read().decode(errors="replace"))
        except OSError:
            return None
        return base_url(found.group(1)) if found else None

    def exit_message(self) -> str | None:
        """None while the process runs or once :meth:`stop` ran; else its exit status and the
        last lines of its log."""
        if self.process is None or self._stopped or self.process.poll() is None:
            return None
        status, why = self.process.returncode, ""
        if status == 0:  # a server does not end on its own with success: was it put in the background?
            left = f"; something still listens at {self.url}" if self.url and _listening(self.url) else ""
            why = (
                f" (a server command must run while its server serves{left}: one that puts its server in the background, "
                "with '&', setsid, nohup or 'docker run -d', leaves it running after the run; run the server in the foreground)"
            )
        return f"server command {shlex.join(self.args)!r} exited with status {status}{why}; last lines of its log{self._log_named()}:\n{self.log_tail()}"

    def _log_named(self) -> str:
        """`` (PATH)`` of a log that outlives the server; nothing for the temporary one."""
        return "" if self._temporary_log else f" ({self.log_path})"

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None:
            return "(no log)"
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def stop(self) -> None:
        """TERM the whole process group, wait, then KILL it: also when the command itself has
        already exited, since its children (engine workers, a backgrounded server) may live on.
        Then end the watchdog, which has nothing left to watch, and remove a temporary log."""
        process = self.process
        if process is None:
            return
        self._stopped = True
        try:
            for sig, wait in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    return
                if self._group_gone(process, wait):
                    return
        finally:
            if self._watchdog is not None:
                self._watchdog.kill()
                self._watchdog.wait()
                self._watchdog = None
            self._remove_temporary_log()

    def _remove_temporary_log(self) -> None:
        if self._temporary_log and self.log_path is not None:
            shutil.rmtree(self.log_path.parent, ignore_errors=True)

    def _group_gone(self, process: subprocess.Popen, wait_s: float) -> bool:
        """Wait up to ``wait_s`` for the leader ``process`` to exit and the rest of its group to go."""
        deadline = self.clock.now() + wait_s
        while True:
            if process.poll() is not None:
                try:
                    os.killpg(process.pid, 0)
                except ProcessLookupError:
                    return True
            if self.clock.now() >= deadline:
                return False
            self.clock.pause(0.05)


def _not_run(program: str, error: OSError) -> str:
    """Why ``program`` did not run, naming it: not found (as a path, or on ``PATH`` for a bare
    name), not executable, else the system's words."""
    if isinstance(error, FileNotFoundError):
        where = "no such file" if os.sep in program else "not found on PATH"
        return f"program {program!r}: {where}"
    if isinstance(error, PermissionError):
        return f"program {program!r}: not executable (permission denied)"
    return f"program {program!r}: {error.strerror or error}"


def _listening(url: str) -> bool:
    """Whether something accepts a connection at ``url``'s host and port (its own answer to the
    health check would pass for the command's server's)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _answers(client: Any, url: str, paths: Sequence[str]) -> bool:
    """Whether ``url`` answers 200 at the first of ``paths`` that is not 404."""
    for path in paths:
        try:
            reply = client.get(url + path)
        except Exception:
            return False
        if reply.status_code == 200:
            return True
        if reply.status_code != 404:
            return False
    return False
