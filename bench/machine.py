"""The machine a benchmark ran on, in one line, so that figures from different sessions can be
told apart: the hosts differ from session to session (an AMD EPYC VM's decode steps took about
twice a quieter host's, bench/README.md), and ``platform.processor()`` is empty on Linux."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_line() -> str:
    """``Machine: MODEL, N CPUs, Linux RELEASE, Python X.Y.Z; load average A, B, C`` (now)."""
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (
        f"Machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average {load}"
    )
