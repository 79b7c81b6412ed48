"""llmreplay validate / inspect / convert, through main() as a user runs them."""

import io
import json
import os
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

from pytest_llmreplay import load_workload
from pytest_llmreplay.cli.compare import COMPARE_BAD_INPUT
from pytest_llmreplay.cli.main import main
from pytest_llmreplay.cli.options import BAD_INPUT
from pytest_llmreplay.cli.run import RUN_STATUS
from pytest_llmreplay.cli.sweep import SWEEP_STATUS

MOONCAKE = "mooncake/conversation_trace.jsonl.gz"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


SIMULATOR_OUTPUT = "example_single_run.csv"  # LLMServingSim's per-request results, not a workload


def test_validate_every_real_trace(capsys, trace_data):
    files = sorted(
        str(p)
        for p in trace_data.glob("*/*")
        if p.name.endswith((".jsonl", ".csv", ".jsonl.gz", ".csv.gz")) and p.name != SIMULATOR_OUTPUT
    )
    code, out, err = run(capsys, "validate", *files)
    assert code == 0, err
    assert out.count("ok ") == len(files) == 9


def test_validate_says_a_results_file_is_no_workload(capsys, trace_data):
    code, _, err = run(capsys, "validate", str(trace_data / "llmservingsim" / SIMULATOR_OUTPUT))
    assert code == 1
    assert f"{SIMULATOR_OUTPUT}:1: cannot tell the format from the first line 'instance id,request id" in err


def test_validate_reports_each_bad_file_and_exits_1(capsys, tmp_path, trace_data):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_toks": 3, "output_toks": 2, "arrival_time_ns": -1}\n')
    code, out, err = run(capsys, "validate", str(bad), str(trace_data / "trie/office_work_8k_slice.jsonl"))
    assert code == 1
    assert f"error: {bad}:1: arrival_time_ns: must be >= 0, got -1" in err
    assert "Traceback" not in err
    assert "ok " in out


