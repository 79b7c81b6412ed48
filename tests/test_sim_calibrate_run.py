"""``llmreplay calibrate --from-run``: a fit that recovers the parameters a simulated run was made
with, runs on the real vLLM run end to end, and refuses unusable run files in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.sim.calibrate_run import (
    ENGINE_PARAMETERS,
    STATISTICS,
    calibrate_from_run,
    errors,
    nelder_mead,
    simulate,
    with_timing,
)
from pytest_llmreplay.sim.measured_run import MIN_REQUESTS, read_run
from pytest_llmreplay.sim.profile import load_profile, parse_profile
from pytest_llmreplay.sim.profile_files import profile_path
from pytest_llmreplay.sim.timing import Batch
from pytest_llmreplay.workloads.formats import load_workload
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

BASE = "llama-3.1-8b-h100"  # its efficiencies (the profile's own) are far from TRUTH's
TRUTH = {"mfu": 0.3, "mbu": 0.45, "overhead_ms": 4.0}


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(None)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """120 requests: a quiet minute (one at a time: overhead and weights show) then a burst
    (batches of dozens: bandwidth and compute show); lengths drawn with a fixed seed."""
    rng = np.random.default_rng(3)
    arrivals = list(np.arange(20) * 1.5) + list(30 + np.cumsum(rng.exponential(0.05, 100)))
    path = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    lines = [
        json.dumps(
            {
                "input_toks": int(rng.integers(200, 3000)),
                "output_toks": int(rng.integers(20, 300)),
                "arrival_time_ns": int(t * 1e9),
            }
        )
        for t in arrivals
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def base_json():
    return json.loads(profile_path(BASE).read_text())


def vllm_lines(run):
    """A simulated run written as vLLM's per-request records (arrival in the engine at 100 s)."""
    return [
        json.dumps(
            {
                "request_id": f"bench-{i}",
                "output_toks": 2 if math.isnan(tpot) else round((latency - ttft) / tpot) + 1,
                "queued_ts": 100.0,
                "scheduled_ts": 100.0,
                "first_token_ts": 100.0 + ttft,
                "last_token_ts": 100.0 + latency,
            }
        )
        for i, (ttft, tpot, latency) in enumerate(zip(run.ttft, run.tpot, run.latency, strict=True))
    ]


@pytest.fixture(scope="module")
def truth_run(trace, tokenizer, tmp_path_factory):
    profile = parse_profile(with_timing(base_json(), TRUTH), origin="truth")
    run = simulate(profile, load_workload(trace), lambda: PromptFactory(tokenizer))
    path = tmp_path_factory.mktemp("run") / "truth_vllm_requests.jsonl"
    path.write_text("\n".join(vllm_lines(run)) + "\n")
    return path


def test_nelder_mead_finds_the_minimum_of_a_bowl_inside_the_cube():
    target = np.array([0.2, 0.7])
    best, value, evals = nelder_mead(lambda p: float(((p - target) ** 2).sum()), np.array([0.5, 0.5]), 200)
    assert np.allclose(best, target, atol=1e-3) and value < 1e-6 and evals <= 200
    # a minimum outside the cube: the search stays on its face
    best, _, _ = nelder_mead(lambda p: float(((p - np.array([1.5, 0.3])) ** 2).sum()), np.array([0.5, 0.5]), 200)
    assert best[0] == pytest.approx(1.0) and best[1] == pytest.approx(0.3, abs=1e-3)


def test_the_fit_recovers_the_parameters_a_simulated_run_was_made_with(trace, truth_run, tokenizer):
    run = read_run(truth_run)
    assert len(run.keys) == 120
    profile, fit = calibrate_from_run(BASE, load_workload(trace), run, lambda: PromptFactory(tokenizer), max_evals=60)
    for name, value in TRUTH.items():
        assert fit.values[name] == pytest.approx(value, rel=0.1), name
        assert profile["timing"][name] == fit.values[name]
    # the base profile's defaults were far off; the fitted ones reproduce both halves of the run
    assert max(abs(fit.runs[0].start_holdout_errors[key]) for key in STATISTICS) > 0.2
    assert max(abs(fit.runs[0].fit_errors[key]) for key in STATISTICS) < 0.02
    assert max(abs(fit.runs[0].holdout_errors[key]) for key in STATISTICS) < 0.03
    assert any("calibrate --from-run" in note for note in profile["notes"])
    parse_profile(profile)  # a loadable profile


