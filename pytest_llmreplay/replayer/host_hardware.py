"""What a server on this machine runs on, for the fingerprint of a live server on loopback (one
the plugin starts, or one the user runs beside it): results of another GPU are never compared,
and a live server's ``/version`` does not name its hardware.

:func:`host_hardware`: the GPUs ``nvidia-smi --query-gpu=name --format=csv,noheader`` lists, as
``8 x NVIDIA H100 80GB HBM3`` (several models: each with its count, joined by ``, ``), else
``cpu: MODEL`` from ``/proc/cpuinfo``'s ``model name`` (a CPU build of an engine), else None. A
server elsewhere (:func:`on_this_host` false) has no hardware we can see: the
``pytest_llmreplay_fingerprint`` hook adds it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
NVIDIA_SMI_TIMEOUT_S = 10.0


def on_this_host(url: str) -> bool:
    """Whether ``url`` names a server on this machine (a loopback host)."""
    host = urlsplit(url).hostname or ""
    return host in LOOPBACK or host.startswith("127.")


@functools.cache
def host_hardware() -> str | None:
    """This machine's GPUs, else its CPU model, in words (module doc); asked once per process."""
    gpus = _nvidia_gpus()
    if gpus:
        return ", ".join(f"{count} x {name}" for name, count in Counter(gpus).items())
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return f"cpu: {value.strip()}"
    except OSError:
        pass
    return None


def _nvidia_gpus() -> list[str]:
    """The name of each GPU ``nvidia-smi`` lists; none where it is missing or fails."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return []
    try:
        done = subprocess.run(
            [program, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []
