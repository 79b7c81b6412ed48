"""Reasoning measured apart from the answer: the stream parser's bookkeeping (chat deltas as vLLM
and SGLang stream them with a reasoning parser on), the per-request and per-session metrics on
hand-built records, SLO keys, and what the gate stores and compares."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
from records import make, rec

from pytest_llmreplay.gate.baseline import DEFAULT_TOLERANCES, compare, gated_tolerances, make_record
from pytest_llmreplay.metrics.names import REASONING_METRICS
from pytest_llmreplay.metrics.slo import SLOBreach, parse_slo, parse_slos
from pytest_llmreplay.metrics.units import format_value
from pytest_llmreplay.replayer.api_chat import ChatParser
from pytest_llmreplay.replayer.apis import API_TABLE
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
from pytest_llmreplay.replayer.response import Response
from pytest_llmreplay.replayer.sse import ToolCallPiece, read_chunk
from pytest_llmreplay.search.capacity import parse_capacity
from pytest_llmreplay.search.stop import StopRule


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-12)


def chat_event(delta: dict, finish: str | None = None, **extra) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            **extra,
        }
    )


def usage_event(completion: int, reasoning: int | None = None) -> str:
    usage: dict = {"prompt_tokens": 10, "completion_tokens": completion, "total_tokens": 10 + completion}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage})


def parse(events: list[tuple[float, str]]) -> Response:
    response, parser = Response(sent_s=0.0), ChatParser()
    for now, data in events:
        parser.event(data, now, response)
    return response


# ---------------------------------------------------------------- the stream


def test_a_chunk_says_whether_it_is_reasoning_an_answer_or_a_tool_call():
    thought = read_chunk(chat_event({"reasoning_content": "Let me"}))
    assert (thought.tokens, thought.reasoning, thought.tool_calls, thought.text) == (1, True, (), "Let me")
    assert read_chunk(chat_event({"reasoning": "hmm"})).reasoning  # vLLM's newer field name
    answer = read_chunk(chat_event({"reasoning_content": None, "content": "Paris"}))
    assert (answer.reasoning, answer.text) == (False, "Paris")
    both = read_chunk(chat_event({"reasoning_content": "so ", "content": "Paris"}))  # the turn between the two
    assert (both.reasoning, both.text, both.thought) == (False, "Paris", "so ")
    call = read_chunk(chat_event({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}))
    # a tool call's piece is a token, never a blank one (a stream may open with it)
    assert (call.tokens, call.blank, call.reasoning) == (1, False, False)
    assert call.tool_calls == (ToolCallPiece(0, None, None, '{"ci'),)


def test_reasoning_then_content_stream_is_measured_apart():
    events = [
        (0.01, chat_event({"role": "assistant", "content": ""})),
        (0.10, chat_event({"reasoning_content": "The"})),
        (0.12, chat_event({"reasoning_content": " user"})),
        (0.14, chat_event({"reasoning_content": " asks"})),
        (0.50, chat_event({"content": "Paris"})),
        (0.52, chat_event({"content": "."}, finish="stop")),
        (0.53, usage_event(completion=5, reasoning=3)),
    ]
    response = parse(events)
    assert response.chunk_times == [0.10, 0.12, 0.14, 0.50, 0.52]
    assert (response.first_reasoning_s, response.last_reasoning_s) == (0.10, 0.14)
    assert (response.first_answer_s, response.last_answer_s) == (0.50, 0.52)
    assert (response.reasoning_counted, response.reasoning_tokens, response.completion_tokens) == (3, 3, 5)
    assert (response.reasoning_text, response.text) == ("The user asks", "Paris.")  # the answer apart


def test_a_delta_that_ends_the_reasoning_and_starts_the_answer_keeps_the_reasoning_apart():
    """vLLM's deepseek_r1 parser sends ``{"reasoning_content": "end", "content": "A0 "}`` when
    ``</think>`` falls inside one delta: its reasoning went into the answer's text, which the
    next turn sends back in the history (a reasoning review)."""
    response = parse(
        [
            (0.10, chat_event({"reasoning_content": "Let"})),
            (0.12, chat_event({"reasoning_content": " me"})),
            (0.30, chat_event({"reasoning_content": " see", "content": "Paris"})),
            (0.32, chat_event({"content": "."}, finish="stop")),
        ]
    )
    assert (response.reasoning_text, response.text) == ("Let me see", "Paris.")
    assert (response.first_reasoning_s, response.last_reasoning_s, response.first_answer_s) == (0.10, 0.12, 0.30)
    assert response.chunk_times == [0.10, 0.12, 0.30, 0.32]


class ChatStream:
    """A chat endpoint that streams ``events`` ((seconds after sent, data) each) to every request,
    read by the chat parser: the driver keeps the response as it keeps a server's."""

    name, api = "stream", "chat"

    def __init__(self, events: list[tuple[float, str]]) -> None:
        self.events = events

    async def open(self, clock, concurrency):
        self.clock = clock

    async def close(self):
        pass

    async def idle_warning(self):
        return None

    async def send(self, request, response: Response):
        parser, start = ChatParser(), self.clock.now()
        response.sent_s = start
        for at, data in self.events:
            await self.clock.sleep(start + at - self.clock.now())
            parser.event(data, self.clock.now(), response)
        response.end_s = self.clock.now()


