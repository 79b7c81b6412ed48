"""The simulator as an in-process endpoint, replayed on the virtual clock end to end."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.engine import EngineConfig
from pytest_llmreplay.sim.polynomial import PolynomialTiming
from pytest_llmreplay.sim.profile import Profile, load_profile
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import PIECE_CHARS, load_tokenizer
from pytest_llmreplay.workloads.workload import HashBlocks, Payload, Session, Synthetic, TokenIds, Turn, Workload


@pytest.fixture(scope="module")
def prompts():
    return PromptFactory(load_tokenizer(None))


def agent(session_id, arrival, turns=3, output=32):
    items = [Turn(600, output, Synthetic(), delay_s=0.0)]
    for _ in range(turns - 1):
        items.append(Turn(items[-1].input_tokens + output + 200, output, Synthetic(extends_previous=True), delay_s=2.0))
    return Session(session_id, arrival, tuple(items))


def offline(workload, prompts, profile="llama-3.1-8b-h100", **settings):
    endpoint = SimEndpoint(load_profile(profile) if isinstance(profile, str) else profile, prompts)
    return Result(replay(workload, endpoint, prompts, ReplaySettings(**settings), clock=VirtualClock()))


def test_agent_sessions_hit_the_cache_with_their_own_history(prompts):
    result = offline(Workload((agent("a", 0.0), agent("b", 0.5)), "test"), prompts)
    records = result.records
    assert [r.status for r in records] == ["ok"] * 6
    assert all(r.output_tokens == 32 and r.history in (None, "server") for r in records)
    later = [r for r in records if r.turn_index]
    # each later prompt starts with the previous prompt and its response: all their full blocks hit
    for record in later:
        previous = next(
            p for p in records if p.session_id == record.session_id and p.turn_index == record.turn_index - 1
        )
        assert record.cached_tokens == (previous.prompt_tokens + previous.output_tokens - 1) // 16 * 16
    assert result.summary["eligible_cache_hit_rate"]["min"] > 0.95
    assert all(r.queue_s is not None and r.queue_s >= 0 for r in records)


def test_the_same_seed_gives_identical_numbers(prompts):
    workload = Workload(tuple(agent(f"s{i}", i * 0.3) for i in range(12)), "test")
    first, second = offline(workload, prompts), offline(workload, prompts)
    assert [(r.sent_s, r.chunk_times, r.cached_tokens) for r in first.records] == [
        (r.sent_s, r.chunk_times, r.cached_tokens) for r in second.records
    ]


def test_jitter_is_deterministic_per_seed_and_keeps_mean_times(prompts):
    """Equal requests in a closed loop: with jitter the same seed repeats the run, another seed
    does not, and the mean TPOT stays within a few percent of the noise-free run."""
    workload = Workload(tuple(Session(f"r{i}", 0.0, (Turn(512, 64, Synthetic()),)) for i in range(64)), "test")
    profile = load_profile("llama-3.1-8b-h100")
    jittery = dataclasses.replace(profile, jitter=0.2)

    def run(profile, seed):
        endpoint = SimEndpoint(profile, prompts, seed=seed)
        return Result(replay(workload, endpoint, prompts, ReplaySettings(concurrency=8), clock=VirtualClock()))

    plain, first, again, other = run(profile, 0), run(jittery, 0), run(jittery, 0), run(jittery, 1)
    times = [[r.chunk_times for r in result.records] for result in (plain, first, again, other)]
    assert times[1] == times[2] and times[1] != times[3] and times[1] != times[0]
    for result in (first, other):
        assert result.summary["tpot"]["mean"] == pytest.approx(plain.summary["tpot"]["mean"], rel=0.05)


def test_an_hour_of_trace_replays_in_virtual_time(prompts):
    sessions = tuple(
        Session(f"r{i}", i * 36.0, (Turn(1024, 64, HashBlocks((i % 7, 100 + i), 512)),)) for i in range(100)
    )
    result = offline(Workload(sessions, "test"), prompts)
    assert result.run.duration_s > 3564  # the last request arrives at 3,564 s
    assert len(result.ok) == 100
    # hash ids 0-6 repeat: from the 8th request on, the first 512-token block is a cache hit
    assert [r.cached_tokens for r in result.records[7:10]] == [512, 512, 512]


def test_ttft_grows_with_load(prompts):
    light = offline(Workload(tuple(agent(f"s{i}", i * 5.0, turns=1) for i in range(10)), "test"), prompts)
    heavy = offline(Workload(tuple(agent(f"s{i}", i * 0.001, turns=1) for i in range(200)), "test"), prompts)
    assert heavy.summary["ttft"]["p50"] > 5 * light.summary["ttft"]["p50"]


def test_duration_limit_aborts_requests_in_the_engine(prompts):
    profile = Profile(
        name="slow",
        timing=PolynomialTiming(),
        engine=EngineConfig(block_size=16, num_gpu_blocks=1000, max_num_seqs=4),
        model=None,
        hardware=None,
        sources=[],
    )
    sessions = tuple(Session(f"r{i}", 0.0, (Turn(100, 500, Synthetic()),)) for i in range(8))
    endpoint = SimEndpoint(profile, prompts)
    run = replay(
        Workload(sessions, "test"), endpoint, prompts, ReplaySettings(duration_s=1.0, grace_s=0.5), clock=VirtualClock()
    )
    assert {r.status for r in run.records} == {"cancelled"}
    assert (
        endpoint.cluster.stats()["num_requests_running"] == 0 and endpoint.cluster.stats()["kv_cache_usage_perc"] == 0.0
    )


def test_iteration_time_comes_from_the_profile(prompts):
    workload = Workload((Session("one", 0.0, (Turn(1000, 2, Synthetic()),)),), "test")
    result = offline(workload, prompts, profile="dynamo-mocker-polynomial")
    record = result.records[0]
    # one prefill iteration of 1,000 uncached tokens in Dynamo's fit (ms), then one decode step
    prefill_ms = 4.209989e-07 * 1000**2 + 1.518344e-02 * 1000 + 16.50142
    assert record.first_token_s - record.sent_s == pytest.approx(prefill_ms / 1e3)
    usage = np.ceil(1001 / 64) / 16384  # blocks held while decoding, of 64 tokens each
    decode_ms = max(1.0, -25.74 * usage**2 + 54.01 * usage + 5.74)
    assert record.last_token_s - record.first_token_s == pytest.approx(decode_ms / 1e3, rel=1e-3)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"n": 2}, "http: 400 n: only 1 is supported, got 2"),
        ({"ignore_eos": "yes"}, "http: 400 ignore_eos: expected true or false, got 'yes'"),
        ({"min_tokens": 10**6}, "http: 400 min_tokens: 1000000 is more than max_tokens *"),
        ({"max_tokens": 5}, None),  # the request's own max_tokens wins, as over HTTP
        ({"min_tokens": 2, "ignore_eos": True}, None),
    ],
)
def test_extra_body_is_checked_as_the_server_checks_it(prompts, extra, error):
    """``--llm-offline --llm-extra-body`` must not pass what the simulator server refuses."""
    import fnmatch

    workload = Workload((Session("s", 0.0, (Turn(64, 8, Synthetic()),)),), "test")
    endpoint = SimEndpoint(load_profile("llama-3.1-8b-h100"), prompts, extra_body=extra)
    [record] = replay(workload, endpoint, prompts, ReplaySettings(), clock=VirtualClock()).records
    if error is None:
        assert record.status == "ok" and record.output_tokens == 8
    else:
        assert record.status == "failed" and fnmatch.fnmatch(record.error, error), record.error


def test_the_models_context_bounds_requests_as_vllm_bounds_them(prompts):
    """Llama-3.1-8B's context is 131,072 tokens (its KV cache on an H100 holds 440,112): a turn
    past it fails with vLLM's message, an output that overflows it is cut to what it leaves."""
    turns = (Turn(131_000, 200, Synthetic()), Turn(131_073, 8, Synthetic()), Turn(1_000, 8, Synthetic()))
    workload = Workload(tuple(Session(f"s{i}", float(i), (turn,)) for i, turn in enumerate(turns)), "test")
    cut, too_long, fine = replay(
        workload,
        SimEndpoint(load_profile("llama-3.1-8b-h100"), prompts),
        prompts,
        ReplaySettings(),
        clock=VirtualClock(),
    ).records
    assert cut.status == "ok" and cut.output_tokens == 72
    assert too_long.status == "failed"
    assert too_long.error.startswith(
        "http: 400 This model's maximum context length is 131072 tokens. However, your prompt contains at least 131073 input tokens"
    )
    assert fine.status == "ok" and fine.output_tokens == 8


