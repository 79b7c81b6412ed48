"""Mooncake hash-id trace loader: timing, sessions, hash blocks, literal prompts, every rule."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_llmreplay import HashBlocks, Payload, Synthetic, WorkloadError, load_workload

FORMAT = "mooncake"
ROW = {"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [1, 2]}
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def write_jsonl(tmp_path: Path, rows: list, name: str = "trace.jsonl") -> Path:
    """One line per row: dicts as JSON, strings verbatim (for malformed lines)."""
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def load(tmp_path: Path, rows: list, **options):
    return load_workload(write_jsonl(tmp_path, rows), format=FORMAT, **options)


def row(**changes) -> dict:
    """ROW with ``changes`` applied; a value of ``None`` removes the key."""
    out = {**ROW, **changes}
    return {k: v for k, v in out.items() if v is not None}


def turn_row(session_id: str, **changes) -> dict:
    """A session row without hash ids (synthetic prompt)."""
    return row(session_id=session_id, hash_ids=None, **changes)


def assert_error(tmp_path: Path, rows: list, line: int, field: str | None, expected: str, **options) -> None:
    path = write_jsonl(tmp_path, rows)
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format=FORMAT, **options)
    error = info.value
    prefix = f"{path}:{line}: " + (f"{field}: " if field else "")
    assert str(error).startswith(prefix), str(error)
    assert (error.line, error.field) == (line, field)
    assert expected in error.reason, error.reason


# --- single requests ---------------------------------------------------------------------------


def test_basic_row(tmp_path):
    workload = load(tmp_path, [row(timestamp=1500)])
    assert workload.format == FORMAT and workload.timed
    (session,) = workload.sessions
    assert session.id == "line1" and session.arrival_s == pytest.approx(1.5)
    (turn,) = session.turns
    assert (turn.input_tokens, turn.output_tokens, turn.delay_s) == (600, 20, 0.0)
    assert turn.prompt == HashBlocks((1, 2), 512)


@pytest.mark.parametrize("stamp_key", ["timestamp", "created_time"])
@pytest.mark.parametrize(
    ("input_key", "output_key"), [("input_length", "output_length"), ("input_tokens", "output_tokens")]
)
def test_alternative_field_spellings(tmp_path, stamp_key, input_key, output_key):
    record = {stamp_key: 250, input_key: 600, output_key: 20, "hash_ids": [1, 2]}
    (session,) = load(tmp_path, [record]).sessions
    assert session.arrival_s == pytest.approx(0.25)
    assert (session.turns[0].input_tokens, session.turns[0].output_tokens) == (600, 20)


@pytest.mark.parametrize(("input_length", "ids"), [(1, 1), (512, 1), (513, 2), (1024, 2), (1025, 3)])
def test_hash_ids_cover_the_prompt_last_block_partial(tmp_path, input_length, ids):
    (session,) = load(tmp_path, [row(input_length=input_length, hash_ids=list(range(ids)))]).sessions
    assert session.turns[0].prompt == HashBlocks(tuple(range(ids)), 512)


def test_custom_block_size(tmp_path):
    rows = [row(input_length=33, hash_ids=[4, 5, 6])]
    (session,) = load(tmp_path, rows, block_size=16).sessions
    assert session.turns[0].prompt == HashBlocks((4, 5, 6), 16)
    # the same file at the default block size has too many ids, and the message says so
    assert_error(
        tmp_path,
        rows,
        1,
        "hash_ids",
        "expected ceil(33 / 512) = 1 ids for input length 33 at block size 512, got 3 (pass block_size=",
    )


@pytest.mark.parametrize(
    ("input_length", "ids", "expected"),
    [
        (600, [1], "expected ceil(600 / 512) = 2 ids"),
        (1025, [1, 2], "expected ceil(1025 / 512) = 3 ids"),
        (512, [1, 2], "expected ceil(512 / 512) = 1 ids"),
    ],
)
def test_hash_ids_length_mismatch(tmp_path, input_length, ids, expected):
    assert_error(
        tmp_path,
        [ROW, row(input_length=input_length, hash_ids=ids)],
        2,
        "hash_ids",
        f"{expected} for input length {input_length} at block size 512, got {len(ids)}",
    )


@pytest.mark.parametrize("block_size", [0, -512, "512", 512.0, True])
def test_bad_block_size(tmp_path, block_size):
    path = write_jsonl(tmp_path, [ROW])
    with pytest.raises(WorkloadError, match=r"block_size must be an integer >= 1, got") as info:
        load_workload(path, format=FORMAT, block_size=block_size)
    assert str(path) in str(info.value)


def test_rows_without_hash_ids_are_synthetic(tmp_path):
    (session,) = load(tmp_path, [row(hash_ids=None)]).sessions
    assert session.turns[0].prompt == Synthetic()


def test_rows_without_session_id_are_independent_and_sorted(tmp_path):
    workload = load(tmp_path, [row(timestamp=300), row(timestamp=100), row(timestamp=100)])
    assert [(s.id, s.arrival_s) for s in workload.sessions] == [("line2", 0.1), ("line3", 0.1), ("line1", 0.3)]
    assert all(len(s.turns) == 1 for s in workload.sessions)


def test_timestamp_and_created_time_rows_mix(tmp_path):
    workload = load(tmp_path, [row(timestamp=2000), row(timestamp=None, created_time=1000)])
    assert workload.timed
    assert [(s.id, s.arrival_s) for s in workload.sessions] == [("line2", 1.0), ("line1", 2.0)]


def test_untimed_trace(tmp_path):
    workload = load(tmp_path, [row(timestamp=None), row(timestamp=None)])
    assert not workload.timed
    assert [s.arrival_s for s in workload.sessions] == [0.0, 0.0]


# --- sessions ----------------------------------------------------------------------------------


def test_session_rows_are_turns_in_file_order(tmp_path):
    rows = [
        turn_row("a", timestamp=1000, input_length=100, output_length=10),
        turn_row("b", timestamp=500, input_length=40, output_length=4),
        turn_row("a", delay=250, input_length=130, output_length=5),  # 130 >= 100 + 10: grows
        turn_row("a", delay_ms=1500, input_length=20, output_length=5),  # 20 < 130 + 5: stands alone
    ]
    workload = load(tmp_path, rows)
    assert [s.id for s in workload.sessions] == ["b", "a"]
    a = workload.sessions[1]
    assert a.arrival_s == pytest.approx(1.0)
    assert [t.input_tokens for t in a.turns] == [100, 130, 20]
    assert [t.delay_s for t in a.turns] == pytest.approx([0.0, 0.25, 1.5])
    assert [t.prompt for t in a.turns] == [Synthetic(), Synthetic(extends_previous=True), Synthetic()]


def test_a_later_turns_timestamp_is_when_it_is_due_after_its_sessions_start(tmp_path):
    # AIPerf's fixed schedule sends a later turn at its own timestamp (or at once when the previous
    # turn ends after it); read as a wait after the previous turn's completion, each turn came
    # later by every earlier turn's latency (turn 2 of three 3-second turns 1 s apart: at 8.2 s)
    rows = [
        turn_row("a", timestamp=1000),
        turn_row("a", timestamp=1400),
        turn_row("a", timestamp=1400),
        turn_row("a", timestamp=3000),
    ]
    (session,) = load(tmp_path, rows).sessions
    assert [t.delay_s for t in session.turns] == [0.0] * 4
    assert [t.due_s for t in session.turns] == [None, pytest.approx(0.4), pytest.approx(0.4), pytest.approx(2.0)]


def test_delay_wins_over_timestamps(tmp_path):
    rows = [turn_row("a", timestamp=1000), turn_row("a", timestamp=5000, delay=100), turn_row("a", timestamp=5200)]
    (session,) = load(tmp_path, rows).sessions
    assert [t.delay_s for t in session.turns] == pytest.approx([0.0, 0.1, 0.0])
    assert [t.due_s for t in session.turns] == [None, None, pytest.approx(4.2)]


def test_later_turns_without_timing_follow_at_once(tmp_path):
    (session,) = load(tmp_path, [turn_row("a", timestamp=1000), turn_row("a", timestamp=None)]).sessions
    assert [t.delay_s for t in session.turns] == [0.0, 0.0]


def test_session_turns_with_hash_ids(tmp_path):
    rows = [
        row(session_id=9, hash_ids=[1, 2]),
        row(session_id=9, timestamp=None, input_length=1100, hash_ids=[1, 2, 3]),
    ]
    (session,) = load(tmp_path, rows).sessions
    assert session.id == "9"
    assert [t.prompt for t in session.turns] == [HashBlocks((1, 2), 512), HashBlocks((1, 2, 3), 512)]


def test_a_session_id_written_as_a_number_and_as_a_string_is_refused(tmp_path):
    # 5 and "5" are two ids to AIPerf; made strings here, they were one session mixing two
    # sessions' turns, silently
    rows = [row(session_id=5), row(session_id="5", timestamp=None, input_length=1100)]
    with pytest.raises(WorkloadError) as info:
        load(tmp_path, rows)
    assert str(info.value).endswith(
        ":2: session_id: '5' names the session written 5 on line 1; write every row's id alike (a string)"
    )
    assert len(load(tmp_path, [row(session_id=5), row(session_id=5, timestamp=None)]).sessions) == 1


def test_independent_row_does_not_join_a_session_named_like_it(tmp_path):
    """A row without session_id is its own request; a later session called ``line1`` is another."""
    workload = load(tmp_path, [row(), row(session_id="line1", timestamp=5)])
    assert workload.num_requests == 2
    assert len(workload.sessions) == 2


def test_independent_row_does_not_replace_a_session_named_like_it(tmp_path):
    """Every row of the file must be in the workload: none may be overwritten."""
    workload = load(tmp_path, [row(session_id="line2"), row(timestamp=5)])
    assert workload.num_requests == 2
    assert len(workload.sessions) == 2


# --- literal prompts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "body", "stated_output"),
    [
        ("text_input", "What is ML?", {"messages": [{"role": "user", "content": "What is ML?"}]}, None),
        ("messages", MESSAGES, {"messages": MESSAGES}, None),
        (
            "payload",
            {"messages": MESSAGES, "max_tokens": 9, "model": "m"},
            {"messages": MESSAGES, "max_tokens": 9, "model": "m"},
            9,
        ),
    ],
)
def test_literal_prompts_are_sent_verbatim(tmp_path, key, value, body, stated_output):
    """Without output_length, the output length is the body's max_tokens (None when unstated)."""
    workload = load(tmp_path, [{"timestamp": 0, key: value}, {"timestamp": 10, key: value, "output_length": 7}])
    first, second = (s.turns[0] for s in workload.sessions)
    assert first.prompt == Payload(body) and first.input_tokens is None and first.output_tokens == stated_output
    assert second.output_tokens == 7


