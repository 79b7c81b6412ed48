"""``llmreplay calibrate`` against the simulator's own server: the sweep must find the timing the
server was built with, and refuse what it cannot know."""

from __future__ import annotations

import json

import pytest
from mockserver import MockServer, ServerThread

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.cli.options import BAD_INPUT
from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
from pytest_llmreplay.sim.calibrate import CalibrationPlan, calibrate
from pytest_llmreplay.sim.profile import load_profile, parse_profile
from pytest_llmreplay.sim.server import SimServer
from pytest_llmreplay.sim.timing import Batch
from pytest_llmreplay.sim.wake_timing import MAX_LATE_S
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

PROFILE = "llama-3.1-8b-h100"


@pytest.fixture(scope="module")
def prompts():
    return PromptFactory(load_tokenizer(None))


@pytest.fixture(scope="module")
def sim_url(prompts):
    with ServerThread(SimServer(load_profile(PROFILE), prompts)) as thread:
        yield thread.url


def test_the_sweep_recovers_the_servers_timing(sim_url, prompts):
    profile = load_profile(PROFILE)
    plan = CalibrationPlan(
        prefill_tokens=(256, 2048), decode_seqs=(1, 8), decode_output_tokens=16, repeats=3, budget_s=120
    )
    found = calibrate(HTTPEndpoint(sim_url, api="completions", extra_body={"ignore_eos": True}), prompts, plan, "mine")
    timing = found["timing"]
    assert found["name"] == "mine" and timing["kind"] == "table"
    # the prompts' lengths as the server counted them: exactly the planned ones (the same tokenizer)
    assert timing["prefill"]["tokens"] == [256, 2048]
    for tokens, ms in zip(timing["prefill"]["tokens"], timing["prefill"]["ms"], strict=True):
        # TTFT of a lone request = one prefill iteration, plus the client's and the event loop's share
        # (up to 10 ms more on a loaded CI machine; a wrong measure is off by an iteration or more),
        # less the early hand-out a loaded machine's late timers teach the server (sim/wake_timing.py:
        # up to MAX_LATE_S, and a lone request's share of the lead, well under a millisecond)
        expected = profile.timing.iteration_s(Batch(tokens, tokens, 0, 0, 0.0)) * 1000
        assert expected - 1000 * MAX_LATE_S - 1 <= ms <= expected * 1.25 + 10
    assert timing["decode"]["seqs"] == [1, 8]
    for seqs, ms in zip(timing["decode"]["seqs"], timing["decode"]["ms"], strict=True):
        expected = profile.timing.iteration_s(Batch(0, 0, seqs, seqs * 72, 0.0)) * 1000
        assert ms == pytest.approx(expected, rel=0.1, abs=1.0)
    # block size and GPU blocks come from the server's vllm:cache_config_info, the rest are vLLM's defaults
    assert found["engine"] == {
        "block_size": 16,
        "num_gpu_blocks": profile.engine.num_gpu_blocks,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "max_model_len": profile.max_model_len,  # the server's context, from its /v1/models
    }
    assert any("cache_config_info" in note for note in found["notes"])
    assert f"engine.max_model_len = {profile.max_model_len}: the server's /v1/models" in found["notes"]
    # the calibrated profile serves that context, not what its KV cache would hold
    calibrated = parse_profile(found)
    assert calibrated.max_model_len == profile.max_model_len < calibrated.engine.num_gpu_blocks * 16


def test_the_command_writes_a_profile_the_simulator_loads(sim_url, tmp_path, capsys):
    out = tmp_path / "calibrated.json"
    code = main(
        [
            "calibrate",
            "--endpoint",
            sim_url,
            "--out",
            str(out),
            "--prefill-tokens",
            "128,512",
            "--decode-seqs",
            "1,2",
            "--decode-output-tokens",
            "8",
            "--repeats",
            "1",
            "--max-num-seqs",
            "64",
        ]
    )
    assert code == 0
    profile = load_profile(out)
    assert profile.name == "calibrated" and profile.engine.max_num_seqs == 64
    assert json.loads(out.read_text())["timing"]["prefill"]["tokens"] == [128, 512]
    captured = capsys.readouterr()
    printed = captured.out
    assert "prefill 128 tokens" in printed and captured.err == ""  # every point measured: no warning
    assert printed.endswith(
        f"wrote {out}: use it with --llm-sim-profile={out} or llmreplay sim --profile {out}\n"
    )  # = keeps pytest's rootdir


SWEEP = ["--prefill-tokens", "128", "--decode-seqs", "1", "--decode-output-tokens", "8", "--repeats", "1"]


def test_a_sweep_cut_short_by_its_budget_says_what_it_left_out_and_writes_what_it_measured(sim_url, tmp_path, capsys):
    out = tmp_path / "p.json"
    sweep = [*SWEEP, "--prefill-tokens", "128,512,1024", "--decode-seqs", "1,2"]  # the last of an option counts
    # a millisecond: spent by the first point of each kind, which the sweep always measures
    assert main(["calibrate", "--endpoint", sim_url, "--out", str(out), *sweep, "--budget", "0.001"]) == 0
    printed = capsys.readouterr()
    left_out = (
        "calibration stopped at its budget of 0.001 s before measuring prefill lengths 512, 1024 and decode batch "
        "sizes 2; the profile holds the 2 points measured (its table is clamped beyond them)"
    )
    assert printed.err == f"warning: {left_out}; raise --budget to measure the rest\n"
    assert "prefill 128 tokens" in printed.out and printed.out.endswith(f"llmreplay sim --profile {out}\n")
    written = json.loads(out.read_text())
    assert written["timing"]["prefill"]["tokens"] == [128] and written["timing"]["decode"]["seqs"] == [1]
    assert written["notes"][-1] == left_out and load_profile(out).name == "p"


