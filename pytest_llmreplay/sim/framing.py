"""How one simulated response of each API is written: the bytes of a stream (the events around
and between its tokens) and the JSON of a whole reply. :class:`~.reply.Reply` decides when to
write (its timing, its faults); a :class:`Framing` decides what.

A framing writes a stream in three parts: :meth:`~Framing.opening` right after the headers (before
the prefill: chat's role event, the Responses API's ``response.created`` and
``response.in_progress``), :meth:`~Framing.frames` for each write of tokens (the events of
``output[start:end]``, with the events that open and close a content part where the tokens
cross one), :meth:`~Framing.closing` after the last token (usage and the end of the stream). Each
takes and returns the number of events written so far, which the Responses API numbers
(``sequence_number``): a frame built ahead of time and not written leaves it as it was.

Chat and completions are :class:`ChatFraming` (here); the Responses and Messages APIs are in
:mod:`.framing_events`; :func:`~.reply.framing` picks one.

A chat response that reasons (:mod:`.reasoning`) is written as vLLM writes one with a reasoning
parser: its first ``reasoning`` tokens as ``reasoning_content`` deltas (an event never holds
both kinds: a write across the boundary is two events), then ``content``; whole, as the
message's ``reasoning_content`` and ``content`` (null when no answer came); its usage has
``completion_tokens_details.reasoning_tokens``. A completions response is all text, as vLLM's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .cluster import Job


class FramingServer(Protocol):
    """What a framing uses of the server (named here, not imported: the server imports this)."""

    model: str

    def text(self, ids: Sequence[int]) -> str: ...

    def json_text(self, ids: Sequence[int]) -> bytes: ...


class Framing(Protocol):
    def opening(self, sequence: int) -> tuple[bytes, int]:
        """The events written right after the headers, and the events written so far then."""
        ...

    def frames(self, start: int, end: int, sequence: int) -> tuple[bytes, int]:
        """The events carrying ``output[start:end]`` (written after ``sequence`` events)."""
        ...

    def closing(self, sequence: int) -> bytes:
        """The events after the last token: the usage, the end of the stream."""
        ...

    def whole(self) -> dict[str, Any]:
        """The whole (not streamed) reply."""
        ...


def event(payload: dict[str, Any]) -> bytes:
    """An SSE event with ``data:`` only (OpenAI's chat and completions)."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


@dataclass
class Written:
    """What every framing writes from: request ``number`` of ``server``, ``job`` in its engines,
    whose ``output`` (after a prompt of ``prompt_tokens``) ends for ``finish`` (``length``: its
    limit; ``stop``; ``tool_calls``) and begins with ``reasoning`` tokens of reasoning."""

    server: FramingServer
    job: Job
    number: int
    prompt_tokens: int
    output: list[int]
    finish: str
    reasoning: int


@dataclass
class ChatFraming(Written):
    """A chat or completions response (``chat``; the request's ``body``): ``data:`` events of
    chunks, ``[DONE]`` at the end, the usage in a last chunk when the request asks
    (``stream_options.include_usage``); ``return_token_ids`` adds each chunk's ids. Token events
    are built from cached pieces: no JSON encoder per token.

    A chat response that calls a ``tool`` (the request's ``tool_choice``) answers with one call
    instead of content, as OpenAI streams one: the first answer delta opens it (``tool_calls[0]``
    with its ``id``, ``call_<n>``, ``type`` and the function's ``name``), every delta adds its
    tokens' text to the ``arguments`` (the generated words: not JSON), and the finish reason is
    ``tool_calls``; whole, as the message's ``tool_calls``."""

    body: dict[str, Any]
    chat: bool
    tool: str | None = None

    def __post_init__(self) -> None:
        chat, finish, number = self.chat, self.finish, self.number
        self.reasoning = self.reasoning if chat else 0  # leading output tokens written as reasoning
        tool = self.tool = self.tool if chat else None  # the function the answer calls
        self.call_id = f"call_{number}"
        self.envelope = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{number}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.server.model,
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
        self.return_ids = bool(self.body.get("return_token_ids"))

    def usage(self) -> dict[str, Any]:
        generated = self.job.generated
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": generated,
            "total_tokens": self.prompt_tokens + generated,
            "prompt_tokens_details": {"cached_tokens": self.job.cached or 0},
        }
        if self.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": min(self.reasoning, generated)}
        return usage

    def opening(self, sequence: int) -> tuple[bytes, int]:
        if not self.chat:
            return b"", sequence
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        return event({**self.envelope, "choices": [role]}), sequence + 1

    def frames(self, start: int, end: int, sequence: int) -> tuple[bytes, int]:
        """One event, or two where the tokens cross the end of the reasoning; the last token's
        carries the finish reason (class docstring: the kinds of event)."""
        split = min(max(self.reasoning, start), end)
        finish = self.finish if end >= len(self.output) else None
        written = b""
        if split > start:
            written = self.frame(self.output[start:split], finish if split == end else None, "reasoning")
            sequence += 1
        if split < end:
            kind = "content" if self.tool is None else "call_start" if split == self.reasoning else "call"
            written += self.frame(self.output[split:end], finish, kind)
            sequence += 1
        return written, sequence

    def frame(self, ids: Sequence[int], finish: str | None, kind: str) -> bytes:
        """One event of ``kind`` carrying ``ids``."""
        extra = b',"token_ids":%b' % json.dumps(list(ids)).encode() if self.return_ids else b""
        return b"%b%b%b%b}]}\n\n" % (self.heads[kind], self.server.json_text(ids), self.tails[kind, finish], extra)

    def closing(self, sequence: int) -> bytes:
        usage = b""
        if (self.body.get("stream_options") or {}).get("include_usage"):
            usage = event({**self.envelope, "choices": [], "usage": self.usage()})
        return usage + b"data: [DONE]\n\n"

    def whole(self) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": self.finish}
        if self.chat:
            choice["message"] = self.message()
        else:
            choice.update(text=self.server.text(self.output), logprobs=None)
        if self.body.get("return_token_ids"):
            choice["token_ids"] = self.output
        kind = "chat.completion" if self.chat else "text_completion"
        return {**self.envelope, "object": kind, "choices": [choice], "usage": self.usage()}

    def message(self) -> dict[str, Any]:
        """The whole chat response's message: its reasoning, then its content or tool call
        (class docstring)."""
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