def test_validate_prints_loader_warnings(capsys, tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text(
        json.dumps(
            {
                "session_id": "s",
                "arrival_time_ns": 0,
                "sub_requests": [{"input_toks": 5, "output_toks": 2, "tool_duration_ns": 7}],
            }
        )
        + "\n"
    )
    code, _, err = run(capsys, "validate", str(path))
    assert code == 0
    assert "warning:" in err and "sub_requests[0].tool_duration_ns" in err


def test_inspect_mooncake_conversation_figures(capsys, trace_data):
    code, out, _ = run(capsys, "inspect", str(trace_data / MOONCAKE))
    assert code == 0
    for figure in (
        "mooncake",
        "12,031",
        "mean 12,035.1",
        "p50 6,909",
        "3,537.0 s",
        "3.40 req/s",
        "37.4% (unbounded cache)",
    ):
        assert figure in out


def test_inspect_block_size_option_reaches_the_loader(capsys, trace_data):
    code, _, err = run(capsys, "inspect", "--block-size", "16", str(trace_data / MOONCAKE))
    assert code == 1
    assert "hash_ids: expected ceil(6758 / 16) = 423 ids" in err


def test_inspect_untimed_agentic_trace(capsys, trace_data):
    code, out, _ = run(capsys, "inspect", str(trace_data / "trie/office_work_8k_slice.jsonl"))
    assert code == 0
    assert "untimed" in out and "193" in out and "session history share" in out


def test_inspect_shows_reasoning_lengths_only_when_the_workload_has_them(capsys, tmp_path):
    spec = "synthetic:\n  sessions: 4\n  input_tokens: 100\n  output_tokens: 50\n  seed: 1\n"
    plain, thinking = tmp_path / "plain.yaml", tmp_path / "thinking.yaml"
    plain.write_text(spec)
    thinking.write_text(spec + "  reasoning_tokens: {dist: uniform, min: 100, max: 300}\n")
    code, out, _ = run(capsys, "inspect", str(plain))
    assert code == 0 and "output tokens" in out and "reasoning tokens" not in out
    code, out, _ = run(capsys, "inspect", str(thinking))
    thoughts = [turn.reasoning_tokens for _, _, turn in load_workload(thinking).turns()]
    assert code == 0 and len(thoughts) == 4 and all(100 <= t <= 300 for t in thoughts)
    median = sorted(thoughts)[1] / 2 + sorted(thoughts)[2] / 2
    assert re.search(
        rf"^reasoning tokens \(of output\) +mean {sum(thoughts) / 4:,.1f}  p50 {median:,.0f}  ", out, re.M
    ), out
    assert f"max {max(thoughts):,}\n" in out and f"max {max(thoughts) + 50:,}\n" in out  # output lengths count them


@pytest.mark.parametrize(
    ("name", "to"),
    [
        ("trie/office_work_8k_slice.jsonl", "trie"),
        ("mooncake/mooncake_tiny_arxiv_head16.jsonl", "mooncake"),
        ("llmservingsim/example_trace.jsonl", "llmservingsim"),
    ],
)
def test_convert_to_the_same_format_is_byte_identical(capsys, tmp_path, trace_data, name, to):
    out_path = tmp_path / "out"
    code, _, err = run(capsys, "convert", str(trace_data / name), str(out_path), "--to", to)
    assert code == 0, err
    original = [json.loads(line) for line in (trace_data / name).read_text().splitlines()]
    written = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert written == original


def test_convert_trie_through_llmservingsim_and_back(capsys, tmp_path, trace_data):
    source = trace_data / "trie/office_work_8k_slice.jsonl"
    middle, back = tmp_path / "sim.jsonl", tmp_path / "back.jsonl"
    code, _, err = run(capsys, "convert", str(source), str(middle), "--to", "llmservingsim")
    assert code == 1 and "would lose: untimed workload" in err
    assert err.endswith(". Pass --allow-loss to convert anyway\n"), err  # once: "Pass --allow-loss (--allow-loss True)"
    assert not middle.exists()
    assert run(capsys, "convert", str(source), str(middle), "--to", "llmservingsim", "--allow-loss")[0] == 0
    assert run(capsys, "convert", str(middle), str(back), "--to", "trie", "--allow-loss")[0] == 0
    assert back.read_text() == source.read_text()


def test_convert_azure_keeps_lengths_and_relative_times(capsys, tmp_path, trace_data):
    source = trace_data / "azure/AzureLLMInferenceTrace_code.csv.gz"
    out_path = tmp_path / "a.csv"
    assert run(capsys, "convert", str(source), str(out_path), "--to", "azure")[0] == 0
    before, after = load_workload(source), load_workload(out_path)
    assert [s.turns[0].input_tokens for s in after] == [s.turns[0].input_tokens for s in before]
    assert [round(s.arrival_s, 6) for s in after] == [round(s.arrival_s, 6) for s in before]


def test_convert_refuses_silent_loss_and_names_it(capsys, tmp_path, trace_data):
    code, _, err = run(capsys, "convert", str(trace_data / MOONCAKE), str(tmp_path / "x.csv"), "--to", "azure")
    assert code == 1
    assert "converting to azure would lose: prompt contents" in err and "(12031x)" in err


def test_convert_names_what_cannot_be_expressed(capsys, tmp_path, trace_data):
    code, _, err = run(
        capsys,
        "convert",
        str(trace_data / "trie/office_work_8k_slice.jsonl"),
        str(tmp_path / "x.csv"),
        "--to",
        "azure",
        "--allow-loss",
    )
    assert code == 1
    assert "azure cannot express session 'trace1': 25 turns" in err


def test_convert_refuses_to_overwrite_its_input_however_spelt(capsys, tmp_path, trace_data):
    source = tmp_path / "trace.jsonl"
    source.write_bytes((trace_data / "trie/office_work_8k_slice.jsonl").read_bytes())
    original = source.read_bytes()
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.jsonl").symlink_to(source)
    os.link(source, tmp_path / "hard.jsonl")  # the same file by another name: writing it writes the input
    for target in (source, tmp_path / "sub" / ".." / "trace.jsonl", tmp_path / "link.jsonl", tmp_path / "hard.jsonl"):
        code, out, err = run(capsys, "convert", str(source), str(target), "--to", "llmservingsim", "--allow-loss")
        assert code == 1 and out == ""
        assert (
            err
            == f"error: {target}: is the input workload {source} itself; write to another path (the input would be overwritten)\n"
        )
    assert source.read_bytes() == original


def test_convert_into_a_folder_of_its_input_payloads_is_refused(capsys, tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    os.link(folder / "a.jsonl", tmp_path / "hard.jsonl")
    for target in (folder / "a.jsonl", tmp_path / "hard.jsonl"):
        code, _, err = run(capsys, "convert", str(folder), str(target), "--to", "aiperf-payloads")
        assert code == 1 and "is the input workload" in err
    assert (folder / "a.jsonl").read_text().startswith('{"messages"')


def test_convert_to_a_missing_folder_or_a_directory_is_one_line_naming_out(capsys, tmp_path, trace_data):
    source = str(trace_data / "trie/office_work_8k_slice.jsonl")
    missing = tmp_path / "nowhere" / "x.jsonl"
    code, _, err = run(capsys, "convert", source, str(missing), "--to", "trie")
    assert (code, err) == (1, f"error: {missing}: the folder {missing.parent} does not exist\n")
    code, _, err = run(capsys, "convert", source, str(tmp_path), "--to", "trie")
    assert (code, err) == (1, f"error: {tmp_path}: is a directory; format 'trie' writes a file here\n")


def test_convert_payloads_between_aiperf_formats(capsys, tmp_path):
    source = tmp_path / "inputs.json"
    data = {
        "data": [
            {
                "session_id": "a",
                "payloads": [
                    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
                    {"messages": [{"role": "user", "content": "more"}], "max_tokens": 7},
                ],
            },
            {"session_id": "b", "payloads": [{"messages": [{"role": "user", "content": "x"}]}]},
        ]
    }
    source.write_text(json.dumps(data, indent=2))
    folder = tmp_path / "sessions"
    assert run(capsys, "convert", str(source), str(folder), "--to", "aiperf-payloads")[0] == 0
    reloaded = load_workload(folder)
    assert [len(s.turns) for s in reloaded] == [2, 1]
    assert [t.prompt.body for s in reloaded for t in s.turns] == [p for e in data["data"] for p in e["payloads"]]
    back = tmp_path / "back.json"
    assert run(capsys, "convert", str(folder), str(back), "--to", "aiperf-inputs")[0] == 0
    assert [e["payloads"] for e in json.loads(back.read_text())["data"]] == [e["payloads"] for e in data["data"]]

    assert run(capsys, "convert", str(source), str(folder), "--to", "aiperf-payloads")[0] == 0  # the same files again


def test_convert_into_a_folder_of_other_sessions_is_refused(capsys, tmp_path):
    """Session files left in OUT by another conversion would join the written ones when read back
    ('wrote 1 session', inspect: 3)."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    source = tmp_path / "inputs.json"
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "0-old.jsonl").write_text(json.dumps(chat) + "\n")
    (folder / "1-old.jsonl.gz").write_bytes(b"")
    (folder / "notes.txt").write_text("not a session")
    source.write_text(json.dumps({"data": [{"session_id": "new", "payloads": [chat, chat]}]}))
    code, out, err = run(capsys, "convert", str(source), str(folder), "--to", "aiperf-payloads")
    assert (code, out) == (1, "")
    assert err == (
        f"error: {folder}: already holds 2 session files this conversion does not write (0-old.jsonl, 1-old.jsonl.gz):"
        " read back, they would join its sessions; write to a new or empty directory\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["0-old.jsonl", "1-old.jsonl.gz", "notes.txt"]


def test_validate_block_size_applies_to_the_files_that_take_one(capsys, tmp_path, trace_data):
    mooncake = tmp_path / "m16.jsonl"  # hash ids of 16 tokens: wrong at the default 512
    mooncake.write_text(
        json.dumps({"timestamp": 0, "input_length": 40, "output_length": 2, "hash_ids": [1, 2, 3]}) + "\n"
    )
    trie = trace_data / "trie/office_work_8k_slice.jsonl"
    code, out, err = run(capsys, "validate", "--block-size", "16", str(mooncake), str(trie))
    assert code == 0, err
    assert out.count("ok ") == 2
    assert (
        err
        == f"warning: {trie}: --block-size does not apply to format 'trie' (only to hash-id traces: mooncake); ignored\n"
    )


def test_errors_name_the_options_of_the_command_line(capsys, tmp_path):
    odd = tmp_path / "odd.txt"
    odd.write_text("x,y\n")
    assert run(capsys, "validate", str(odd))[2].endswith(
        "; name it with --format (one of llmservingsim, mooncake, trie, aiperf-payloads, aiperf-inputs, azure, vllm-bench, synthetic)\n"
    )
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(
        json.dumps({"timestamp": 0, "input_length": 40, "output_length": 2, "hash_ids": [1, 2, 3]}) + "\n"
    )
    assert run(capsys, "inspect", str(mooncake))[2].endswith("got 3 (pass --block-size if the trace uses another)\n")
    ids = tmp_path / "ids.jsonl"
    ids.write_text(
        json.dumps({"input_toks": 3, "output_toks": 2, "arrival_time_ns": 0, "input_tok_ids": [1, 2, 9000]}) + "\n"
    )
    code, _, err = run(capsys, "run", str(ids), "--endpoint", "http://127.0.0.1:9", "--model", "m", "--no-idle-check")
    assert code == RUN_STATUS["bad_input"] and err.endswith("use the tokenizer the trace was made with (--tokenizer)\n")


def test_every_replay_setting_of_run_is_an_option_named_after_it():
    """Errors from the replay settings name the field (``duration_s: ...``); the command line
    spells each as the option that sets it, found by its destination."""
    from dataclasses import fields

    from pytest_llmreplay.cli.main import build_parser, spelled
    from pytest_llmreplay.replayer.plan import ReplaySettings

    names = build_parser().parse_args(["run", "w.jsonl", "--endpoint", "http://h"]).option_names
    cli_only = {"check_idle"}  # set by --no-idle-check
    assert {f.name for f in fields(ReplaySettings)} - cli_only <= set(names)
    assert spelled("duration_s: expected a number > 0, got 0", names) == "--duration: expected a number > 0, got 0"
    assert spelled("warmup_s: expected a number >= 0", names) == "--warmup-seconds: expected a number >= 0"
    assert spelled("grace_s: x; see format= and block_size=16, not http://h/?seed=1 or synthetic.rate: 2", names) == (
        "--grace: x; see --format and --block-size 16, not http://h/?seed=1 or synthetic.rate: 2"
    )
    convert = build_parser().parse_args(["convert", "a", "b", "--to", "trie"]).option_names
    assert (
        spelled("x would lose: y. Pass allow_loss=True to convert anyway", convert)
        == "x would lose: y. Pass --allow-loss to convert anyway"
    )


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        # compare's 2 is "not comparable": a typo in an option must not read as that
        (
            ["compare", "a.json", "b.json", "--bogus"],
            COMPARE_BAD_INPUT,
            "llmreplay compare: error: unrecognized arguments: --bogus",
        ),
        (["compare", "a.json"], COMPARE_BAD_INPUT, "llmreplay compare: error: the following arguments are required: B"),
        (
            ["run", "w.jsonl", "--sim", "p", "--bogus", "1"],
            RUN_STATUS["bad_input"],
            "llmreplay run: error: unrecognized arguments: --bogus 1",
        ),
        (
            ["sweep", "w.jsonl", "--sim", "p", "--slo", "ttft.p99<1s", "--bogus"],
            SWEEP_STATUS["bad_input"],
            "llmreplay sweep: error: unrecognized arguments: --bogus",
        ),
        (
            ["calibrate", "--out", "p.json", "--seed", "-5"],
            BAD_INPUT,
            "llmreplay calibrate: error: argument --seed: expected an integer >= 0, got '-5'",
        ),
        (["history", "t", "--bogus"], BAD_INPUT, "llmreplay history: error: unrecognized arguments: --bogus"),
        (
            ["convert", "a", "b", "--to", "synthetic"],
            2,
            "llmreplay convert: error: argument --to: invalid choice: 'synthetic' *",
        ),
        (["validate", "a", "--bogus"], 2, "llmreplay validate: error: unrecognized arguments: --bogus"),
        (["bogus"], 2, "llmreplay: error: argument command: invalid choice: 'bogus' *"),
    ],
    ids=[
        "compare-unknown-option",
        "compare-without-B",
        "run-unknown-option",
        "sweep-unknown-option",
        "calibrate-negative-seed",
        "history-unknown-option",
        "convert-bad-choice",
        "validate-unknown-option",
        "unknown-command",
    ],
)
def test_bad_usage_exits_with_the_commands_bad_input_status_else_2(capsys, argv, status, message):
    """run, compare, sweep, calibrate and history exit 3 for bad usage as for bad input
    (argparse's message kept); the other commands exit argparse's 2."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == status
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"usage: {message.split(':')[0]} ") and fnmatch(err[-1], message), err


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_line_redraws_on_a_terminal_and_writes_plain_lines_to_a_log(tty, monkeypatch):
    from types import SimpleNamespace

    from pytest_llmreplay.cli.run import ProgressLine
    from pytest_llmreplay.replayer.clock import WallClock

    stream, now = _Stream(tty), [0.0]
    monkeypatch.setattr(WallClock, "now", lambda self: now[0])
    progress = ProgressLine(4, after_s=1.0, log_every_s=5.0, stream=stream)
    for t, status in ((0.5, "ok"), (2.0, "failed"), (3.0, "ok"), (8.0, "ok")):
        now[0] = t
        progress.update(SimpleNamespace(status=status))
    progress.close()
    if tty:  # every update after 1 s, at least 0.5 s apart, redrawn in place
        assert (
            stream.getvalue()
            == "\r2/4 requests, 1 failed, 2 s\r3/4 requests, 1 failed, 3 s\r4/4 requests, 1 failed, 8 s\n"
        )
    else:  # plain lines at least 5 s apart
        assert stream.getvalue() == "2/4 requests, 1 failed, 2 s\n4/4 requests, 1 failed, 8 s\n"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "http://127.0.0.1:99999",
            "error: --endpoint: invalid port '99999' in 'http://127.0.0.1:99999'; expected 1 to 65535\n",
        ),
        (
            "http://127.0.0.1: 80",
            "error: --endpoint: a space in the URL; expected http://host:port, got 'http://127.0.0.1: 80'\n",
        ),
        (
            "http://[::1",
            "error: --endpoint: not a URL (Invalid IPv6 URL); expected http://host:port, got 'http://[::1'\n",
        ),
    ],
)
def test_run_checks_the_endpoint_url_before_anything_is_sent(capsys, url, message):
    workload = Path(__file__).parent.parent / "workloads" / "synthetic_chat.yaml"
    code, _, err = run(capsys, "run", str(workload), "--endpoint", url, "--server-cmd", "sleep 100")
    assert code != 0 and err == message  # one line, and the server command was never started


