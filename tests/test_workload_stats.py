"""describe(): workload figures on tiny hand-built workloads (hand-computed) and on real traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmreplay import HashBlocks, Payload, Session, Synthetic, TokenIds, Turn, Workload, load_workload
from pytest_llmreplay.workloads.stats import describe, reusable_prefix_share

REPO = Path(__file__).parent.parent


def workload(*sessions: Session, timed: bool = True) -> Workload:
    return Workload(tuple(sessions), format="test", timed=timed)


def single(id: str, arrival: float, input_tokens: int | None, prompt, output_tokens: int | None = 1) -> Session:
    return Session(id, arrival, (Turn(input_tokens, output_tokens, prompt),))


def blocks(*ids: int, size: int = 4) -> HashBlocks:
    return HashBlocks(ids, size)


# Hash ids, block size 4, in arrival order:
#   a  [1,2,3]  10 tokens: all new                          -> 0
#   b  [1,2,5]  12 tokens: blocks 1,2 cached                -> 8
#   c  [9,2]     8 tokens: block 2 under another prefix     -> 0
#   d  [1,2,3]  10 tokens: all cached, last block partial   -> min(3*4, 10) = 10
#   e  synthetic: not counted
# share = 18 / 40; span 10 s; 5 requests -> 0.5 req/s
HASHED = workload(
    single("a", 0.0, 10, blocks(1, 2, 3)),
    single("b", 2.0, 12, blocks(1, 2, 5)),
    single("c", 5.0, 8, blocks(9, 2)),
    single("d", 10.0, 10, blocks(1, 2, 3)),
    single("e", 10.0, 1000, Synthetic()),
)


def test_reusable_share_of_hash_ids():
    stats = describe(HASHED)
    assert stats.reusable_prefix_share == pytest.approx(18 / 40)
    assert (stats.sessions, stats.requests, stats.span_s) == (5, 5, 10.0)
    assert stats.request_rate == pytest.approx(0.5)
    assert stats.session_history_share is None


def test_rows_of_a_timed_workload():
    rows = dict(describe(HASHED).rows())
    assert rows["requests"] == "5"
    assert rows["time span"] == "10.0 s"
    assert rows["request rate"] == "0.50 req/s"
    assert rows["reusable prefix share"] == "45.0% (unbounded cache)"
    assert "session history share" not in rows


def test_reusable_share_of_token_ids():
    # block size 4: only full blocks count
    #   [0..9]             10 tokens: blocks [0-3] [4-7] new (2 leftover tokens never cached) -> 0
    #   [0..7, 100..104]   13 tokens: [0-3] [4-7] cached, [100-103] new                     -> 8
    #   [0, 1, 2]           3 tokens: no full block                                          -> 0
    w = workload(
        single("a", 0.0, 10, TokenIds(tuple(range(10)))),
        single("b", 1.0, 13, TokenIds(tuple(range(8)) + (100, 101, 102, 103, 104))),
        single("c", 2.0, 3, TokenIds((0, 1, 2))),
    )
    assert describe(w, token_block_size=4).reusable_prefix_share == pytest.approx(8 / 26)
    # block size 2: b reuses [0,1]..[6,7] (8 tokens) and c now has a full cached block [0,1] (2)
    assert reusable_prefix_share(w, token_block_size=2) == pytest.approx(10 / 26)
    assert describe(w).reusable_prefix_share == 0.0  # default 16-token blocks: none is full


def test_cache_follows_sessions_then_turns():
    # the second turn of s reuses its first turn's blocks; t (later) reuses s's second turn
    s = Session("s", 0.0, (Turn(4, 1, blocks(1)), Turn(8, 1, blocks(1, 2))))
    t = Session("t", 1.0, (Turn(12, 1, blocks(1, 2, 3)),))
    assert reusable_prefix_share(workload(s, t)) == pytest.approx((4 + 8) / 24)


def test_no_hash_or_token_ids_no_share():
    assert reusable_prefix_share(workload(single("a", 0.0, 5, Synthetic()))) is None


# Session a grows twice: history (100 + 10) + (150 + 20) = 280 of 530 prompt tokens.
GROWING = workload(
    Session(
        "a",
        0.0,
        (
            Turn(100, 10, Synthetic()),
            Turn(150, 20, Synthetic(extends_previous=True)),
            Turn(200, 5, Synthetic(extends_previous=True)),
        ),
    ),
    Session("b", 0.0, (Turn(50, 5, Synthetic()), Turn(30, 5, Synthetic()))),
    timed=False,
)


def test_session_history_share_and_lengths():
    stats = describe(GROWING)
    assert stats.session_history_share == pytest.approx(280 / 530)
    assert stats.turns_per_session == {"mean": 2.5, "min": 2.0, "max": 3.0}
    assert stats.input_tokens["mean"] == pytest.approx(106.0)
    assert (stats.input_tokens["p50"], stats.input_tokens["max"]) == (100.0, 200.0)
    assert stats.output_tokens["mean"] == pytest.approx(9.0)
    assert stats.reusable_prefix_share is None


def test_untimed_workload_has_no_span_or_rate():
    stats = describe(GROWING)
    assert (stats.timed, stats.span_s, stats.request_rate) == (False, None, None)
    rows = dict(stats.rows())
    assert rows["time span"] == "untimed (replayed by concurrency)"
    assert "request rate" not in rows
    assert rows["session history share"] == f"{280 / 530:.1%}"


def test_reasoning_lengths_are_summed_up_over_the_turns_that_state_one():
    thinking = Session(
        "a", 0.0, (Turn(5, 40, Synthetic(), reasoning_tokens=30), Turn(5, 20, Synthetic(), reasoning_tokens=10))
    )
    rows = dict(describe(workload(thinking, single("b", 1.0, 5, Synthetic(), 8))).rows())
    assert rows["reasoning tokens (of output)"] == "mean 20.0  p50 20  p90 28  p99 30  max 30  (2 of 3 turns)"
    assert "reasoning tokens (of output)" not in dict(describe(workload(single("b", 1.0, 5, Synthetic(), 8))).rows())


def test_zero_span_has_no_rate():
    stats = describe(workload(single("a", 3.0, 5, Synthetic()), single("b", 3.0, 5, Synthetic())))
    assert (stats.span_s, stats.request_rate) == (0.0, None)
    assert dict(stats.rows())["request rate"] == "n/a"


def test_request_rate_is_over_the_span_of_request_arrivals():
    """An agent session at 0 s whose turns follow after delays of 9 s and 20 s, and a request at
    1 s: the 4 requests arrive from 0 s to 29 s (at the earliest: responses take time too), so
    4 / 29 req/s, not 4 requests over the 1 s between session starts."""

    def agent(id: str, arrival: float) -> Session:
        return Session(
            id,
            arrival,
            (Turn(5, 1, Synthetic()), Turn(5, 1, Synthetic(), delay_s=9.0), Turn(5, 1, Synthetic(), delay_s=20.0)),
        )

    stats = describe(workload(agent("a", 0.0), Session("b", 1.0, (Turn(5, 1, Synthetic()),))))
    assert (stats.requests, stats.span_s) == (4, 29.0)
    assert stats.request_rate == pytest.approx(4 / 29)
    stats = describe(workload(agent("a", 0.0), agent("b", 1.0)))
    assert (stats.span_s, stats.request_rate) == (30.0, pytest.approx(6 / 30))


def test_payloads_have_unknown_lengths():
    w = workload(
        single("a", 0.0, None, Payload({"messages": []}), output_tokens=None),
        single("b", 0.0, None, Payload({"messages": []}), output_tokens=7),
        timed=False,
    )
    stats = describe(w)
    assert (stats.unknown_lengths, stats.input_tokens) == (2, None)
    assert stats.output_tokens["mean"] == 7.0
    rows = dict(stats.rows())
    assert rows["turns of unknown length"] == "2 (verbatim payloads)"
    assert rows["input tokens"] == "n/a"


# --- real traces -------------------------------------------------------------------------------


def test_conversation_trace_figures(trace_data):
    stats = describe(load_workload(trace_data / "mooncake" / "conversation_trace.jsonl.gz"))
    assert (stats.format, stats.sessions, stats.requests) == ("mooncake", 12_031, 12_031)
    assert stats.input_tokens["mean"] == pytest.approx(12_035, abs=1)
    assert (stats.input_tokens["p50"], stats.input_tokens["max"]) == (6_909, 126_195)
    assert stats.output_tokens["mean"] == pytest.approx(343, abs=1)
    assert stats.span_s == pytest.approx(3_537, abs=1)
    assert stats.request_rate == pytest.approx(3.4, abs=0.05)
    assert f"{stats.reusable_prefix_share:.1%}" == "37.4%"
    assert dict(stats.rows())["reusable prefix share"] == "37.4% (unbounded cache)"


def test_synthetic_mooncake_trace_reuses_more(trace_data):
    stats = describe(load_workload(trace_data / "mooncake" / "synthetic_trace.jsonl.gz"))
    assert stats.requests == 3_993
    assert stats.input_tokens["mean"] == pytest.approx(15_325, abs=1)
    assert stats.reusable_prefix_share == pytest.approx(0.65, abs=0.01)


def test_trie_history_share_matches_the_schema(trace_data):
    path = trace_data / "trie" / "office_work_8k_slice.jsonl"
    history = total = 0
    for record in map(json.loads, path.read_text().splitlines()):
        prompt, responses = record["input_prompt_length"], record["assistant_response_length"]
        total += prompt
        for k in range(record["num_turns"]):
            history += prompt + responses[k]  # the previous request's prompt + response
            prompt += responses[k] + record["tool_call_output_length"][k]
            total += prompt
    stats = describe(load_workload(path))
    assert (stats.requests, stats.timed) == (193, False)
    assert stats.session_history_share == pytest.approx(history / total)


def test_a_span_under_a_second_keeps_its_digits():
    """1.2 ms of arrivals is not '0.0 s' beside a rate of 2,500 req/s."""
    rows = dict(
        describe(workload(*(single(f"s{i}", at, 10, Synthetic()) for i, at in enumerate((0, 0.0005, 0.0012))))).rows()
    )
    assert (rows["time span"], rows["request rate"]) == ("0.0012 s", "2,500.00 req/s")


@pytest.mark.parametrize(
    ("format", "line", "unit", "read"),
    [
        ("mooncake", '{{"timestamp": {at}, "input_length": 10, "output_length": 5}}', 1.0, "0.003 s (8,333 req/s)"),
        (
            "llmservingsim",
            '{{"input_toks": 10, "output_toks": 5, "arrival_time_ns": {at}}}',
            1000.0,
            "3e-06 s (8,333,333 req/s)",
        ),
    ],
)
def test_a_trace_in_a_smaller_unit_than_its_formats_is_named_at_load(tmp_path, format, line, unit, read):
    """Seconds in Mooncake's millisecond field (microseconds in LLMServingSim's nanoseconds) load
    without error but 1000x too fast: the load warns, naming the file, the rate and the unit."""
    path = tmp_path / "trace.jsonl"
    arrivals = [0.125 * i for i in range(25)]  # 25 requests over 3 s, written as seconds
    path.write_text("".join(line.format(at=f"{at * unit:g}") + "\n" for at in arrivals))
    (warning,) = load_workload(path, format).warnings
    assert warning.startswith(f"{path}: 25 requests arrive within {read}: {format}'s ")
    assert "times too fast" in warning
    # a few hand-written requests (a test's trace, a burst) say little of a unit: no warning
    path.write_text("".join(line.format(at=f"{at * unit:g}") + "\n" for at in arrivals[:19]))
    assert load_workload(path, format).warnings == ()


def test_real_traces_and_a_fast_synthetic_spec_do_not_warn(tmp_path):
    """Recorded traffic is far below 1,000 req/s; a synthetic spec's rate is the user's own."""
    assert load_workload(REPO / "workloads/mooncake_conversation_head200.jsonl").warnings == ()
    assert load_workload(REPO / "workloads/llmservingsim_example.jsonl").warnings == ()
    spec = tmp_path / "fast.yaml"
    spec.write_text("synthetic:\n  sessions: 50\n  input_tokens: 10\n  output_tokens: 5\n  rate: 5000\n  seed: 1\n")
    assert load_workload(spec).warnings == ()


def test_delays_before_later_turns_are_summed_up_in_seconds():
    """Think or tool time between turns: a trie trace written in milliseconds shows 1,500.0 s."""
    chat = Session(
        "a", 0.0, (Turn(5, 5, Synthetic()), Turn(5, 5, Synthetic(), delay_s=0.5), Turn(5, 5, Synthetic(), delay_s=2.0))
    )
    agent = Session("b", 1.0, (Turn(5, 5, Synthetic()), Turn(5, 5, Synthetic(), delay_s=1500.0)))
    stats = describe(workload(chat, agent, single("c", 2.0, 5, Synthetic())))
    assert stats.later_turn_delays == pytest.approx(
        {"mean": 1502.5 / 3, "p50": 2.0, "p90": 1500 - 0.2 * 1498, "p99": 1500 - 0.02 * 1498, "max": 1500.0}
    )
    assert dict(stats.rows())["delay before later turns"] == (
        "mean 500.8 s  p50 2.0 s  p90 1,200.4 s  p99 1,470.0 s  max 1,500.0 s"
    )
    assert "delay before later turns" not in dict(describe(HASHED).rows())


def test_delays_of_a_real_agent_trace_are_its_tool_latencies(trace_data):
    path = trace_data / "trie/office_work_8k_slice.jsonl"
    latencies = [s for line in path.read_text().splitlines() for s in json.loads(line)["tool_call_latency"]]
    delays = describe(load_workload(path)).later_turn_delays
    assert delays is not None
    assert (delays["mean"], delays["max"]) == pytest.approx((sum(latencies) / len(latencies), 5.741))


def test_shared_prefix_share_of_synthetic_prefix_groups():
    """Group 0: prefixes 100, 60 (60 reused), 300 of a 200-token prompt (its 200 cut to the
    prompt; 100 reused); group 1: 50, first of its group (0). Growth turns and prompts without a
    group add to the total only. (60 + 100) / (400 + 300 + 200 + 100 + 500 + 605) = 7.6%."""
    grouped = workload(
        single("a", 0.0, 400, Synthetic(prefix_group=0, prefix_tokens=100)),
        single("b", 1.0, 300, Synthetic(prefix_group=0, prefix_tokens=60)),
        single("c", 2.0, 200, Synthetic(prefix_group=0, prefix_tokens=300)),
        single("d", 3.0, 100, Synthetic(prefix_group=1, prefix_tokens=50)),
        Session("e", 4.0, (Turn(500, 5, Synthetic()), Turn(605, 5, Synthetic(extends_previous=True)))),
    )
    stats = describe(grouped)
    assert stats.shared_prefix_share == pytest.approx(160 / 2105)
    assert dict(stats.rows())["shared prefix share"] == "7.6% (prefix groups, unbounded cache)"
    assert describe(HASHED).shared_prefix_share is None
