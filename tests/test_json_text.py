"""A JSON text a user gave: every way the parser refuses it is one error naming where, in every
reader of a JSON document (an integer of more than 4,300 digits and nesting past the recursion
limit raised a ValueError or RecursionError traceback from profiles, model configs, stored
results, vLLM bench results and AIPerf inputs), and the same integer in a YAML or TOML file."""

from __future__ import annotations

import json

import pytest

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.gate.stored_record import read_record
from pytest_llmreplay.json_text import JSONTextError, parse_json
from pytest_llmreplay.plugin.spec import read_spec_file
from pytest_llmreplay.sim.model_config import read_config
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.workloads.formats import load_workload

HUGE = "7" * 5000  # past Python's 4,300 digits for an integer
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("text", "reason", "line", "column"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'", None, None),
        ('{"a": 1,\n  "b": }', "not valid JSON: Expecting value", 2, 8),
        (DEEP, "nested too deeply: lists or objects inside each other past what the parser reads", None, None),
        (f'{{"a": {HUGE}}}', "not valid JSON: Exceeds the limit (4300 digits)", None, None),
    ],
    ids=["duplicate key", "syntax", "too deep", "huge integer"],
)
def test_every_refusal_is_one_error_with_its_reason_and_position(text, reason, line, column):
    with pytest.raises(JSONTextError) as info:
        parse_json(text)
    error = info.value
    assert error.reason.startswith(reason) and (error.line, error.column) == (line, column)
    position = "" if line is None else f":{line}:{column}"
    assert error.at("f.json") == f"f.json{position}: {error.reason}"
    assert str(error) == (error.reason if line is None else f"line {line} column {column}: {error.reason}")


def test_a_key_twice_is_kept_where_the_caller_allows_it():
    assert parse_json('{"a": 1, "a": 2}', unique=False) == {"a": 2}


def written(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


READERS = {
    "profile": (load_profile, "{path}"),
    "model config": (lambda path: read_config(path, "model.config"), "model.config: {path}"),
    "stored result": (read_record, "{path}: not a stored llmreplay result ("),
    "vllm bench result": (lambda path: load_workload(path, format="vllm-bench"), "{path}"),
    "aiperf inputs": (lambda path: load_workload(path, format="aiperf-inputs"), "{path}"),
}


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f'{{"data": {HUGE}}}', "Exceeds the limit"),
        (DEEP, "nested too deeply"),
        ('{"data": [], "data": {}}', "duplicate key 'data'"),
    ],
    ids=["huge integer", "too deep", "duplicate key"],
)
def test_every_json_document_reader_refuses_a_huge_integer_deep_nesting_and_a_key_twice_in_one_line(
    tmp_path, reader, text, reason
):
    read, prefix = reader
    path = written(tmp_path, "doc.json", text)
    with pytest.raises(LLMReplayError) as info:
        read(path)
    message = str(info.value)
    assert message.startswith(prefix.format(path=path)) and reason in message and "\n" not in message


def test_aiperf_inputs_names_the_entry_whose_integer_is_too_long(tmp_path):
    entry = {"session_id": "a", "payloads": [{"messages": [{"role": "user", "content": "hi"}]}]}
    text = '{\n  "data": [\n    ' + json.dumps(entry) + ',\n    {"session_id": "b", "n": ' + HUGE + "}\n  ]\n}\n"
    path = written(tmp_path, "inputs.json", text)
    with pytest.raises(LLMReplayError, match=rf"^{path}:4: not valid JSON: Exceeds the limit"):
        load_workload(path, format="aiperf-inputs")


def test_a_jsonl_line_with_a_huge_integer_is_an_error_at_that_line(tmp_path):
    row = {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}
    path = written(tmp_path, "trace.jsonl", json.dumps(row) + "\n" + json.dumps(row)[:-1] + f', "x": {HUGE}}}\n')
    with pytest.raises(LLMReplayError, match=rf"^{path}:2: invalid JSON: Exceeds the limit"):
        load_workload(path, format="mooncake")