def test_an_error_of_a_file_read_with_format_names_the_format(capsys):
    # the format may be the mistake: the line says how the file was read, as pytest's does
    workload = Path(__file__).parent.parent / "workloads" / "synthetic_chat.yaml"
    code, _, err = run(capsys, "run", str(workload), "--format", "mooncake", "--sim", "llama-3.1-8b-h100")
    assert code == 3
    assert (
        err == f"error: {workload}:1: invalid JSON: Expecting value (column 1) (read as 'mooncake', as --format says)\n"
    )


@pytest.mark.parametrize(
    "body", ['{"min_tokens": 2, "min_tokens": 8}', '{"sampling": {"min_tokens": 2, "min_tokens": 8}}']
)
def test_run_refuses_an_extra_body_naming_a_key_twice(capsys, body):
    workload = Path(__file__).parent.parent / "workloads" / "synthetic_chat.yaml"
    code, _, err = run(capsys, "run", str(workload), "--sim", "llama-3.1-8b-h100", "--extra-body", body)
    assert code != 0 and err == "error: --extra-body: duplicate key 'min_tokens'\n"


def test_run_refuses_an_extra_body_nested_past_the_recursion_limit_in_one_line(capsys):
    workload = Path(__file__).parent.parent / "workloads" / "synthetic_chat.yaml"
    body = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    code, _, err = run(capsys, "run", str(workload), "--sim", "llama-3.1-8b-h100", "--extra-body", body)
    assert (
        code == RUN_STATUS["bad_input"]
        and err.startswith("error: --extra-body: nested too deeply: ")
        and err.count("\n") == 1
    )


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("deep.jsonl", '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}\n", ":1: "),
        ("deep.yaml", "synthetic:\n  sessions: " + "{a: " * 50_000 + "1" + "}" * 50_000 + "\n", ":2:"),
    ],
)
def test_a_workload_nested_past_the_recursion_limit_is_one_error_line_not_a_traceback(
    capsys, tmp_path, name, text, where
):
    """inspect exits 1 (a bad workload file), run 3 (bad input), as for any other bad file."""
    path = tmp_path / name
    path.write_text(text)
    for argv, status in (
        (["inspect", str(path)], 1),
        (["run", str(path), "--sim", "llama-3.1-8b-h100"], RUN_STATUS["bad_input"]),
    ):
        code, _, err = run(capsys, *argv)
        assert (
            code == status
            and err.startswith(f"error: {path}{where}")
            and "nested too deeply" in err
            and err.count("\n") == 1
        ), err


