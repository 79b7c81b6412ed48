"""Reasoning models and tool calls through the plugin (pytester): SLOs on TTFO and reasoning
tokens, the tables that show them, the gate on ``ttfo.p50``, the simulator's server reasoning as
the workload plans, and a test's ``tool_calls`` (each project a git repository: conftest's
``project``)."""

from __future__ import annotations

import json

from test_format_trie import trace
from test_plugin_baselines import git, head

# agent sessions whose every answer of 16 tokens follows 300 tokens of reasoning
REASONING_WORKLOAD = """\
synthetic:
  sessions: 6
  input_tokens: {dist: uniform, min: 64, max: 256}
  output_tokens: 16
  reasoning_tokens: 300
  turns: 2
  delay: 0.5
  rate: 2
  seed: 5
"""
TESTS = """
import pytest

@pytest.mark.llmreplay(workload="wl.yaml", slo={"ttfo.p90": "< 20s", "reasoning_tokens.mean": "< 4000", "error_rate": "== 0"})
def test_chat(llm_result):
    s = llm_result.summary
    assert s["ttfo"]["p50"] > s["ttft"]["p50"]
    assert s["answer_tokens"]["mean"] == 16 < s["reasoning_tokens"]["mean"]

@pytest.mark.llmreplay(workload="wl.yaml", slo={"ttfo.p90": "< 1ms"})
def test_answers_too_slowly(llm_result):
    pass

@pytest.mark.llmreplay(workload="plain.yaml", slo={"ttfo.p90": "< 20s"})
def test_a_model_that_does_not_reason(llm_result):
    assert "ttfo" not in llm_result.summary
"""
PLAIN = "synthetic:\n  sessions: 3\n  input_tokens: 32\n  output_tokens: 4\n  seed: 1\n"


def reasoning_project(project):
    project.path.joinpath("wl.yaml").write_text(REASONING_WORKLOAD)
    project.path.joinpath("plain.yaml").write_text(PLAIN)
    project.makepyfile(test_perf=TESTS)
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "-m", "reasoning perf tests")
    return project


def test_reasoning_slos_are_checked_and_shown(project):
    reasoning_project(project)
    result = project.runpytest("--llm-offline", "-rf")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*TTFO (s)*Reasoning tokens/turn*",  # the per-trace table of a run with reasoning
            "*ttfo.p90*< 1ms*BREACH*",
            "*ttfo.p90*< 20s*not measured*BREACH*",  # no reasoning, no TTFO: a breach, not a pass
        ]
    )
    # the tables of the failed tests: the reasoning one's has the TTFO column, the plain one's none
    assert out.count("Per-trace metrics") == 2 and out.count("TTFO (s)") == 1


def test_the_gate_compares_ttfo_when_the_run_reasons(project):
    reasoning_project(project)
    project.runpytest(
        "--llm-offline", "--llm-sim-profile", "fast.json", "--llm-save", "-k", "test_chat"
    ).assert_outcomes(passed=1)
    commit = head(project.path)[:12]
    result = project.runpytest("--llm-offline", "--llm-sim-profile", "slow.json", "--llm-compare", "-k", "test_chat")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"Compared with merge-base with main ({commit}), stored {commit} *",
            "ttfo.p50 * +*% [[]+*%, +*%[]]*5%*REGRESSION",
        ]
    )


def test_the_simulators_server_reasons_as_the_workload_plans(project):
    """Over HTTP (the simulator served, not in process) the replay sends each turn's planned
    reasoning to the server, which streams it as reasoning_content before the answer."""
    reasoning_project(project)
    project.path.joinpath("wl.yaml").write_text(REASONING_WORKLOAD.replace("300", "20").replace("rate: 2", "rate: 50"))
    result = project.runpytest("-o", "llm_offline=false", "--llm-repeat", "1", "--llm-report", "rep", "-k", "test_chat")
    result.assert_outcomes(passed=1)
    record = json.loads(next(project.path.joinpath("rep", "tests").glob("*.json")).read_text())
    assert record["fingerprint"]["kind"] == "sim-server"
    summary = record["summary"]
    assert (summary["reasoning_tokens"]["mean"], summary["answer_tokens"]["mean"]) == (20, 16)
    assert summary["ttfo"]["p50"] > summary["ttft"]["p50"]
    assert len(record["samples"]["ttfo"]) == 12


def test_a_test_asks_its_agent_trace_for_tool_calls(project):
    """``tool_calls`` is a replay setting: a marker key, stored with the result (a result
    with it is not compared with one without)."""
    row = trace(input_prompt_length=64, assistant_response_length=[6, 4], tool_call_output_length=[20, 12])
    project.path.joinpath("agents.jsonl").write_text(
        (json.dumps({**row, "final_assistant_response_length": 9}) + "\n") * 3
    )
    project.makepyfile(
        test_tool_agents="""
        import pytest

        @pytest.mark.llmreplay(workload="agents.jsonl", tool_calls=True, concurrency=3)
        def test_tool_agents(llm_result):
            calls = sorted((r.turn_index, r.tool_calls) for r in llm_result.records)
            assert calls == [(0, 1)] * 3 + [(1, 1)] * 3 + [(2, 0)] * 3  # the final answers call none
            assert llm_result.run.settings["tool_calls"] is True

        @pytest.mark.llmreplay(workload="agents.jsonl", concurrency=3)
        def test_tool_agents_without(llm_result):
            assert not any(r.tool_calls for r in llm_result.records)
        """
    )
    project.runpytest("--llm-offline", "test_tool_agents.py").assert_outcomes(passed=2)
