"""Mooncake hash-id traces (FAST'25 release; AIPerf's and Dynamo's ``mooncake_trace``).

One request a line::

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}

- ``timestamp`` or ``created_time``: arrival in milliseconds (optional, but all or none of the
  session-starting rows have one);
- ``input_length`` or ``input_tokens``, ``output_length`` or ``output_tokens``: integers >= 1;
  ``input_length`` is the turn's full prompt (Dynamo's reading; AIPerf reads a later turn's
  ``input_length`` as new tokens only, which ``hash_ids`` covering the whole prompt contradict);
- ``hash_ids``: one id per ``block_size`` prompt tokens, the last block may be partial, so
  ``len(hash_ids) == ceil(input_length / block_size)``; without it the prompt is synthetic, and a
  session turn at least as long as the previous prompt + response extends it;
- instead of ``input_length``, AIPerf's literal prompts: ``text_input`` (a string, sent as one
  user message), ``messages`` (a chat history) or ``payload`` (a whole request body), all sent
  verbatim (``output_length`` then optional: the body's ``max_tokens`` or
  ``max_completion_tokens`` stands in; given, it is sent as the request's ``max_tokens`` where
  the body names no limit; a ``payload``'s ``stream`` and ``stream_options`` are checked as the
  server checks them); each turn's literal prompt is sent as it is, with no history of the
  session's earlier turns;
- ``session_id``: rows sharing it are the turns of one session, in file order; a later turn waits
  ``delay`` (or ``delay_ms``) milliseconds after the previous one completes, or, without a delay,
  is due at its own ``timestamp`` (``Turn.due_s``: sent then, or at once when the previous turn
  completes later, as AIPerf's fixed schedule sends it: read as a wait after the previous turn's
  completion, each turn came later by every earlier turn's latency). A delay on a session's first
  turn is an error. Rows without ``session_id`` are independent requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...errors import LLMReplayError, WorkloadError
from ..workload import (
    HashBlocks,
    Payload,
    PromptSource,
    Session,
    TokenIds,
    Turn,
    Workload,
    next_synthetic,
    request_name,
)
from ._fields import Fields, check_messages, iter_json_lines, payload_output_tokens, try_json, type_name
from ._writing import Losses, reasoning_losses, tidy, tool_call_losses, write_json_lines

NAME = "mooncake"
TIME_UNITS = (  # the hint of a too-fast trace's warning
    "mooncake's timestamp, created_time and delay are milliseconds: a trace written in seconds is read 1,000 times too fast"
)
DEFAULT_BLOCK_SIZE = 512
DETECTING_FIELDS = frozenset(
    {
        "hash_ids",
        "input_length",
        "input_tokens",
        "output_length",
        "output_tokens",
        "created_time",
        "text_input",
        "payload",
        "timestamp",
    }
)
KNOWN_FIELDS = frozenset(
    {
        "timestamp",
        "created_time",
        "input_length",
        "input_tokens",
        "output_length",
        "output_tokens",
        "hash_ids",
        "session_id",
        "delay",
        "delay_ms",
        "text_input",
        "messages",
        "payload",
    }
)


# beside a chat history, what no request body holds: a mooncake ``messages`` row's session
SESSION_FIELDS = frozenset({"session_id", "delay", "delay_ms"})


def detect(first_line: str) -> bool:
    """A JSON object line with a field only Mooncake rows have, or a chat history (``messages``)
    with a session's field (read as AIPerf raw payloads, its ``session_id`` and ``delay`` went to
    the server in every body and its turns were separate sessions sent at once)."""
    first = try_json(first_line)
    if not isinstance(first, dict):
        return False
    return bool(DETECTING_FIELDS & first.keys()) or ("messages" in first and bool(SESSION_FIELDS & first.keys()))


@dataclass
class _SessionRows:
    line: int
    arrival_ms: float | None
    last_ms: float | None
    turns: list[Turn] = field(default_factory=list)


def _check_spelling(row: Fields, session_id: str, first: tuple[int, object]) -> None:
    """Refuse a session id written as a number on one row and a string on another (``5`` and
    ``"5"``): two ids to AIPerf (whose rows take strings), one session here once made strings,
    which mixed two sessions' turns in silence."""
    line, written = first
    value = row.obj["session_id"]
    if type(value) is not type(written):
        raise row.error(
            "session_id",
            f"{value!r} names the session written {written!r} on line {line}; write every row's id alike (a string)",
        )