@pytest.mark.parametrize(("key", "value"), [("text_input", "What is ML?"), ("messages", MESSAGES)])
def test_a_literal_prompts_output_length_is_the_requests_output_limit(tmp_path, key, value):
    """A text_input or messages row's output_length was not sent: the server generated to the
    context's end (131,046 tokens a request on the simulator, a replay that never ended against
    its server; a new user's trial). The body gets it as max_tokens, a payload's own limit wins."""
    from pytest_llmreplay import PromptFactory, load_tokenizer
    from pytest_llmreplay.workloads.prompts import Conversation

    workload = load(
        tmp_path,
        [
            {"timestamp": 0, key: value, "output_length": 7},
            {"timestamp": 1, "payload": {"messages": MESSAGES, "max_completion_tokens": 9}, "output_length": 5},
        ],
    )
    prompts = PromptFactory(load_tokenizer(None))
    bodies = [Conversation(prompts, session, "chat", "text").request(0)[1] for session in workload.sessions]
    assert bodies[0]["max_tokens"] == 7
    assert "max_tokens" not in bodies[1] and bodies[1]["max_completion_tokens"] == 9  # the payload's own
    responses = Conversation(prompts, workload.sessions[0], "responses", "text").request(0)
    assert responses[0] == "chat" and responses[1]["max_tokens"] == 7  # a chat body stays chat


