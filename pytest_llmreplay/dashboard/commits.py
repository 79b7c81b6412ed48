"""The commits a dashboard draws its results along: the first-parent history of a reference, as
``--llm-compare`` and ``llmreplay history`` walk it, with each commit's date and subject."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import LLMReplayError
from ..gate.git import require_commit

SUBJECT_CHARACTERS = 72  # of a commit's subject shown on hover


@dataclass(frozen=True)
class Commit:
    """One commit: its full ``id``, committer ``date`` (ISO 8601) and ``subject`` (shortened)."""

    id: str
    date: str
    subject: str

    @property
    def short(self) -> str:
        return self.id[:12]


def first_parent_history(cwd: str | Path, ref: str, depth: int) -> list[Commit]:
    """The newest ``depth`` commits of ``ref``'s first-parent history in the repository at
    ``cwd``, oldest first; :class:`LLMReplayError` naming ``--ref`` when git cannot resolve it
    (:func:`~pytest_llmreplay.gate.git.require_commit`: as ``llmreplay history --ref``) or
    walk its history."""
    commit = require_commit(cwd, ref, "--ref")
    try:
        done = subprocess.run(
            ["git", "log", "--first-parent", f"--max-count={depth}", "--format=%H%x1f%cI%x1f%s", commit, "--"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LLMReplayError(f"--ref {ref}: cannot run git log ({exc})") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["git log failed"])[-1]
        raise LLMReplayError(f"--ref {ref}: git cannot walk its history in {cwd} ({why})")
    commits = []
    for line in done.stdout.splitlines():
        commit, date, subject = line.split("\x1f", 2)
        if len(subject) > SUBJECT_CHARACTERS:
            subject = subject[: SUBJECT_CHARACTERS - 1] + "…"
        commits.append(Commit(commit, date, subject))
    return commits[::-1]
