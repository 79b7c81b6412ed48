"""HTTPEndpoint against the scriptable mock server (streaming, non-streaming, every fault, API
key, idle check), busy_requests on Prometheus text, and ServerProcess with real child processes."""

import asyncio
import fnmatch
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mockserver import (
    CHAT_OVERHEAD,
    MockConfig,
    MockServer,
    ServerThread,
    _text,
    _vocabulary,
    free_port,
    gone,
    wait_until_gone,
)  # noqa: E402

from pytest_llmreplay.errors import LLMReplayError  # noqa: E402
from pytest_llmreplay.replayer.clock import VirtualClock, WallClock  # noqa: E402
from pytest_llmreplay.replayer.endpoints import (
    EndpointRequest,
    HTTPEndpoint,
    busy_requests,
    check_endpoint_url,
)  # noqa: E402
from pytest_llmreplay.replayer.response import Response  # noqa: E402
from pytest_llmreplay.replayer.server_process import ServerProcess  # noqa: E402

MOCKSERVER = Path(__file__).parent / "mockserver.py"
PROMPT = "The quick brown fox jumps over the lazy dog while the cat sleeps"
BODIES = {
    "chat": {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8},
    "completions": {"prompt": PROMPT, "max_tokens": 8},
}


async def exchange(endpoint: HTTPEndpoint, *requests: tuple[str, dict[str, Any]]) -> list[Response]:
    """Open the endpoint, send each request in turn, close it."""
    await endpoint.open(WallClock(), 4)
    try:
        responses = []
        for api, body in requests:
            response = Response()
            await endpoint.send(EndpointRequest(api, body), response)
            responses.append(response)
        return responses
    finally:
        await endpoint.close()


def send(url: str, api: str, body: dict[str, Any], **options: Any) -> Response:
    options.setdefault("model", "mock-model")
    (response,) = asyncio.run(exchange(HTTPEndpoint(url, api=api, **options), (api, body)))
    return response


def with_mock(body: dict[str, Any], **mock: Any) -> dict[str, Any]:
    return {**body, "mock": mock}


@pytest.fixture
def mock():
    server = MockServer()
    with ServerThread(server) as thread:
        assert thread.url
        yield thread


def assert_times_in_order(response: Response) -> None:
    times = response.chunk_times
    assert times == sorted(times)
    assert response.sent_s <= times[0] <= times[-1] <= response.end_s


def prompt_ids() -> list[int]:
    return _vocabulary().tokenizer.encode(PROMPT)


# --- streaming -------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_streaming_counts_tokens_reads_usage_and_joins_text(api):
    with ServerThread(MockServer(MockConfig(ttft_s=0.05, itl_s=0.02))) as thread:
        response = send(thread.url, api, BODIES[api])
    assert response.error is None
    assert response.chunk_tokens == [1] * 8  # the chat role chunk and the usage chunk carry none
    assert response.completion_tokens == 8
    ids = prompt_ids()
    assert response.prompt_tokens == len(ids) + (CHAT_OVERHEAD if api == "chat" else 0)
    assert response.cached_tokens == 0
    assert response.text == _text(0, 8)
    assert response.finish_reason == "length"
    assert response.token_ids is None
    assert_times_in_order(response)
    assert response.chunk_times[0] - response.sent_s >= 0.05  # time to first token
    # stamped per read, not at the end (a span near 0): half of the 7 gaps' 140 ms leaves room for a
    # first chunk read late on a loaded machine, which shortened the span below 0.9x in a CI run
    assert response.chunk_times[-1] - response.chunk_times[0] >= 7 * 0.02 * 0.5


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_cached_tokens_are_read_from_usage(mock, api):
    first, second = asyncio.run(
        exchange(HTTPEndpoint(mock.url, model="mock-model", api=api), (api, BODIES[api]), (api, BODIES[api]))
    )
    assert first.cached_tokens == 0
    full_blocks = len(prompt_ids()) // 16 * 16
    assert full_blocks >= 16
    assert second.cached_tokens == full_blocks
    assert second.prompt_tokens == first.prompt_tokens


def test_several_tokens_per_event_without_ids_count_one_per_event_and_usage_gives_the_total():
    with ServerThread(MockServer(MockConfig(tokens_per_chunk=4))) as thread:
        response = send(thread.url, "completions", BODIES["completions"])
    assert response.error is None
    assert response.chunk_tokens == [1, 1]  # two events of 4 tokens each; only usage says 8
    assert response.completion_tokens == 8
    assert response.text == _text(0, 8)
    assert len(response.text_parts) == 2


