"""vLLM's benchmark result (``vllm bench serve --save-result --save-detailed``) as a workload: its
completed requests' lengths, untimed, with the load the run was sent at named; and as a run to
calibrate on, request N of the run paired with session N of the workload."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_llmreplay import LLMReplayError, Synthetic, WorkloadError, load_workload
from pytest_llmreplay.gate.baseline import KEY_TURNS
from pytest_llmreplay.sim.measured_run import read_run
from pytest_llmreplay.workloads.formats import detect_format

INPUTS = [300, 40, 1200, 7, 512, 96, 250, 640, 33, 1000, 128, 64]
OUTPUTS = [20, 1, 200, 5, 0, 64, 32, 17, 3, 128, 9, 2]  # request 4 failed (no token)


def bench(tmp_path: Path, name: str = "vllm-inf-concurrency8.json", **changes) -> Path:
    """A result as vLLM writes it: one line, the detailed lists in request order."""
    itls = [[0.01 + 0.001 * (i % 3)] * max(out - 1, 0) for i, out in enumerate(OUTPUTS)]
    result = {
        "date": "20261129-051500",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": len(INPUTS),
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 8,
        "completed": len(INPUTS) - 1,
        "input_lens": INPUTS,
        "output_lens": OUTPUTS,
        "ttfts": [0.05 + 0.002 * i for i in range(len(INPUTS))],
        "itls": itls,
        "errors": ["" if out else "Server disconnected" for out in OUTPUTS],
    }
    result.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(result))
    return path


def test_a_result_is_detected_and_its_completed_requests_become_untimed_sessions(tmp_path):
    path = bench(tmp_path)
    assert detect_format(path) == "vllm-bench"
    workload = load_workload(path)
    kept = [i for i, out in enumerate(OUTPUTS) if out]
    assert not workload.timed
    assert [s.id for s in workload.sessions] == [f"request{i}" for i in kept]
    assert [(s.turns[0].input_tokens, s.turns[0].output_tokens) for s in workload.sessions] == [
        (INPUTS[i], OUTPUTS[i]) for i in kept
    ]
    assert all(isinstance(s.turns[0].prompt, Synthetic) and len(s.turns) == 1 for s in workload.sessions)
    assert workload.warnings == (
        f"{path}: the run kept at most 8 requests in flight: replay it with concurrency 8",
        f"{path}: 1 of 12 requests failed in the run and are left out (the length each was to generate is not recorded)",
    )


@pytest.mark.parametrize(
    ("changes", "hint"),
    [
        ({"max_concurrency": None}, "the run sent all 12 requests at once: replay it with concurrency 12"),
        (
            {"max_concurrency": None, "request_rate": 4.0},
            "the run sent 4 requests/s (Poisson); its send times are not recorded: replay it with rate 4",
        ),
        (
            {"max_concurrency": None, "request_rate": 2.5, "burstiness": 0.5},
            "the run sent 2.5 requests/s (gamma of burstiness 0.5; the replay's is Poisson)",
        ),
        (
            {"request_rate": 1.0},
            "the run sent 1 requests/s (Poisson, at most 8 in flight); its send times are not recorded: "
            "replay it with rate 1 and concurrency 8",
        ),
    ],
)
def test_the_warning_names_the_load_the_run_was_sent_at(tmp_path, changes, hint):
    assert (
        load_workload(bench(tmp_path, **changes))
        .warnings[0]
        .startswith(f"{tmp_path}/vllm-inf-concurrency8.json: {hint}")
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"output_lens": OUTPUTS[:-1]}, "output_lens: has 11 entries, input_lens 12; they must be equal"),
        ({"input_lens": [*INPUTS[:-1], 1.5]}, "input_lens[11]: must be an integer, got a float 1.5"),
        ({"errors": ["", ""]}, "errors: must be a list of 12 strings, one per request"),
        ({"errors": [None] * 12}, "errors: must be a list of 12 strings, one per request"),
        ({"request_rate": "4"}, "request_rate: must be \"inf\" or a number of requests/s > 0, got '4'"),
        ({"request_rate": 0}, 'request_rate: must be "inf" or a number of requests/s > 0, got 0'),
        ({"max_concurrency": 0}, "max_concurrency: must be null or an integer >= 1, got 0"),
        ({"max_concurrency": True}, "max_concurrency: must be null or an integer >= 1, got True"),
        ({"ramp_up_strategy": "linear"}, "ramp_up_strategy: a run whose rate ramps up cannot be replayed at one load"),
    ],
)
def test_a_broken_result_is_one_error_naming_the_field(tmp_path, changes, message):
    path = bench(tmp_path, **changes)
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format="vllm-bench")
    assert str(info.value) == f"{path}: {message}"


def test_a_key_given_twice_is_refused_as_in_every_json_format(tmp_path):
    path = bench(tmp_path)
    path.write_text(path.read_text().replace('"max_concurrency": 8', '"max_concurrency": 8, "max_concurrency": 4'))
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert str(info.value) == f"{path}: duplicate key 'max_concurrency'"


def test_a_pretty_printed_result_is_read_when_its_format_is_named(tmp_path):
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(json.loads(bench(tmp_path).read_text()), indent=2))
    assert len(load_workload(path, format="vllm-bench").sessions) == 11


def test_the_run_is_its_clients_times_for_the_same_requests_sent_as_the_run_sent_them(tmp_path):
    """TTFT = ttft, latency = ttft + Σ itls, TPOT = Σ itls / (output - 1), as vLLM's benchmark
    counts them; request N of the completed ones is session N of the workload the file gives."""
    run, workload = read_run(bench(tmp_path)), load_workload(bench(tmp_path))
    kept = [i for i, out in enumerate(OUTPUTS) if out]
    assert run.keys.tolist() == [n * KEY_TURNS for n in range(len(kept))]  # session n, turn 0
    assert run.from_client and dict(run.load) == {"concurrency": 8} and run.sent_as(workload) == "concurrency 8"
    for n, i in enumerate(kept):
        decode = (0.01 + 0.001 * (i % 3)) * (OUTPUTS[i] - 1)
        assert run.ttft[n] == pytest.approx(0.05 + 0.002 * i)
        assert run.latency[n] == pytest.approx(0.05 + 0.002 * i + decode)
        if OUTPUTS[i] > 1:
            assert run.tpot[n] == pytest.approx(0.01 + 0.001 * (i % 3))
        else:
            assert math.isnan(run.tpot[n])
    assert dict(read_run(bench(tmp_path, max_concurrency=None, request_rate=3.0)).load) == {"rate": 3.0}
    assert dict(read_run(bench(tmp_path, request_rate=3.0)).load) == {"rate": 3.0, "concurrency": 8}


def test_a_result_saved_without_its_per_request_times_says_to_save_them(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"request_rate": "inf", "num_prompts": 12, "mean_ttft_ms": 50.0}))
    with pytest.raises(
        LLMReplayError,
        match=r"summary\.json: a vllm bench serve result without per-request times: run it again with --save-detailed",
    ):
        read_run(path)


def test_calibrate_reads_the_same_file_as_its_workload_even_pretty_printed(tmp_path, capsys):
    from pytest_llmreplay.cli.main import main

    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(json.loads(bench(tmp_path).read_text()), indent=2))
    args = ["--profile", "llama-3.1-8b-h100", "--fit", "mbu", "--max-evals", "4", "--out", str(tmp_path / "f.json")]
    assert main(["calibrate", "--from-run", str(path), "--workload", str(path), *args]) == 0
    assert f"with {path} sent as the run sent it, concurrency 8: fitting mbu" in capsys.readouterr().out


def test_a_broken_runs_times_are_one_error_naming_the_file_and_field(tmp_path):
    itls = [[0.01] * max(out - 1, 0) for out in OUTPUTS]
    itls[2] = [0.01, "x"]
    with pytest.raises(
        LLMReplayError, match=r"vllm-inf-concurrency8\.json: itls\[2\]: must be a list of finite numbers >= 0"
    ):
        read_run(bench(tmp_path, itls=itls))
    with pytest.raises(LLMReplayError, match=r"ttfts: has 11 entries for 12 requests"):
        read_run(bench(tmp_path, ttfts=[0.05] * 11))
