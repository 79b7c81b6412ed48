"""Several simulated engines behind a router: routing, disaggregated prefill/decode, aborts.

Most tests use a stub timing where every iteration that computes something takes exactly 1 s of
virtual time (and an empty one 0 s, as the timing models' contract says), so each token's time is
hand-computed from the iterations and the KV transfer time.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.sim.cluster import Cluster, ClusterConfig
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.engine import EngineConfig
from pytest_llmreplay.sim.profile import Profile, load_profile
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer
from pytest_llmreplay.workloads.workload import HashBlocks, Session, Synthetic, Turn, Workload

# 8 prompt tokens * 0.25e9 B / (1 GB/s) = 2 s of KV transfer
TRANSFER = dict(kv_bytes_per_token=0.25e9, kv_transfer_gbps=1.0)


class OneSecond:
    """1 s per iteration that computes a token, 0 s for an empty one."""

    def iteration_s(self, batch):
        return 1.0 if batch.prefill_tokens + batch.decode_seqs > 0 else 0.0

    def decode_span_s(self, seqs, kv_tokens, kv_usage, usage_step, steps):
        return np.ones(steps) if seqs > 0 else np.zeros(steps)


def stub_profile(**engine):
    settings = dict(block_size=4, num_gpu_blocks=100)
    settings.update(engine)
    return Profile(name="stub", timing=OneSecond(), engine=EngineConfig(**settings))


def output(n, base=10_000):
    return [base + i for i in range(n)]


def run_cluster(config, arrivals, profile=None):
    """Route requests ``(arrival_s, prompt_ids, output_len)`` through a cluster; (cluster, jobs)."""
    clock = VirtualClock()

    async def main():
        cluster = Cluster(profile or stub_profile(), clock, config)
        cluster.start()
        jobs = []
        for at, prompt, out in arrivals:
            if at > clock.now():  # requests arriving together are routed before any engine runs
                await clock.sleep_until(at)
            jobs.append(cluster.submit(prompt, output(out, 10_000 + 100 * len(jobs))))
        await asyncio.wait_for(asyncio.gather(*(job.done for job in jobs)), timeout=10_000)
        await cluster.stop()
        return cluster, jobs

    return clock.run(main())


def engine_index(cluster, job):
    return cluster.decode.engines.index(job.engine)


# --- routers -----------------------------------------------------------------------------------


def test_round_robin_sends_request_n_to_engine_n_mod_3():
    # request n has a prompt of 4 * (n + 1) distinct tokens
    arrivals = [(0.0, list(range(1000 * n, 1000 * n + 4 * (n + 1))), 2) for n in range(7)]
    cluster, jobs = run_cluster(ClusterConfig(engines=3, router="round_robin"), arrivals)
    assert [engine_index(cluster, job) for job in jobs] == [0, 1, 2, 0, 1, 2, 0]
    # engine 0 saw requests 0, 3, 6 (4 + 16 + 28 tokens), engine 1 got 1, 4 (8 + 20), engine 2 got 2, 5 (12 + 24)
    queries = [engine.stats()["prefix_cache_queries_total"] for engine in cluster.decode.engines]
    assert queries == [48, 28, 36]
    generated = [engine.stats()["generation_tokens_total"] for engine in cluster.decode.engines]
    assert generated == [6, 4, 4]


def test_least_loaded_avoids_the_busy_engine_and_ties_go_to_the_lowest_index():
    # t=0: A (long) -> e0 (all empty); B -> e1 (e0 holds A); C -> e2. B and C finish at 2 s.
    # t=5: e0 still runs A (load 1), e1 and e2 are empty: D -> e1 (lowest of the least loaded),
    # E -> e2 (e1 now holds D), F -> e0 (all hold 1: the lowest index).
    arrivals = [
        (0.0, list(range(0, 8)), 100),
        (0.0, list(range(100, 108)), 2),
        (0.0, list(range(200, 208)), 2),
        (5.0, list(range(300, 308)), 2),
        (5.0, list(range(400, 408)), 2),
        (5.0, list(range(500, 508)), 2),
    ]
    cluster, jobs = run_cluster(ClusterConfig(engines=3, router="least_loaded"), arrivals)
    assert [engine_index(cluster, job) for job in jobs] == [0, 1, 2, 1, 2, 0]
    assert jobs[1].times == [1.0, 2.0]
    assert jobs[3].times == [6.0, 7.0]  # D started at once on an idle engine


def kv_scenario(overlap_weight):
    """X -> e0 (tie), Y -> e1 (e0 holds X's 4 waiting blocks: cost 4 + 4 > 4). At t=10 both
    engines are idle; Z shares Y's first 3 blocks (12 tokens), V shares nothing."""
    x = list(range(0, 16))
    y = list(range(100, 116))
    z = y[:12] + [900, 901, 902, 903]
    v = list(range(500, 516))
    config = ClusterConfig(engines=2, router="kv_aware", overlap_weight=overlap_weight)
    return run_cluster(config, [(0.0, x, 2), (0.0, y, 2), (10.0, z, 2), (10.0, v, 2)])


def test_kv_aware_goes_where_the_prefix_is_cached():
    cluster, (x, y, z, v) = kv_scenario(1.0)
    assert [engine_index(cluster, job) for job in (x, y)] == [0, 1]
    # Z: cost on e0 = 4 uncached blocks + 0 active; on e1 = 4 - 3 cached + 0 active = 1
    assert engine_index(cluster, z) == 1
    assert z.cached == 12
    # V: 4 uncached blocks on both, nothing active anywhere: the tie goes to e0
    assert engine_index(cluster, v) == 0 and v.cached == 0


def test_kv_aware_with_overlap_weight_0_ignores_the_cache():
    cluster, (x, y, z, v) = kv_scenario(0.0)
    # costs are active blocks only: X -> e0 (0, 0), Y -> e1 (e0 has X's 4 waiting blocks: 4 > 0)
    assert [engine_index(cluster, job) for job in (x, y)] == [0, 1]
    # at t=10 nothing is active anywhere: Z ties and goes to e0, where nothing of it is cached
    assert engine_index(cluster, z) == 0 and z.cached == 0


@pytest.fixture(scope="module")
def prompts():
    return PromptFactory(load_tokenizer(None))


def test_a_kv_aware_cluster_replays_deterministically(prompts):
    # 40 requests 0.01 s apart (they overlap on any bundled GPU): one of 5 shared documents (4 hash blocks of 64) + 2 own blocks
    def ids(i):
        doc = 10 * (i % 5)
        return (doc, doc + 1, doc + 2, doc + 3, 1000 + 2 * i, 1001 + 2 * i)

    sessions = tuple(
        Session(f"r{i}", i * 0.01, (Turn(6 * 64 - i % 5, 16 + i % 7, HashBlocks(ids(i), 64)),)) for i in range(40)
    )
    workload = Workload(sessions, "test")

    def once():
        endpoint = SimEndpoint(
            load_profile("llama-3.1-8b-h100"), prompts, cluster=ClusterConfig(engines=4, router="kv_aware")
        )
        run = replay(workload, endpoint, prompts, ReplaySettings(), clock=VirtualClock())
        records = [
            (r.session_id, r.sent_s, r.chunk_times, r.chunk_tokens, r.cached_tokens, r.end_s) for r in run.records
        ]
        return records, [engine.stats()["prompt_tokens_total"] for engine in endpoint.cluster.engines]

    (first, work), (second, _) = once(), once()
    assert first == second
    assert all(tokens > 0 for tokens in work)  # every engine did some prefill
    assert sum(cached for *_, cached, _ in first) > 0  # the shared documents hit somewhere


# --- the front end --------------------------------------------------------------------------------


def test_the_front_end_delays_each_request_by_its_latency_first_in_first_out():
    # front end 2.5 s, one sequence at a time. A and B, received at 0, reach the engine at 2.5:
    # A prefills [2.5, 3.5] and decodes [3.5, 4.5]; B, second in, waits for A: [4.5, 5.5], [5.5, 6.5]
    # (its queue time, 2 s, counts from its arrival at the engine). C is submitted at 10 but was
    # received at 9.5 (the HTTP server's parsing): it reaches the engine at 12.0, done at 14.0.
    clock = VirtualClock()

    async def main():
        cluster = Cluster(replace(stub_profile(max_num_seqs=1), frontend_ms=2500.0), clock, ClusterConfig())
        cluster.start()
        a = cluster.submit(list(range(4)), output(2))
        b = cluster.submit(list(range(100, 104)), output(2, 20_000))
        await clock.sleep_until(10.0)
        c = cluster.submit(list(range(200, 204)), output(2, 30_000), received_s=9.5)
        await asyncio.gather(a.done, b.done, c.done)
        await cluster.stop()
        return a, b, c

    a, b, c = clock.run(main())
    assert (a.times, b.times, c.times) == ([3.5, 4.5], [5.5, 6.5], [13.0, 14.0])
    assert (a.queue_s, b.queue_s, c.queue_s) == (0.0, 2.0, 0.0)


def test_a_request_abandoned_in_the_front_end_never_reaches_an_engine():
    # front end 2.5 s: A (received at 0) is aborted at 1; B (received at 0.5) still reaches the
    # engine at 3.0 and is served alone: [3, 4], [4, 5]
    clock = VirtualClock()

    async def main():
        cluster = Cluster(replace(stub_profile(), frontend_ms=2500.0), clock, ClusterConfig())
        cluster.start()
        a = cluster.submit(list(range(4)), output(2))
        await clock.sleep_until(0.5)
        b = cluster.submit(list(range(100, 104)), output(2, 20_000))
        await clock.sleep_until(1.0)
        cluster.abort(a)
        await b.done
        await clock.sleep_until(10.0)
        stats = cluster.stats()
        await cluster.stop()
        return a, b, stats

    a, b, stats = clock.run(main())
    assert a.engine is None and a.times == [] and not a.done.done()
    assert b.times == [4.0, 5.0]
    assert (stats["prompt_tokens_total"], stats["generation_tokens_total"]) == (4, 2)


# --- disaggregated prefill / decode ------------------------------------------------------------


def test_disaggregated_first_token_from_prefill_then_transfer_then_decode():
    # prefill [0, 1]: first token at 1; KV transfer 8 * 0.25 s = 2 s: [1, 3]; the decode engine
    # admits the KV whole at 3 (nothing to compute: 0 s) and decodes token 2 in [3, 4]
    cluster, (job,) = run_cluster(ClusterConfig(engines=1, prefill_engines=1, **TRANSFER), [(0.0, list(range(8)), 2)])
    assert job.times == [1.0, 4.0] and job.tokens == [1, 1]
    prefill, decode = cluster.prefill.engines[0], cluster.decode.engines[0]
    assert prefill.stats()["prompt_tokens_total"] == 8 and prefill.stats()["generation_tokens_total"] == 1
    assert decode.stats()["prompt_tokens_total"] == 0 and decode.stats()["generation_tokens_total"] == 1
    assert cluster.transfer_s_per_token == pytest.approx(0.25)


def test_disaggregated_decode_engine_makes_the_remaining_tokens_without_prefill():
    # A: 5 tokens. First at 1 (prefill engine), transfer [1, 3], then 4 decode iterations [3, 7] as one span.
    # B (arrives at 10, same prompt): prefill engine hits A's first block (4 tokens): first token at 11.
    arrivals = [(0.0, list(range(8)), 5), (10.0, list(range(8)), 3)]
    cluster, (a, b) = run_cluster(ClusterConfig(engines=1, prefill_engines=1, **TRANSFER), arrivals)
    assert a.times == [1.0, 7.0] and a.tokens == [1, 4] and a.generated == 5
    assert b.times == [11.0, 15.0] and b.tokens == [1, 2] and b.generated == 3 and b.cached == 4
    prefill, decode = cluster.prefill.engines[0].stats(), cluster.decode.engines[0].stats()
    assert prefill["generation_tokens_total"] == 2  # one token per request
    assert prefill["prompt_tokens_total"] == 8 + 8  # whole prompts, as vLLM counts (B had 4 cached)
    assert decode["generation_tokens_total"] == 4 + 2
    assert decode["prompt_tokens_total"] == 0 and decode["prefix_cache_queries_total"] == 0


def test_a_one_token_request_never_reaches_the_decode_engine():
    cluster, (job,) = run_cluster(ClusterConfig(engines=1, prefill_engines=1, **TRANSFER), [(0.0, list(range(8)), 1)])
    assert job.times == [1.0] and job.generated == 1
    assert job.engine is cluster.prefill.engines[0]
    decode = cluster.decode.engines[0].stats()
    assert (decode["prefix_cache_queries_total"], decode["generation_tokens_total"]) == (0, 0)


def test_disaggregated_round_robin_is_per_pool():
    # 2 prefill + 2 decode engines, requests 10 s apart (each done before the next): they prefill
    # on p0, p1, p0, p1 and decode on d0, d1, d0, d1 (one counter shared by both pools would
    # send request 0 to p0 then d1)
    arrivals = [(10.0 * n, list(range(100 * n, 100 * n + 8)), 2) for n in range(4)]
    cluster, jobs = run_cluster(ClusterConfig(engines=2, prefill_engines=2, **TRANSFER), arrivals)
    assert [engine_index(cluster, job) for job in jobs] == [0, 1, 0, 1]
    assert [e.stats()["prompt_tokens_total"] for e in cluster.prefill.engines] == [16, 16]
    assert [e.stats()["generation_tokens_total"] for e in cluster.decode.engines] == [2, 2]


def test_sim_endpoint_disaggregated_returns_max_tokens(prompts):
    profile = stub_profile()
    sessions = (Session("a", 0.0, (Turn(8, 2, Synthetic()),)), Session("b", 20.0, (Turn(8, 6, Synthetic()),)))
    endpoint = SimEndpoint(profile, prompts, cluster=ClusterConfig(engines=1, prefill_engines=1, **TRANSFER))
    run = replay(Workload(sessions, "test"), endpoint, prompts, ReplaySettings(), clock=VirtualClock())
    a, b = run.records
    assert [r.status for r in run.records] == ["ok", "ok"]
    assert (a.output_tokens, b.output_tokens) == (2, 6)
    assert (sum(a.chunk_tokens), sum(b.chunk_tokens)) == (2, 6)
    # a: first token after 1 prefill iteration; the second after 2 s of transfer + 1 decode iteration
    assert a.first_token_s - a.sent_s == pytest.approx(1.0)
    assert a.chunk_times[1] - a.first_token_s == pytest.approx(3.0)
    # b: 5 decode iterations after the transfer, as one span
    assert b.chunk_tokens == [1, 5] and b.last_token_s - b.first_token_s == pytest.approx(2.0 + 5.0)


def test_aborting_disaggregated_requests_releases_blocks_in_both_engines_and_the_cluster_goes_on():
    """A (8 tokens, 100 out): prefill [0, 1], transfer [1, 3], decoding from 3 (a span to 102).
    B (80 tokens) arrives at 0.5: the prefill engine's budget of 8 tokens/iteration has it
    prefilling [1, 11]. At 5.5 A decodes on the decode engine and B prefills: both hold blocks.
    Both are aborted; C arrives at 200 and must be served as on an idle cluster:
    prefill [200, 201], transfer [201, 203], decode [203, 204]."""
    clock = VirtualClock()
    profile = stub_profile(max_num_batched_tokens=8)

    async def main():
        cluster = Cluster(profile, clock, ClusterConfig(engines=1, prefill_engines=1, **TRANSFER))
        cluster.start()
        prefill, decode = cluster.prefill.engines[0], cluster.decode.engines[0]
        a = cluster.submit(list(range(8)), output(100))
        await clock.sleep_until(0.5)
        b = cluster.submit(list(range(100, 180)), output(5, 20_000))
        await clock.sleep_until(5.5)
        held = (prefill.cache.usage, decode.cache.usage)
        where = (a.engine, b.engine)
        cluster.abort(a)
        cluster.abort(b)
        released = (prefill.cache.usage, decode.cache.usage, prefill.load(), decode.load())
        await clock.sleep_until(200.0)
        c = cluster.submit(list(range(300, 308)), output(2, 30_000))
        await asyncio.wait([c.done], timeout=100)  # virtual seconds: C needs 4
        await cluster.stop()
        return held, where, released, (prefill, decode), a, c

    held, where, released, (prefill, decode), a, c = clock.run(main())
    assert where == (decode, prefill)
    assert held[0] > 0 and held[1] > 0
    assert released == (0.0, 0.0, 0, 0)
    assert c.done.done() and c.times == [201.0, 204.0]


def test_a_request_aborted_during_its_kv_transfer_never_reaches_the_decode_engine():
    # prefill [0, 1] (first token at 1), transfer [1, 3]: aborted at 2, in no engine
    clock = VirtualClock()

    async def main():
        cluster = Cluster(stub_profile(), clock, ClusterConfig(engines=1, prefill_engines=1, **TRANSFER))
        cluster.start()
        job = cluster.submit(list(range(8)), output(5))
        await clock.sleep_until(2.0)
        in_transfer = job.engine
        cluster.abort(job)
        await clock.sleep_until(10.0)
        decode = cluster.decode.engines[0].stats()
        await cluster.stop()
        return job, in_transfer, decode

    job, in_transfer, decode = clock.run(main())
    assert in_transfer is None
    assert job.times == [1.0] and job.pipeline.cancelled()
    assert (decode["generation_tokens_total"], decode["kv_cache_usage_perc"], decode["num_requests_running"]) == (
        0,
        0.0,
        0,
    )


def test_an_aborted_request_gets_no_more_tokens():
    """One engine: A (4 tokens, 20 out) prefills [0, 1] (first token at 1) and then decodes its 19
    other tokens as one span [1, 20]. Aborted at 5.5, it must not get the span's tokens at 20,
    and the engine's generation counter keeps only A's first token."""
    clock = VirtualClock()

    async def main():
        cluster = Cluster(stub_profile(), clock, ClusterConfig())
        cluster.start()
        a = cluster.submit(list(range(4)), output(20))
        await clock.sleep_until(5.5)
        cluster.abort(a)
        await clock.sleep_until(30.0)
        stats = cluster.stats()
        await cluster.stop()
        return a, stats

    a, stats = clock.run(main())
    assert a.times == [1.0] and a.tokens == [1]
    assert stats["generation_tokens_total"] == 1
    assert stats["kv_cache_usage_perc"] == 0.0


def test_a_duration_limit_cancels_disaggregated_requests_and_frees_every_engine(prompts):
    # same shape as above through the replay: at 5 + 0.5 s of grace A decodes and B prefills
    profile = stub_profile(max_num_batched_tokens=8)
    sessions = (Session("a", 0.0, (Turn(8, 100, Synthetic()),)), Session("b", 0.5, (Turn(80, 5, Synthetic()),)))
    endpoint = SimEndpoint(profile, prompts, cluster=ClusterConfig(engines=1, prefill_engines=1, **TRANSFER))
    run = replay(
        Workload(sessions, "test"), endpoint, prompts, ReplaySettings(duration_s=5.0, grace_s=0.5), clock=VirtualClock()
    )
    a, b = run.records
    assert (a.status, b.status) == ("cancelled", "cancelled")
    assert a.chunk_tokens[:1] == [1] and b.chunk_tokens == []  # A got its first token from the prefill engine
    for engine in endpoint.cluster.engines:
        assert engine.cache.usage == 0.0 and engine.load() == 0


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "name"),
    [
        (dict(router="random"), "router"),
        (dict(engines=0), "engines"),
        (dict(prefill_engines=-1), "prefill_engines"),
        (dict(kv_transfer_gbps=0.0), "kv_transfer_gbps"),
        (dict(kv_bytes_per_token=-1.0), "kv_bytes_per_token"),
        (dict(overlap_weight=-0.5), "overlap_weight"),
    ],
)
def test_cluster_config_errors_name_the_option(setting, name, prompts):
    config = ClusterConfig(**setting)
    with pytest.raises(LLMReplayError, match=rf"^{name}: "):
        config.validate()
    with pytest.raises(LLMReplayError, match=rf"^{name}: "):
        SimEndpoint(stub_profile(), prompts, cluster=config)