def test_a_huge_integer_in_a_yaml_or_toml_file_is_one_error(tmp_path):
    spec = written(tmp_path, "spec.yaml", f"sessions: {HUGE}\ninput_tokens: 10\noutput_tokens: 2\n")
    with pytest.raises(
        LLMReplayError, match=rf"^{spec}:1:11: invalid YAML/JSON: Exceeds the limit \(4300 digits\)[^;]*$"
    ):
        load_workload(spec, format="synthetic")
    for name, language, where in (
        ("perf.llmreplay.yaml", "YAML", "line 1, column 6: "),  # PyYAML marks the scalar, tomllib nothing
        ("perf.llmreplay.toml", "TOML", ""),
    ):
        text = f"slo: {HUGE}\n" if language == "YAML" else f"slo = {HUGE}\n"
        with pytest.raises(LLMReplayError, match=rf"^{where}not valid {language}: Exceeds the limit \(4300 digits\)"):
            read_spec_file(written(tmp_path, name, text))


def test_a_profile_or_model_config_that_is_not_utf8_is_one_error_and_a_bom_is_skipped(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{\n  "name": "caf\xe9"\n}\n')
    with pytest.raises(
        LLMReplayError, match=rf"^{bad}:2: not UTF-8: byte 0xe9 at column 15 \(expected a UTF-8 JSON profile\)$"
    ):
        load_profile(bad)
    with pytest.raises(LLMReplayError, match=rf"^model.config: {bad}:2: not UTF-8: byte 0xe9"):
        read_config(bad, "model.config")
    marked = tmp_path / "marked.json"
    marked.write_bytes(b"\xef\xbb\xbf" + json.dumps({"model_type": "llama"}).encode())
    assert read_config(marked, "model.config") == {"model_type": "llama"}


def test_a_yaml_scalar_python_cannot_read_is_named_at_its_line_and_column(tmp_path):
    spec = written(tmp_path, "spec.yaml", "sessions: 10\ninput_tokens: 10\noutput_tokens: 2\nseed: 2024-13-45\n")
    with pytest.raises(LLMReplayError, match=rf"^{spec}:4:7: invalid YAML/JSON: month must be in 1\.\.12"):
        load_workload(spec, format="synthetic")
    nested = written(tmp_path, "perf.llmreplay.yaml", "tests:\n  test_a:\n    slo:\n      - 2024-02-30\n")
    with pytest.raises(LLMReplayError, match=r"line 4, column 9: .*day is out of range for month"):
        read_spec_file(nested)


def test_a_first_line_python_cannot_read_is_named_not_an_unknown_format(tmp_path):
    row = {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}
    path = written(tmp_path, "trace.jsonl", json.dumps(row)[:-1] + f', "x": {HUGE}}}\n')
    with pytest.raises(LLMReplayError, match=rf"^{path}:1: invalid JSON: Exceeds the limit \(4300 digits\)[^;]*$"):
        load_workload(path)


def test_a_server_whose_replies_nest_too_deep_is_one_error_naming_the_option(tmp_path):
    """A server's reply is user input too: /version and /v1/models nested past what json reads
    raised a RecursionError traceback from the endpoint's fingerprint."""
    from handlers import Handler, serving

    from pytest_llmreplay.target import live_fingerprint

    class TooDeep(Handler):
        def do_GET(self):
            self.answer(200, DEEP.encode(), "application/json")

    with serving(TooDeep) as url:
        with pytest.raises(LLMReplayError) as info:
            live_fingerprint(url, None, "--endpoint")
    assert str(info.value).startswith(f"--endpoint {url}: cannot read /v1/models (RecursionError")


def test_nan_and_infinity_are_refused_where_the_text_is_sent_on_as_json():
    """Python's json reads NaN and Infinity, JSON has none: an --extra-body holding one would
    go into every request as a body no server can read. Files other tools write keep them."""
    from pytest_llmreplay.replayer.endpoints import extra_body

    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(LLMReplayError, match=rf"^--extra-body: not valid JSON: {constant} is not a JSON number$"):
            extra_body("--extra-body", f'{{"temperature": {constant}}}')
    assert extra_body("--extra-body", '{"temperature": 0.5}') == {"temperature": 0.5}
    assert parse_json('{"std_ttft_ms": NaN}')["std_ttft_ms"] != parse_json('{"std_ttft_ms": NaN}')["std_ttft_ms"]
