"""Compressed workload files, read and written as if they were plain.

A file is gzip when its name ends in ``.gz`` or its first bytes are gzip's magic number, zstd when
it ends in ``.zst`` or starts with zstd's (so detection never depends on the name alone). gzip
needs nothing; zstd needs the optional ``zstandard`` package, and a zstd file without it is one
:class:`~pytest_llmreplay.errors.WorkloadError` naming the file and what to install. Data that is
truncated or corrupt is one ``WorkloadError`` naming the file, raised where it is read, never a
decompressor's traceback: zstandard's own stream reader ends quietly at a truncated frame, so
zstd is read frame by frame here (:class:`_ZstdFrames`) to notice one.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import IO, Any, BinaryIO

from ...errors import WorkloadError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK = 1 << 16


@contextmanager
def open_decompressed(path: str | Path) -> Iterator[io.BufferedIOBase]:
    """``path``'s bytes, decompressed when it is gzip or zstd, as a binary stream (iterable by
    line). Errors of the data, wherever in the stream they surface, leave as one
    :class:`WorkloadError` naming ``path``; opening it raises what ``open`` raises (a missing file,
    a directory)."""
    path = Path(path)
    with open(path, "rb") as raw:
        codec = _codec(path, raw.read(len(ZSTD_MAGIC)))
        raw.seek(0)
        errors: tuple[type[BaseException], ...]
        stream: io.BufferedIOBase
        if codec == "gzip":
            errors = (gzip.BadGzipFile, EOFError, zlib.error)
            stream = gzip.GzipFile(fileobj=raw, mode="rb")
        elif codec == "zstd":
            zstandard = _zstandard(path)
            errors = (EOFError, zstandard.ZstdError)
            stream = io.BufferedReader(_ZstdFrames(raw, zstandard))
        else:
            yield raw
            return
        try:
            yield stream
        except errors as exc:
            raise WorkloadError(f"{codec} data is truncated or corrupt ({exc})", path=path) from None


@contextmanager
def damage_first(path: str | Path) -> Iterator[None]:
    """Run the body; when it raises a :class:`WorkloadError` and ``path`` is a compressed file
    whose data is damaged, raise that damage instead. Damaged data can decompress to text that
    breaks a format's rule before the decompressor notices (gzip checks its CRC only at the end),
    and "line 1480: invalid JSON" would send the user looking in the wrong place. Costs nothing
    unless the body fails; then a compressed file is read to its end once more."""
    try:
        yield
    except WorkloadError:
        path = Path(path)
        if path.is_file():
            with open(path, "rb") as raw:
                codec = _codec(path, raw.read(len(ZSTD_MAGIC)))
            if codec is not None:
                with open_decompressed(path) as stream:
                    while stream.read(CHUNK):
                        pass
        raise


def open_for_writing(path: str | Path, newline: str | None = None) -> IO[str]:
    """``path`` opened to write UTF-8 text, compressed when its name ends in ``.gz`` (with no time
    stamp in the header, so the same workload gives the same bytes) or ``.zst`` (with the
    ``zstandard`` package, and a checksum so that a reader can tell damage)."""
    path = Path(path)
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.GzipFile(path, "wb", mtime=0), encoding="utf-8", newline=newline)
    if path.name.endswith(".zst"):
        zstandard = _zstandard(path)
        compressor = zstandard.ZstdCompressor(write_checksum=True)
        return zstandard.open(path, "wt", cctx=compressor, encoding="utf-8", newline=newline)
    return open(path, "w", encoding="utf-8", newline=newline)


def uncompressed_name(path: str | Path) -> str:
    """``path``'s file name without a ``.gz`` or ``.zst`` ending: what it holds (``a.jsonl``)."""
    return Path(path).name.removesuffix(".gz").removesuffix(".zst")


def _codec(path: Path, head: bytes) -> str | None:
    """``"gzip"``, ``"zstd"`` or None (plain), by ``path``'s name or its first bytes ``head``."""
    if path.name.endswith(".gz") or head.startswith(GZIP_MAGIC):
        return "gzip"
    if path.name.endswith(".zst") or head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def _zstandard(path: Path) -> ModuleType:
    try:
        import zstandard
    except ImportError:
        raise WorkloadError(
            "zstd-compressed: reading or writing it needs the zstandard package (pip install zstandard)", path=path
        ) from None
    return zstandard


class _ZstdFrames(io.RawIOBase):
    """The decompressed bytes of a stream of zstd frames, one after another; :class:`EOFError`
    when the data ends inside a frame (a truncated file)."""

    def __init__(self, raw: BinaryIO, zstandard: ModuleType) -> None:
        self._raw = raw
        self._zstandard = zstandard
        self._frame: Any = (
            None  # zstandard's decompressor of the frame under way (the module is imported lazily); None between frames
        )
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            data = self._raw.read(CHUNK)
            if not data:
                if self._frame is not None:
                    raise EOFError("the data ends inside a zstd frame")
                return 0
            self._pending = memoryview(self._decompress(data))
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._frame is None:
                self._frame = self._zstandard.ZstdDecompressor().decompressobj()
            out.append(self._frame.decompress(data))
            if not self._frame.eof:
                break
            data, self._frame = self._frame.unused_data, None
        return b"".join(out)
