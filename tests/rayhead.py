"""A Ray cluster's head node in a process of its own, as a user's existing cluster is, for tests
of ``--ray-address`` / ``RAY_ADDRESS``.

:class:`RayHead` runs ``ray start --head --block`` with bounded CPUs, no dashboard and no usage
statistics, on free ports of its own (the GCS and the Ray client server: the defaults are fixed
and other runs on this machine may hold them), with its own temporary folder (its session and
logs; short: Ray's socket paths have a length limit), and token authentication with a token of
its own (``env``: what a client needs to join). Left to itself, Ray turns authentication on when
``~/.ray/auth_token`` exists, which any local ``ray.init`` on the machine creates, while a client
given an address does not: whether the two agreed would depend on the machine's history.

The command runs in a process group of its own, which holds every process of the cluster. When
the ``with`` block ends, ``ray start`` is sent TERM (it stops the cluster; a TERM to the whole
group leaves it waiting on its children), then what is left of the group is stopped (TERM, then
KILL) and the folder removed; if the test process dies first, pytest_llmreplay's watchdog stops
the group. ``ray stop`` is never used: it stops every Ray instance on the machine.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mockserver import free_port

from pytest_llmreplay.replayer import watchdog

STARTED = "Ray runtime started."
STOP_TIMEOUT_S = 15.0


class RayHead:
    """``address`` (``127.0.0.1:PORT``) once started; ``env``: the environment variables a
    client joins with (its authentication token); :meth:`worker_pids` the processes that ran Ray
    workers (actors, tasks) of this cluster so far."""

    def __init__(self, cpus: int = 2, startup_timeout_s: float = 120.0) -> None:
        self.cpus = cpus
        self.startup_timeout_s = startup_timeout_s
        self.address = ""
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.folder: Path | None = None
        self.process: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None

    def __enter__(self) -> RayHead:
        self.folder = Path(tempfile.mkdtemp(prefix="rayhead-", dir="/tmp"))
        port = free_port()
        command = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            f"--num-cpus={self.cpus}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--ray-client-server-port={free_port()}",
            f"--temp-dir={self.folder}",
        ]
        log = self.folder / "head.log"
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        self._watchdog = subprocess.Popen(
            [sys.executable, watchdog.__file__, str(os.getpid()), str(self.process.pid), str(STOP_TIMEOUT_S)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while STARTED not in log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")
                self.__exit__()
                raise RuntimeError(f"ray start --head did not start (exit {self.process.returncode}):\n{text[-3000:]}")
            time.sleep(0.2)
        self.address = f"127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
            watchdog.stop_group(self.process.pid, 5.0)  # whatever of the group is left
            self.process.wait()
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def worker_pids(self) -> set[int]:
        """Process ids of the Ray workers this cluster started, from its session's log names
        (``python-core-worker-<id>_<pid>.log``)."""
        assert self.folder is not None
        logs = self.folder / "session_latest" / "logs"
        return {
            int(m.group(1))
            for path in logs.glob("python-core-worker-*.log")
            if (m := re.search(r"_(\d+)\.log$", path.name))
        }