def test_a_client_timed_run_also_recovers_the_front_end_latency(trace, tmp_path, tokenizer, capsys):
    """Our own requests.csv is timed from the client's send, so the server's front end is in its
    TTFT: asked to, the fit finds the one the run was made with (in closed form, module doc). The
    same figures read as vLLM's engine-timed records cannot give it: one line says why. The engine
    schedules synchronously here: with async scheduling a loaded request's TTFT also holds the
    iteration in flight, whose overhead_ms trades against the front end along a flatter valley
    (100 replays then recover the front end within 6% but overhead_ms only within 15%). mbu and
    overhead_ms trade against each other too (a decode step reads the weights at mbu, then pays
    the overhead): what the run pins down is the steps they make together."""
    base = base_json()
    base["engine"]["async_scheduling"] = False
    base_path = tmp_path / "base.json"
    base_path.write_text(json.dumps(base))
    truth = with_timing(base, {**TRUTH, "frontend_ms": 15.0})
    truth_path = tmp_path / "truth.json"
    truth_path.write_text(json.dumps(truth))
    assert main(["run", str(trace), "--sim", str(truth_path), "--out", str(tmp_path / "run")]) == 0
    run = read_run(tmp_path / "run" / "requests.csv")
    assert run.from_client
    profile, fit = calibrate_from_run(
        base_path,
        load_workload(trace),
        run,
        lambda: PromptFactory(tokenizer),
        fit=(*ENGINE_PARAMETERS, "frontend_ms"),
        max_evals=100,
    )
    for name in ("mfu", "frontend_ms"):
        assert fit.values[name] == pytest.approx({**TRUTH, "frontend_ms": 15.0}[name], rel=0.1), name
    fitted, true = parse_profile(profile).timing, parse_profile(truth).timing
    for seqs in (1, 8, 64):  # the trace's decode batches, quiet to burst, over ~1.6k tokens of context each
        step = Batch(0, 0, seqs, seqs * 1600, 0.0)
        assert fitted.iteration_s(step) == pytest.approx(true.iteration_s(step), rel=0.03), seqs
    assert profile["timing"]["frontend_ms"] == fit.values["frontend_ms"]
    assert max(abs(fit.runs[0].holdout_errors[key]) for key in STATISTICS) < 0.03
    engine_timed = read_run(write(tmp_path / "run.jsonl", vllm_lines(run)))
    assert not engine_timed.from_client
    with pytest.raises(
        LLMReplayError,
        match=rf"^--fit: frontend_ms cannot be fitted from {engine_timed.path}: vLLM's per-request records are timed from the engine's queue",
    ):
        calibrate_from_run(
            BASE, load_workload(trace), engine_timed, lambda: PromptFactory(tokenizer), fit=("mfu", "frontend_ms")
        )


def test_the_command_fits_our_own_run_out_files(trace, tmp_path, capsys):
    truth = with_timing(base_json(), TRUTH)
    truth_path = tmp_path / "truth.json"
    truth_path.write_text(json.dumps(truth))
    assert main(["run", str(trace), "--sim", str(truth_path), "--out", str(tmp_path / "run")]) == 0
    for name in ("requests.csv", "result.json"):
        out = tmp_path / f"fitted-{name}.json"
        code = main(
            [
                "calibrate",
                "--from-run",
                str(tmp_path / "run" / name),
                "--workload",
                str(trace),
                "--profile",
                BASE,
                "--fit",
                "mbu",
                "--max-evals",
                "20",
                "--out",
                str(out),
            ]
        )
        assert code == 0
        printed = capsys.readouterr().out
        assert "| tpot mean |" in printed and "hold-out" in printed
        fitted, base = json.loads(out.read_text()), base_json()
        assert (
            fitted["timing"]["mbu"] != base["timing"]["mbu"] and fitted["timing"]["mfu"] == base["timing"]["mfu"]
        )  # only mbu was fitted
        # at least half way from the base's mbu toward the truth's (mfu and overhead left wrong)
        assert fitted["timing"]["mbu"] < (base["timing"]["mbu"] + TRUTH["mbu"]) / 2


