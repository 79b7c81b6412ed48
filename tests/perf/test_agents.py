"""Agent workloads: what a serving team promises a coding agent.

An agent waits for every answer before its next step, so what it feels is TTFAT (time from the
start of its task to the first token of its last step) and, step by step, how much of its
growing context the prefix cache keeps. Two styles: a declarative marker (the replay and the SLO
check happen around the test; the body may look at the result), and plain code with
``llm_replay`` and ``assert_slo``.
"""

import pytest


@pytest.mark.llmreplay(
    workload="workloads/synthetic_swe_agent.yaml",
    slo={
        "ttfat.p90": "< 180s",  # a 30-step task, 1-6 s of tool time a step, finishes its last step in 3 minutes
        "ttft.p99": "< 1s",  # no step waits more than a second for its first token
        "cache_hit_rate.mean": ">= 85%",  # each step's prompt is the last one plus its answer and a tool output
        "error_rate": "== 0",
    },
    regression={"ttfat.p50": "5%"},
)
def test_swe_agent_keeps_its_context_cached(llm_result):
    # the body runs after the replay; anything the SLO keys cannot say goes here
    summary = llm_result.summary
    assert summary["requests"]["sessions_complete"] == 12


def test_office_agents_four_at_a_time(llm_replay):
    result = llm_replay("workloads/trie_office_work_8k_slice.jsonl", concurrency=4)
    result.assert_slo(
        {
            "eligible_cache_hit_rate.mean": ">= 95%",  # of what the previous turn left, almost all is a hit
            "ttft.p99": "< 1s",
            "tpot.p90": "< 20ms",
            "error_rate": "== 0",
        }
    )
