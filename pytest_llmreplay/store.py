"""Where stored results live: a folder, a git ref, or an object store (any fsspec URL).

**Layout** (every kind): ``<test folder>/<commit12>-<UTC time>-<pid>-<random>.json``, the test
folder from :func:`result_folder`. Names are unique (time to the microsecond, process id, 24
random bits), so writers never collide, and they sort by time within a commit.

**Never overwritten**, whoever writes at the same time:

- :class:`FolderStore` (a path, or ``file:///PATH``: :func:`file_url_path`): written to a temporary file, then hard-linked
  into place, which fails rather than replacing a file; a reader never sees half a file, and
  the temporary files a killed writer leaves are cleared by a later save
  (:func:`clear_stale_temporaries`).
- :class:`GitStore` (``git:REMOTE#REF``): results are commits on REF, an orphan history of the
  files in this layout. A save first lands in a local outbox (``<rootdir>/.llmreplay/git/<id>/
  outbox``), then: fetch REF, add the outbox's files to its tree, commit on top, push (refused by
  the remote unless it fast-forwards, so no one's commit is lost); when another job pushed first,
  fetch again and retry, with backoff, :data:`PUSH_ATTEMPTS` times. Files that are already on REF
  are never replaced. A file leaves the outbox only once it is on the remote, and an outbox file
  left by a failed push goes up with the next save to the same store. The git command line does
  all of it in a private bare repository next to the outbox: the user's working tree, index and
  HEAD are never touched.
- :class:`FsspecStore` (``s3://``, ``gs://``, ``az://``, ``memory://``, any fsspec URL): written
  with fsspec's ``mode="create"``: on S3 (s3fs) a conditional put (``If-None-Match: *``), which the
  server refuses when the name exists; on other back-ends an existence check before the write
  (unique names make a race harmless). An object store's put is atomic: a reader never sees half
  an object.

**Errors and credentials.** :func:`open_store` refuses an unknown scheme, a missing extra
(``pip install 'pytest-llmreplay[s3]'``) and a URL holding a password, and :meth:`Store.check`
one that cannot be reached, each as one line naming the option and the URL with any user or
password in it replaced by ``***`` (:func:`redact`). Credentials come from the environment (the
cloud SDK's own variables, git's credential helpers): no message, report or stored file holds them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from .stored_record import parse_record
from .errors import LLMReplayError

PUSH_ATTEMPTS = 8  # fetch-commit-push rounds before a save to a git store gives up
PUSH_BACKOFF_S = 0.2  # the first wait between rounds; doubled each round (capped), times 0.5..1.5
PUSH_BACKOFF_CAP_S = 5.0
GIT_TIMEOUT_S = 120.0  # one git command talking to the remote
DEFAULT_GIT_REF = "llmreplay-results"
STALE_TEMPORARY_S = 3600.0  # a write_new temporary file this old, of no running process, was left by a killed writer
_TEMPORARY = re.compile(r"\..+\.(\d+)\.[0-9a-f]{8}\.tmp")  # write_new's .NAME.PID.HEX.tmp
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure", "adl": "azure"}


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


@dataclass
class Newest:
    """What :meth:`Store.newest_complete` found: ``key`` and ``record`` (None when no readable,
    complete result was found), ``unreadable`` (why each file skipped on the way could not be
    read, newest first) and ``interrupted`` (how many interrupted results were passed over)."""

    key: str | None
    record: dict[str, Any] | None
    unreadable: list[str] = field(default_factory=list)
    interrupted: int = 0

    def skipped_line(self) -> str | None:
        """``skipped 1 unreadable stored result: <why>`` (several: the newest one's why), or None."""
        if not self.unreadable:
            return None
        count = len(self.unreadable)
        return f"skipped {count} unreadable stored result{'s' if count != 1 else ''}{': the newest,' if count > 1 else ':'} {self.unreadable[0]}"


class Store:
    """Stored results, one folder per test. A kind lists, reads and adds files by key
    (``<test folder>/<name>``); saving, finding and reading results are common to all."""

    label: str  # where, for messages: never holds a credential

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

    def save(self, record: Mapping[str, Any]) -> str:
        """Store ``record`` under a new name; where it went, in words."""
        return self.add(f"{result_folder(record['test'])}/{result_name(record)}", encode(record))

    def stored(self, test: str, commit: str) -> list[str]:
        """Keys of ``test``'s results at ``commit``, oldest first (names sort by time)."""
        folder = result_folder(test)
        return [f"{folder}/{name}" for name in sorted(self.names(folder)) if name.startswith(f"{commit[:12]}-") and name.endswith(".json")]

    def newest_complete(self, test: str, commits: Iterable[str]) -> Newest:
        """The newest stored result of ``test`` that was not interrupted (no ``"interrupted"``:
        it measured its whole workload) and can be read, at the first of ``commits`` holding one:
        what a comparison takes as a baseline. A file that cannot be read (not JSON, not shaped
        as a stored result: :mod:`~pytest_llmreplay.stored_record`) is skipped and named in
        :attr:`Newest.unreadable`, so that one bad file never hides the results under it."""
        unreadable: list[str] = []
        interrupted = 0
        for commit in commits:
            for key in reversed(self.stored(test, commit)):
                try:
                    record = self.read(key)
                except LLMReplayError as exc:
                    unreadable.append(str(exc))
                    continue
                if not record.get("interrupted"):
                    return Newest(key, record, unreadable, interrupted)
                interrupted += 1
        return Newest(None, None, unreadable, interrupted)

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
        where = f"{self.label}/{key}"
        try:
            text = self.read_bytes(key).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LLMReplayError(f"{where}: not a stored llmreplay result ({exc})") from None
        return parse_record(text, where)


@dataclass
class FolderStore(Store):
    """Results in the folder ``root`` (default ``<rootdir>/.llmreplay``)."""

    root: Path

    @property
    def label(self) -> str:  # type: ignore[override]
        return str(self.root)

    def check(self, writing: bool) -> None:
        if writing:
            make_folder(self.root, "the stored results")
        elif self.root.exists() and not self.root.is_dir():
            raise LLMReplayError(f"{self.root} is a file; expected a folder for the stored results")

    def names(self, folder: str) -> list[str]:
        path = self.root / folder
        return [p.name for p in path.iterdir() if not p.name.startswith(".")] if path.is_dir() else []

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
    def label(self) -> str:  # type: ignore[override]
        return redact(self.url.rstrip("/"))

    def _path(self, key: str = "") -> str:
        return f"{self.root.rstrip('/')}/{key}" if key else self.root

    def check(self, writing: bool) -> None:
        try:
            self.fs.invalidate_cache()
            self.fs.ls(self._path(), detail=False)
        except FileNotFoundError:
            if _bucket_missing(self.fs, self.root):
                raise LLMReplayError(f"{self.label}: no such bucket or container") from None
        except Exception as exc:  # noqa: BLE001 - any back-end's failure is one line
            raise LLMReplayError(f"{self.label}: cannot reach the store ({_one_line(exc)})") from None

    def names(self, folder: str) -> list[str]:
        path = self._path(folder)
        try:
            self.fs.invalidate_cache(path)
            return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []
        except Exception as exc:  # noqa: BLE001
            raise LLMReplayError(f"{self.label}/{folder}: cannot list ({_one_line(exc)})") from None

    def read_bytes(self, key: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except Exception as exc:  # noqa: BLE001
            raise LLMReplayError(f"{self.label}/{key}: cannot read ({_one_line(exc)})") from None

    def add(self, key: str, data: bytes) -> str:
        try:
            self.fs.pipe_file(self._path(key), data, mode="create")
        except FileExistsError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise LLMReplayError(f"{self.label}/{key}: cannot write ({_one_line(exc)})") from None
        return f"{self.label}/{key}"


def _bucket_missing(fs: Any, root: str) -> bool:
    """Whether the bucket (the first part of ``root``) is absent, for object stores; False for others."""
    bucket = root.strip("/").split("/", 1)[0]
    if not bucket or fs.protocol in ("memory", "file", ("file", "local")):
        return False
    try:
        return not fs.exists(bucket)
    except Exception:  # noqa: BLE001 - the listing already said enough
        return False


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return redact(text)[:300]


# ------------------------------------------------------------------------ git


class GitError(LLMReplayError):
    """A git command failed; the message is git's last lines of stderr (hints left out),
    credentials redacted; ``refused``: a push the remote refused because the ref moved."""

    refused = False


@dataclass
class GitStore(Store):
    """Results committed to ``ref`` of the git remote at ``url`` (see the module docstring).

    ``work``: this store's private folder (the bare repository ``cache.git`` and ``outbox/``);
    ``env``: git's environment (no prompts, an author, the user's repository's ``http.*`` and
    ``credential.*`` settings so that the job's credentials apply)."""

    label: str  # type: ignore[misc]
    url: str
    ref: str
    work: Path
    env: dict[str, str] = field(default_factory=dict)
    tip: str | None = None  # the fetched commit of ref (None: the ref does not exist yet)
    fetched: bool = False

    @property
    def cache(self) -> Path:
        return self.work / "cache.git"

    @property
    def outbox(self) -> FolderStore:
        return FolderStore(self.work / "outbox")

    def git(self, *args: str, data: bytes | None = None, env: Mapping[str, str] | None = None) -> bytes:
        try:
            done = subprocess.run(["git", "-C", str(self.cache), *args], input=data, capture_output=True, timeout=GIT_TIMEOUT_S, env={**os.environ, **self.env, **(env or {})})
        except FileNotFoundError:
            raise GitError("git is not installed (the git store runs the git command line)") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} took over {GIT_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace")
            lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("hint:")]
            error = GitError(redact(" / ".join(lines[-3:]) or f"git {args[0]} exited with {done.returncode}"))
            error.refused = _refused(stderr)
            raise error
        return done.stdout

    def _make_cache(self) -> None:
        """Make the bare repository once; concurrent processes race to rename theirs into place."""
        if (self.cache / "HEAD").exists():
            return
        self.work.mkdir(parents=True, exist_ok=True)
        scratch = self.work / f".cache-{os.getpid()}-{secrets.token_hex(4)}.git"
        subprocess.run(["git", "init", "-q", "--bare", str(scratch)], check=True, capture_output=True, env={**os.environ, **self.env})
        subprocess.run(["git", "-C", str(scratch), "config", "gc.auto", "0"], check=True, capture_output=True)
        try:
            scratch.rename(self.cache)
        except OSError:  # another process made it first
            shutil.rmtree(scratch, ignore_errors=True)

    def fetch(self) -> None:
        """Set :attr:`tip` to the remote's ``ref`` (None when it does not exist yet)."""
        self._make_cache()
        scratch = f"refs/llmreplay/fetch-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            self.git("fetch", "-q", "--no-tags", "--no-write-fetch-head", self.url, f"+{self.ref}:{scratch}")
        except GitError as exc:
            if "couldn't find remote ref" in str(exc):
                self.tip, self.fetched = None, True
                return
            raise GitError(f"cannot fetch {self.ref} ({exc})") from None
        self.tip = self.git("rev-parse", scratch).decode().strip()
        self.git("update-ref", "-d", scratch)
        self.fetched = True

    def check(self, writing: bool) -> None:
        try:
            self.fetch()
        except GitError as exc:
            raise LLMReplayError(f"{self.label}: {exc}") from None

    def names(self, folder: str) -> list[str]:
        if not self.fetched:
            self.check(False)
        if self.tip is None:
            return []
        listed = self.git("ls-tree", "--name-only", self.tip, *([f"{folder}/"] if folder else [])).decode()
        return [line.rsplit("/", 1)[-1] for line in listed.splitlines() if line]

    def read_bytes(self, key: str) -> bytes:
        if self.tip is None:
            raise LLMReplayError(f"{self.label}/{key}: not stored")
        return self.git("cat-file", "blob", f"{self.tip}:{key}")

    def add(self, key: str, data: bytes) -> str:
        """Put the file in the outbox, then push the outbox; a push that fails in the end keeps
        the file there and says so."""
        kept = self.outbox.add(key, data)
        try:
            self.push_outbox()
        except GitError as exc:
            raise LLMReplayError(f"{self.label}: could not push the result ({exc}); it is kept in {kept} and goes up with the next save to this store") from None
        return f"{self.label} {key}"

    def push_outbox(self) -> None:
        """Fetch, commit the outbox's files on the remote tip, push; retry on a refused push."""
        rng = random.Random(secrets.randbits(32))  # backoff jitter: concurrent jobs must not retry in step
        for attempt in range(PUSH_ATTEMPTS):
            self.fetch()
            pending = self._pending()
            if not pending:
                return
            commit = self._commit(pending)
            try:
                self.git("push", "-q", "--no-verify", self.url, f"{commit}:{self.ref}")
            except GitError as exc:
                if attempt == PUSH_ATTEMPTS - 1 or not exc.refused:
                    raise GitError(f"push refused {attempt + 1} times, others kept pushing first: {exc}" if exc.refused else str(exc)) from None
                time.sleep(min(PUSH_BACKOFF_CAP_S, PUSH_BACKOFF_S * 2**attempt) * rng.uniform(0.5, 1.5))
                continue
            self.tip = commit
            self._clear(pending)
            return

    def _pending(self) -> dict[str, bytes]:
        """Outbox files not yet on the fetched tip (those already there are cleared)."""
        root = self.outbox.root
        found = {}
        on_tip = set()
        if self.tip is not None and root.is_dir():
            on_tip = set(self.git("ls-tree", "-r", "--name-only", self.tip).decode().splitlines())
        for path in sorted(root.glob("*/*.json")) if root.is_dir() else []:
            key = f"{path.parent.name}/{path.name}"
            if key in on_tip:
                path.unlink(missing_ok=True)
                continue
            try:
                found[key] = path.read_bytes()
            except FileNotFoundError:  # another process pushed it and cleared it
                continue
        return found

    def _commit(self, files: Mapping[str, bytes]) -> str:
        """A commit on :attr:`tip` (or a root commit) adding ``files``, made with a private index."""
        index = self.work / f".index-{os.getpid()}-{secrets.token_hex(4)}"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            self.git("read-tree", *([self.tip] if self.tip else ["--empty"]), env=env)
            for key, data in files.items():
                blob = self.git("hash-object", "-w", "--stdin", data=data).decode().strip()
                self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{key}", env=env)
            tree = self.git("write-tree", env=env).decode().strip()
        finally:
            index.unlink(missing_ok=True)
        parents = ["-p", self.tip] if self.tip else []
        message = f"llmreplay: {len(files)} result{'s' if len(files) != 1 else ''}\n\n" + "\n".join(sorted(files))
        return self.git("-c", "commit.gpgsign=false", "commit-tree", tree, *parents, "-m", message).decode().strip()

    def _clear(self, files: Iterable[str]) -> None:
        for key in files:
            (self.outbox.root / key).unlink(missing_ok=True)


def _refused(stderr: str) -> bool:
    """Whether a push failed because the ref moved (another job pushed first): worth a retry."""
    return any(sign in stderr for sign in ("[rejected]", "non-fast-forward", "fetch first", "failed to update ref", "cannot lock ref", "failed to lock", "incorrect old value", "stale info"))


def _git_env(rootdir: Path) -> dict[str, str]:
    """No prompts, a fixed author, and the repository's own ``http.*``/``credential.*`` settings
    (where CI checkouts keep the job's token) passed through GIT_CONFIG_* (never argv)."""
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_AUTHOR_NAME": "llmreplay", "GIT_AUTHOR_EMAIL": "llmreplay@localhost",
           "GIT_COMMITTER_NAME": "llmreplay", "GIT_COMMITTER_EMAIL": "llmreplay@localhost"}
    done = subprocess.run(["git", "-C", str(rootdir), "config", "--local", "-z", "--get-regexp", r"^(http|credential)\."], capture_output=True)
    pairs = [entry.split("\n", 1) for entry in done.stdout.decode(errors="replace").split("\0") if entry] if done.returncode == 0 else []
    for index, pair in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = pair[0], (pair[1] if len(pair) > 1 else "true")
    if pairs:
        env["GIT_CONFIG_COUNT"] = str(len(pairs))
    return env


