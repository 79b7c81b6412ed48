"""The simulator speaks the Responses and Messages APIs: the official ``openai`` and ``anthropic``
SDKs, unmodified and with their strict response validation on, stream from its server and read
the usage our parser reads from the very same bytes; its refusals in each API's shape; and one
workload replayed over all four APIs gives the same figures, offline (exactly: the virtual clock)
and over HTTP (within the transport's noise)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import httpx
import pytest
from mockserver import ServerThread
from test_api_streams import parse_stream
from test_plugin_perf import TINY_WORKLOAD
from test_sim_server import serving, tiny_profile

from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.replayer.apis import APIS
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

MODEL = "tiny-test"
TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps"


@pytest.fixture(scope="module")
def prompts() -> PromptFactory:
    return PromptFactory(load_tokenizer(None))


@pytest.fixture(scope="module")
def sim(prompts) -> Iterator[ServerThread]:
    with serving(prompts) as thread:
        yield thread


def post(url: str, path: str, body: Any) -> httpx.Response:
    """A POST of its own (``test_sim_server``'s shared client is closed once that module's tests end)."""
    if isinstance(body, bytes):
        return httpx.post(url + path, content=body, timeout=10)
    return httpx.post(url + path, json=body, timeout=10)


def recording_client(http: ModuleType) -> tuple[Any, list[bytes]]:
    """An ``http.Client`` (``http``: httpx for openai, httpx2 for anthropic 2) whose transport keeps
    every response body it passes on, and that list."""
    bodies: list[bytes] = []

    class Recording(http.HTTPTransport):  # type: ignore[name-defined,misc]
        def handle_request(self, request: Any) -> Any:
            response = super().handle_request(request)
            body = response.read()
            bodies.append(body)
            return http.Response(response.status_code, headers=response.headers, content=body, request=request)

    return http.Client(transport=Recording()), bodies


def openai_client(url: str) -> tuple[Any, list[bytes]]:
    import openai

    http, bodies = recording_client(httpx)
    client = openai.OpenAI(
        base_url=url + "/v1", api_key="x", max_retries=0, http_client=http, _strict_response_validation=True
    )
    return client, bodies


def anthropic_client(url: str) -> tuple[Any, list[bytes]]:
    import anthropic
    import httpx2

    http, bodies = recording_client(httpx2)
    client = anthropic.Anthropic(
        base_url=url, api_key="x", max_retries=0, http_client=http, _strict_response_validation=True
    )
    return client, bodies


@pytest.mark.parametrize("reasoning", [0, 3, 6])  # none; then an answer; all 6 tokens (no answer)
def test_the_openai_sdk_streams_responses_and_reads_our_usage(sim, reasoning):
    client, bodies = openai_client(sim.url)
    history = [{"role": "user", "content": TEXT}, {"role": "assistant", "content": "Sure."}]
    asked = {"model": MODEL, "instructions": "Be brief. " * 8, "max_output_tokens": 6}
    asked["extra_body"] = {"sim_reasoning_tokens": reasoning}
    with client.responses.stream(input=[*history, {"role": "user", "content": TEXT}], **asked) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    ours, done = parse_stream("responses", bodies[-1])
    assert done and ours.error is None
    usage = final.usage
    assert (usage.input_tokens, usage.input_tokens_details.cached_tokens) == (ours.prompt_tokens, ours.cached_tokens)
    assert (usage.output_tokens, usage.output_tokens_details.reasoning_tokens) == (6, reasoning)
    assert (ours.completion_tokens, ours.reasoning_tokens, ours.reasoning_counted) == (6, reasoning, reasoning)
    assert kinds.count("response.reasoning_text.delta") == reasoning
    assert kinds.count("response.output_text.delta") == 6 - reasoning == len(ours.chunk_tokens) - reasoning
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert final.output_text == ours.text and bool(ours.reasoning_text) == bool(reasoning)  # the answer apart
    # the raw stream, and a whole reply, of the same SDK
    events = list(client.responses.create(input=TEXT, stream=True, **asked))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    whole = client.responses.create(input=TEXT, **asked)
    assert whole.usage.output_tokens == 6 and whole.usage.output_tokens_details.reasoning_tokens == reasoning
    assert [item.type for item in whole.output] == ["reasoning"] * bool(reasoning) + ["message"] * (reasoning < 6)


@pytest.mark.parametrize("reasoning", [0, 3, 6])
def test_the_anthropic_sdk_streams_messages_and_reads_our_usage(sim, reasoning):
    client, bodies = anthropic_client(sim.url)
    messages = [
        {"role": "user", "content": TEXT},
        {"role": "assistant", "content": [{"type": "text", "text": "Sure."}]},
    ]
    asked = {
        "model": MODEL,
        "system": "Be brief. " * 8,
        "max_tokens": 6,
        "extra_body": {"sim_reasoning_tokens": reasoning},
    }
    first = client.messages.create(messages=messages[:1], **asked)  # fills the cache for the next
    with client.messages.stream(messages=[*messages, {"role": "user", "content": TEXT}], **asked) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    ours, done = parse_stream("messages", bodies[-1])
    assert done and ours.error is None
    usage = final.usage
    whole_prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    assert (whole_prompt, usage.cache_read_input_tokens) == (ours.prompt_tokens, ours.cached_tokens)
    assert usage.cache_read_input_tokens > 0 and usage.input_tokens < ours.prompt_tokens  # net of the cache
    assert usage.output_tokens == ours.completion_tokens == 6 and ours.reasoning_counted == reasoning
    assert kinds[0] == "message_start" and kinds.count("thinking") == reasoning and kinds.count("text") == 6 - reasoning
    assert final.stop_reason == "max_tokens"
    assert [block.type for block in final.content] == ["thinking"] * bool(reasoning) + ["text"] * (reasoning < 6)
    assert [block.type for block in first.content] == [block.type for block in final.content]
    if reasoning:
        assert final.content[0].signature and first.content[0].signature


def test_refusals_come_in_each_apis_shape(sim):
    anthropic_body = post(sim.url, "/v1/messages", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert anthropic_body.status_code == 400
    assert anthropic_body.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }
    other_model = post(
        sim.url, "/v1/messages", {"model": "nope", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
    )
    assert other_model.status_code == 404 and other_model.json()["error"]["type"] == "not_found_error"
    responses = post(sim.url, "/v1/responses", {"model": MODEL, "input": [], "max_output_tokens": 2})
    assert responses.status_code == 400 and responses.json()["error"]["param"] == "input"
    bad_item = post(sim.url, "/v1/responses", {"input": [{"content": "x", "role": 3}]})
    assert bad_item.json()["error"]["message"] == "input[0]: expected an object with a string 'role'"
    # the client's check that a server serves an API: an empty body is refused, nothing generated
    assert [post(sim.url, path, {}).status_code for path in ("/v1/responses", "/v1/messages")] == [400, 400]


def test_the_messages_api_drops_ignore_eos_and_min_tokens_as_vllm_does(prompts):
    with serving(prompts, eos_mean_tokens=1.0) as thread:  # EOS after every token but the forced ones
        asked = {"model": MODEL, "max_tokens": 8, "ignore_eos": True, "min_tokens": 5}
        chat = post(thread.url, "/v1/chat/completions", {**asked, "messages": [{"role": "user", "content": TEXT}]})
        messages = post(thread.url, "/v1/messages", {**asked, "messages": [{"role": "user", "content": TEXT}]})
        responses = post(thread.url, "/v1/responses", {**asked, "input": TEXT, "max_output_tokens": 8})
    assert chat.json()["usage"]["completion_tokens"] == 8
    assert messages.json()["usage"]["output_tokens"] == 1 and messages.json()["stop_reason"] == "end_turn"
    assert (
        responses.json()["usage"]["output_tokens"] == 8
    )  # ignore_eos holds on the Responses API (min_tokens does not)


# -- one workload over the four APIs ---------------------------------------------------------------

ITERATION_S = 0.02  # long enough that the transport's noise is a small part of every time


def workload():
    spec = SyntheticSpec(sessions=6, input_tokens=40, output_tokens=5, reasoning_tokens=2, turns=3, delay=0.01, seed=4)
    return generate(spec)


def per_request(result: Result, field: str) -> list[Any]:
    return [getattr(r, field) for r in sorted(result.records, key=lambda r: (r.session_index, r.turn_index))]


def test_offline_the_four_apis_measure_the_same(prompts):
    results = {}
    for api in APIS:
        endpoint = SimEndpoint(tiny_profile(ITERATION_S), prompts, api=api)
        run = replay(workload(), endpoint, prompts, ReplaySettings(concurrency=3), clock=VirtualClock())
        results[api] = Result(run)
    chat = results["chat"]
    assert chat.ok and per_request(chat, "reasoning_tokens") == [2] * 18
    for api, result in results.items():
        assert result.ok and len(result.records) == 18, api
        for field in ("prompt_tokens", "cached_tokens", "output_tokens", "reasoning_tokens"):
            assert per_request(result, field) == per_request(chat, field), (api, field)
        for metric in ("ttft", "ttfo", "tpot", "latency", "ttfat"):
            assert result.summary[metric]["mean"] == pytest.approx(chat.summary[metric]["mean"], rel=1e-9), (
                api,
                metric,
            )
    assert sum(per_request(chat, "cached_tokens")) > 0  # the later turns hit their history


def test_over_http_the_four_apis_measure_the_same_within_the_noise(prompts):
    """Counts are equal (completions' prompts have no chat template: their own count). Times: each
    API's mean is within one engine iteration of chat's (a request's arrival falls anywhere in an
    iteration it waits out: that is the noise, with the shared machine's), and the first token
    comes after the prefill's iteration, the first answer token after the reasoning's two (a
    parser that took ``response.created`` or ``message_start`` for the first token would be an
    iteration early: only medians are checked, as a loaded machine's server lags and catches up,
    and one stall of a busy CI machine had moved the mean TTFT of one API's 18 requests by two
    iterations; a parser off by an iteration moves every request, and so the median)."""
    results = {}
    with serving(prompts, tiny_profile(ITERATION_S)) as thread:
        for api in APIS:
            assert post(thread.url, "/reset_prefix_cache", b"").status_code == 200
            endpoint = HTTPEndpoint(thread.url, api=api, reasoning_hint=True, metrics_interval_s=0)
            results[api] = Result(
                replay(workload(), endpoint, prompts, ReplaySettings(concurrency=3, check_idle=False))
            )
    chat = results["chat"]
    for api, result in results.items():
        assert result.ok and per_request(result, "output_tokens") == [7] * 18, api  # 2 reasoning + 5
        assert result.summary["ttft"]["p50"] > ITERATION_S, api
        if api != "completions":
            for field in ("prompt_tokens", "cached_tokens", "reasoning_tokens"):
                assert per_request(result, field) == per_request(chat, field), (api, field)
            assert result.summary["ttfo"]["p50"] > 3 * ITERATION_S, api  # the prefill and 2 reasoning tokens
            assert abs(result.summary["ttfo"]["p50"] - chat.summary["ttfo"]["p50"]) < ITERATION_S, api
        for metric in ("ttft", "tpot", "latency"):
            assert abs(result.summary[metric]["p50"] - chat.summary[metric]["p50"]) < ITERATION_S, (api, metric)
    assert json.dumps(per_request(chat, "cached_tokens")) != json.dumps([0] * 18)


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_the_plugin_replays_over_the_api_its_option_names(project, sim, api):
    (project.path / "wl.yaml").write_text(TINY_WORKLOAD)
    result = project.runpytest("--llm-endpoint", sim.url, "--llm-api", api, "--llm-save", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    (stored,) = (project.path / ".llmreplay").rglob("*.json")
    settings = json.loads(stored.read_text())["settings"]
    assert settings["api"] == api


def test_a_tool_call_and_its_result_count_in_the_prompt_on_every_api(sim):
    """A call whose arguments hold 500 words and a result of 500 words: about 1,000 prompt tokens
    over chat, 18 over Responses and Messages, whose call items and blocks the simulator left out
    of the prompt (found by a review helper). vLLM turns them into the chat messages its template
    renders; the three counts now differ only by their templates' few tokens."""
    big = "word " * 500
    call_id, tools = "call_1", [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    chat = {
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "f", "arguments": json.dumps({"q": big})}}
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": big},
        ],
        "max_tokens": 1,
        "tools": tools,
    }
    responses = {
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": call_id, "name": "f", "arguments": json.dumps({"q": big})},
            {"type": "function_call_output", "call_id": call_id, "output": big},
        ],
        "max_output_tokens": 1,
    }
    messages = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "f", "input": {"q": big}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": big}]},
        ],
        "max_tokens": 1,
    }
    paths = ("/v1/chat/completions", "/v1/responses", "/v1/messages")
    chat_usage, responses_usage, messages_usage = (
        post(sim.url, path, body).json()["usage"] for path, body in zip(paths, (chat, responses, messages), strict=True)
    )
    counts = [
        chat_usage["prompt_tokens"],
        responses_usage["input_tokens"],
        sum(
            messages_usage.get(k, 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ),
    ]
    assert min(counts) > 1000 and max(counts) - min(counts) < 40, counts


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_stream_options_without_streaming_is_refused_as_vllm_refuses_it(sim, path):
    """vLLM answers 400 (a request model validator); the simulator served it (found by a review helper)."""
    body = {"max_tokens": 2, "stream": False, "stream_options": {"include_usage": True}}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"})
    reply = post(sim.url, path, body)
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == "Stream options can only be defined when `stream=True`."
    assert post(sim.url, path, {**body, "stream_options": None}).status_code == 200