def test_disaggregation_without_a_model_needs_kv_bytes_per_token():
    profile = load_profile("dynamo-mocker-polynomial")
    assert profile.model is None
    with pytest.raises(LLMReplayError, match="kv_bytes_per_token") as error:
        Cluster(profile, VirtualClock(), ClusterConfig(prefill_engines=1))
    assert "dynamo-mocker-polynomial" in str(error.value)
    # given, it works: 0.5e9 B per token over 50 GB/s
    cluster = Cluster(profile, VirtualClock(), ClusterConfig(prefill_engines=1, kv_bytes_per_token=0.5e9))
    assert cluster.transfer_s_per_token == pytest.approx(0.01)


def test_a_profile_with_a_model_takes_its_kv_bytes_per_token():
    profile = load_profile("llama-3.1-8b-h100")
    cluster = Cluster(profile, VirtualClock(), ClusterConfig(prefill_engines=1, kv_transfer_gbps=50.0))
    # Llama-3.1-8B: 2 * 32 layers * 8 KV heads * 128 * 2 B = 131,072 B per token
    assert profile.model.kv_bytes_per_token == 131072
    assert cluster.transfer_s_per_token == pytest.approx(131072 / 50e9)


def test_sim_endpoint_name_and_gpus_for_a_cluster(prompts):
    profile = load_profile("llama-3.1-8b-h100")
    two_gpus = replace(profile, hardware=replace(profile.hardware, gpus=2))
    assert SimEndpoint(profile, prompts).name == "sim:llama-3.1-8b-h100"
    assert SimEndpoint(profile, prompts).gpus == 1
    many = SimEndpoint(two_gpus, prompts, cluster=ClusterConfig(engines=3, router="kv_aware"))
    assert many.name == "sim:llama-3.1-8b-h100 (x3, kv_aware)"
    assert many.gpus == 2 * 3
    disagg = SimEndpoint(two_gpus, prompts, cluster=ClusterConfig(engines=3, prefill_engines=2))
    assert disagg.name == "sim:llama-3.1-8b-h100 (2 prefill + 3 decode, round_robin)"
    assert disagg.gpus == 2 * (3 + 2)
    # no hardware: 1 GPU per engine
    assert (
        SimEndpoint(stub_profile(), prompts, cluster=ClusterConfig(engines=2, prefill_engines=1, **TRANSFER)).gpus == 3
    )