def test_several_tokens_per_event_with_token_ids_are_counted_exactly():
    with ServerThread(MockServer(MockConfig(tokens_per_chunk=4))) as thread:
        response = send(thread.url, "chat", BODIES["chat"], extra_body={"return_token_ids": True})
    assert response.chunk_tokens == [4, 4]
    assert response.token_ids == _vocabulary().words[:8]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_return_token_ids_collects_every_id(mock, api):
    response = send(mock.url, api, BODIES[api], extra_body={"return_token_ids": True})
    assert response.error is None
    assert response.token_ids == _vocabulary().words[:8]
    assert _vocabulary().tokenizer.encode(response.text) == response.token_ids
    assert sum(response.chunk_tokens) == 8


# --- non-streaming ---------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_non_streaming_is_one_chunk_with_the_completion_tokens(mock, api):
    response = send(mock.url, api, BODIES[api], stream=False)
    assert response.error is None
    assert response.chunk_tokens == [8]
    assert len(response.chunk_times) == 1
    assert response.completion_tokens == 8
    assert response.prompt_tokens == len(prompt_ids()) + (CHAT_OVERHEAD if api == "chat" else 0)
    assert response.text == _text(0, 8)
    assert response.finish_reason == "length"
    assert_times_in_order(response)
    body = mock.server.bodies[0]
    assert body["stream"] is False
    assert "stream_options" not in body


# --- the body sent, model discovery ----------------------------------------------------------


def test_model_is_discovered_and_the_body_has_the_endpoint_fields(mock):
    endpoint = HTTPEndpoint(mock.url + "/v1/", extra_body={"ignore_eos": True, "temperature": 0.5})
    assert endpoint.url == mock.url
    (response,) = asyncio.run(exchange(endpoint, ("chat", {**BODIES["chat"], "temperature": 0.0})))
    assert response.error is None
    assert endpoint.model == "mock-model"
    (body,) = mock.server.bodies
    assert body["model"] == "mock-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 8
    assert body["messages"] == BODIES["chat"]["messages"]
    assert body["ignore_eos"] is True
    assert body["temperature"] == 0.0  # the request's own field wins over extra_body


def test_given_model_is_sent_as_is(mock):
    send(mock.url, "completions", BODIES["completions"], model="my-model")
    assert mock.server.bodies[0]["model"] == "my-model"
    assert mock.server.bodies[0]["prompt"] == PROMPT


def test_a_server_that_is_not_there_fails_open_with_one_line_and_no_open_client(refused_url):
    url = refused_url
    endpoint = HTTPEndpoint(url)
    with pytest.raises(
        LLMReplayError, match=rf"^{re.escape(url)}: no answer to GET /v1/models \(.*\); is the server running\?$"
    ):
        asyncio.run(endpoint.open(WallClock(), 4))
    assert endpoint._client is None  # closed by open itself: no "Unclosed client session" at exit