# --- rule violations ---------------------------------------------------------------------------

# (bad line 2, field, what the message must say); line 1 is always ROW.
CASES = {
    "timestamp and created_time": (row(created_time=5), "created_time", "give only one of timestamp or created_time"),
    "input_length and input_tokens": (
        row(input_tokens=600),
        "input_tokens",
        "give only one of input_length or input_tokens",
    ),
    "output_length and output_tokens": (
        row(output_tokens=20),
        "output_tokens",
        "give only one of output_length or output_tokens",
    ),
    "input_length and text_input": (row(hash_ids=None, text_input="x"), "text_input", "give only one of input_length"),
    "no input": (
        row(input_length=None, hash_ids=None),
        "input_length",
        "required field missing (or input_tokens, text_input, messages, payload)",
    ),
    "no output": (row(output_length=None), "output_length", "required field missing (or output_tokens)"),
    "input zero": (row(input_length=0, hash_ids=[]), "input_length", "must be >= 1, got 0"),
    "input string": (row(input_length="600"), "input_length", "must be an integer, got a string '600'"),
    "input float": (row(input_length=600.0), "input_length", "must be an integer, got a float 600.0"),
    "input bool": (
        row(input_tokens=True, input_length=None, hash_ids=[1]),
        "input_tokens",
        "must be an integer, got a boolean",
    ),
    "output zero": (row(output_length=0), "output_length", "must be >= 1, got 0"),
    "output float": (row(output_tokens=2.5, output_length=None), "output_tokens", "must be an integer, got a float"),
    "timestamp negative": (row(timestamp=-1), "timestamp", "must be a finite number >= 0, got -1"),
    "timestamp string": (row(timestamp="0"), "timestamp", "must be a number, got a string '0'"),
    "created_time bool": (row(timestamp=None, created_time=True), "created_time", "must be a number, got a boolean"),
    "hash id negative": (row(hash_ids=[1, -2]), "hash_ids[1]", "must be >= 0, got -2"),
    "hash id string": (row(hash_ids=["a", 2]), "hash_ids[0]", "must be an integer, got a string"),
    "hash id float": (row(hash_ids=[1, 2.0]), "hash_ids[1]", "must be an integer, got a float"),
    "hash_ids not a list": (row(hash_ids=12), "hash_ids", "must be a list of integers, got an integer"),
    "delay on first turn": (row(session_id="a", delay=5), "delay", "a delay is not allowed on a session's first turn"),
    "delay_ms on first turn": (
        row(session_id="a", delay_ms=5),
        "delay_ms",
        "a delay is not allowed on a session's first turn",
    ),
    "delay without a session": (row(delay=5), "delay", "a delay is not allowed on a session's first turn"),
    "missing timestamp": (
        row(timestamp=None),
        "timestamp",
        "either every session-starting row has a timestamp or none has",
    ),
    "session id empty": (row(session_id=""), "session_id", "must be a non-empty string or an integer"),
    "session id bool": (row(session_id=False), "session_id", "must be a non-empty string or an integer"),
    "unknown field": (row(input_len=5), "input_len", "unknown field; expected one of created_time, delay, delay_ms"),
    "text_input empty": ({"timestamp": 0, "text_input": ""}, "text_input", "must be a non-empty string"),
    "text_input list": ({"timestamp": 0, "text_input": ["hi"]}, "text_input", "must be a non-empty string, got a list"),
    "messages empty": ({"timestamp": 0, "messages": []}, "messages", "must have at least 1 entry, got 0"),
    "message without role": (
        {"timestamp": 0, "messages": [{"content": "x"}]},
        "messages[0].role",
        "required: a string",
    ),
    "message not an object": (
        {"timestamp": 0, "messages": MESSAGES + ["x"]},
        "messages[2]",
        "must be a message object",
    ),
    "payload empty": ({"timestamp": 0, "payload": {}}, "payload", "must be a non-empty object (a request body)"),
    "payload string": (
        {"timestamp": 0, "payload": "hi"},
        "payload",
        "must be a non-empty object (a request body), got a string",
    ),
    "invalid JSON": ('{"timestamp": 0, "input_length": }', None, "invalid JSON"),
    "not an object": ('"hello"', None, "expected a JSON object, got a string"),
}