def test_run_sim_names_the_http_options_it_ignores_in_one_warning_line(capsys, tmp_path):
    workload = Path(__file__).parent.parent / "workloads" / "synthetic_chat.yaml"
    code, _, err = run(
        capsys,
        "run",
        str(workload),
        "--sim",
        "llama-3.1-8b-h100",
        "--max-requests",
        "8",
        "--model",
        "other",
        "--api",
        "completions",
        "--header",
        "X-A:b",
        "--timeout",
        "5",
        "--no-stream",
        "--api-key-env",
        "KEY",
    )
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "ignored with --sim" in line]
    assert warnings == [
        "warning: --model, --api, --api-key-env, --header, --no-stream, --timeout: ignored with --sim "
        "(the simulator runs in process; these options are for an HTTP --endpoint)"
    ]
    code, _, err = run(
        capsys,
        "run",
        str(workload),
        "--sim",
        "llama-3.1-8b-h100",
        "--max-requests",
        "8",
        "--extra-body",
        '{"min_tokens": 2}',
    )
    assert code == 0 and "ignored" not in err  # --extra-body reaches the simulator


def test_run_sim_counts_the_profiles_gpus_unless_gpus_is_given(capsys, tmp_path):
    workload = Path(__file__).parent.parent / "workloads" / "synthetic_chat.yaml"
    gpus = {}
    for extra in ([], ["--gpus", "1"]):
        out_dir = tmp_path / f"out{len(extra)}"
        code, _, err = run(
            capsys,
            "run",
            str(workload),
            "--sim",
            "qwen3-32b-tp2-h100",
            "--max-requests",
            "8",
            "--out",
            str(out_dir),
            *extra,
        )
        assert code == 0, err
        stored = json.loads((out_dir / "result.json").read_text())
        gpus[len(extra)] = stored["gpus"]
        throughput = stored["summary"]["output_throughput"]
        assert throughput["per_gpu"] == pytest.approx(throughput["steady_state"] / stored["gpus"])
    assert gpus == {0: 2, 2: 1}  # the tensor-parallel profile's 2 GPUs by default; an explicit --gpus wins


