"""The git side of stored results: a working tree's commit, dirty flag and branch when a result
is saved, and the commits a comparison searches for its baseline (``--llm-compare``, ``llmreplay
history --ref``, ``llmreplay dashboard --ref``): the reference's first-parent history, newest
first. Every git call is bounded (10 s) and any failure (git missing, not a repository) is None,
never an exception, except where a reference the user named cannot be resolved
(:func:`require_commit`: one error, worded the same for every option)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError

HISTORY_DEPTH = 200  # commits walked back from the reference to find a stored result


def git_state(cwd: str | Path) -> dict[str, Any]:
    """commit, dirty (tracked files changed) and branch of the repository at ``cwd``; Nones outside one."""
    cwd = Path(cwd)
    commit = _git(cwd, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "branch": None}
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status), "branch": _git(cwd, "rev-parse", "--abbrev-ref", "HEAD")}


def _git(cwd: Path, *args: str) -> str | None:
    """git's stripped output, None when git is missing or the command fails."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_unreadable(cwd: str | Path) -> str | None:
    """Why git cannot read the repository ``cwd`` is in, in git's words (``fatal: detected
    dubious ownership ...`` in a container whose checkout another user owns; ``git is not
    installed``), or None where it can, where ``cwd`` is in no repository (results are then
    stored as ``nogit`` on purpose) or the repository has no commit yet. Results are kept per
    commit: an unreadable repository would store them where no comparison finds them."""
    cwd = Path(cwd)
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        if not any((folder / ".git").exists() for folder in (cwd, *cwd.parents)):
            return None
        return "git is not installed" if isinstance(exc, OSError) else "git rev-parse HEAD took over 10 s"
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip() and not line.startswith("hint:")]
    if done.returncode == 0 or any(
        sign in line for line in lines for sign in ("not a git repository", "unknown revision", "ambiguous argument")
    ):
        return None
    return " / ".join(dict.fromkeys(lines[:1] + lines[-1:])) or f"git exited with status {done.returncode}"


def check_git_readable(cwd: str | Path, option: str) -> None:
    """:class:`LLMReplayError` for ``option`` (one that saves or compares results) when git
    cannot read the repository ``cwd`` is in (:func:`git_unreadable`), with git's reason."""
    why = git_unreadable(cwd)
    if why is not None:
        raise LLMReplayError(f"{option}: git cannot read the repository at {cwd}: {why}")


def resolve_commit(cwd: str | Path, ref: str) -> str | None:
    """The full id of the commit git resolves ``ref`` to in ``cwd``'s repository (a commit id,
    tag, branch or expression such as ``main~1``); None when it cannot, or git is missing."""
    return _git(Path(cwd), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


# where --llm-compare's default reference is looked for, in order: the remote's default branch
# when the clone knows it, the local main/master, then the remote-tracking main/master (a CI
# checkout of a feature branch, GitHub Actions' included, often has only refs/remotes/origin/*)
DEFAULT_BRANCHES = ("origin/HEAD", "main", "master", "origin/main", "origin/master")


def require_commit(cwd: str | Path, ref: str, option: str) -> str:
    """The full id of the commit ``ref`` names in ``cwd``'s repository, for ``option`` (one that
    takes a reference: ``--llm-compare``, ``llmreplay history --ref``, ``llmreplay dashboard
    --ref``); otherwise the one :class:`LLMReplayError` they all raise: ``ref`` empty, ``cwd``
    not in a git repository with a commit, or a name git cannot resolve to a commit."""
    cwd = Path(cwd)
    if not ref.strip():
        raise LLMReplayError(f"{option}: empty; expected a branch, tag or commit of the repository at {cwd}")
    commit = resolve_commit(cwd, ref)
    if commit is not None:
        return commit
    if _git(cwd, "rev-parse", "--verify", "--quiet", "HEAD") is None:
        check_git_readable(cwd, option)
        raise LLMReplayError(f"{option}: {cwd} is not in a git repository with a commit; baselines are kept per commit")
    raise LLMReplayError(
        f"{option}: git cannot resolve {ref!r} to a commit; expected a branch, tag or commit of the repository at {cwd}"
    )


def reference_history(cwd: str | Path, ref: str | None, option: str = "--llm-compare") -> tuple[str, list[str]]:
    """(what the reference is, in words; commits to search newest first) for ``option``
    (``--llm-compare``, ``llmreplay history --ref``).

    ``ref`` None or ``"auto"``: the merge-base of HEAD with the default branch, the first of
    :data:`DEFAULT_BRANCHES` that exists and shares history with HEAD (HEAD itself when none
    does), then its first-parent ancestors; the words name the branch used. Otherwise ``ref`` is
    any commit, tag or branch git can resolve (:func:`require_commit`'s errors otherwise). In a
    shallow clone whose history ends before :data:`HISTORY_DEPTH` commits the words say so: a
    CI checkout of depth 1 found no baseline, or none but HEAD's, and said nothing of why."""
    cwd = Path(cwd)
    head = require_commit(cwd, "HEAD", option)
    if ref in (None, "auto"):
        base = None
        for candidate in DEFAULT_BRANCHES:
            if _git(cwd, "rev-parse", "--verify", "--quiet", candidate) is not None:
                base = _git(cwd, "merge-base", "HEAD", candidate)
                if base:
                    label = f"merge-base with {candidate} ({base[:12]})"
                    break
        if not base:
            base, label = head, "HEAD"
    else:
        base = require_commit(cwd, ref, option)
        label = f"{ref} ({base[:12]})"
    history = (_git(cwd, "rev-list", "--first-parent", f"--max-count={HISTORY_DEPTH}", base) or base).split()
    if len(history) < HISTORY_DEPTH and _git(cwd, "rev-parse", "--is-shallow-repository") == "true":
        label += (
            f" (a shallow clone: its history ends {len(history)} commit{'s' if len(history) > 1 else ''} back, "
            "where the search for a baseline ends; fetch all of it: actions/checkout's fetch-depth: 0)"
        )
    return label, history
