"""Where stored results live: a folder, a git ref, or an object store (any fsspec URL).

**Layout** (every kind): ``<test folder>/<commit12>-<UTC time>-<pid>-<random>.json``, the test
folder from :func:`result_folder`. Names are unique (time to the microsecond, process id, 24
random bits), so writers never collide, and they sort by time within a commit.

**Never overwritten**, whoever writes at the same time:

- :class:`FolderStore` (a path, or ``file:///PATH``: :func:`~pytest_llmreplay.gate.store_url.file_url_path`): written to a temporary file, then hard-linked
  into place, which fails rather than replacing a file; a reader never sees half a file, and
  the temporary files a killed writer leaves are cleared by a later save
  (:func:`clear_stale_temporaries`).
- :class:`~pytest_llmreplay.gate.git_store.GitStore` (``git:REMOTE#REF``): results are commits on REF, an orphan history of the
  files in this layout. A save first lands in a local outbox (``<rootdir>/.llmreplay/git/<id>/
  outbox``), then: fetch REF, add the outbox's files to its tree, commit on top, push (refused by
  the remote unless it fast-forwards, so no one's commit is lost); when another job pushed first,
  fetch again and retry, with backoff, :data:`~pytest_llmreplay.gate.git_store.PUSH_DEADLINE_S` seconds. Files that are already on REF
  are never replaced. A file leaves the outbox only once it is on the remote, and an outbox file
  left by a failed push goes up with the next save to the same store. The git command line does
  all of it in a private bare repository next to the outbox: the user's working tree, index and
  HEAD are never touched.
- :class:`FsspecStore` (``s3://``, ``gs://``, ``az://``, ``memory://``, any fsspec URL): written
  with fsspec's ``mode="create"``: on S3 (s3fs) a conditional put (``If-None-Match: *``), which the
  server refuses when the name exists; on other back-ends an existence check before the write
  (unique names make a race harmless). An object store's put is atomic: a reader never sees half
  an object.

**Errors and credentials.** :func:`~pytest_llmreplay.gate.store_url.open_store` refuses an unknown scheme, a missing extra
(``pip install 'pytest-llmreplay[s3]'``) and a URL holding a password, and :meth:`Store.check`
one that cannot be reached, each as one line naming the option and the URL with any user or
password in it replaced by ``***`` (:func:`redact`). Credentials come from the environment (the
cloud SDK's own variables, git's credential helpers): no message, report or stored file holds them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LLMReplayError
from ..wording import counted
from .stored_record import parse_record, partial_reason

BATCH = 500  # stored files read in one go by the kinds that can (Store.read_many_bytes)
STALE_TEMPORARY_S = 3600.0  # a write_new temporary file this old, of no running process, was left by a killed writer
_TEMPORARY = re.compile(r"\..+\.(\d+)\.[0-9a-f]{8}\.tmp")  # write_new's .NAME.PID.HEX.tmp


def redact(text: str) -> str:
    """``text`` with the user and password of every URL in it, and every query string, replaced
    by ``***`` (``https://tok@host/x?sig=1`` -> ``https://***@host/x?***``)."""
    text = re.sub(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@", r"\1***@", text)
    return re.sub(r"(://[^\s?]*)\?[^\s\"']*", r"\1?***", text)


def refuse_password(text: str, url: str, instead: str) -> None:
    """:class:`LLMReplayError` naming ``text`` (the option as given, redacted) when ``url`` holds
    a password (``scheme://user:password@host``); ``instead`` says where credentials go."""
    if re.match(r"[^:/]+://[^/@]*:[^/@]*@", url):
        raise LLMReplayError(f"{redact(text)}: a password in the URL; give credentials {instead}, not in the option")


def result_folder(test: str) -> str:
    """A file-system-safe folder name for a test id, readable and unique (a digest suffix)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", test).strip("_.")[:80] or "test"
    return f"{readable}-{hashlib.sha256(test.encode()).hexdigest()[:8]}"


def result_name(record: Mapping[str, Any]) -> str:
    """A new file name for ``record`` (see the module docstring's layout)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    commit = (record.get("commit") or "nogit")[:12]
    return f"{commit}-{stamp}-{os.getpid()}-{secrets.token_hex(3)}.json"


def encode(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()


def make_folder(path: Path, contents: str) -> None:
    """Make the folder ``path`` (and its parents) for ``contents`` before anything is measured;
    :class:`LLMReplayError` when a file is there, it cannot be made, or it is not writable."""
    if path.exists() and not path.is_dir():
        raise LLMReplayError(f"{path} is a file; expected a folder for {contents}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LLMReplayError(f"cannot make {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK):
        raise LLMReplayError(f"{path} is not writable")


def write_new(path: Path, record: Mapping[str, Any] | bytes) -> Path:
    """Write ``record`` (or bytes) to ``path`` atomically, never replacing a file (FileExistsError):
    through a hidden temporary file ``.NAME.PID.HEX.tmp`` beside it. The folder's stale
    temporary files, which a writer killed mid-write leaves, are cleared first
    (:func:`clear_stale_temporaries`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_temporaries(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    temporary.write_bytes(record if isinstance(record, bytes) else encode(record))
    try:
        os.link(temporary, path)
    finally:
        temporary.unlink()
    return path


def clear_stale_temporaries(folder: Path) -> None:
    """Remove the temporary files of :func:`write_new` in ``folder`` that are stale: older than
    :data:`STALE_TEMPORARY_S` *and* named by a process id that no process on this machine has.
    Both, so that a live writer's file is never taken: a write holds its file for milliseconds,
    and the age covers writers on other machines sharing the folder (whose ids mean nothing
    here), the process check a writer on this one that stalled longer. Files that vanish or
    cannot be removed meanwhile are left to the next save."""
    deadline = time.time() - STALE_TEMPORARY_S
    for path in folder.glob(".*.tmp"):
        named = _TEMPORARY.fullmatch(path.name)
        try:
            if named and path.stat().st_mtime < deadline and not _running(int(named.group(1))):
                path.unlink()
        except OSError:
            continue


def _running(pid: int) -> bool:
    """Whether a process of id ``pid`` exists on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError):  # none has the id (or an id past any process's)
        return False
    except PermissionError:  # another user's
        return True
    return True


# ------------------------------------------------------------------------ the stores


# the folder (under the rootdir, or the cwd) of the results a store refused (Store.save_or_keep)
UNSAVED = ".llmreplay-unsaved"


@dataclass
class Newest:
    """What :meth:`Store.newest_complete` found: ``key`` and ``record`` (None when no readable,
    complete result was found), ``unreadable`` (why each file skipped on the way could not be
    read, newest first) and ``partial`` (how many results that measured part or none of their
    workload were passed over: :func:`~pytest_llmreplay.gate.stored_record.partial_reason`)."""

    key: str | None
    record: dict[str, Any] | None
    unreadable: list[str] = field(default_factory=list)
    partial: int = 0

    def skipped_line(self) -> str | None:
        """``skipped 1 unreadable stored result: <why>`` (several: the newest one's why), or None."""
        if not self.unreadable:
            return None
        count = len(self.unreadable)
        return f"skipped {counted(count, 'unreadable stored result')}{': the newest,' if count > 1 else ':'} {self.unreadable[0]}"


class Store:
    """Stored results, one folder per test. A kind lists, reads and adds files by key
    (``<test folder>/<name>``); saving, finding and reading results are common to all."""

    if TYPE_CHECKING:  # no attribute at run time: a kind has a field or a property of that name

        @property
        def label(self) -> str:
            """Where, for messages: never holds a credential."""
            ...

    def check(self, writing: bool) -> None:
        """Raise :class:`LLMReplayError` (one line) when the store cannot be used; a git store
        also fetches here, so a comparison reads what the remote held at start-up."""

    def names(self, folder: str) -> list[str]:
        """The names in ``folder`` (``""``: the test folders at the top)."""
        raise NotImplementedError

    def read_bytes(self, key: str) -> bytes:
        raise NotImplementedError

    def add(self, key: str, data: bytes) -> str:
        """Store ``data`` at ``key``, never replacing anything; where it went, in words."""
        raise NotImplementedError

    keeps_unsaved = False  # a kind that keeps a result it could not store itself (the git store's outbox)

    def nothing_stored(self) -> str | None:
        """Why the store holds no result at all (``LABEL: no such folder``), or None when it
        holds some. A mistyped folder, git ref or prefix compared against gated nothing (every
        test "has no stored result" and passed): the read-only commands refuse such a store, the
        plugin too where the name is surely wrong
        (:func:`~pytest_llmreplay.plugin.session.refuse_or_warn_of_an_empty_store`)."""
        return None if self.names("") else f"{self.label}: {self.empty_words()}"

    def empty_words(self) -> str:
        """:meth:`nothing_stored`'s words for this kind of store."""
        return "holds no stored result"

    def similar(self) -> str | None:
        """A store beside this one whose name is much like its own (``git:origin#refs/llmreplay/
        results`` for ``...#refs/llmreplay/resluts``), or None: what a typo meant."""
        return None

    def save(self, record: Mapping[str, Any]) -> str:
        """Store ``record`` under a new name; where it went, in words."""
        return self.add(f"{result_folder(record['test'])}/{result_name(record)}", encode(record))

    def save_or_keep(self, record: Mapping[str, Any], keep_in: Path) -> str:
        """:meth:`save`; when the store refuses it (an object store that went away mid-run, a
        name taken by another object), the result is kept as a file in the folder store
        ``keep_in`` (unless this kind keeps it itself) and the error says where: a measured
        result is never lost to its store."""
        try:
            return self.save(record)
        except (LLMReplayError, FileExistsError) as exc:
            if self.keeps_unsaved:
                raise
            taken = isinstance(exc, FileExistsError)
            why = f"{self.label}: its name holds another object" if taken else exc
            try:
                kept = FolderStore(keep_in).save(record)
            except (LLMReplayError, OSError) as local:
                raise LLMReplayError(f"{why}; could not keep it in {keep_in} either ({local})") from None
            then = "under another name" if taken else "once it is back"
            raise LLMReplayError(f"{why}; the result is kept in {kept}: copy it into the store {then}") from None

    def stored(self, test: str, commit: str) -> list[str]:
        """Keys of ``test``'s results at ``commit``, oldest first (names sort by time)."""
        folder = result_folder(test)
        return [
            f"{folder}/{name}"
            for name in sorted(self.names(folder))
            if name.startswith(f"{commit[:12]}-") and name.endswith(".json")
        ]

    def newest_complete(
        self, test: str, commits: Iterable[str], alike: Callable[[Mapping[str, Any]], bool] | None = None
    ) -> Newest:
        """The newest stored result of ``test`` that measured its whole workload (no
        :func:`~pytest_llmreplay.gate.stored_record.partial_reason`: not interrupted, no incomplete
        capacity search, some request succeeded) and can be read, at the first of ``commits`` holding one:
        what a comparison takes as a baseline; one saved from a clean tree before any saved from
        a dirty one (``"dirty"``: tracked files changed, not the commit's code), which is taken only
        where the commit has no other. With ``alike`` (the comparison's own result: the same
        endpoint, workload and settings), the newest such result that it accepts, searched on
        down the commits, so that another runner's result saved later at the same commit (an
        H200 job beside an H100 one) hides nobody's baseline; the newest of all when none is
        alike, for the comparison to say why. A file that cannot be read (not JSON, not shaped
        as a stored result: :mod:`~pytest_llmreplay.gate.stored_record`) is skipped and named in
        :attr:`Newest.unreadable`, so that one bad file never hides the results under it."""
        unreadable: list[str] = []
        partial = 0
        unlike: tuple[str, dict[str, Any]] | None = None
        for commit in commits:
            dirty: tuple[str, dict[str, Any]] | None = None
            for key in reversed(self.stored(test, commit)):
                try:
                    record = self.read(key)
                except LLMReplayError as exc:
                    unreadable.append(str(exc))
                    continue
                if partial_reason(record):
                    partial += 1
                elif alike is not None and not alike(record):
                    unlike = unlike or (key, record)
                elif not record.get("dirty"):
                    return Newest(key, record, unreadable, partial)
                elif dirty is None:
                    dirty = (key, record)
            if dirty is not None:  # no clean one at this commit: its newest dirty one, said so by the caller
                return Newest(dirty[0], dirty[1], unreadable, partial)
        if unlike is not None:
            return Newest(unlike[0], unlike[1], unreadable, partial)
        return Newest(None, None, unreadable, partial)

    def tests(self, limit: int = 20) -> list[str]:
        """The ids of the tests this store holds results of (each test folder's newest readable
        result names its test), sorted, at most ``limit`` folders read: for the message that a
        test id matched none of them."""
        found = set()
        for folder in sorted(self.names(""))[:limit]:
            for name in sorted(self.names(folder), reverse=True):
                try:
                    found.add(str(self.read(f"{folder}/{name}")["test"]))
                    break
                except (LLMReplayError, KeyError):
                    continue
        return sorted(found)

    def read(self, key: str) -> dict[str, Any]:
        """The stored result at ``key``; one line naming it when it is not one."""
        return self._parse(key, self.read_bytes(key))

    def read_many_bytes(self, keys: Sequence[str]) -> Iterator[tuple[str, bytes | LLMReplayError]]:
        """Each of ``keys`` with its bytes, or the error that says why they cannot be read, in
        order. One :meth:`read_bytes` each here; a kind that can fetch many files in one go (a
        git store's one ``cat-file --batch``, an object store's concurrent gets) overrides it."""
        for key in keys:
            try:
                yield key, self.read_bytes(key)
            except LLMReplayError as exc:
                yield key, exc

    def read_many(self, keys: Sequence[str]) -> Iterator[tuple[str, dict[str, Any] | LLMReplayError]]:
        """Each of ``keys`` with its stored result (:meth:`read`), or the error that says why it is
        not one, in order: what reads a whole store (``llmreplay dashboard``) uses."""
        for key, data in self.read_many_bytes(keys):
            try:
                yield key, data if isinstance(data, LLMReplayError) else self._parse(key, data)
            except LLMReplayError as exc:
                yield key, exc

    def _parse(self, key: str, data: bytes) -> dict[str, Any]:
        where = f"{self.label}/{key}"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LLMReplayError(f"{where}: not a stored llmreplay result ({exc})") from None
        return parse_record(text, where)


@dataclass
class FolderStore(Store):
    """Results in the folder ``root`` (default ``<rootdir>/.llmreplay``)."""

    root: Path

    @property
    def label(self) -> str:
        return str(self.root)

    def check(self, writing: bool) -> None:
        if writing:
            make_folder(self.root, "the stored results")
        elif self.root.exists() and not self.root.is_dir():
            raise LLMReplayError(f"{self.root} is a file; expected a folder for the stored results")

    def names(self, folder: str) -> list[str]:
        path = self.root / folder
        return [name for name in os.listdir(path) if not name.startswith(".")] if path.is_dir() else []

    def empty_words(self) -> str:
        return "holds no stored result" if self.root.exists() else "no such folder"

    def similar(self) -> str | None:
        parent = self.root.parent
        siblings = [p.name for p in parent.iterdir() if p.is_dir() and p != self.root] if parent.is_dir() else []
        return next((str(parent / name) for name in close_names(self.root.name, siblings)), None)

    def read_bytes(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except OSError as exc:
            raise LLMReplayError(f"{self.root / key}: cannot read ({exc.strerror or exc})") from None

    def add(self, key: str, data: bytes) -> str:
        return str(write_new(self.root / key, data))


@dataclass
class FsspecStore(Store):
    """Results under an fsspec URL (see the module docstring for what each back-end guarantees)."""

    url: str
    fs: Any
    root: str

    @property
    def label(self) -> str:
        return redact(self.url.rstrip("/"))

    def _path(self, key: str = "") -> str:
        return f"{self.root.rstrip('/')}/{key}" if key else self.root

    def similar(self) -> str | None:
        parent, _, name = self.root.rstrip("/").rpartition("/")
        try:
            siblings = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in self.fs.ls(parent, detail=False)]
        except Exception:  # noqa: BLE001 - nothing to suggest
            return None
        base = self.url.rstrip("/")[: -len(name)] if name and self.url.rstrip("/").endswith(name) else None
        return next((redact(base + found) for found in close_names(name, siblings)), None) if base else None

    def check(self, writing: bool) -> None:
        try:
            self.fs.invalidate_cache()
            self.fs.ls(self._path(), detail=False)
        except FileNotFoundError:
            if _bucket_missing(self.fs, self.root):
                raise LLMReplayError(f"{self.label}: no such bucket or container") from None
        except Exception as exc:  # noqa: BLE001 - any back-end's failure is one line
            raise LLMReplayError(f"{self.label}: cannot reach the store ({one_line(exc)})") from None

    def names(self, folder: str) -> list[str]:
        path = self._path(folder)
        try:
            self.fs.invalidate_cache(path)
            return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []
        except Exception as exc:  # noqa: BLE001
            raise LLMReplayError(f"{self.label}/{folder}: cannot list ({one_line(exc)})") from None

    def read_bytes(self, key: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except Exception as exc:  # noqa: BLE001
            raise LLMReplayError(f"{self.label}/{key}: cannot read ({one_line(exc)})") from None

    def read_many_bytes(self, keys: Sequence[str]) -> Iterator[tuple[str, bytes | LLMReplayError]]:
        """fsspec's ``cat`` of :data:`BATCH` keys at a time (an async back-end such as s3fs gets
        them concurrently), each failure kept as its key's error."""
        for start in range(0, len(keys), BATCH):
            chunk = keys[start : start + BATCH]
            paths = [self._path(key) for key in chunk]
            try:
                found = self.fs.cat(paths, on_error="return")
            except Exception as exc:  # noqa: BLE001 - the whole batch failed: one line for each key
                found = dict.fromkeys(paths, exc)
            for key, path in zip(chunk, paths, strict=True):
                data = found.get(path, FileNotFoundError(path))
                yield (
                    key,
                    (
                        LLMReplayError(f"{self.label}/{key}: cannot read ({one_line(data)})")
                        if isinstance(data, BaseException)
                        else bytes(data)
                    ),
                )

    def add(self, key: str, data: bytes) -> str:
        """As :meth:`Store.add`; a name that holds ``data`` already is this write landed: botocore
        retries a conditional put whose answer was lost, and the retry's 412 said the name
        existed (the result was reported as never measured)."""
        try:
            self.fs.pipe_file(self._path(key), data, mode="create")
        except FileExistsError:
            if self._holds(key, data):
                return f"{self.label}/{key}"
            raise
        except Exception as exc:  # noqa: BLE001
            raise LLMReplayError(f"{self.label}/{key}: cannot write ({one_line(exc)})") from None
        return f"{self.label}/{key}"

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return bytes(self.fs.cat_file(self._path(key))) == data
        except Exception:  # noqa: BLE001 - not readable: not known to be ours
            return False


def _bucket_missing(fs: Any, root: str) -> bool:
    """Whether the bucket (the first part of ``root``) is absent, for object stores; False for others."""
    bucket = root.strip("/").split("/", 1)[0]
    if not bucket or fs.protocol in ("memory", "file", ("file", "local")):
        return False
    try:
        return not fs.exists(bucket)
    except Exception:  # noqa: BLE001 - the listing already said enough
        return False


def refuse_empty(empty: str, near: str | None) -> LLMReplayError:
    """The error for a store that holds no result (``empty``: :meth:`Store.nothing_stored`),
    naming ``near``, a store much like it (:meth:`Store.similar`), where there is one."""
    return LLMReplayError(
        f"{empty}{f' (did you mean {near}?)' if near else ''}; expected where results were stored (--llm-save, run --save-to)"
    )


def close_names(name: str, names: Iterable[str]) -> list[str]:
    """Of ``names``, the one much like ``name`` (difflib's ratio 0.8 or more; a letter swapped or
    dropped), if any: what a mistyped store name meant."""
    import difflib

    return difflib.get_close_matches(name, [n for n in names if n != name], n=1, cutoff=0.8)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return redact(text)[:300]
