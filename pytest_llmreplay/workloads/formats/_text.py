"""Workload files as UTF-8 text, as every JSON tool reads them: a leading byte-order mark is
dropped, and a byte that is not UTF-8 is an error at its line and column (byte offset + 1 in
the line), not a bare "not a text file". Every reader of a workload file comes through here, so
a gzip or zstd file reads as the plain text it holds (:mod:`._compressed`), its line numbers the
lines of that text."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

from ...errors import WorkloadError
from ._compressed import open_decompressed

WORKLOAD_TEXT = "UTF-8 JSONL, JSON, CSV or YAML"  # what a workload file holds, as a byte that is not UTF-8 is told


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` for every line of ``path`` (line endings kept), streaming."""
    with open_decompressed(path) as stream:
        for number, raw in enumerate(stream, start=1):
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(path, number, raw[exc.start], exc.start + 1) from None


def read_text(path: Path, expected: str = WORKLOAD_TEXT) -> str:
    """The whole of ``path`` as text (for formats parsed as one document; spec files too, which
    name what they hold in ``expected``)."""
    with open_decompressed(path) as stream:
        raw = stream.read()
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        raise _not_utf8(
            path, raw.count(b"\n", 0, exc.start) + 1, raw[exc.start], exc.start - line_start + 1, expected
        ) from None


def _not_utf8(path: Path, line: int, byte: int, column: int, expected: str = WORKLOAD_TEXT) -> WorkloadError:
    return WorkloadError(f"not UTF-8: byte 0x{byte:02x} at column {column} (expected {expected})", path=path, line=line)
