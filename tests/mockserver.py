"""A scriptable OpenAI-compatible mock server for the client's tests and benchmarks.

It streams ``max_tokens`` tokens (token *i* is the bundled tokenizer's *i*-th word token, so
the text re-encodes to exactly those ids) after ``ttft_s``, one every
``itl_s``, ``tokens_per_chunk`` per event, then a usage-only chunk and ``[DONE]``. Prompt tokens
are counted with the bundled tokenizer (chat: contents plus ``CHAT_OVERHEAD`` per message), and
``cached_tokens`` is the longest block-aligned prefix (blocks of ``block_size`` token ids) this
server has seen before, like a prefix cache that never evicts.

A request can ask for a fault in its body: ``"mock": {"fault": F, "after": N}`` with F one of
``http500``, ``http400``, ``stall`` (stop sending after N tokens and hang), ``cut`` (close the
connection after N tokens), ``malformed`` (a non-JSON event after N tokens), ``error_event``
(an error object after N tokens), ``no_done`` (end cleanly without ``[DONE]``). ``"mock":
{"usage": false}`` leaves usage out; ``{"usage_tokens": K}`` reports K completion tokens;
``{"blank_opening": true}`` opens a chat stream with ``{"content": ""}`` and no role.

``python tests/mockserver.py --port P`` serves it (zero latency unless ``--ttft-s``/``--itl-s``) for benchmarks. ``GET /mock/stats``
reports the completion requests received, the ``time.time()`` of the first and the streams finished; ``DELETE`` resets them.
``flush_cache`` scripts SGLang's ``POST /flush_cache``: the statuses it answers in turn, the last
one kept (SGLang answers 400 while requests run or wait, 200 once it flushed); None (the
default) serves no such route. ``flush_posts`` counts the POSTs it got.
``--envelope`` adds the ``id``/``object``/``created``/``model`` fields real servers put in every
streamed chunk (AIPerf drops chunks without ``object``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from pytest_llmreplay.plugin.servers import free_port as plugin_free_port

CHAT_OVERHEAD = 3


@dataclass
class MockConfig:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    tokens_per_chunk: int = 1
    block_size: int = 16
    busy: float = 0.0  # what /metrics reports as running requests
    count_prompts: bool = True
    envelope: bool = False  # add id/object/created/model to streamed chunks, as real servers do (AIPerf needs "object")
    metrics: bool = True  # serve /metrics (False: 404, a server without it)
    metrics_delay_s: float = 0.0  # how long /metrics takes to answer


@dataclass
class MockServer:
    config: MockConfig = field(default_factory=MockConfig)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)  # each completion request's, names in lower case
    _seen_blocks: set[int] = field(default_factory=set)
    completions_count: int = 0  # POSTs to /v1/(chat/)completions since start or the last DELETE /mock/stats
    streams_finished: int = 0  # streamed replies written to their end ([DONE] and end of body)
    first_completion_time: float | None = None  # time.time() when the first of those arrived
    flush_cache: list[int] | None = None  # POST /flush_cache's statuses in turn, the last kept (module docstring)
    flush_posts: int = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        if self.config.metrics:
            app.router.add_get("/metrics", self.metrics)
        if self.flush_cache is not None:
            app.router.add_post("/flush_cache", self.flush)
        app.router.add_get("/mock/stats", self.stats)
        app.router.add_delete("/mock/stats", self.stats)
        return app

    async def stats(self, request: web.Request) -> web.Response:
        """GET: completion requests received, the wall time of the first and the streamed replies
        written to their end; DELETE: reset the first two."""
        if request.method == "DELETE":
            self.completions_count, self.first_completion_time = 0, None
        return web.json_response(
            {
                "requests": self.completions_count,
                "first_request_time": self.first_completion_time,
                "finished": self.streams_finished,
            }
        )

    async def flush(self, request: web.Request) -> web.Response:
        """SGLang's ``/flush_cache``: the next of ``flush_cache``'s statuses, with SGLang's text."""
        assert self.flush_cache
        self.flush_posts += 1
        status = self.flush_cache.pop(0) if len(self.flush_cache) > 1 else self.flush_cache[0]
        text = (
            "Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not be performed.)\n"
        )
        return web.Response(text=text, status=status)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "mock-model", "object": "model"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.config.metrics_delay_s)
        busy = self.config.busy
        text = (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="mock-model"}} {busy}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="mock-model"}} 0.0\n'
        )
        return web.Response(text=text)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    def prompt_ids(self, body: dict[str, Any], chat: bool) -> tuple[list[int], int]:
        """(ids to hash for the cache, prompt token count)."""
        if not self.config.count_prompts:
            return [], 0
        tokenizer = _vocabulary().tokenizer
        if chat:
            ids: list[int] = []
            for message in body["messages"]:
                ids += tokenizer.encode(message["content"])
            return ids, len(ids) + CHAT_OVERHEAD * len(body["messages"])
        prompt = body["prompt"]
        ids = list(prompt) if isinstance(prompt, list) else tokenizer.encode(prompt)
        return ids, len(ids)

    def cached(self, ids: list[int]) -> int:
        """Tokens in the longest run of leading full blocks seen before (chained block hashes)."""
        size, hit, key, missed = self.config.block_size, 0, 0, False
        for end in range(size, len(ids) + 1, size):
            key = hash((key, tuple(ids[end - size : end])))
            if key in self._seen_blocks and not missed:
                hit = end
            else:
                missed = True
                self._seen_blocks.add(key)
        return hit

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        if self.first_completion_time is None:
            self.first_completion_time = time.time()
        self.completions_count += 1
        body = await request.json()
        self.bodies.append(body)
        self.headers.append({name.lower(): value for name, value in request.headers.items()})
        mock = body.get("mock", {})
        fault, after = mock.get("fault"), mock.get("after", 0)
        if fault in ("http500", "http400"):
            status = int(fault[4:])
            return web.json_response(
                {"error": {"message": f"mock {status}", "type": "MockError", "code": status}}, status=status
            )
        ids, prompt_tokens = self.prompt_ids(body, chat)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": mock.get("usage_tokens", body.get("max_tokens", 16)),
            "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": self.cached(ids)},
        }
        n = body.get("max_tokens", 16)
        if not body.get("stream"):
            await asyncio.sleep(self.config.ttft_s + self.config.itl_s * max(n - 1, 0))
            text = _text(0, n)
            choice = {
                "index": 0,
                "finish_reason": "length",
                **({"message": {"role": "assistant", "content": text}} if chat else {"text": text}),
            }
            return web.json_response({"id": "x", "choices": [choice], "usage": usage})
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        await asyncio.sleep(self.config.ttft_s)
        kind = "chat.completion.chunk" if chat else "text_completion"
        env = {"id": "x", "object": kind, "created": 0, "model": body.get("model")} if self.config.envelope else {}
        if chat:
            opening = {"content": ""} if mock.get("blank_opening") else {"role": "assistant", "content": ""}
            await reply.write(_event({**env, "choices": [{"index": 0, "delta": opening, "finish_reason": None}]}))
        sent, per = 0, self.config.tokens_per_chunk
        while sent < n:
            if fault and sent >= after:
                return await self._fault(fault, request, reply)
            count = min(per, n - sent)
            text = _text(sent, sent + count)
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if sent + count == n else None}
            choice.update({"delta": {"content": text}} if chat else {"text": text})
            if body.get("return_token_ids"):
                choice["token_ids"] = [
                    _vocabulary().words[i % len(_vocabulary().words)] for i in range(sent, sent + count)
                ]
            await reply.write(_event({**env, "choices": [choice]}))
            sent += count
            if self.config.itl_s and sent < n:
                await asyncio.sleep(self.config.itl_s)
        if fault:
            return await self._fault(fault, request, reply)
        if mock.get("usage", True) and body.get("stream_options", {}).get("include_usage"):
            await reply.write(_event({**env, "choices": [], "usage": usage}))
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        self.streams_finished += 1
        return reply

    async def _fault(self, fault: str, request: web.Request, reply: web.StreamResponse) -> web.StreamResponse:
        if fault == "stall":
            await asyncio.sleep(3600)
        elif fault == "cut":
            request.transport.close()
        elif fault == "malformed":
            await reply.write(b"data: {not json\n\n")
            await reply.write(b"data: [DONE]\n\n")
        elif fault == "error_event":
            await reply.write(
                _event({"error": {"message": "engine crashed", "type": "InternalServerError", "code": 500}})
            )
            await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        self.streams_finished += 1
        return reply


