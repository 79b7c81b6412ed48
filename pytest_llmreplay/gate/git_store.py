"""Stored results as commits on a ref of a git remote (``git:REMOTE#REF``): the
:class:`GitStore` of :mod:`~pytest_llmreplay.gate.store`'s layout and never-overwrite contract.

A save lands in a local outbox first, then fetch REF, add the outbox's files to its tree, commit
on top and push, which the remote refuses unless it fast-forwards; when another job pushed
first, fetch again and retry with backoff (until :data:`PUSH_DEADLINE_S`: with N jobs pushing
at once each round lands one, so a fixed count of rounds left the last of 24 behind). All of it runs in a
private bare repository next to the outbox: the user's working tree, index and HEAD are never
touched. A ref holding no commit the store made (a code branch: ``git:origin#main``)
is never written to, since a save commits on top of the ref's files: refused when the store is
checked for writing and again before each push.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LLMReplayError
from .store import BATCH, FolderStore, Store, close_names, redact, refuse_password

PUSH_DEADLINE_S = 300.0  # fetch-commit-push rounds go on while refused, until this long after the first
PUSH_BACKOFF_S = 0.2  # the first wait between rounds; doubled each round (capped), times 0.5..1.5
PUSH_BACKOFF_CAP_S = 5.0
GIT_TIMEOUT_S = 120.0  # one git command talking to the remote
DEFAULT_GIT_REF = "llmreplay-results"
OWN_HISTORY = 1000  # commits of a ref looked through for one the store made (_refuse_foreign_tip)
COMMIT_SUBJECT = "llmreplay: "  # how every commit the store makes begins (_commit), and how it knows its own


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

    label: str
    keeps_unsaved = True  # its outbox: a result it could not push goes up with the next save
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
            done = subprocess.run(
                ["git", "-C", str(self.cache), *args],
                input=data,
                capture_output=True,
                timeout=GIT_TIMEOUT_S,
                env={**os.environ, **self.env, **(env or {})},
            )
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
        subprocess.run(
            ["git", "init", "-q", "--bare", str(scratch)],
            check=True,
            capture_output=True,
            env={**os.environ, **self.env},
        )
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
            if writing:
                self._refuse_foreign_tip()
        except GitError as exc:
            raise LLMReplayError(f"{self.label}: {exc}") from None

    def _refuse_foreign_tip(self) -> None:
        """:class:`GitError` when the fetched ref holds no commit the store made among its newest
        :data:`OWN_HISTORY` (a code branch). A ref of the store's commits with a hand-made one on
        top (a bad result removed by hand) is the results' still: refusing it stopped every later
        save, and its advice, a new ref, left the whole history behind."""
        if self.tip is None:
            return
        subjects = self.git("log", f"--max-count={OWN_HISTORY}", "--format=%s", self.tip).decode().splitlines()
        subject = subjects[0].strip() if subjects else ""
        if not any(line.startswith(COMMIT_SUBJECT) for line in subjects):
            remote = self.label.partition("#")[0]
            raise GitError(
                f"{self.ref} holds commits the store did not make (its newest, {self.tip[:12]}: {subject[:60]!r}); "
                "results go on top of the ref's files, so they would land on that branch: "
                f"name a ref of their own, such as {remote}#{DEFAULT_GIT_REF}"
            )

    def names(self, folder: str) -> list[str]:
        if not self.fetched:
            self.check(False)
        if self.tip is None:
            return []
        listed = self.git("ls-tree", "--name-only", self.tip, *([f"{folder}/"] if folder else [])).decode()
        return [line.rsplit("/", 1)[-1] for line in listed.splitlines() if line]

    def empty_words(self) -> str:
        return f"no ref {self.ref} there" if self.tip is None else "holds no stored result"

    def similar(self) -> str | None:
        try:
            listed = self.git("ls-remote", "--refs", self.url).decode().split()
        except GitError:
            return None
        found = close_names(self.ref, listed[1::2])  # lines of "<id> <ref>"
        return f"{self.label.partition('#')[0]}#{found[0]}" if found else None

    def read_bytes(self, key: str) -> bytes:
        if self.tip is None:
            raise LLMReplayError(f"{self.label}/{key}: not stored")
        return self.git("cat-file", "blob", f"{self.tip}:{key}")

    def read_many_bytes(self, keys: Sequence[str]) -> Iterator[tuple[str, bytes | LLMReplayError]]:
        """One ``git cat-file --batch`` per :data:`~pytest_llmreplay.gate.store.BATCH` keys (a
        process per file would cost more than the reading)."""
        for start in range(0, len(keys), BATCH):
            chunk = keys[start : start + BATCH]
            if self.tip is None:
                yield from ((key, LLMReplayError(f"{self.label}/{key}: not stored")) for key in chunk)
                continue
            out = self.git("cat-file", "--batch", data="".join(f"{self.tip}:{key}\n" for key in chunk).encode())
            at = 0
            for key in chunk:
                end = out.index(b"\n", at)
                header = out[at:end].split()
                if len(header) != 3:  # "<name> missing"
                    at = end + 1
                    yield key, LLMReplayError(f"{self.label}/{key}: not stored")
                    continue
                size = int(header[2])
                yield key, out[end + 1 : end + 1 + size]
                at = end + 1 + size + 1  # the content, then a newline

    def add(self, key: str, data: bytes) -> str:
        """Put the file in the outbox, then push the outbox; a push that fails in the end keeps
        the file there and says so."""
        kept = self.outbox.add(key, data)
        try:
            self.push_outbox()
        except GitError as exc:
            raise LLMReplayError(
                f"{self.label}: could not push the result ({exc}); it is kept in {kept} and goes up with the next save to this store"
            ) from None
        return f"{self.label} {key}"

    def push_outbox(self) -> None:
        """Fetch, commit the outbox's files on the remote tip, push; retry on a refused push."""
        rng = random.Random(secrets.randbits(32))  # backoff jitter: concurrent jobs must not retry in step
        deadline = time.monotonic() + PUSH_DEADLINE_S
        for attempt in itertools.count():
            self.fetch()
            self._refuse_foreign_tip()
            pending = self._pending()
            if not pending:
                return
            commit = self._commit(pending)
            try:
                self.git("push", "-q", "--no-verify", self.url, f"{commit}:{self.ref}")
            except GitError as exc:
                wait = min(PUSH_BACKOFF_CAP_S, PUSH_BACKOFF_S * 2 ** min(attempt, 32)) * rng.uniform(0.5, 1.5)
                if not exc.refused or time.monotonic() + wait > deadline:
                    raise GitError(
                        f"push refused {attempt + 1} times in {PUSH_DEADLINE_S:g} s, others kept pushing first: {exc}"
                        if exc.refused
                        else str(exc)
                    ) from None
                time.sleep(wait)
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
        message = f"{COMMIT_SUBJECT}{len(files)} result{'s' if len(files) != 1 else ''}\n\n" + "\n".join(sorted(files))
        return self.git("-c", "commit.gpgsign=false", "commit-tree", tree, *parents, "-m", message).decode().strip()

    def _clear(self, files: Iterable[str]) -> None:
        for key in files:
            (self.outbox.root / key).unlink(missing_ok=True)