def replayed(events: list[tuple[float, str]]):
    from pytest_llmreplay.replayer.clock import VirtualClock
    from pytest_llmreplay.replayer.driver import replay
    from pytest_llmreplay.workloads.prompts import PromptFactory
    from pytest_llmreplay.workloads.tokenizer import load_tokenizer
    from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload

    workload = Workload((Session("s", 0.0, (Turn(20, 1010, Synthetic()),)),), "test")
    prompts = PromptFactory(load_tokenizer(None))
    return replay(workload, ChatStream(events), prompts, clock=VirtualClock())


@pytest.mark.parametrize("summary", [0, 1, 50])
def test_reasoning_the_server_counted_and_never_streamed_is_not_spread_over_the_answer(summary):
    """OpenAI's reasoning models hide their reasoning (usage: 1,010 tokens, 1,000 reasoning) and
    stream ten answer tokens 50 ms apart: ITL read 0.5 ms, TPOT 0.45 ms and decode_tps 2,229
    tok/s, the 1,000 tokens spread over the ten chunks (a reasoning review); so again when a
    summary of it streams (Claude 4's thinking, the Responses API's reasoning summary: a review
    of the change), its chunks standing in for none of the hidden tokens."""
    events = [(0.01, chat_event({"role": "assistant", "content": ""}))]
    events += [(0.2 + 0.01 * i, chat_event({"reasoning_content": f"s{i} "})) for i in range(summary)]
    events += [(1.0 + 0.05 * i, chat_event({"content": f"w{i} "})) for i in range(10)]
    events += [(1.46, chat_event({}, finish="stop")), (1.46, usage_event(completion=1010, reasoning=1000))]
    run = replayed(events)
    (record,) = run.records
    assert record.unstreamed_tokens == 1000 - summary
    streamed = 10 + summary
    result = make([record])
    first = 0.2 if summary else 1.0
    assert result.summary["tpot"]["p50"] == approx((1.46 - first) / (streamed - 1))
    assert result.summary["output_tokens"]["p50"] == 1010 and result.summary["reasoning_tokens"]["p50"] == 1000
    from pytest_llmreplay.metrics.result import itl, session_values, tpot

    gaps = itl(record)
    assert gaps[-9:] == pytest.approx([0.05] * 9)  # the answer's ten tokens, 50 ms apart
    assert tpot(record) == approx((1.46 - first) / (streamed - 1))
    assert result.summary["decode_tps"]["p50"] == approx(session_values([record])["decode_tps"])  # both paths
    assert session_values([record])["decode_tps"] == approx((streamed - 1) / (1.45 - first))
    assert any("the server counted reasoning tokens it did not stream" in warning for warning in run.warnings)
    assert not any("usage.completion_tokens differs" in warning for warning in run.warnings)


def test_a_server_that_merges_tokens_in_its_chunks_hides_no_reasoning():
    from pytest_llmreplay.metrics.reasoning import unstreamed_reasoning

    assert unstreamed_reasoning(1012, 1000, counted=253, reasoning_counted=250) == 0  # 4 tokens a chunk
    assert unstreamed_reasoning(1010, 1000, counted=60, reasoning_counted=50) == 950  # a summary of 50
    assert unstreamed_reasoning(1010, 1000, counted=10, reasoning_counted=0) == 1000  # hidden
    assert unstreamed_reasoning(40, 31, counted=40, reasoning_counted=31) == 0  # a whole reply, one chunk


