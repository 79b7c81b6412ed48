"""AIPerf ``inputs.json``: the request bodies an AIPerf run sent, written to its artifacts folder.

    {
      "data": [
        {"session_id": "a5cd...", "payloads": [{"messages": [...], "max_tokens": 52, ...}, ...]}
      ]
    }

Each entry is one session whose payloads are its turns, sent verbatim and in order (no timing:
the workload is untimed). ``session_id`` is a required non-empty string, unique; ``payloads`` has
at least one request body (an object). A turn's output length is the body's
``max_completion_tokens`` or ``max_tokens`` when it sets one; its ``stream`` and
``stream_options`` are checked as the server checks them (``_fields.payload_output_tokens``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from ...errors import WorkloadError
from ...json_text import JSONTextError, parse_json, unique_keys
from ..workload import Payload, Session, Turn, Workload
from ._compressed import open_for_writing
from ._fields import Fields, payload_output_tokens, type_name
from ._text import read_text
from ._writing import Losses, payload_bodies, reasoning_losses

NAME = "aiperf-inputs"
_DATA_ARRAY = re.compile(r'\s*\{\s*"data"\s*:\s*\[')


def detect(first_line: str) -> bool:
    """A JSON object whose first key is ``"data"`` holding a list."""
    return _DATA_ARRAY.match(first_line) is not None


def load(path: str | Path) -> Workload:
    """Load an AIPerf inputs.json file."""
    path = Path(path)
    text = read_text(path)
    try:
        document = parse_json(text)
    except JSONTextError as exc:
        # a fault the parser gives no position (a key twice, nesting, a huge integer): its entry's line
        line = exc.line if exc.line is not None else _failing_entry_line(text)
        raise WorkloadError(exc.reason, path=path, line=line, column=exc.column) from None
    if not isinstance(document, dict):
        raise WorkloadError(f'expected an object {{"data": [...]}}, got {type_name(document)}', path=path, line=1)
    top = Fields(document, path, 1)
    top.reject_unknown({"data"})
    entries = top.list("data", min_length=1)
    lines = _entry_lines(text, len(entries))
    sessions: list[Session] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        record = Fields(document, path, lines[index]).child(entry, f"data[{index}]")
        record.reject_unknown({"session_id", "payloads"})
        session_id = record.identifier("session_id", allow_int=False)
        if session_id in seen:
            raise record.error("session_id", f"duplicate session id {session_id!r} (first in data[{seen[session_id]}])")
        seen[session_id] = index
        payloads = record.list("payloads", min_length=1)
        turns = tuple(_turn(record.child(body, f"payloads[{k}]")) for k, body in enumerate(payloads))
        sessions.append(Session(session_id, 0.0, turns))
    return Workload(tuple(sessions), format=NAME, source=str(path), timed=False)


def _turn(body: Fields) -> Turn:
    if not body.obj:
        raise body.error(None, "must be a non-empty request body")
    return Turn(None, payload_output_tokens(body), Payload(body.obj))


def _entry_lines(text: str, count: int) -> list[int | None]:
    """The line on which each element of the top-level ``data`` array starts (for messages)."""
    lines: list[int | None] = list(islice(_entry_starts(text, json.JSONDecoder()), count))
    return lines + [None] * (count - len(lines))


def _entry_starts(text: str, decoder: json.JSONDecoder) -> Iterator[int]:
    """Yield the line on which each element of the top-level ``data`` array starts, then decode
    it with ``decoder`` (whose errors propagate); nothing when ``data`` does not come first."""
    match = _DATA_ARRAY.match(text)
    if match is None:
        return
    position = match.end()
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] == "]":
            return
        yield text.count("\n", 0, position) + 1
        _, position = decoder.raw_decode(text, position)


def _failing_entry_line(text: str) -> int:
    """The line on which the ``data`` entry whose decoding fails (a repeated key, nesting too
    deep, an integer too long) starts; 1 when the fault is outside the entries."""
    line = 1
    try:
        for start in _entry_starts(text, json.JSONDecoder(object_pairs_hook=unique_keys)):
            line = start  # the entry being decoded when the error comes
    except (ValueError, RecursionError):
        return line
    return 1


def write(workload: Workload, path: str | Path, *, allow_loss: bool = False) -> list[str]:
    """Write ``{"data": [...]}`` (indent 2, as AIPerf does); only payload workloads convert."""
    losses = Losses(NAME)
    reasoning_losses(workload, losses)
    bodies = payload_bodies(workload, NAME, losses)
    notes = losses.settle(allow_loss)
    data = [{"session_id": s.id, "payloads": b} for s, b in zip(workload.sessions, bodies, strict=True)]
    with open_for_writing(path) as stream:
        stream.write(json.dumps({"data": data}, indent=2) + "\n")
    return notes
