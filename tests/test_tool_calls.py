"""Tool calls in agent sessions: the turns of an agent trace that end in one (trie's, LLMServingSim
agentic sessions') ask for it with ``tool_calls`` on, the simulator answers with one call (as
OpenAI streams it: the openai SDK parses it), the next turn sends it back with the tool's output,
and the time to it is the time to the first answer token; TTFAT spans the tools' durations."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from test_format_trie import trace, write_jsonl
from test_sim_server import stream, tiny_profile

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.workloads.formats import load_workload, write_workload
from pytest_llmreplay.workloads.prompts import TOOL, TOOL_CHOICE, TOOL_NAME, Conversation

# two trie traces of three requests: the first two end in a tool call that runs 0.2 s and 0.4 s
TOOL_S = [0.2, 0.4]
TRIE = [
    trace(
        input_prompt_length=prompt,
        assistant_response_length=responses,
        tool_call_output_length=outputs,
        tool_call_latency=TOOL_S,
        final_assistant_response_length=final,
    )
    for prompt, responses, outputs, final in ((120, [9, 7], [40, 25], 12), (90, [5, 11], [30, 60], 8))
]
ITERATION_S = 0.001


@pytest.fixture
def trie(tmp_path):
    return load_workload(write_jsonl(tmp_path, TRIE))


def offline(workload, prompts, **settings) -> Result:
    endpoint = SimEndpoint(tiny_profile(), prompts)
    return Result(replay(workload, endpoint, prompts, ReplaySettings(**settings), clock=VirtualClock()))


def over_http(url, workload, prompts, **settings) -> Result:
    endpoint = HTTPEndpoint(url, reasoning_hint=True, metrics_interval_s=0, extra_body={"return_token_ids": True})
    return Result(replay(workload, endpoint, prompts, ReplaySettings(concurrency=1, **settings)))


def test_agent_traces_mark_the_turns_that_end_in_a_tool_call(trie, tmp_path):
    assert [[turn.tool_call for turn in session.turns] for session in trie] == [[True, True, False]] * 2
    path = tmp_path / "sessions.jsonl"
    path.write_text(
        json.dumps(
            {
                "session_id": "s",
                "arrival_time_ns": 0,
                "sub_requests": [
                    {"input_toks": 10, "output_toks": 3, "tool_duration_ns": 5},
                    {"input_toks": 20, "output_toks": 3, "tool_duration_ns": 0},
                ],
            }
        )
        + "\n"
    )
    assert [turn.tool_call for turn in load_workload(path).sessions[0].turns] == [True, False]
    with pytest.raises(LLMReplayError, match="converting to mooncake would lose: tool calls"):
        write_workload(trie, tmp_path / "out.jsonl", "mooncake")


def test_a_tool_call_turn_asks_for_the_tool_and_the_next_sends_the_call_back(trie, bundled_prompts):
    conversation = Conversation(bundled_prompts, trie.sessions[0], "chat", tool_calls=True)
    _, first, _ = conversation.request(0)
    assert (first["tools"], first["tool_choice"]) == ([TOOL], TOOL_CHOICE)
    call = {"id": "call_7", "name": TOOL_NAME, "arguments": "look it up"}
    conversation.respond("", None, 9, [call])
    _, second, planned = conversation.request(1)
    assistant, tool = second["messages"][-2:]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": TOOL_NAME, "arguments": "look it up"}}
        ],
    }
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_7" and tool["content"]
    # the call's arguments are in the prompt the server counts (a chat template shows them): left
    # out of the planned count, every tool-call turn warned of a tokenizer mismatch (an agent
    # platform's trial)
    plain = Conversation(bundled_prompts, trie.sessions[0], "chat", tool_calls=True)
    plain.request(0)
    plain.respond("", None, 9, [{**call, "arguments": ""}])
    arguments = len(bundled_prompts.tokenizer.encode("look it up"))
    assert planned - plain.request(1)[2] == arguments > 0
    conversation.respond("", None, 7, [call])
    _, last, _ = conversation.request(2)
    assert "tools" not in last  # the final answer is text
    # off (the default), or on completions, no turn asks for one
    assert "tools" not in Conversation(bundled_prompts, trie.sessions[0], "chat").request(0)[1]
    assert "tools" not in Conversation(bundled_prompts, trie.sessions[0], "completions", tool_calls=True).request(0)[1]


def asked_to_call(max_tokens: int) -> dict:
    """A chat body that must call :data:`TOOL` after 2 reasoning tokens, within ``max_tokens``."""
    return {
        "messages": [{"role": "user", "content": "weather?"}],
        "max_tokens": max_tokens,
        "tools": [TOOL],
        "tool_choice": "required",
        "sim_reasoning_tokens": 2,
    }


def test_the_server_answers_with_a_tool_call_as_openai_streams_one(tiny_sim):
    body = asked_to_call(6)
    got = [e for e in stream(tiny_sim.url, "/v1/chat/completions", body) if isinstance(e, dict) and e["choices"]]
    deltas = [e["choices"][0]["delta"] for e in got][1:]  # after the role's
    assert [("reasoning_content" in d, "tool_calls" in d) for d in deltas] == [(True, False)] * 2 + [(False, True)] * 4
    opening = deltas[2]["tool_calls"][0]
    assert (opening["index"], opening["type"], opening["function"]["name"]) == (0, "function", TOOL_NAME)
    assert opening["id"].startswith("call_") and all("id" not in d["tool_calls"][0] for d in deltas[3:])
    assert got[-1]["choices"][0]["finish_reason"] == "tool_calls"
    whole = httpx.post(tiny_sim.url + "/v1/chat/completions", json=body).json()
    [call] = whole["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == TOOL_NAME and call["function"]["arguments"]
    assert whole["choices"][0]["message"]["content"] is None


def test_reasoning_that_takes_every_token_leaves_no_call_and_ends_at_the_limit(tiny_sim):
    """max_tokens 2, both reasoning: the reply said finish_reason tool_calls with no call in it."""
    body = asked_to_call(2)
    whole = httpx.post(tiny_sim.url + "/v1/chat/completions", json=body).json()["choices"][0]
    assert (whole["finish_reason"], whole["message"].get("tool_calls")) == ("length", None)
    got = [e for e in stream(tiny_sim.url, "/v1/chat/completions", body) if isinstance(e, dict) and e["choices"]]
    assert got[-1]["choices"][0]["finish_reason"] == "length"
    assert not any("tool_calls" in e["choices"][0]["delta"] for e in got)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
        ({"tools": [{"type": "function"}], "tool_choice": "auto"}, "tools[0]"),
        ({"tools": [TOOL], "tool_choice": 3}, "tool_choice"),
    ],
)
def test_a_bad_tool_request_is_refused_naming_the_field(tiny_sim, fields, param):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **fields}
    reply = httpx.post(tiny_sim.url + "/v1/chat/completions", json=body)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == param


def test_the_openai_sdk_reads_the_tool_call_stream(tiny_sim):
    import openai

    client = openai.OpenAI(base_url=tiny_sim.url + "/v1", api_key="x", max_retries=0, timeout=10)
    messages = [{"role": "user", "content": "weather?"}]
    calls: dict[int, dict] = {}
    for chunk in client.chat.completions.create(
        model="tiny-test", messages=messages, max_tokens=5, tools=[TOOL], tool_choice=TOOL_CHOICE, stream=True
    ):
        for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(piece.index, {"id": piece.id, "name": piece.function.name, "arguments": ""})
            call["arguments"] += piece.function.arguments or ""
    [call] = calls.values()
    assert call["id"].startswith("call_") and call["name"] == TOOL_NAME and call["arguments"]
    whole = client.chat.completions.create(
        model="tiny-test", messages=messages, max_tokens=5, tools=[TOOL], tool_choice=TOOL_CHOICE
    )
    assert whole.choices[0].message.tool_calls[0].function.name == TOOL_NAME
    assert whole.choices[0].finish_reason == "tool_calls"


def test_an_agent_replay_calls_its_tools_offline_and_over_http_alike(trie, bundled_prompts, tiny_sim):
    here = offline(trie, bundled_prompts, tool_calls=True, concurrency=1)
    there = over_http(tiny_sim.url, trie, bundled_prompts, tool_calls=True)
    for result in (here, there):
        assert [(r.turn_index, r.tool_calls) for r in result.records] == [(0, 1), (1, 1), (2, 0)] * 2
        assert all(r.status == "ok" for r in result.records)
    assert [r.output_tokens for r in here.records] == [r.output_tokens for r in there.records]
    # the call and the tool's output went back in the history, as the trace planned: no prompt
    # the server counted differs from the tokenizer's plan, and the agents' histories hit the cache
    assert not [w for w in there.warnings if "tokenizer mismatch" in w]
    assert there.summary["eligible_cache_hit_rate"]["min"] > 0.5
    plain = over_http(tiny_sim.url, trie, bundled_prompts)  # without tool calls: the same lengths and cache hits
    assert [r.prompt_tokens for r in plain.records] == [r.prompt_tokens for r in there.records]


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_tool_calls_over_an_api_that_is_not_asked_for_them_say_so(trie, bundled_prompts, tiny_sim, api):
    """Only chat turns ask for a tool call: over the Responses or Messages API the run warns once
    that its four tool-call turns went without tools, instead of a run whose records hold no call."""
    endpoint = HTTPEndpoint(tiny_sim.url, api=api, reasoning_hint=True, metrics_interval_s=0)
    result = Result(replay(trie, endpoint, bundled_prompts, ReplaySettings(concurrency=1, tool_calls=True)))
    assert [r.tool_calls for r in result.records] == [0] * 6
    warned = [w for w in result.warnings if w.startswith("tool_calls:")]
    assert warned == [
        f"tool_calls: asked for on the chat API only; over {api} the 4 turns that end in a tool call were sent "
        "without tools, so no figure measures a tool call (replay with api chat for them)"
    ]
    endpoint = HTTPEndpoint(tiny_sim.url, api=api, reasoning_hint=True, metrics_interval_s=0)
    unasked = Result(replay(trie, endpoint, bundled_prompts, ReplaySettings(concurrency=1)))
    assert not [w for w in unasked.warnings if w.startswith("tool_calls:")]
    # the in-process simulator answers every tool-call turn with a call, whatever the API
    assert not [w for w in offline(trie, bundled_prompts, tool_calls=True, concurrency=1).warnings if "tool_calls" in w]


def test_tool_calls_on_a_workload_without_tool_call_turns_say_that_none_was_asked_for(bundled_prompts):
    """A synthetic agent spec marks no turn as a tool call: --tool-calls changed nothing and said
    nothing, and an agent engineer believed tool calls were tested (an agent platform's trial)."""
    flat = load_workload(str(Path(__file__).parents[1] / "workloads" / "synthetic_chat.yaml"))
    warned = [w for w in offline(flat, bundled_prompts, tool_calls=True, max_requests=4).warnings if "tool_calls" in w]
    assert warned == [
        "tool_calls: no turn of this workload ends in a tool call (trie and LLMServingSim agentic traces mark them), "
        "so none was asked for"
    ]


def test_ttfat_spans_the_tools_durations(trie, bundled_prompts):
    """In virtual time each turn is sent its tool's duration after the previous one ended, and
    TTFAT ends at the final answer's first token: the sum of both turns' latencies, both tools'
    durations and the last turn's time to its first answer token."""
    result = offline(trie, bundled_prompts, tool_calls=True, concurrency=1)
    for row in result.session_rows:
        turns = sorted(
            (r for r in result.records if r.session_index == row["session_index"]), key=lambda r: r.turn_index
        )
        assert turns[1].sent_s - turns[0].end_s == pytest.approx(0.2)
        assert turns[2].sent_s - turns[1].end_s == pytest.approx(0.4)
        expected = sum(t.end_s - t.sent_s for t in turns[:2]) + 0.6 + (turns[2].first_answer_s - turns[2].sent_s)
        assert row["ttfat"] == pytest.approx(expected)


def test_the_time_to_a_tool_call_after_reasoning_is_the_ttfo(trie, bundled_prompts):
    """A reasoning model thinks, then calls its tool: TTFO ends at the call's first token."""
    endpoint = SimEndpoint(tiny_profile(), bundled_prompts, extra_body={"sim_reasoning_tokens": 3})
    result = Result(
        replay(trie, endpoint, bundled_prompts, ReplaySettings(tool_calls=True, concurrency=1), clock=VirtualClock())
    )
    calls = [r for r in result.records if r.tool_calls]
    assert len(calls) == 4
    for record in calls:
        assert record.first_answer_s - record.first_token_s == pytest.approx(3 * ITERATION_S)
    assert result.summary["ttfo"]["count"] == 6


def test_tool_calls_must_be_true_or_false():
    with pytest.raises(LLMReplayError, match="tool_calls: expected true or false, got 'yes'"):
        ReplaySettings(tool_calls="yes").validate()  # type: ignore[arg-type]
