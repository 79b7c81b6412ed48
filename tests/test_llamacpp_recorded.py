"""llama.cpp's answers as it sent them, read by the plugin's HTTP client: streams, an error body
and ``/metrics`` text (its series: ``test_server_metrics.py``), recorded from ``llama-server`` (llama.cpp ``0c1e57098``,
``scripts/setup_llama_cpp.py``'s build and tiny model; fixtures/llamacpp/README.md says how) and
served back byte for byte from a loopback server, so every way llama.cpp differs from vLLM is
checked without building it (``test_engine_llamacpp.py`` checks the same on the live server);
the slot routes of the cache reset are answered as llama.cpp answers them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from handlers import Handler, serving

from pytest_llmreplay.replayer.clock import WallClock
from pytest_llmreplay.replayer.endpoints import EndpointRequest, HTTPEndpoint, Response, busy_requests
from pytest_llmreplay.target import Target

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NOT_FOUND = b'{"error":{"message":"File Not Found","type":"not_found_error","code":404}}'  # llama.cpp's 404
RECORDED = FIXTURES / "llamacpp"


class Recorded(Handler):
    """Answers every POST to a completions route with ``reply`` (status, content type, bytes)
    and the slot routes as llama.cpp does with ``slots`` slots (``erase``: the erase status).
    HTTP/1.1 with keep-alive, as ``name`` (the Server header); ``ports`` notes the client port
    of each completions request (one per connection). With ``close_after`` it closes the
    connection 50 ms after each completions response, unread requests unanswered, as
    llama.cpp does (at once) after every streamed response."""

    protocol_version = "HTTP/1.1"
    reply: tuple[int, str, bytes] = (200, "text/event-stream", b"")
    slots, erase = 2, 200
    name, close_after = "llama.cpp", False
    posts: list[str] = []
    ports: list[int] = []

    def version_string(self):
        return self.name

    def do_GET(self):
        if self.path == "/slots":
            self.answer(200, json.dumps([{"id": i} for i in range(self.slots)]).encode(), "application/json")
        else:
            self.answer(404, NOT_FOUND, "application/json")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.posts.append(self.path)
        if self.path.endswith("/completions"):
            self.ports.append(self.client_address[1])
            status, content_type, data = self.reply
            self.answer(status, data, content_type)
            if self.close_after:
                time.sleep(0.05)
                self.close_connection = True
        elif self.path.startswith("/slots/") and self.path.endswith("?action=erase"):
            self.answer(self.erase, b'{"id_slot":0,"n_erased":0}', "application/json")
        else:
            self.answer(404, NOT_FOUND, "application/json")


@pytest.fixture
def recorded() -> Iterator[str]:
    Recorded.posts, Recorded.ports, Recorded.slots, Recorded.erase = [], [], 2, 200
    Recorded.name, Recorded.close_after = "llama.cpp", False
    with serving(Recorded) as url:
        yield url


def replay_recorded(url: str, api: str, data: bytes, status: int = 200, requests: int = 1) -> list[Response]:
    """What the client makes of ``data`` answered to each of ``requests`` streamed requests,
    sent one after the other by one endpoint."""
    Recorded.reply = (status, "text/event-stream" if status == 200 else "application/json", data)

    async def go() -> Response:
        endpoint = HTTPEndpoint(url, model="tiny", api=api, metrics_interval_s=0)
        await endpoint.open(WallClock(), 1)
        responses = [Response() for _ in range(requests)]
        try:
            for response in responses:
                await endpoint.send(EndpointRequest(api, {"max_tokens": 4}), response)
        finally:
            await endpoint.close()
        return responses

    return asyncio.run(go())


def test_a_completions_stream_counts_its_tokens_and_reads_cached_tokens_from_usage(recorded):
    (response,) = replay_recorded(recorded, "completions", (RECORDED / "completions-stream.txt").read_bytes())
    assert response.error is None
    assert (response.prompt_tokens, response.cached_tokens, response.completion_tokens) == (8, 7, 4)
    # one token per chunk; the closing chunk (empty text, finish reason, usage, timings) is none
    assert response.chunk_tokens == [1, 1, 1, 1] and response.text == "gt10ging ad"
    assert response.finish_reason == "length"


def test_a_build_without_prompt_tokens_details_reports_cached_tokens_in_its_timings(recorded):
    # the same recorded stream as an older build sends it: usage without prompt_tokens_details
    data = (RECORDED / "completions-stream.txt").read_text().replace(',"prompt_tokens_details":{"cached_tokens":7}', "")
    assert "prompt_tokens_details" not in data and '"cache_n":7' in data
    (response,) = replay_recorded(recorded, "completions", data.encode())
    assert (response.prompt_tokens, response.cached_tokens, response.completion_tokens) == (8, 7, 4)


def test_usage_wins_over_timings_whichever_comes_first():
    response = Response()
    response.take_timings({"cache_n": 3}, 0)
    assert response.cached_tokens == 3
    response.take_usage({"prompt_tokens": 8, "prompt_tokens_details": {"cached_tokens": 7}})
    response.take_timings({"cache_n": 3}, 0)
    assert response.cached_tokens == 7


def test_a_chat_stream_opens_with_a_role_chunk_whose_content_is_null(recorded):
    (response,) = replay_recorded(recorded, "chat", (RECORDED / "chat-stream.txt").read_bytes())
    assert response.error is None
    # the role chunk ({"role": "assistant", "content": null}) is no token; the usage chunk has no choices
    assert response.chunk_tokens == [1, 1, 1, 1] and response.text == 'New column"’aran'
    assert (response.prompt_tokens, response.cached_tokens, response.completion_tokens) == (15, 14, 4)


def test_a_chat_stream_without_usage_has_its_cached_tokens_in_timings(recorded):
    # without stream_options.include_usage llama.cpp sends no usage on chat; here the first
    # token was an incomplete UTF-8 sequence, so its text came with the next token's and no role
    # chunk came at all: 4 tokens in 2 chunks, counted one per chunk (no ids, no logprobs)
    (response,) = replay_recorded(recorded, "chat", (RECORDED / "chat-stream-no-usage.txt").read_bytes())
    assert response.error is None
    assert response.chunk_tokens == [1, 1] and (response.prompt_tokens, response.completion_tokens) == (None, None)
    assert response.cached_tokens == 14


def test_timings_per_token_count_the_tokens_of_a_chunk_that_holds_several(recorded):
    # predicted_n 3, then 5: the chunk between carries two tokens (the first ended inside a UTF-8 sequence)
    (response,) = replay_recorded(recorded, "chat", (RECORDED / "chat-stream-timings-per-token.txt").read_bytes())
    assert response.error is None
    assert response.chunk_tokens == [1, 1, 1, 2, 1] and response.completion_tokens == 6
    assert (response.prompt_tokens, response.cached_tokens) == (15, 14)


def test_llamacpp_gets_a_connection_per_request_as_it_closes_each_after_a_stream(recorded):
    # llama.cpp answers Keep-Alive but closes the connection after every streamed response: a
    # request sent meanwhile on the pooled connection is never answered
    Recorded.close_after = True
    responses = replay_recorded(recorded, "completions", (RECORDED / "completions-stream.txt").read_bytes(), requests=5)
    assert [r.error for r in responses] == [None] * 5
    # the first reply's headers name llama.cpp: from then on, a connection per request
    assert len(set(Recorded.ports)) == 5


def test_another_server_keeps_its_connections_pooled(recorded):
    Recorded.name = "uvicorn"
    responses = replay_recorded(recorded, "completions", (RECORDED / "completions-stream.txt").read_bytes(), requests=5)
    assert [r.error for r in responses] == [None] * 5 and len(set(Recorded.ports)) == 1


def test_timings_per_token_count_a_last_token_whose_text_never_came(recorded):
    # predicted_n 2, 3, 4, then 5 on the closing chunk (no text): tokens 1-2 together, token 5 at the close
    (response,) = replay_recorded(
        recorded, "completions", (RECORDED / "completions-stream-timings-per-token.txt").read_bytes()
    )
    assert response.error is None
    assert response.chunk_tokens == [2, 1, 1, 1] and response.completion_tokens == 5


def test_a_closing_chunk_with_text_is_not_recounted_without_timings_per_token(recorded):
    # timings only on the closing chunk (no timings_per_token), here with the last token's text
    # on it: predicted_n counts the whole reply, not this chunk; every chunk counts one token
    data = (RECORDED / "completions-stream.txt").read_text()
    data = data.replace(
        '"text":"","index":0,"logprobs":null,"finish_reason":"length"',
        '"text":"!","index":0,"logprobs":null,"finish_reason":"length"',
    )
    assert '"text":"!"' in data
    (response,) = replay_recorded(recorded, "completions", data.encode())
    assert response.chunk_tokens == [1, 1, 1, 1, 1] and response.completion_tokens == 4


def test_a_prompt_past_the_context_is_refused_before_the_stream_with_one_line(recorded):
    (response,) = replay_recorded(recorded, "completions", (RECORDED / "error-context.json").read_bytes(), status=400)
    assert response.error == (
        "http: HTTP 400: request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it"
    )


def test_the_idle_check_reads_llamacpp_request_gauges():
    assert busy_requests((FIXTURES / "metrics" / "llamacpp-0c1e57098.txt").read_text()) == 0
    assert busy_requests((FIXTURES / "metrics" / "llamacpp.txt").read_text()) == 3  # 2 processing, 1 deferred


def test_the_cache_reset_erases_every_slot(recorded):
    Recorded.slots = 3
    assert Target("live", recorded).reset_cache() == "POST /slots/{id}?action=erase (3 slots)"
    # vLLM's and SGLang's resets are asked first (llama.cpp answers 404)
    assert Recorded.posts == [
        "/reset_prefix_cache",
        "/flush_cache",
        "/slots/0?action=erase",
        "/slots/1?action=erase",
        "/slots/2?action=erase",
    ]


def test_a_server_without_slot_actions_has_no_reset(recorded):
    Recorded.erase = 501  # llama.cpp without --slot-save-path: "This server does not support slots action"
    assert Target("live", recorded).reset_cache() is None
