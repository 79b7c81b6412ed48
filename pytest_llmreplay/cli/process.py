"""What the ``llmreplay`` command sets up in the process it owns (the library never does: it
shares its process with the user's code)."""

from __future__ import annotations

import os
import sys

BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def single_threaded_blas() -> None:
    """Load numpy with OpenBLAS on one thread, unless the user chose (``OPENBLAS_NUM_THREADS``
    set) or numpy is loaded already. Nothing the command does calls BLAS on matrices worth a
    second thread, and OpenBLAS starts a worker per core as numpy loads that spins for about
    0.1 s of CPU waiting for work (bench/README.md, "Ours pays for a thread it does not use").
    The variable is set only while numpy loads: processes the command starts (a server, a
    worker) inherit the user's environment unchanged."""
    if BLAS_THREADS in os.environ or "numpy" in sys.modules:
        return
    os.environ[BLAS_THREADS] = "1"
    try:
        import numpy  # noqa: F401  (OpenBLAS reads the variable as numpy loads it)
    finally:
        del os.environ[BLAS_THREADS]
