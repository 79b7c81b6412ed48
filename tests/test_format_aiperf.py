"""AIPerf loaders: ``inputs.json`` (aiperf-inputs) and raw payload JSONL, file and directory
mode (aiperf-payloads). Bodies are sent verbatim; lengths come only from max_tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmreplay import Payload, WorkloadError, load_workload

USER = [{"role": "user", "content": "What is ML?"}]
BODY = {"messages": USER, "model": "m", "max_tokens": 100}
READ_AS_PAYLOADS = (
    " (a directory is read as aiperf-payloads files, one session each: name a file to read another format)"
)


def write_jsonl(path: Path, rows: list) -> Path:
    """One line per row: dicts as JSON, strings verbatim (for malformed lines)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def inputs_text(entries: list) -> str:
    """An inputs.json document with ``data[i]`` on line ``3 + i``."""
    body = ",\n".join("    " + json.dumps(entry) for entry in entries)
    return '{\n  "data": [\n' + body + "\n  ]\n}\n"


def entry(session_id="a", payloads=None, **extra) -> dict:
    return {"session_id": session_id, "payloads": payloads if payloads is not None else [BODY], **extra}


def assert_error(path: Path, line: int | None, field: str | None, expected: str, *, format: str) -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format=format)
    error = info.value
    where = f"{path}:{line}" if line is not None else str(path)
    where += f":{error.column}" if error.column is not None else ""  # a JSON syntax error's, where the parser stopped
    assert str(error).startswith(where + ": " + (f"{field}: " if field else "")), str(error)
    assert (error.line, error.field) == (line, field)
    assert expected in error.reason, error.reason


# --- inputs.json -------------------------------------------------------------------------------


def test_inputs_json_pretty_printed(tmp_path):
    second = {"messages": USER + [{"role": "assistant", "content": "x"}], "max_completion_tokens": 8, "stream": True}
    document = {"data": [entry("a5cd", [BODY, second]), entry("b", [{"messages": USER}])]}
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    workload = load_workload(path)
    assert (workload.format, workload.timed) == ("aiperf-inputs", False)
    assert [s.id for s in workload.sessions] == ["a5cd", "b"]
    a, b = workload.sessions
    assert [t.prompt for t in a.turns] == [Payload(BODY), Payload(second)]
    assert [(t.input_tokens, t.output_tokens) for t in a.turns] == [(None, 100), (None, 8)]
    assert b.turns[0].output_tokens is None
    assert all(s.arrival_s == 0.0 and t.delay_s == 0.0 for s in workload for t in s.turns)


def test_inputs_json_on_one_line(tmp_path):
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps({"data": [entry()]}), encoding="utf-8")
    assert load_workload(path).format == "aiperf-inputs"


def test_inputs_json_error_line_is_the_entry_line_in_indented_json(tmp_path):
    document = {"data": [entry("a", [BODY, BODY]), entry("b", [BODY, {}])]}
    text = json.dumps(document, indent=2)
    path = tmp_path / "inputs.json"
    path.write_text(text, encoding="utf-8")
    lines = text.splitlines()
    entry_line = lines.index("    {", lines.index('      "session_id": "a",')) + 1  # the "{" opening data[1]
    assert_error(path, entry_line, "data[1].payloads[1]", "must be a non-empty request body", format="aiperf-inputs")


