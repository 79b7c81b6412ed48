"""One simulated response as :class:`~pytest_llmreplay.sim.server.SimServer` writes it: whole
(one JSON body) or streamed (SSE events, one HTTP chunk per write, each token written when its
engine iteration ends), with the request's injected fault (:mod:`.faults`) and the server's
emit-lag record of each chunk's write time against its simulated time. What is written is the
API's :class:`~.framing.Framing` (:func:`framing`): when, and what a fault does, is the same for
every API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiohttp import web

from ..replayer.clock import WallClock
from .cluster import Cluster, Job
from .faults import Fault, FaultConfig
from .framing import ChatFraming, Framing
from .framing_events import MessagesFraming, ResponsesFraming
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


def framing(
    api: str,
    server: ReplyServer,
    job: Job,
    body: dict[str, Any],
    number: int,
    prompt_tokens: int,
    output: list[int],
    finish: str,
    reasoning: int,
    tool: str | None = None,
) -> Framing:
    """How a response of ``api`` is written: request ``number`` of the server, ``job`` in its
    engines, whose ``output`` ends for ``finish`` (``length``: its limit; ``stop``;
    ``tool_calls``) and begins with ``reasoning`` tokens of reasoning; on chat its answer calls
    ``tool`` (None: it answers with content)."""
    written = (server, job, number, prompt_tokens, output, finish, reasoning)
    if api == "responses":
        return ResponsesFraming(*written)
    if api == "messages":
        return MessagesFraming(*written)
    return ChatFraming(*written, body=body, chat=api == "chat", tool=tool)


class Reply:
    """One response of ``job`` (its tokens ``output``), whole or streamed as ``framing`` writes
    it, with its injected fault. ``sequence``: the events written so far."""

    def __init__(
        self,
        server: ReplyServer,
        request: web.Request,
        framing: Framing,
        job: Job,
        output: list[int],
        fault: Fault | None,
    ) -> None:
        self.server, self.request, self.framing, self.job = server, request, framing, job
        self.output, self.fault = output, fault
        # how an event goes on the wire: chunked once the response is prepared
        self.wire: Callable[[bytes], bytes] = bytes
        self.pending_fault = fault  # not struck yet
        self.chunks = self.sent = self.held = 0  # engine chunks consumed, tokens written, tokens held by a stall
        self.sequence = 0
        self.stalled = False
        # the events of the token ``output[sent]`` alone on the wire, built ahead of time, and the
        # events written once they are
        self.ahead: tuple[bytes, int] | None = None
        self.transport: Any = None  # the connection, once the response's headers are sent

    def frames(self, start: int, end: int) -> tuple[bytes, int]:
        """The events carrying ``output[start:end]`` as they go on the wire, and the events
        written once they are."""
        data, sequence = self.framing.frames(start, end, self.sequence)
        return self.wire(data), sequence

    def write(self, frames: tuple[bytes, int]) -> None:
        """Write ``frames`` (:meth:`frames`') on the connection."""
        data, self.sequence = frames
        self.transport.write(data)

    async def whole(self) -> web.StreamResponse:
        await self.job.done
        if self.fault is not None:
            await asyncio.sleep(self.server.faults.stall_s if self.fault.kind == "stall" else 0)
            if self.fault.kind == "disconnect":
                if self.request.transport is not None:  # None: the client is gone already
                    self.request.transport.close()
                return web.Response(status=499)
        return web.json_response(self.framing.whole())

    async def stream(self) -> web.StreamResponse:
        """Stream the job: the headers (and the framing's opening events) now, then every chunk
        written by :meth:`_flush` from inside the engine's iteration, then the closing events."""
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        job = self.job
        self.times, self.tokens = job.times, job.tokens
        self.ended = asyncio.get_running_loop().create_future()
        job.first.on_emit = self._flush  # now: a disaggregated job's decode half copies it when the prefill ends
        try:
            await reply.prepare(self.request)
            opening, self.sequence = self.framing.opening(self.sequence)
            await reply.write(opening)  # b"": the headers only
            if reply.headers.get("Transfer-Encoding") == "chunked":
                self.wire = chunk
            if self.request.transport is None:
                raise ConnectionResetError("the client closed the connection")
            self.transport = self.request.transport
            self._flush()  # what came out before the headers were sent
            if not await self.ended:
                return reply  # cut by a fault
            await reply.write(self.framing.closing(self.sequence))
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
            self.write(self.frames(sent, self.sent))
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
        self.write(ahead if ready == 1 and ahead is not None else self.frames(sent - ready, sent))
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
