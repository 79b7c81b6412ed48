"""The Responses and Messages APIs on the client's side: their parsers on real vLLM 0.32.0 replies
(``fixtures/streams/``, recorded byte for byte; its README gives each one's request), on the
error shapes of each API, over HTTP through the endpoint and the replay driver (a loopback server
that answers with the recorded bodies), the check that a server serves the API before a run, and
the request bodies each API's turns are sent in."""

from __future__ import annotations

import asyncio
import json
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from mockserver import MockServer, ServerThread

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.replayer.apis import API_TABLE
from pytest_llmreplay.replayer.clock import WallClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.endpoints import EndpointRequest, HTTPEndpoint
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.replayer.response import Response
from pytest_llmreplay.replayer.sse import SSEDecoder, StreamError
from pytest_llmreplay.workloads.prompts import Conversation, PromptFactory, payload_api
from pytest_llmreplay.workloads.tokenizer import load_tokenizer
from pytest_llmreplay.workloads.workload import Payload, Session, Synthetic, Turn, Workload

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "streams"


def recorded(name: str) -> bytes:
    return (STREAMS / f"vllm-0.32.0-{name}").read_bytes()


def events(raw: bytes) -> list[str]:
    decoder = SSEDecoder()
    return decoder.feed(raw) + decoder.close()


def parse_stream(api: str, raw: bytes) -> tuple[Response, bool]:
    """``raw`` read by ``api``'s parser, event ``i`` arriving at time ``i``; (response, whether
    the stream's end was read)."""
    response, parser, done = Response(sent_s=-1.0), API_TABLE[api].parser(), False
    for index, data in enumerate(events(raw)):
        done = parser.event(data, float(index), response) or done
    return response, done


# -- recorded streams --------------------------------------------------------------------------------

# file, api: prompt, cached, output tokens (usage), reasoning tokens (usage), reasoning deltas,
# answer deltas, event index of the first reasoning and of the first answer delta
STREAMED = [
    ("responses-stream.sse", "responses", 16, 0, 6, 0, 0, 6, None, 4),
    ("responses-history-stream.sse", "responses", 146, 96, 4, 0, 0, 4, None, 4),
    ("reasoning-responses-stream.sse", "responses", 18, 0, 10, 0, 2, 2, 4, 11),
    ("messages-stream.sse", "messages", 16, 0, 6, None, 0, 6, None, 2),
    ("messages-history-stream.sse", "messages", 146, 128, 4, None, 0, 4, None, 2),
    ("reasoning-messages-stream.sse", "messages", 18, 0, 10, None, 3, 6, 2, 8),
]


@pytest.mark.parametrize(
    ("name", "api", "prompt", "cached", "output", "usage_reasoning", "thinking", "answer", "first_r", "first_a"),
    STREAMED,
)
def test_recorded_vllm_streams(name, api, prompt, cached, output, usage_reasoning, thinking, answer, first_r, first_a):
    response, done = parse_stream(api, recorded(name))
    assert done and response.error is None
    assert (response.prompt_tokens, response.cached_tokens) == (prompt, cached)
    assert (response.completion_tokens, response.reasoning_tokens) == (output, usage_reasoning)
    assert len(response.chunk_tokens) == thinking + answer and set(response.chunk_tokens) == {1}
    assert response.reasoning_counted == thinking
    # the first token is the first delta, not response.created / message_start (sent before the prefill)
    assert response.chunk_times[0] == (first_r if first_r is not None else first_a) > 1
    assert (response.first_reasoning_s, response.first_answer_s) == (first_r, first_a)
    assert response.finish_reason == "length"  # every recording hit its token cap