def test_bad_api_or_url_is_refused():
    with pytest.raises(LLMReplayError, match="api"):
        HTTPEndpoint("http://127.0.0.1:1", api="embeddings")
    with pytest.raises(
        LLMReplayError, match=r"^endpoint: expected http://host:port \(or https://\), got '127.0.0.1:8000'$"
    ):
        HTTPEndpoint("127.0.0.1:8000")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:99999", "invalid port '99999' in 'http://127.0.0.1:99999'; expected 1 to 65535"),
        ("http://127.0.0.1:0", "invalid port '0' in 'http://127.0.0.1:0'; expected 1 to 65535"),
        ("http://127.0.0.1:http", "invalid port 'http' in 'http://127.0.0.1:http'; expected 1 to 65535"),
        ("http://127.0.0.1: 80", "a space in the URL; expected http://host:port, got 'http://127.0.0.1: 80'"),
        ("ftp://127.0.0.1:21", "expected http://host:port (or https://), got 'ftp://127.0.0.1:21'"),
        (
            "http://user:pw@127.0.0.1:8000",
            "a user name or password in the URL (user:***@); expected http://host:port (an API key is read from an "
            "environment variable: --api-key-env / --llm-api-key-env NAME)",
        ),
        ("http://[::1", "not a URL (Invalid IPv6 URL); expected http://host:port, got 'http://?::1'"),
        ("http://[::1]x:80", "not a URL (Invalid port: 'x:80'); expected http://host:port, got 'http://?::1?x:80'"),
        ("http://", "expected http://host:port (or https://), got 'http://'"),
        (
            "http://127.0.0.1:8000/v1?x=1",
            "expected the server's address without a query or fragment, got 'http://127.0.0.1:8000/v1?x=1'",
        ),
        (
            "http://127.0.0.1:8000/v1/chat/completions",
            "'http://127.0.0.1:8000/v1/chat/completions' names the route /v1/chat/completions; "
            "give the server's address, 'http://127.0.0.1:8000' (each request's route follows the API setting)",
        ),
        (
            "http://h:8000/proxy/v1/completions/",
            "'http://h:8000/proxy/v1/completions/' names the route /v1/completions; give the server's address, 'http://h:8000/proxy' *",
        ),
    ],
)
def test_endpoint_url_is_checked_in_one_line(url, message):
    with pytest.raises(LLMReplayError) as info:
        check_endpoint_url(url)
    assert fnmatch.fnmatchcase(str(info.value), message), str(info.value)


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
        ("https://gateway.example/llm/v1", "https://gateway.example/llm"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_endpoint_url_gives_the_base_url(url, base):
    assert check_endpoint_url(url) == base


def test_errors_from_the_server_are_one_line(mock, refused_url):
    with pytest.raises(LLMReplayError) as info:  # a path that is not the server's: /v1/models is 404
        asyncio.run(HTTPEndpoint(mock.url + "/elsewhere").open(WallClock(), 1))
    assert str(info.value).startswith(
        f"{mock.url}/elsewhere/v1/models: could not read a model name (HTTPStatusError: Client error '404 "
    )
    assert "\n" not in str(info.value)
    with pytest.raises(LLMReplayError) as info:
        asyncio.run(HTTPEndpoint(refused_url).open(WallClock(), 1))
    assert str(info.value) == f"{refused_url}: no answer to GET /v1/models (connection refused); is the server running?"


def test_an_html_error_page_is_named_by_its_title_on_one_line():
    # a web server or proxy in front of the engine answers with a page, not an OpenAI error
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_POST(self):
            body = b"<!DOCTYPE HTML>\n<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<h1>nginx</h1>\n</body></html>\n"
            self.send_response(502)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    import threading

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        response = send(f"http://127.0.0.1:{server.server_address[1]}", "chat", BODIES["chat"], timeout_s=30)
    finally:
        server.shutdown()
    assert response.error == "http: HTTP 502: an HTML page: 502 Bad Gateway"


# --- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("status", [500, 400])
def test_http_error_status_and_message(mock, api, status):
    response = send(mock.url, api, with_mock(BODIES[api], fault=f"http{status}", after=2))
    assert response.error.startswith(f"http: HTTP {status}")
    assert f"mock {status}" in response.error
    assert response.chunk_tokens == []
    assert response.sent_s <= response.end_s


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_cut_stream_keeps_the_tokens_received(mock, api):
    response = send(mock.url, api, with_mock(BODIES[api], fault="cut", after=2))
    assert response.error.startswith("stream: ")
    assert "after 2 tokens" in response.error
    assert response.chunk_tokens == [1, 1]
    assert response.text == _text(0, 2)
    assert response.completion_tokens is None
    assert response.end_s is not None and response.end_s >= response.chunk_times[-1]


def test_malformed_event_is_a_protocol_error(mock):
    response = send(mock.url, "chat", with_mock(BODIES["chat"], fault="malformed", after=2))
    assert response.error.startswith("protocol: ")
    assert "not JSON" in response.error
    assert response.chunk_tokens == [1, 1]


def test_error_event_is_a_server_error(mock):
    response = send(mock.url, "chat", with_mock(BODIES["chat"], fault="error_event", after=2))
    assert response.error.startswith("server: ")
    assert "engine crashed" in response.error
    assert response.chunk_tokens == [1, 1]


def test_stream_without_done_is_a_stream_error(mock):
    response = send(mock.url, "completions", with_mock(BODIES["completions"], fault="no_done", after=2))
    assert response.error.startswith("stream: ")
    assert "[DONE]" in response.error
    assert response.chunk_tokens == [1, 1]


def test_stalled_stream_times_out():
    thread = ServerThread(MockServer())
    thread.__enter__()
    try:
        endpoint = HTTPEndpoint(thread.url, model="mock-model", timeout_s=0.5)

        async def run():  # a guard, so that a timeout that never fires fails instead of hanging
            return await asyncio.wait_for(
                exchange(endpoint, ("chat", with_mock(BODIES["chat"], fault="stall", after=2))), 5
            )

        (response,) = asyncio.run(run())
    finally:
        # the stalled handler sleeps an hour: cancel it so that the server stops at once
        thread._loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(thread._loop)])
        thread.__exit__(None, None, None)
    assert response.error.startswith("timeout: ")
    assert response.chunk_tokens == [1, 1]
    assert 0.5 <= response.end_s - response.chunk_times[-1] < 3


