"""The bundled profiles: every one loads with a KV cache, cites where its efficiencies come from,
and the parallel layouts (data parallel + expert parallel, tensor parallel) are what their names say."""

from __future__ import annotations

import copy
import json
import math
import re

import pytest

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.sim.kv_memory import GIB
from pytest_llmreplay.sim.profile import load_profile, parse_profile
from pytest_llmreplay.sim.profile_files import available_profiles, profiles_dir
from pytest_llmreplay.sim.roofline import DEFAULT_MBU, DEFAULT_MFU

GPUS = ("h100", "h200", "rtx-pro-6000")
LAYOUTS = [f"qwen3-30b-a3b-dp2-ep-{gpu}" for gpu in GPUS] + [f"qwen3-32b-tp2-{gpu}" for gpu in GPUS]
NO_FIGURE = "no public figure"  # the phrase a profile uses where no micro-benchmark was found


def raw(name):
    return json.loads((profiles_dir() / f"{name}.json").read_text())


def roofline_profiles():
    return [name for name in available_profiles() if raw(name)["timing"]["kind"] == "roofline"]


def test_every_bundled_profile_loads_with_a_kv_cache():
    names = available_profiles()
    assert set(LAYOUTS) <= set(names)
    for name in names:
        profile = load_profile(name)
        assert profile.engine.num_gpu_blocks > 0, name


@pytest.mark.parametrize("name", roofline_profiles())
def test_each_roofline_profile_cites_its_mfu_and_mbu(name):
    data = raw(name)
    efficiency = [s for s in data["sources"] if s.lower().startswith("efficiencies")]
    assert len(efficiency) == 1, name
    text = efficiency[0]
    for share in ("mfu", "mbu"):
        value = data["timing"][share]
        # the value as the source states it ("mfu 0.80 = ..."), then a URL or the explicit phrase
        stated = re.search(rf"{share} ({value:.2f}|{value:g})\b(.*?)(?=\b(?:mfu|mbu) \d|$)", text)
        assert stated, f"{name}: {share} {value} not stated in its efficiency source"
        assert "https://" in stated.group(2) or NO_FIGURE in stated.group(2), f"{name}: {share} has no URL"


def test_each_gpus_efficiencies_are_the_h100_anchor_scaled_by_its_micro_benchmarks():
    # the micro-benchmark shares (achieved / datasheet) as quoted in the sources; the anchor is what
    # the H100 profiles ship, which is the roofline's own default
    shares = {
        "h100": (794.5 / 989.4, 2.97 / 3.35),
        "h200": (794.5 / 989.4, 4.15 / 4.8),
        "rtx-4090": (160.17 / 165.2, 921.85 / 1008),
        "rtx-pro-6000": (417.34 / 503.8, 1.452 / 1.597),
    }
    anchor = load_profile("llama-3.1-8b-h100").timing
    assert (anchor.mfu, anchor.mbu) == (DEFAULT_MFU, DEFAULT_MBU)
    gemm_h100, bandwidth_h100 = shares["h100"]
    for name in roofline_profiles():
        gemm, bandwidth = shares[next(g for g in shares if name.endswith(g))]
        timing = load_profile(name).timing
        assert timing.mfu == float(f"{anchor.mfu * gemm / gemm_h100:.3g}"), name
        assert timing.mbu == float(f"{anchor.mbu * bandwidth / bandwidth_h100:.3g}"), name


@pytest.mark.parametrize("gpu", GPUS)
def test_data_parallel_expert_parallel_layout(gpu):
    profile = load_profile(f"qwen3-30b-a3b-dp2-ep-{gpu}")
    hw = profile.hardware
    assert (hw.gpus, hw.tensor_parallel, hw.data_parallel, hw.expert_parallel) == (2, 1, 2, True)
    assert hw.interconnect_bandwidth > 0
    # by hand: N_exp = (30.5e9 - 3.3e9) / (1 - 8/128) = 29.0133e9, dense 1.4867e9; each GPU holds
    # the dense weights and half the experts; a 16-token block is 16 x 2 x 48 x 4 x 128 x 2 B
    experts = 27.2e9 / (120 / 128)
    weights = (30.5e9 - experts) * 2 + experts * 2 / 2
    expected = math.floor((hw.memory_bytes * 0.9 - weights - 4.0 * GIB) / (16 * 2 * 48 * 4 * 128 * 2))
    assert profile.engine.num_gpu_blocks == expected