def test_the_same_seed_streams_the_same_text_on_chat_and_responses_whole_or_not():
    chat, _ = parse_stream("chat", recorded("reasoning-chat-stream.sse"))
    streamed, _ = parse_stream("responses", recorded("reasoning-responses-stream.sse"))
    whole = Response()
    API_TABLE["responses"].parser().whole(json.loads(recorded("reasoning-responses.json")), 5.0, whole)
    assert streamed.reasoning_text == chat.reasoning_text == whole.reasoning_text and whole.reasoning_text
    assert streamed.text == chat.text == whole.text and len(whole.reasoning_text + whole.text) > 20
    # reasoning then answer, in one chunk of the usage's count
    assert whole.chunk_tokens == [10] and whole.first_reasoning_s == whole.first_answer_s == 5.0


@pytest.mark.parametrize(
    ("name", "api", "prompt", "output", "reasoned"),
    [
        ("responses.json", "responses", 16, 6, False),
        ("messages.json", "messages", 16, 6, False),
        ("reasoning-messages.json", "messages", 18, 10, True),
    ],
)
def test_recorded_whole_replies(name, api, prompt, output, reasoned):
    response = Response()
    API_TABLE[api].parser().whole(json.loads(recorded(name)), 2.0, response)
    assert (response.prompt_tokens, response.cached_tokens, response.completion_tokens) == (prompt, 0, output)
    assert response.chunk_tokens == [output] and response.finish_reason == "length"
    assert (response.first_reasoning_s == 2.0) is reasoned and response.first_answer_s == 2.0
    assert response.text


def test_messages_usage_is_the_start_overridden_by_the_delta_field_by_field():
    # vLLM's message_start says 146 (the whole prompt), message_delta 18 + 128 read from the cache:
    # the prompt is 146 either way, never 146 + 128
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 146, "output_tokens": 0}}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}
    response, parser = Response(), API_TABLE["messages"].parser()
    parser.event(json.dumps(start), 0.0, response)
    assert (response.prompt_tokens, response.cached_tokens) == (146, None)  # no cache field: not reported
    # message_start's output_tokens is a placeholder (0, or Anthropic's 1): a stream cut before
    # message_delta counted its tokens as 0 and warned of a usage that differed from the stream
    assert response.completion_tokens is None
    parser.event(json.dumps(delta), 1.0, response)
    assert (response.prompt_tokens, response.completion_tokens, response.finish_reason) == (146, 4, "stop")
    anthropic = {"input_tokens": 5, "cache_read_input_tokens": 96, "cache_creation_input_tokens": 32}
    response = Response()
    API_TABLE["messages"].parser().event(
        json.dumps({**delta, "usage": {**anthropic, "output_tokens": 7}}), 0.0, response
    )
    assert (response.prompt_tokens, response.cached_tokens, response.completion_tokens) == (133, 96, 7)


def feed(api: str, events: list[dict[str, Any]]) -> Response:
    """``events`` read by ``api``'s parser, event ``i`` arriving at time ``i``."""
    response, parser = Response(), API_TABLE[api].parser()
    for index, event in enumerate(events):
        parser.event(json.dumps(event), float(index), response)
    return response


def test_a_messages_tool_call_without_arguments_is_a_token_at_its_blocks_end():
    """Its only delta is the empty opening piece, which is no token: the response had no chunk,
    no TTFT, for 12 tokens generated (a review of the change). One at the block's end."""
    start = {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}
    response = feed(
        "messages",
        [
            {"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": start},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}},
        ],
    )
    assert (response.chunk_times, response.chunk_tokens, response.first_answer_s) == ([3.0], [1], 3.0)
    assert response.calls == [{"id": "toolu_1", "name": "now", "arguments": ""}]


