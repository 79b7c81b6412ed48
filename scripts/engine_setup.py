"""What the engine set-up scripts (``setup_vllm_cpu.py``, ``setup_llama_cpp.py``) share: where
engines are installed, how a step runs, and the lock that makes concurrent installs wait.

Standard library only (the scripts run under any Python >= 3.10); imported by the scripts as
``engine_setup`` (their folder is first on ``sys.path`` when they run).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def engine_home() -> Path:
    """``$LLMREPLAY_ENGINE_HOME``, else ``$XDG_CACHE_HOME/llmreplay/engines``, else
    ``~/.cache/llmreplay/engines``: outside the checkout, so a clean clone reuses what is there."""
    explicit = os.environ.get("LLMREPLAY_ENGINE_HOME")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "llmreplay" / "engines"


def run(script: str, command: list[str], what: str, cwd: Path | None = None) -> None:
    """Run one step of ``script`` (its output to stderr, so that stdout keeps only the result);
    on failure exit with one line naming the step and the command (its output is above)."""
    print(f"{script}: {what}", file=sys.stderr, flush=True)
    if subprocess.run(command, stdout=sys.stderr, cwd=cwd).returncode != 0:
        sys.exit(f"{script}: {what} failed (command: {' '.join(map(str, command))})")


@contextmanager
def locked(home: Path, engine: str) -> Iterator[None]:
    """Hold ``engine``'s install lock in the engine home (``.setup-<engine>.lock``; Unix
    ``flock``): one installer of an engine at a time, whoever runs it (``pytest -n``, two
    checkouts), while another engine's install (minutes of compiling) blocks nobody else."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / f".setup-{engine}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def is_stamped(folder: Path, content: str) -> bool:
    """Whether ``folder`` holds a finished step's stamp (``.llmreplay-complete``) saying ``content``."""
    stamp = folder / ".llmreplay-complete"
    return stamp.is_file() and stamp.read_text().strip() == content


def stamp(folder: Path, content: str) -> None:
    """Mark a step done (:func:`is_stamped`): written last, so a step stopped half-way runs again."""
    (folder / ".llmreplay-complete").write_text(content + "\n")
