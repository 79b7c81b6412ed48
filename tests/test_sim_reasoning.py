"""The simulator reasons: a request's first tokens streamed as reasoning (its own
``sim_reasoning_tokens``, its turn's planned reasoning, or the profile's ``reasoning``), offline
and over HTTP alike, so that TTFO and the reasoning metrics are tested without a GPU; and the
synthetic workload's ``reasoning_tokens``."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import httpx
import pytest
from mockserver import MockServer, ServerThread
from test_sim_server import serving, stream, tiny_profile

from pytest_llmreplay.errors import LLMReplayError, WorkloadError
from pytest_llmreplay.metrics.names import REASONING_METRICS
from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.replayer.clock import VirtualClock, WallClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.endpoints import EndpointRequest, HTTPEndpoint
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.profile import load_profile, parse_profile
from pytest_llmreplay.sim.profile_files import profile_path
from pytest_llmreplay.workloads.formats import write_workload
from pytest_llmreplay.workloads.formats.distribution import parse_distribution
from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate
from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload, check_limits

ITERATION_S = 0.001  # tiny_profile: every engine iteration lasts 1 ms
REASONING, ANSWER = 60, 12


def agents(sessions: int = 3, reasoning=REASONING) -> Workload:
    """Two-turn agent sessions whose every answer of ANSWER tokens follows ``reasoning`` tokens."""
    return generate(
        SyntheticSpec(
            sessions=sessions, input_tokens=48, output_tokens=ANSWER, reasoning_tokens=reasoning, turns=2, delay=0.005
        )
    )


def offline(workload, prompts, profile=None, extra_body=None, **settings) -> Result:
    endpoint = SimEndpoint(profile or tiny_profile(), prompts, extra_body=extra_body)
    return Result(replay(workload, endpoint, prompts, ReplaySettings(**settings), clock=VirtualClock()))


def over_http(url, workload, prompts, **options) -> Result:
    endpoint = HTTPEndpoint(url, reasoning_hint=True, metrics_interval_s=0, **options)
    return Result(replay(workload, endpoint, prompts, ReplaySettings(concurrency=1)))


def plain(session_id: str, output: int) -> Session:
    return Session(session_id, 0.0, (Turn(40, output, Synthetic()),))


# ---------------------------------------------------------------- the workload


def test_synthetic_reasoning_adds_to_each_answer_and_is_recorded_on_the_turn():
    turns = [turn for session in agents() for turn in session.turns]
    assert {(t.output_tokens, t.reasoning_tokens) for t in turns} == {(REASONING + ANSWER, REASONING)}
    drawn = generate(
        SyntheticSpec(sessions=50, output_tokens=8, reasoning_tokens={"dist": "uniform", "min": 0, "max": 9})
    )
    thoughts = [s.turns[0].reasoning_tokens for s in drawn]
    assert min(thoughts) == 0 and max(thoughts) == 9  # 0 is a draw like any other: no reasoning
    assert all(s.turns[0].output_tokens == 8 + s.turns[0].reasoning_tokens for s in drawn)
    # a spec without reasoning draws what it drew before reasoning existed
    assert [t.reasoning_tokens for s in generate(SyntheticSpec(sessions=3)) for t in s.turns] == [None] * 3


def test_a_turn_reasoning_more_than_its_output_is_refused():
    workload = Workload((Session("s", 0.0, (Turn(10, 5, Synthetic(), reasoning_tokens=6),)),), "test")
    with pytest.raises(WorkloadError, match=r"session 's' turn 0: reasoning tokens: 6 must be >= 0 and at most"):
        check_limits(workload, "w.jsonl")


def test_converting_reasoning_lengths_to_a_format_without_them_is_a_loss(tmp_path):
    with pytest.raises(LLMReplayError, match=r"converting to llmservingsim would lose: reasoning lengths"):
        write_workload(agents(), tmp_path / "out.jsonl", "llmservingsim")
    notes = write_workload(agents(), tmp_path / "out.jsonl", "llmservingsim", allow_loss=True)
    assert any("reasoning lengths" in note for note in notes)


# ---------------------------------------------------------------- offline


def test_ttfo_follows_ttft_by_the_reasoning_time(bundled_prompts):
    """One request at a time on 1 ms iterations: the first answer token is token REASONING + 1,
    REASONING iterations after the first (reasoning) token."""
    result = offline(agents(), bundled_prompts, concurrency=1)
    s = result.summary
    assert s["ttfo"]["min"] - s["ttft"]["max"] == pytest.approx(REASONING * ITERATION_S)
    assert s["ttfo"]["max"] - s["ttft"]["min"] == pytest.approx(REASONING * ITERATION_S)
    assert s["ttfr"]["mean"] == pytest.approx(s["ttft"]["mean"])
    assert (s["reasoning_tokens"]["mean"], s["answer_tokens"]["mean"]) == (REASONING, ANSWER)
    assert s["reasoning_decode_tps"]["mean"] == pytest.approx(1 / ITERATION_S)
    assert s["answer_decode_tps"]["mean"] == pytest.approx(1 / ITERATION_S)
    # a session's wait for its agent's answer spans the last turn's reasoning too
    for row in result.session_rows:
        last = next(r for r in result.records if r.session_index == row["session_index"] and r.turn_index == 1)
        first = next(r for r in result.records if r.session_index == row["session_index"] and r.turn_index == 0)
        assert row["ttfat"] == pytest.approx(last.first_answer_s - first.sent_s)
        assert last.first_answer_s - last.first_token_s == pytest.approx(REASONING * ITERATION_S)


def test_offline_spans_end_at_the_reasoning_and_hand_out_the_first_answer_token_alone(bundled_prompts):
    """On a real profile, under load, decode spans give many tokens per chunk; the first answer
    token still comes in a chunk of its own, right after the chunk of the last reasoning token."""
    workload = Workload(tuple(plain(f"s{i}", 300) for i in range(16)), "test")
    result = offline(
        workload, bundled_prompts, load_profile("llama-3.1-8b-h100"), extra_body={"sim_reasoning_tokens": 200}
    )
    for record in result.records:
        assert max(record.chunk_tokens) > 1  # spans, not one chunk per token
        boundary = record.chunk_times.index(record.first_answer_s)
        assert sum(record.chunk_tokens[:boundary]) == 200 == record.reasoning_tokens
        assert record.chunk_tokens[boundary] == 1
        assert record.last_reasoning_s == record.chunk_times[boundary - 1]


def test_the_profile_draws_each_requests_reasoning_and_a_request_option_wins(bundled_prompts):
    profile = dataclasses.replace(
        tiny_profile(), reasoning=parse_distribution({"dist": "uniform", "min": 5, "max": 40}, "reasoning", {})
    )
    workload = Workload(tuple(plain(f"s{i}", 50) for i in range(30)), "test")
    drawn = [r.reasoning_tokens for r in offline(workload, bundled_prompts, profile).records]
    assert min(drawn) >= 5 and max(drawn) <= 40 and len(set(drawn)) > 5
    assert drawn == [r.reasoning_tokens for r in offline(workload, bundled_prompts, profile).records]  # seeded
    asked = offline(workload, bundled_prompts, profile, extra_body={"sim_reasoning_tokens": 3}).records
    assert {r.reasoning_tokens for r in asked} == {3}


def test_reasoning_that_runs_past_max_tokens_leaves_no_answer(bundled_prompts):
    workload = Workload((plain("s", 30),), "test")
    record = offline(workload, bundled_prompts, extra_body={"sim_reasoning_tokens": 500}).records[0]
    assert (record.output_tokens, record.reasoning_tokens, record.first_answer_s) == (30, 30, None)
    assert "ttfo" not in offline(workload, bundled_prompts, extra_body={"sim_reasoning_tokens": 500}).summary


@pytest.mark.parametrize("value", [-1, 1.5, "7", True])
def test_a_bad_request_option_is_refused_naming_it(bundled_prompts, tiny_sim, value):
    record = offline(
        Workload((plain("s", 5),), "test"), bundled_prompts, extra_body={"sim_reasoning_tokens": value}
    ).records[0]
    assert record.status == "failed" and "sim_reasoning_tokens: expected an integer >= 0" in record.error
    reply = httpx.post(
        tiny_sim.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "sim_reasoning_tokens": value},
    )
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "sim_reasoning_tokens"


def test_a_profile_reasoning_field_is_read_strictly():
    data = {
        **json.loads(profile_path("dynamo-mocker-polynomial").read_text()),
        "reasoning": {"dist": "normal", "mean": 800},
    }
    with pytest.raises(LLMReplayError, match=r"^p.json: reasoning.std: required for dist normal"):
        parse_profile(data, "p.json")
    assert parse_profile({**data, "reasoning": 300}, "p.json").reasoning is not None


# ---------------------------------------------------------------- over HTTP, as vLLM streams it


def test_the_server_streams_reasoning_content_then_content_with_the_usage(tiny_sim):
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "sim_reasoning_tokens": 5,
        "stream_options": {"include_usage": True},
    }
    got = stream(tiny_sim.url, "/v1/chat/completions", body)
    deltas = [e["choices"][0]["delta"] for e in got if isinstance(e, dict) and e["choices"]][1:]  # after the role's
    kinds = ["reasoning_content" if "reasoning_content" in d else "content" for d in deltas]
    assert kinds == ["reasoning_content"] * 5 + ["content"] * 3
    usage = got[-2]["usage"]
    assert (usage["completion_tokens"], usage["completion_tokens_details"]) == (8, {"reasoning_tokens": 5})
    whole_body = {key: value for key, value in body.items() if key != "stream_options"}  # vLLM: only with a stream
    whole = httpx.post(tiny_sim.url + "/v1/chat/completions", json={**whole_body, "stream": False}).json()
    message = whole["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"]
    assert whole["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}


def test_completions_carry_no_reasoning_as_vllms(tiny_sim):
    body = {"prompt": "hi", "max_tokens": 6, "sim_reasoning_tokens": 4, "stream_options": {"include_usage": True}}
    got = stream(tiny_sim.url, "/v1/completions", body)
    assert all("text" in e["choices"][0] for e in got if isinstance(e, dict) and e["choices"])
    assert "completion_tokens_details" not in got[-2]["usage"]


def test_offline_and_http_agree_request_by_request(bundled_prompts, tiny_sim):
    workload = agents()
    here = offline(workload, bundled_prompts, concurrency=1)
    there = over_http(
        tiny_sim.url, workload, bundled_prompts, extra_body={"return_token_ids": True}
    )  # exact tokens per event
    key = lambda r: (r.session_index, r.turn_index)  # noqa: E731
    for a, b in zip(sorted(here.records, key=key), sorted(there.records, key=key), strict=True):
        assert (a.status, b.status) == ("ok", "ok")
        assert (
            (a.output_tokens, a.reasoning_tokens)
            == (b.output_tokens, b.reasoning_tokens)
            == (REASONING + ANSWER, REASONING)
        )
        # the reasoning came first: the tokens read before the first answer's read are reasoning, and
        # the reasoning's are all in by the read of its last (a read may hold several events)
        chunks = list(zip(b.chunk_times, b.chunk_tokens, strict=True))
        assert b.first_reasoning_s <= b.last_reasoning_s <= b.first_answer_s <= b.last_answer_s
        assert (
            sum(n for t, n in chunks if t < b.first_answer_s)
            <= REASONING
            <= sum(n for t, n in chunks if t <= b.last_reasoning_s)
        )
    for name in ("reasoning_tokens", "answer_tokens"):
        assert here.summary[name] == there.summary[name]
    assert set(REASONING_METRICS) <= set(here.summary) & set(there.summary)


def test_the_same_profile_draws_the_same_reasoning_offline_and_over_http(bundled_prompts):
    profile = dataclasses.replace(
        tiny_profile(), reasoning=parse_distribution({"dist": "uniform", "min": 1, "max": 30}, "reasoning", {})
    )
    workload = Workload(tuple(plain(f"s{i}", 40) for i in range(8)), "test")
    with serving(bundled_prompts, profile) as server:
        there = [r.reasoning_tokens for r in over_http(server.url, workload, bundled_prompts).records]
    here = [r.reasoning_tokens for r in offline(workload, bundled_prompts, profile, concurrency=1).records]
    assert here == there and len(set(here)) > 1
    # over the Responses API too: the client's probe (POST {}, refused) took request number 0 and
    # moved every later draw by one
    with serving(bundled_prompts, profile) as server:
        answers = over_http(server.url, workload, bundled_prompts, api="responses").records
    assert [r.reasoning_tokens for r in answers] == here


def test_a_non_streamed_reply_keeps_the_servers_reasoning_count(bundled_prompts, tiny_sim):
    result = over_http(tiny_sim.url, agents(sessions=1), bundled_prompts, stream=False)
    record = result.records[0]
    assert (record.reasoning_tokens, record.output_tokens) == (REASONING, REASONING + ANSWER)
    assert record.first_reasoning_s == record.first_answer_s  # one chunk: both arrived with it
    assert result.summary["answer_tokens"]["mean"] == ANSWER


def test_the_reasoning_is_sent_only_to_the_simulator(tiny_sim):
    """A real server's model decides how long it thinks: the turn's planned reasoning is no field
    of the request it gets (a hosted API would refuse an unknown one)."""
    request = EndpointRequest("chat", {"messages": []}, reasoning_tokens=7)
    assert "sim_reasoning_tokens" not in HTTPEndpoint(tiny_sim.url, model="m").body(request)
    assert HTTPEndpoint(tiny_sim.url, model="m", reasoning_hint=True).body(request)["sim_reasoning_tokens"] == 7


def test_a_hint_left_to_the_endpoint_asks_the_server_whether_it_is_the_simulator(tiny_sim):
    """``llmreplay run --endpoint`` at an ``llmreplay sim`` started by hand: its ``/version`` names
    the simulator, so the planned reasoning is sent (before, the run had no reasoning at all);
    any other server (here the mock, which has no ``/version``) is sent none."""

    async def opened(url):
        endpoint = HTTPEndpoint(url, model="m", reasoning_hint=None, metrics_interval_s=0)
        await endpoint.open(WallClock(), 1)
        try:
            return endpoint.body(EndpointRequest("chat", {"messages": []}, reasoning_tokens=7))
        finally:
            await endpoint.close()

    assert asyncio.run(opened(tiny_sim.url))["sim_reasoning_tokens"] == 7
    with ServerThread(MockServer()) as mock:
        assert "sim_reasoning_tokens" not in asyncio.run(opened(mock.url))


def test_eos_ends_the_answer_not_the_reasoning(bundled_prompts):
    with serving(bundled_prompts, eos_mean_tokens=1.0) as server:
        got = httpx.post(
            server.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "sim_reasoning_tokens": 10},
        ).json()
    # EOS is certain at the first token it may end: the one after the reasoning
    assert got["usage"]["completion_tokens"] == 11 and got["choices"][0]["finish_reason"] == "stop"