# (data entries, line, field, what the message must say); a bad data[1] stands on line 4.
INPUTS_CASES = {
    "entry not an object": ([entry(), "b"], 4, "data[1]", "expected an object, got a string"),
    "session id missing": ([entry(), {"payloads": [BODY]}], 4, "data[1].session_id", "required field missing"),
    "session id empty": ([entry(), entry("")], 4, "data[1].session_id", "must be a non-empty string"),
    "session id not a string": ([entry(), entry(5)], 4, "data[1].session_id", "string"),
    "duplicate session id": (
        [entry("x"), entry("x")],
        4,
        "data[1].session_id",
        "duplicate session id 'x' (first in data[0])",
    ),
    "payloads missing": ([entry(), {"session_id": "b"}], 4, "data[1].payloads", "required field missing"),
    "payloads empty": ([entry(), entry("b", [])], 4, "data[1].payloads", "must have at least 1 entry, got 0"),
    "payloads not a list": ([entry(), entry("b", BODY)], 4, "data[1].payloads", "must be a list, got an object"),
    "payload not an object": (
        [entry(), entry("b", [BODY, "hi"])],
        4,
        "data[1].payloads[1]",
        "expected an object, got a string",
    ),
    "payload empty": ([entry(), entry("b", [{}])], 4, "data[1].payloads[0]", "must be a non-empty request body"),
    "max_tokens string": (
        [entry(), entry("b", [{**BODY, "max_tokens": "64"}])],
        4,
        "data[1].payloads[0].max_tokens",
        "must be an integer, got a string '64'",
    ),
    "max_tokens zero": (
        [entry(), entry("b", [{**BODY, "max_tokens": 0}])],
        4,
        "data[1].payloads[0].max_tokens",
        "must be >= 1, got 0",
    ),
    "both max fields": (
        [entry(), entry("b", [{**BODY, "max_completion_tokens": 5}])],
        4,
        "data[1].payloads[0].max_tokens",
        "give only one of max_completion_tokens or max_tokens",
    ),
    # a verbatim body's stream fields as the server checks them: else every request gets HTTP 400
    "stream a string": (
        [entry(), entry("b", [BODY, {**BODY, "stream": "false"}])],
        4,
        "data[1].payloads[1].stream",
        "must be true or false (a boolean), got a string 'false'",
    ),
    "unknown entry field": (
        [entry(), entry("b", delay=5)],
        4,
        "data[1].delay",
        "unknown field; expected one of payloads, session_id",
    ),
    "data empty": ([], 1, "data", "must have at least 1 entry, got 0"),
}


@pytest.mark.parametrize(("entries", "line", "field", "expected"), INPUTS_CASES.values(), ids=INPUTS_CASES.keys())
def test_inputs_json_rule_violation(tmp_path, entries, line, field, expected):
    path = tmp_path / "inputs.json"
    path.write_text(inputs_text(entries), encoding="utf-8")
    assert_error(path, line, field, expected, format="aiperf-inputs")


@pytest.mark.parametrize(
    ("text", "line", "field", "expected"),
    [
        (
            '{\n  "data": [\n    {"session_id": "a", "payloads": [{"messages": []},]}\n  ]\n}\n',
            3,
            None,
            "not valid JSON",
        ),
        ('[{"session_id": "a"}]', 1, None, 'expected an object {"data": [...]}, got a list'),
        ('{"data": [], "extra": 1}', 1, "extra", "unknown field; expected one of data"),
        ('{"sessions": []}', 1, "sessions", "unknown field"),
        ("{}", 1, "data", "required field missing"),
        ('{"data": {"session_id": "a"}}', 1, "data", "must be a list, got an object"),
    ],
)
def test_inputs_json_document_errors(tmp_path, text, line, field, expected):
    path = tmp_path / "inputs.json"
    path.write_text(text, encoding="utf-8")
    assert_error(path, line, field, expected, format="aiperf-inputs")


# --- raw payloads: one file --------------------------------------------------------------------


def test_payload_file_every_line_is_a_session(tmp_path):
    other = {"messages": USER, "max_completion_tokens": 7, "temperature": 0, "extra_body": {"x": 1}}
    path = write_jsonl(tmp_path / "payloads.jsonl", [BODY, "", other, {"messages": USER}])
    workload = load_workload(path)
    assert (workload.format, workload.timed) == ("aiperf-payloads", False)
    assert [s.id for s in workload.sessions] == ["line1", "line3", "line4"]
    assert [s.turns[0].prompt for s in workload.sessions] == [
        Payload(BODY),
        Payload(other),
        Payload({"messages": USER}),
    ]
    assert [s.turns[0].output_tokens for s in workload.sessions] == [100, 7, None]
    assert all(s.turns[0].input_tokens is None for s in workload.sessions)


