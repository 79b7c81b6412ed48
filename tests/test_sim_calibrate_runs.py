"""Calibrating on several runs at once (``calibrate --from-run`` repeated): the server's front end,
the host's cost per layer and its set-up of each new request told apart from the engine, so that
a calibration carries to a model it never saw. The runs are made by the simulator with known
values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.gate.baseline import KEY_TURNS
from pytest_llmreplay.sim.calibrate_run import (
    FitRun,
    alone_share,
    calibrate_from_runs,
    errors,
    loss,
    simulate,
    with_timing,
)
from pytest_llmreplay.sim.measured_run import MeasuredRun
from pytest_llmreplay.sim.profile import parse_profile
from pytest_llmreplay.sim.profile_files import profile_path
from pytest_llmreplay.sim.timing import Batch
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer
from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload

TRUTH = {"mfu": 0.3, "mbu": 0.45, "overhead_ms": 2.0, "layer_overhead_ms": 0.25, "frontend_ms": 15.0}
ADMITTING = {**TRUTH, "admission_overhead_ms": 3.0}  # a server whose model runner sets up each new request


@pytest.fixture(scope="module")
def prompts():
    tokenizer = load_tokenizer(None)
    return lambda: PromptFactory(tokenizer)


def model(tmp_path, layers: int, share: float = 1.0) -> tuple:
    """The bundled 8B H100 profile with ``layers`` layers and ``share`` of its parameters
    (synchronous scheduling, :data:`TRUTH`'s mfu, no piecewise steps: prefill compute and the
    cost of a mixed step are not what these tests are about), as a file and as JSON."""
    data = json.loads(profile_path("llama-3.1-8b-h100").read_text())
    data["timing"]["mfu"] = TRUTH["mfu"]
    data["timing"]["piecewise_layer_overhead_ms"] = 0.0
    data["model"]["parameters"] *= share
    data["model"]["layers"] = layers
    data["engine"]["async_scheduling"] = False
    data.pop("uncertainty", None)
    path = tmp_path / f"llama-{layers}-layers.json"
    path.write_text(json.dumps(data))
    return path, data


def light() -> Workload:
    """One short request at a time: TTFT is the front end and one step, TPOT one decode step."""
    sessions = tuple(Session(f"light-{i}", i * 1.0, (Turn(16 + 48 * (i % 4), 16, Synthetic()),)) for i in range(16))
    return Workload(sessions, "light")


def loaded(seed: int) -> Workload:
    """40 requests in 4 s: batches of dozens, prefill and decode interleaved."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.1, 40))
    sessions = tuple(
        Session(f"loaded-{i}", float(t), (Turn(int(rng.integers(200, 2000)), int(rng.integers(20, 200)), Synthetic()),))
        for i, t in enumerate(arrivals)
    )
    return Workload(sessions, "loaded")


def busy() -> Workload:
    """120 requests at 20 a second, 20-100 tokens out: a dozen decoding whenever one arrives."""
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(0.05, 120))
    sessions = tuple(
        Session(f"busy-{i}", float(t), (Turn(int(rng.integers(200, 2000)), int(rng.integers(20, 100)), Synthetic()),))
        for i, t in enumerate(arrivals)
    )
    return Workload(sessions, "busy")


def truth_run(data: dict, workload: Workload, prompts, truth: dict = TRUTH) -> MeasuredRun:
    """What a client would have measured on a server with ``truth``'s timing (default :data:`TRUTH`)."""
    return simulate(parse_profile(with_timing(data, truth), origin="truth"), workload, prompts)


def test_the_roofline_pays_the_host_cost_of_every_layer_each_iteration(tmp_path):
    _, data = model(tmp_path, 16)
    batch = Batch(prefill_tokens=0, prefill_context=0, decode_seqs=4, kv_tokens=4000, kv_usage=0.1)
    plain = parse_profile(with_timing(data, {"overhead_ms": 2.0}), origin="plain").timing
    layered = parse_profile(with_timing(data, {"overhead_ms": 2.0, "layer_overhead_ms": 0.25}), origin="layered").timing
    assert layered.iteration_s(batch) - plain.iteration_s(batch) == pytest.approx(16 * 0.25e-3)
    spans = layered.decode_span_s(4, 4000, 0.1, 0.0, 3) - plain.decode_span_s(4, 4000, 0.1, 0.0, 3)
    assert np.allclose(spans, 16 * 0.25e-3)


