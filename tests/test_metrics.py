"""Result metrics on small hand-built record sets, checked against figures computed by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from records import make, rec

from pytest_llmreplay.metrics.result import Result, itl, latency, prompt_tokens, schedule_lag, stats, tpot, ttft
from pytest_llmreplay.replayer.records import RequestRecord

STAT_KEYS = {"mean", "min", "p50", "p90", "p95", "p99", "max", "std", "count"}
RATE_KEYS = {"overall", "steady_state", "last_30s", "per_gpu"}


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- per request


def test_per_request_values():
    # sent 1.0 (scheduled 0.9), chunks 1 token at 1.5, 1 at 1.7, 3 at 2.0, end 2.1; planned prompt 42
    r = rec(0, scheduled=0.9, sent=1.0, chunks=((1.5, 1), (1.7, 1), (2.0, 3)), end=2.1, planned=42)
    assert ttft(r) == approx(0.5)  # 1.5 - 1.0
    assert latency(r) == approx(1.1)  # 2.1 - 1.0
    assert tpot(r) == approx(0.15)  # (1.1 - 0.5) / (5 - 1)
    # 0.2 s gap for 1 token, then 0.3 s for a chunk of 3 tokens: three values of 0.1
    assert itl(r) == [approx(0.2), approx(0.1), approx(0.1), approx(0.1)]
    assert prompt_tokens(r) == 42  # the server gave none: the planned count
    assert schedule_lag(r) == approx(0.1)  # 1.0 - 0.9


def test_server_prompt_count_wins_over_planned():
    r = rec(0, sent=1.0, chunks=((1.2, 1),), end=1.3, planned=42, prompt=47)
    assert prompt_tokens(r) == 47


def test_one_token_response_has_no_tpot_and_no_itl():
    r = rec(0, sent=1.0, chunks=((1.3, 1),), end=1.4)
    assert tpot(r) is None
    assert itl(r) == []
    summary = make([r]).summary
    assert summary["ttft"]["mean"] == approx(0.3)
    assert "tpot" not in summary
    assert "itl" not in summary


def test_whole_reply_has_no_tpot():
    # not streamed: 50 tokens in one chunk at 1.40, the body read by 1.4001; a TPOT of
    # 0.0001 / 49 = 2 us would pass any limit while nothing about the decode was measured
    whole = rec(0, sent=1.0, chunks=((1.4, 50),), end=1.4001)
    streamed = rec(1, sent=2.0, chunks=((2.1, 1), (2.59, 49)), end=2.59)
    assert tpot(whole) is None
    assert tpot(streamed) == approx(0.01)  # (0.59 - 0.1) / 49
    summary = make([whole, streamed]).summary
    assert summary["tpot"]["count"] == 1 and summary["tpot"]["max"] == approx(0.01)
    assert "tpot" not in make([whole]).summary
    assert make([whole], goodput={"tpot": 0.001}).summary["goodput"]["value"] == approx(1.0)  # no value: meets it


def test_unsent_request_has_no_times():
    r = rec(0, status="failed", scheduled=2.0, error="client: refused")
    assert ttft(r) is None and latency(r) is None and schedule_lag(r) is None and tpot(r) is None


def test_request_metrics_in_the_summary():
    # record above, plus a one-token record with a server prompt count and a queue time
    a = rec(0, scheduled=0.9, sent=1.0, chunks=((1.5, 1), (1.7, 1), (2.0, 3)), end=2.1, planned=42, queue=0.05)
    b = rec(1, scheduled=3.0, sent=3.0, chunks=((3.3, 1),), end=3.4, planned=10, prompt=12, queue=0.15)
    s = make([a, b]).summary
    assert s["ttft"]["mean"] == approx(0.4)  # (0.5 + 0.3) / 2
    assert s["latency"]["max"] == approx(1.1)
    assert s["tpot"]["count"] == 1 and s["tpot"]["mean"] == approx(0.15)
    # itl: [0.2, 0.1, 0.1, 0.1]: mean 0.125, p50 0.1, p90 at position 2.7 -> 0.1 + 0.7 * 0.1 = 0.17
    assert s["itl"]["count"] == 4
    assert s["itl"]["mean"] == approx(0.125)
    assert s["itl"]["p50"] == approx(0.1)
    assert s["itl"]["p90"] == approx(0.17)
    assert s["itl"]["max"] == approx(0.2)
    assert s["prompt_tokens"]["mean"] == approx(27.0)  # (42 + 12) / 2
    assert s["output_tokens"]["mean"] == approx(3.0)  # (5 + 1) / 2
    assert s["queue"]["mean"] == approx(0.1)  # (0.05 + 0.15) / 2
    assert s["schedule_lag"]["mean"] == approx(0.05)  # (0.1 + 0.0) / 2
    assert "cached_tokens" not in s  # no server reported it


@pytest.mark.parametrize("gpus", [0, -1, 1.5, True])
def test_gpus_must_be_a_whole_number_of_at_least_one(gpus):
    from pytest_llmreplay import LLMReplayError

    with pytest.raises(LLMReplayError, match=rf"^gpus: expected an integer >= 1, got {gpus!r}$"):
        make([rec(0, sent=0.0, chunks=((0.1, 1), (0.2, 1)), end=0.2)], gpus=gpus)


def test_stats_on_five_values_by_hand():
    # TTFTs 0.3, 1.0, 0.1, 0.4, 0.2 (unsorted), each request lasting 0.1 s after its first token
    ttfts = [0.3, 1.0, 0.1, 0.4, 0.2]
    records = [
        rec(i, sent=float(i + 1), chunks=((i + 1 + t, 1),), end=i + 1 + t + 0.1, output=1 + i)
        for i, t in enumerate(ttfts)
    ]
    s = make(records).summary
    # sorted 0.1 0.2 0.3 0.4 1.0; numpy linear percentile: position p/100 * 4
    #   p50 -> 2    -> 0.3
    #   p90 -> 3.6  -> 0.4 + 0.6 * 0.6  = 0.76
    #   p95 -> 3.8  -> 0.4 + 0.8 * 0.6  = 0.88
    #   p99 -> 3.96 -> 0.4 + 0.96 * 0.6 = 0.976
    # mean 2.0 / 5 = 0.4; deviations -0.3 -0.2 -0.1 0 0.6 -> squares sum 0.5 -> std sqrt(0.5 / 5)
    expected = {
        "mean": 0.4,
        "min": 0.1,
        "p50": 0.3,
        "p90": 0.76,
        "p95": 0.88,
        "p99": 0.976,
        "max": 1.0,
        "std": math.sqrt(0.1),
    }
    assert set(s["ttft"]) == STAT_KEYS
    assert s["ttft"]["count"] == 5
    for key, value in expected.items():
        assert s["ttft"][key] == pytest.approx(value, abs=1e-9), key
    # latency = ttft + 0.1: every location figure shifts by 0.1, the spread does not
    assert s["latency"]["p90"] == pytest.approx(0.86, abs=1e-9)
    assert s["latency"]["std"] == pytest.approx(math.sqrt(0.1), abs=1e-9)
    # output tokens 1..5: mean 3, p90 at 3.6 -> 4.6, std sqrt((4+1+0+1+4)/5) = sqrt(2)
    assert s["output_tokens"]["mean"] == approx(3.0)
    assert s["output_tokens"]["p90"] == approx(4.6)
    assert s["output_tokens"]["std"] == approx(math.sqrt(2))


# ---------------------------------------------------------------- sessions

AGENT_A = [
    # turn 0: prompt 100, cached 0, output 50 (1 + 49), first token 1.2, last 1.7, end 1.75
    rec(0, 0, 3, sid="agent-a", sent=1.0, chunks=((1.2, 1), (1.7, 49)), end=1.75, prompt=100, cached=0),
    # turn 1: prompt 250, cached 96, output 50, first 3.3, last 3.8, end 3.8
    rec(
        0, 1, 3, sid="agent-a", sent=3.0, chunks=((3.3, 1), (3.8, 49)), end=3.8, prompt=250, cached=96, history="server"
    ),
    # turn 2: prompt 400, cached 288, output 20, first 5.4, last 5.6, end 5.7
    rec(
        0,
        2,
        3,
        sid="agent-a",
        sent=5.0,
        chunks=((5.4, 1), (5.6, 19)),
        end=5.7,
        prompt=400,
        cached=288,
        history="server",
    ),
]
AGENT_B = [
    # turn 0: prompt 200, cached 0, output 10, first 2.1, last 2.5, end 2.5
    rec(1, 0, 2, sid="agent-b", sent=2.0, chunks=((2.1, 1), (2.5, 9)), end=2.5, prompt=200, cached=0),
    # turn 1: prompt 300, cached 150, output 30, first 6.3, last 6.9, end 7.0
    rec(
        1,
        1,
        2,
        sid="agent-b",
        sent=6.0,
        chunks=((6.3, 1), (6.9, 29)),
        end=7.0,
        prompt=300,
        cached=150,
        history="server",
    ),
]


def agents(**kwargs) -> Result:
    # in schedule order, turns of the two sessions interleaved
    a0, a1, a2 = AGENT_A
    b0, b1 = AGENT_B
    return make([a0, b0, a1, a2, b1], **kwargs)


def test_agent_session_metrics():
    rows = {row["session_id"]: row for row in agents().session_rows}
    a = rows["agent-a"]
    assert a["turns"] == 3 and a["session_index"] == 0
    assert a["ttfat"] == approx(4.4)  # first token of turn 3 (5.4) - sent of turn 1 (1.0)
    assert a["session_latency"] == approx(4.7)  # 5.7 - 1.0
    assert a["decode_tps"] == approx(97.5)  # (49 + 49 + 19) / (0.5 + 0.5 + 0.2) = 117 / 1.2
    assert a["cache_hit_rate"] == approx(384 / 750)  # (0 + 96 + 288) / (100 + 250 + 400)
    assert a["eligible_cache_hit_rate"] == approx(384 / 450)  # 384 / ((100 + 50) + (250 + 50))
    assert a["output_tokens_per_session"] == 120  # 50 + 50 + 20
    b = rows["agent-b"]
    assert b["ttfat"] == approx(4.3)  # 6.3 - 2.0
    assert b["session_latency"] == approx(5.0)  # 7.0 - 2.0
    assert b["decode_tps"] == approx(38.0)  # (9 + 29) / (0.4 + 0.6)
    assert b["cache_hit_rate"] == approx(0.3)  # 150 / 500
    assert b["eligible_cache_hit_rate"] == approx(150 / 210)  # 150 / (200 + 10)
    assert b["output_tokens_per_session"] == 40


def test_a_turn_that_sends_no_answer_back_is_eligible_for_the_previous_prompt_alone():
    """Hash-id turns (Mooncake) are their blocks alone, no answer: a session that hit every block
    it shared with its previous turn read 93.9%, the answer counted as history it never sent (an
    agent platform's trial)."""
    turns = [
        rec(0, 0, 2, sent=1.0, chunks=((1.1, 1), (1.2, 63)), end=1.2, prompt=1024, cached=0),
        rec(0, 1, 2, sent=2.0, chunks=((2.1, 1), (2.2, 63)), end=2.2, prompt=2048, cached=1024),
    ]
    assert make(turns).session_rows[0]["eligible_cache_hit_rate"] == approx(1.0)  # 1024 / 1024
    turns[1].history = "server"  # a turn that sends the answer back could have found it cached too
    assert make(turns).session_rows[0]["eligible_cache_hit_rate"] == approx(1024 / (1024 + 64))
    turns[1].history = "planned"  # ids the server did not generate: no prefix it cached (a review)
    assert make(turns).session_rows[0]["eligible_cache_hit_rate"] == approx(1.0)


def test_session_metric_stats():
    s = agents().summary
    assert s["ttfat"]["count"] == 2
    assert s["ttfat"]["mean"] == approx(4.35)
    assert s["ttfat"]["p90"] == approx(4.39)  # 4.3 + 0.9 * 0.1
    assert s["ttfat"]["std"] == approx(0.05)
    assert s["session_latency"]["mean"] == approx(4.85)  # (4.7 + 5.0) / 2
    assert s["decode_tps"]["mean"] == approx(67.75)  # (97.5 + 38) / 2
    assert s["cache_hit_rate"]["mean"] == approx(0.406)  # (0.512 + 0.3) / 2
    assert s["eligible_cache_hit_rate"]["max"] == approx(384 / 450)
    assert s["eligible_cache_hit_rate"]["min"] == approx(150 / 210)
    assert s["output_tokens_per_session"]["min"] == 40.0
    assert s["output_tokens_per_session"]["max"] == 120.0
    assert s["requests"]["sessions_complete"] == 2


def test_session_with_planned_prompts_when_server_gives_none():
    # no server prompt counts: planned ones stand in, so the cache figures still exist
    turns = [
        rec(0, 0, 2, sent=1.0, chunks=((1.1, 1), (1.2, 3)), end=1.2, planned=100, cached=0),
        rec(0, 1, 2, sent=2.0, chunks=((2.1, 1),), end=2.1, planned=200, cached=52, history="server"),
    ]
    row = make(turns).session_rows[0]
    assert row["cache_hit_rate"] == approx(52 / 300)
    assert row["eligible_cache_hit_rate"] == approx(52 / 104)  # 52 / (100 + 4)


def test_eligible_rate_counts_only_hits_on_the_sessions_own_history():
    # a system prompt of 64 tokens shared with other sessions hits on turn 0 too; turn 1's prompt
    # (history 100 + 10 = 110) hits 128: 18 tokens beyond its history came from another session
    turns = [
        rec(0, 0, 2, sent=1.0, chunks=((1.1, 1), (1.2, 9)), end=1.2, prompt=100, cached=64),
        rec(0, 1, 2, sent=2.0, chunks=((2.1, 1),), end=2.1, prompt=200, cached=128, history="server"),
    ]
    row = make(turns).session_rows[0]
    assert row["cache_hit_rate"] == approx(192 / 300)
    assert row["eligible_cache_hit_rate"] == approx(1.0)  # min(128, 110) / 110, not 192 / 110


def test_eligible_history_leaves_out_the_reasoning_never_sent_back():
    # turn 0 generated 10 tokens, 6 of them reasoning: turn 1's history is 100 + 4, not 110
    first = rec(0, 0, 2, sent=1.0, chunks=((1.1, 1), (1.2, 9)), end=1.2, prompt=100, cached=0)
    first.reasoning_tokens = 6
    turns = [first, rec(0, 1, 2, sent=2.0, chunks=((2.1, 1),), end=2.1, prompt=150, cached=52, history="server")]
    assert make(turns).session_rows[0]["eligible_cache_hit_rate"] == approx(52 / 104)


def test_session_without_cached_tokens_has_no_cache_rates():
    turns = [
        rec(0, 0, 2, sent=1.0, chunks=((1.1, 1), (1.2, 3)), end=1.2, prompt=100, cached=0),
        rec(0, 1, 2, sent=2.0, chunks=((2.1, 1),), end=2.1, prompt=200),  # not reported
    ]
    s = make(turns).summary
    assert "cache_hit_rate" not in s
    assert "eligible_cache_hit_rate" not in s
    assert s["ttfat"]["mean"] == approx(1.1)  # 2.1 - 1.0
    assert s["decode_tps"]["mean"] == approx(30.0)  # turn 2 has 1 token: 3 / 0.1


def incomplete_sessions() -> list[RequestRecord]:
    return [
        # F: complete, 2 turns
        rec(0, 0, 2, sid="F", sent=1.0, chunks=((1.2, 1),), end=1.3),
        rec(0, 1, 2, sid="F", sent=2.0, chunks=((2.2, 1),), end=2.3),
        # C: turn 1 failed, which ended the session (turn 2 never ran)
        rec(1, 0, 3, sid="C", sent=1.5, chunks=((1.6, 1),), end=1.7),
        rec(1, 1, 3, sid="C", status="failed", sent=2.5, end=2.6, error="server: boom"),
        # D: turn 1 cancelled at the end of the run
        rec(2, 0, 2, sid="D", sent=3.0, chunks=((3.1, 1),), end=3.2),
        rec(2, 1, 2, sid="D", status="cancelled", sent=4.0, chunks=((4.5, 1),)),
        # E: turn 0 is a warm-up one
        rec(3, 0, 2, sid="E", sent=0.5, chunks=((0.6, 1),), end=0.7, warmup=True),
        rec(3, 1, 2, sid="E", sent=3.5, chunks=((3.7, 1),), end=3.8),
        # G: turn 2 never scheduled (duration limit)
        rec(4, 0, 3, sid="G", sent=4.0, chunks=((4.1, 1),), end=4.2),
        rec(4, 1, 3, sid="G", sent=5.0, chunks=((5.3, 1),), end=5.4),
    ]


def test_incomplete_sessions_are_left_out():
    result = make(incomplete_sessions(), planned=12)
    assert [row["session_id"] for row in result.session_rows] == ["F"]
    s = result.summary
    assert s["ttfat"]["count"] == 1
    assert s["ttfat"]["mean"] == approx(1.2)  # F: 2.2 - 1.0
    assert s["session_latency"]["mean"] == approx(1.3)  # 2.3 - 1.0
    table = result.session_table()
    assert list(table["session_id"]) == ["F"]


def test_error_rate_and_counts():
    result = make(incomplete_sessions(), planned=12)
    s = result.summary
    # measured ok: F0 F1 C0 D0 E1 G0 G1 = 7; failed: C1; cancelled D1 and warm-up E0 not counted
    assert s["error_rate"]["value"] == approx(1 / 8)
    assert s["requests"] == {"ok": 7, "failed": 1, "cancelled": 1, "warmup": 1, "planned": 12, "sessions_complete": 1}
    assert s["ttft"]["count"] == 7


def test_cancelled_requests_are_not_errors():
    records = [
        rec(0, sent=1.0, chunks=((1.1, 1),), end=1.2),
        rec(1, status="cancelled", sent=1.5, chunks=((1.6, 1),)),
        rec(2, status="cancelled", sent=1.6),
    ]
    s = make(records).summary
    assert s["error_rate"]["value"] == 0.0
    assert s["requests"]["cancelled"] == 2
    assert s["ttft"]["count"] == 1


def test_warmup_records_are_excluded_everywhere():
    measured = [
        # lag 0, ttft 0.2, itl 0.2 (one gap), end 10.5, prompt 100
        rec(0, sent=10.0, chunks=((10.2, 1), (10.4, 1)), end=10.5, prompt=100, cached=0),
        # lag 0.1, ttft 0.3, end 12.5, prompt 50
        rec(1, scheduled=11.9, sent=12.0, chunks=((12.3, 1),), end=12.5, prompt=50, cached=10),
    ]
    warmup = [
        rec(2, scheduled=0.0, sent=1.0, chunks=((4.0, 1), (9.0, 1)), end=9.5, prompt=999, cached=999, warmup=True),
        rec(3, status="failed", sent=2.0, end=2.5, error="server: cold", warmup=True),
    ]
    s = make(warmup + measured).summary
    assert s["ttft"]["count"] == 2 and s["ttft"]["max"] == approx(0.3)
    assert s["itl"]["count"] == 1 and s["itl"]["max"] == approx(0.2)
    assert s["schedule_lag"]["count"] == 2 and s["schedule_lag"]["max"] == approx(0.1)
    assert s["prompt_tokens"]["max"] == 100
    assert s["error_rate"]["value"] == 0.0
    # span 10.0 -> 12.5 = 2.5 s
    assert make(warmup + measured).span == (10.0, 12.5)
    assert s["request_throughput"]["overall"] == approx(0.8)  # 2 / 2.5
    assert s["input_throughput"]["overall"] == approx(60.0)  # (100 + 50) / 2.5
    assert s["cached_input_throughput"]["overall"] == approx(4.0)  # 10 / 2.5
    assert s["effective_concurrency"]["value"] == approx(0.4)  # (0.5 + 0.5) / 2.5
    assert s["requests"]["warmup"] == 2 and s["requests"]["failed"] == 0 and s["requests"]["ok"] == 2
    assert s["requests"]["sessions_complete"] == 2  # the warm-up one-turn sessions are not complete


def test_schedule_lag_counts_failed_but_not_cancelled():
    records = [
        rec(0, scheduled=1.0, sent=1.1, chunks=((1.2, 1),), end=1.3),  # 0.1
        rec(1, status="failed", scheduled=2.0, sent=2.3, end=2.4, error="x: y"),  # 0.3
        rec(2, status="cancelled", scheduled=3.0, sent=8.0),  # 5.0: not measured
    ]
    lag = make(records).summary["schedule_lag"]
    assert lag["count"] == 2
    assert lag["mean"] == approx(0.2)


# ---------------------------------------------------------------- throughput


def timeline() -> list[RequestRecord]:
    # 10 one-token requests, each sent 2 s before its end, first token 1 s after sending.
    # Ends 12 14 16 18 | 50 | 85 90 95 100 110: span 10 -> 110 = 100 s,
    # steady state from 10 + 0.2 * 100 = 30, last window from 110 - 30 = 80.
    ends = [12, 14, 16, 18, 50, 85, 90, 95, 100, 110]
    return [rec(i, sent=e - 2.0, chunks=((e - 1.0, 1),), end=float(e), prompt=100) for i, e in enumerate(ends)]


def test_request_throughput_rates():
    result = make(timeline(), gpus=2)
    assert result.span == (10.0, 110.0)
    rates = result.summary["request_throughput"]
    assert set(rates) == RATE_KEYS
    assert rates["overall"] == approx(0.1)  # 10 / 100
    assert rates["steady_state"] == approx(0.075)  # 6 ends >= 30 / 80
    assert rates["last_30s"] == approx(5 / 30)  # 5 ends >= 80 / 30
    assert rates["per_gpu"] == approx(0.0375)  # 0.075 / 2
    # prompt tokens count at the first token (end - 1): same split, 100 each
    inputs = result.summary["input_throughput"]
    assert inputs["overall"] == approx(10.0)
    assert inputs["steady_state"] == approx(7.5)
    assert inputs["last_30s"] == approx(500 / 30)
    assert "cached_input_throughput" not in result.summary  # nobody reported cached tokens


def output_records(b_cached: int | None = 100) -> list[RequestRecord]:
    return [
        # A: sent 1, chunks 1 @2.0, 1 @2.5, 2 @10.0 (4 tokens), end 11; prompt 100, cached 20
        rec(0, sent=1.0, chunks=((2.0, 1), (2.5, 1), (10.0, 2)), end=11.0, prompt=100, cached=20),
        # B: sent 4, two 1-token chunks @6 and @8 but the server counted 4: each chunk is worth 2;
        #    prompt 300 (planned 250), cached 100
        rec(1, sent=4.0, chunks=((6.0, 1), (8.0, 1)), end=9.0, output=4, prompt=300, planned=250, cached=b_cached),
        # a failed request without a cached count: only ok records decide the cached figures
        rec(2, status="failed", sent=5.0, end=5.5, error="server: 500"),
    ]


def test_output_throughput_at_chunk_times_scaled_to_server_count():
    s = make(output_records()).summary
    # span 1 -> 11 = 10 s; steady state from 3; last window = min(30, 10) = the whole span
    out = s["output_throughput"]
    assert out["overall"] == approx(0.8)  # (4 + 4) / 10
    # >= 3: A's 2 @10, B's 2 @6 and 2 @8 = 6 (counting at the ends would give 8)
    assert out["steady_state"] == approx(0.75)  # 6 / 8
    assert out["last_30s"] == approx(0.8)
    assert out["per_gpu"] == approx(0.75)
    req = s["request_throughput"]
    assert req["overall"] == approx(0.2) and req["steady_state"] == approx(0.25)  # 2 / 10, 2 / 8
    # prompt tokens at the first token: A 100 @2, B 300 @6
    assert s["input_throughput"]["overall"] == approx(40.0)
    assert s["input_throughput"]["steady_state"] == approx(37.5)  # 300 / 8
    assert s["cached_input_throughput"]["overall"] == approx(12.0)  # (20 + 100) / 10
    assert s["cached_input_throughput"]["steady_state"] == approx(12.5)  # 100 / 8
    assert s["uncached_input_throughput"]["overall"] == approx(28.0)  # (80 + 200) / 10
    assert s["uncached_input_throughput"]["steady_state"] == approx(25.0)  # 200 / 8


def test_cached_throughput_needs_every_ok_record_to_report():
    s = make(output_records(b_cached=None)).summary
    assert "cached_input_throughput" not in s
    assert "uncached_input_throughput" not in s
    assert s["input_throughput"]["overall"] == approx(40.0)


# ---------------------------------------------------------------- goodput, concurrency, counts


def goodput_records() -> list[RequestRecord]:
    return [
        # ttft 0.3, tpot (0.46 - 0.3) / 4 = 0.04: good
        rec(0, sent=1.0, chunks=((1.3, 1), (1.46, 4)), end=1.46),
        # ttft 0.6 > 0.5: bad
        rec(1, sent=2.0, chunks=((2.6, 1),), end=2.6),
        # ttft 0.2, tpot 0.24 / 4 = 0.06 > 0.05: bad
        rec(2, sent=3.0, chunks=((3.2, 1), (3.44, 4)), end=3.44),
        # ttft exactly 0.5 (at the limit), one token so no tpot: good
        rec(3, sent=4.0, chunks=((4.5, 1),), end=4.5),
        # failed: counts in the denominator, never good
        rec(4, status="failed", sent=5.0, end=5.1, error="server: 500"),
        # cancelled: not counted at all
        rec(5, status="cancelled", sent=5.5, chunks=((5.6, 1),)),
    ]


def test_goodput_share_of_ok_and_failed_meeting_every_threshold():
    s = make(goodput_records(), goodput={"ttft": 0.5, "tpot": 0.05}).summary
    assert s["goodput"]["value"] == approx(0.4)  # 2 good / (4 ok + 1 failed)
    assert s["error_rate"]["value"] == approx(0.2)  # 1 / 5


def test_goodput_absent_without_thresholds():
    assert "goodput" not in make(goodput_records()).summary


def test_goodput_itl_threshold_is_the_worst_per_token_gap():
    records = [
        # gaps 0.1 and 0.2: worst 0.2 > 0.1
        rec(0, sent=1.0, chunks=((1.2, 1), (1.3, 1), (1.5, 1)), end=1.5),
        # one 0.4 s gap for 4 tokens: 0.1 per token, within the limit
        rec(1, sent=2.0, chunks=((2.2, 1), (2.6, 4)), end=2.6),
    ]
    assert make(records, goodput={"itl": 0.1}).summary["goodput"]["value"] == approx(0.5)


def test_effective_concurrency_and_requests_block():
    records = [
        rec(0, sent=1.0, chunks=((2.0, 1),), end=5.0),  # 4 s
        rec(1, sent=2.0, chunks=((3.0, 1),), end=9.0),  # 7 s
        rec(2, sent=3.0, chunks=((4.0, 1),), end=11.0),  # 8 s
        rec(3, status="failed", sent=4.0, end=4.5, error="server: 500"),  # 0.5 s
        rec(4, status="cancelled", sent=5.0, chunks=((6.0, 1),), end=30.0),  # not measured
        rec(5, sent=0.5, chunks=((0.6, 1),), end=20.0, warmup=True),  # not measured
    ]
    result = make(records, planned=7)
    assert result.span == (1.0, 11.0)
    s = result.summary
    assert s["effective_concurrency"]["value"] == approx(1.95)  # (4 + 7 + 8 + 0.5) / 10
    assert s["requests"] == {"ok": 3, "failed": 1, "cancelled": 1, "warmup": 1, "planned": 7, "sessions_complete": 3}


# ---------------------------------------------------------------- absent metrics


def test_one_turn_sessions_have_ttfat_equal_to_ttft_and_no_eligible_rate():
    records = [
        rec(0, sent=1.0, chunks=((1.2, 1),), end=1.3, prompt=100, cached=40),
        rec(1, sent=2.0, chunks=((2.4, 1),), end=2.5, prompt=100, cached=60),
    ]
    s = make(records).summary
    # a one-turn session's first token of the last request is its only first token
    assert s["ttfat"]["count"] == 2
    assert s["ttfat"]["mean"] == approx(0.3) == s["ttft"]["mean"]
    assert s["cache_hit_rate"]["mean"] == approx(0.5)  # (0.4 + 0.6) / 2
    assert "eligible_cache_hit_rate" not in s  # nothing was eligible before the first turn
    assert "decode_tps" not in s  # one-token answers have no decode time
    assert "tpot" not in s and "itl" not in s and "queue" not in s
    assert s["cached_tokens"]["mean"] == approx(50.0)


def test_empty_run_has_only_the_counts():
    result = make([], planned=4)
    assert result.span == (0.0, 0.0)
    assert result.summary == {
        "requests": {"ok": 0, "failed": 0, "cancelled": 0, "warmup": 0, "planned": 4, "sessions_complete": 0},
    }


def test_all_failed_run():
    records = [
        rec(0, status="failed", sent=1.0, end=2.0, error="server: 503"),
        rec(1, status="failed", sent=1.5, end=3.0, error="server: 503"),
    ]
    s = make(records).summary
    assert s["error_rate"]["value"] == 1.0
    assert "ttft" not in s and "latency" not in s and "ttfat" not in s
    assert s["request_throughput"]["overall"] == 0.0
    assert s["effective_concurrency"]["value"] == approx(1.25)  # (1 + 1.5) / 2


# ---------------------------------------------------------------- tables and writers


def test_request_table_has_one_row_per_record():
    records = incomplete_sessions()
    records[0].notes.append("usage says 2 output tokens, chunks carried 1")
    table = make(records).request_table()
    assert isinstance(table, pd.DataFrame)
    assert len(table) == len(records) == 10
    for column in (
        "session_id",
        "turn_index",
        "status",
        "warmup",
        "ttft",
        "tpot",
        "latency",
        "queue",
        "prompt_tokens",
        "cached_tokens",
        "output_tokens",
        "schedule_lag",
        "chunks",
        "notes",
    ):
        assert column in table.columns, column
    assert "chunk_times" not in table.columns
    assert list(table["status"]).count("failed") == 1
    assert list(table["status"]).count("cancelled") == 1
    assert table.loc[0, "ttft"] == approx(0.2)  # F turn 0: 1.2 - 1.0
    assert table.loc[0, "latency"] == approx(0.3)
    assert table.loc[0, "notes"] == "usage says 2 output tokens, chunks carried 1"
    assert table.loc[0, "chunks"] == 1
    assert table.loc[3, "error"] == "server: boom"


def test_session_table_has_one_row_per_complete_session():
    table = agents().session_table()
    assert isinstance(table, pd.DataFrame)
    assert list(table.columns) == [
        "session_id",
        "session_index",
        "turns",
        "session_latency",
        "ttfat",
        "decode_tps",
        "cache_hit_rate",
        "eligible_cache_hit_rate",
        "output_tokens_per_session",
    ]
    assert len(table) == 2
    rows = table.set_index("session_id")
    assert rows.loc["agent-a", "eligible_cache_hit_rate"] == approx(384 / 450)
    assert rows.loc["agent-b", "turns"] == 2
    empty = make([rec(0, status="failed", sent=1.0, end=1.1, error="x: y")]).session_table()
    assert len(empty) == 0 and "ttfat" in empty.columns


def test_write_json_round_trips(tmp_path):
    result = agents(gpus=2, goodput={"ttft": 0.5}, warnings=["tokenizer mismatch"])
    path = result.write_json(tmp_path / "deep" / "result.json")
    loaded = json.loads(path.read_text())
    assert loaded["summary"] == result.summary
    assert loaded["summary"]["eligible_cache_hit_rate"]["max"] == approx(384 / 450)
    assert loaded["summary"]["ttft"]["count"] == 5
    assert loaded["gpus"] == 2
    assert loaded["goodput_thresholds"] == {"ttft": 0.5}
    assert loaded["warnings"] == ["tokenizer mismatch"]
    assert loaded["workload"] == "w" and loaded["endpoint"] == "e"


def test_write_csv_round_trips(tmp_path):
    records = incomplete_sessions()
    path = make(records).write_csv(tmp_path / "sub" / "requests.csv")
    table = pd.read_csv(path)
    assert len(table) == len(records)
    assert list(table["session_id"]) == [r.session_id for r in records]
    assert table["ttft"].iloc[1] == approx(0.2)  # F turn 1: 2.2 - 2.0
    assert table["status"].tolist().count("ok") == 8  # including the warm-up one


def test_decode_tps_leaves_out_answers_that_arrived_in_one_chunk():
    streamed = rec(0, 0, 2, sent=0.0, chunks=((0.1, 1), (0.2, 1), (0.3, 1)), end=0.3, prompt=10, cached=0)
    # a non-streamed answer: 20 tokens in one chunk, so no decode time was measured
    whole = rec(0, 1, 2, sent=1.0, chunks=((2.0, 20),), end=2.0, prompt=40, cached=0)
    row = make([streamed, whole]).session_rows[0]
    assert row["decode_tps"] == approx(10.0)  # (3 - 1) tokens / (0.3 - 0.1) s, the 20 left out


@pytest.mark.parametrize("seed", range(5))
def test_weighted_stats_equal_the_stats_of_the_repeated_values(seed):
    rng = np.random.default_rng(seed)
    values = rng.exponential(0.01, size=int(rng.integers(1, 40))).round(4)  # ties included
    weights = rng.integers(1, 9, size=values.size)
    repeated = stats(np.repeat(values, weights))
    weighted = stats(values, weights)
    assert weighted.keys() == repeated.keys()
    for name, value in repeated.items():
        assert weighted[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name


def test_itl_and_output_events_keep_records_apart_when_one_has_no_chunks():
    """A non-streamed record (no chunks) between two streamed ones: ITL never spans two records,
    and its tokens count at its end."""
    records = [
        rec(0, sent=0.0, chunks=((1.0, 1), (1.5, 1)), end=1.5),
        rec(1, sent=0.0, end=2.0, output=10),
        rec(2, sent=0.0, chunks=((3.0, 1), (3.2, 2), (3.6, 1)), end=3.6),
    ]
    result = make(records)
    # gaps: 0.5 (record 0); 0.1, 0.1 (record 2's 2-token chunk), 0.4
    assert result.summary["itl"]["count"] == 4
    assert result.summary["itl"]["mean"] == approx((0.5 + 0.1 + 0.1 + 0.4) / 4)
    assert result.summary["itl"]["max"] == approx(0.5)
    times, amounts = result._chunks.output_events()
    assert sorted(zip(times.tolist(), amounts.tolist(), strict=True)) == [
        (1.0, 1.0),
        (1.5, 1.0),
        (2.0, 10.0),
        (3.0, 1.0),
        (3.2, 2.0),
        (3.6, 1.0),
    ]


def test_itl_takes_the_servers_count_where_the_stream_merged_tokens_per_event():
    """A server putting 2 tokens in each event (speculative decoding, a stream interval) without
    saying so: the stream counts 1 an event, the usage 10. TPOT and throughput took the usage's
    count, ITL the stream's: every gap counted whole, ITL twice TPOT (found by two review
    helpers). Each chunk now carries its share of the usage's count."""
    merged = rec(0, sent=0.0, chunks=tuple((0.1 + 0.02 * i, 1) for i in range(5)), end=0.18, output=10)
    result = make([merged])
    assert result.summary["itl"]["mean"] == approx(0.01)  # 20 ms a chunk of 2 tokens
    assert result.summary["itl"]["count"] == 8  # 4 later chunks, 2 tokens each
    assert result.summary["tpot"]["mean"] == approx(0.08 / 9)
    assert make([merged], goodput={"itl": 0.015}).summary["goodput"]["value"] == 1.0  # the worst gap per token: 10 ms
    uneven = rec(1, sent=0.0, chunks=tuple((0.1 + 0.02 * i, 1) for i in range(5)), end=0.18, output=9)
    assert make([uneven]).summary["itl"]["count"] == 7  # 9 tokens as 2, 2, 1, 2, 2: the first chunk's 2 are not gaps


def test_a_result_prints_as_one_line_whatever_its_records():
    """`print(llm_result.capacity.points)`, as docs/capacity.md showed, wrote every record of
    every point: a 7.6 MB line in a failed test's captured output (a new user's trial)."""
    records = [rec(i, sent=0.0, chunks=tuple((0.1 * k, 1) for k in range(1, 200)), end=20.0) for i in range(500)]
    records[0].status = "failed"
    text = repr(make(records))
    assert text == "Result(ReplayRun(500 records (1 failed, 499 ok), workload 'w', endpoint 'e', 100 s))", text