def test_refused_connection_is_a_connect_error(refused_url):
    response = send(refused_url, "chat", BODIES["chat"])
    assert response.error == "connect: connection refused"
    assert response.chunk_tokens == []
    assert response.sent_s <= response.end_s


def test_no_usage_leaves_the_counts_unknown(mock):
    response = send(mock.url, "chat", with_mock(BODIES["chat"], usage=False))
    assert response.error is None
    assert response.completion_tokens is None
    assert response.prompt_tokens is None
    assert response.cached_tokens is None
    assert response.chunk_tokens == [1] * 8


def test_usage_count_differs_from_the_chunks(mock):
    response = send(mock.url, "chat", with_mock(BODIES["chat"], usage_tokens=11))
    assert response.completion_tokens == 11
    assert sum(response.chunk_tokens) == 8


def test_a_host_name_that_does_not_resolve_says_so():
    """It read 'ConnectTimeout: ... [Name or service not known]' (issue 31 B10). Made here as
    httpx-aiohttp chains it (no name is looked up: the suite talks to loopback only)."""
    import socket

    import aiohttp
    from aiohttp.client_reqrep import ConnectionKey

    from pytest_llmreplay.replayer.endpoints import describe_error

    lookup = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    key = ConnectionKey("llm.example.invalid", 8000, False, True, None, None, None)

    def time_out_on_the_lookup() -> None:
        try:
            raise aiohttp.ClientConnectorDNSError(key, lookup) from lookup
        except aiohttp.ClientError as inner:
            raise httpx.ConnectTimeout(str(inner)) from inner

    with pytest.raises(httpx.ConnectTimeout) as caught:
        time_out_on_the_lookup()
    assert (
        describe_error(caught.value) == "the host name llm.example.invalid did not resolve (Name or service not known)"
    )


def test_a_blank_chunk_opening_the_stream_is_no_token(mock):
    """An opening {"content": ""} without a role read as the first token: TTFT early and one token
    more than usage (issue 31 B7: 'usage says 64 output tokens, chunks carried 65')."""
    response = send(mock.url, "chat", with_mock(BODIES["chat"], blank_opening=True))
    assert response.error is None
    assert response.chunk_tokens == [1] * 8 and response.completion_tokens == 8


def test_one_endpoint_keeps_working_after_faults(mock):
    good = ("chat", BODIES["chat"])
    requests = [
        ("chat", with_mock(BODIES["chat"], fault=fault, after=2))
        for fault in ("malformed", "cut", "http500", "error_event", "no_done")
    ]
    endpoint = HTTPEndpoint(mock.url, model="mock-model")
    responses = asyncio.run(exchange(endpoint, *[r for bad in requests for r in (bad, good)]))
    kinds = [r.error.split(":")[0] if r.error else None for r in responses]
    assert kinds == ["protocol", None, "stream", None, "http", None, "server", None, "stream", None]
    for response in responses[1::2]:
        assert response.chunk_tokens == [1] * 8 and response.completion_tokens == 8


def test_requests_up_to_the_concurrency_run_at_once():
    with ServerThread(MockServer(MockConfig(ttft_s=0.1, count_prompts=False))) as thread:
        endpoint = HTTPEndpoint(thread.url, model="mock-model")

        async def run():
            await endpoint.open(WallClock(), 4)
            try:
                responses = [Response() for _ in range(4)]
                await asyncio.gather(*(endpoint.send(EndpointRequest("chat", BODIES["chat"]), r) for r in responses))
                return responses
            finally:
                await endpoint.close()

        responses = asyncio.run(run())
    assert all(r.error is None and sum(r.chunk_tokens) == 8 for r in responses)
    assert max(r.sent_s for r in responses) < min(
        r.chunk_times[0] for r in responses
    )  # all four sent before any answer: they overlap