def test_the_iteration_that_admits_a_request_pays_its_set_up_and_so_do_the_requests_decoding_in_it(tmp_path, prompts):
    _, data = model(tmp_path, 16)
    plain = parse_profile(with_timing(data, {"overhead_ms": 2.0}), origin="plain")
    admitting = parse_profile(with_timing(data, {"overhead_ms": 2.0, "admission_overhead_ms": 3.0}), origin="admitting")
    batch = Batch(prefill_tokens=300, prefill_context=300, decode_seqs=4, kv_tokens=4000, kv_usage=0.1, new_requests=2)
    assert admitting.timing.iteration_s(batch) - plain.timing.iteration_s(batch) == pytest.approx(2 * 3e-3)
    assert admitting.timing.breakdown(batch)["overhead_s"] == pytest.approx(2e-3 + 2 * 3e-3)
    assert np.array_equal(
        admitting.timing.decode_span_s(4, 4000, 0.1, 0.0, 3), plain.timing.decode_span_s(4, 4000, 0.1, 0.0, 3)
    )
    alone = light()  # each request alone: its first token 3 ms later, its other tokens as before
    before, after = simulate(plain, alone, prompts), simulate(admitting, alone, prompts)
    assert np.allclose(after.ttft - before.ttft, 3e-3) and np.allclose(after.tpot, before.tpot)
    crowded = busy()  # others arrive while a request decodes: each arrival lengthens its step by 3 ms
    before, after = simulate(plain, crowded, prompts), simulate(admitting, crowded, prompts)
    assert np.nanmean(after.tpot) > np.nanmean(before.tpot) * 1.05


def test_a_busy_run_tells_the_set_up_of_a_new_request_from_the_front_end(tmp_path, prompts):
    """Both lengthen a request's TTFT by a constant: from a light run only their sum comes back;
    with a busy run beside it, where each new request's set-up lengthens the steps of those
    decoding and the front end delays nobody else, each comes back (the model's other terms
    known)."""
    path, data = model(tmp_path, 16)
    path.write_text(
        json.dumps(with_timing(data, {"mbu": TRUTH["mbu"], "layer_overhead_ms": TRUTH["layer_overhead_ms"]}))
    )
    fitted = ("overhead_ms", "admission_overhead_ms", "frontend_ms")
    runs = [FitRun(path, workload, truth_run(data, workload, prompts, ADMITTING)) for workload in (light(), busy())]
    _, alone = calibrate_from_runs(runs[:1], prompts, fit=fitted, max_evals=20)
    total = ADMITTING["admission_overhead_ms"] + ADMITTING["frontend_ms"]
    assert alone.values["admission_overhead_ms"] + alone.values["frontend_ms"] == pytest.approx(total, rel=0.05)
    _, both = calibrate_from_runs(runs, prompts, fit=fitted, max_evals=30)
    for name in fitted:
        assert both.values[name] == pytest.approx(ADMITTING[name], rel=0.15), (name, both.values)


def test_two_models_and_a_light_run_recover_the_front_end_and_the_cost_per_layer_and_transfer(tmp_path, prompts):
    """Fitted on a 32-layer and a 16-layer model of as many parameters (a light run and a loaded
    one each), mbu and the host's and front end's terms come back, and a 24-layer model of half
    the parameters, which none of the runs served, is predicted as its own server measured it.
    (Were the weights in proportion to the layers, reading them at ``mbu`` and the host's cost
    per layer would both grow with the layers, and runs of two layer counts could not tell them
    apart.)"""
    (deep, deep_data), (shallow, shallow_data), (_, middle_data) = (
        model(tmp_path, layers, share) for layers, share in ((32, 1.0), (16, 1.0), (24, 0.5))
    )
    runs = [
        FitRun(path, workload, truth_run(data, workload, prompts))
        for path, data in ((deep, deep_data), (shallow, shallow_data))
        for workload in (light(), loaded(1))
    ]
    fitted = ("mbu", "overhead_ms", "layer_overhead_ms", "frontend_ms")
    profile, fit = calibrate_from_runs(runs, prompts, fit=fitted, max_evals=80)
    for name in fitted:
        value = TRUTH[name]
        assert fit.values[name] == pytest.approx(value, rel=0.15), name
    assert len(fit.runs) == 4 and all(max(abs(e) for e in r.fit_errors.values()) < 0.05 for r in fit.runs)
    assert (
        profile["model"]["layers"] == 32 and profile["timing"]["layer_overhead_ms"] == fit.values["layer_overhead_ms"]
    )
    other = loaded(2)
    predicted = simulate(parse_profile({**middle_data, "timing": profile["timing"]}, origin="fitted"), other, prompts)
    found = errors(predicted, truth_run(middle_data, other, prompts))
    assert abs(found["ttft", "p50"]) < 0.05 and abs(found["tpot", "mean"]) < 0.05, found


def test_one_model_cannot_give_the_cost_per_layer(tmp_path, prompts):
    path, data = model(tmp_path, 16)
    workload = light()
    run = truth_run(data, workload, prompts)
    with pytest.raises(
        LLMReplayError, match=r"^--fit: layer_overhead_ms needs runs of models with different layer counts"
    ):
        calibrate_from_runs([FitRun(path, workload, run)] * 2, prompts, fit=("overhead_ms", "layer_overhead_ms"))


