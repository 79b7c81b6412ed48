"""The simulated engine as an in-process :class:`~pytest_llmreplay.replayer.endpoint_types.Endpoint`.

Requests go straight into a :class:`~.cluster.Cluster` of engines (one by default) running on the
replay's clock: with the
:class:`~pytest_llmreplay.replayer.clock.VirtualClock` there are no sockets and no waiting, an hour of
trace replays in seconds, and the same inputs and seed give the same numbers.

A request's prompt is a :class:`~pytest_llmreplay.workloads.prompts.KeyedPrompt` (the replay's preferred
format: hash-id and synthetic prompts named by keys, no tokens made), token ids (``prompt`` as a
list, refused as the server refuses them: an id past the vocabulary, an empty list), else its
text (``prompt``, or the texts of a chat, Responses or Messages request's messages joined:
:mod:`.request_prompt`) encoded with the factory's tokenizer. ``extra_body`` fields are merged
under every request's, as the HTTP client merges them, and the body's fields are checked as the
HTTP server checks them (:mod:`.request_fields`: a body the server refuses fails here with
``http: 400 ...`` too). It generates exactly ``max_tokens`` tokens (``ignore_eos`` semantics; fitted to the profile's
``max_model_len`` as the server fits it: default 16 for completions, the context left for chat,
cut to the context left), seeded word
tokens that it returns as ``token_ids`` and text, so agent histories grow exactly as the
engine's cache saw them; a keyed prompt's output is keyed too and returns no
tokens or text (no later turn extends it).
Usage carries ``prompt_tokens``, ``cached_tokens`` (the prefix hit at admission) and
``completion_tokens``; ``queue_s`` is admission time - arrival time (in the first engine). A
request that reasons (:mod:`.reasoning`: the request's ``sim_reasoning_tokens``, its turn's
planned reasoning, else the profile's ``reasoning``) has its first tokens reported as reasoning
and their count as ``reasoning_tokens``, as the HTTP server's chat stream reports them; one that
asks for a tool call (its turn's, :class:`~pytest_llmreplay.replayer.endpoint_types.EndpointRequest`,
or a chat body's ``tool_choice``) answers with one call, ``call_<n>``, whose arguments are its
answer's text. A
prompt that leaves no room in ``max_model_len`` fails at once with ``http: 400 ...``, as vLLM
refuses it; a text prompt is tokenized only until it is past ``max_model_len``, so a huge one
costs the memory of one piece of it, not of its whole tokenization. A
request cancelled by the replay (duration limit) is aborted in its engine, releasing its blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import LLMReplayError
from ..replayer.clock import Clock
from ..replayer.endpoint_types import SIM_REASONING_FIELD, EndpointRequest
from ..replayer.response import Response
from ..workloads.prompts import TOOL_NAME, KeyedPrompt, PromptFactory, stable_hash
from ..workloads.tokenizer import encode_within
from .cluster import Cluster, ClusterConfig
from .profile import Profile
from .reasoning import reasoning_tokens
from .request_fields import BadRequest, check_fields, check_token_ids, output_limits, vocabulary_size
from .request_prompt import prompt_messages


class SimEndpoint:
    """The simulator of ``profile``, in process. ``preferred_prompt_format`` is ``keyed``: the
    replay then sends keyed prompts or token ids, so nothing is decoded or re-encoded. ``api``:
    the API whose request shape the replay sends; ``completions`` (the default) is the one that
    takes keyed prompts, the others carry text that is encoded here, as their HTTP server does
    (so that one workload replayed in each API's shape can be compared)."""

    preferred_prompt_format = "keyed"
    reads_tool_call_flag = True  # answers a turn that asks for a tool call on any API, no tools in its body
    stops_at_max_tokens = True  # no end of sequence: an output without max_tokens runs to the context's end

    def __init__(
        self,
        profile: Profile,
        prompts: PromptFactory,
        seed: int = 0,
        cluster: ClusterConfig = ClusterConfig(),
        extra_body: Mapping[str, Any] | None = None,
        api: str = "completions",
    ) -> None:
        cluster.validate()
        self.api = api
        self.profile = profile
        self.extra_body = dict(extra_body or {})
        self.prompts = prompts
        self.vocab_size = vocabulary_size(profile, prompts.tokenizer)
        self.seed = seed
        self.cluster_config = cluster
        self.cluster: Cluster | None = None
        self._clock: Clock | None = None
        self._sent = 0

    @property
    def name(self) -> str:
        c = self.cluster_config
        if c.prefill_engines:
            return f"sim:{self.profile.name} ({c.prefill_engines} prefill + {c.engines} decode, {c.router})"
        return f"sim:{self.profile.name}" + (f" (x{c.engines}, {c.router})" if c.engines > 1 else "")

    @property
    def gpus(self) -> int:
        """GPUs of all engines (the profile's per engine)."""
        return self.profile.gpus * (self.cluster_config.engines + self.cluster_config.prefill_engines)

    async def open(self, clock: Clock, concurrency: int | None) -> None:
        self._clock = clock
        self.cluster = Cluster(self.profile, clock, self.cluster_config, seed=self.seed)
        self.cluster.start()

    async def close(self) -> None:
        if self.cluster is not None:
            await self.cluster.stop()

    async def idle_warning(self) -> str | None:
        return None

    def prompt_ids(self, body: dict[str, Any], api: str = "completions") -> Sequence[int] | KeyedPrompt:
        """The prompt of ``body``, a request of ``api`` (module docstring); a text past the
        context is tokenized only until it is
        (:func:`~pytest_llmreplay.workloads.tokenizer.encode_within`)."""
        if api != "completions":
            text = "".join(text for _, text, _ in prompt_messages(body, api))
            return encode_within(self.prompts.tokenizer, text, self.profile.max_model_len)
        prompt = body.get("prompt")
        if isinstance(prompt, KeyedPrompt):
            return prompt
        if isinstance(prompt, list):
            check_token_ids(prompt, self.vocab_size)
            return prompt
        if isinstance(prompt, str):
            return encode_within(self.prompts.tokenizer, prompt, self.profile.max_model_len)
        raise LLMReplayError("simulator: a completions request needs 'prompt' (token ids or text)")

    async def send(self, request: EndpointRequest, response: Response) -> None:
        cluster, clock = self.cluster, self._clock
        assert cluster is not None and clock is not None  # open() sets both
        body = {**self.extra_body, **request.body} if self.extra_body else request.body
        if request.reasoning_tokens is not None:  # the turn's own, sent as the HTTP client sends it to the server
            body = {**body, SIM_REASONING_FIELD: request.reasoning_tokens}
        response.sent_s = clock.now()
        try:
            limits = check_fields(body, request.api)
            prompt = self.prompt_ids(body, request.api)
            count, _ = output_limits(limits, len(prompt), self.profile.max_model_len)
        except BadRequest as exc:
            response.end_s = response.sent_s
            response.fail("http", f"{exc.status} {exc}")
            return
        output: Sequence[int] | KeyedPrompt  # keyed as the prompt is
        if isinstance(prompt, KeyedPrompt):
            output = KeyedPrompt(((("sim-output", self.seed, self._sent), count),), count)
        else:
            output = self.prompts.stream(stable_hash("sim-output", self.seed, self._sent), 0, count)
        thought = min(reasoning_tokens(limits.reasoning, self.profile, self.seed, self._sent), count)
        tool = limits.tool or (TOOL_NAME if request.tool_call else None)
        number = self._sent
        self._sent += 1
        submitted = cluster.submit(prompt, output, reasoning_len=thought)
        response.chunk_times, response.chunk_tokens = submitted.times, submitted.tokens
        try:
            await submitted.done
        except asyncio.CancelledError:
            cluster.abort(submitted)
            raise
        finally:
            response.end_s = clock.now()
            response.prompt_tokens = submitted.prompt_len
            response.cached_tokens = submitted.cached
            response.completion_tokens = submitted.generated
            if thought:
                response.reasoning_tokens = min(thought, submitted.generated)
            response.split_reasoning(thought)
            if tool is not None and submitted.generated > thought:
                arguments = (
                    ""
                    if isinstance(output, KeyedPrompt)
                    else self.prompts.text(output[thought : submitted.generated])[0]
                )
                response.calls = [{"id": f"call_{number}", "name": tool, "arguments": arguments}]
            if not isinstance(output, KeyedPrompt):
                response.token_ids = list(output[: submitted.generated])
                response.reasoning_parts = [self.prompts.text(response.token_ids[:thought])[0]] if thought else []
                answer = response.token_ids[thought:]
                response.text_parts = [self.prompts.text(answer)[0]] if answer else []
            response.queue_s = submitted.queue_s
