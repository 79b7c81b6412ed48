"""Iteration-time models and profiles, checked against figures computed by hand."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.sim.engine import EngineConfig
from pytest_llmreplay.sim.kv_memory import GIB, derive_num_gpu_blocks
from pytest_llmreplay.sim.polynomial import PolynomialTiming
from pytest_llmreplay.sim.profile import Profile, engine_timing, load_profile, parse_profile
from pytest_llmreplay.sim.profile_files import available_profiles, profiles_dir
from pytest_llmreplay.sim.roofline import HardwareSpec, ModelSpec, RooflineTiming
from pytest_llmreplay.sim.timing import Batch, JitteredTiming
from pytest_llmreplay.sim.timing_table import TableTiming


def approx(value):
    return pytest.approx(value, rel=1e-12, abs=1e-15)


def prefill(tokens, context=None):
    return Batch(
        prefill_tokens=tokens,
        prefill_context=tokens if context is None else context,
        decode_seqs=0,
        kv_tokens=0,
        kv_usage=0.0,
    )


def decode(seqs, kv_tokens, kv_usage=0.0):
    return Batch(prefill_tokens=0, prefill_context=0, decode_seqs=seqs, kv_tokens=kv_tokens, kv_usage=kv_usage)


# A made-up model and GPU where every term is easy to follow by hand: 1e9 one-byte weights, 2 layers
# of one head of size 1 (4 * L * H * d = 8 FLOPs per query-key pair; K and V of a token = 4 bytes),
# 1 TFLOP/s and 100 GB/s at 100% efficiency, no overhead.
TINY = ModelSpec("tiny", parameters=1e9, layers=2, hidden_size=8, heads=1, kv_heads=1, head_dim=1, dtype_bytes=1)
TOY_GPU = HardwareSpec("toy", peak_flops=1e12, memory_bandwidth=1e11, memory_bytes=1e10)


def tiny_roofline(**kwargs):
    options = {"mfu": 1.0, "mbu": 1.0, "overhead_ms": 0.0, **kwargs}
    return RooflineTiming(options.pop("model", TINY), options.pop("hardware", TOY_GPU), **options)


# ---------------------------------------------------------------- roofline


def test_roofline_big_prefill_is_compute_bound():
    timing = tiny_roofline()
    # FLOPs: 2 * 1e9 * 1000 tokens + 8 * (1000 * 1000 - 1000^2 / 2) causal pairs = 2e12 + 4e6
    # bytes: 1e9 weights + 4 * (0 decode KV + 1000 context read + 1000 written) = 1e9 + 8000
    parts = timing.breakdown(prefill(1000))
    assert parts["compute_s"] == approx(2.000004)  # / 1e12
    assert parts["memory_s"] == approx(0.01000008)  # / 1e11
    assert parts["bound"] == "compute"
    assert timing.iteration_s(prefill(1000)) == approx(2.000004)


def test_roofline_small_decode_is_memory_bound():
    timing = tiny_roofline()
    # FLOPs: 2 * 1e9 * 1 token + 8 * 100 KV pairs; bytes: 1e9 + 4 * (100 read + 1 written)
    parts = timing.breakdown(decode(1, 100))
    assert parts["compute_s"] == approx(0.0020000008)
    assert parts["memory_s"] == approx(0.01000000404)
    assert parts["bound"] == "memory"
    assert timing.iteration_s(decode(1, 100)) == approx(0.01000000404)


def test_roofline_efficiencies_overhead_and_tensor_parallel():
    timing = tiny_roofline(mfu=0.5, mbu=0.25, overhead_ms=2.0)
    assert timing.iteration_s(prefill(1000)) == approx(2.000004 / 0.5 + 0.002)
    assert timing.iteration_s(decode(1, 100)) == approx(0.01000000404 / 0.25 + 0.002)
    two = HardwareSpec("toy", peak_flops=1e12, memory_bandwidth=1e11, memory_bytes=1e10, gpus=2, tensor_parallel=2)
    assert tiny_roofline(hardware=two).iteration_s(prefill(1000)) == approx(2.000004 / 2)


def test_tensor_parallel_all_reduces_two_per_layer_on_the_critical_path():
    # 4 GPUs, 10 GB/s bus bandwidth, 20 us per all-reduce; TINY has 2 layers, hidden 8, 1-byte weights.
    # One all-reduce of T tokens: 20e-6 + T * 8 B * 2 * 3/4 / 1e10; four of them (2 per layer).
    four = HardwareSpec(
        "toy",
        peak_flops=1e12,
        memory_bandwidth=1e11,
        memory_bytes=1e10,
        gpus=4,
        tensor_parallel=4,
        interconnect_bandwidth=1e10,
        allreduce_latency_us=20.0,
    )
    timing = tiny_roofline(hardware=four)

    def comm(tokens):
        return 4 * (20e-6 + tokens * 8 * 1.5 / 1e10)

    assert timing.iteration_s(prefill(1000)) == approx(2.000004 / 4 + comm(1000))
    assert timing.breakdown(prefill(1000))["comm_s"] == approx(comm(1000))
    assert timing.iteration_s(decode(3, 300)) == approx(max(6e9 / 4e12, (1e9 + 4 * 303) / 4e11) + comm(3))
    # a decode span costs the same all-reduces per step as one iteration does
    span = timing.decode_span_s(3, 300, 0.0, 0.0, 4)
    assert span[2] == approx(timing.iteration_s(decode(3, 306)))
    # one GPU, or no bandwidth given to the Python API: nothing to all-reduce
    assert tiny_roofline().breakdown(prefill(1000))["comm_s"] == 0.0


def test_roofline_mixed_batch_and_cached_context():
    timing = tiny_roofline()
    # a 200-token chunk over 1000 tokens of context (800 cached) with 3 sequences decoding over 300 KV tokens
    batch = Batch(prefill_tokens=200, prefill_context=1000, decode_seqs=3, kv_tokens=300, kv_usage=0.5)
    flops = 2e9 * 203 + 8 * (200 * 1000 - 200 * 200 / 2 + 300)
    memory = 1e9 + 4 * (300 + 1000 + 203)
    assert timing.iteration_s(batch) == approx(max(flops / 1e12, memory / 1e11))


def test_a_step_with_prefill_tokens_pays_the_piecewise_cost_of_every_layer():
    # FULL_AND_PIECEWISE: one full graph for decodes only, piecewise graphs with eager attention
    # for any step with prefill tokens; TINY has 2 layers, 0.25 ms each
    plain, piecewise = tiny_roofline(), tiny_roofline(piecewise_layer_overhead_ms=0.25)
    mixed = Batch(prefill_tokens=200, prefill_context=1000, decode_seqs=3, kv_tokens=300, kv_usage=0.5)
    for batch in (mixed, prefill(1000)):
        assert piecewise.iteration_s(batch) == approx(plain.iteration_s(batch) + 0.0005)
        parts = piecewise.breakdown(batch)
        assert parts["overhead_s"] == approx(plain.breakdown(batch)["overhead_s"] + 0.0005)
        assert parts["linear_s"] + parts["attention_s"] + parts["comm_s"] + parts["overhead_s"] == approx(
            parts["total_s"]
        )
    assert piecewise.iteration_s(decode(3, 300)) == plain.iteration_s(decode(3, 300))
    assert np.array_equal(piecewise.decode_span_s(3, 300, 0.0, 0.0, 4), plain.decode_span_s(3, 300, 0.0, 0.0, 4))


def test_roofline_sums_the_linear_layers_and_attention_each_at_its_own_bound():
    timing = tiny_roofline()
    # a 200-token chunk beside 3 decodes over 1e9 KV tokens: the GEMMs are compute-bound, the
    # decodes' attention reads the KV (memory-bound); the step takes both, one after the other
    batch = Batch(prefill_tokens=200, prefill_context=200, decode_seqs=3, kv_tokens=10**9, kv_usage=0.5)
    linear = max(2e9 * 203 / 1e12, 1e9 / 1e11)  # 0.406 s of compute against 0.01 s of weights
    attention = max(8 * (200 * 200 - 200 * 200 / 2 + 10**9) / 1e12, 4 * (10**9 + 200 + 203) / 1e11)  # 0.04 s of KV
    assert timing.iteration_s(batch) == approx(linear + attention)
    parts = timing.breakdown(batch)
    assert (parts["linear_s"], parts["attention_s"]) == (approx(linear), approx(attention))
    assert parts["total_s"] > max(parts["compute_s"], parts["memory_s"])  # one max over the totals hid the KV reads
    # a decode span's steps are the same sums
    span = timing.decode_span_s(3, 10**9, 0.0, 0.0, 2)
    assert span[1] == approx(timing.iteration_s(decode(3, 10**9 + 3)))


def test_roofline_embedding_is_a_lookup_and_the_lm_head_runs_once_per_sequence():
    # vocab 10 x hidden 8 = 80 parameters each for the untied embedding and LM head
    model = ModelSpec(
        "tiny", parameters=1e9, layers=2, hidden_size=8, heads=1, kv_heads=1, head_dim=1, dtype_bytes=1, vocab_size=10
    )
    timing = tiny_roofline(model=model)
    flops = 2 * (1e9 - 160) * 1000 + 2 * 80 * 1 + 8 * (1000 * 1000 - 500_000)  # one logit row for the prefill
    assert timing.breakdown(prefill(1000))["compute_s"] == approx(flops / 1e12)
    memory = (1e9 - 80) + 4 * (1 + 100)  # the embedding table is not read whole
    assert timing.breakdown(decode(1, 100))["memory_s"] == approx(memory / 1e11)
    tied = ModelSpec(
        "tiny",
        parameters=1e9,
        layers=2,
        hidden_size=8,
        heads=1,
        kv_heads=1,
        head_dim=1,
        dtype_bytes=1,
        vocab_size=10,
        tie_word_embeddings=True,
    )
    assert tied.matmul_parameters == 1e9 - 80 and tied.dense_read_parameters == 1e9


def test_roofline_moe_reads_the_experts_a_batch_touches():
    # 5e9 parameters, 2e9 active, 4 experts with 1 routed per token: 4e9 in experts, 1e9 dense
    moe = ModelSpec(
        "moe",
        parameters=5e9,
        active_parameters=2e9,
        layers=2,
        hidden_size=8,
        heads=1,
        kv_heads=1,
        head_dim=1,
        dtype_bytes=1,
        experts=4,
        experts_per_token=1,
    )
    assert moe.expert_parameters == approx(4e9)
    timing = tiny_roofline(model=moe)
    # one token touches each expert with probability 1/4: 1e9 + 4e9/4 = 2e9 = the active parameters
    assert timing.breakdown(decode(1, 0))["memory_s"] == approx((2e9 + 4 * 1) / 1e11)
    # two tokens: 1 - (3/4)^2 = 7/16 of the experts
    assert timing.breakdown(decode(2, 0))["memory_s"] == approx((1e9 + 4e9 * 7 / 16 + 4 * 2) / 1e11)
    # compute stays 2 * active per token
    assert timing.breakdown(decode(2, 0))["compute_s"] == approx(2 * 2e9 * 2 / 1e12)
    # a big prefill reads (almost) every expert
    assert timing.breakdown(prefill(1000))["memory_s"] == approx((5e9 + 4 * 2000) / 1e11)  # (3/4)^1000 ~ 0


def test_roofline_empty_batch_takes_no_time():
    assert tiny_roofline(overhead_ms=5.0).iteration_s(decode(0, 0)) == 0.0


# ---------------------------------------------------------------- polynomial


def test_polynomial_matches_the_dynamo_fit():
    timing = PolynomialTiming()
    assert timing.prefill_ms(1000) == approx(4.209989e-07 * 1e6 + 15.18344 + 16.50142)  # 32.1058589 ms
    assert timing.iteration_s(prefill(1000)) == approx(0.0321058589)
    # decode at half the KV cache in use: -25.74/4 + 54.01/2 + 5.74 = 26.31 ms
    assert timing.iteration_s(decode(5, 500, kv_usage=0.5)) == approx(0.02631)
    assert timing.iteration_s(decode(5, 500, kv_usage=0.0)) == approx(0.00574)
    # a mixed batch pays both, as the mocker's loop sleeps prefill then decode
    mixed = Batch(prefill_tokens=1000, prefill_context=1000, decode_seqs=5, kv_tokens=500, kv_usage=0.5)
    assert timing.iteration_s(mixed) == approx(0.0321058589 + 0.02631)
    # no decode: no decode term, whatever the usage
    assert timing.iteration_s(Batch(1000, 1000, 0, 0, 0.9)) == approx(0.0321058589)
    assert timing.iteration_s(decode(0, 0)) == 0.0


def test_polynomial_clips_usage_and_floors_decode():
    timing = PolynomialTiming()
    assert timing.iteration_s(decode(1, 10, kv_usage=1.5)) == approx((-25.74 + 54.01 + 5.74) / 1000)
    floored = PolynomialTiming(decode_coefficients=(0.0, -100.0, 0.5), decode_floor_ms=1.0)
    assert floored.iteration_s(decode(1, 10, kv_usage=0.5)) == approx(0.001)
    custom = PolynomialTiming(prefill_coefficients=(0.0, 1.0, 2.0))
    assert custom.prefill_ms(10) == approx(12.0)


# ---------------------------------------------------------------- table


def test_table_interpolates_linearly_and_clamps():
    timing = TableTiming([100, 1000], [10, 100], [1, 64], [5, 12])
    assert timing.iteration_s(prefill(550)) == approx(0.055)
    assert timing.iteration_s(prefill(50)) == approx(0.010)  # below the first point: clamped
    assert timing.iteration_s(prefill(5000)) == approx(0.100)  # above the last point: clamped
    assert timing.iteration_s(decode(32, 999)) == approx((5 + 7 * 31 / 63) / 1000)
    assert timing.iteration_s(decode(500, 0)) == approx(0.012)
    both = Batch(prefill_tokens=550, prefill_context=550, decode_seqs=64, kv_tokens=0, kv_usage=0.0)
    assert timing.iteration_s(both) == approx(0.055 + 0.012)


def test_table_decode_grid_is_bilinear():
    # rows: 1 and 3 sequences; columns: 0 and 100 KV tokens
    timing = TableTiming([1], [1], [1, 3], [[2, 4], [6, 10]], decode_kv_tokens=[0, 100])
    assert timing.iteration_s(decode(2, 50)) == approx(((2 + 4) / 2 + (6 + 10) / 2) / 2 / 1000)  # 5.5 ms
    assert timing.iteration_s(decode(1, 100)) == approx(0.004)
    assert timing.iteration_s(decode(3, 25)) == approx(0.007)
    assert timing.iteration_s(decode(9, 10_000)) == approx(0.010)  # clamped on both axes
    single_row = TableTiming([1], [1], [8], [[2, 4]], decode_kv_tokens=[0, 100])
    assert single_row.iteration_s(decode(1, 50)) == approx(0.003)


# ---------------------------------------------------------------- decode spans


def span_cases():
    table_grid = TableTiming([1, 2048], [10, 150], [1, 8, 64], [[5, 9], [6, 11], [9, 20]], decode_kv_tokens=[0, 50_000])
    return {
        "roofline-tiny": tiny_roofline(mfu=0.6, mbu=0.8, overhead_ms=1.5),
        "roofline-llama-h100": load_profile("llama-3.1-8b-h100").timing,
        "roofline-qwen-moe": load_profile("qwen3-30b-a3b-h200").timing,
        "polynomial": PolynomialTiming(),
        "table-1d": TableTiming([1, 2048], [10, 150], [1, 8, 64], [5, 6, 9]),
        "table-2d": table_grid,
    }


@pytest.mark.parametrize("case", sorted(span_cases()))
def test_decode_span_equals_a_loop_of_iterations(case):
    timing = span_cases()[case]
    seqs, kv, usage, step, steps = 7, 300, 0.2, 0.01, 100  # usage passes 1.0 at step 80
    span = timing.decode_span_s(seqs, kv, usage, step, steps)
    loop = [timing.iteration_s(decode(seqs, kv + i * seqs, usage + i * step)) for i in range(steps)]
    assert isinstance(span, np.ndarray) and span.shape == (steps,)
    assert np.allclose(span, loop, rtol=1e-12, atol=0)
    assert timing.decode_span_s(seqs, kv, usage, step, 0).shape == (0,)


def test_roofline_decode_span_grows_with_the_kv_cache():
    timing = load_profile("llama-3.1-8b-rtx-pro-6000").timing
    span = timing.decode_span_s(64, 64 * 500, 0.05, 0.0001, 2000)
    assert np.all(np.diff(span) > 0)
    assert span[-1] > span[0] * 1.2  # 64 x 2500 tokens of KV read per step by the end vs 64 x 500


# ---------------------------------------------------------------- bundled profiles


def test_every_bundled_profile_loads_with_sources_and_sane_numbers():
    names = available_profiles()
    assert {
        "llama-3.1-8b-h100",
        "llama-3.1-8b-h200",
        "llama-3.1-8b-rtx-pro-6000",
        "llama-3.1-8b-rtx-4090",
        "qwen3-30b-a3b-h100",
        "qwen3-30b-a3b-h200",
        "qwen3-30b-a3b-rtx-pro-6000",
        "qwen3-30b-a3b-rtx-4090",
        "dynamo-mocker-polynomial",
    } <= set(names)
    for name in names:
        profile = load_profile(name)
        assert profile.name == name
        assert profile.sources, name
        assert isinstance(profile.engine, EngineConfig)
        assert profile.engine.num_gpu_blocks * profile.engine.block_size >= 32_768, name  # room for real prompts
        t = profile.timing
        one, many = t.iteration_s(decode(1, 500, 0.01)), t.iteration_s(decode(128, 128 * 500, 0.2))
        assert 0.001 < one < 0.05, name
        assert one < many < 0.2, name
        short, long = t.iteration_s(prefill(100)), t.iteration_s(prefill(2000))
        assert 0.001 < short < long < 1.0, name


def test_llama_on_h100_is_in_the_range_people_see():
    timing = load_profile("llama-3.1-8b-h100").timing
    assert 0.005 < timing.iteration_s(decode(1, 500)) < 0.010  # ~7 ms per token for one stream
    assert 0.010 < timing.iteration_s(prefill(1000)) < 0.100  # tens of ms for 1,000 prompt tokens
    assert timing.breakdown(prefill(1000))["bound"] == "compute"
    assert timing.breakdown(decode(1, 500))["bound"] == "memory"


def test_profiles_order_as_their_hardware_does():
    def decode_one(name):
        return load_profile(name).timing.iteration_s(decode(1, 1000))

    # decode is bandwidth-bound: H200 (4.8 TB/s) < H100 (3.35) < RTX PRO 6000 (1.6) < RTX 4090 (1.0)
    assert (
        decode_one("llama-3.1-8b-h200")
        < decode_one("llama-3.1-8b-h100")
        < decode_one("llama-3.1-8b-rtx-pro-6000")
        < decode_one("llama-3.1-8b-rtx-4090")
    )
    assert (
        decode_one("qwen3-30b-a3b-h200") < decode_one("qwen3-30b-a3b-h100") < decode_one("qwen3-30b-a3b-rtx-pro-6000")
    )
    # four 4090s in tensor parallel have 1.3x the FLOP/s of one RTX PRO 6000, but their prefill
    # all-reduces over PCIe without peer-to-peer cost more than the compute
    four = load_profile("qwen3-30b-a3b-rtx-4090")
    assert four.gpus == 4 and four.hardware.tensor_parallel == 4
    parts = four.timing.breakdown(prefill(2048))
    assert parts["comm_s"] > parts["compute_s"]
    assert four.timing.iteration_s(prefill(2048)) > load_profile("qwen3-30b-a3b-rtx-pro-6000").timing.iteration_s(
        prefill(2048)
    )
    # 3.3B active parameters decode faster than 8B dense on the same GPU...
    assert decode_one("qwen3-30b-a3b-h100") < decode_one("llama-3.1-8b-h100")
    # ...until the batch touches most experts: at 64 sequences the MoE reads far more weights
    qwen, llama = load_profile("qwen3-30b-a3b-h100").timing, load_profile("llama-3.1-8b-h100").timing
    assert qwen.iteration_s(decode(64, 64 * 500)) > llama.iteration_s(decode(64, 64 * 500))


def test_derived_kv_cache_size_follows_the_documented_rule():
    profile = load_profile("llama-3.1-8b-h100")
    block_bytes = 2 * 32 * 8 * 128 * 2 * 16  # 2 MiB
    expected = math.floor((85_520_809_984 * 0.9 - 8_030_261_248 * 2 - 3.0 * GIB) / block_bytes)
    assert profile.engine.num_gpu_blocks == expected == 27_507
    assert derive_num_gpu_blocks(profile.model, profile.hardware, 16, 0.9, 3.0) == expected
    assert (
        profile.engine.max_num_seqs == 256
        and profile.engine.max_num_batched_tokens == 8192
        and profile.engine.block_size == 16
    )
    assert load_profile("llama-3.1-8b-rtx-4090").engine.max_num_batched_tokens == 2048


def test_rtx_pro_6000_profile_uses_the_benchmark_engine_settings(trace_data):
    profile = load_profile("llama-3.1-8b-rtx-pro-6000")
    assert (profile.engine.max_num_seqs, profile.engine.max_num_batched_tokens, profile.engine.block_size) == (
        128,
        2048,
        16,
    )
    assert profile.engine.num_gpu_blocks == 35_913
    meta = trace_data / "llmservingsim" / "bench" / "RTXPRO6000_Llama-3.1-8B_vllm_meta.json"
    engine_args = json.loads(meta.read_text())["engine_kwargs"]
    assert engine_args["max_num_seqs"] == profile.engine.max_num_seqs
    assert engine_args["max_num_batched_tokens"] == profile.engine.max_num_batched_tokens
    assert engine_args["tensor_parallel_size"] == profile.hardware.tensor_parallel


def test_dynamo_profile_is_the_polynomial_with_the_mocker_defaults():
    profile = load_profile("dynamo-mocker-polynomial")
    assert isinstance(profile.timing, PolynomialTiming)
    assert profile.engine == EngineConfig(
        block_size=64, num_gpu_blocks=16384, max_num_seqs=256, max_num_batched_tokens=8192
    )
    assert profile.timing.iteration_s(prefill(1000)) == approx(0.0321058589)


def test_a_profile_file_by_path(tmp_path):
    data = {
        "name": "my-table",
        "engine": {"block_size": 16, "num_gpu_blocks": 1000, "max_num_seqs": 8, "max_num_batched_tokens": 512},
        "timing": {
            "kind": "table",
            "prefill": {"tokens": [0, 512], "ms": [5, 40]},
            "decode": {"seqs": [1, 8], "ms": [4, 6]},
        },
        "sources": ["measured by hand"],
    }
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    profile = load_profile(str(path))
    assert profile.name == "my-table" and profile.path == str(path)
    assert profile.timing.iteration_s(prefill(256)) == approx(0.0225)
    assert profile.model is None and profile.gpus == 1


# ---------------------------------------------------------------- errors


def bundled(name):
    return json.loads((profiles_dir() / f"{name}.json").read_text())


def error_for(tmp_path, data, filename="bad.json"):
    path = tmp_path / filename
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(LLMReplayError) as info:
        load_profile(str(path))
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_unknown_profile_name_lists_the_available_ones():
    with pytest.raises(LLMReplayError) as info:
        load_profile("llama-on-a-toaster")
    message = str(info.value)
    assert "llama-on-a-toaster" in message
    for name in available_profiles():
        assert name in message


def test_missing_profile_file():
    with pytest.raises(LLMReplayError, match="profile file not found: nowhere/x.json"):
        load_profile("nowhere/x.json")


def test_missing_field_names_file_and_field(tmp_path):
    data = bundled("llama-3.1-8b-h100")
    del data["model"]["layers"]
    assert "model.layers: missing" in error_for(tmp_path, data)
    data = bundled("dynamo-mocker-polynomial")
    del data["engine"]["num_gpu_blocks"]
    assert "engine.num_gpu_blocks: missing" in error_for(tmp_path, data)
    data = bundled("llama-3.1-8b-h100")
    del data["timing"]
    assert "timing: missing" in error_for(tmp_path, data)


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("hardware", "peak_flops", 0, "hardware.peak_flops: must be > 0, got 0"),
        ("hardware", "memory_bandwidth", -1e12, "hardware.memory_bandwidth: must be > 0"),
        ("engine", "max_num_seqs", 0, "engine.max_num_seqs: must be > 0"),
        ("engine", "block_size", 16.5, "engine.block_size: must be a whole number"),
        ("timing", "mfu", 1.5, "timing.mfu: must be <= 1"),
        ("timing", "overhead_ms", -1, "timing.overhead_ms: must be >= 0"),
        ("timing", "jitter", 1.5, "timing.jitter: must be <= 1"),
        ("timing", "jitter", -0.1, "timing.jitter: must be >= 0"),
        ("timing", "frontend_ms", -5, "timing.frontend_ms: must be >= 0"),
        ("timing", "frontend_ms", 1e6, "timing.frontend_ms: must be <= 60000"),
        ("model", "heads", "32", "model.heads: must be a number, got '32'"),
        ("model", "layer", 32, "model.layer: unknown field"),
        ("timing", "kind", "magic", "timing.kind: must be one of roofline, polynomial, table, got 'magic'"),
        ("timing", "kind", ["roofline"], "timing.kind: must be one of roofline, polynomial, table, got ['roofline']"),
        (
            "engine",
            "num_gpu_blocks",
            10**12,
            "engine.num_gpu_blocks: must be <= 10,000,000 (the simulator keeps per-block state in memory)",
        ),
        ("engine", "num_gpu_blocks", 10**400, "engine.num_gpu_blocks: must be <= 10,000,000"),
    ],
)
def test_bad_fields_are_named(tmp_path, section, key, value, expected):
    data = bundled("llama-3.1-8b-h100")
    data[section][key] = value
    assert expected in error_for(tmp_path, data)


@pytest.mark.parametrize("bad", [math.nan, math.inf, 10**400])
def test_polynomial_coefficients_must_be_finite(tmp_path, bad):
    data = bundled("dynamo-mocker-polynomial")
    data["timing"]["prefill_coefficients"] = [bad, 0, 1]
    assert "timing.prefill_coefficients: must be finite numbers" in error_for(tmp_path, data)


def test_tensor_parallel_needs_the_interconnect(tmp_path):
    data = bundled("llama-3.1-8b-h100")
    data["hardware"].update(gpus=2, tensor_parallel=2)
    assert "hardware.interconnect_bandwidth: missing (tensor_parallel 2 all-reduces every layer" in error_for(
        tmp_path, data
    )
    data["hardware"]["interconnect_bandwidth"] = 0
    assert "hardware.interconnect_bandwidth: must be > 0, got 0" in error_for(tmp_path, data)
    data["hardware"].update(interconnect_bandwidth=3e11, allreduce_latency_us=-1)
    assert "hardware.allreduce_latency_us: must be >= 0" in error_for(tmp_path, data)


def test_a_model_that_does_not_fit_is_refused(tmp_path):
    data = bundled("llama-3.1-8b-rtx-4090")
    data["model"] = copy.deepcopy(bundled("qwen3-30b-a3b-h100")["model"])
    assert "engine.num_gpu_blocks: no memory left for the KV cache" in error_for(tmp_path, data)


def test_bad_tables_and_json_are_named(tmp_path):
    data = {
        "engine": {"block_size": 16, "num_gpu_blocks": 10, "max_num_seqs": 1, "max_num_batched_tokens": 16},
        "timing": {"kind": "table", "prefill": {"tokens": [10, 5], "ms": [1, 2]}, "decode": {"seqs": [1], "ms": [1]}},
    }
    assert "timing.prefill.tokens: must be strictly increasing" in error_for(tmp_path, data)
    data["timing"]["prefill"] = {"tokens": [1, 10], "ms": [1]}
    assert "timing.prefill.ms: must have one value per point" in error_for(tmp_path, data)
    data["timing"]["prefill"] = {"tokens": [1, 10], "ms": [1, 2]}
    data["timing"]["decode"] = {"seqs": [1, 2], "kv_tokens": [0, 10], "ms": [[1, 2], [3]]}
    assert "timing.decode.ms[1]: must have 2 values" in error_for(tmp_path, data)
    assert "broken.json:1:2: not valid JSON: Expecting property name" in error_for(tmp_path, "{nope", "broken.json")


def test_parse_profile_names_its_origin():
    with pytest.raises(LLMReplayError, match=r"^inline: engine: missing$"):
        parse_profile({"timing": {"kind": "polynomial"}}, origin="inline")


def test_batch_is_immutable():
    batch = decode(1, 2)
    with pytest.raises(AttributeError):
        batch.decode_seqs = 3  # type: ignore[misc]


# -- jitter ----------------------------------------------------------------------------------------


def test_jitter_has_mean_one_and_the_asked_coefficient_of_variation():
    base = PolynomialTiming()
    jittered = JitteredTiming(base, 0.2, seed=7)
    span = jittered.decode_span_s(8, 800, 0.25, 0.0, 200_000) / base.decode_span_s(8, 800, 0.25, 0.0, 200_000)
    assert span.mean() == pytest.approx(1.0, abs=0.003)  # 0.2 / sqrt(200,000) = 0.00045 standard error
    assert span.std() / span.mean() == pytest.approx(0.2, rel=0.02)
    assert (span > 0).all()
    single = [
        jittered.iteration_s(decode(8, 800, 0.25)) / base.iteration_s(decode(8, 800, 0.25)) for _ in range(20_000)
    ]
    assert np.mean(single) == pytest.approx(1.0, abs=0.01) and np.std(single) == pytest.approx(0.2, rel=0.05)
    assert jittered.iteration_s(prefill(0)) == 0.0  # an empty batch still takes no time


def test_jitter_is_seeded_per_engine():
    profile = Profile("p", PolynomialTiming(), EngineConfig(), jitter=0.1)
    draws = [engine_timing(profile, seed).decode_span_s(4, 40, 0.1, 0.0, 5) for seed in (1, 1, 2)]
    np.testing.assert_array_equal(draws[0], draws[1])
    assert not np.array_equal(draws[0], draws[2])
    assert (
        engine_timing(Profile("p", profile.timing, EngineConfig()), 1) is profile.timing
    )  # no jitter: the model as it is


def test_jitter_in_a_profile_file(tmp_path):
    data = bundled("llama-3.1-8b-h100")
    path = tmp_path / "jittery.json"
    path.write_text(json.dumps(data))
    assert load_profile(str(path)).jitter == 0.0
    data["timing"]["jitter"] = 0.05
    path.write_text(json.dumps(data))
    assert load_profile(str(path)).jitter == 0.05