def git_store(spec: str, rootdir: Path) -> GitStore:
    """``git:REMOTE#REF``: REMOTE a remote of the repository at ``rootdir`` (``origin``) or a URL
    (one holding a password is refused, as for any store) or path; REF a full ref
    (``refs/llmreplay/results``) or a branch name (default ``llmreplay-results``)."""
    remote, _, ref = spec.removeprefix("git:").partition("#")
    ref = ref.strip() or DEFAULT_GIT_REF
    if not remote:
        raise LLMReplayError(f"{redact(spec)}: expected git:REMOTE#REF, e.g. git:origin#refs/llmreplay/results")
    refuse_password(spec, remote, "to git (a credential helper, or the checkout's http.*extraheader)")
    if not ref.startswith("refs/"):
        ref = f"refs/heads/{ref}"
    done = subprocess.run(["git", "-C", str(rootdir), "remote", "get-url", remote], capture_output=True, text=True)
    if done.returncode == 0:
        url, base = done.stdout.strip(), _toplevel(rootdir)  # git reads a relative remote path from the top
    elif "/" in remote or ":" in remote:
        url, base = remote, rootdir
    else:
        raise LLMReplayError(f"{redact(spec)}: {remote!r} is not a git remote of {rootdir} (see git remote -v), nor a URL")
    if "://" not in url and not re.match(r"[^/]+:", url):  # a local path, not host:path
        url = str(Path(base, url).resolve())
    label = f"git:{remote}#{ref}"
    work = Path(rootdir.resolve(), ".llmreplay", "git", hashlib.sha256(f"{url}\0{ref}".encode()).hexdigest()[:16])
    return GitStore(redact(label), url, ref, work, _git_env(rootdir))


