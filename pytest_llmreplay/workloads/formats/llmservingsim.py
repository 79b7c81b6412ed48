"""LLMServingSim JSONL: flat requests and agentic sessions, mixed in one file, told apart per line.

Flat line (one request)::

    {"input_toks": 10, "output_toks": 70, "arrival_time_ns": 46926808,
     "input_tok_ids": [...], "output_tok_ids": [...]}

Agentic line (one session; sub-requests run in order)::

    {"session_id": "s0", "arrival_time_ns": 4059740, "sub_requests": [
        {"input_toks": 1472, "output_toks": 133, "tool_duration_ns": 127348767},
        {"input_toks": 1582, "output_toks": 125, "tool_duration_ns": 0}]}

Rules (LLMServingSim's workload doc): the fields above are required but ``*_tok_ids``, an agentic
line's ``session_id`` (named by its line then, as a flat line is) and ``tool_duration_ns`` (0),
which LLMServingSim's router reads with those defaults (``row.get('session_id', ...)``,
``.get('tool_duration_ns', 0)``: a file it runs was refused), and integers (a string or float is
an error, not coerced); ``input_toks``/``output_toks`` >= 1 and
``len(input_tok_ids) == input_toks`` (same for output); ``arrival_time_ns >= 0``; at least one
sub-request; ``tool_duration_ns >= 0``, the wait after that sub-request completes before the next
is sent (a non-zero value on the last sub-request means nothing: accepted with a warning); session
ids unique. ``input_toks`` of a sub-request is its full prompt. Sessions are sorted by arrival.
Every sub-request but a session's last ends in a tool call (``Turn.tool_call``): the tool runs
for its ``tool_duration_ns``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..workload import HashBlocks, Session, Synthetic, TokenIds, Turn, Workload, next_synthetic, request_name
from ._fields import Fields, iter_json_lines, try_json
from ._writing import Losses, due_losses, known_lengths, reasoning_losses, untimed_losses, write_json_lines

NAME = "llmservingsim"
TIME_UNITS = (  # the hint of a too-fast trace's warning
    "llmservingsim's arrival_time_ns and tool_duration_ns are nanoseconds: a trace written in microseconds or"
    " milliseconds is read 1,000 or 1,000,000 times too fast"
)
REQUEST_FIELDS = frozenset({"input_toks", "output_toks", "input_tok_ids", "output_tok_ids"})
FLAT_FIELDS = REQUEST_FIELDS | {"arrival_time_ns"}
SESSION_FIELDS = frozenset({"session_id", "arrival_time_ns", "sub_requests"})
SUB_REQUEST_FIELDS = REQUEST_FIELDS | {"tool_duration_ns"}
NS = 1e-9


def detect(first_line: str) -> bool:
    """A JSON object line with ``input_toks`` (flat) or ``sub_requests`` (agentic)."""
    first = try_json(first_line)
    return isinstance(first, dict) and bool({"input_toks", "sub_requests"} & first.keys())


def load(path: str | Path) -> Workload:
    """Load an LLMServingSim workload; flat requests get the session id ``line<N>``."""
    path = Path(path)
    sessions: list[tuple[int, int, Session]] = []
    first_line_of: dict[str, int] = {}
    warnings: list[str] = []
    for line, obj in iter_json_lines(path):
        row = Fields(obj, path, line)
        if "sub_requests" in obj:
            session = _agentic(row, warnings)
            if session.id in first_line_of:
                raise row.error(
                    "session_id", f"duplicate session id {session.id!r} (first on line {first_line_of[session.id]})"
                )
            if session.id:  # unnamed: named by its line below, as a flat line is
                first_line_of[session.id] = line
        else:
            row.reject_unknown(FLAT_FIELDS)
            session = Session("", row.int("arrival_time_ns") * NS, (_turn(row, None, 0.0),))
        sessions.append((row.obj["arrival_time_ns"], line, session))
    sessions.sort(key=lambda item: item[:2])
    taken = set(first_line_of)
    sessions = [(a, line, s if s.id else replace(s, id=request_name(line, taken))) for a, line, s in sessions]
    return Workload(tuple(s for _, _, s in sessions), format=NAME, source=str(path), warnings=tuple(warnings))


def _agentic(row: Fields, warnings: list[str]) -> Session:
    row.reject_unknown(SESSION_FIELDS)
    session_id = row.identifier("session_id", required=False) or ""
    arrival_ns = row.int("arrival_time_ns")
    subs = row.list("sub_requests", min_length=1)
    turns: list[Turn] = []
    delay_s = 0.0
    for index, sub_obj in enumerate(subs):
        sub = row.child(sub_obj, f"sub_requests[{index}]")
        sub.reject_unknown(SUB_REQUEST_FIELDS)
        turn = _turn(sub, turns[-1] if turns else None, delay_s)
        turns.append(replace(turn, tool_call=True) if index < len(subs) - 1 else turn)  # a tool runs between
        delay_s = (sub.int("tool_duration_ns", required=False) or 0) * NS
    if delay_s:
        last = len(subs) - 1
        warnings.append(
            str(
                row.error(
                    f"sub_requests[{last}].tool_duration_ns",
                    f"{delay_s:g} s after the last sub-request is ignored (nothing follows it)",
                )
            )
        )
    return Session(session_id, arrival_ns * NS, tuple(turns))


def _turn(request: Fields, previous: Turn | None, delay_s: float) -> Turn:
    input_tokens = request.int("input_toks", minimum=1)
    output_tokens = request.int("output_toks", minimum=1)
    input_ids = request.int_list("input_tok_ids", required=False)
    output_ids = request.int_list("output_tok_ids", required=False)
    for key, ids, count in (("input_tok_ids", input_ids, input_tokens), ("output_tok_ids", output_ids, output_tokens)):
        if ids is not None and len(ids) != count:
            counted = key.replace("_tok_ids", "_toks")
            raise request.error(key, f"has {len(ids)} ids but {counted} is {count}; they must be equal")
    prompt = TokenIds(input_ids) if input_ids is not None else next_synthetic(previous, input_tokens)
    return Turn(input_tokens, output_tokens, prompt, delay_s, output_ids)


def write(workload: Workload, path: str | Path, *, allow_loss: bool = False) -> list[str]:
    """Write flat lines for one-turn sessions and agentic lines for the others.

    Keeps lengths, token ids, arrivals and delays; hash ids, prefix groups and an untimed
    workload's missing arrivals are losses; verbatim payloads cannot be expressed.
    """
    losses = Losses(NAME)
    reasoning_losses(workload, losses)
    untimed_losses(workload, losses)
    due_losses(workload, losses)
    rows = []
    for session in workload.sessions:
        requests = [_request_row(session, index, losses) for index in range(len(session.turns))]
        arrival = round(session.arrival_s / NS) if workload.timed else 0
        if len(requests) == 1:
            rows.append({**requests[0], "arrival_time_ns": arrival})
            continue
        for request, following in zip(requests, session.turns[1:] + (None,), strict=True):
            request["tool_duration_ns"] = round(following.delay_s / NS) if following else 0
        rows.append({"session_id": session.id, "arrival_time_ns": arrival, "sub_requests": requests})
    notes = losses.settle(allow_loss)
    write_json_lines(Path(path), rows)
    return notes


def _request_row(session: Session, index: int, losses: Losses) -> dict:
    input_tokens, output_tokens = known_lengths(NAME, session, index)
    turn = session.turns[index]
    prompt = turn.prompt
    row: dict = {"input_toks": input_tokens, "output_toks": output_tokens}
    if isinstance(prompt, TokenIds):
        row["input_tok_ids"] = list(prompt.ids)
    elif isinstance(prompt, HashBlocks):
        losses.add("hash ids (prompts become synthetic: no prefix sharing)")
    elif isinstance(prompt, Synthetic) and prompt.prefix_group is not None:
        losses.add("prefix groups (prompts become synthetic: no shared prefix)")
    if turn.output_token_ids is not None:
        row["output_tok_ids"] = list(turn.output_token_ids)
    return row
