"""Stop a server's process group when the process that started it dies, even by SIGKILL.

Run as ``python .../watchdog.py PARENT_PID GROUP STOP_TIMEOUT_S [FOLDER]`` (by path: it imports only the
standard library, so it needs no installed package and starts in ~30 ms) by
:class:`~pytest_llmreplay.replayer.server_process.ServerProcess` right after it starts a server in a process
group of its own: the watchdog is a child of the same parent, in a session of its own (a
terminal's Ctrl-C or hang-up, or a kill of the parent's process group, does not reach it). Every
:data:`POLL_S` it checks two things. The group gone (the server stopped, or was stopped): it
exits. Its own parent no longer ``PARENT_PID`` (it was re-parented, so the parent died: a test
run killed by SIGTERM or SIGKILL runs no teardown): it sends SIGTERM to process group ``GROUP``,
waits up to ``STOP_TIMEOUT_S`` for it to go, then sends SIGKILL, removes ``FOLDER`` (the
server's temporary log folder, which the dead parent can no longer remove), and exits.

Why a watchdog, not ``prctl(PR_SET_PDEATHSIG)`` in the server's child: the death signal reaches
only the direct child (a shell wrapper's server, or vLLM's engine-core and worker processes,
live on), it fires when the *thread* that started the child ends rather than the process, it is
cleared when the child execs a set-user-id program, and it is Linux-only. The watchdog clears the
whole group, on any POSIX system.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

POLL_S = 0.2


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the id now belongs to another user's group: ours is gone
        return False
    return True


def stop_group(group: int, stop_timeout_s: float) -> None:
    """SIGTERM the group, wait up to ``stop_timeout_s`` for it to go, then SIGKILL it."""
    for sig, wait_s in ((signal.SIGTERM, stop_timeout_s), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait_s
        while group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not group_alive(group):
            return


def watch(parent_pid: int, group: int, stop_timeout_s: float, folder: str | None = None) -> None:
    while group_alive(group):
        if os.getppid() != parent_pid:
            stop_group(group, stop_timeout_s)
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            return
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    parent_pid, group, stop_timeout_s = int(argv[0]), int(argv[1]), float(argv[2])
    watch(parent_pid, group, stop_timeout_s, argv[3] if len(argv) > 3 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