@pytest.mark.parametrize("gpu", GPUS)
def test_tensor_parallel_2_layout(gpu):
    profile = load_profile(f"qwen3-32b-tp2-{gpu}")
    hw, model = profile.hardware, profile.model
    assert (hw.gpus, hw.tensor_parallel, hw.data_parallel) == (2, 2, 1)
    # Qwen3-32B config.json: 64 layers x (q, k, v, o, 3 MLP matrices, norms) + untied embedding and head
    per_layer = 5120 * 8192 + 2 * 5120 * 1024 + 8192 * 5120 + 3 * 5120 * 25600 + 2 * 128 + 2 * 5120
    assert model.parameters == 64 * per_layer + 5120 + 2 * 151936 * 5120 == 32_762_123_264
    # each GPU: half the weights, 4 of the 8 KV heads
    expected = math.floor(
        (hw.memory_bytes * 0.9 - model.parameters * 2 / 2 - 4.0 * GIB) / (16 * 2 * 64 * 8 * 128 * 2 / 2)
    )
    assert profile.engine.num_gpu_blocks == expected


@pytest.mark.parametrize("layout", ["qwen3-30b-a3b-dp2-ep-h100", "qwen3-32b-tp2-h100"])
def test_neither_layout_fits_two_rtx_4090s(tmp_path, layout):
    # why docs/simulator.md lists no RTX 4090 variant: ~32 GB of bf16 weights per GPU against 24 GB
    data = copy.deepcopy(raw(layout))
    data["hardware"].update(
        {
            k: raw("llama-3.1-8b-rtx-4090")["hardware"][k]
            for k in ("name", "peak_flops", "memory_bandwidth", "memory_bytes")
        }
    )
    path = tmp_path / "rtx-4090.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LLMReplayError, match="engine.num_gpu_blocks: no memory left for the KV cache"):
        load_profile(str(path))
    parse_profile(raw(layout))  # the same layout on the H100 loads


def test_each_gpu_profile_schedules_asynchronously_as_vllm_does_and_says_why():
    for name in roofline_profiles():
        assert load_profile(name).engine.async_scheduling, name
        assert any(s.startswith("Async scheduling") and "v0.14.0" in s for s in raw(name)["sources"]), name
    assert not load_profile("dynamo-mocker-polynomial").engine.async_scheduling  # Dynamo's mocker steps in sync


def test_async_scheduling_must_be_a_boolean():
    data = raw("llama-3.1-8b-h100")
    data["engine"]["async_scheduling"] = "yes"
    with pytest.raises(LLMReplayError, match=r"x.json: engine.async_scheduling: must be true or false, got 'yes'"):
        parse_profile(data, origin="x.json")


def test_a_profile_stored_with_a_public_run_has_that_runs_engine_and_counts_its_models_parameters():
    """bench/data/llmservingsim/*/profile.json (a model no bundled profile covers): it loads, its
    engine is the run's meta's, and its parameters are the model config's, counted as its
    sources say (the roofline's experts hold the routed ones)."""
    from pathlib import Path

    run = (
        Path(__file__).resolve().parents[1] / "bench" / "data" / "llmservingsim" / "rtxpro6000-deepseek-v3.2-exp-16l64e"
    )
    profile = load_profile(run / "profile.json")
    meta = json.loads((run / "vllm" / "meta.json").read_text())
    config = json.loads((run / "model-config.json").read_text())
    engine, kwargs = profile.engine, meta["engine_kwargs"]
    assert (engine.num_gpu_blocks, engine.block_size) == (
        meta["kv_cache"]["num_gpu_blocks"],
        meta["kv_cache"]["block_size"],
    )
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (
        kwargs["max_num_seqs"],
        kwargs["max_num_batched_tokens"],
    )
    model = profile.timing.model
    assert (model.layers, model.hidden_size, model.experts, model.experts_per_token) == (
        config["num_hidden_layers"],
        config["hidden_size"],
        config["n_routed_experts"],
        config["num_experts_per_tok"],
    )
    assert model.moe_layers == config["num_hidden_layers"] - config["first_k_dense_replace"]
    expert = 3 * config["hidden_size"] * config["moe_intermediate_size"]
    assert model.expert_parameters == model.moe_layers * config["n_routed_experts"] * expert
