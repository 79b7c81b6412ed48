"""Anthropic's Messages API (``POST /v1/messages``) as the client reads it into a
:class:`~.response.Response`.

A stream is typed events (``event:`` + ``data:``, dispatched here on the data's ``type``):
``message_start`` (the message and a first usage), per content block ``content_block_start``,
``content_block_delta``\\ s and ``content_block_stop``, then ``message_delta`` (the stop reason
and the final usage) and ``message_stop``; no ``[DONE]``. A stream that ends cleanly after
``message_delta`` lost nothing (the SDK accepts it too). Tokens are the deltas: ``text_delta``
the answer, ``thinking_delta`` the reasoning, ``input_json_delta`` a tool call, one token each
(the API says no more); ``signature_delta`` and ``ping`` are no token, nor a ``tool_use``
block's start, which names its call. ``message_start`` comes
before the first token (vLLM sends it with the first token, Anthropic before it): the first token
is the first delta.

Usage (Anthropic's convention, not OpenAI's): ``input_tokens`` counts only the prompt tokens
neither read from the prefix cache nor written to it, so the whole prompt is ``input_tokens +
cache_read_input_tokens + cache_creation_input_tokens``; the cached part is
``cache_read_input_tokens``; ``output_tokens`` counts thinking too
(``output_tokens_details.thinking_tokens`` where a server sends it; vLLM does not, and the
thinking deltas are counted instead). ``message_delta``'s usage is cumulative and overrides
``message_start``'s field by field, as the SDK merges them: vLLM's ``message_start`` gives the
whole prompt as ``input_tokens`` and no cache fields, its ``message_delta`` the net figure and the
cache's; ``message_start``'s ``output_tokens`` is a placeholder (0, or Anthropic's 1) and is
not taken, so a stream cut before ``message_delta`` counts the tokens it carried. Stop reasons: ``max_tokens`` is ``length``, ``end_turn`` and ``stop_sequence`` are
``stop``, ``tool_use`` is ``tool_calls``. Errors: an ``error`` event
(``{"type": "error", "error": {"type", "message"}}``).

A whole reply is the message: its ``content`` blocks (``text``, ``thinking``, ``tool_use``), stop
reason and usage.
"""

from __future__ import annotations

import json
from typing import Any

from ..wording import clipped
from .response import Response
from .sse import CallNumbers, StreamError, error_message, event_object

STOP_REASONS = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls"}


def take_usage(usage: dict[str, Any], response: Response) -> None:
    """Read a Messages ``usage`` object into ``response`` (module docstring)."""
    net, read, created = (
        usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    details = usage.get("output_tokens_details")
    response.set_usage(
        _count(net) + _count(read) + _count(created) if _is_count(net) else None,
        usage.get("output_tokens"),
        read,
        details.get("thinking_tokens") if isinstance(details, dict) else None,
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> int:
    """``value`` when it is a token count, else 0 (a cache field left out)."""
    return value if _is_count(value) else 0


def take_stop_reason(reason: Any, response: Response) -> None:
    if isinstance(reason, str):
        response.finish_reason = STOP_REASONS.get(reason, reason)


class MessagesParser:
    """One Messages reply, streamed or whole; ``usage`` is the merged usage so far, ``calls`` the
    number of the tool call (in the message's order) of each ``tool_use`` block's index."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] = {}
        self.calls = CallNumbers()
        self.silent: set[Any] = set()  # tool_use blocks no token of which came yet

    def event(self, data: str, now: float, response: Response) -> bool:
        """Add one event's data to ``response``; True once ``message_delta`` (or
        ``message_stop``) came."""
        obj = event_object(data)
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict):
                self._delta(obj.get("index"), delta, now, response)
            return False
        if kind == "content_block_start" and isinstance(obj.get("content_block"), dict):
            block = obj["content_block"]
            if block.get("type") == "tool_use":  # names the call; no token yet
                response.tool_call_delta(
                    now, 0, (self.calls.piece(obj.get("index"), block.get("id"), block.get("name")),)
                )
                self.silent.add(obj.get("index"))
            return False
        if kind == "content_block_stop" and obj.get("index") in self.silent:
            # a call without arguments: its only delta was the empty opening piece, yet it is tokens
            self.silent.discard(obj.get("index"))
            response.tool_call_delta(now, 1, (self.calls.piece(obj.get("index"), arguments=""),))
            return False
        if kind == "message_start":  # its output count is a placeholder (0 or 1): message_delta's is the count
            message = obj.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                self._merge(
                    {key: value for key, value in usage.items() if not key.startswith("output_tokens")}, response
                )
            return False
        if kind == "message_delta":
            delta = obj.get("delta")
            take_stop_reason(delta.get("stop_reason") if isinstance(delta, dict) else None, response)
            self._merge(obj.get("usage"), response)
            return True
        if kind == "message_stop":
            return True
        if kind == "error":
            raise StreamError("server", f"error in stream: {error_message(obj) or data}")
        if not isinstance(kind, str):
            raise StreamError("protocol", f"malformed Messages event, no type: {clipped(data)}")
        return False

    def _delta(self, index: Any, delta: dict[str, Any], now: float, response: Response) -> None:
        """The delta of a ``content_block_delta`` of block ``index``: a token of the answer, the
        reasoning or a tool call, or none (``signature_delta``, a kind not known here)."""
        kind = delta.get("type")
        field = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}.get(str(kind))
        if field is None:
            return
        text = delta.get(field)
        text = text if isinstance(text, str) else ""
        if kind == "text_delta":
            response.answer_delta(now, 1, text, blank=not text)
        elif kind == "thinking_delta":
            response.reasoning_delta(now, 1, text, blank=not text)
        else:  # Anthropic opens a tool_use block's input with an empty piece: no token
            if text:
                self.silent.discard(index)
            response.tool_call_delta(now, 1 if text else 0, (self.calls.piece(index, arguments=text),), text)

    def _merge(self, usage: Any, response: Response) -> None:
        if isinstance(usage, dict):
            self.usage.update(usage)
            take_usage(self.usage, response)

    def whole(self, obj: dict[str, Any], now: float, response: Response) -> None:
        """A whole reply: its content blocks' texts and tool calls, stop reason and usage."""
        self._merge(obj.get("usage"), response)
        take_stop_reason(obj.get("stop_reason"), response)
        thought: list[str] = []
        answer: list[str] = []
        numbers, calls = CallNumbers(), []
        for position, block in enumerate(obj.get("content") or ()):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_use":  # its input as the JSON a stream's input_json_deltas spell
                arguments = json.dumps(block.get("input", {}))
                calls.append(numbers.piece(position, block.get("id"), block.get("name"), arguments))
            elif kind == "text" and isinstance(block.get("text"), str):
                answer.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                thought.append(block["thinking"])
        response.whole(now, "".join(thought), "".join(answer), calls)
