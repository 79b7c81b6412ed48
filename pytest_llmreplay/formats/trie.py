"""trie agentic traces (schema v1): one agent trace a line.

    {"num_turns": 2, "input_prompt_length": 8749, "assistant_response_length": [153, 12],
     "tool_call_output_length": [50, 1111], "tool_call_latency": [0.685, 0.357],
     "final_assistant_response_length": 1658}

A trace is ``num_turns + 1`` requests. Request 0 sends the initial prompt and gets
``assistant_response_length[0]`` tokens; request k (1 <= k <= num_turns) starts
``tool_call_latency[k-1]`` seconds after request k-1 completes, and its prompt is request k-1's
prompt + its response + ``tool_call_output_length[k-1]`` tool-output tokens; the last request gets
``final_assistant_response_length`` tokens. Every list has exactly ``num_turns`` entries. trie
traces have no arrival times: the workload is untimed (replayed by concurrency).
"""

from __future__ import annotations

from pathlib import Path

from ..workload import Session, Synthetic, Turn, Workload
from ._fields import Fields, iter_json_lines, try_json

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
    for key, values in zip(LIST_FIELDS, (responses, tool_outputs, latencies)):
        if len(values) != num_turns:
            raise row.error(key, f"must have num_turns = {num_turns} entries, got {len(values)}")

    turns = []
    input_tokens = prompt_length
    for k in range(num_turns + 1):
        if k == 0:
            turns.append(Turn(input_tokens, responses[0] if num_turns else final, Synthetic()))
            continue
        input_tokens += responses[k - 1] + tool_outputs[k - 1]
        output_tokens = responses[k] if k < num_turns else final
        turns.append(Turn(input_tokens, output_tokens, Synthetic(extends_previous=True), latencies[k - 1]))
    return Session(f"trace{line}", 0.0, tuple(turns))
