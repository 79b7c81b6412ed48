"""AIPerf raw payload JSONL: each line a whole chat request body, sent verbatim.

    {"messages": [{"role": "user", "content": "What is ML?"}], "model": "m", "max_tokens": 100}

A file: every line is its own single-turn session (``line<N>``). A directory: every ``*.jsonl``
file in it (or ``*.jsonl.gz``, ``*.jsonl.zst``; sorted by name) is one session named by the file's
name without those endings, its lines the ordered turns;
each line carries its full history, as AIPerf sends them. ``messages`` is required (a non-empty
list of objects with a ``role``); every other key is passed through untouched. A turn's output
length is the body's ``max_completion_tokens`` or ``max_tokens`` when it sets one; its ``stream``
and ``stream_options`` are checked as the server checks them (``_fields.payload_output_tokens``).
"""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import WorkloadError
from ..workload import Payload, Session, Turn, Workload
from ._compressed import uncompressed_name
from ._fields import Fields, check_messages, iter_json_lines, payload_output_tokens, try_json
from ._writing import Losses, payload_bodies, reasoning_losses, write_json_lines

NAME = "aiperf-payloads"


def detect(first_line: str) -> bool:
    """A JSON object line with a ``messages`` list."""
    first = try_json(first_line)
    return isinstance(first, dict) and isinstance(first.get("messages"), list)


def load(path: str | Path) -> Workload:
    """Load a raw payload file, or a directory of them (one session per file)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if uncompressed_name(p).endswith(".jsonl") and p.is_file())
        sessions = [
            Session(uncompressed_name(file).removesuffix(".jsonl"), 0.0, turns)
            for file in files
            if (turns := tuple(_turns(file)))
        ]
        if not sessions:
            raise WorkloadError("no non-empty *.jsonl files in this directory", path=path)
    else:
        sessions = [Session(f"line{line}", 0.0, (turn,)) for line, turn in _numbered_turns(path)]
    return Workload(tuple(sessions), format=NAME, source=str(path), timed=False)


def _turns(path: Path):
    return (turn for _, turn in _numbered_turns(path))


def _numbered_turns(path: Path):
    for line, obj in iter_json_lines(path):
        body = Fields(obj, path, line)
        check_messages(body)
        yield line, Turn(None, payload_output_tokens(body), Payload(obj))


def write(workload: Workload, path: str | Path, *, allow_loss: bool = False) -> list[str]:
    """One-turn sessions: a JSONL file, a body a line. Multi-turn sessions: ``path`` becomes a
    directory with one ``<session id>.jsonl`` per session. Only payload workloads convert."""
    losses = Losses(NAME)
    reasoning_losses(workload, losses)
    bodies = payload_bodies(workload, NAME, losses)
    notes = losses.settle(allow_loss)
    path = Path(path)
    if all(len(b) == 1 for b in bodies):
        write_json_lines(path, (b[0] for b in bodies))
        return notes
    width = len(str(len(bodies)))
    names = [
        f"{number:0{width}d}-{re.sub(r'[^A-Za-z0-9._-]+', '_', session.id)}.jsonl"
        for number, session in enumerate(workload.sessions)
    ]
    _refuse_other_sessions(path, set(names))
    path.mkdir(parents=True, exist_ok=True)
    for name, session_bodies in zip(names, bodies, strict=True):
        write_json_lines(path / name, session_bodies)
    return notes + ["directory mode: files are numbered to keep the session order"]


def _refuse_other_sessions(path: Path, names: set[str]) -> None:
    """Raise when the directory ``path`` already holds session files that writing ``names`` leaves
    in place: read back, they would join the written sessions."""
    if not path.is_dir():
        return
    others = sorted(p.name for p in path.iterdir() if uncompressed_name(p).endswith(".jsonl") and p.name not in names)
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise WorkloadError(
            f"already holds {len(others):,} session files this conversion does not write ({shown}): read back, they"
            " would join its sessions; write to a new or empty directory",
            path=path,
        )