def test_the_command_takes_one_workload_and_profile_per_run_or_one_for_all(tmp_path, capsys):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "\n".join(
            json.dumps({"input_toks": 100 + 10 * i, "output_toks": 20, "arrival_time_ns": int(i * 5e8)})
            for i in range(20)
        )
        + "\n"
    )
    deep, _ = model(tmp_path, 32)
    shallow, _ = model(tmp_path, 16)
    for profile, layers in ((deep, 32), (shallow, 16)):
        truth = json.loads(profile.read_text())
        truth_path = tmp_path / f"truth-{layers}.json"
        truth_path.write_text(json.dumps(with_timing(truth, TRUTH)))
        assert main(["run", str(trace), "--sim", str(truth_path), "--out", str(tmp_path / f"run-{layers}")]) == 0
    out = tmp_path / "fitted.json"
    runs = [
        "--from-run",
        str(tmp_path / "run-32" / "requests.csv"),
        "--from-run",
        str(tmp_path / "run-16" / "requests.csv"),
    ]
    capsys.readouterr()
    one_profile = ["calibrate", *runs, "--workload", str(trace), "--profile", str(deep), "--out", str(out)]
    assert main([*one_profile, "--fit", "overhead_ms,layer_overhead_ms"]) == 3
    err = capsys.readouterr().err
    assert (
        "--fit: layer_overhead_ms needs runs of models with different layer counts on the same machine (got 2 runs of 32 layers)"
        in err
    )
    assert not out.exists()
    both = [*runs, "--workload", str(trace), "--profile", str(deep), "--profile", str(shallow)]
    assert main(["calibrate", *both, "--fit", ",".join(TRUTH), "--max-evals", "24", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("| ttft p50 |") == 2 and "run-16" in printed
    written = json.loads(out.read_text())
    assert written["model"]["layers"] == 32 and set(TRUTH) <= set(written["timing"])
    assert main(["calibrate", *both, "--profile", str(deep), "--out", str(out)]) == 3
    assert "--profile: expected one, or one per --from-run (2), got 3" in capsys.readouterr().err


def test_the_loss_reads_only_the_statistics_it_is_given():
    """A client starved for CPU reads tokens in bursts: its TPOT p10 says nothing of the server,
    and a fit may leave it out."""
    keys = np.arange(20)
    tpot = np.linspace(0.01, 0.03, 20)
    measured = MeasuredRun("run", keys, np.full(20, 0.1), tpot, np.full(20, 1.0))
    bursts = tpot.copy()
    bursts[:3] = 1e-5  # three requests whose tokens came at once
    simulated = MeasuredRun("sim", keys, np.full(20, 0.1), bursts, np.full(20, 1.0))
    assert loss(simulated, measured) > 1.0
    assert loss(simulated, measured, (("ttft", "p50"), ("tpot", "p50"), ("latency", "mean"))) == 0.0


def test_a_front_end_fitted_without_a_light_run_is_said_to_be_weakly_pinned(tmp_path, prompts):
    path, data = model(tmp_path, 16)

    def notes(workload: Workload) -> list[str]:
        said: list[str] = []
        run = FitRun(path, workload, truth_run(data, workload, prompts))
        calibrate_from_runs([run], prompts, fit=("overhead_ms", "frontend_ms"), max_evals=4, progress=said.append)
        return [line for line in said if line.startswith("note:")]

    (busy,) = notes(loaded(1))
    assert busy.startswith("note: no run is light") and "another --from-run" in busy
    assert notes(light()) == []


def test_a_request_is_alone_only_when_no_other_overlaps_it_even_a_long_earlier_one():
    sessions = tuple(Session(f"s{i}", t, (Turn(8, 8, Synthetic()),)) for i, t in enumerate((0.0, 1.0, 2.0, 5.0)))
    keys = np.arange(4) * KEY_TURNS
    # the first runs 0-3 s, over the second (1-1.5 s) and the third (2-2.5 s); the fourth is alone
    run = MeasuredRun("run", keys, np.full(4, 0.1), np.full(4, 0.01), np.array([3.0, 0.5, 0.5, 0.5]))
    assert alone_share(run, Workload(sessions, "w")) == 0.25


def test_a_run_sent_at_a_recorded_load_is_alone_only_one_at_a_time_and_timestamps_follow_its_speedup():
    sessions = tuple(Session(f"s{i}", t, (Turn(8, 8, Synthetic()),)) for i, t in enumerate((0.0, 1.0, 2.0, 5.0)))
    keys = np.arange(4) * KEY_TURNS
    latency = np.array([3.0, 0.5, 0.5, 0.5])

    def share(load: dict) -> float:
        run = MeasuredRun("run", keys, np.full(4, 0.1), np.full(4, 0.01), latency, load=load)
        return alone_share(run, Workload(sessions, "w"))

    assert share({"mode": "concurrency", "concurrency": 1}) == 1.0
    assert share({"concurrency": 8}) == 0.0 and share({"rate": 2.0, "concurrency": 8}) == 0.0
    # at speedup 10 the arrivals are 0, 0.1, 0.2, 0.5 s: every request overlaps another
    assert share({"mode": "timestamps", "speedup": 10.0}) == 0.0
    assert share({"mode": "timestamps", "speedup": 1.0}) == 0.25
