"""One simulated response as :class:`~pytest_llmreplay.sim.server.SimServer` writes it: whole
(one JSON body) or streamed (SSE ``data:`` events, one HTTP chunk per write, each token written
when its engine iteration ends), with the request's injected fault (:mod:`.faults`) and the
server's emit-lag record of each chunk's write time against its simulated time.

A chat response that reasons (:mod:`.reasoning`) is written as vLLM writes one with a reasoning
parser: its first ``reasoning`` tokens as ``reasoning_content`` deltas (an event never holds
both kinds: a write across the boundary is two events), then ``content``; whole, as the
message's ``reasoning_content`` and ``content`` (null when no answer came); its usage has
``completion_tokens_details.reasoning_tokens``. A chat response that calls a ``tool`` (the
request's ``tool_choice``) answers with one call instead of content, as OpenAI streams one: the
first answer delta opens it (``tool_calls[0]`` with its ``id``, ``call_<n>``, ``type`` and the
function's ``name``), every delta adds its tokens' text to the ``arguments`` (the generated
words: not JSON), and the finish reason is ``tool_calls``; whole, as the message's
``tool_calls``. A completions response is all text, as vLLM's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiohttp import web

from ..replayer.clock import WallClock
from .cluster import Cluster, Job
from .faults import Fault, FaultConfig
from .lag_window import LagWindow


class ReplyServer(Protocol):
    """What a :class:`Reply` uses of its :class:`~pytest_llmreplay.sim.server.SimServer` (named
    here, not imported: the server imports this module)."""

    model: str
    clock: WallClock
    faults: FaultConfig
    emit_lags: LagWindow

    @property
    def running(self) -> Cluster: ...

    def build_ahead(self, reply: Reply) -> None: ...

    def text(self, ids: Sequence[int]) -> str: ...

    def json_text(self, ids: Sequence[int]) -> bytes: ...


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


class Reply:
    """One response, whole or streamed, with its injected fault."""

    def __init__(
        self,
        server: ReplyServer,
        request: web.Request,
        body: dict[str, Any],
        chat: bool,
        number: int,
        prompt_tokens: int,
        output: list[int],
        finish: str,
        fault: Fault | None,
        reasoning: int = 0,
        tool: str | None = None,
    ) -> None:
        self.server, self.request, self.body, self.chat = server, request, body, chat
        self.reasoning = reasoning if chat else 0  # leading output tokens written as reasoning
        self.tool = tool if chat else None  # the function the answer calls
        self.call_id = f"call_{number}"
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{number}"
        self.prompt_tokens, self.output, self.finish, self.fault = prompt_tokens, output, finish, fault
        self.envelope = {
            "id": self.id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": server.model,
        }
        # an event is a kind's head, the tokens' text as JSON, then the kind's tail with the finish reason
        head = event({**self.envelope, "choices": []})[: -len(b"]}\n\n")] + b'{"index":0,'
        call = b'"delta":{"tool_calls":[{"index":0,%b"function":{%b"arguments":'
        self.heads = {
            "content": head + (b'"delta":{"content":' if chat else b'"text":'),
            "reasoning": head + b'"delta":{"reasoning_content":',
            "call_start": head
            + call
            % (b'"id":"%b","type":"function",' % self.call_id.encode(), b'"name":%b,' % json.dumps(tool).encode()),
            "call": head + call % (b"", b""),
        }
        closers = {
            "content": b"}" if chat else b',"logprobs":null',
            "reasoning": b"}",
            "call_start": b"}}]}",
            "call": b"}}]}",
        }
        self.tails = {
            (kind, reason): closer
            + (b',"finish_reason":null' if reason is None else b',"finish_reason":"%b"' % reason.encode())
            for kind, closer in closers.items()
            for reason in (None, finish)
        }
        self.return_ids = bool(body.get("return_token_ids"))
        # how an event goes on the wire: chunked once the response is prepared
        self.wire: Callable[[bytes], bytes] = bytes
        self.pending_fault = fault  # not struck yet
        self.chunks = self.sent = self.held = 0  # engine chunks consumed, tokens written, tokens held by a stall
        self.stalled = False
        self.ahead: bytes | None = None  # the event of the token ``output[sent]`` alone, built ahead of time
        self.transport: Any = None  # the connection, once the response's headers are sent

    def usage(self, job: Job) -> dict[str, Any]:
        generated = job.generated
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": generated,
            "total_tokens": self.prompt_tokens + generated,
            "prompt_tokens_details": {"cached_tokens": job.cached or 0},
        }
        if self.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": min(self.reasoning, generated)}
        return usage

    def frames(self, start: int, end: int) -> bytes:
        """The SSE events carrying tokens ``output[start:end]`` as they go on the wire: one, or
        two where they cross the end of the reasoning; the last token's carries the finish
        reason (module docstring: the kinds of event)."""
        split = min(max(self.reasoning, start), end)
        finish = self.finish if end >= len(self.output) else None
        written = b""
        if split > start:
            written = self.frame(self.output[start:split], finish if split == end else None, "reasoning")
        if split < end:
            kind = "content" if self.tool is None else "call_start" if split == self.reasoning else "call"
            written += self.frame(self.output[split:end], finish, kind)
        return written

    def frame(self, ids: Sequence[int], finish: str | None, kind: str) -> bytes:
        """One SSE event of ``kind`` carrying ``ids``, as it goes on the wire (built from cached
        pieces: no JSON encoder per token)."""
        extra = b',"token_ids":%b' % json.dumps(list(ids)).encode() if self.return_ids else b""
        return self.wire(
            b"%b%b%b%b}]}\n\n" % (self.heads[kind], self.server.json_text(ids), self.tails[kind, finish], extra)
        )

    async def whole(self, job: Job) -> web.StreamResponse:
        await job.done
        if self.fault is not None:
            await asyncio.sleep(self.server.faults.stall_s if self.fault.kind == "stall" else 0)
            if self.fault.kind == "disconnect":
                if self.request.transport is not None:  # None: the client is gone already
                    self.request.transport.close()
                return web.Response(status=499)
        choice: dict[str, Any] = {"index": 0, "finish_reason": self.finish}
        if self.chat:
            choice["message"] = self.message()
        else:
            choice.update(text=self.server.text(self.output), logprobs=None)
        if self.body.get("return_token_ids"):
            choice["token_ids"] = self.output
        kind = "chat.completion" if self.chat else "text_completion"
        return web.json_response({**self.envelope, "object": kind, "choices": [choice], "usage": self.usage(job)})

    def message(self) -> dict[str, Any]:
        """The whole chat response's message: its reasoning, then its content or tool call
        (module docstring)."""
        answer = self.output[self.reasoning :]
        message: dict[str, Any] = {"role": "assistant"}
        if self.reasoning:
            message["reasoning_content"] = self.server.text(self.output[: self.reasoning])
        if self.tool is None:
            message["content"] = self.server.text(answer) if answer or not self.reasoning else None
        elif answer:
            function = {"name": self.tool, "arguments": self.server.text(answer)}
            message.update(content=None, tool_calls=[{"id": self.call_id, "type": "function", "function": function}])
        return message

    async def stream(self, job: Job) -> web.StreamResponse:
        """Stream ``job``: the headers (and chat's role event) now, then every chunk written by
        :meth:`_flush` from inside the engine's iteration, then usage and ``[DONE]``."""
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        self.job, self.times, self.tokens = job, job.times, job.tokens
        self.ended = asyncio.get_running_loop().create_future()
        job.first.on_emit = self._flush  # now: a disaggregated job's decode half copies it when the prefill ends
        try:
            await reply.prepare(self.request)
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            await reply.write(
                event({**self.envelope, "choices": [role]}) if self.chat else b""
            )  # b"": the headers only
            if reply.headers.get("Transfer-Encoding") == "chunked":
                self.wire = chunk
            if self.request.transport is None:
                raise ConnectionResetError("the client closed the connection")
            self.transport = self.request.transport
            self._flush()  # what came out before the headers were sent
            if not await self.ended:
                return reply  # cut by a fault
            if (self.body.get("stream_options") or {}).get("include_usage"):
                await reply.write(event({**self.envelope, "choices": [], "usage": self.usage(job)}))
            await reply.write(b"data: [DONE]\n\n")
            await reply.write_eof()
        except ConnectionError:  # the client went away: not the server's error, no traceback
            self.server.running.abort(job)
        return reply

    def _flush(self) -> None:
        """Write what the engine produced since the last call as one event (two across the end
        of the reasoning: :meth:`frames`): one per iteration while the server keeps up (under
        load vLLM also merges what piled up).

        Synchronous, called by the engine right after each of this request's chunks: 1,000
        streams cost 1,000 socket writes per iteration and no task switch. A fault strikes right
        after its drawn token: a disconnect closes the connection, a stall holds the stream for
        ``stall_s`` and what piled up meanwhile goes as one event. ``ended`` resolves True after
        the last token, False on a disconnect, with ConnectionResetError if the client left."""
        start, times = self.chunks, self.times
        end = len(times)
        transport = self.transport
        if (end == start and not self.held) or self.stalled or transport is None or self.ended.done():
            return  # nothing new, held by a stall, headers not sent yet, or over
        if transport.is_closing():
            self.ended.set_exception(ConnectionResetError("the client closed the connection"))
            return
        ready = self.held + (self.tokens[start] if end == start + 1 else sum(self.tokens[start:end]))
        self.chunks, self.held, sent, fault = end, 0, self.sent, self.pending_fault
        if fault is not None and sent + ready >= fault.after_tokens:
            head = fault.after_tokens - sent
            self.sent, self.pending_fault, self.ahead = sent + head, None, None
            transport.write(self.frames(sent, self.sent))
            if fault.kind == "disconnect":
                self.server.running.abort(self.job)
                transport.close()
                self.ended.set_result(False)
                return
            self.stalled, self.held = True, ready - head
            asyncio.get_running_loop().call_later(self.server.faults.stall_s, self._resume)
            return
        self.sent = sent = sent + ready
        last = sent >= len(self.output)
        ahead, self.ahead = self.ahead, None
        transport.write(ahead if ready == 1 and ahead is not None else self.frames(sent - ready, sent))
        if not last:
            self.server.build_ahead(self)
        if self.fault is None:  # a faulty stream's lag is its fault, not the server's error
            now = self.server.clock.now()
            if end == start + 1:
                self.server.emit_lags.add(now - times[start])
            else:
                self.server.emit_lags.extend([now - t for t in times[start:end]])
        if last:
            self.server.emit_lags.trim()  # a stream's end builds nothing ahead (_build_all trims the others')
            self.ended.set_result(True)

    def build_ahead(self) -> None:
        """Build the event of the next token alone (the usual next chunk), while the engine waits
        for the iteration's end: :meth:`_flush` then only writes it."""
        sent = self.sent
        if sent < len(self.output) and not self.ended.done():
            self.ahead = self.frames(sent, sent + 1)

    def _resume(self) -> None:
        """A stall is over: write what piled up, or end a stream whose last token went before it."""
        self.stalled = False
        if self.sent >= len(self.output) and not self.ended.done():
            self.ended.set_result(True)
        self._flush()


def chunk(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk (the response's ``Transfer-Encoding: chunked``)."""
    return b"%x\r\n%b\r\n" % (len(data), data)
