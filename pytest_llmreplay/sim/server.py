"""The simulator as an OpenAI-compatible HTTP server (``llmreplay sim --profile P --port N``).

Routes: ``POST /v1/completions`` (``prompt``: text, or token ids), ``POST /v1/chat/completions``,
``POST /v1/responses`` (OpenAI's Responses API) and ``POST /v1/messages`` (Anthropic's Messages
API), each written in its own format (:mod:`.framing`, :mod:`.framing_events`) with the same
timing, ``GET /v1/models``, ``/version``, ``/health``, ``/metrics``. The engines run in real time
(:class:`~pytest_llmreplay.replayer.clock.WallClock`, one iteration at a time) and every token is streamed
when its iteration ends.

Requests:

- ``max_tokens`` (chat also ``max_completion_tokens``), ``min_tokens`` (default 0),
  ``ignore_eos``, fitted to the profile's ``max_model_len`` as vLLM does
  (:mod:`.request_fields`: default 16 for completions, the context left for chat; a limit past
  the context is cut to it). The output has exactly ``max_tokens`` tokens unless the server runs
  with ``eos_mean_tokens``: then a request without ``ignore_eos`` has the length
  ``min(min_tokens + natural, max_tokens)``, ``natural`` drawn per request (geometric with that
  mean: a constant chance of EOS per token, the EOS token counted), with ``finish_reason``
  ``stop`` when it stopped early. ``min_tokens`` adds to the natural length because vLLM masks
  EOS for the first ``min_tokens`` tokens and the chance of EOS is the same at every later one;
  so does a reasoning model's thinking (the natural length is its answer's):
  ``max(min_tokens, reasoning) + natural``.
- Reasoning (:mod:`.reasoning`): the request's ``sim_reasoning_tokens``, else the profile's
  ``reasoning``, are the output's first tokens; a chat response streams them as
  ``reasoning_content`` deltas, then ``content``, with
  ``usage.completion_tokens_details.reasoning_tokens`` (:mod:`.reply`), as vLLM with a
  reasoning parser.
- Tool calls: chat ``tools`` and a ``tool_choice`` that is ``required`` or names one of them
  (:mod:`.request_fields`) make the answer a call of that tool (:mod:`.reply`), with the
  finish reason ``tool_calls``.
- ``stream`` with ``stream_options.include_usage``; ``return_token_ids`` adds each chunk's
  ``token_ids`` (as vLLM does). ``usage`` has ``prompt_tokens_details.cached_tokens``: the prompt's
  prefix found in the engine's cache at admission.
- Chat prompts (and the Responses and Messages APIs', whose system prompt is ``instructions`` or
  ``system`` and whose history is the ``input`` items or ``messages``: :mod:`.request_prompt`)
  are each message as ``<|role|>\\n`` + content (an assistant's tool calls: their arguments
  after it) + ``\\n`` (encoded message by message, so a conversation's earlier turns keep their
  token ids and hit the cache), then ``<|assistant|>\\n``. Token-id prompts are taken as they
  are; an id past both the profile's model's ``vocab_size`` and the tokenizer's is refused as
  vLLM refuses it (no limit when the profile gives no ``vocab_size``); the text it writes comes
  from the project's tokenizer.
- Refused with 400 and an OpenAI error object naming the field (Anthropic's error object on
  ``/v1/messages``): a body that is not JSON, no prompt, batched prompts, ``n`` other than 1, a
  bad or (Messages API) missing ``max_tokens``, a bad ``min_tokens``, a flag
  (``stream``, ``ignore_eos``, ``return_token_ids``, ``stream_options.include_usage``) that is
  not true or false, ``stream_options`` that is not an object, a prompt that leaves no room
  in ``max_model_len`` (vLLM's message and ``param``; a text prompt is tokenized only until it
  is past the context, so a huge one does not take the memory of its whole tokenization); 404
  for another ``model``.
- ``/v1/models`` reports the profile's ``max_model_len``: the model's context, capped at an
  engine's KV cache.
- A client that goes away (closes the connection, or times out waiting for a whole response)
  has its request dropped from the engine: it stops generating and frees its blocks.

``/metrics`` uses vLLM's metric names per engine (label ``engine``): running and waiting requests,
KV cache usage, prefix cache queries and hits, prompt and generation tokens, preemptions, and
``vllm:cache_config_info`` (block size, GPU blocks per engine); and
``llmreplay:sim_emit_lag_seconds``, quantiles of (time a chunk was written - its simulated
time) over the last 100,000 chunks of fault-free requests, and ``llmreplay:sim_emit_error_seconds``,
quantiles of its absolute value: the server's own timing error. An iteration's chunks are written
from just before to just after its simulated end (see the engine's ``lead``), so lags are of both
signs.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, TypedDict

from aiohttp import web

from ..errors import LLMReplayError
from ..replayer.apis import API_TABLE
from ..replayer.clock import WallClock
from ..replayer.endpoint_types import SIM_ENGINE
from ..workloads.prompts import PromptFactory, stable_hash
from ..workloads.tokenizer import encode_within
from .cluster import Cluster, ClusterConfig, transfer_s_per_token
from .faults import FaultConfig
from .lag_window import LagWindow
from .profile import Profile
from .reasoning import reasoning_tokens
from .reply import Reply, framing
from .request_fields import BadRequest, check_fields, check_token_ids, output_limits, vocabulary_size
from .request_prompt import prompt_messages

LAG_WINDOW = 100_000
READY = re.compile(r"^llmreplay sim: .* on (http://\S+) \(Ctrl-C stops\)$", re.MULTILINE)  # reads ready_line's URL back


def ready_line(profile: str, model: str, url: str) -> str:
    """What ``llmreplay sim`` prints once it listens (with ``--port 0``, the only way to learn
    its port; :data:`READY` reads the URL back)."""
    return f"llmreplay sim: {profile} serving model {model!r} on {url} (Ctrl-C stops)"


def _label_value(text: str) -> str:
    """``text`` escaped for a Prometheus label value (backslash, double quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Asked(NamedTuple):
    """What a request asks: its ``number`` (among the requests the server accepted, in arrival
    order: what its seeded draws are keyed on), its ``body``, ``prompt`` ids, ``max_tokens``, the
    tokens to generate (``length``), the first of them that are ``reasoning`` (:mod:`.reasoning`),
    and the ``tool`` its answer calls (:mod:`.request_fields`; None: it answers with content)."""

    number: int
    body: dict[str, Any]
    prompt: list[int]
    max_tokens: int
    length: int
    reasoning: int
    tool: str | None


class RunnerOptions(TypedDict):
    """The aiohttp runner's options that :class:`SimServer` needs (its ``runner_options``)."""

    access_log: None
    handler_cancellation: bool


class SimServer:
    """The HTTP face of a :class:`~.cluster.Cluster` of ``profile``; ``app()`` for aiohttp, served
    by a runner with ``runner_options``."""

    # cancel the handler of a client that went away, so that a non-streaming request it gave up
    # on stops generating and frees its engine slot (aiohttp >= 3.9 lets such a handler run on)
    runner_options: ClassVar[RunnerOptions] = {"access_log": None, "handler_cancellation": True}

    def __init__(
        self,
        profile: Profile,
        prompts: PromptFactory,
        *,
        model: str | None = None,
        cluster: ClusterConfig = ClusterConfig(),
        faults: FaultConfig = FaultConfig(),
        eos_mean_tokens: float | None = None,
        seed: int = 0,
        command_line: Mapping[str, Any] | None = None,
    ) -> None:
        cluster.validate()
        transfer_s_per_token(profile, cluster)  # fails now, not when the server starts
        faults.validate()
        if eos_mean_tokens is not None and not 1 <= eos_mean_tokens < math.inf:
            raise LLMReplayError(f"eos_mean_tokens: expected a finite number >= 1, got {eos_mean_tokens!r}")
        if model is not None and not model.strip():
            raise LLMReplayError(
                f"model: expected a served model name, got {model!r} (leave it out for the profile's name)"
            )
        self.profile = profile
        self.prompts = prompts
        self.model = profile.name if model is None else model
        self.vocab_size = vocabulary_size(profile, prompts.tokenizer)
        self.cluster_config = cluster
        self.faults = faults
        self.eos_mean_tokens = eos_mean_tokens
        self.seed = seed
        self.command_line = dict(command_line or {})
        self.clock = WallClock()
        self.cluster: Cluster | None = None
        self.emit_lags = LagWindow(LAG_WINDOW)
        self._requests = 0
        self._resets = 0
        self._handlers: set[asyncio.Task] = set()
        self._headers: dict[str, list[int]] = {}
        self._json_texts: dict[int, bytes] = {}
        self._to_build: list[Reply] = []  # streams whose next event is built once the engine waits
        self._created = int(time.time())

    # -- application ---------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        for api in API_TABLE.values():
            app.router.add_post(api.path, self._handler(api.name))
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._end_streams)
        app.on_cleanup.append(self._stop)
        return app

    async def _end_streams(self, app: web.Application) -> None:
        """On shutdown, end the requests in flight (their clients see the stream cut)."""
        for task in list(self._handlers):
            task.cancel()

    async def _start(self, app: web.Application) -> None:
        _ = self.prompts.word_texts  # built once (tens of ms): not inside the first request's stream
        self.cluster = Cluster(self.profile, self.clock, self.cluster_config, spans=False, seed=self.seed)
        self.cluster.start()

    async def _stop(self, app: web.Application) -> None:
        if self.cluster is not None:
            await self.cluster.stop()

    @property
    def running(self) -> Cluster:
        """The cluster, made when the app starts: before any request is handled."""
        assert self.cluster is not None, "the simulator's app has not started"
        return self.cluster

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's ``POST /reset_prefix_cache``: here a fresh engine (empty cache, idle) whose
        timing jitter draws from a new seed, ``stable_hash("sim-reset", seed, resets)``, as each
        run on a real server draws new noise; 409 while requests are in flight."""
        if self._handlers:
            return web.json_response({"error": {"message": "requests in flight; reset when idle"}}, status=409)
        self._resets += 1
        await self.running.stop()
        self.cluster = Cluster(
            self.profile,
            self.clock,
            self.cluster_config,
            spans=False,
            seed=stable_hash("sim-reset", self.seed, self._resets),
        )
        self.cluster.start()
        return web.json_response({"status": "ok", "resets": self._resets})

    # -- small routes ----------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def version(self, request: web.Request) -> web.Response:
        from importlib.metadata import version

        return web.json_response(
            {
                "version": version("pytest-llmreplay"),
                "engine": SIM_ENGINE,
                "profile": self.profile.name,
                "settings": self.settings_digest(),
            }
        )

    def settings_digest(self) -> str:
        """12 hex digits naming what this server simulates beyond its profile: ``command_line``
        (the settings ``llmreplay sim`` set over the profile's: ``--max-num-batched-tokens`` and
        the other engine options, ``--timing-jitter``), the cluster, the faults, the natural
        lengths and the seed. Two servers of one profile run with other settings are other
        endpoints (``/version``'s ``settings``, in a live fingerprint); the profile's own numbers
        are not in it: a profile is its name, offline and served alike (an edited profile under
        one name is how a slower engine is simulated, docs/simulator.md)."""
        import dataclasses
        import hashlib

        facts = [
            self.command_line,
            dataclasses.asdict(self.cluster_config),
            dataclasses.asdict(self.faults),
            self.eos_mean_tokens,
            self.seed,
        ]
        text = json.dumps(facts, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.model,
            "object": "model",
            "created": self._created,
            "owned_by": "llmreplay",
            "root": self.model,
            "max_model_len": self.profile.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=await self.metrics_text(), content_type="text/plain", charset="utf-8")

    async def metrics_text(self) -> str:
        """Prometheus text: vLLM's names, one sample per engine, then the emit-lag quantiles."""
        names = (
            ("num_requests_running", "gauge", "Number of requests in model execution batches."),
            ("num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
            ("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
            ("prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens."),
            ("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens."),
            ("prompt_tokens_total", "counter", "Number of prefill tokens processed."),
            ("generation_tokens_total", "counter", "Number of generation tokens processed."),
            ("num_preemptions_total", "counter", "Cumulative number of preemption from the engine."),
        )
        stats = [engine.stats() for engine in self.running.engines]
        lines = []
        for name, kind, help_text in names:
            family = name.removesuffix("_total") if kind == "counter" else name
            lines += [f"# HELP vllm:{family} {help_text}", f"# TYPE vllm:{family} {kind}"]
            for index, values in enumerate(stats):
                lines.append(
                    f'vllm:{name}{{engine="{index}",model_name="{_label_value(self.model)}"}} {float(values[name])}'
                )
        config = self.profile.engine
        lines += [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{config.block_size}",enable_prefix_caching="True",'
            f'num_gpu_blocks="{config.num_gpu_blocks}"}} 1.0',
        ]
        lag_quantiles, error_quantiles = (0.0, 0.01, 0.5, 0.99, 1.0), (0.5, 0.9, 0.99, 1.0)
        lags, errors, count = await self.emit_lags.summaries(lag_quantiles, error_quantiles)
        summaries = (
            (
                "emit_lag_seconds",
                "Chunk write time minus its simulated time (negative: written early).",
                lag_quantiles,
                lags,
            ),
            (
                "emit_error_seconds",
                "Absolute difference of a chunk's write time and its simulated time.",
                error_quantiles,
                errors,
            ),
        )
        for name, help_text, quantiles, found in summaries:
            lines += [f"# HELP llmreplay:sim_{name} {help_text}", f"# TYPE llmreplay:sim_{name} summary"]
            lines += [
                f'llmreplay:sim_{name}{{quantile="{q}"}} {float(value)}'
                for q, value in zip(quantiles, found, strict=True)
            ]
            lines.append(f"llmreplay:sim_{name}_count {count}")
        return "\n".join(lines) + "\n"

    # -- generation ------------------------------------------------------------------------------

    def _handler(self, api: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def generate(request: web.Request) -> web.StreamResponse:
            return await self._generate(request, api)

        return generate

    async def _generate(self, request: web.Request, api: str) -> web.StreamResponse:
        received = self.clock.now()  # the engine's arrival: parsing and tokenizing are not model time
        try:
            asked = await self._parse(request, api)
        except BadRequest as exc:
            return exc.response(api)
        number, body, count = asked.number, asked.body, asked.length
        fault = self.faults.draw(number, count)
        if fault is not None and fault.kind == "error":
            return BadRequest("injected fault (fault_error_rate)", status=500, kind="InternalServerError").response(api)
        output = self.prompts.stream(stable_hash("sim-output", self.seed, number), 0, count)
        job = self.running.submit(asked.prompt, output, received, reasoning_len=asked.reasoning)
        # a call needs an answer token: reasoning that takes every token leaves none (the limit ended it)
        called = asked.tool and count > asked.reasoning
        finish = "tool_calls" if called else "length" if count == asked.max_tokens else "stop"
        written = framing(api, self, job, body, number, len(asked.prompt), output, finish, asked.reasoning, asked.tool)
        reply = Reply(self, request, written, job, output, fault)
        handler = asyncio.current_task()
        assert handler is not None  # aiohttp runs each handler in a task
        self._handlers.add(handler)
        try:
            if body.get("stream"):
                return await reply.stream()
            return await reply.whole()
        except BaseException:  # the client went away, or the server stops: free the engine
            self.running.abort(job)
            raise
        finally:
            self._handlers.discard(handler)

    async def _parse(self, request: web.Request, api: str) -> Asked:
        """What the request asks, or :class:`BadRequest`. It is numbered once accepted (after
        its body's one wait, so no other request takes the number meanwhile), as the simulator in
        process numbers its requests: a refused one (the client's API probe, ``POST {}``) took a
        number, and every later draw (reasoning lengths, outputs) moved by one from the offline
        run's."""
        try:
            body = await request.json()
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            raise BadRequest("the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.model:
            raise BadRequest(f"The model `{model}` does not exist.", "model", 404, "NotFoundError")
        limits = check_fields(body, api)
        if body.get("stream_options") and not body.get("stream") and api in ("chat", "completions"):
            raise BadRequest("Stream options can only be defined when `stream=True`.", "stream_options")  # vLLM's
        if api == "completions":
            prompt = self._prompt_ids(body.get("prompt"))
        else:
            prompt = self._chat_ids(prompt_messages(body, api))
        max_tokens, min_tokens = output_limits(limits, len(prompt), self.profile.max_model_len)
        number = self._requests
        self._requests += 1
        thought = reasoning_tokens(limits.reasoning, self.profile, self.seed, number)
        count = self._output_length(limits.ignore_eos, max_tokens, max(min_tokens, thought), number)
        return Asked(number, body, prompt, max_tokens, count, min(thought, count), limits.tool)

    def _output_length(self, ignore_eos: bool, max_tokens: int, before_eos: int, number: int) -> int:
        """``max_tokens``, or ``min(before_eos + natural, max_tokens)`` when EOS is simulated
        (module docstring; ``before_eos``: the tokens no EOS can end, ``min_tokens`` and the
        reasoning)."""
        if self.eos_mean_tokens is None or ignore_eos:
            return max_tokens
        rng = random.Random(stable_hash("eos", self.seed, number))
        p = 1.0 / self.eos_mean_tokens
        natural = 1 if p >= 1 else 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))
        return min(before_eos + natural, max_tokens)

    def _prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str) and prompt:
            return self._encode(prompt, "prompt", self.profile.max_model_len)
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise BadRequest("prompt: batched prompts are not supported; send one prompt per request", "prompt")
        check_token_ids(prompt, self.vocab_size)
        return prompt

    def _chat_ids(self, messages: list[tuple[str, str, str]]) -> list[int]:
        """The template's ids of ``messages`` (:func:`~.request_prompt.prompt_messages`); once
        they pass the context, the ids so far (``_encode``)."""
        context = self.profile.max_model_len
        ids: list[int] = []
        for role, text, field in messages:
            content = self._encode(text, field, context - len(ids))
            ids += self._header(self._checked_text(role, field.removesuffix(".content") + ".role")) + content
            ids += self._header("")
            if len(ids) > context:
                return ids
        return ids + self._header("assistant")

    def _encode(self, text: str, field: str, limit: int) -> list[int]:
        """``text``'s ids; past ``limit`` of them, those of a head of it holding more
        (:func:`~pytest_llmreplay.workloads.tokenizer.encode_within`: a prompt past the context is refused by
        its length, and a huge one is not tokenized whole)."""
        return encode_within(self.prompts.tokenizer, self._checked_text(text, field), limit)

    @staticmethod
    def _checked_text(text: str, field: str) -> str:
        """``text``, unless it holds an unpaired surrogate (JSON's ``"\\ud800"``): not Unicode
        text, so no tokenizer takes it; a 400 naming ``field``, as vLLM answers."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(
                f"{field}: the text holds an unpaired surrogate (U+D800 to U+DFFF), which is not valid Unicode", field
            ) from None
        return text

    def _header(self, role: str) -> list[int]:
        """Template tokens: ``<|role|>\\n`` before a message, ``\\n`` after it (role "")."""
        ids = self._headers.get(role)
        if ids is None:
            ids = self._headers[role] = self.prompts.tokenizer.encode(f"<|{role}|>\n" if role else "\n")
        return ids

    def build_ahead(self, reply: Reply) -> None:
        """Have ``reply`` build its next event once the current iteration's writes are done (one
        loop callback for all streams): the writes at the iteration's end stay short."""
        if not self._to_build:
            asyncio.get_running_loop().call_soon(self._build_all)
        self._to_build.append(reply)

    def _build_all(self) -> None:
        replies, self._to_build = self._to_build, []
        for reply in replies:
            reply.build_ahead()
        self.emit_lags.trim()

    def text(self, ids: Sequence[int]) -> str:
        table = self.prompts.word_texts
        return "".join(table[t] for t in ids) if table is not None else self.prompts.tokenizer.decode(list(ids))

    def json_text(self, ids: Sequence[int]) -> bytes:
        """``json.dumps(self.text(ids))`` as UTF-8; one token's is cached (the streaming case)."""
        if len(ids) != 1:
            return json.dumps(self.text(ids)).encode()
        cached = self._json_texts.get(ids[0])
        if cached is None:
            cached = self._json_texts[ids[0]] = json.dumps(self.text(ids)).encode()
        return cached


def _set_once(stop: asyncio.Future) -> None:
    """End the serving once: a second signal finds it ended already."""
    if not stop.done():
        stop.set_result(None)


PARENT_POLL_S = 0.5  # how often a server started with a parent_pid checks that its parent lives


async def serve(
    server: SimServer, host: str = "127.0.0.1", port: int = 8000, ready: Any = None, parent_pid: int | None = None
) -> None:
    """Serve until SIGINT/SIGTERM, or until process ``parent_pid`` is no longer this one's parent
    (it died: a test run killed by SIGTERM or SIGKILL runs no teardown, and the server must not
    outlive it); ``ready(url)`` is called once listening (port 0: any free)."""
    runner = web.AppRunner(server.app(), **server.runner_options, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]  # the site's socket: (host, port)
    if ready is not None:
        ready(f"http://{host}:{bound}")
    stop = asyncio.get_running_loop().create_future()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, _set_once, stop)
    if parent_pid is not None:
        asyncio.ensure_future(_stop_when_orphaned(parent_pid, stop))
    try:
        await stop
    finally:
        await runner.cleanup()


async def _stop_when_orphaned(parent_pid: int, stop: asyncio.Future) -> None:
    while os.getppid() == parent_pid:
        await asyncio.sleep(PARENT_POLL_S)
    if not stop.done():
        stop.set_result(None)
