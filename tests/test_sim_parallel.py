"""Parallel layouts and MLA in the roofline, and vLLM's data-parallel balancing, on small cases
computed by hand (formulas: sim/roofline.py, sim/profile.py, sim/cluster.py)."""

from __future__ import annotations

import json

import pytest
from test_sim_cluster import engine_index, run_cluster, stub_profile

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.sim.cluster import ClusterConfig
from pytest_llmreplay.sim.kv_memory import derive_num_gpu_blocks, weight_bytes_per_gpu
from pytest_llmreplay.sim.profile import parse_profile
from pytest_llmreplay.sim.profile_files import profile_path
from pytest_llmreplay.sim.roofline import HardwareSpec, ModelSpec, RooflineTiming
from pytest_llmreplay.sim.timing import Batch

# A toy MoE: 1e9 dense parameters and 4 experts of 1e9 each, 1 routed per token, 2-byte weights:
# N = 5e9, A = 2e9, N_exp = (N - A) / (1 - k/E) = 3e9 / 0.75 = 4e9 (16 layers, hidden 1024).
MOE = ModelSpec(
    "toy-moe",
    parameters=5e9,
    active_parameters=2e9,
    layers=16,
    hidden_size=1024,
    heads=8,
    kv_heads=2,
    head_dim=128,
    dtype_bytes=2,
    experts=4,
    experts_per_token=1,
)
GPU = dict(peak_flops=1e15, memory_bandwidth=1e12, memory_bytes=80e9)


def weights_read(timing: RooflineTiming, tokens: int) -> float:
    """Bytes of weights one engine reads for a decode step of ``tokens`` sequences (no KV)."""
    return (
        timing.breakdown(Batch(0, 0, tokens, 0, 0.0))["memory_s"]
        * timing.hardware.memory_bandwidth
        * timing.mbu
        * timing.hardware.tensor_parallel
        - MOE.kv_bytes_per_token * tokens
    )


def test_expert_parallel_halves_each_ranks_expert_bytes_at_equal_tokens_in_the_layer():
    one = RooflineTiming(MOE, HardwareSpec("g", **GPU), mbu=1.0)
    dp2 = RooflineTiming(
        MOE,
        HardwareSpec("g", **GPU, gpus=2, data_parallel=2, expert_parallel=True, interconnect_bandwidth=1e11),
        mbu=1.0,
    )
    dense = 1e9 * 2
    # one engine, 2 tokens: each expert touched with probability 1 - 0.75^2 = 0.4375 -> 8e9 B * 0.4375
    assert weights_read(one, 2) == pytest.approx(dense + 8e9 * 0.4375)
    # two EP ranks, 1 token each: 2 tokens in every MoE layer, each rank holds 2 experts (4e9 B)
    assert weights_read(dp2, 1) == pytest.approx(dense + 4e9 * 0.4375)
    assert weights_read(dp2, 1) - dense == pytest.approx((weights_read(one, 2) - dense) / 2)
    # resident weights per GPU: the dense part on each, the experts split over the two
    assert weight_bytes_per_gpu(MOE, dp2.hardware) == pytest.approx(2e9 + 8e9 / 2)
    assert weight_bytes_per_gpu(MOE, one.hardware) == pytest.approx(10e9)


def test_expert_dispatch_and_combine_cost_two_collectives_per_moe_layer():
    # dp 2, 100 tokens on this rank: all-gather and reduce-scatter each move (2 - 1) * 100 * 1024 * 2 B
    # over 1e9 B/s plus 10 us, in each of the 16 MoE layers
    hardware = HardwareSpec(
        "g", **GPU, gpus=2, data_parallel=2, expert_parallel=True, interconnect_bandwidth=1e9, allreduce_latency_us=10.0
    )
    timing = RooflineTiming(MOE, hardware)
    assert timing.breakdown(Batch(100, 100, 0, 0, 0.0))["comm_s"] == pytest.approx(
        16 * 2 * (10e-6 + 100 * 1024 * 2 / 1e9)
    )
    # four ranks: each collective moves three ranks' shares
    four = HardwareSpec(
        "g", **GPU, gpus=4, data_parallel=4, expert_parallel=True, interconnect_bandwidth=1e9, allreduce_latency_us=10.0
    )
    assert RooflineTiming(MOE, four).breakdown(Batch(100, 100, 0, 0, 0.0))["comm_s"] == pytest.approx(
        16 * 2 * (10e-6 + 3 * 100 * 1024 * 2 / 1e9)
    )
    # only the MoE layers gather: 3 of 16 dense layers (DeepSeek's first_k_dense_replace) take no part
    partly = ModelSpec(**{**MOE.__dict__, "moe_layers": 13})
    assert RooflineTiming(partly, hardware).breakdown(Batch(100, 100, 0, 0, 0.0))["comm_s"] == pytest.approx(
        13 * 2 * (10e-6 + 100 * 1024 * 2 / 1e9)
    )


