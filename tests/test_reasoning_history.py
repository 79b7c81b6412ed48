"""A multi-turn chat replay with a reasoning model sends each answer back as the assistant's
message of the next turn, never the reasoning (vLLM's and DeepSeek's docs: ``reasoning_content``
is not to be sent back), streamed or whole, offline or over HTTP: the request bodies turn 2
sends to the simulator's server hold the answer alone, while the reasoning figures still count
the reasoning tokens."""

from __future__ import annotations

import pytest
from test_sim_reasoning import ANSWER, REASONING, agents
from test_sim_server import tiny_profile

from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.sim.endpoint import SimEndpoint


class RecordingEndpoint(HTTPEndpoint):
    """An HTTP endpoint that keeps, in order, each request it sends and what came back."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[dict, object]] = []

    async def send(self, request, response) -> None:
        await super().send(request, response)
        self.sent.append((request.body, response))


@pytest.mark.parametrize("stream", [True, False])
def test_turn_two_sends_back_the_answer_without_the_reasoning(bundled_prompts, tiny_sim, stream):
    endpoint = RecordingEndpoint(tiny_sim.url, reasoning_hint=True, metrics_interval_s=0, stream=stream)
    result = Result(replay(agents(sessions=1), endpoint, bundled_prompts, ReplaySettings(concurrency=1)))
    (first, first_reply), (second, _) = endpoint.sent
    assert first_reply.reasoning_text and first_reply.text  # the server sent both, apart
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assistant = second["messages"][len(first["messages"])]
    assert assistant == {"role": "assistant", "content": first_reply.text}
    assert first_reply.reasoning_text not in str(second)
    # the reasoning is still counted, and the history the server counted is the one planned
    assert [(r.output_tokens, r.reasoning_tokens) for r in result.records] == [(REASONING + ANSWER, REASONING)] * 2
    assert result.summary["answer_tokens"]["mean"] == ANSWER
    assert not [w for w in result.run.warnings if "tokenizer mismatch" in w]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_offline_the_history_holds_the_answer_alone_on_every_api(bundled_prompts, api):
    """The in-process simulator counts the prompt it gets: turn 2's is turn 1's prompt, its
    answer and the new tokens, never its reasoning; the planned count agrees."""
    endpoint = SimEndpoint(tiny_profile(), bundled_prompts, api=api)
    first, second = replay(
        agents(sessions=1), endpoint, bundled_prompts, ReplaySettings(concurrency=1), clock=VirtualClock()
    ).records
    assert (first.reasoning_tokens, second.reasoning_tokens) == (REASONING, REASONING)
    new = 48  # agents(): each turn adds 48 tokens
    assert second.planned_prompt_tokens == first.planned_prompt_tokens + ANSWER + new
    assert second.prompt_tokens - first.prompt_tokens == ANSWER + new
