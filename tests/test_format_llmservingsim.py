"""LLMServingSim JSONL loader: flat requests, agentic sessions and every validation rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmreplay import LLMReplayError, Synthetic, TokenIds, WorkloadError, load_workload

FORMAT = "llmservingsim"
FLAT = {"input_toks": 3, "output_toks": 2, "arrival_time_ns": 0}


def write_jsonl(tmp_path: Path, rows: list, name: str = "workload.jsonl") -> Path:
    """One line per row: dicts as JSON, strings verbatim (for malformed lines)."""
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def sub(input_toks: int = 10, output_toks: int = 5, tool_duration_ns: int = 0, **extra) -> dict:
    return {"input_toks": input_toks, "output_toks": output_toks, "tool_duration_ns": tool_duration_ns, **extra}


def agentic(session_id="s0", arrival_time_ns=0, subs=None, **extra) -> dict:
    return {
        "session_id": session_id,
        "arrival_time_ns": arrival_time_ns,
        "sub_requests": subs if subs is not None else [sub(), sub(20)],
        **extra,
    }


def load_error(path: Path) -> WorkloadError:
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format=FORMAT)
    return info.value


def assert_located(error: WorkloadError, path: Path, line: int, field: str | None, expected: str) -> None:
    """The message reads ``file:line: field: reason`` and the reason says what was expected."""
    prefix = f"{path}:{line}: " + (f"{field}: " if field else "")
    assert str(error).startswith(prefix), str(error)
    assert (error.line, error.field) == (line, field)
    assert expected in error.reason, error.reason


# --- valid input -------------------------------------------------------------------------------


def test_flat_request_with_token_ids(tmp_path):
    path = write_jsonl(
        tmp_path,
        [
            {
                "input_toks": 3,
                "output_toks": 2,
                "arrival_time_ns": 1_500_000_000,
                "input_tok_ids": [7, 8, 9],
                "output_tok_ids": [4, 5],
            }
        ],
    )
    workload = load_workload(path)
    assert workload.format == FORMAT and workload.timed and workload.warnings == ()
    (session,) = workload.sessions
    assert session.id == "line1"
    assert session.arrival_s == pytest.approx(1.5)
    (turn,) = session.turns
    assert (turn.input_tokens, turn.output_tokens, turn.delay_s) == (3, 2, 0.0)
    assert turn.prompt == TokenIds((7, 8, 9))
    assert turn.output_token_ids == (4, 5)


def test_flat_request_without_token_ids_is_synthetic(tmp_path):
    (session,) = load_workload(write_jsonl(tmp_path, [FLAT]), format=FORMAT).sessions
    assert session.turns[0].prompt == Synthetic()
    assert session.turns[0].output_token_ids is None


def test_agentic_session_delays_and_growth(tmp_path):
    subs = [sub(100, 10, 250_000_000), sub(120, 7, 1_000_000_000), sub(50, 3, 0)]
    (session,) = load_workload(write_jsonl(tmp_path, [agentic("agent", 2_000_000_000, subs)]), format=FORMAT).sessions
    assert session.id == "agent" and session.arrival_s == pytest.approx(2.0)
    assert [(t.input_tokens, t.output_tokens) for t in session.turns] == [(100, 10), (120, 7), (50, 3)]
    # tool_duration_ns of sub-request k is the wait before sub-request k+1
    assert [t.delay_s for t in session.turns] == pytest.approx([0.0, 0.25, 1.0])
    # 120 >= 100 + 10: the prompt grows from the previous one; 50 < 120 + 7: it stands alone
    assert [t.prompt for t in session.turns] == [Synthetic(), Synthetic(extends_previous=True), Synthetic()]


def test_integer_session_id_becomes_a_string(tmp_path):
    (session,) = load_workload(write_jsonl(tmp_path, [agentic(7)]), format=FORMAT).sessions
    assert session.id == "7"


def test_mixed_file_sorted_by_arrival_then_line(tmp_path):
    rows = [
        {**FLAT, "arrival_time_ns": 300},
        agentic("a", 100),
        {**FLAT, "arrival_time_ns": 100},
        agentic("b", 0),
    ]
    workload = load_workload(write_jsonl(tmp_path, rows))
    assert [s.id for s in workload.sessions] == ["b", "a", "line3", "line1"]
    assert workload.num_requests == 6


def test_blank_lines_are_skipped_and_lines_keep_their_numbers(tmp_path):
    path = write_jsonl(tmp_path, [FLAT, "", "   ", {**FLAT, "arrival_time_ns": 1}])
    assert [s.id for s in load_workload(path, format=FORMAT).sessions] == ["line1", "line4"]


def test_nonzero_tool_duration_on_last_sub_request_is_a_warning(tmp_path):
    path = write_jsonl(tmp_path, [FLAT, agentic(subs=[sub(), sub(20, tool_duration_ns=2_000_000_000)])])
    workload = load_workload(path, format=FORMAT)
    assert workload.num_requests == 3
    (warning,) = workload.warnings
    assert warning.startswith(f"{path}:2: sub_requests[1].tool_duration_ns: ")
    assert "2 s" in warning and "ignored" in warning
    assert workload.sessions[1].turns[1].delay_s == pytest.approx(0.0)


def test_zero_tool_duration_on_last_sub_request_gives_no_warning(tmp_path):
    assert load_workload(write_jsonl(tmp_path, [agentic()]), format=FORMAT).warnings == ()


def test_agentic_session_named_like_a_flat_line_is_not_a_duplicate(tmp_path):
    """Flat requests are named ``line<N>`` internally; a valid file whose session is called
    ``line2`` must not collide with the flat request on line 2 (the file has unique ids)."""
    path = write_jsonl(tmp_path, [agentic("line2"), FLAT])
    workload = load_workload(path, format=FORMAT)
    assert workload.num_requests == 3
    assert len({s.id for s in workload.sessions}) == 2


# --- rule violations ---------------------------------------------------------------------------


def _without(row: dict, key: str) -> dict:
    return {k: v for k, v in row.items() if k != key}


# (bad line 2, field, what the message must say); line 1 is always a valid flat request.
CASES = {
    "flat missing input_toks": (_without(FLAT, "input_toks"), "input_toks", "required field missing"),
    "flat missing output_toks": (_without(FLAT, "output_toks"), "output_toks", "required field missing"),
    "flat missing arrival": (_without(FLAT, "arrival_time_ns"), "arrival_time_ns", "required field missing"),
    "input_toks string": ({**FLAT, "input_toks": "5"}, "input_toks", "must be an integer, got a string '5'"),
    "input_toks float": ({**FLAT, "input_toks": 5.0}, "input_toks", "must be an integer, got a float 5.0"),
    "input_toks bool": ({**FLAT, "input_toks": True}, "input_toks", "must be an integer, got a boolean True"),
    "input_toks zero": ({**FLAT, "input_toks": 0}, "input_toks", "must be >= 1, got 0"),
    "output_toks zero": ({**FLAT, "output_toks": 0}, "output_toks", "must be >= 1, got 0"),
    "output_toks null": ({**FLAT, "output_toks": None}, "output_toks", "must be an integer, got null"),
    "arrival negative": ({**FLAT, "arrival_time_ns": -1}, "arrival_time_ns", "must be >= 0, got -1"),
    "arrival float": ({**FLAT, "arrival_time_ns": 1.5e9}, "arrival_time_ns", "must be an integer, got a float"),
    "arrival string": ({**FLAT, "arrival_time_ns": "0"}, "arrival_time_ns", "must be an integer, got a string"),
    "input ids too short": (
        {**FLAT, "input_tok_ids": [1, 2]},
        "input_tok_ids",
        "has 2 ids but input_toks is 3; they must be equal",
    ),
    "output ids too long": (
        {**FLAT, "output_tok_ids": [1, 2, 3]},
        "output_tok_ids",
        "has 3 ids but output_toks is 2; they must be equal",
    ),
    "input id string": ({**FLAT, "input_tok_ids": [1, "2", 3]}, "input_tok_ids[1]", "must be an integer, got a string"),
    "input id negative": ({**FLAT, "input_tok_ids": [1, 2, -3]}, "input_tok_ids[2]", "must be >= 0, got -3"),
    "input ids not a list": ({**FLAT, "input_tok_ids": "1 2 3"}, "input_tok_ids", "must be a list of integers"),
    "flat unknown field": (
        {**FLAT, "input_tokens": 3},
        "input_tokens",
        "unknown field; expected one of arrival_time_ns",
    ),
    "flat tool_duration": ({**FLAT, "tool_duration_ns": 0}, "tool_duration_ns", "unknown field"),
    "no sub-requests": (agentic(subs=[]), "sub_requests", "must have at least 1 entry, got 0"),
    "sub_requests not a list": (agentic(subs={"0": sub()}), "sub_requests", "must be a list, got an object"),
    "sub-request not an object": (agentic(subs=[sub(), 5]), "sub_requests[1]", "expected an object, got an integer"),
    "negative tool duration": (
        agentic(subs=[sub(), sub(tool_duration_ns=-5)]),
        "sub_requests[1].tool_duration_ns",
        "must be >= 0, got -5",
    ),
    "tool duration float": (
        agentic(subs=[sub(tool_duration_ns=1.0), sub()]),
        "sub_requests[0].tool_duration_ns",
        "must be an integer, got a float",
    ),
    "sub input_toks string": (
        agentic(subs=[sub(input_toks="5")]),
        "sub_requests[0].input_toks",
        "must be an integer, got a string '5'",
    ),
    "sub output_toks bool": (
        agentic(subs=[sub(), sub(output_toks=False)]),
        "sub_requests[1].output_toks",
        "must be an integer, got a boolean",
    ),
    "sub ids mismatch": (
        agentic(subs=[sub(), sub(2, input_tok_ids=[1])]),
        "sub_requests[1].input_tok_ids",
        "has 1 ids but input_toks is 2",
    ),
    "sub unknown field": (agentic(subs=[sub(arrival_time_ns=0)]), "sub_requests[0].arrival_time_ns", "unknown field"),
    "session unknown field": (
        agentic(input_toks=3),
        "input_toks",
        "unknown field; expected one of arrival_time_ns, session_id, sub_requests",
    ),
    "session id empty": (agentic(""), "session_id", "must be a non-empty string or an integer"),
    "session id list": (agentic(["s"]), "session_id", "must be a non-empty string or an integer, got a list"),
    "session arrival missing": (_without(agentic(), "arrival_time_ns"), "arrival_time_ns", "required field missing"),
    "session arrival negative": (agentic(arrival_time_ns=-10), "arrival_time_ns", "must be >= 0, got -10"),
    "invalid JSON": ('{"input_toks": 3,', None, "invalid JSON"),
    "not an object": ("[3, 2, 0]", None, "expected a JSON object, got a list"),
    "a bare number": ("42", None, "expected a JSON object, got an integer"),
}


@pytest.mark.parametrize(("bad", "field", "expected"), CASES.values(), ids=CASES.keys())
def test_rule_violation_names_file_line_field(tmp_path, bad, field, expected):
    path = write_jsonl(tmp_path, [FLAT, bad])
    assert_located(load_error(path), path, 2, field, expected)


def test_duplicate_session_id_names_both_lines(tmp_path):
    path = write_jsonl(tmp_path, [agentic("s0"), FLAT, agentic("s0", 5)])
    assert_located(load_error(path), path, 3, "session_id", "duplicate session id 's0' (first on line 1)")


def test_workload_error_is_an_llmreplay_error(tmp_path):
    assert isinstance(load_error(write_jsonl(tmp_path, [{**FLAT, "input_toks": -1}])), LLMReplayError)


# --- the real traces ---------------------------------------------------------------------------


def test_sharegpt_trace_has_matching_token_ids(trace_data):
    workload = load_workload(trace_data / "llmservingsim" / "sharegpt-llama-3.1-8b-300-sps10.jsonl.gz")
    assert (workload.format, len(workload), workload.num_requests) == (FORMAT, 300, 300)
    turns = [turn for _, _, turn in workload.turns()]
    assert all(isinstance(t.prompt, TokenIds) and len(t.prompt.ids) == t.input_tokens for t in turns)
    assert all(len(t.output_token_ids) == t.output_tokens for t in turns)
    assert sum(t.input_tokens for t in turns) / 300 == pytest.approx(858, abs=1)
    assert sum(t.output_tokens for t in turns) / 300 == pytest.approx(653, abs=1)
    arrivals = [s.arrival_s for s in workload.sessions]
    assert arrivals == sorted(arrivals)
    assert 300 / (arrivals[-1] - arrivals[0]) == pytest.approx(10, rel=0.05)  # 10 req/s


def test_mixed_trace_has_no_token_ids(trace_data):
    workload = load_workload(trace_data / "llmservingsim" / "workload_me2_01_mixed.jsonl.gz")
    assert workload.num_requests == 608
    assert all(isinstance(turn.prompt, Synthetic) for _, _, turn in workload.turns())
    assert workload.sessions[-1].arrival_s - workload.sessions[0].arrival_s == pytest.approx(61, abs=1)


def test_a_session_id_and_a_tool_duration_may_be_left_out_as_llmservingsim_reads_them(tmp_path):
    # its router reads row.get('session_id', ...) and .get('tool_duration_ns', 0): files it runs
    # were refused ("required field missing")
    unnamed = _without(agentic(subs=[_without(sub(), "tool_duration_ns"), sub()]), "session_id")
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(unnamed) + "\n" + json.dumps({**unnamed, "arrival_time_ns": 9}) + "\n")
    first, second = load_workload(path).sessions
    assert (first.id, second.id) == ("line1", "line2")  # named by their lines, as flat lines are
    assert [turn.delay_s for turn in first.turns] == [0.0, 0.0]