def test_data_parallel_engines_of_a_dense_model_share_nothing():
    dense = ModelSpec("toy", parameters=8e9, layers=32, hidden_size=4096, heads=32, kv_heads=8, head_dim=128)
    single = RooflineTiming(dense, HardwareSpec("g", **GPU))
    replicas = RooflineTiming(
        dense, HardwareSpec("g", **GPU, gpus=2, data_parallel=2, interconnect_bandwidth=1e9, allreduce_latency_us=10.0)
    )
    batch = Batch(0, 0, 8, 8000, 0.0)
    assert replicas.breakdown(batch) == single.breakdown(batch)
    assert weight_bytes_per_gpu(dense, replicas.hardware) == 16e9


def test_mla_caches_the_latent_and_the_rope_key_per_layer():
    # DeepSeek-V3's config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64, bf16 cache
    v3 = ModelSpec(
        "deepseek-v3-like",
        parameters=671e9,
        active_parameters=37e9,
        layers=61,
        hidden_size=7168,
        heads=128,
        kv_heads=128,
        head_dim=192,
        experts=256,
        experts_per_token=8,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
    )
    assert v3.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    # heads x head dim would be 2 * 61 * 128 * 192 * 2 = 5,996,544 B: 85 times more
    assert ModelSpec(**{**v3.__dict__, "kv_lora_rank": 0, "qk_rope_head_dim": 0}).kv_bytes_per_token == 5_996_544
    # tensor parallel does not split the latent: every GPU keeps a whole token's 70,272 B
    small = ModelSpec(
        "mla",
        parameters=1e9,
        layers=2,
        hidden_size=256,
        heads=4,
        kv_heads=4,
        head_dim=64,
        kv_lora_rank=96,
        qk_rope_head_dim=32,
    )
    tp2 = HardwareSpec("g", **GPU, gpus=2, tensor_parallel=2, interconnect_bandwidth=1e11)
    assert small.kv_bytes_per_token == 2 * 128 * 2
    blocks = derive_num_gpu_blocks(small, tp2, 16, 0.5, 0.0)
    assert blocks == int((40e9 - 1e9) // (16 * 512))  # 2e9 B of weights / 2 GPUs; 512 B per token on each
    # and each TP rank reads it: the KV term of a decode step counts twice over the two GPUs
    timing = RooflineTiming(small, tp2, mbu=1.0)
    kv_only = (
        timing.breakdown(Batch(0, 0, 1, 1000, 0.0))["memory_s"] - timing.breakdown(Batch(0, 0, 1, 0, 0.0))["memory_s"]
    )
    assert kv_only == pytest.approx(2 * 512 * 1000 / 2e12)


def routed(router, arrivals, profile=None):
    cluster, jobs = run_cluster(
        ClusterConfig(engines=2, router=router), arrivals, profile or stub_profile(max_num_seqs=4)
    )
    return [engine_index(cluster, job) for job in jobs]


def test_vllm_dp_balancing_scores_waiting_four_times_running():
    # 1 s per iteration. t=0: A, B, C, D alternate over the empty engines (each pick adds 1 waiting
    # to the chosen engine's count: scores 0/0 -> e0, 4/0 -> e1, 4/4 -> e0, 8/4 -> e1).
    # A and C (2 tokens) are done at t=2; B and D (20 tokens) still run on e1.
    # t=2.5: published counts e0 [0 waiting, 0 running], e1 [0, 2]: E -> e0 (0 < 2); F -> e1, as
    # e0's 1 waiting (score 4) outweighs e1's 2 running (2); G -> e0 (4 < 6); H -> e1 (6 < 8).
    arrivals = [(0.0, [1, 2], 2), (0.0, [3, 4], 20), (0.0, [5, 6], 2), (0.0, [7, 8], 20)]
    arrivals += [(2.5, [10 + i, 20 + i], 3) for i in range(4)]
    assert routed("vllm_dp", arrivals) == [0, 1, 0, 1, 0, 1, 0, 1]
    # the fewest running + waiting sends F and G to e0 too (1 < 2, then 2 = 2: the lowest index)
    assert routed("least_loaded", arrivals) == [0, 1, 0, 1, 0, 0, 0, 1]


def test_vllm_dp_balancing_reads_counts_published_every_100ms():
    # max_num_seqs 1: a second request on an engine waits. A -> e0, B -> e1, C -> e0 (4 = 4: lowest).
    # t=0.05: the t=0 snapshot plus the front end's increments: e0 8, e1 4 -> D -> e1.
    # t=0.10: published: e0 runs A and C waits (1 + 4 = 5), e1 runs B and D waits (5): E -> e0.
    # t=0.12: the t=0.1 snapshot + E: e0 9, e1 5 -> F -> e1, although no count changed in the engines.
    arrivals = [
        (0.0, [1, 2, 3], 5),
        (0.0, [4, 5, 6], 5),
        (0.0, [7, 8, 9], 5),
        (0.05, [10, 11], 5),
        (0.1, [12, 13], 5),
        (0.12, [14, 15], 5),
    ]
    assert routed("vllm_dp", arrivals, stub_profile(max_num_seqs=1)) == [0, 1, 0, 1, 0, 1]


def dp_profile_json():
    data = json.loads(profile_path("qwen3-30b-a3b-h100").read_text())
    data["hardware"].update(
        gpus=2, data_parallel=2, expert_parallel=True, interconnect_bandwidth=1e11, allreduce_latency_us=10.0
    )
    return data


def test_a_data_parallel_profile_is_one_server_of_dp_engines_balanced_by_vllm(tmp_path):
    profile = parse_profile(dp_profile_json(), origin="dp.json")
    assert profile.hardware.data_parallel == 2 and profile.gpus == 2
    arrivals = [(0.0, list(range(100 * i, 100 * i + 40)), 4) for i in range(4)]
    cluster, jobs = run_cluster(ClusterConfig(), arrivals, profile)
    assert len(cluster.decode.engines) == 2 and cluster.decode.router == "vllm_dp"
    assert [engine_index(cluster, job) for job in jobs] == [0, 1, 0, 1]
    with pytest.raises(LLMReplayError, match="one data-parallel server of 2 engines"):
        run_cluster(ClusterConfig(engines=2), arrivals, profile)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            dict(interconnect_bandwidth=None),
            "hardware.interconnect_bandwidth: missing (data_parallel 2 of a MoE model gathers",
        ),
        (dict(gpus=1), "hardware.gpus: must be at least tensor_parallel x data_parallel = 2, got 1"),
        (dict(expert_parallel="yes"), "hardware.expert_parallel: must be true or false"),
    ],
)
def test_bad_data_parallel_settings_are_one_line(change, message):
    data = dp_profile_json()
    for key, value in change.items():
        if value is None:
            data["hardware"].pop(key)
        else:
            data["hardware"][key] = value
    with pytest.raises(LLMReplayError, match=rf"^dp.json: {message}".replace("(", r"\(").replace(")", r"\)")):
        parse_profile(data, origin="dp.json")


def test_expert_parallel_needs_a_moe_model():
    data = json.loads(profile_path("llama-3.1-8b-h100").read_text())
    data["hardware"]["expert_parallel"] = True
    with pytest.raises(LLMReplayError, match="hardware.expert_parallel: needs a MoE model"):
        parse_profile(data, origin="x.json")