def test_the_progress_lines_total_is_what_the_run_plans():
    """`--max-sessions 3` of a 193-request agent trace showed `79/193 requests` where 84 were
    planned (a new user's trial): the total is the plan's, whole sessions and cycling included."""
    from pytest_llmreplay.cli.run import _planned_requests
    from pytest_llmreplay.replayer.plan import ReplaySettings
    from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload

    workload = Workload(
        tuple(Session(f"s{i}", 0.0, tuple(Turn(8, 2, Synthetic()) for _ in range(i + 2))) for i in range(4)), "t"
    )

    def planned(**limits):
        return _planned_requests(workload, ReplaySettings(mode="concurrency", concurrency=2, **limits))

    assert planned() == 2 + 3 + 4 + 5
    assert planned(max_sessions=2) == 2 + 3
    assert planned(max_requests=4) == 2 + 3  # the session that reaches it runs whole
    assert planned(max_sessions=6) == 14 + 2 + 3  # cycling
    # a plan the replay will refuse (cycling a trace whose sessions all arrive at once): the workload's count
    assert _planned_requests(workload, ReplaySettings(max_sessions=2)) == 14


def test_a_run_spread_past_the_virtual_clocks_reach_is_one_error_not_a_hang(capsys, tmp_path):
    # past 2**24 s a float's step exceeds the clock's 1 ns settle step: now + 1e-9 == now, and
    # the event loop spun at 100% CPU for ever (a session at 9.5e6 s replayed at --speedup 0.5)
    trace = tmp_path / "far.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 10}\n'
        '{"timestamp": 9500000000, "input_length": 100, "output_length": 10}\n'
    )
    code, _, err = run(capsys, "run", str(trace), "--sim", "llama-3.1-8b-h100", "--speedup", "0.5")
    assert code == 3 and err.startswith(
        "error: the replay's virtual time would reach 19,000,000 s, past 16,777,216 s (194 days)"
    )
    assert len(err.strip().splitlines()) == 1
    code, _, _ = run(capsys, "run", str(trace), "--sim", "llama-3.1-8b-h100", "--speedup", "2")
    assert code == 0  # 4.75e6 s: within reach