def _refused(stderr: str) -> bool:
    """Whether a push failed because the ref moved (another job pushed first): worth a retry."""
    return any(
        sign in stderr
        for sign in (
            "[rejected]",
            "non-fast-forward",
            "fetch first",
            "failed to update ref",
            "cannot lock ref",
            "failed to lock",
            "incorrect old value",
            "stale info",
        )
    )


def _git_env(rootdir: Path) -> dict[str, str]:
    """No prompts, a fixed author, and the repository's own ``http.*``/``credential.*`` settings
    (where CI checkouts keep the job's token) passed through GIT_CONFIG_* (never argv)."""
    env = {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "llmreplay",
        "GIT_AUTHOR_EMAIL": "llmreplay@localhost",
        "GIT_COMMITTER_NAME": "llmreplay",
        "GIT_COMMITTER_EMAIL": "llmreplay@localhost",
    }
    done = subprocess.run(
        ["git", "-C", str(rootdir), "config", "--local", "-z", "--get-regexp", r"^(http|credential)\."],
        capture_output=True,
    )
    pairs = (
        [entry.split("\n", 1) for entry in done.stdout.decode(errors="replace").split("\0") if entry]
        if done.returncode == 0
        else []
    )
    for index, pair in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = (
            pair[0],
            (pair[1] if len(pair) > 1 else "true"),
        )
    if pairs:
        env["GIT_CONFIG_COUNT"] = str(len(pairs))
    return env


def git_store(spec: str, rootdir: Path) -> GitStore:
    """``git:REMOTE#REF``: REMOTE a remote of the repository at ``rootdir`` (``origin``) or a URL
    (one holding a password is refused, as for any store) or path; REF a full ref
    (``refs/llmreplay/results``) or a branch name (default ``llmreplay-results``), never ``HEAD``
    (a code branch is refused when written to: :meth:`GitStore.check`)."""
    remote, _, ref = spec.removeprefix("git:").partition("#")
    ref = ref.strip() or DEFAULT_GIT_REF
    if not remote:
        raise LLMReplayError(f"{redact(spec)}: expected git:REMOTE#REF, e.g. git:origin#refs/llmreplay/results")
    if ref.rsplit("/", 1)[-1] == "HEAD":
        raise LLMReplayError(
            f"{redact(spec)}: expected a ref of the results' own, such as {DEFAULT_GIT_REF} or refs/llmreplay/results; "
            "HEAD names the checked-out code, not a place for results"
        )
    refuse_password(spec, remote, "to git (a credential helper, or the checkout's http.*extraheader)")
    if not ref.startswith("refs/"):
        ref = f"refs/heads/{ref}"
    done = subprocess.run(["git", "-C", str(rootdir), "remote", "get-url", remote], capture_output=True, text=True)
    if done.returncode == 0:
        url, base = done.stdout.strip(), _toplevel(rootdir)  # git reads a relative remote path from the top
    elif "/" in remote or ":" in remote:
        url, base = remote, rootdir
    else:
        raise LLMReplayError(
            f"{redact(spec)}: {remote!r} is not a git remote of {rootdir} (see git remote -v), nor a URL"
        )
    if "://" not in url and not re.match(r"[^/]+:", url):  # a local path, not host:path
        url = str(Path(base, url).resolve())
    label = f"git:{remote}#{ref}"
    work = Path(rootdir.resolve(), ".llmreplay", "git", hashlib.sha256(f"{url}\0{ref}".encode()).hexdigest()[:16])
    return GitStore(redact(label), url, ref, work, _git_env(rootdir))


def _toplevel(rootdir: Path) -> Path:
    done = subprocess.run(["git", "-C", str(rootdir), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return Path(done.stdout.strip()) if done.returncode == 0 else rootdir