def test_a_tool_call_is_the_first_answer_token():
    events = [
        (0.10, chat_event({"reasoning": "I need the weather"})),
        (
            0.30,
            chat_event({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "weather", "arguments": ""}}]}),
        ),
        (0.32, chat_event({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":"Paris"}'}}]})),
        (0.33, chat_event({}, finish="tool_calls")),
    ]
    response = parse(events)
    assert response.first_reasoning_s == 0.10
    assert response.first_answer_s == 0.30
    assert response.calls == [{"id": "c1", "name": "weather", "arguments": '{"city":"Paris"}'}]
    assert response.reasoning_tokens is None  # no usage: counted from the stream only


def test_non_streamed_reasoning_is_one_chunk_with_the_usage_split():
    class Reply:
        async def aread(self) -> bytes:
            return json.dumps(
                {
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "reasoning_content": "think", "content": "Paris"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": 8,
                        "completion_tokens": 40,
                        "completion_tokens_details": {"reasoning_tokens": 31},
                    },
                }
            ).encode()

    endpoint = HTTPEndpoint("http://127.0.0.1:9", model="m")
    response = Response(sent_s=0.0)
    asyncio.run(endpoint._read_whole(Reply(), response, API_TABLE["chat"]))
    assert response.chunk_tokens == [40]
    assert response.first_reasoning_s == response.first_answer_s == response.chunk_times[0]
    assert (response.reasoning_tokens, response.reasoning_text, response.text) == (31, "think", "Paris")


def test_split_reasoning_marks_the_leading_tokens_of_the_chunks():
    response = Response(chunk_times=[1.0, 2.0, 3.0, 4.0], chunk_tokens=[1, 9, 1, 5])
    response.split_reasoning(10)
    assert (response.first_reasoning_s, response.last_reasoning_s, response.reasoning_counted) == (1.0, 2.0, 10)
    assert (response.first_answer_s, response.last_answer_s) == (3.0, 4.0)


# ---------------------------------------------------------------- metrics


def thinking(session, *, sent, reasoning_chunks, answer_chunks, reasoning=None, end=None, turn=0, turns=1):
    """A record of a response that reasoned over ``reasoning_chunks`` then answered over
    ``answer_chunks`` ((time, tokens) each), as the driver keeps it."""
    chunks = tuple(reasoning_chunks) + tuple(answer_chunks)
    record = rec(session, turn, turns, sent=sent, chunks=chunks, end=end if end is not None else chunks[-1][0])
    counted = sum(n for _, n in reasoning_chunks)
    return replace(
        record,
        first_reasoning_s=reasoning_chunks[0][0] if reasoning_chunks else None,
        last_reasoning_s=reasoning_chunks[-1][0] if reasoning_chunks else None,
        first_answer_s=answer_chunks[0][0] if answer_chunks else None,
        last_answer_s=answer_chunks[-1][0] if answer_chunks else None,
        reasoning_tokens=counted if reasoning is None else reasoning,
    )


def test_reasoning_metrics_per_request():
    # sent at 1.0; 101 reasoning tokens from 1.2 to 3.2; 21 answer tokens from 3.25 to 3.65
    a = thinking(0, sent=1.0, reasoning_chunks=((1.2, 1), (3.2, 100)), answer_chunks=((3.25, 1), (3.65, 20)))
    s = make([a]).summary
    assert s["ttft"]["mean"] == approx(0.2)  # the first token is the first reasoning token
    assert s["ttfr"]["mean"] == approx(0.2)
    assert s["ttfo"]["mean"] == approx(2.25)  # 3.25 - 1.0: the user's wait for the answer
    assert s["reasoning_tokens"]["mean"] == 101
    assert s["answer_tokens"]["mean"] == 21
    assert s["output_tokens"]["mean"] == 122  # both, as the server's completion_tokens
    assert s["reasoning_decode_tps"]["mean"] == approx(100 / 2.0)
    assert s["answer_decode_tps"]["mean"] == approx(20 / 0.4)


def test_a_request_that_did_not_reason_in_a_reasoning_run():
    a = thinking(0, sent=0.0, reasoning_chunks=((0.1, 1), (0.5, 9)), answer_chunks=((0.6, 1),))
    b = rec(1, sent=0.0, chunks=((0.2, 1), (0.3, 4)), end=0.3)  # no reasoning: its first token is its answer's
    s = make([a, b]).summary
    assert s["ttfo"]["count"] == 2 and s["ttfo"]["max"] == approx(0.6) and s["ttfo"]["min"] == approx(0.2)
    assert s["ttfr"]["count"] == 1  # only the request that reasoned has a first reasoning token
    assert (s["reasoning_tokens"]["min"], s["answer_tokens"]["max"]) == (0, 5)


def test_a_request_cut_while_reasoning_has_no_answer():
    a = thinking(0, sent=0.0, reasoning_chunks=((0.1, 1), (0.9, 15)), answer_chunks=())
    b = thinking(1, sent=0.0, reasoning_chunks=((0.1, 1),), answer_chunks=((0.2, 1),))
    s = make([a, b]).summary
    assert s["ttfo"]["count"] == 1 and s["ttfo"]["mean"] == approx(0.2)
    assert s["answer_tokens"]["min"] == 0


def test_a_request_that_never_answered_is_not_good_under_a_ttfo_limit_and_the_run_says_so():
    """A new user's run: half the requests spent max_tokens thinking. ttfo's statistics cover
    the requests that answered, so goodput under a ttfo limit counted the rest as good (100%)
    and nothing said they never answered."""
    cut = thinking(0, sent=0.0, reasoning_chunks=((0.1, 1), (0.9, 15)), answer_chunks=())
    answered = thinking(1, sent=0.0, reasoning_chunks=((0.1, 1),), answer_chunks=((0.2, 1),))
    result = make([cut, answered])
    assert result.goodput_figures({"ttfo": 1.0})["value"] == approx(0.5)
    assert result.goodput_figures({"ttft": 1.0})["value"] == approx(1.0)  # both began to think at once
    assert result.warnings == [
        "1 of 2 requests reasoned and never answered (max_tokens spent thinking?): "
        "ttfo and ttfat cover only those that answered; goodput under a ttfo limit counts them as not good"
    ]
    assert make([answered]).warnings == []


def test_a_run_without_reasoning_shows_none_of_the_reasoning_metrics():
    result = make([rec(0, sent=0.0, chunks=((0.1, 1), (0.2, 3)), end=0.2)])
    assert not set(REASONING_METRICS) & set(result.summary)
    assert not {"ttfo", "first_answer_s", "reasoning_tokens"} & set(result.request_table().columns)
    with pytest.raises(SLOBreach, match="not measured"):
        result.assert_slo({"ttfo.p90": "< 20s"})


def test_usage_reasoning_count_of_zero_is_no_reasoning():
    record = replace(rec(0, sent=0.0, chunks=((0.1, 1), (0.2, 3)), end=0.2), reasoning_tokens=0, first_answer_s=0.1)
    assert "ttfo" not in make([record]).summary


def test_ttfat_ends_at_the_first_answer_token_of_the_last_request():
    first = thinking(0, sent=0.0, reasoning_chunks=((0.1, 1),), answer_chunks=((0.2, 4),), turns=2)
    last = thinking(
        0, turn=1, turns=2, sent=1.0, reasoning_chunks=((1.1, 1), (3.0, 50)), answer_chunks=((3.4, 1), (3.6, 9))
    )
    result = make([first, last])
    assert result.session_rows[0]["ttfat"] == approx(3.4)  # not 1.1, its first reasoning token


def test_ttfat_of_records_without_answer_times_is_their_first_token():
    first = rec(0, 0, 2, sent=0.0, chunks=((0.1, 1),), end=0.1)
    last = rec(0, 1, 2, sent=0.5, chunks=((0.7, 1), (0.8, 1)), end=0.8)
    assert make([first, last]).session_rows[0]["ttfat"] == approx(0.7)


def test_reasoning_slos_and_units():
    a = thinking(0, sent=0.0, reasoning_chunks=((0.1, 1), (12.0, 2999)), answer_chunks=((12.5, 1), (13.0, 99)))
    result = make([a])
    result.assert_slo({"ttfo.p90": "< 20s", "reasoning_tokens.mean": "< 4000", "answer_decode_tps.p50": "> 100 tok/s"})
    with pytest.raises(SLOBreach) as breach:
        result.assert_slo({"ttfo.p90": "< 10s"})
    assert "ttfo.p90" in str(breach.value) and "12.5 s" in str(breach.value)
    assert parse_slo("ttfr.p99", "< 500ms").value == approx(0.5)
    with pytest.raises(Exception, match="no unit, and ttfo is a time"):
        parse_slo("ttfo.p90", "< 20")
    assert format_value("reasoning_decode_tps", 50.0) == "50 tok/s"


def test_a_ttfo_limit_counts_in_goodput():
    fast = thinking(0, sent=0.0, reasoning_chunks=((0.1, 1),), answer_chunks=((0.5, 2),))
    slow = thinking(1, sent=0.0, reasoning_chunks=((0.1, 1),), answer_chunks=((5.0, 2),))
    result = make([fast, slow])
    assert result.goodput_figures({"ttfo": 1.0})["value"] == approx(0.5)  # the slow answer is not good
    assert result.goodput_figures({"ttft": 1.0})["value"] == approx(1.0)  # though both began to think at once


def test_a_ttfo_limit_in_a_run_without_reasoning_judges_each_requests_ttft():
    """A ttfo limit on a run that did not reason counted every request as good (3 s TTFTs under a
    1 s limit: goodput 100%, stored and gated; found by a review helper): a request that did not
    reason has its TTFT as its ttfo."""
    from records import rec

    slow = [rec(i, sent=0.0, chunks=((3.0, 1), (3.1, 1)), end=3.1) for i in range(4)]
    fast = [rec(4 + i, sent=0.0, chunks=((0.5, 1), (0.6, 1)), end=0.6) for i in range(4)]
    assert make(slow + fast).goodput_figures({"ttfo": 1.0})["value"] == approx(0.5)


# ---------------------------------------------------------------- the gate


def stored(result) -> dict:
    return make_record(result, test="t", fingerprint={}, workload={}, git={})


def reasoning_run(answer_at: float):
    return make(
        [
            thinking(
                i, sent=float(i), reasoning_chunks=((i + 0.1, 1), (i + 0.5, 9)), answer_chunks=((i + answer_at, 5),)
            )
            for i in range(12)  # 8 pairs could not clear Holm's 99.4% over 8 figures (gate.bootstrap.p_floor)
        ]
    )


def test_a_run_with_reasoning_stores_ttfo_samples_and_is_gated_on_ttfo():
    record = stored(reasoning_run(0.6))
    assert len(record["samples"]["ttfo"]) == 12
    assert gated_tolerances(record) == {**DEFAULT_TOLERANCES, "ttfo.p50": 0.05}
    plain = stored(make([rec(0, sent=0.0, chunks=((0.1, 1), (0.2, 1)), end=0.2)]))
    assert "ttfo" not in plain["samples"] and "ttfo.p50" not in gated_tolerances(plain)


def test_a_slower_answer_is_a_ttfo_regression():
    comparison = compare(
        stored(reasoning_run(0.6)), stored(reasoning_run(1.2)), gated_tolerances(stored(reasoning_run(1.2)))
    )
    row = next(row for row in comparison.rows if row.key == "ttfo.p50")
    assert row.verdict == "regression"
    assert next(row for row in comparison.rows if row.key == "ttft.p50").verdict == "ok"  # the first token did not move


def test_a_baseline_stored_before_reasoning_was_measured_compares_on_the_rest():
    current = stored(reasoning_run(0.6))
    old = json.loads(json.dumps(current))  # as a result stored before these metrics existed
    del old["samples"]["ttfo"], old["sample_keys"]["ttfo"]
    for name in REASONING_METRICS:
        old["summary"].pop(name, None)
    comparison = compare(old, current, gated_tolerances(current))
    rows = {row.key: row for row in comparison.rows}
    assert rows["ttfo.p50"].verdict == "skipped" and rows["ttfo.p50"].note == "too few samples"
    assert rows["ttft.p50"].verdict == "ok"


def test_a_run_that_stopped_reasoning_is_a_ttfo_regression_not_an_improvement():
    """A new user's pair: the same workload, the baseline's model reasoning and the current's
    not (a server whose reasoning now streams as content looks the same). The current run alone
    gates no ttfo, so the row vanished and ttft's earlier first token read as an improvement;
    judged on what the baseline gated, ttfo.p50 is a regression that says why."""
    base = stored(reasoning_run(0.6))
    plain = stored(make([rec(i, sent=float(i), chunks=((i + 0.1, 1), (i + 0.6, 14)), end=i + 0.6) for i in range(8)]))
    assert "ttfo.p50" in gated_tolerances(plain, baseline=base) and "ttfo.p50" not in gated_tolerances(plain)
    rows = {row.key: row for row in compare(base, plain, gated_tolerances(plain, baseline=base)).rows}
    assert rows["ttfo.p50"].verdict == "regression"
    assert rows["ttfo.p50"].note == "not measured in this run (this run has no reasoning); the baseline's was"


# ---------------------------------------------------------------- capacity


def test_a_capacity_search_may_bound_ttfo_and_its_point_stops_once_the_bound_is_lost():
    parse_capacity({"by": "concurrency", "slo": {"ttfo.p50": "< 1s"}}).validate()
    rule = StopRule(parse_slos({"ttfo.p50": "< 1s"}), planned=3, limits={"ttfo": 1.0})
    slow = [thinking(i, sent=0.0, reasoning_chunks=((0.1, 1),), answer_chunks=((2.0, 1),)) for i in range(2)]
    assert rule.reason(slow[0]) is None  # a quick first token: thinking, not answering
    assert rule.reason(slow[1]) == "ttfo.p50 < 1s is lost: 2 of at most 3 requests over it"
    assert rule.not_good == 2