def test_a_stored_result_is_replayed_at_the_load_it_was_run_at(trace, tmp_path, tokenizer, capsys):
    """A result.json run at --concurrency 6 (its trace is timed) pairs with a replay at concurrency
    6, not at the trace's timestamps: on the profile it was made with, the calibration starts from
    no error, and the command says how the workload is sent."""
    truth_path = tmp_path / "truth.json"
    truth_path.write_text(json.dumps(with_timing(base_json(), TRUTH)))
    out = tmp_path / "run"
    assert main(["run", str(trace), "--sim", str(truth_path), "--concurrency", "6", "--out", str(out)]) == 0
    run = read_run(out / "result.json")
    workload, prompts = load_workload(trace), lambda: PromptFactory(tokenizer)
    assert (
        run.load["mode"] == "concurrency" and run.load["concurrency"] == 6 and run.sent_as(workload) == "concurrency 6"
    )
    profile = load_profile(truth_path)
    again = errors(simulate(profile, workload, prompts, run.load), run)
    assert max(abs(again[key]) for key in STATISTICS) < 1e-4  # the stored samples are rounded
    at_timestamps = errors(simulate(profile, workload, prompts), run)
    assert max(abs(at_timestamps[key]) for key in STATISTICS) > 0.1  # the load the run recorded matters
    args = ["--workload", str(trace), "--profile", str(truth_path), "--fit", "mbu", "--max-evals", "4"]
    assert main(["calibrate", "--from-run", str(out / "result.json"), *args, "--out", str(tmp_path / "f.json")]) == 0
    printed = capsys.readouterr().out
    assert f"with {trace} sent as the run sent it, concurrency 6: fitting mbu" in printed
    assert "| ttft p50 | +0.0% |" in printed or "| ttft p50 | -0.0% |" in printed


def test_a_capacity_searchs_result_is_replayed_at_its_point_at_capacity(trace, tmp_path, tokenizer):
    """A sweep's result.json holds the point at capacity's samples and the search's settings (no
    rate): it was replayed at the trace's timestamps, 5 req/s where the point ran at 12.7, and the
    fit came out 40% off. Its point's own load (stored with the search) is the one replayed."""
    truth_path = tmp_path / "truth.json"
    truth_path.write_text(json.dumps(with_timing(base_json(), TRUTH)))
    out = tmp_path / "sweep"
    sweep = ["sweep", str(trace), "--sim", str(truth_path), "--slo", "ttft.p99<2s", "--budget", "6", "--out", str(out)]
    assert main(sweep) in (0, 1)
    record = json.loads((out / "result.json").read_text())
    [point] = [p for p in record["capacity"]["points"] if p["load"] == record["capacity"]["offered"]["low"]]
    run = read_run(out / "result.json")
    assert run.load["mode"] == "rate" and run.load["rate"] == point["settings"]["rate"] > 0
    workload = load_workload(trace)
    again = errors(simulate(load_profile(truth_path), workload, lambda: PromptFactory(tokenizer), run.load), run)
    assert max(abs(again[key]) for key in STATISTICS) < 0.05  # its own profile, at its own load (Poisson draws seeded)
    record["capacity"]["offered"]["low"] = 0.0  # no load met the SLOs: its result is a failing point's
    (out / "result.json").write_text(json.dumps(record))
    with pytest.raises(LLMReplayError, match=r"result\.json: a capacity search's result with no point at capacity"):
        read_run(out / "result.json")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mode": "bursty"}, r"settings\.mode: expected one of auto, timestamps, concurrency, rate"),
        ({"speedup": "2"}, r"settings\.speedup: expected a number > 0, got '2'"),
        ({"speedup": None}, r"settings\.speedup: expected a number > 0, got None"),
        ({"concurrency": True}, r"settings\.concurrency: expected an integer >= 1, got True"),
        ("oops", r"settings: expected an object \(the run's replay settings\), got 'oops'"),
    ],
)
def test_a_stored_result_whose_settings_cannot_be_replayed_is_refused_naming_the_file(
    trace, tmp_path, settings, message
):
    out = tmp_path / "run"
    assert main(["run", str(trace), "--sim", BASE, "--out", str(out)]) == 0
    record = json.loads((out / "result.json").read_text())
    record["settings"] = {**record["settings"], **settings} if isinstance(settings, dict) else settings
    (out / "result.json").write_text(json.dumps(record))
    with pytest.raises(LLMReplayError, match=r"result\.json: " + message):
        read_run(out / "result.json")


