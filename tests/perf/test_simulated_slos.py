"""Example SLO tests: the shipped workloads replayed offline on the simulated engine.

Each test replays a workload on the virtual clock against a bundled profile (Llama-3.1-8B on one
H100, from public specs) and checks SLOs a serving team would set for it. Until the declarative
``llmreplay`` marker lands, they use the library directly; the thresholds are the part to copy.
"""

from __future__ import annotations

import pytest

from pytest_llmreplay.clock import VirtualClock
from pytest_llmreplay.metrics import Result
from pytest_llmreplay.replay import ReplaySettings, replay
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.timing import load_profile

PROFILE = "llama-3.1-8b-h100"


@pytest.fixture
def simulate(llm_workload, llm_prompts):
    def run(path: str, **settings) -> dict:
        endpoint = SimEndpoint(load_profile(PROFILE), llm_prompts)
        result = Result(replay(llm_workload(path), endpoint, llm_prompts, ReplaySettings(**settings), clock=VirtualClock()))
        assert result.summary["error_rate"]["value"] == 0
        assert result.summary["requests"]["ok"] == result.run.planned_requests
        return result.summary

    return run


def test_agent_traces_reuse_their_history(simulate):
    summary = simulate("workloads/trie_office_work_8k_slice.jsonl", mode="concurrency", concurrency=4)
    assert summary["eligible_cache_hit_rate"]["mean"] >= 0.95  # each turn's prompt is the last one plus its answer
    assert summary["ttft"]["p99"] < 1.0
    assert summary["tpot"]["p90"] < 0.02


def test_chat_sessions_share_their_system_prompt(simulate):
    summary = simulate("workloads/synthetic_chat.yaml")
    assert summary["cache_hit_rate"]["mean"] >= 0.4
    assert summary["ttft"]["p99"] < 0.1
    assert summary["output_throughput"]["steady_state"] > 100


def test_mooncake_conversations_at_a_tenth_of_their_rate(simulate):
    summary = simulate("workloads/mooncake_conversation_head200.jsonl", speedup=0.1)
    assert summary["ttft"]["p50"] < 3.0  # prompts average 12k tokens; the longest take seconds to prefill
    assert summary["tpot"]["p90"] < 0.1
    assert summary["cache_hit_rate"]["mean"] > 0.1


@pytest.mark.parametrize("path", ["workloads/llmservingsim_example.jsonl", "workloads/azure_conv_head200.csv"])
def test_flat_traces_meet_interactive_slos(simulate, path):
    summary = simulate(path)
    assert summary["ttft"]["p99"] < 0.5
    assert summary["tpot"]["p99"] < 0.05