def test_connection_closed_without_a_response():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def serve():  # every connection, until the listener closes: another xdist worker's readiness
        while True:  # probe may take this port for its server's free one and connect here too
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.recv(65536)
            connection.close()

    import threading

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        response = send(f"http://127.0.0.1:{port}", "chat", BODIES["chat"], timeout_s=60)
    finally:
        listener.close()
    assert response.error.startswith("closed: ")
    assert response.chunk_tokens == []


# --- API key, headers ------------------------------------------------------------------------


def test_api_key_is_sent_as_a_bearer_token(monkeypatch):
    monkeypatch.setenv("LLMREPLAY_TEST_KEY", "sk-secret-123")
    server = MockServer()  # it keeps each request's headers, names in lower case
    with ServerThread(server) as thread:
        endpoint = HTTPEndpoint(
            thread.url, model="mock-model", api_key_env="LLMREPLAY_TEST_KEY", headers={"X-Run": "7"}
        )
        (response,) = asyncio.run(exchange(endpoint, ("chat", BODIES["chat"])))
    assert response.error is None
    (headers,) = server.headers
    assert headers["authorization"] == "Bearer sk-secret-123"
    assert headers["x-run"] == "7"
    assert "sk-secret-123" not in repr(endpoint)
    assert "sk-secret-123" not in str(endpoint.headers)


def test_no_authorization_header_without_api_key_env():
    server = MockServer()
    with ServerThread(server) as thread:
        send(thread.url, "chat", BODIES["chat"])
    assert "authorization" not in server.headers[0]


def test_unset_api_key_variable_is_an_error(monkeypatch):
    monkeypatch.delenv("LLMREPLAY_TEST_KEY", raising=False)
    endpoint = HTTPEndpoint("http://127.0.0.1:1", model="m", api_key_env="LLMREPLAY_TEST_KEY")
    with pytest.raises(LLMReplayError, match="LLMREPLAY_TEST_KEY"):
        asyncio.run(endpoint.open(WallClock(), 4))


def test_api_key_is_not_in_repr_while_open(monkeypatch):
    monkeypatch.setenv("LLMREPLAY_TEST_KEY", "sk-secret-456")
    endpoint = HTTPEndpoint("http://127.0.0.1:1", model="m", api_key_env="LLMREPLAY_TEST_KEY")

    async def run():
        await endpoint.open(WallClock(), 4)
        try:
            return repr(endpoint)
        finally:
            await endpoint.close()

    text = asyncio.run(run())
    assert "LLMREPLAY_TEST_KEY" in text
    assert "sk-secret-456" not in text


# --- idle check ------------------------------------------------------------------------------


def idle_warning(url: str) -> str | None:
    endpoint = HTTPEndpoint(url, model="mock-model")

    async def run():
        await endpoint.open(WallClock(), 4)
        try:
            return await endpoint.idle_warning()
        finally:
            await endpoint.close()

    return asyncio.run(run())


def test_idle_warning_when_requests_are_running():
    with ServerThread(MockServer(MockConfig(busy=2))) as thread:
        warning = idle_warning(thread.url)
    assert warning is not None
    assert "2 requests" in warning
    assert thread.url in warning


def test_no_idle_warning_when_idle(mock):
    assert idle_warning(mock.url) is None


def test_no_idle_warning_when_metrics_cannot_be_read(refused_url):
    assert idle_warning(refused_url) is None


METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="my model"} 2.0
vllm:num_requests_running{engine="1",model_name="my model"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="my model"} 3.0
vllm:num_requests_waiting_by_reason{reason="x"} 5
vllm:num_requests_running_total 7
vllm:num_requests_swapped{engine="0"} 9
vllm:num_preemptions_total{engine="0"} 11
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0"} 4
sglang:num_queue_reqs 10
sglang:num_running_reqs_offline_batch{model_name="m"} 6
sglang:num_queue_reqs_total 8
"""


def test_busy_requests_sums_only_the_busy_gauges():
    assert busy_requests(METRICS) == 2 + 1 + 3 + 4 + 10


def test_busy_requests_of_an_idle_or_unrelated_server():
    assert busy_requests("") == 0
    assert busy_requests('vllm:num_requests_running{engine="0"} 0.0\nvllm:num_requests_waiting 0\n') == 0
    assert busy_requests("# vllm:num_requests_running 5\nprocess_cpu_seconds_total 12.5\n") == 0


def test_busy_requests_ignores_a_gauge_that_is_not_a_number():
    # Prometheus text allows NaN and +Inf; an idle check said "nan requests running or waiting"
    text = 'vllm:num_requests_running{engine="0"} NaN\nvllm:num_requests_waiting +Inf\nsglang:num_queue_reqs 1\n'
    assert busy_requests(text) == 1


def test_busy_requests_ignores_a_sample_timestamp():
    # Prometheus text format: name{labels} value [timestamp]; the timestamp is not the value
    assert busy_requests('vllm:num_requests_running{engine="0"} 2 1712345678901\n') == 2


# --- ServerProcess ---------------------------------------------------------------------------


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def server_process(tmp_path):
    """Make ServerProcess objects logging to tmp_path; at teardown, SIGKILL whatever process group a
    test (or a bug under test) left behind, so that no child outlives the test."""
    made: list[ServerProcess] = []

    def make(command, url: str | None = None, **options: Any) -> ServerProcess:
        options.setdefault("log_path", tmp_path / "server.log")
        # A regression fails in a minute instead of waiting 600 s; 5 s was too short for a Python
        # server's start on a CI machine busy with engine tests.
        options.setdefault("startup_timeout_s", 60)
        server = ServerProcess(
            command, url if "announce" in options else url or f"http://127.0.0.1:{free_port()}", **options
        )
        made.append(server)
        return server

    yield make
    for server in made:
        if server.process is None:
            continue
        try:
            os.killpg(server.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        server.process.wait(5)
        if server.process.stdout is not None:
            server.process.stdout.close()


def test_server_process_starts_answers_and_stops(server_process):
    port = free_port()
    server = server_process(
        [sys.executable, str(MOCKSERVER), "--port", str(port)], f"http://127.0.0.1:{port}/v1", stop_timeout_s=5
    )
    assert server.url == f"http://127.0.0.1:{port}"
    with server:
        process = server.process
        assert process is not None and process.poll() is None
        reply = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        assert (reply.status_code, reply.text) == (200, "ok")
        assert server.exit_message() is None
    assert process.poll() is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    server.stop()  # a second stop is harmless


def test_server_command_that_exits_at_once(server_process):
    server = server_process(python("import sys; print('bad flag'); sys.exit(3)"))
    started = time.monotonic()
    with pytest.raises(LLMReplayError) as info:
        server.start()
    assert time.monotonic() - started < 4  # noticed at once, not at the startup timeout
    message = str(info.value)
    assert "status 3" in message
    assert "bad flag" in message
    assert server.process.returncode == 3


def test_a_command_that_backgrounds_its_server_and_exits_0_says_so(server_process):
    """A command that put its server in the background (``&``, setsid, ``docker run -d``) read as
    "exited with status 0" and nothing more, and the server it left was never stopped (found by a
    review helper): the message says why a server command must stay in the foreground, and that
    something still listens at the URL."""
    port = free_port()
    listener = f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)"
    server = server_process(
        ["sh", "-c", f'{shlex.quote(sys.executable)} -c "{listener}" & sleep 1'],
        f"http://127.0.0.1:{port}",
        stop_timeout_s=5,
    )
    with pytest.raises(LLMReplayError) as info:
        server.start()
    assert str(info.value).startswith(
        f"server command {shlex.join(server.args)!r} exited with status 0 (a server command must run while its server "
        f"serves; something still listens at http://127.0.0.1:{port}: one that puts its server in the background, "
        "with '&', setsid, nohup or 'docker run -d', leaves it running after the run; run the server in the foreground); "
        "last lines of its log"
    )
    with pytest.raises(ConnectionRefusedError):  # the background child was in the command's group: stopped
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_url_something_already_answers_at_is_refused_before_the_command_starts(server_process):
    """A server left running from an earlier job held the port: the new command failed to bind
    while the old server answered the health check, so the run measured the old server and
    passed (found by a review helper)."""
    with ServerThread(MockServer(MockConfig())) as stale:
        server = server_process(python("import time; time.sleep(60)"), stale.url)
        with pytest.raises(LLMReplayError) as info:
            server.start()
    assert server.process is None  # never started
    assert str(info.value) == (
        f"server command {shlex.join(server.args)!r}: something already answers at {stale.url} before it starts "
        "(a server left running by an earlier job?); stop it, or give the command another port"
    )


def test_server_command_that_never_listens_times_out_and_is_stopped(server_process):
    server = server_process(python("import time; time.sleep(60)"), startup_timeout_s=1, stop_timeout_s=2)
    started = time.monotonic()
    with pytest.raises(LLMReplayError, match="not ready") as info:
        server.start()
    assert 1 <= time.monotonic() - started < 4
    assert "within 1 s" in str(info.value)
    assert server.process.poll() is not None
    assert server.process.returncode == -signal.SIGTERM


def test_waiting_for_a_server_says_so_every_progress_interval(server_process, refused_url):
    # on the virtual clock each poll advances 0.25 s: reports at 0, 10 and 20 s, the timeout at 30 s
    lines: list[str] = []
    server = server_process(
        python("import time; time.sleep(60)"),
        refused_url,
        startup_timeout_s=30,
        stop_timeout_s=2,
        clock=VirtualClock(),
        progress=lines.append,
        timeout_option="--startup",
    )
    with pytest.raises(
        LLMReplayError, match=r"within 30 s \(raise --startup if it needs longer\); last lines of its log"
    ) as info:
        server.start()
    command = shlex.join(server.args)
    assert lines == [
        f"waiting for {command} at {refused_url} to become healthy: {elapsed} s of 30 s" for elapsed in (0, 10, 20)
    ]
    assert info.value.args[0].count("\n") == 1  # the message, then the (empty) log's one line


IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True)\nwhile True: time.sleep(0.05)"


def test_stop_kills_a_server_that_ignores_sigterm(server_process):
    server = server_process(python(IGNORE_TERM), stop_timeout_s=0.5)
    # started by hand (as start() does: own process group) so that stop() runs on a known-ready process
    server.process = subprocess.Popen(server.args, stdout=subprocess.PIPE, start_new_session=True)
    assert server.process.stdout.readline() == b"ready\n"
    started = time.monotonic()
    server.stop()
    elapsed = time.monotonic() - started
    assert server.process.returncode == -signal.SIGKILL
    assert 0.5 <= elapsed < 3


def test_failed_start_kills_a_server_that_ignores_sigterm(server_process):
    server = server_process(python(IGNORE_TERM), startup_timeout_s=1, stop_timeout_s=0.5)
    with pytest.raises(LLMReplayError, match="not ready") as info:
        server.start()
    assert "ready" in info.value.args[0].rsplit("\n", 1)[-1]  # the log tail
    assert server.process.returncode == -signal.SIGKILL


def test_stop_stops_the_whole_process_group(server_process, tmp_path):
    pid_file = tmp_path / "child.pid"
    server = server_process(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], stop_timeout_s=2)
    server.process = subprocess.Popen(server.args, start_new_session=True)
    deadline = time.monotonic() + 3
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.01)
    child = int(pid_file.read_text())
    assert not gone(child)
    server.stop()
    assert server.process.poll() is not None
    assert wait_until_gone(child, 2), "the server's child process survived stop()"


def test_stop_stops_the_group_left_behind_by_a_leader_that_already_exited(server_process, tmp_path):
    """A server whose main process died (crash) while its children (engine, workers) live on:
    stop() must still clear its process group, or they keep the port and the GPU."""
    pid_file = tmp_path / "child.pid"
    server = server_process(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; exit 0"], stop_timeout_s=2)
    server.process = subprocess.Popen(server.args, start_new_session=True)
    server.process.wait(5)
    child = int(pid_file.read_text())
    assert not gone(child)
    assert server.exit_message() is not None
    server.stop()
    assert wait_until_gone(child, 1), "the child of the exited server command survived stop()"


HTTP_CHILD = """\
import http.server, sys
health = int(sys.argv[2])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = {"/health": health, "/v1/models": 200}.get(self.path, 404)
        self.send_response(code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


ANNOUNCE = re.compile(r"^listening on (http://\S+)$", re.MULTILINE)


def test_server_that_picks_its_own_port_is_found_from_the_line_it_prints(server_process, mock):
    # the command prints where it listens (here: the mock's address) after a while, as a server bound to port 0 does
    server = server_process(
        python(f"import time; time.sleep(0.3); print('listening on {mock.url}/v1', flush=True); time.sleep(60)"),
        announce=ANNOUNCE,
    )
    assert server.url is None
    with server:
        assert server.url == mock.url


def test_an_announcement_left_in_the_log_by_an_earlier_start_is_not_taken(server_process, mock, tmp_path):
    log = tmp_path / "reused.log"
    log.write_text(f"listening on {mock.url}\n")  # a previous run's line, pointing at a live server
    server = server_process(
        python("import time; time.sleep(60)"), announce=ANNOUNCE, log_path=log, startup_timeout_s=1, stop_timeout_s=1
    )
    with pytest.raises(LLMReplayError, match="never printed the URL it listens on") as info:
        server.start()
    assert "within 1 s" in str(info.value)
    assert server.url is None


def test_server_without_health_is_ready_when_v1_models_answers(server_process):
    port = free_port()
    with server_process(
        [sys.executable, "-c", HTTP_CHILD, str(port), "404"], f"http://127.0.0.1:{port}", stop_timeout_s=2
    ) as server:
        assert server.exit_message() is None
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200
    assert server.process.poll() is not None


def test_server_whose_health_fails_is_not_ready(server_process):
    port = free_port()
    server = server_process(
        [sys.executable, "-c", HTTP_CHILD, str(port), "503"],
        f"http://127.0.0.1:{port}",
        startup_timeout_s=0.75,
        stop_timeout_s=2,
    )
    with pytest.raises(LLMReplayError, match="not ready"):
        server.start()
    assert server.process.poll() is not None


def test_server_command_gets_the_extra_environment(server_process, tmp_path, monkeypatch):
    monkeypatch.setenv("LLMREPLAY_TEST_INHERITED", "inherited")
    server = server_process(
        python(
            "import os, sys; print(os.environ['LLMREPLAY_TEST_EXTRA'], os.environ['LLMREPLAY_TEST_INHERITED']); sys.exit(2)"
        ),
        env={"LLMREPLAY_TEST_EXTRA": "extra"},
    )
    with pytest.raises(LLMReplayError, match="status 2") as info:
        server.start()
    assert "extra inherited" in str(info.value)
    assert (tmp_path / "server.log").read_text().strip() == "extra inherited"


@pytest.mark.parametrize(
    ("program", "why"),
    [
        ("/nonexistent/llm-server", "program '/nonexistent/llm-server': no such file"),
        ("llmreplay-no-such-server", "program 'llmreplay-no-such-server': not found on PATH"),
        ("TMP/model.gguf", "program 'TMP/model.gguf': not executable (permission denied)"),
    ],
)
def test_a_program_that_cannot_run_is_named_with_why(server_process, tmp_path, program, why):
    """Not Python's ``[Errno 2] No such file or directory`` (of which file?): the program, and why."""
    (tmp_path / "model.gguf").write_text("not a program")
    program, why = program.replace("TMP", str(tmp_path)), why.replace("TMP", str(tmp_path))
    server = server_process([program, "--port", "1"])
    with pytest.raises(LLMReplayError) as info:
        server.start()
    assert str(info.value) == f"server command '{program} --port 1': cannot start: {why}"
    assert server.process is None


def test_empty_command_is_refused():
    with pytest.raises(LLMReplayError, match="empty"):
        ServerProcess("  ", "http://127.0.0.1:1")


def test_string_command_is_split_like_a_shell():
    assert ServerProcess("vllm serve 'my model' --port 8000", "http://x:1").args == [
        "vllm",
        "serve",
        "my model",
        "--port",
        "8000",
    ]


def test_exit_message_names_the_status_after_the_server_died(server_process, tmp_path):
    port = free_port()
    with server_process(
        [sys.executable, str(MOCKSERVER), "--port", str(port)], f"http://127.0.0.1:{port}", stop_timeout_s=5
    ) as server:
        assert server.exit_message() is None
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(5)
        message = server.exit_message()
        assert message is not None
        assert f"status {-signal.SIGKILL}" in message
        assert str(tmp_path / "server.log") in message