def test_a_huge_verbatim_prompt_is_refused_without_tokenizing_it_whole(recording_tokenizer):
    """A 3M-word message (15 MB) took 2.2 GB to tokenize before vLLM's refusal: it is tokenized
    a piece at a time, only until it is past the context."""
    prompts = PromptFactory(recording_tokenizer)
    body = {"messages": [{"role": "user", "content": " ".join(["word"] * 3_000_000)}], "max_tokens": 8}
    workload = Workload((Session("s", 0.0, (Turn(None, 8, Payload(body)),)),), "test")
    [record] = replay(
        workload,
        SimEndpoint(load_profile("llama-3.1-8b-h100"), prompts),
        prompts,
        ReplaySettings(),
        clock=VirtualClock(),
    ).records
    assert record.status == "failed"
    assert record.error.startswith(
        "http: 400 This model's maximum context length is 131072 tokens. However, your prompt contains at least "
    )
    assert max(recording_tokenizer.encoded) <= PIECE_CHARS < len(body["messages"][0]["content"])


def test_token_ids_past_the_vocabulary_fail_as_the_server_refuses_them(prompts):
    """Llama-3.1-8B's vocabulary has 128,256 ids: a token-id prompt using id 128,256 fails with
    the server's 400 (``llmreplay sim`` refuses it), the largest id passes."""
    turns = (Turn(3, 4, TokenIds((1, 128_255, 2))), Turn(3, 4, TokenIds((1, 128_256, 2))))
    workload = Workload(tuple(Session(f"s{i}", float(i), (turn,)) for i, turn in enumerate(turns)), "test")
    fits, past = replay(
        workload,
        SimEndpoint(load_profile("llama-3.1-8b-h100"), prompts),
        prompts,
        ReplaySettings(),
        clock=VirtualClock(),
    ).records
    assert fits.status == "ok" and fits.output_tokens == 4
    assert past.status == "failed"
    assert past.error == "http: 400 prompt: Token id 128256 is out of vocabulary (ids 0 to 128255)"
