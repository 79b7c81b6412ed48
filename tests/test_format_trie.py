"""trie agent-trace loader: num_turns + 1 requests, prompt growth, tool latencies, every rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmreplay import Synthetic, WorkloadError, load_workload

FORMAT = "trie"
TRACE = {
    "num_turns": 2,
    "input_prompt_length": 8749,
    "assistant_response_length": [153, 12],
    "tool_call_output_length": [50, 1111],
    "tool_call_latency": [0.685, 0.357],
    "final_assistant_response_length": 1658,
}


def write_jsonl(tmp_path: Path, rows: list, name: str = "traces.jsonl") -> Path:
    """One line per row: dicts as JSON, strings verbatim (for malformed lines)."""
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def trace(**changes) -> dict:
    """TRACE with ``changes`` applied; a value of ``None`` removes the key."""
    return {k: v for k, v in {**TRACE, **changes}.items() if v is not None}


def expected_turns(record: dict) -> list[tuple[int, int, float]]:
    """(input, output, delay) of every request of a trace, straight from the schema."""
    n, responses = record["num_turns"], record["assistant_response_length"]
    out = [(record["input_prompt_length"], responses[0] if n else record["final_assistant_response_length"], 0.0)]
    for k in range(1, n + 1):
        grown = out[-1][0] + responses[k - 1] + record["tool_call_output_length"][k - 1]
        output = responses[k] if k < n else record["final_assistant_response_length"]
        out.append((grown, output, record["tool_call_latency"][k - 1]))
    return out


def test_docstring_example(tmp_path):
    workload = load_workload(write_jsonl(tmp_path, [TRACE]))
    assert (workload.format, workload.timed) == (FORMAT, False)
    (session,) = workload.sessions
    assert (session.id, session.arrival_s) == ("trace1", 0.0)
    assert [(t.input_tokens, t.output_tokens) for t in session.turns] == [
        (8749, 153),
        (8749 + 153 + 50, 12),
        (8749 + 153 + 50 + 12 + 1111, 1658),
    ]
    assert [t.delay_s for t in session.turns] == [0.0, 0.685, 0.357]
    assert [t.prompt for t in session.turns] == [
        Synthetic(),
        Synthetic(extends_previous=True),
        Synthetic(extends_previous=True),
    ]


def test_zero_turns_is_one_request_with_the_final_response(tmp_path):
    record = trace(num_turns=0, assistant_response_length=[], tool_call_output_length=[], tool_call_latency=[])
    (session,) = load_workload(write_jsonl(tmp_path, [record]), format=FORMAT).sessions
    assert [(t.input_tokens, t.output_tokens, t.delay_s) for t in session.turns] == [(8749, 1658, 0.0)]


def test_several_traces_keep_file_order_and_line_names(tmp_path):
    rows = [TRACE, "", trace(input_prompt_length=10, tool_call_latency=[0, 3])]
    workload = load_workload(write_jsonl(tmp_path, rows), format=FORMAT)
    assert [s.id for s in workload.sessions] == ["trace1", "trace3"]
    assert workload.num_requests == 6
    assert [t.delay_s for t in workload.sessions[1].turns] == [0.0, 0.0, 3.0]


# (bad line 2, field, what the message must say); line 1 is always TRACE.
CASES = {
    "short responses": (
        trace(assistant_response_length=[153]),
        "assistant_response_length",
        "must have num_turns = 2 entries, got 1",
    ),
    "long tool outputs": (
        trace(tool_call_output_length=[1, 2, 3]),
        "tool_call_output_length",
        "must have num_turns = 2 entries, got 3",
    ),
    "short latencies": (trace(tool_call_latency=[0.5]), "tool_call_latency", "must have num_turns = 2 entries, got 1"),
    "num_turns larger than lists": (
        trace(num_turns=3),
        "assistant_response_length",
        "must have num_turns = 3 entries, got 2",
    ),
    "num_turns negative": (trace(num_turns=-1), "num_turns", "must be >= 0, got -1"),
    "num_turns string": (trace(num_turns="2"), "num_turns", "must be an integer, got a string '2'"),
    "num_turns float": (trace(num_turns=2.0), "num_turns", "must be an integer, got a float 2.0"),
    "prompt zero": (trace(input_prompt_length=0), "input_prompt_length", "must be >= 1, got 0"),
    "prompt bool": (trace(input_prompt_length=True), "input_prompt_length", "must be an integer, got a boolean"),
    "response zero": (trace(assistant_response_length=[153, 0]), "assistant_response_length[1]", "must be >= 1, got 0"),
    "response float": (
        trace(assistant_response_length=[1.5, 2]),
        "assistant_response_length[0]",
        "must be an integer, got a float",
    ),
    "tool output negative": (
        trace(tool_call_output_length=[50, -1]),
        "tool_call_output_length[1]",
        "must be >= 0, got -1",
    ),
    "latency negative": (
        trace(tool_call_latency=[-0.1, 1]),
        "tool_call_latency[0]",
        "must be a finite number >= 0, got -0.1",
    ),
    "latency string": (
        trace(tool_call_latency=[0.1, "1"]),
        "tool_call_latency[1]",
        "must be a finite number >= 0, got '1'",
    ),
    "latency bool": (trace(tool_call_latency=[True, 1]), "tool_call_latency[0]", "must be a finite number >= 0"),
    "latencies not a list": (
        trace(tool_call_latency=0.5),
        "tool_call_latency",
        "must be a list of numbers, got a float",
    ),
    "final zero": (trace(final_assistant_response_length=0), "final_assistant_response_length", "must be >= 1, got 0"),
    "final missing": (
        trace(final_assistant_response_length=None),
        "final_assistant_response_length",
        "required field missing",
    ),
    "latencies missing": (trace(tool_call_latency=None), "tool_call_latency", "required field missing"),
    "prompt missing": (trace(input_prompt_length=None), "input_prompt_length", "required field missing"),
    "unknown field": (
        trace(arrival_time=0),
        "arrival_time",
        "unknown field; expected one of assistant_response_length",
    ),
    "invalid JSON": ("{num_turns: 2}", None, "invalid JSON"),
    "not an object": ("null", None, "expected a JSON object, got null"),
}


@pytest.mark.parametrize(("bad", "field", "expected"), CASES.values(), ids=CASES.keys())
def test_rule_violation_names_file_line_field(tmp_path, bad, field, expected):
    path = write_jsonl(tmp_path, [TRACE, bad])
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format=FORMAT)
    error = info.value
    assert str(error).startswith(f"{path}:2: " + (f"{field}: " if field else "")), str(error)
    assert (error.line, error.field) == (2, field)
    assert expected in error.reason, error.reason


def test_real_office_slice(trace_data):
    path = trace_data / "trie" / "office_work_8k_slice.jsonl"
    workload = load_workload(path)
    assert (workload.format, workload.timed, len(workload), workload.num_requests) == (FORMAT, False, 8, 193)
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for session, record in zip(workload.sessions, records, strict=True):
        assert len(session.turns) == record["num_turns"] + 1
        assert [(t.input_tokens, t.output_tokens, t.delay_s) for t in session.turns] == expected_turns(record)
        assert 8_000 < session.turns[0].input_tokens < 9_000
    delays = [t.delay_s for s in workload.sessions for t in s.turns[1:]]
    assert 0.2 <= min(delays) and max(delays) <= 5.8