def _toplevel(rootdir: Path) -> Path:
    done = subprocess.run(["git", "-C", str(rootdir), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return Path(done.stdout.strip()) if done.returncode == 0 else rootdir


# ------------------------------------------------------------------------ choosing one


def open_store(text: str, rootdir: str | Path) -> Store:
    """The store ``text`` names: ``git:REMOTE#REF``, ``SCHEME://...`` (``file://`` a folder, any
    other an fsspec URL) or a folder (relative to ``rootdir``). Nothing is contacted yet
    (:meth:`Store.check` does that); an empty ``text``, an unknown scheme, a missing extra or a
    password in the URL is an :class:`LLMReplayError`."""
    if not text.strip():  # not rootdir itself: its results would be scattered among the project's files
        raise LLMReplayError("empty; expected a folder, git:REMOTE#REF, or a URL such as s3://BUCKET/PREFIX")
    rootdir = Path(rootdir)
    if text.startswith("git:"):
        return git_store(text, rootdir)
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if re.match(r"(?i)file:", text):
        return FolderStore(file_url_path(text))
    if match is None:
        return FolderStore(Path(rootdir, text))
    scheme = match.group(1).lower()
    refuse_password(text, text, "in the environment (the back-end's own variables)")
    try:
        import fsspec
    except ImportError:
        raise LLMReplayError(f"{redact(text)}: stores at URLs need fsspec: pip install 'pytest-llmreplay[{EXTRAS.get(scheme, 'store')}]'") from None
    if scheme not in fsspec.available_protocols():
        raise LLMReplayError(f"{redact(text)}: unknown scheme {scheme!r}; expected a folder, git:REMOTE#REF, or a URL such as s3://BUCKET/PREFIX, gs://, az://, file://, memory://")
    try:
        fs, root = fsspec.core.url_to_fs(text, skip_instance_cache=True)  # credentials and endpoint: read now, from the environment
    except ImportError:
        raise LLMReplayError(f"{redact(text)}: {scheme}:// needs its back-end: pip install 'pytest-llmreplay[{EXTRAS.get(scheme, 'store')}]'") from None
    except Exception as exc:  # noqa: BLE001 - any back-end's complaint about the URL is one line
        raise LLMReplayError(f"{redact(text)}: {_one_line(exc)}") from None
    return FsspecStore(text, fs, root)


def file_url_path(url: str) -> Path:
    """The folder a ``file:`` URL names (RFC 8089): ``file:///PATH``, ``file://localhost/PATH`` or
    ``file:/PATH``, percent-decoded (``file:///a%20b`` is ``/a b``). Another host (``file://tmp/x`` is host
    ``tmp``, not ``./tmp/x``), a relative ``file:x``, or a query or fragment (a ``?`` or ``#`` of
    the name must be written ``%3F``, ``%23``) is an :class:`LLMReplayError`."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    if parts.netloc.lower() not in ("", "localhost"):
        raise LLMReplayError(f"{redact(url)}: file:// URL with host {parts.netloc!r}; expected file:///ABSOLUTE/PATH (three slashes) or file://localhost/PATH")
    if not parts.path.startswith("/"):
        raise LLMReplayError(f"{redact(url)}: a file: URL must name an absolute path, file:///ABSOLUTE/PATH; give a relative folder as a plain path")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise LLMReplayError(f"{redact(url)}: a file:// URL with a query or fragment; write '?' as %3F and '#' as %23 in a folder name")
    return Path(unquote(parts.path))