@pytest.mark.parametrize(("bad", "field", "expected"), CASES.values(), ids=CASES.keys())
def test_rule_violation_names_file_line_field(tmp_path, bad, field, expected):
    assert_error(tmp_path, [ROW, bad], 2, field, expected)


@pytest.mark.parametrize(
    ("key", "value"), [("text_input", "hi"), ("messages", MESSAGES), ("payload", {"messages": MESSAGES})]
)
def test_hash_ids_with_a_literal_prompt(tmp_path, key, value):
    assert_error(
        tmp_path,
        [ROW, {"timestamp": 0, key: value, "hash_ids": [1]}],
        2,
        "hash_ids",
        f"only allowed with input_length, not with {key}",
    )


def test_timestamp_on_untimed_first_row_then_missing(tmp_path):
    assert_error(
        tmp_path,
        [row(timestamp=None), row(timestamp=7)],
        2,
        "timestamp",
        "either every session-starting row has a timestamp or none has",
    )


def test_decreasing_timestamps_in_a_session(tmp_path):
    rows = [turn_row("a", timestamp=1000), turn_row("b", timestamp=0), turn_row("a", timestamp=500)]
    assert_error(tmp_path, rows, 3, "timestamp", "timestamps must not decrease within session 'a': 500 < 1000")