# (bad line 2, field, what the message must say); line 1 is always BODY.
PAYLOAD_CASES = {
    "messages missing": ({"model": "m"}, "messages", "required field missing"),
    "messages empty": ({"messages": []}, "messages", "must have at least 1 entry, got 0"),
    "messages not a list": ({"messages": "hi"}, "messages", "must be a list, got a string"),
    "message not an object": ({"messages": USER + [3]}, "messages[1]", "must be a message object, got an integer"),
    "role missing": ({"messages": [{"content": "hi"}]}, "messages[0].role", "required: a string such as 'user'"),
    "role not a string": ({"messages": [{"role": 1, "content": "hi"}]}, "messages[0].role", "required: a string"),
    "max_tokens float": ({**BODY, "max_tokens": 1.5}, "max_tokens", "must be an integer, got a float 1.5"),
    "max_completion_tokens zero": (
        {"messages": USER, "max_completion_tokens": 0},
        "max_completion_tokens",
        "must be >= 1, got 0",
    ),
    "stream a string": (
        {**BODY, "stream": "false"},
        "stream",
        "must be true or false (a boolean), got a string 'false'",
    ),
    "stream a number": ({**BODY, "stream": 1}, "stream", "must be true or false (a boolean), got an integer 1"),
    "stream_options not an object": (
        {**BODY, "stream": True, "stream_options": "usage"},
        "stream_options",
        "expected an object, got a string",
    ),
    "include_usage a string": (
        {**BODY, "stream": True, "stream_options": {"include_usage": "true"}},
        "stream_options.include_usage",
        "must be true or false (a boolean), got a string 'true'",
    ),
    "invalid JSON": ('{"messages": [', None, "invalid JSON"),
    "not an object": ("[1]", None, "expected a JSON object, got a list"),
}


@pytest.mark.parametrize(("bad", "field", "expected"), PAYLOAD_CASES.values(), ids=PAYLOAD_CASES.keys())
def test_payload_file_rule_violation(tmp_path, bad, field, expected):
    path = write_jsonl(tmp_path / "payloads.jsonl", [BODY, bad])
    assert_error(path, 2, field, expected, format="aiperf-payloads")


# --- raw payloads: a directory -----------------------------------------------------------------


def test_payload_directory_one_session_per_file(tmp_path):
    folder = tmp_path / "payloads"
    folder.mkdir()
    turn2 = {
        "messages": USER + [{"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}],
        "max_tokens": 5,
    }
    write_jsonl(folder / "conv_b.jsonl", [BODY, "", turn2])
    write_jsonl(folder / "conv_a.jsonl", [{"messages": USER}])
    (folder / "empty.jsonl").write_text("\n", encoding="utf-8")
    (folder / "notes.txt").write_text("not a payload", encoding="utf-8")
    (folder / "sub.jsonl").mkdir()  # a folder named like a payload file is not one
    workload = load_workload(folder)
    assert (workload.format, workload.timed) == ("aiperf-payloads", False)
    assert [s.id for s in workload.sessions] == ["conv_a", "conv_b"]
    assert [t.prompt for t in workload.sessions[1].turns] == [Payload(BODY), Payload(turn2)]
    assert [t.output_tokens for t in workload.sessions[1].turns] == [100, 5]


def test_payload_directory_error_names_the_file_and_line(tmp_path):
    folder = tmp_path / "payloads"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [BODY])
    bad = write_jsonl(folder / "b.jsonl", [BODY, {"messages": [{"content": "no role"}]}])
    with pytest.raises(WorkloadError) as info:
        load_workload(folder)
    assert str(info.value).startswith(f"{bad}:2: messages[0].role: required")


@pytest.mark.parametrize("files", [{}, {"readme.md": "x"}, {"a.jsonl": "", "b.jsonl": "\n \n"}])
def test_payload_directory_without_payloads(tmp_path, files):
    folder = tmp_path / "payloads"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(WorkloadError) as info:
        load_workload(folder)
    assert str(info.value) == f"{folder}: no non-empty *.jsonl files in this directory" + READ_AS_PAYLOADS
    with pytest.raises(WorkloadError) as info:
        load_workload(folder, format="aiperf-payloads")  # named: the reader knows what it asked for
    assert str(info.value) == f"{folder}: no non-empty *.jsonl files in this directory"


def test_a_folder_of_other_traces_says_it_was_read_as_payload_files(tmp_path):
    """validate traces/ (Mooncake files) answered 'traces/a.jsonl:1: messages: required field
    missing', which reads as a broken Mooncake file."""
    folder = tmp_path / "traces"
    folder.mkdir()
    trace = write_jsonl(folder / "a.jsonl", [{"timestamp": 0, "input_length": 10, "output_length": 5}])
    with pytest.raises(WorkloadError) as info:
        load_workload(folder)
    assert str(info.value) == f"{trace}:1: messages: required field missing" + READ_AS_PAYLOADS
    assert (info.value.path, info.value.line, info.value.field) == (str(trace), 1, "messages")