def test_tool_calls_and_a_thinking_count_are_read_where_servers_send_them():
    # Messages: a text block, then a tool_use block (its start names the call), its input in pieces
    start = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}
    response = feed(
        "messages",
        [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me"}},
            {"type": "content_block_start", "index": 1, "content_block": start},
            # Anthropic's streaming docs: a tool_use block's first delta is an empty piece, no token
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"q"'}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ": 1}"}},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"input_tokens": 3, "output_tokens": 9, "output_tokens_details": {"thinking_tokens": 6}},
            },
        ],
    )
    assert response.calls == [{"id": "toolu_1", "name": "lookup", "arguments": '{"q": 1}'}]
    assert (response.chunk_times, response.reasoning_tokens, response.finish_reason) == (
        [0.0, 3.0, 4.0],
        6,
        "tool_calls",
    )
    # Responses: a summary (OpenAI's own models' reasoning), a delta saying it holds 2 tokens, a call
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_7", "name": "lookup", "arguments": ""}
    response = feed(
        "responses",
        [
            {"type": "response.reasoning_summary_text.delta", "delta": "so"},
            {"type": "response.output_text.delta", "delta": "ab", "logprobs": [{}, {}]},
            {"type": "response.output_item.added", "output_index": 2, "item": item},
            {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '{"q": 1}'},
        ],
    )
    assert response.chunk_tokens == [1, 2, 1] and response.reasoning_counted == 1
    assert response.calls == [{"id": "call_7", "name": "lookup", "arguments": '{"q": 1}'}]
    # whole replies
    whole = Response()
    API_TABLE["responses"].parser().whole({"output": [{**item, "arguments": '{"q": 2}'}]}, 1.0, whole)
    assert whole.calls == [{"id": "call_7", "name": "lookup", "arguments": '{"q": 2}'}] and whole.first_answer_s == 1.0
    whole = Response()
    API_TABLE["messages"].parser().whole({"content": [{**start, "input": {"q": 3}}]}, 1.0, whole)
    assert whole.calls == [{"id": "toolu_1", "name": "lookup", "arguments": '{"q": 3}'}]


@pytest.mark.parametrize(
    ("api", "event", "message"),
    [
        (
            "responses",
            {"type": "error", "code": "server_error", "message": "engine died", "sequence_number": 5},
            "server: error in stream: engine died",
        ),
        (
            "responses",
            {"type": "response.failed", "response": {"status": "failed", "error": {"code": "x", "message": "OOM"}}},
            "server: response failed: OOM",
        ),
        (
            "messages",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "server: error in stream: Overloaded",
        ),
        ("messages", {"delta": {}}, "protocol: malformed Messages event, no type: *"),
        ("responses", [1], "protocol: malformed SSE event, not a JSON object: *"),
    ],
)
def test_errors_in_a_stream(api, event, message):
    with pytest.raises(StreamError) as caught:
        API_TABLE[api].parser().event(json.dumps(event), 0.0, Response())
    assert fnmatch(f"{caught.value.kind}: {caught.value}", message)


# -- over HTTP ---------------------------------------------------------------------------------------


def answer(obj: Any, status: int = 200):
    """A handler answering ``obj`` as JSON with ``status``."""

    async def handle(request: web.Request) -> web.Response:
        return web.json_response(obj, status=status)

    return handle


class RecordedServer:
    """Answers ``POST /v1/responses`` and ``/v1/messages`` with recorded vLLM bodies: ``{}`` with
    vLLM's 400, model ``nope`` with its 404 body, a streamed request with ``streams[api]`` (cut to
    ``cut`` bytes when set), a whole one with ``wholes[api]``; ``served``: the routes it has (a
    ``GET``-only ``/v1/messages`` when ``messages_get_only``)."""

    def __init__(self, served=("responses", "messages"), messages_get_only: bool = False) -> None:
        self.served, self.messages_get_only = served, messages_get_only
        self.streams = {"responses": "responses-stream.sse", "messages": "messages-stream.sse"}
        self.wholes = {"responses": "responses.json", "messages": "messages.json"}
        self.cut: int | None = None
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", answer({"data": [{"id": "tiny"}]}))
        for api in self.served:
            if api == "messages" and self.messages_get_only:
                app.router.add_get("/v1/messages", answer({}))
            else:
                app.router.add_post(API_TABLE[api].path, self._handler(api))
        return app

    def _handler(self, api: str):
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.bodies.append(body)
            if not body:
                return web.json_response({"error": {"message": "1 validation error", "code": 400}}, status=400)
            if body.get("model") == "nope":
                return web.Response(body=recorded(f"{api}-404-model.json"), status=404, content_type="application/json")
            if not body.get("stream"):
                return web.Response(body=recorded(self.wholes[api]), content_type="application/json")
            reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await reply.prepare(request)
            await reply.write(recorded(self.streams[api])[: self.cut])
            return reply

        return handle