def test_the_out_folder_is_made_before_the_sweep(sim_url, tmp_path, capsys):
    out = tmp_path / "new" / "sub" / "p.json"
    assert main(["calibrate", "--endpoint", sim_url, "--out", str(out), *SWEEP]) == 0
    assert load_profile(out).name == "p"


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("", "error: --out: empty; expected a file for the simulator profile\n"),
        (".", "error: --out: . is a folder; expected a file for the simulator profile\n"),
        ("afile/p.json", "error: --out: afile is a file; expected a folder for the simulator profile\n"),
    ],
)
@pytest.mark.parametrize(
    "source", [["--endpoint", "URL"], ["--from-run", "run.jsonl", "--workload", "w.jsonl", "--profile", PROFILE]]
)
def test_a_bad_out_is_one_line_before_anything_is_measured(
    out, message, source, tmp_path, monkeypatch, capsys, refused_url
):
    """Checked first: neither the server (nothing listens there) nor the run file (there is none)
    is reached; once this came as a traceback after the whole sweep or fit."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    argv = [refused_url if arg == "URL" else arg for arg in source]
    assert main(["calibrate", *argv, "--out", out]) == 3  # bad input
    assert capsys.readouterr().err == message


def test_a_profile_that_cannot_be_written_after_the_sweep_is_printed_not_lost(sim_url, tmp_path, monkeypatch, capsys):
    from pytest_llmreplay.sim import calibrate as module

    folder = tmp_path / "gone"
    measure = module.calibrate

    def measure_then_lose_the_folder(*args, **kwargs):
        found = measure(*args, **kwargs)
        folder.rmdir()  # the folder went away while the server was measured
        return found

    monkeypatch.setattr(module, "calibrate", measure_then_lose_the_folder)
    assert (
        main(["calibrate", "--endpoint", sim_url, "--out", str(folder / "p.json"), *SWEEP]) == 3
    )  # bad input: the profile could not be written
    out, err = capsys.readouterr()
    assert (
        err
        == f"error: --out: cannot write {folder / 'p.json'} (No such file or directory); the profile is printed above on stdout, save it from there\n"
    )
    printed = json.loads(out[out.index("\n{\n") + 1 :])
    assert printed["name"] == "p" and printed["timing"]["prefill"]["tokens"] == [128]


def test_a_server_that_hides_its_cache_size_needs_it_given(prompts):
    with ServerThread(MockServer()) as thread:
        endpoint = HTTPEndpoint(thread.url, api="completions")
        with pytest.raises(LLMReplayError, match="num-gpu-blocks"):
            calibrate(
                endpoint,
                prompts,
                CalibrationPlan(prefill_tokens=(16,), decode_seqs=(1,), decode_output_tokens=8, repeats=1),
                "x",
            )
        # given, the sweep runs (the mock answers at once)
        plan = CalibrationPlan(
            prefill_tokens=(16, 32),
            decode_seqs=(1,),
            decode_output_tokens=8,
            repeats=1,
            engine={"num_gpu_blocks": 1000},
        )
        assert calibrate(endpoint, prompts, plan, "x")["engine"]["num_gpu_blocks"] == 1000
    # per prefill length one unmeasured warm-up request, then the repeats; then the decode batch
    assert thread.server.completions_count == 2 * (1 + 1) + 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prefill-tokens", "512,128"], "--prefill-tokens: expected increasing integers >= 1"),
        (["--decode-seqs", "1,x"], "--decode-seqs: expected comma-separated integers"),
        (["--decode-output-tokens", "2"], "--decode-output-tokens: expected at least 8"),
        (["--budget", "0"], "--budget: expected seconds > 0"),
        (["--timeout", "0"], "--timeout: expected seconds > 0"),
        (["--timeout", "-1"], "--timeout: expected seconds > 0"),
        (["--repeats", "0"], "--repeats: expected an integer >= 1"),
        # the other way's options were read by nothing, silently
        (
            ["--workload", "w.yaml", "--fit", "mfu"],
            "--workload, --fit: apply to --from-run (a recorded run), not to a live sweep",
        ),
    ],
)
def test_bad_sweep_options_are_one_clear_error(argv, message, tmp_path, capsys):
    # status 3, run's and sweep's for bad input, not 1
    assert (
        main(["calibrate", "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path / "p.json"), *argv]) == BAD_INPUT
    )
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1 and "Traceback" not in err


def test_a_live_sweeps_options_with_from_run_are_one_clear_error(tmp_path, capsys):
    argv = ["calibrate", "--from-run", "r.json", "--workload", "w.yaml", "--profile", "llama-3.1-8b-h100"]
    assert main([*argv, "--out", str(tmp_path / "p.json"), "--budget", "30", "--timeout", "5"]) == BAD_INPUT
    assert (
        capsys.readouterr().err == "error: --budget, --timeout: apply to a live sweep (--endpoint), not to --from-run\n"
    )


@pytest.mark.parametrize("argv", [[], ["--num-gpu-blocks", "100"], ["--num-gpu-blocks", "100", "--model", "m"]])
def test_a_server_that_is_not_there_is_named_as_such(argv, tmp_path, capsys, refused_url):
    """Not "does not export vllm:cache_config_info", not "pass --model", no unclosed session."""
    url = refused_url
    assert (
        main(["calibrate", "--endpoint", url, "--out", str(tmp_path / "p.json"), "--timeout", "5", *argv]) == BAD_INPUT
    )
    err = capsys.readouterr().err
    assert err.startswith(f"error: calibrate: {url}: no answer to GET /metrics (") and err.count("\n") == 1, err
    assert "is the server running?" in err