def test_a_second_run_into_an_out_folder_never_replaces_the_firsts_result(capsys, tmp_path):
    # a second run with the same --out replaced an hour-long live run's result.json without a word
    out, workload = tmp_path / "r", Path(__file__).parent.parent / "workloads" / "synthetic_chat.yaml"
    assert run(capsys, "run", str(workload), "--sim", "llama-3.1-8b-h100", "--out", str(out))[0] == 0
    first = (out / "result.json").read_bytes()
    code, printed, err = run(capsys, "run", str(workload), "--sim", "llama-3.1-8b-h200", "--out", str(out))
    assert (
        code == 3
        and printed == ""
        and err
        == (
            f"error: --out {out}: holds result.json and requests.csv of an earlier run, which this one would replace; "
            "name another folder, or remove those files first\n"
        )
    )
    assert (out / "result.json").read_bytes() == first


def test_a_later_turns_own_time_converts_to_mooncake_and_is_a_loss_elsewhere(capsys, tmp_path):
    # a mooncake session's later turns timed by their own timestamps (sent then, or when the
    # previous turn ends): kept as timestamps in mooncake, a loss named in a format of waits
    source = tmp_path / "timed.jsonl"
    source.write_text(
        "".join(
            json.dumps({"session_id": "a", "timestamp": stamp, "input_length": 100 * (i + 1), "output_length": 10})
            + "\n"
            for i, stamp in enumerate((0, 1000, 2500))
        )
    )
    back = tmp_path / "back.jsonl"
    assert run(capsys, "convert", str(source), str(back), "--to", "mooncake")[0] == 0
    assert [json.loads(line)["timestamp"] for line in back.read_text().splitlines()] == [0, 1000, 2500]
    code, _, err = run(capsys, "convert", str(source), str(tmp_path / "l.jsonl"), "--to", "llmservingsim")
    assert code != 0 and "later turns' own times (each sent at its time or when the previous turn ends)" in err