@pytest.fixture(scope="module")
def recorded_server():
    server = RecordedServer()
    with ServerThread(server) as thread:  # type: ignore[arg-type]
        yield server, thread.url


def send(url: str, api: str, body: dict[str, Any], **options: Any) -> Response:
    async def go() -> Response:
        endpoint = HTTPEndpoint(url, api=api, **options)
        await endpoint.open(WallClock(), 1)
        try:
            response = Response()
            await endpoint.send(EndpointRequest(api, body), response)
            return response
        finally:
            await endpoint.close()

    return asyncio.run(go())


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_http_streamed_whole_and_refused(recorded_server, api):
    server, url = recorded_server
    streamed = send(url, api, {"max_tokens": 6})
    assert streamed.error is None and (streamed.prompt_tokens, streamed.completion_tokens) == (16, 6)
    assert "stream_options" not in server.bodies[-1]  # chat's: these APIs always send usage
    whole = send(url, api, {"max_tokens": 6}, stream=False)
    assert whole.error is None and whole.chunk_tokens == [6] and whole.text
    refused = send(url, api, {"model": "nope"})
    assert refused.error == "http: HTTP 404: The model `nope` does not exist. Valid aliases: tiny."


def test_a_stream_cut_before_its_end_names_the_event_it_missed(recorded_server):
    server, url = recorded_server
    raw = recorded("responses-stream.sse")
    server.cut = raw.index(b"event: response.output_text.done")  # after all 6 deltas
    try:
        cut = send(url, "responses", {"max_output_tokens": 6})
        server.streams["messages"] = "messages-stream.sse"
        server.cut = recorded("messages-stream.sse").index(b"event: content_block_stop")
        cut_messages = send(url, "messages", {"max_tokens": 6})
    finally:
        server.cut = None
    assert cut.error == "stream: stream ended before response.completed after 6 tokens"
    assert cut_messages.error == "stream: stream ended before message_stop after 6 tokens"


@pytest.mark.parametrize(
    ("content_type", "body", "error"),
    [
        ("text/event-stream", b"data: [DONE]\n\n", "protocol: the stream ended without a token (and no usage)"),
        (
            "text/event-stream",
            b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}}\n\ndata: [DONE]\n\n',
            "protocol: the stream ended without a token (usage: 0 completion tokens)",
        ),
        (
            "application/json",
            b'{"choices": [{"message": {"content": "hi"}}]}',
            "protocol: asked to stream, the server answered application/json, not an event stream "
            "(does it honour stream: true?)",
        ),
        ("application/json", b'{"error": {"message": "quota exceeded"}}', "server: quota exceeded"),
    ],
    ids=["done only", "no token, usage zero", "a whole reply", "a whole error"],
)
def test_a_stream_with_no_token_or_no_stream_is_a_failed_request(content_type, body, error):
    """A 200 that generated nothing was an ok request (error_rate == 0 held against a server that
    answered nothing), and a server that ignores stream: true was said to end before [DONE]."""
    from handlers import Handler, serving

    class Answers(Handler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.answer(200, body, content_type)

    with serving(Answers) as url:
        response = send(url, "chat", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}, model="m")
    assert response.error == error


