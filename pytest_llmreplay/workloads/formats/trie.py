"""trie agentic traces (schema v1): one agent trace a line.

    {"num_turns": 2, "input_prompt_length": 8749, "assistant_response_length": [153, 12],
     "tool_call_output_length": [50, 1111], "tool_call_latency": [0.685, 0.357],
     "final_assistant_response_length": 1658}

A trace is ``num_turns + 1`` requests. Request 0 sends the initial prompt and gets
``assistant_response_length[0]`` tokens; request k (1 <= k <= num_turns) starts
``tool_call_latency[k-1]`` seconds after request k-1 completes, and its prompt is request k-1's
prompt + its response + ``tool_call_output_length[k-1]`` tool-output tokens; the last request gets
``final_assistant_response_length`` tokens. Every list has exactly ``num_turns`` entries. trie
traces have no arrival times: the workload is untimed (replayed by concurrency). Requests 0 to
``num_turns - 1`` end in a tool call (``Turn.tool_call``).
"""

from __future__ import annotations

from pathlib import Path

from ..workload import Session, Synthetic, Turn, Workload
from ._fields import Fields, iter_json_lines, try_json
from ._writing import (
    Losses,
    arrival_losses,
    cannot,
    due_losses,
    known_lengths,
    lengths_only,
    reasoning_losses,
    tidy,
    write_json_lines,
)

NAME = "trie"
LIST_FIELDS = ("assistant_response_length", "tool_call_output_length", "tool_call_latency")
KNOWN_FIELDS = frozenset({"num_turns", "input_prompt_length", "final_assistant_response_length", *LIST_FIELDS})


def detect(first_line: str) -> bool:
    """A JSON object line with ``num_turns`` and ``input_prompt_length``."""
    first = try_json(first_line)
    return isinstance(first, dict) and {"num_turns", "input_prompt_length"} <= first.keys()


def load(path: str | Path) -> Workload:
    """Load a trie trace file; session ids are ``trace<line>``."""
    path = Path(path)
    sessions = [_session(Fields(obj, path, line), line) for line, obj in iter_json_lines(path)]
    return Workload(sessions=tuple(sessions), format=NAME, source=str(path), timed=False)


def _session(row: Fields, line: int) -> Session:
    row.reject_unknown(KNOWN_FIELDS)
    num_turns = row.int("num_turns", minimum=0)
    prompt_length = row.int("input_prompt_length", minimum=1)
    responses = row.int_list("assistant_response_length", minimum=1)
    tool_outputs = row.int_list("tool_call_output_length", minimum=0)
    latencies = row.number_list("tool_call_latency")
    final = row.int("final_assistant_response_length", minimum=1)
    for key, values in zip(LIST_FIELDS, (responses, tool_outputs, latencies), strict=True):
        if len(values) != num_turns:
            raise row.error(key, f"must have num_turns = {num_turns} entries, got {len(values)}")

    turns = []
    input_tokens = prompt_length
    for k in range(num_turns + 1):
        calls = k < num_turns  # each assistant response but the final one calls a tool
        if k == 0:
            turns.append(Turn(input_tokens, responses[0] if num_turns else final, Synthetic(), tool_call=calls))
            continue
        input_tokens += responses[k - 1] + tool_outputs[k - 1]
        output_tokens = responses[k] if k < num_turns else final
        turns.append(
            Turn(input_tokens, output_tokens, Synthetic(extends_previous=True), latencies[k - 1], tool_call=calls)
        )
    return Session(f"trace{line}", 0.0, tuple(turns))


def write(workload: Workload, path: str | Path, *, allow_loss: bool = False) -> list[str]:
    """Write one trace a session; every session must be an agent chain: a first turn with its
    own prompt, then turns that extend the previous prompt + response. Arrival times and the
    first prompt's token ids, hash ids or prefix group are losses."""
    losses = Losses(NAME)
    reasoning_losses(workload, losses)
    arrival_losses(workload, losses)
    due_losses(workload, losses)
    rows = [_trace_row(session, losses) for session in workload.sessions]
    notes = losses.settle(allow_loss)
    write_json_lines(Path(path), rows)
    return notes


def _trace_row(session: Session, losses: Losses) -> dict:
    first_input, previous_output = known_lengths(NAME, session, 0)
    first, rest = session.turns[0], session.turns[1:]
    if not lengths_only(first.prompt):
        losses.add("the first prompt's contents (token ids, hash ids or prefix group): only its length is kept")
    responses: list[int] = []
    tools: list[int] = []
    latencies: list[float] = []
    previous_input = first_input
    for index, turn in enumerate(rest, start=1):
        if not (isinstance(turn.prompt, Synthetic) and turn.prompt.extends_previous):
            raise cannot(NAME, session, index, "a turn that does not extend the previous prompt + response")
        if turn.input_tokens is None or turn.output_tokens is None:
            raise cannot(NAME, session, index, "a turn without token counts")
        responses.append(previous_output)
        tools.append(turn.input_tokens - previous_input - previous_output)
        latencies.append(tidy(turn.delay_s, 9))
        previous_input, previous_output = turn.input_tokens, turn.output_tokens
    return {
        "num_turns": len(rest),
        "input_prompt_length": first_input,
        "assistant_response_length": responses,
        "tool_call_output_length": tools,
        "tool_call_latency": latencies,
        "final_assistant_response_length": previous_output,
    }