@dataclass
class _Vocabulary:
    tokenizer: Any
    words: list[int]
    texts: list[str]


_VOCABULARY: list[_Vocabulary] = []


def _vocabulary() -> _Vocabulary:
    """The bundled tokenizer and its word tokens (loaded once per process)."""
    if not _VOCABULARY:
        from pytest_llmreplay.workloads.prompts import PromptFactory
        from pytest_llmreplay.workloads.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(None)
        words = PromptFactory(tokenizer).words.tolist()
        _VOCABULARY.append(_Vocabulary(tokenizer, words, [tokenizer.decode([w]) for w in words]))
    return _VOCABULARY[0]


def _text(start: int, end: int) -> str:
    texts = _vocabulary().texts
    return "".join(texts[i % len(texts)] for i in range(start, end))


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def free_port() -> int:
    """A port free at the time of the call, for a test that starts a server on a port of its
    choosing: the plugin's own choice for declared servers (below the ephemeral range, which
    every other test's bind to port 0 draws from). A test that needs an address that refuses
    connections uses the ``refused_url`` fixture (conftest.py) instead."""
    return plugin_free_port()


def gone(pid: int) -> bool:
    """True when the process no longer exists or is a zombie waiting for a parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def group_members(pgid: int) -> list[int]:
    """The live processes (zombies aside) of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (FileNotFoundError, ProcessLookupError):  # ended meanwhile
            continue
        if int(group) == pgid and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def wait_until_gone(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for :func:`gone`; its last answer."""
    deadline = time.monotonic() + timeout_s
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return gone(pid)


class ServerThread:
    """Run a :class:`MockServer` on 127.0.0.1 in a background thread: ``url`` once started."""

    def __init__(self, server: MockServer) -> None:
        self.server = server
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        runner = web.AppRunner(self.server.app(), **getattr(self.server, "runner_options", {"access_log": None}))
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()
        for task in asyncio.all_tasks(self._loop):  # stalled handlers must not hold up the exit
            task.cancel()
        self._loop.run_until_complete(runner.cleanup())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--count-prompts", action="store_true", help="tokenize prompts for usage and cache figures (slower)"
    )
    parser.add_argument(
        "--envelope", action="store_true", help="add id/object/created/model to streamed chunks (AIPerf needs them)"
    )
    parser.add_argument("--ttft-s", type=float, default=0.0, help="seconds before the first token (default 0)")
    parser.add_argument("--itl-s", type=float, default=0.0, help="seconds between tokens (default 0)")
    args = parser.parse_args()
    server = MockServer(
        MockConfig(ttft_s=args.ttft_s, itl_s=args.itl_s, count_prompts=args.count_prompts, envelope=args.envelope)
    )
    web.run_app(server.app(), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