def test_replay_reads_reasoning_from_the_deltas_when_vllms_usage_says_zero(recorded_server):
    # vLLM 0.32 with deepseek_r1's template (which opens <think> in the prompt) reports
    # reasoning_tokens 0 beside 4 reasoning tokens streamed (in 2 merged deltas, 5 answer tokens in 2)
    server, url = recorded_server
    server.streams["responses"] = "reasoning-responses-stream.sse"
    try:
        workload = Workload((Session("s", 0.0, (Turn(8, 10, Synthetic()),)),), "one")
        prompts = PromptFactory(load_tokenizer(None))
        run = replay(workload, HTTPEndpoint(url, api="responses"), prompts, ReplaySettings(check_idle=False))
    finally:
        server.streams["responses"] = "responses-stream.sse"
    record = run.records[0]
    assert record.status == "ok" and record.output_tokens == 10
    assert record.reasoning_tokens == 5  # 2 of 4 deltas were reasoning: scaled to the usage's 10 tokens
    assert record.first_reasoning_s is not None and record.first_answer_s is not None  # one write: the same time
    body = server.bodies[-1]
    assert body["max_output_tokens"] == 10 and [m["role"] for m in body["input"]] == ["user"]
    assert any("usage.completion_tokens differs" in w for w in run.warnings)  # 10 tokens in 4 deltas


def test_a_messages_output_shorter_than_planned_is_said_once(recorded_server):
    # vLLM's Messages API drops ignore_eos and min_tokens: the recorded reply has 6 of the 10 tokens asked
    _, url = recorded_server
    workload = Workload(tuple(Session(f"s{i}", 0.0, (Turn(8, 10, Synthetic()),)) for i in range(2)), "two")
    run = replay(
        workload,
        HTTPEndpoint(url, api="messages"),
        PromptFactory(load_tokenizer(None)),
        ReplaySettings(check_idle=False),
    )
    assert [r.output_tokens for r in run.records] == [6, 6]
    short = [w for w in run.warnings if "takes neither ignore_eos nor min_tokens" in w]
    assert len(short) == 1 and "6 of 10 planned tokens" in short[0]


# -- is the API served? ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("served", "get_only", "api", "status", "detail"),
    [
        (("responses",), False, "messages", 404, "404: Not Found"),
        (("responses", "messages"), True, "messages", 405, "405: Method Not Allowed"),
    ],
)
def test_an_api_the_server_does_not_serve_is_one_line_before_anything_is_sent(served, get_only, api, status, detail):
    server = RecordedServer(served, messages_get_only=get_only)
    with ServerThread(server) as thread:  # type: ignore[arg-type]
        with pytest.raises(LLMReplayError) as caught:
            send(thread.url, api, {"max_tokens": 2})
    assert str(caught.value) == (
        f"{thread.url} does not serve the Messages API (api messages): POST /v1/messages answered HTTP {status} "
        f"({detail}); replay with an API it serves (pytest --llm-api, llmreplay --api)"
    )
    assert server.bodies == []