def test_the_command_runs_on_the_real_vllm_run(tmp_path, capsys, trace_data):
    data = trace_data / "llmservingsim"
    out = tmp_path / "rtx.json"
    code = main(
        [
            "calibrate",
            "--from-run",
            str(data / "bench" / "RTXPRO6000_Llama-3.1-8B_vllm_requests.jsonl"),
            "--workload",
            str(data / "sharegpt-llama-3.1-8b-300-sps10.jsonl.gz"),
            "--profile",
            "llama-3.1-8b-rtx-pro-6000",
            "--fit",
            "mbu,overhead_ms",
            "--max-evals",
            "4",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "300 requests" in printed
    assert all(f"| {metric} {stat} |" in printed for metric, stat in STATISTICS)
    fitted = json.loads(out.read_text())
    assert (
        fitted["name"] == out.stem
    )  # as --help says: two calibrations were one name, one endpoint (a new user's trial)
    # the fitted fields' spec ranges go (they stated how sure the replaced values were), and the structural
    # error measured for the values from specs; those of the fields not fitted stay
    kept = ["timing.mfu", "timing.piecewise_layer_overhead_ms"]
    assert list(fitted["uncertainty"]) == kept
    assert [u.field for u in load_profile(out).uncertainty] == kept


def write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = {"output_toks": 10, "queued_ts": 1.0, "scheduled_ts": 1.1, "first_token_ts": 1.2, "last_token_ts": 2.0}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"first_token_ts": None}, "missing first_token_ts"),
        ({"scheduled_ts": 1.5}, "times out of order"),
        ({"output_toks": "ten"}, "output_toks: expected a number"),
    ],
)
def test_an_unusable_vllm_run_is_one_line_naming_the_file_and_line(tmp_path, change, message):
    bad = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path = write(tmp_path / "run.jsonl", [json.dumps(GOOD)] * 3 + [json.dumps(bad)] + [json.dumps(GOOD)] * 10)
    with pytest.raises(LLMReplayError, match=rf"^{path}:4: .*{message}") as caught:
        read_run(path)
    assert "\n" not in str(caught.value)


def test_a_key_given_twice_in_a_run_file_is_refused(tmp_path):
    # as every JSON workload format refuses it: the second value would win in silence
    twice = json.dumps(GOOD)[:-1] + ', "first_token_ts": 1.9}'
    path = write(tmp_path / "run.jsonl", [json.dumps(GOOD)] * 2 + [twice] + [json.dumps(GOOD)] * 10)
    with pytest.raises(LLMReplayError, match=rf"^{path}:3: duplicate key 'first_token_ts'$"):
        read_run(path)
    result = write(tmp_path / "result.json", ['{"samples": {}, "sample_keys": {}, "samples": {}}'])
    with pytest.raises(LLMReplayError, match=rf"^{result}: duplicate key 'samples'$"):
        read_run(result)
    huge = write(tmp_path / "huge.jsonl", [json.dumps(GOOD)[:-1] + ', "extra": ' + "9" * 5000 + "}"])
    with pytest.raises(LLMReplayError, match=rf"^{huge}:1: not valid JSON: .*4300"):
        read_run(huge)
    broken = write(tmp_path / "broken.json", ["{", '"samples": '])
    with pytest.raises(LLMReplayError, match=rf"^{broken}:3:1: not valid JSON: Expecting value"):
        read_run(broken)


def test_too_few_requests_and_missing_columns_are_refused(tmp_path):
    path = write(tmp_path / "few.jsonl", [json.dumps(GOOD)] * (MIN_REQUESTS - 1))
    with pytest.raises(LLMReplayError, match=rf"{path}: {MIN_REQUESTS - 1} usable requests, at least {MIN_REQUESTS}"):
        read_run(path)
    csv = write(tmp_path / "requests.csv", ["session_index,turn_index,status,ttft,latency", "0,0,ok,0.1,1.0"])
    with pytest.raises(LLMReplayError, match=rf"{csv}: missing column tpot"):
        read_run(csv)
    with pytest.raises(LLMReplayError, match="expected a vLLM per-request .jsonl, a requests.csv or a result.json"):
        read_run(write(tmp_path / "run.txt", ["x"]))


