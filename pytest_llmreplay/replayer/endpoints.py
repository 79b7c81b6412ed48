"""Endpoints: where requests go. The HTTP endpoint, and the protocol (its names defined in
:mod:`~pytest_llmreplay.replayer.endpoint_types`, which an offline replay imports alone).

An :class:`~pytest_llmreplay.replayer.endpoint_types.Endpoint` takes an :class:`EndpointRequest` and fills a
:class:`~pytest_llmreplay.replayer.response.Response` in place as chunks arrive (so a request
cancelled half-way keeps what it measured). Every time it stamps comes from the clock it was
opened with. Faults never raise out of :meth:`Endpoint.send`: a
refused connection, an HTTP error, a timeout, a stream cut mid-way, a malformed event or a
reply the server ended itself (:data:`ENDED_BY_SERVER`) ends as ``response.error`` (``kind:
detail``); a connection lost after the stream's end loses nothing and is not one. Requests ask
for no compression (``Accept-Encoding: identity``: each token as it comes), and a stream
compressed anyway is decoded. A failure part-way through a response says how far it
got in the words of :func:`progress` (``before the first token``, ``after 423 tokens``;
:data:`TOKENS_SO_FAR` reads the count back), so that reports can group such causes.

:class:`HTTPEndpoint` speaks the APIs of :mod:`~pytest_llmreplay.replayer.apis` (OpenAI's chat,
completions and Responses, Anthropic's Messages), streaming or not, each reply read by that API's
parser, on one shared httpx client whose transport is aiohttp (httpx-aiohttp): httpx's own
transport spends most of a core in its connection pool at concurrency 64 (see bench/README.md).

A server the run starts itself is :mod:`~pytest_llmreplay.replayer.server_process`'s.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import LLMReplayError
from ..json_text import JSONTextError, parse_json
from .apis import API, API_TABLE, APIS
from .clock import Clock, WallClock
from .endpoint_types import SIM_ENGINE, SIM_REASONING_FIELD, EndpointRequest, describe_error
from .response import Response
from .server_metrics import Scraped, Scraper
from .sse import SSEDecoder, StreamError, error_message, event_object

# Prometheus gauges of requests in the engine: vLLM, SGLang, llama.cpp
BUSY_GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
)
LLAMACPP_SERVER = "llama.cpp"  # the Server header of llama.cpp's llama-server
# finish reasons of a request the server ended itself, not the model: vLLM's FinishReason ABORT
# (an abort, a shutdown, a paused engine: HTTP 200, then the reason and [DONE]) and ERROR
ENDED_BY_SERVER = frozenset({"abort", "error"})


def extra_body(option: str, text: str | None, ignore_eos: bool = False) -> dict[str, Any]:
    """The fields merged into every request body: the JSON object ``text`` (given as ``option``,
    named in the error when it is not one, names a key twice at any depth (JSON keeps the last,
    silently) or holds NaN or Infinity, which no JSON body may), plus ``ignore_eos: true`` when asked."""
    fields: dict[str, Any] = {}
    if text:
        try:
            fields = parse_json(text, strict_numbers=True)  # sent in every request body: JSON has no NaN
        except JSONTextError as exc:
            raise LLMReplayError(f"{option}: {exc}") from None
        if not isinstance(fields, dict):
            raise LLMReplayError(f"{option}: expected a JSON object, got {type(fields).__name__}")
    if ignore_eos:
        fields["ignore_eos"] = True
    return fields


@dataclass
class HTTPEndpoint:
    """An OpenAI-compatible server at ``url`` (``http://host:port``, with or without ``/v1``).

    ``model``: the model name to send (None: a verbatim payload's own ``"model"``, else the first
    of ``/v1/models``); a name given here, or as ``extra_body["model"]`` (which wins), replaces a
    payload's, so a recorded workload reaches a server serving another name. ``api_key_env``: the
    name of the environment variable holding the API key (read when opened, sent as a bearer
    token, never stored on this object or printed). ``headers``/``extra_body``: merged into every
    request (e.g. ``{"ignore_eos": True}``). ``timeout_s``: the longest wait for any byte from
    the server (connect, or between reads) before the request fails. ``metrics_interval_s``:
    while open, the server's ``/metrics`` is scraped that often
    (:mod:`~pytest_llmreplay.replayer.server_metrics`; 0: never); :attr:`scraped` holds what
    :meth:`close` collected. ``reasoning_hint``: the server is our simulator, so a request's
    planned reasoning goes in its body as :data:`SIM_REASONING_FIELD` (a real server would ignore
    the field, or refuse it: never sent to one); None: ask the server when opened (its
    ``GET /version`` names the engine :data:`SIM_ENGINE`: ``llmreplay sim`` started by hand).
    """

    url: str
    model: str | None = None
    api: str = "chat"
    stream: bool = True
    api_key_env: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0
    metrics_interval_s: float = 1.0
    reasoning_hint: bool | None = False

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise LLMReplayError(f"api: expected one of {', '.join(APIS)}, got {self.api!r}")
        try:
            self.url = check_endpoint_url(self.url)
        except LLMReplayError as exc:
            raise LLMReplayError(f"endpoint: {exc}") from None
        self._named_model = self.extra_body.get("model", self.model)  # what the user asked for, if anything
        self._client: Any = None
        self._retired: list[Any] = []  # clients replaced by _note_server, closed with the endpoint
        self._reuse = True  # whether requests share pooled connections (see _note_server)
        self._limit = 0
        self._clock: Clock = WallClock()
        self._scraper: Scraper | None = None
        self.scraped: Scraped | None = None

    @property
    def name(self) -> str:
        return self.url

    def request_headers(self) -> dict[str, str]:
        """``headers`` and the API key as a bearer token (read now from ``api_key_env``)."""
        headers = dict(self.headers)
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise LLMReplayError(f"API key: environment variable {self.api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def metrics_scraper(self) -> Scraper | None:
        """A scraper of this server's ``/metrics`` every ``metrics_interval_s``, not yet started;
        None when that is 0. :meth:`open` starts one; a run on workers starts one in the
        process that drives them (:mod:`~pytest_llmreplay.replayer.workers`)."""
        if self.metrics_interval_s <= 0:
            return None
        return Scraper(self.url, self.metrics_interval_s, self.request_headers())

    async def open(self, clock: Clock, concurrency: int | None) -> None:
        self._clock = clock
        self._scraper = self.metrics_scraper()
        if self._scraper is not None:
            self._scraper.start()
        # one connection per request in flight (+ a few for /metrics): a smaller pool would queue
        # requests inside the client and count the wait as server latency
        self._limit = 0 if concurrency is None else concurrency + 4  # aiohttp: 0 = no limit
        self._client = self._new_client(reuse=True)
        try:
            if self.model is None:
                self.model = await self._first_model()
            if self.reasoning_hint is None:
                self.reasoning_hint = await self._is_simulator()
            if API_TABLE[self.api].probed:
                await self._check_served(API_TABLE[self.api])
        except BaseException:
            await self.close()  # open failed: the driver will not close what it never got
            raise

    def _new_client(self, reuse: bool) -> Any:
        """The httpx client of the requests, on aiohttp with :attr:`_limit` connections; each
        closed after its response unless ``reuse``."""
        import aiohttp
        import httpx
        from httpx_aiohttp import AiohttpTransport

        limit = self._limit
        transport = AiohttpTransport(
            client=lambda: aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=limit, limit_per_host=0, force_close=not reuse)
            )
        )
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Accept-Encoding": "identity", **self.request_headers()},  # tokens as they come, not compressed
            timeout=httpx.Timeout(self.timeout_s),
            transport=transport,
        )

    def _note_server(self, reply: Any) -> None:
        """Stop reusing connections once a reply says it is llama.cpp's (``Server: llama.cpp``),
        which closes the connection after every streamed response (its last chunk ends the write
        as failed) though it answers ``Keep-Alive``: a request sent on a pooled connection then
        fails at random (``Server disconnected``, ``Can not write request body``). Later
        requests go through a client that opens a connection per request; the first reply's
        headers come before any response ends, so no request takes a connection closed so."""
        if self._reuse and reply.headers.get("server") == LLAMACPP_SERVER:
            self._reuse = False
            self._retired.append(self._client)
            self._client = self._new_client(reuse=False)

    async def _check_served(self, api: API) -> None:
        """:class:`LLMReplayError` when the server does not serve ``api``: a POST of ``{}`` to its
        route answered 404 (no such route), 405 (the route, for other methods only), as FastAPI
        servers (vLLM, SGLang) and the simulator answer, or 501 (the method not implemented:
        Python's ``http.server``, some proxies); a server that serves it refuses the empty body
        (400) without generating anything."""
        try:
            reply = await self._client.post(api.path, json={})
        except Exception as exc:  # noqa: BLE001 - httpx's transport errors, and aiohttp's it does not map (a reply that is not HTTP)
            raise LLMReplayError(
                f"{self.url}: no answer to POST {api.path} ({describe_error(exc)}); is the server running?"
            ) from None
        if reply.status_code in (404, 405, 501):
            raise LLMReplayError(
                f"{self.url} does not serve the {api.title} API (api {api.name}): POST {api.path} answered "
                f"HTTP {reply.status_code} ({_error_detail(reply.text)}); replay with an API it serves (pytest --llm-api, llmreplay --api)"
            )

    async def _is_simulator(self) -> bool:
        """Whether the server is our simulator: its ``GET /version`` names :data:`SIM_ENGINE`
        (any other answer, or none, is a server that must not be sent the simulator's fields)."""
        try:
            reply = await self._client.get("/version")
            return reply.status_code == 200 and reply.json().get("engine") == SIM_ENGINE
        except Exception:  # noqa: BLE001 - no /version, not JSON, not a mapping: not the simulator
            return False

    async def _first_model(self) -> str:
        import httpx

        try:
            reply = await self._client.get("/v1/models")
            self._note_server(reply)
            reply.raise_for_status()
            return str(reply.json()["data"][0]["id"])
        except httpx.TransportError as exc:
            raise LLMReplayError(
                f"{self.url}: no answer to GET /v1/models ({describe_error(exc)}); is the server running?"
            ) from None
        except Exception as exc:
            raise LLMReplayError(
                f"{self.url}/v1/models: could not read a model name ({describe_error(exc)}); pass the model name (--model)"
            ) from None

    async def close(self) -> None:
        if self._scraper is not None:
            self.scraped = await asyncio.to_thread(self._scraper.stop)
            self._scraper = None
        for client in [*self._retired, self._client]:
            if client is not None:
                await client.aclose()
        self._client, self._retired = None, []

    async def idle_warning(self) -> str | None:
        """A warning when the server's ``/metrics`` shows requests running or waiting."""
        try:
            reply = await self._client.get("/metrics", timeout=5.0)
        except Exception:
            return None
        if reply.status_code != 200:
            return None
        busy = busy_requests(reply.text)
        if not busy:
            return None
        return f"{self.url} is not idle before the run ({busy:g} requests running or waiting on /metrics): cache and latency figures will be skewed"

    def body(self, request: EndpointRequest) -> dict[str, Any]:
        """The JSON sent: model and streaming settings, then ``extra_body``, then the request's;
        ``stream_options.include_usage`` where the body streams (a recorded payload's own
        ``stream`` decides; servers refuse ``stream_options`` on a request that does not stream)
        and sets none; a model the user named (``model`` or ``extra_body``) replaces a verbatim
        payload's; the planned reasoning last (``reasoning_hint``)."""
        body: dict[str, Any] = {"model": self.model, "stream": self.stream}
        body.update(self.extra_body)
        body.update(request.body)
        # by what is sent: a payload may say stream false (or true) whatever the endpoint's setting
        if body.get("stream") and API_TABLE[request.api].usage_on_request and "stream_options" not in body:
            body["stream_options"] = {"include_usage": True}
        if self._named_model is not None:
            body["model"] = self._named_model
        if self.reasoning_hint and request.reasoning_tokens is not None:
            body[SIM_REASONING_FIELD] = request.reasoning_tokens
        return body

    async def send(self, request: EndpointRequest, response: Response) -> None:
        body = self.body(request)
        api = API_TABLE[request.api]
        response.sent_s = self._clock.now()
        try:
            async with self._client.stream("POST", api.path, json=body) as reply:
                self._note_server(reply)
                if reply.status_code >= 400:
                    detail = (await reply.aread()).decode("utf-8", errors="replace")
                    response.fail("http", f"HTTP {reply.status_code}: {_error_detail(detail)}")
                elif body.get("stream"):
                    await self._read_stream(reply, response, api)
                else:
                    await self._read_whole(reply, response, api)
            if response.finish_reason in ENDED_BY_SERVER:
                response.fail(
                    "server",
                    f"the server ended the request (finish_reason {response.finish_reason}) {progress(response)}",
                )
        except StreamError as exc:
            response.fail(exc.kind, str(exc))
        except Exception as exc:  # every transport fault becomes a failed record
            response.fail(*_classify(exc, response, self.timeout_s))
        finally:
            response.end_s = self._clock.now()

    async def _read_stream(self, reply: Any, response: Response, api: API) -> None:
        """The event stream into ``response``; a failed request where the stream is none (a whole
        JSON reply: the server ignores ``stream: true``; its error, where it is one), ends early,
        or ends without a token, which no request asking for at least one can (usage saying
        none generated is the same: the request measured nothing)."""
        if reply.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            await self._read_whole(reply, Response(), api)  # a JSON error says so (StreamError)
            raise StreamError(
                "protocol",
                "asked to stream, the server answered application/json, not an event stream (does it honour stream: true?)",
            )
        decoder, parser, done = SSEDecoder(), api.parser(), False
        # a server or proxy that compresses the stream anyway (the client asks for none) is decoded
        reads = (
            reply.aiter_bytes()
            if reply.headers.get("content-encoding", "identity") != "identity"
            else reply.aiter_raw()
        )
        try:
            async for raw in reads:
                now = self._clock.now()
                for data in decoder.feed(raw):
                    done = parser.event(data, now, response) or done
        except Exception:
            if not done:
                raise
            return  # the connection dropped after the stream's end: nothing was lost
        for data in decoder.close():
            done = parser.event(data, self._clock.now(), response) or done
        if not done:
            response.fail("stream", f"stream ended before {api.end} {progress(response)}")
        elif not response.chunk_times and not response.completion_tokens:
            usage = "and no usage" if response.completion_tokens is None else "usage: 0 completion tokens"
            response.fail("protocol", f"the stream ended without a token ({usage})")

    async def _read_whole(self, reply: Any, response: Response, api: API) -> None:
        raw = await reply.aread()
        now = self._clock.now()
        try:
            obj = event_object(raw.decode("utf-8", errors="replace"))
        except StreamError:
            raise StreamError("protocol", f"response is not a JSON object: {raw[:120]!r}") from None
        error = error_message(obj)
        if error is not None:
            raise StreamError("server", error)
        api.parser().whole(obj, now, response)


def _error_detail(body: str) -> str:
    """An error reply's message (the JSON error's, else the body), on one line of at most 200
    characters; an HTML page (a proxy's, a web server's) by its title."""
    try:
        message = error_message(parse_json(body, unique=False))
    except JSONTextError:
        message = None
    if message is None and re.match(r"\s*<(!doctype html|html)", body, re.I):
        title = re.search(r"<title>(.*?)</title>", body, re.I | re.S)
        message = f"an HTML page: {title.group(1)}" if title else "an HTML page"
    text = " ".join((message if message is not None else body).split())
    return text[:200] or "(empty body)"


def progress(response: Response) -> str:
    """How far a response got: ``before the first token``, or ``after N tokens`` (streamed)."""
    if not response.chunk_times and response.completion_tokens is None:
        return "before the first token"
    tokens = sum(response.chunk_tokens)
    return f"after {tokens} token{'' if tokens == 1 else 's'}"


def _classify(exc: BaseException, response: Response, timeout_s: float) -> tuple[str, str]:
    """(kind, detail) of a transport exception; aiohttp's own error is the cause under httpx's
    (whose mapping calls a refused connection a ConnectTimeout: a timeout is one only when
    aiohttp's error is a timeout too)."""
    import httpx

    cause = exc.__cause__ or exc
    started = bool(response.chunk_times) or response.completion_tokens is not None
    if isinstance(exc, httpx.TimeoutException) and "Timeout" in type(cause).__name__:
        if "Connection" in type(cause).__name__:  # aiohttp's ConnectionTimeoutError
            return "timeout", f"no connection to the server within {timeout_s:g} s"
        return "timeout", f"no data from the server for {timeout_s:g} s {progress(response)}"
    if isinstance(exc, httpx.ReadError) or (started and isinstance(exc, httpx.TransportError)):
        return "stream", f"connection lost mid-response {progress(response)}"
    if "Disconnected" in type(cause).__name__:
        return "closed", f"the server closed the connection without a response ({describe_error(cause)})"
    if isinstance(exc, httpx.TransportError):
        return "connect", describe_error(cause)
    return "client", describe_error(exc)


ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/chat/completions", "/completions", "/models")


def check_endpoint_url(url: str) -> str:
    """The base URL of the server ``url`` names (``http[s]://HOST[:PORT][/PREFIX]``, a trailing
    ``/v1`` dropped), or :class:`LLMReplayError` (reason only, the caller names its option) for a
    space, another scheme, no host, a user name or password, a port outside 1..65535, a query or fragment, or a route of
    the API (``/v1/chat/completions``: the replay adds the route of each request itself), and for
    anything else that urllib or httpx cannot read as a URL (``http://[::1``)."""
    from urllib.parse import urlsplit

    import httpx

    if re.search(r"\s", url):
        raise LLMReplayError(f"a space in the URL; expected http://host:port, got {url!r}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise LLMReplayError(f"not a URL ({exc}); expected http://host:port, got {url!r}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise LLMReplayError(f"expected http://host:port (or https://), got {url!r}")
    if parts.username is not None or parts.password is not None:
        raise LLMReplayError(
            f"a user name or password in the URL ({parts.username or ''}{':***' if parts.password else ''}@); expected http://host:port "
            "(an API key is read from an environment variable: --api-key-env / --llm-api-key-env NAME)"
        )
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise LLMReplayError(f"invalid port {parts.netloc.rpartition(':')[2]!r} in {url!r}; expected 1 to 65535")
    if parts.query or parts.fragment:
        raise LLMReplayError(f"expected the server's address without a query or fragment, got {url!r}")
    route = next((r for r in ROUTES if parts.path.rstrip("/").endswith(r)), None)
    if route is not None:
        base = url.rstrip("/")[: -len(route)]
        raise LLMReplayError(
            f"{url!r} names the route {route}; give the server's address, {base!r} (each request's route follows the API setting)"
        )
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise LLMReplayError(f"not a URL ({exc}); expected http://host:port, got {url!r}") from None
    return base_url(url)


def busy_requests(metrics_text: str) -> float:
    """Sum of the running/waiting request gauges (:data:`BUSY_GAUGES`) in Prometheus text
    (``name{labels} value [timestamp]``; one series per engine, so they add up); a value that is
    not a finite number (``NaN``, ``+Inf``) counts no request."""
    total = 0.0
    for line in metrics_text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in BUSY_GAUGES:
            continue
        rest = line[line.rfind("}") + 1 :] if "{" in line else line[len(name) :]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        total += value if math.isfinite(value) else 0.0
    return total


def base_url(url: str) -> str:
    """``url`` without a trailing slash or ``/v1``: the server's root."""
    return url.rstrip("/").removesuffix("/v1")