def test_a_server_that_implements_no_post_is_one_line_too():
    """Python's own ``http.server`` (a static file server left on the port) answers any POST with
    501: that is no served API either, and the run stops before its requests all fail."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(LLMReplayError) as caught:
            send(url, "responses", {"max_tokens": 2}, model="m")
    finally:
        server.shutdown()
        server.server_close()
    assert str(caught.value).startswith(
        f"{url} does not serve the Responses API (api responses): POST /v1/responses answered HTTP 501 "
    )


def test_vllms_own_route_404_reads_as_its_detail(monkeypatch):
    class FastAPI404(RecordedServer):
        def app(self) -> web.Application:
            app = super().app()
            app.router.add_post("/v1/responses", answer(json.loads(recorded("route-404.json")), 404))
            return app

    with ServerThread(FastAPI404(served=())) as thread:  # type: ignore[arg-type]
        with pytest.raises(LLMReplayError, match=r"answered HTTP 404 \(Not Found\); replay with"):
            send(thread.url, "responses", {})


def test_llmreplay_run_against_a_chat_only_server_stops_before_sending(capsys, tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text("synthetic:\n  sessions: 3\n  input_tokens: 16\n  output_tokens: 4\n")
    mock = MockServer()
    with ServerThread(mock) as thread:
        code = main(["run", str(workload), "--endpoint", thread.url, "--api", "responses", "--no-idle-check"])
    err = capsys.readouterr().err
    assert code != 0 and mock.completions_count == 0
    assert err.strip().splitlines() == [
        f"error: {thread.url} does not serve the Responses API (api responses): POST /v1/responses answered "
        "HTTP 404 (404: Not Found); replay with an API it serves (pytest --llm-api, llmreplay --api)"
    ]


def test_the_plugin_says_so_in_one_line_too(project):
    mock = MockServer()
    with ServerThread(mock) as thread:
        result = project.runpytest("--llm-endpoint", thread.url, "--llm-api", "messages", "-p", "no:cacheprovider")
    assert result.ret != 0 and mock.completions_count == 0
    result.stdout.fnmatch_lines([f"*{thread.url} does not serve the Messages API (api messages): POST /v1/messages*"])


# -- request bodies ----------------------------------------------------------------------------------


def two_turns() -> Session:
    return Session("s", 0.0, (Turn(12, 3, Synthetic()), Turn(30, 2, Synthetic(extends_previous=True))))


@pytest.mark.parametrize(
    ("api", "key", "limit"),
    [
        ("chat", "messages", "max_tokens"),
        ("responses", "input", "max_output_tokens"),
        ("messages", "messages", "max_tokens"),
    ],
)
def test_each_api_carries_the_history_in_its_own_shape(api, key, limit):
    conversation = Conversation(PromptFactory(load_tokenizer(None)), two_turns(), api)
    first_api, first, planned = conversation.request(0)
    assert first_api == api and set(first) == {key, limit} and first[limit] == 3 and planned == 12
    conversation.respond(" the answer", None, 3)
    _, second, planned = conversation.request(1)
    assert [m["role"] for m in second[key]] == ["user", "assistant", "user"]
    assert second[key][:1] == first[key] and second[key][1]["content"] == " the answer"
    answer = len(conversation.factory.tokenizer.encode(" the answer"))  # sent as text: counted as it encodes
    assert second[limit] == 2 and planned == 12 + answer + 15 and answer != 3


def test_a_payload_goes_to_the_api_its_shape_names_or_the_runs_when_that_fits():
    chat_like = {"messages": [{"role": "user", "content": "hi"}]}
    assert [payload_api(chat_like, api) for api in ("chat", "completions", "responses", "messages")] == [
        "chat",
        "chat",
        "chat",
        "messages",
    ]
    assert (
        payload_api({"input": "hi"}, "chat") == "responses"
        and payload_api({"prompt": "hi"}, "messages") == "completions"
    )
    session = Session("p", 0.0, (Turn(None, 4, Payload({"input": "hi", "max_output_tokens": 4})),))
    assert Conversation(PromptFactory(load_tokenizer(None)), session, "chat").request(0)[0] == "responses"


# -- what a server does to a stream besides sending it ----------------------------------------------------

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
USAGE = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}


def sse(*objects: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objects) + b"data: [DONE]\n\n"


def delta(text: str | None = None, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    content = {"content": text} if text is not None else {}
    return {"choices": [{"index": 0, "delta": {**content, **fields}, "finish_reason": finish}]}


TWO_TOKENS = sse(delta("", role="assistant"), delta("a "), delta("b ", finish="length"), USAGE)


def stream_server(body: bytes, received: list | None = None, *, gzip: bool = False, reset_after: bool = False):
    """A server answering every POST with ``body`` as an event stream (each request's headers and
    JSON appended to ``received``): gzip-compressed whatever the request asked, or with the
    connection reset (RST) where the body's end would be."""
    import socket
    import struct
    import zlib

    from handlers import Handler, serving

    class Streams(Handler):
        def do_POST(self):
            sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if received is not None:
                received.append((dict(self.headers), sent))
            data = body
            if gzip:
                packer = zlib.compressobj(6, zlib.DEFLATED, 31)
                data = packer.compress(body) + packer.flush()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if gzip:
                self.send_header("Content-Encoding", "gzip")
            if not reset_after:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            if reset_after:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

    return serving(Streams)


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_a_stream_the_server_aborted_is_a_failed_request(reason):
    """vLLM ends a request its engine aborted (shutdown, a paused engine) with HTTP 200,
    finish_reason abort and [DONE]: it was an ok request, its 2 of 5 tokens in the figures
    (found by a review helper)."""
    with stream_server(sse(delta("", role="assistant"), delta("a "), delta("b ", finish=reason), USAGE)) as url:
        response = send(url, "chat", CHAT, model="m")
    assert response.error == f"server: the server ended the request (finish_reason {reason}) after 2 tokens"
    assert response.chunk_tokens == [1, 1]  # what it measured is kept


