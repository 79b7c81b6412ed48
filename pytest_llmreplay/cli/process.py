"""What the ``llmreplay`` command sets up in the process it owns (the library never does: it
shares its process with the user's code)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

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


class ReaderTolerantStdout:
    """``sys.stdout`` while a command runs: what it prints passes through until the reader of the
    pipe goes away (``llmreplay run ... | head``); from then on it goes nowhere, so that the command
    carries on, writes its ``--out`` files and saves its result, and exits with its own status
    instead of a ``BrokenPipeError`` traceback that lost what was measured."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        """Point the stream's file at /dev/null: its buffered text, flushed later (the
        interpreter's own flush at exit too), goes nowhere."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def reader_tolerant_stdout() -> Iterator[None]:
    """``sys.stdout`` as a :class:`ReaderTolerantStdout` within the block, flushed at its end
    (where a reader that left is noticed at the latest), then restored."""
    original = sys.stdout
    sys.stdout = tolerant = ReaderTolerantStdout(original)
    try:
        yield
    finally:
        tolerant.flush()
        sys.stdout = original