def check_options(*, block_size: object = DEFAULT_BLOCK_SIZE) -> None:
    """The loader's options, checked before any file is read."""
    if type(block_size) is not int or block_size < 1:
        raise LLMReplayError(f"block_size must be an integer >= 1, got {block_size!r}")


def load(path: str | Path, *, block_size: int = DEFAULT_BLOCK_SIZE) -> Workload:
    """Load a Mooncake trace; ``block_size`` is the number of tokens a hash id stands for."""
    try:
        check_options(block_size=block_size)
    except LLMReplayError as exc:
        raise WorkloadError(str(exc), path=path) from None
    path = Path(path)
    sessions: dict[str, _SessionRows] = {}  # named by the file's session_id
    spelled: dict[str, tuple[int, object]] = {}  # a session id's first line and value as written
    independent: list[_SessionRows] = []  # rows without session_id
    timed: bool | None = None
    for line, obj in iter_json_lines(path):
        row = Fields(obj, path, line)
        row.reject_unknown(KNOWN_FIELDS)
        output_key = row.one_of("output_length", "output_tokens", required=False)
        output_tokens = row.int(output_key, minimum=1) if output_key else None
        stamp_key = row.one_of("timestamp", "created_time", required=False)
        stamp_ms = row.number(stamp_key) if stamp_key else None
        delay_key = row.one_of("delay", "delay_ms", required=False)
        delay_ms = row.number(delay_key) if delay_key else None
        session_id = row.identifier("session_id", required=False)
        if session_id is not None:
            _check_spelling(row, session_id, spelled.setdefault(session_id, (line, row.obj["session_id"])))
        previous = sessions.get(session_id) if session_id is not None else None
        input_tokens, prompt = _prompt(row, previous.turns[-1] if previous else None, block_size)
        # only a ``payload`` body can state max_tokens or stream: text_input/messages bodies are ours
        stated_tokens = (
            payload_output_tokens(row.child(prompt.body, "payload")) if isinstance(prompt, Payload) else None
        )
        if output_tokens is None:
            if not isinstance(prompt, Payload):
                raise row.error("output_length", "required field missing (or output_tokens)")
            output_tokens = stated_tokens
        due_s = None
        if previous is None:
            if delay_key:
                raise row.error(
                    delay_key, "a delay is not allowed on a session's first turn (use timestamp for its arrival)"
                )
            if timed is None:
                timed = stamp_ms is not None
            elif timed != (stamp_ms is not None):
                raise row.error(
                    stamp_key or "timestamp", "either every session-starting row has a timestamp or none has"
                )
            previous = _SessionRows(line, stamp_ms, stamp_ms)
            if session_id is None:
                independent.append(previous)
            else:
                sessions[session_id] = previous
            delay_s = 0.0
        elif delay_ms is not None:
            delay_s = delay_ms / 1000.0
        elif stamp_ms is not None and previous.last_ms is not None:
            if stamp_ms < previous.last_ms:
                raise row.error(
                    stamp_key,
                    f"timestamps must not decrease within session {session_id!r}: {stamp_ms:g} < {previous.last_ms:g}",
                )
            delay_s = 0.0
            due_s = (stamp_ms - (previous.arrival_ms or 0.0)) / 1000.0
        else:
            delay_s = 0.0
        if stamp_ms is not None:
            previous.last_ms = stamp_ms
        previous.turns.append(Turn(input_tokens, output_tokens, prompt, delay_s, due_s=due_s))

    taken = set(sessions)
    named = [*sessions.items(), *((request_name(rows.line, taken), rows) for rows in independent)]
    ordered = sorted(named, key=lambda item: ((item[1].arrival_ms or 0.0), item[1].line))
    return Workload(
        sessions=tuple(Session(key, (rows.arrival_ms or 0.0) / 1000.0, tuple(rows.turns)) for key, rows in ordered),
        format=NAME,
        source=str(path),
        timed=bool(timed),
    )