def test_a_stream_compressed_though_the_client_asked_for_none_is_read():
    """Every request to a server (or proxy) that gzips event streams failed with `stream ended
    before [DONE]`: the client read the compressed bytes as they were (found by a review helper).
    The client now asks for no compression, and decodes a stream compressed anyway."""
    received: list = []
    with stream_server(TWO_TOKENS, received, gzip=True) as url:
        response = send(url, "chat", CHAT, model="m")
    assert (response.error, response.chunk_tokens, response.completion_tokens) == (None, [1, 1], 2)
    assert {k.lower(): v for k, v in received[-1][0].items()}["accept-encoding"] == "identity"


def test_a_connection_reset_after_the_streams_end_loses_nothing():
    """A server that reset the connection once [DONE] and the usage were out failed a complete
    request as `connection lost mid-response` (found by a review helper)."""
    with stream_server(TWO_TOKENS, reset_after=True) as url:
        response = send(url, "chat", CHAT, model="m")
    assert (response.error, response.chunk_tokens, response.completion_tokens) == (None, [1, 1], 2)


def test_a_connection_reset_before_the_streams_end_is_still_a_lost_stream():
    cut = TWO_TOKENS[: TWO_TOKENS.index(b"data: [DONE]")]
    with stream_server(cut, reset_after=True) as url:
        response = send(url, "chat", CHAT, model="m")
    assert response.error.startswith("stream: ") and response.error.endswith("after 2 tokens")  # lost, or ended


@pytest.mark.parametrize(("stream", "options"), [(False, None), (True, {"include_usage": True})])
def test_a_payloads_own_stream_decides_the_stream_options(stream, options):
    """A recorded payload with "stream": false was sent with stream_options (the endpoint streams
    by default), which vLLM and the simulator refuse with a 400: every request failed (found by a
    review helper); one with "stream": true on a --no-stream endpoint went without include_usage."""
    received: list = []
    with stream_server(TWO_TOKENS, received) as url:
        send(url, "chat", {**CHAT, "stream": stream}, model="m", stream=not stream)
    assert received[-1][1].get("stream_options") == options


@pytest.mark.parametrize("first", [1, -1])
def test_tool_calls_numbered_from_1_or_from_minus_1_are_one_call_each(first):
    """Gateways number a stream's tool calls from 1 (LiteLLM's bedrock) or -1: one call counted
    as two with a phantom `call_0` sent back in the next turn, and -1 failed the reply with an
    IndexError (found by a review helper)."""
    call = {"index": first, "id": "call_x", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    more = {"index": first, "function": {"arguments": ": 1}"}}
    response = feed("chat", [delta(tool_calls=[call]), delta(tool_calls=[more])])
    assert response.calls == [{"id": "call_x", "name": "f", "arguments": '{"a": 1}'}]


def test_an_answer_that_is_not_http_to_the_api_probe_is_one_line():
    """A port answering the probe's POST with something that is not HTTP (a Redis on the port) was
    a 26-frame traceback over the Responses and Messages APIs (found by a review helper)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.recv(65536)
            connection.sendall(b"-ERR unknown command 'POST'\r\n")
            connection.close()

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(LLMReplayError) as caught:
            send(url, "messages", {"max_tokens": 2}, model="m")
    finally:
        listener.close()
    assert str(caught.value).startswith(f"{url}: no answer to POST /v1/messages (")
    assert str(caught.value).endswith("); is the server running?")