def test_a_compressed_run_reads_as_the_plain_one(trace, tmp_path):
    # as every workload reads: run.jsonl.gz, requests.csv.gz, result.json.gz; damage names the file
    import gzip

    truth_path = tmp_path / "truth.json"
    truth_path.write_text(json.dumps(with_timing(base_json(), TRUTH)))
    assert main(["run", str(trace), "--sim", str(truth_path), "--out", str(tmp_path / "run")]) == 0
    vllm = write(
        tmp_path / "run" / "vllm.jsonl", [json.dumps({**GOOD, "last_token_ts": 2.0 + i / 10}) for i in range(12)]
    )
    for plain in (tmp_path / "run" / "requests.csv", tmp_path / "run" / "result.json", vllm):
        packed = plain.with_name(plain.name + ".gz")
        packed.write_bytes(gzip.compress(plain.read_bytes()))
        want, got = read_run(plain), read_run(packed)
        assert len(got.keys) >= MIN_REQUESTS and got.from_client == want.from_client
        for name in ("keys", "ttft", "tpot", "latency"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        packed.write_bytes(packed.read_bytes()[:-12])  # cut inside the gzip trailer
        with pytest.raises(LLMReplayError, match=rf"{packed}.*gzip data is truncated or corrupt"):
            read_run(packed)


def test_a_run_of_another_workload_does_not_pair(trace, tmp_path, tokenizer, capsys):
    path = write(tmp_path / "long.jsonl", [json.dumps(GOOD)] * 130)
    code = main(
        [
            "calibrate",
            "--from-run",
            str(path),
            "--workload",
            str(trace),
            "--profile",
            BASE,
            "--out",
            str(tmp_path / "p.json"),
        ]
    )
    assert code != 0
    err = capsys.readouterr().err
    assert f"{path}: request (session 120, turn 0) is not in the workload (120 sessions)" in err
    assert not (tmp_path / "p.json").exists()


def test_from_run_needs_a_workload_and_a_profile(trace, truth_run, tmp_path, capsys):
    code = main(["calibrate", "--from-run", str(truth_run), "--profile", BASE, "--out", str(tmp_path / "p.json")])
    assert code != 0 and "--workload: missing" in capsys.readouterr().err
    code = main(["calibrate", "--out", str(tmp_path / "p.json")])
    assert code != 0 and "--endpoint: missing" in capsys.readouterr().err


def test_a_budget_below_one_simplex_is_refused_before_the_fit_begins(trace, truth_run, tmp_path, capsys):
    code = main(
        [
            "calibrate",
            "--from-run",
            str(truth_run),
            "--workload",
            str(trace),
            "--profile",
            BASE,
            "--max-evals",
            "3",
            "--out",
            str(tmp_path / "p.json"),
        ]
    )
    assert code == 3
    captured = capsys.readouterr()
    assert "error: --max-evals: expected at least 4 (one simplex), got 3" in captured.err
    assert "calibrating" not in captured.out  # nothing said to begin that was refused


@pytest.mark.parametrize(
    ("profile", "reason"),
    [
        ("no-such-profile", "unknown profile 'no-such-profile'"),
        ("{path}", "duplicate key 'name'"),
    ],
    ids=["unknown name", "unreadable file"],
)
def test_a_profile_that_cannot_be_read_is_named_by_its_option(trace, truth_run, tmp_path, capsys, profile, reason):
    bad = write(tmp_path / "bad.json", ['{"name": "a", "name": "b"}'])
    args = ["calibrate", "--from-run", str(truth_run), "--workload", str(trace), "--profile", profile.format(path=bad)]
    assert main([*args, "--out", str(tmp_path / "p.json")]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: --profile: ") and reason in err, err


def test_a_requests_csv_sent_at_another_pace_than_the_workloads_is_refused(trace, tmp_path, capsys):
    """A requests.csv does not record how its run was sent: one made at --speedup 4 was fitted as if
    sent at the trace's own pace, and the profile written was worse than the one it started from
    (found by a new-user trial). Its sessions' start times say so; its result.json says how."""
    assert main(["run", str(trace), "--sim", BASE, "--speedup", "4", "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    args = ["calibrate", "--workload", str(trace), "--profile", BASE, "--max-evals", "4"]
    out = tmp_path / "p.json"
    assert main([*args, "--from-run", str(tmp_path / "run" / "requests.csv"), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: {tmp_path / 'run' / 'requests.csv'}: its sessions were sent at 4x the pace of the workload's timestamps ("
    ), err
    assert "calibrate from the run's result.json" in err and not out.exists()
    assert main([*args, "--from-run", str(tmp_path / "run" / "result.json"), "--out", str(out)]) == 0


def test_a_fit_that_predicts_its_hold_out_worse_is_said_so():
    from pytest_llmreplay.sim.calibrate_run import Fit, RunErrors, worse_lines

    def errors(value):
        return {key: value for key in STATISTICS}

    better = RunErrors("a.csv", errors(0.01), errors(0.02), errors(0.2), errors(0.15))
    worse = RunErrors("b.csv", errors(0.05), errors(-0.22), errors(0.2), errors(0.13))
    fit = Fit({"mfu": 0.5}, {"mfu": 0.4}, [better, worse], 10, 0.1)
    assert worse_lines(fit) == [
        "warning: b.csv: the fitted values predict its held-out half worse than the ones they started from "
        "(mean |error| 22.0% against 13.0%): check that the run is of this workload, sent as the replay sends it"
    ]
