"""The error band: a profile's uncertain parameters, read strictly, drawn over their ranges, and
``llmreplay run --sim --band N`` printing each headline figure with the band they make."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.sim.profile import load_profile, parse_profile
from pytest_llmreplay.sim.profile_band import draw_profiles
from pytest_llmreplay.sim.profile_files import available_profiles, profiles_dir
from pytest_llmreplay.sim.profile_ranges import LINK_FIELDS
from pytest_llmreplay.sim.timing import Batch

TRACE = "llmservingsim/example_trace.jsonl"  # 10 single-turn requests


def raw(name):
    return json.loads((profiles_dir() / f"{name}.json").read_text())


def test_each_roofline_profile_states_its_efficiencies_host_costs_and_structural_error_with_sources():
    for name in available_profiles():
        data = raw(name)
        if data["timing"]["kind"] != "roofline":
            continue
        profile = load_profile(name)  # the parser checks each range holds the profile's own value
        sources = {u.field: u.source for u in profile.uncertainty}
        derived = "num_gpu_blocks" not in data["engine"]  # its KV cache from a reserve: drawn too
        host = ("timing.overhead_ms", "timing.piecewise_layer_overhead_ms")
        link = LINK_FIELDS if profile.timing.communicates else ()  # measured collectives, where GPUs communicate
        assert set(sources) == {"timing.mfu", "timing.mbu", *host, *link, "timing.discrepancy"} | (
            {"engine.activation_reserve_gib"} if derived else set()
        ), name
        assert all("https://" in sources[field] for field in ("timing.mfu", "timing.mbu", *host, *link)), name
        if derived:
            assert "pull request #10511" in sources["engine.activation_reserve_gib"], name
        assert "bench/README.md" in sources["timing.discrepancy"], name  # where the error was measured
        assert profile.timing.discrepancy == 1.0  # the prediction's own: the range only widens the band


def test_the_structural_error_is_drawn_uniformly_in_its_logarithm_and_scales_every_iteration():
    data = raw("llama-3.1-8b-h100")
    data["uncertainty"] = {"timing.discrepancy": {"range": [0.5, 2.0], "source": "a test's"}}
    profile = parse_profile(data, origin="x.json")
    drawn = [p.timing.discrepancy for p in draw_profiles(profile, 200, 4)]
    expected = np.exp(np.random.default_rng(4).uniform(np.log(0.5), np.log(2.0), 200))
    assert drawn == pytest.approx(expected.tolist(), rel=1e-12)
    assert np.mean(np.array(drawn) < 1.0) == pytest.approx(0.5, abs=0.1)  # 0.5-1 as likely as 1-2
    slow = draw_profiles(profile, 1, 4)[0].timing
    batch = Batch(300, 300, 16, 4000, 0.1)
    assert slow.iteration_s(batch) == pytest.approx(profile.timing.iteration_s(batch) * slow.discrepancy, rel=1e-12)
    parts = slow.breakdown(batch)  # the parts of the drawn iteration still add up to it
    assert parts["linear_s"] + parts["attention_s"] + parts["comm_s"] + parts["overhead_s"] == pytest.approx(
        parts["total_s"], rel=1e-12
    )
    assert parts["overhead_s"] == pytest.approx(profile.timing.breakdown(batch)["overhead_s"] * slow.discrepancy)
    span = slow.decode_span_s(16, 4000, 0.1, 0.0, 3)
    assert span.tolist() == pytest.approx(
        (profile.timing.decode_span_s(16, 4000, 0.1, 0.0, 3) * slow.discrepancy).tolist()
    )


def test_draws_are_seeded_and_inside_their_ranges():
    profile = load_profile("llama-3.1-8b-h100")
    first, again, other = (draw_profiles(profile, 8, seed) for seed in (1, 1, 2))
    values = [(p.timing.mfu, p.timing.mbu, p.timing.overhead_ms) for p in first]
    assert values == [(p.timing.mfu, p.timing.mbu, p.timing.overhead_ms) for p in again]
    assert values != [(p.timing.mfu, p.timing.mbu, p.timing.overhead_ms) for p in other]
    ranges = {u.field: (u.low, u.high) for u in profile.uncertainty}
    for mfu, mbu, overhead in values:
        assert ranges["timing.mfu"][0] <= mfu <= ranges["timing.mfu"][1]
        assert ranges["timing.mbu"][0] <= mbu <= ranges["timing.mbu"][1]
        assert ranges["timing.overhead_ms"][0] <= overhead <= ranges["timing.overhead_ms"][1]
    assert profile.timing.mfu == 0.5  # the profile drawn from is left as it was


@pytest.mark.parametrize(
    ("uncertainty", "message"),
    [
        ({"timing.speed": {"range": [1, 2], "source": "s"}}, r"uncertainty\.timing\.speed: unknown field"),
        ({"timing.mfu": {"range": [0.4, 0.6]}}, r'uncertainty\.timing\.mfu: must be \{"range"'),
        ({"timing.mfu": {"range": [0.4, 0.6], "source": ""}}, r"uncertainty\.timing\.mfu\.source: must be a non-empty"),
        (
            {"timing.mfu": {"range": [0.6, 0.4], "source": "s"}},
            r"uncertainty\.timing\.mfu\.range: must be 0 < low < high <= 1",
        ),
        (
            {"timing.mbu": {"range": [0.5, 1.2], "source": "s"}},
            r"uncertainty\.timing\.mbu\.range: must be 0 < low < high <= 1",
        ),
        (
            {"timing.mfu": {"range": [0.6, 0.9], "source": "s"}},
            r"uncertainty\.timing\.mfu\.range: must hold the profile's own value 0\.5",
        ),
        ({"timing.mfu": {"range": ["a", 1], "source": "s"}}, r"uncertainty\.timing\.mfu\.range: must be \[low, high\]"),
        ([], r"uncertainty: must be an object"),
        (
            {"timing.discrepancy": {"range": [1.1, 2.0], "source": "s"}},
            r"uncertainty\.timing\.discrepancy\.range: must hold the profile's own value 1",
        ),
        (  # one GPU: no collective whose link could be drawn
            {"hardware.allreduce_latency_us": {"range": [5, 30], "source": "s"}},
            r"uncertainty\.hardware\.allreduce_latency_us: the profile's GPUs do not communicate",
        ),
    ],
)
def test_a_bad_uncertainty_section_names_its_field(uncertainty, message):
    data = raw("llama-3.1-8b-h100")
    data["uncertainty"] = uncertainty
    with pytest.raises(LLMReplayError, match=rf"^x\.json: {message}"):
        parse_profile(data, origin="x.json")


def test_the_links_figures_are_drawn_where_the_gpus_communicate():
    data = raw("qwen3-32b-tp2-rtx-pro-6000")
    data["uncertainty"] = {
        "hardware.interconnect_bandwidth": {"range": [2.0e10, 6.3e10], "source": "a test's"},
        "hardware.allreduce_latency_us": {"range": [5.0, 30.0], "source": "a test's"},
    }
    profile = parse_profile(data, origin="x.json")
    drawn = draw_profiles(profile, 40, 3)
    links = [(p.timing.hardware.interconnect_bandwidth, p.timing.hardware.allreduce_latency_us) for p in drawn]
    assert all(2.0e10 <= bandwidth <= 6.3e10 and 5.0 <= latency <= 30.0 for bandwidth, latency in links)
    assert len(set(links)) == 40
    model = profile.timing.model
    decode = Batch(0, 0, 64, 64 * 1000, 0.1)  # tp 2: 2 all-reduces a layer of 64 tokens' activations, ring factor 1
    for drawn_profile, (bandwidth, latency) in zip(drawn, links, strict=True):
        activations = 64 * model.hidden_size * model.dtype_bytes
        expected = 2 * model.layers * (latency / 1e6 + activations / bandwidth)
        assert drawn_profile.timing.breakdown(decode)["comm_s"] == pytest.approx(expected, rel=1e-12)
    assert (
        profile.timing.hardware.interconnect_bandwidth == data["hardware"]["interconnect_bandwidth"]
    )  # left as it was


@pytest.mark.parametrize("field", ["timing.mbu", "hardware.interconnect_bandwidth"])
def test_the_roofline_fields_need_a_roofline(field):
    data = raw("dynamo-mocker-polynomial")
    data["uncertainty"] = {field: {"range": [0.5, 0.9], "source": "s"}}
    with pytest.raises(LLMReplayError, match=rf"uncertainty\.{field}: the profile's timing model has no such"):
        parse_profile(data, origin="x.json")


def test_the_band_is_the_10th_to_90th_percentile_of_the_draws(capsys, tmp_path, trace_data):
    """A front end uncertain over 10-30 ms delays every request's arrival at the engine by the same
    amount, so each draw's TTFT p50 is the TTFT p50 without a front end plus the drawn front end:
    the band printed is that plus the 10th and 90th percentiles of the seeded draws."""
    data = raw("dynamo-mocker-polynomial")
    data["timing"]["frontend_ms"] = 20.0
    data["uncertainty"] = {"timing.frontend_ms": {"range": [10.0, 30.0], "source": "a test's"}}
    path = tmp_path / "fe.json"
    path.write_text(json.dumps(data))
    trace = str(trace_data / TRACE)
    assert main(["run", trace, "--sim", str(path), "--seed", "3"]) == 0
    assert "Error band" not in capsys.readouterr().out  # off by default
    del data["uncertainty"], data["timing"]["frontend_ms"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    assert main(["run", trace, "--sim", str(bare), "--seed", "3", "--out", str(tmp_path / "bare")]) == 0
    ttft = json.loads((tmp_path / "bare" / "result.json").read_text())["summary"]["ttft"]["p50"] * 1000
    capsys.readouterr()
    assert main(["run", trace, "--sim", str(path), "--seed", "3", "--band", "10", "--out", str(tmp_path / "fe")]) == 0
    out = capsys.readouterr().out
    assert "Error band: 10 draws of the profile's uncertain parameters (timing.frontend_ms 10-30)" in out
    found = re.search(r"^  TTFT p50 ([\d.]+) ms \(([\d.]+)-([\d.]+)\)$", out, re.M)
    assert found, out
    drawn = np.random.default_rng(3).uniform(10.0, 30.0, 10)
    assert float(found[1]) == pytest.approx(ttft + 20.0, rel=1e-3)
    assert float(found[2]) == pytest.approx(ttft + np.percentile(drawn, 10), rel=1e-3)
    assert float(found[3]) == pytest.approx(ttft + np.percentile(drawn, 90), rel=1e-3)
    for label in ("TTFT p90", "TPOT mean", "TPOT p50", "latency p50", "requests/s", "output tok/s"):
        assert re.search(rf"^  {label} \S+ \S* ?\([\d.,]+-[\d.,]+\)$", out, re.M), label
    stored = json.loads((tmp_path / "fe" / "result.json").read_text())["band"]  # the band kept with the result
    assert stored["draws"] == 10 and stored["parameters"] == {"timing.frontend_ms": [10.0, 30.0]}
    low, high = stored["figures"]["ttft.p50"]
    assert (low * 1000, high * 1000) == pytest.approx((float(found[2]), float(found[3])), rel=1e-3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--endpoint", "http://127.0.0.1:9", "--band", "5"],
            "--band: draws a simulator profile's uncertain parameters; give --sim PROFILE",
        ),
        (["--sim", "llama-3.1-8b-h100", "--band", "2"], "--band: expected at least 10 draws"),
        (
            ["--sim", "dynamo-mocker-polynomial", "--band", "10"],
            "--band: profile 'dynamo-mocker-polynomial' states no uncertain parameters",
        ),
    ],
)
def test_a_band_that_cannot_run_is_one_line_before_the_replay(capsys, trace_data, argv, message):
    assert main(["run", str(trace_data / TRACE), *argv]) != 0
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err
    assert "Per-trace metrics" not in out  # refused before replaying


def test_a_drawn_reserve_sizes_each_draws_kv_cache_as_vllm_would():
    """``engine.activation_reserve_gib`` drawn: each draw's num_gpu_blocks is derived from its
    reserve at the profile's own utilization; the prediction keeps the profile's own."""
    from pytest_llmreplay.sim.kv_memory import derive_num_gpu_blocks
    from pytest_llmreplay.sim.profile_band import draw

    profile = load_profile("llama-3.1-8b-rtx-4090")
    assert profile.memory_plan == (0.9, 0.6, 1.7) and profile.engine.num_gpu_blocks == 2217
    rng = np.random.default_rng(5)
    reserves = [
        {u.field: draw(rng, u) for u in profile.uncertainty}["engine.activation_reserve_gib"] for _ in range(30)
    ]
    blocks = [
        derive_num_gpu_blocks(profile.model, profile.hardware, 16, 0.9, r + 1.7) for r in reserves
    ]  # + CUDA graphs
    assert [p.engine.num_gpu_blocks for p in draw_profiles(profile, 30, 5)] == blocks
    assert 963 <= min(blocks) < max(blocks) <= 2233 and len(set(blocks)) == 30  # 0.57-3.05 GiB + 1.7 GiB


def test_the_cuda_graph_reserve_is_set_aside_besides_the_activation_reserve():
    """vLLM 0.21+ subtracts its CUDA graph estimate too (``engine.cudagraph_reserve_gib``); with
    it 0, as for an earlier vLLM, the KV cache is what the activation reserve alone leaves."""
    data = raw("llama-3.1-8b-rtx-4090")
    data["engine"]["cudagraph_reserve_gib"] = 0
    profile = parse_profile(data, origin="x.json")
    assert profile.memory_plan == (0.9, 0.6, 0.0) and profile.engine.num_gpu_blocks == 3088
    data["engine"]["cudagraph_reserve_gib"] = -1
    with pytest.raises(LLMReplayError, match=r"x\.json: engine\.cudagraph_reserve_gib: must be >= 0, got -1"):
        parse_profile(data, origin="x.json")
    data["engine"]["cudagraph_reserve_gib"] = 6.0  # with the range's 3.05 GiB, more than the 4090 has left
    with pytest.raises(LLMReplayError, match=r"activation_reserve_gib\.range: its high end 3\.05 GiB leaves no memory"):
        parse_profile(data, origin="x.json")


def test_a_reserve_range_needs_a_derived_cache_and_memory_left_at_its_high_end():
    data = raw("llama-3.1-8b-rtx-4090")
    data["uncertainty"]["engine.activation_reserve_gib"]["range"] = [0.57, 9.0]
    with pytest.raises(LLMReplayError, match=r"activation_reserve_gib\.range: its high end 9 GiB leaves no memory"):
        parse_profile(data, origin="x.json")
    data = raw("llama-3.1-8b-rtx-4090")
    for key in ("gpu_memory_utilization", "activation_reserve_gib", "cudagraph_reserve_gib"):
        del data["engine"][key]
    data["engine"]["num_gpu_blocks"] = 2000
    with pytest.raises(LLMReplayError, match="gives engine.num_gpu_blocks: there is no derived KV cache"):
        parse_profile(data, origin="x.json")


@pytest.mark.parametrize("key", ["gpu_memory_utilization", "activation_reserve_gib", "cudagraph_reserve_gib"])
def test_a_memory_plan_field_beside_a_given_cache_is_refused_not_ignored(key):
    # a given num_gpu_blocks is the cache: a reserve or utilization beside it would change nothing
    data = raw("llama-3.1-8b-rtx-4090")
    plan = {
        name: data["engine"].pop(name)
        for name in ("gpu_memory_utilization", "activation_reserve_gib", "cudagraph_reserve_gib")
    }
    data["engine"].update(num_gpu_blocks=2000, **{key: plan[key]})
    with pytest.raises(LLMReplayError, match=rf"engine\.{key}: not used where engine\.num_gpu_blocks is given"):
        parse_profile(data, origin="x.json")
    del data["engine"]["num_gpu_blocks"]
    data["engine"].update(plan)
    assert parse_profile(data, origin="x.json").engine.num_gpu_blocks == 2217