def _prompt(row: Fields, previous: Turn | None, block_size: int) -> tuple[int | None, PromptSource]:
    """The turn's input length and prompt source, from exactly one of the four input fields."""
    key = row.one_of("input_length", "input_tokens", "text_input", "messages", "payload")
    if key in ("text_input", "messages", "payload"):
        if row.has("hash_ids"):
            raise row.error("hash_ids", f"only allowed with input_length, not with {key}")
        return None, Payload(_literal_body(row, key))
    input_tokens = row.int(key, minimum=1)
    hash_ids = row.int_list("hash_ids", required=False, maximum=2**64 - 1)
    if hash_ids is None:
        return input_tokens, next_synthetic(previous, input_tokens)
    expected = -(-input_tokens // block_size)
    if len(hash_ids) != expected:
        raise row.error(
            "hash_ids",
            f"expected ceil({input_tokens} / {block_size}) = {expected} ids for input length {input_tokens} "
            f"at block size {block_size}, got {len(hash_ids)} (pass block_size= if the trace uses another)",
        )
    return input_tokens, HashBlocks(hash_ids, block_size)


def _literal_body(row: Fields, key: str) -> dict:
    """The request body of a literal prompt: a string, a message list or a whole body."""
    value = row.obj[key]
    if key == "text_input":
        if not isinstance(value, str) or not value:
            raise row.error(key, f"must be a non-empty string, got {type_name(value)}")
        return {"messages": [{"role": "user", "content": value}]}
    if key == "messages":
        return {"messages": check_messages(row, key)}
    if not isinstance(value, dict) or not value:
        raise row.error(key, f"must be a non-empty object (a request body), got {type_name(value)}")
    if "messages" in value:  # checked as the text_input and messages forms are: a server refuses each request
        check_messages(row.child(value, key), "messages")
    return value


def write(workload: Workload, path: str | Path, *, allow_loss: bool = False) -> list[str]:
    """Write one row a turn; multi-turn sessions get ``session_id`` and ``delay`` (ms).

    Keeps lengths, hash ids, arrivals (``timestamp``, ms; none for an untimed workload), delays
    and verbatim payloads (``payload``); token ids and prefix groups are losses. Hash ids of
    another block size than 512 are kept and noted: load the file with that ``block_size``.
    """
    losses = Losses(NAME)
    reasoning_losses(workload, losses)
    tool_call_losses(workload, losses)
    notes: list[str] = []
    rows = []
    for session in workload.sessions:
        for index, turn in enumerate(session.turns):
            row: dict = {}
            if index == 0 and workload.timed:
                row["timestamp"] = tidy(session.arrival_s * 1000.0, 6)
            if len(session.turns) > 1:
                row["session_id"] = session.id
            if index and turn.delay_s:
                row["delay"] = tidy(turn.delay_s * 1000.0, 6)
            if index and turn.due_s is not None:  # a later turn's own time: absolute, as a first turn's
                row["timestamp"] = tidy((session.arrival_s + turn.due_s) * 1000.0, 6)
            row.update(_prompt_fields(turn, losses, notes))
            if turn.output_tokens is not None:
                row["output_length"] = turn.output_tokens
            if isinstance(turn.prompt, HashBlocks):  # last, as in the Mooncake release
                row["hash_ids"] = list(turn.prompt.hash_ids)
            rows.append(row)
    notes = losses.settle(allow_loss) + sorted(set(notes))
    write_json_lines(Path(path), rows)
    return notes


def _prompt_fields(turn: Turn, losses: Losses, notes: list[str]) -> dict:
    prompt = turn.prompt
    if isinstance(prompt, Payload):
        return {"payload": dict(prompt.body)}
    if isinstance(prompt, HashBlocks):
        if prompt.block_size != DEFAULT_BLOCK_SIZE:
            notes.append(
                f"hash ids stand for blocks of {prompt.block_size} tokens: load with block_size={prompt.block_size}"
            )
        return {"input_length": turn.input_tokens}
    if isinstance(prompt, TokenIds):
        losses.add("token ids (prompts become synthetic)")
    elif prompt.prefix_group is not None:
        losses.add("prefix groups (prompts become synthetic: no shared prefix)")
    return {"input_length": turn.input_tokens}