def test_negative_delay_on_a_later_turn(tmp_path):
    assert_error(
        tmp_path,
        [turn_row("a"), turn_row("a", timestamp=None, delay=-1)],
        2,
        "delay",
        "must be a finite number >= 0, got -1",
    )


def test_delay_and_delay_ms_together(tmp_path):
    assert_error(
        tmp_path,
        [turn_row("a"), turn_row("a", timestamp=None, delay=1, delay_ms=1)],
        2,
        "delay_ms",
        "give only one of delay or delay_ms",
    )


# --- the real traces ---------------------------------------------------------------------------


def test_conversation_trace(trace_data):
    workload = load_workload(trace_data / "mooncake" / "conversation_trace.jsonl.gz")
    assert (workload.format, workload.timed, workload.num_requests) == (FORMAT, True, 12_031)
    turns = [turn for _, _, turn in workload.turns()]
    assert all(t.prompt.block_size == 512 and len(t.prompt.hash_ids) == math.ceil(t.input_tokens / 512) for t in turns)
    arrivals = [s.arrival_s for s in workload.sessions]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert arrivals[-1] == pytest.approx(3537, abs=1)


def test_real_trace_at_a_wrong_block_size_fails_on_line_1(trace_data):
    path = trace_data / "mooncake" / "mooncake_tiny_arxiv_head16.jsonl"
    assert load_workload(path).num_requests == 16
    with pytest.raises(WorkloadError) as info:
        load_workload(path, block_size=256)
    assert str(info.value).startswith(f"{path}:1: hash_ids: expected ceil(6755 / 256) = 27 ids")


def test_literal_payload_takes_its_output_length_from_the_body(tmp_path):
    path = write_jsonl(
        tmp_path,
        [
            {"payload": {"messages": [{"role": "user", "content": "x"}], "max_tokens": 9}},
            {"text_input": "hi", "output_length": 4},
            {"messages": [{"role": "user", "content": "y"}]},
        ],
    )
    assert [t.output_tokens for _, _, t in load_workload(path).turns()] == [9, 4, None]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"payload": {"prompt": "x", "max_tokens": "9"}}, "payload.max_tokens: must be an integer, got a string '9'"),
        # checked with an output_length too: the body is sent as is, and the server would refuse it
        (
            {"payload": {"prompt": "x", "max_tokens": "9"}, "output_length": 9},
            "payload.max_tokens: must be an integer, got a string '9'",
        ),
        (
            {"payload": {"prompt": "x", "stream": "false"}, "output_length": 9},
            "payload.stream: must be true or false (a boolean), got a string 'false'",
        ),
        # checked as the text_input and messages forms are (it loaded, and every request was a 400)
        ({"payload": {"messages": "hi"}, "output_length": 9}, "payload.messages: must be a list, got a string"),
    ],
)
def test_literal_payload_with_a_bad_field_the_replay_reads_names_it(tmp_path, row, message):
    path = write_jsonl(tmp_path, [row])
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert str(info.value) == f"{path}:1: {message}"


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ('{"timestamp": 5, "input_length": 100', "Expecting ',' delimiter (column 37, the end of the line)"),
        ('{"timestamp": 5, "input_length": }', "Expecting value (column 34)"),
    ],
)
def test_invalid_json_names_the_column_on_the_line(tmp_path, bad, where):
    # a line cut short: json reads on into its newline and says column 1 of a line that is not there
    assert_error(tmp_path, [ROW, bad], 2, None, f"invalid JSON: {where}")
