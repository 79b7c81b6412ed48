"""load_workload: format detection, explicit format=, options, unusable paths, and every real
trace in tests/data."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from pytest_llmreplay import FORMATS, LLMReplayError, WorkloadError, detect_format, load_workload

MOONCAKE = {"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [1, 2]}
TRIE = {
    "num_turns": 0,
    "input_prompt_length": 10,
    "assistant_response_length": [],
    "tool_call_output_length": [],
    "tool_call_latency": [],
    "final_assistant_response_length": 5,
}
MESSAGES = [{"role": "user", "content": "hi"}]
AIPERF_INPUTS = {"data": [{"session_id": "a", "payloads": [{"messages": MESSAGES}]}]}
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"
FILE_FORMATS = [name for name in FORMATS if name != "aiperf-payloads"]

# file text -> the format it is detected as
DETECTED = {
    "llmservingsim flat": (json.dumps({"input_toks": 3, "output_toks": 2, "arrival_time_ns": 0}), "llmservingsim"),
    "llmservingsim agentic": (
        json.dumps(
            {
                "session_id": "s",
                "arrival_time_ns": 0,
                "sub_requests": [{"input_toks": 3, "output_toks": 2, "tool_duration_ns": 0}],
            }
        ),
        "llmservingsim",
    ),
    "mooncake hash ids": (json.dumps(MOONCAKE), "mooncake"),
    "mooncake created_time": (json.dumps({"created_time": 5, "input_length": 9, "output_length": 2}), "mooncake"),
    "mooncake input_tokens spelling": (
        json.dumps({"timestamp": 0, "input_tokens": 10, "output_tokens": 5}),
        "mooncake",
    ),
    "mooncake literal text": (json.dumps({"text_input": "What is ML?", "output_length": 5}), "mooncake"),
    # a session's chat row: read as raw payloads, its session_id and delay went to the server in
    # every body and its turns were sessions of their own, sent at once
    "mooncake messages row of a session": (json.dumps({"session_id": "s1", "messages": MESSAGES}), "mooncake"),
    "trie": (json.dumps(TRIE), "trie"),
    "aiperf payload": (json.dumps({"messages": MESSAGES, "max_tokens": 4}), "aiperf-payloads"),
    "aiperf inputs pretty": (json.dumps(AIPERF_INPUTS, indent=2), "aiperf-inputs"),
    "aiperf inputs one line": (json.dumps(AIPERF_INPUTS), "aiperf-inputs"),
    "azure": (AZURE, "azure"),
    "synthetic yaml": ("synthetic:\n  sessions: 3\n", "synthetic"),
    "synthetic yaml after comments": (
        "# a small chat workload\n\n# (seeded)\nsynthetic:\n  sessions: 3\n",
        "synthetic",
    ),
    "synthetic json one line": (json.dumps({"synthetic": {"sessions": 3}}), "synthetic"),
    "synthetic json pretty": (json.dumps({"synthetic": {"sessions": 3}}, indent=2), "synthetic"),
    "leading blank lines": ("\n  \n" + json.dumps(MOONCAKE), "mooncake"),
}


def write(tmp_path: Path, text: str | bytes, name: str = "workload.jsonl") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text if text.endswith("\n") or not text else text + "\n", encoding="utf-8")
    return path


def error_of(call, *args, **kwargs) -> WorkloadError:
    with pytest.raises(WorkloadError) as info:
        call(*args, **kwargs)
    return info.value


@pytest.mark.parametrize(("text", "expected"), DETECTED.values(), ids=DETECTED.keys())
def test_detected_and_loaded(tmp_path, text, expected):
    path = write(tmp_path, text)
    assert detect_format(path) == expected
    workload = load_workload(path)
    assert workload.format == expected and workload.num_requests >= 1


def test_a_directory_is_aiperf_payloads(tmp_path):
    (tmp_path / "s1.jsonl").write_text(json.dumps({"messages": MESSAGES}) + "\n", encoding="utf-8")
    assert detect_format(tmp_path) == "aiperf-payloads"
    assert [s.id for s in load_workload(tmp_path).sessions] == ["s1"]


def test_explicit_format_skips_detection(tmp_path):
    path = write(tmp_path, json.dumps({"session_id": "a", "messages": MESSAGES}))
    assert load_workload(path, format="mooncake").sessions[0].id == "a"
    # and applies that format's rules: a Mooncake line is not an LLMServingSim line
    error = error_of(load_workload, write(tmp_path, json.dumps(MOONCAKE), "m.jsonl"), format="llmservingsim")
    assert str(error).startswith(f"{tmp_path / 'm.jsonl'}:1: timestamp: unknown field")


def test_options_reach_the_loader(tmp_path):
    path = write(tmp_path, json.dumps({**MOONCAKE, "input_length": 33, "hash_ids": [1, 2, 3]}))
    (session,) = load_workload(path, block_size=16).sessions
    assert session.turns[0].prompt.block_size == 16


def test_undetectable_first_line(tmp_path):
    path = write(tmp_path, "\n\nhello world\n{}\n", "notes.txt")
    error = error_of(load_workload, path)
    assert str(error).startswith(
        f"{path}:3: cannot tell the format from the first line 'hello world'; name it with format="
    )
    assert ", ".join(FORMATS) in str(error)


def test_unknown_format(tmp_path):
    with pytest.raises(LLMReplayError) as info:
        load_workload(write(tmp_path, json.dumps(MOONCAKE)), format="sharegpt")
    assert str(info.value) == f"unknown workload format 'sharegpt'; expected one of {', '.join(FORMATS)}"


@pytest.mark.parametrize(
    ("format", "options", "expected"),
    [
        ("trie", {"block_size": 16}, "format 'trie' takes no options; got block_size"),
        ("mooncake", {"block_sizes": 16}, "format 'mooncake' takes block_size; got block_sizes"),
        ("mooncake", {"seed": 1, "rate": 2}, "format 'mooncake' takes block_size; got rate, seed"),
        (None, {"block_size": 16}, "format 'llmservingsim' takes no options; got block_size"),
    ],
)
def test_options_a_format_does_not_take(tmp_path, format, options, expected):
    path = write(tmp_path, json.dumps({"input_toks": 3, "output_toks": 2, "arrival_time_ns": 0}))
    with pytest.raises(LLMReplayError) as info:
        load_workload(path, format=format, **options)
    assert str(info.value) == expected


@pytest.mark.parametrize("format", [None, *FORMATS])
def test_missing_file(tmp_path, format):
    path = tmp_path / "nope.jsonl"
    assert str(error_of(load_workload, path, format=format)) == f"{path}: no such file or directory"


@pytest.mark.parametrize("text", ["", "\n\n   \n", "# only a comment\n"])
def test_empty_file_detected(tmp_path, text):
    path = write(tmp_path, text)
    error = error_of(load_workload, path)
    assert str(error).startswith(f"{path}: the file is empty")


@pytest.mark.parametrize("format", FORMATS)
def test_empty_file_with_a_named_format_is_an_error(tmp_path, format):
    """An empty workload cannot be replayed; naming the format must not turn the 'file is empty'
    error into a silent empty workload."""
    path = write(tmp_path, "", "empty.txt")
    assert str(error_of(load_workload, path, format=format)).startswith(f"{path}")


# an executable's header, then no text at all (a gzip header would be read as gzip: test_format_compressed)
BINARY = b"\x7fELF" + bytes(range(128, 256)) * 4
NOT_UTF8 = "not UTF-8: byte 0x80 at column 5 (expected UTF-8 JSONL, JSON, CSV or YAML)"


def test_binary_file_detected(tmp_path):
    path = write(tmp_path, BINARY, "model.bin")
    assert str(error_of(load_workload, path)) == f"{path}:1: {NOT_UTF8}"


@pytest.mark.parametrize("format", FORMATS)
def test_binary_file_with_a_named_format(tmp_path, format):
    path = write(tmp_path, BINARY, "model.bin")
    assert str(error_of(load_workload, path, format=format)) == f"{path}:1: {NOT_UTF8}"


LATER_LINES = {  # a file whose line 3 holds a byte that is not UTF-8, by format
    "mooncake": (json.dumps(MOONCAKE) + "\n") * 2
    + '{"timestamp": 1, "input_length": 600, "output_length": 20, "hash_ids": [1], "x": "\udcff"}\n',
    "aiperf-inputs": '{"data": [\n  {"session_id": "a",\n   "payloads": [{"messages": [{"role": "user", "content": "\udcff"}]}]}]}\n',
    "azure": AZURE + "2023-11-16 18:17:04.1,48\udcff,10\n",
    "synthetic": "synthetic:\n  sessions: 2\n  # caf\udcff\n  input_tokens: 10\n  output_tokens: 5\n",
}


@pytest.mark.parametrize("format", LATER_LINES)
@pytest.mark.parametrize("named", [False, True])
def test_a_byte_that_is_not_utf8_is_named_by_line_and_column(tmp_path, format, named):
    text = LATER_LINES[format]
    path = write(tmp_path, text.encode("utf-8", "surrogateescape"), "w.txt")
    column = text.splitlines()[2].index("\udcff") + 1
    message = str(error_of(load_workload, path, format=format if named else None))
    assert message == f"{path}:3: not UTF-8: byte 0xff at column {column} (expected UTF-8 JSONL, JSON, CSV or YAML)"


@pytest.mark.parametrize("format", ["mooncake", "aiperf-inputs", "azure", "synthetic"])
def test_a_utf8_byte_order_mark_is_accepted(tmp_path, format):
    text = {
        "mooncake": json.dumps(MOONCAKE) + "\n",
        "aiperf-inputs": json.dumps(AIPERF_INPUTS),
        "azure": AZURE,
        "synthetic": "synthetic:\n  sessions: 2\n  input_tokens: 10\n  output_tokens: 5\n",
    }[format]
    path = write(tmp_path, b"\xef\xbb\xbf" + text.encode(), "w.txt")
    assert detect_format(path) == format
    assert load_workload(path).sessions == load_workload(write(tmp_path, text, "plain.txt")).sessions


def test_a_lone_brace_is_called_pretty_printed_json(tmp_path):
    pretty = write(tmp_path, json.dumps(MOONCAKE, indent=2) + "\n", "pretty.jsonl")
    assert str(error_of(load_workload, pretty)) == (
        f"{pretty}:1: cannot tell the format: the file starts with a lone '{{' (pretty-printed JSON?); JSONL formats need "
        'one object a line, and the JSON documents read are an AIPerf inputs.json, {"data": [...]}, and, '
        "named with format vllm-bench, vllm bench serve's result"
    )
    for path in (pretty, write(tmp_path, json.dumps(MOONCAKE) + "\n" + json.dumps(MOONCAKE, indent=2), "later.jsonl")):
        line = 1 if path == pretty else 2
        assert str(error_of(load_workload, path, format="mooncake")) == (
            f"{path}:{line}: a lone '{{': JSONL needs each object on one line (is this pretty-printed JSON?)"
        )


@pytest.mark.parametrize(
    ("format", "text", "line", "key"),
    [
        (
            "mooncake",
            json.dumps(MOONCAKE) + '\n{"timestamp": 1, "input_length": 60, "timestamp": 2, "output_length": 2}\n',
            2,
            "timestamp",
        ),
        ("aiperf-payloads", '{"messages": [{"role": "user", "content": "hi", "role": "system"}]}\n', 1, "role"),
        (
            "llmservingsim",
            '{"session_id": "s", "arrival_time_ns": 0, "sub_requests": [{"input_toks": 3, "output_toks": 2, "output_toks": 9}]}\n',
            1,
            "output_toks",
        ),
        (
            "aiperf-inputs",
            '{"data": [\n  {"session_id": "a", "payloads": [{"messages": []}]},\n  {"session_id": "b", "session_id": "c", "payloads": []}\n]}\n',
            3,
            "session_id",
        ),
        ("aiperf-inputs", '{"data": [{"session_id": "a", "payloads": [{"messages": []}]}], "data": []}\n', 1, "data"),
    ],
)
def test_a_key_given_twice_is_refused_with_its_line(tmp_path, format, text, line, key):
    path = write(tmp_path, text, "w.txt")
    assert str(error_of(load_workload, path, format=format)) == f"{path}:{line}: duplicate key {key!r}"


# JSON nested past Python's recursion limit: json raises RecursionError, which must not escape
DEEP = "[" * 100_000 + "]" * 100_000
DEEPLY_NESTED = {
    "detected": (None, '{"messages": ' + DEEP + "}", 1),
    "mooncake, line 2": (
        "mooncake",
        json.dumps(MOONCAKE) + '\n{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": ' + DEEP + "}",
        2,
    ),
    "aiperf-payloads named": ("aiperf-payloads", '{"messages": ' + DEEP + "}", 1),
    "aiperf-inputs, the entry's line": (
        "aiperf-inputs",
        '{"data": [\n  {"session_id": "a", "payloads": [{"messages": []}]},\n  ' + DEEP + "\n]}",
        3,
    ),
}


@pytest.mark.parametrize(("format", "text", "line"), DEEPLY_NESTED.values(), ids=DEEPLY_NESTED.keys())
def test_json_nested_past_the_recursion_limit_is_one_error_at_its_line(tmp_path, format, text, line):
    path = write(tmp_path, text, "w.txt")
    assert str(error_of(load_workload, path, format=format)) == (
        f"{path}:{line}: nested too deeply: lists or objects inside each other past what the parser reads "
        f"(Python's recursion limit, {sys.getrecursionlimit()})"
    )


@pytest.mark.parametrize("format", FILE_FORMATS)
def test_directory_for_a_file_format(tmp_path, format):
    assert (
        str(error_of(load_workload, tmp_path, format=format))
        == f"{tmp_path}: is a directory; format {format!r} reads a file"
    )


# --- every real trace --------------------------------------------------------------------------

# path under tests/data -> (format, sessions, requests, timed)
REAL_WORKLOADS = {
    "azure/AzureLLMInferenceTrace_code.csv.gz": ("azure", 8_819, 8_819, True),
    "azure/AzureLLMInferenceTrace_conv.csv.gz": ("azure", 19_366, 19_366, True),
    "llmservingsim/example_trace.jsonl": ("llmservingsim", 10, 10, True),
    "llmservingsim/sharegpt-llama-3.1-8b-300-sps10.jsonl.gz": ("llmservingsim", 300, 300, True),
    "llmservingsim/workload_me2_01_mixed.jsonl.gz": ("llmservingsim", 608, 608, True),
    "mooncake/conversation_trace.jsonl.gz": ("mooncake", 12_031, 12_031, True),
    "mooncake/mooncake_tiny_arxiv_head16.jsonl": ("mooncake", 16, 16, True),
    "mooncake/synthetic_trace.jsonl.gz": ("mooncake", 3_993, 3_993, True),
    "trie/office_work_8k_slice.jsonl": ("trie", 8, 193, False),
}
# files in tests/data that are not workloads (see its README): results and measurements
NOT_WORKLOADS = {"README.md", "llmservingsim/example_single_run.csv"}


@pytest.mark.parametrize(("relative", "expected"), REAL_WORKLOADS.items(), ids=REAL_WORKLOADS.keys())
def test_every_real_trace_loads(trace_data, relative, expected):
    workload = load_workload(trace_data / relative)
    assert (workload.format, len(workload), workload.num_requests, workload.timed) == expected
    assert workload.warnings == ()
    arrivals = [s.arrival_s for s in workload.sessions]
    assert arrivals == sorted(arrivals) and min(arrivals) >= 0.0


def test_the_table_covers_every_data_file(trace_data):
    files = {p.relative_to(trace_data).as_posix() for p in trace_data.rglob("*") if p.is_file()}
    uncovered = {f for f in files - set(REAL_WORKLOADS) - NOT_WORKLOADS if not f.startswith("llmservingsim/bench/")}
    assert uncovered == set(), "add these files to REAL_WORKLOADS (or NOT_WORKLOADS)"
    assert set(REAL_WORKLOADS) <= files


# --- sizes no replay can honour: refused at load, naming where -----------------------------------

HUGE = [
    (
        "llmservingsim",
        json.dumps({"input_toks": 10**26, "output_toks": 5, "arrival_time_ns": 0}),
        "session 'line1' turn 0: input tokens: 100,000,000,000,000,000,000,000,000 is over the limit of 10,000,000",
    ),
    (
        "llmservingsim",
        json.dumps({"input_toks": 10, "output_toks": 5, "arrival_time_ns": 10**23}),
        "session 'line1': arrival: 1e+14 s is over the limit of 10,000,000 s (116 days): times must count from the trace's start",
    ),
    (
        "trie",
        json.dumps(
            {
                **TRIE,
                "num_turns": 1,
                "assistant_response_length": [3],
                "tool_call_output_length": [4],
                "tool_call_latency": [1e308],
            }
        ),
        "turn 1: delay: 1e+308 s is over the limit of 10,000,000 s",
    ),
    (
        "azure",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,99999999999999,10\n",
        "turn 0: input tokens: 99,999,999,999,999 is over the limit",
    ),
]


@pytest.mark.parametrize(("format", "text", "message"), HUGE, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(HUGE)])
def test_sizes_no_replay_can_honour_are_refused_at_load(tmp_path, format, text, message):
    path = tmp_path / ("w.csv" if format == "azure" else "w.jsonl")
    path.write_text(text + "\n")
    with pytest.raises(WorkloadError) as caught:
        load_workload(path, format=format)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sessions: 100000000000", "synthetic.sessions: must be at most 10,000,000, got 100,000,000,000"),
        (
            "sessions: 2\n  turns: 100000000",
            "synthetic.turns: 200,000,000 requests in all is over the limit of 10,000,000",
        ),
        (
            "sessions: 2\n  input_tokens: 100000000000000",
            "synthetic.input_tokens: draws 100,000,000,000,000 tokens, over the limit of 10,000,000",
        ),
        # past int64: the draws had wrapped to -9.2e18 tokens (inspect printed them) or a negative
        # count of requests (a numpy traceback)
        (
            "sessions: 2\n  input_tokens: 100000000000000000000",
            "synthetic.input_tokens: draws 1e+15 or more tokens, over the limit of 10,000,000",
        ),
        (
            "sessions: 2\n  output_tokens: {dist: normal, mean: 1.0e+20, std: 1}",
            "synthetic.output_tokens: draws 1e+15 or more tokens, over the limit of 10,000,000",
        ),
        (
            "sessions: 2\n  turns: 100000000000000000000",
            "synthetic.turns: 1e+15 or more requests in all is over the limit",
        ),
    ],
)
def test_synthetic_specs_too_large_to_generate_are_refused_before_generating(tmp_path, spec, message):
    path = tmp_path / "s.yaml"
    path.write_text(f"synthetic:\n  {spec}\n")
    with pytest.raises(WorkloadError, match="^" + re.escape(f"{path}: {message}")):
        load_workload(path)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("s.yaml", "synthetic:\n  sessions: 4\n  rate: 2e1\n  input_tokens: 1e3\n  delay: 5E-1\n  turns: 2\n"),
        ("s.json", '{"synthetic": {"sessions": 4, "rate": 2e1, "input_tokens": 1e3, "delay": 5E-1, "turns": 2}}'),
    ],
)
def test_exponent_numbers_without_a_dot_are_numbers_in_specs(tmp_path, name, text):
    """PyYAML (YAML 1.1) reads 1e3 as the string '1e3' (even in a JSON spec, where it is a
    number): 'synthetic.rate: must be a number > 0, got '2e1''. Read as JSON and YAML 1.2 do."""
    path = tmp_path / name
    path.write_text(text)
    workload = load_workload(path, format="synthetic")
    assert {t.input_tokens for _, index, t in workload.turns() if index == 0} == {1000}
    assert {t.delay_s for _, index, t in workload.turns() if index == 1} == {0.5}
    quoted = tmp_path / "quoted.yaml"
    quoted.write_text("synthetic:\n  sessions: 4\n  rate: '2e1'\n")
    with pytest.raises(WorkloadError, match=re.escape("synthetic.rate: must be a number > 0, got '2e1'")):
        load_workload(quoted)


def test_aiperfs_multi_turn_custom_dataset_is_named_as_not_read(tmp_path):
    """AIPerf's own --custom-dataset-type multi_turn rows got "cannot tell the format ... name it
    with format=", and every format named then failed (a new user's trial, ten minutes and the
    source to find what to write instead): the error names the format and what to write."""
    path = tmp_path / "multi_turn.jsonl"
    path.write_text('{"session_id": "a", "turns": [{"text": "hi", "delay": 100}]}\n')
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    assert "this looks like AIPerf's multi_turn custom dataset" in str(caught.value)
    assert "write its turns as mooncake rows (session_id, text_input or messages, output_length, delay)" in str(
        caught.value
    )
