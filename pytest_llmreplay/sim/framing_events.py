"""The Responses and Messages APIs' simulated responses (:class:`~.framing.Framing`\\ s): typed
events, each an ``event:`` line (the anthropic SDK skips events without one) and a ``data:``
line, no ``[DONE]``, with every field the official SDKs' strict validation requires, in the
order their stream helpers check (``openai``'s ``client.responses.stream``, ``anthropic``'s
``client.messages.stream``).

Responses (``/v1/responses``), as vLLM 0.32 writes them: ``response.created`` and
``response.in_progress`` at once (before the prefill), then with the first token of each part
its ``response.output_item.added`` and ``response.content_part.added`` (a ``reasoning`` item with
a ``reasoning_text`` part for the reasoning, a ``message`` item with an ``output_text`` part for
the answer), ``response.reasoning_text.delta`` / ``response.output_text.delta`` per write (with
``logprobs: []``), a part's ``.done`` events when the next part starts or the stream ends, then
``response.completed`` with the whole response and its usage (``input_tokens``,
``input_tokens_details.cached_tokens``, ``cache_write_tokens`` 0, ``output_tokens``,
``output_tokens_details.reasoning_tokens``). A response cut by its token limit is ``status:
"incomplete"`` with ``incomplete_details.reason: "max_output_tokens"``, in a ``response.completed``
event as vLLM sends it (the SDK's stream helper takes that as the end). Every event has its
``sequence_number``.

Messages (``/v1/messages``), as vLLM 0.32 writes them: ``message_start`` with the first token
(its usage: the prompt net of the cache as ``input_tokens``, ``cache_read_input_tokens``,
``cache_creation_input_tokens`` 0), a ``thinking`` block (index 0, with the empty ``signature``
the SDK's strict validation asks for, and a ``signature_delta`` before its
``content_block_stop``) for the reasoning, a ``text`` block for the answer,
``content_block_delta``\\ s of ``thinking_delta`` / ``text_delta`` per write, then
``message_delta`` (stop reason ``max_tokens`` or ``end_turn``, the cumulative usage) and
``message_stop``; no ``ping``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from .framing import Written


def typed_event(kind: str, payload: dict[str, Any]) -> bytes:
    """``event: kind`` and the data ``{"type": kind, **payload}``."""
    data = json.dumps({"type": kind, **payload}, separators=(",", ":")).encode()
    return b"event: %b\ndata: %b\n\n" % (kind.encode(), data)


@dataclass
class ResponsesFraming(Written):
    """A Responses API response (module docstring)."""

    DELTA = (
        b'event: response.%b.delta\ndata: {"type":"response.%b.delta","sequence_number":%d,"item_id":"%b",'
        b'"output_index":%d,"content_index":0,"delta":%b%b}\n\n'
    )

    def __post_init__(self) -> None:
        number, reasoning = self.number, self.reasoning
        self.id, self.created = f"resp_{number}", int(time.time())
        self.reasoning_id, self.message_id = f"rs_{number}", f"msg_{number}"
        self.answer_index = 1 if reasoning else 0  # the message item's output_index

    def response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        incomplete = status == "incomplete"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "model": self.server.model,
            "status": status,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": None,
            "metadata": None,
            "temperature": None,
            "top_p": None,
            "usage": usage,
        }

    def usage(self) -> dict[str, Any]:
        generated = self.job.generated
        return {
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {"cached_tokens": self.job.cached or 0, "cache_write_tokens": 0},
            "output_tokens": generated,
            "output_tokens_details": {"reasoning_tokens": min(self.reasoning, generated)},
            "total_tokens": self.prompt_tokens + generated,
        }

    def items(self) -> list[dict[str, Any]]:
        """The output items, done: the reasoning's (if any), the answer's (if any)."""
        items: list[dict[str, Any]] = []
        if self.reasoning:
            items.append(self._reasoning_item("completed"))
        if len(self.output) > self.reasoning:
            items.append(self._message_item("completed"))
        return items

    def _reasoning_item(self, status: str) -> dict[str, Any]:
        item: dict[str, Any] = {"id": self.reasoning_id, "type": "reasoning", "summary": [], "status": status}
        if status == "completed":
            item["content"] = [self._part("reasoning_text", self.output[: self.reasoning])]
        return item

    def _message_item(self, status: str) -> dict[str, Any]:
        content = [self._part("output_text", self.output[self.reasoning :])] if status == "completed" else []
        return {"id": self.message_id, "type": "message", "role": "assistant", "status": status, "content": content}

    def _part(self, kind: str, ids: list[int]) -> dict[str, Any]:
        part: dict[str, Any] = {"type": kind, "text": self.server.text(ids)}
        if kind == "output_text":
            part["annotations"] = []
        return part

    def opening(self, sequence: int) -> tuple[bytes, int]:
        started = self.response("in_progress", [], None)
        events = [("response.created", {"response": started}), ("response.in_progress", {"response": started})]
        return self._numbered(events, sequence)

    def frames(self, start: int, end: int, sequence: int) -> tuple[bytes, int]:
        reasoning = self.reasoning
        events: list[tuple[str, dict[str, Any]]] = []
        if start == 0 and reasoning:
            events += self._added(0, self._reasoning_item("in_progress"), {"type": "reasoning_text", "text": ""})
        out, sequence = self._numbered(events, sequence)
        if start < reasoning:
            out += self._delta(b"reasoning_text", self.reasoning_id, 0, start, min(end, reasoning), sequence, b"")
            sequence += 1
        if start <= reasoning < end:  # the answer begins
            opened = self._done_events(0) if reasoning else []
            opened += self._added(self.answer_index, self._message_item("in_progress"), self._empty_text())
            more, sequence = self._numbered(opened, sequence)
            out += more
        if end > reasoning:
            start = max(start, reasoning)
            out += self._delta(
                b"output_text", self.message_id, self.answer_index, start, end, sequence, b',"logprobs":[]'
            )
            sequence += 1
        return out, sequence

    def closing(self, sequence: int) -> bytes:
        last = self.answer_index if len(self.output) > self.reasoning else 0
        status = "incomplete" if self.finish == "length" else "completed"
        done = self.response(status, self.items(), self.usage())
        events = self._done_events(last) + [("response.completed", {"response": done})]
        return self._numbered(events, sequence)[0]

    def whole(self) -> dict[str, Any]:
        return self.response("incomplete" if self.finish == "length" else "completed", self.items(), self.usage())

    @staticmethod
    def _empty_text() -> dict[str, Any]:
        return {"type": "output_text", "text": "", "annotations": []}

    def _added(self, index: int, item: dict[str, Any], part: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [
            ("response.output_item.added", {"output_index": index, "item": item}),
            ("response.content_part.added", {**where, "part": part}),
        ]

    def _done_events(self, index: int) -> list[tuple[str, dict[str, Any]]]:
        """The events that close item ``index`` (0: the reasoning's when there is one)."""
        is_reasoning = index == 0 and self.reasoning > 0
        item = self._reasoning_item("completed") if is_reasoning else self._message_item("completed")
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        text_done = {**where, "text": part["text"]} if is_reasoning else {**where, "text": part["text"], "logprobs": []}
        kind = "response.reasoning_text.done" if is_reasoning else "response.output_text.done"
        return [
            (kind, text_done),
            ("response.content_part.done", {**where, "part": part}),
            ("response.output_item.done", {"output_index": index, "item": item}),
        ]

    def _delta(self, kind: bytes, item: str, index: int, start: int, end: int, sequence: int, extra: bytes) -> bytes:
        text = self.server.json_text(self.output[start:end])
        return self.DELTA % (kind, kind, sequence, item.encode(), index, text, extra)

    @staticmethod
    def _numbered(events: list[tuple[str, dict[str, Any]]], sequence: int) -> tuple[bytes, int]:
        out = b"".join(
            typed_event(kind, {"sequence_number": sequence + i, **payload}) for i, (kind, payload) in enumerate(events)
        )
        return out, sequence + len(events)


@dataclass
class MessagesFraming(Written):
    """A Messages API response (module docstring)."""

    DELTA = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
        b'"delta":{"type":"%b_delta","%b":%b}}\n\n'
    )

    def __post_init__(self) -> None:
        number, reasoning = self.number, self.reasoning
        self.id = f"msg_{number}"
        self.signature = f"sim-{number}"
        self.answer_index = 1 if reasoning else 0  # the text block's index
        self.stop_reason = "max_tokens" if self.finish == "length" else "end_turn"

    def usage(self, output_tokens: int) -> dict[str, Any]:
        cached = self.job.cached or 0
        return {
            "input_tokens": self.prompt_tokens - cached,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        }

    def opening(self, sequence: int) -> tuple[bytes, int]:
        return b"", sequence  # vLLM sends message_start with the first token

    def start(self) -> bytes:
        """``message_start``, written with the first token (the cache hit is known by then)."""
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.server.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self.usage(0),
        }
        return typed_event("message_start", {"message": message})

    def frames(self, start: int, end: int, sequence: int) -> tuple[bytes, int]:
        reasoning, out = self.reasoning, b""
        if start == 0:
            out += self.start()
            if reasoning:
                block = {"type": "thinking", "thinking": "", "signature": ""}
                out += typed_event("content_block_start", {"index": 0, "content_block": block})
        if start < reasoning:
            out += self.DELTA % (
                0,
                b"thinking",
                b"thinking",
                self.server.json_text(self.output[start : min(end, reasoning)]),
            )
        if start <= reasoning < end:  # the answer begins
            if reasoning:
                out += self._close_thinking()
            block = {"type": "text", "text": ""}
            out += typed_event("content_block_start", {"index": self.answer_index, "content_block": block})
        if end > reasoning:
            text = self.server.json_text(self.output[max(start, reasoning) : end])
            out += self.DELTA % (self.answer_index, b"text", b"text", text)
        return out, sequence

    def _close_thinking(self) -> bytes:
        signature = {"index": 0, "delta": {"type": "signature_delta", "signature": self.signature}}
        return typed_event("content_block_delta", signature) + typed_event("content_block_stop", {"index": 0})

    def closing(self, sequence: int) -> bytes:
        answered = len(self.output) > self.reasoning
        stop = typed_event("content_block_stop", {"index": self.answer_index}) if answered else self._close_thinking()
        delta = {
            "delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
            "usage": self.usage(self.job.generated),
        }
        return stop + typed_event("message_delta", delta) + typed_event("message_stop", {})

    def whole(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if self.reasoning:
            thought = self.server.text(self.output[: self.reasoning])
            content.append({"type": "thinking", "thinking": thought, "signature": self.signature})
        if len(self.output) > self.reasoning:
            content.append({"type": "text", "text": self.server.text(self.output[self.reasoning :])})
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.server.model,
            "content": content,
            "stop_reason": self.stop_reason,
            "stop_sequence": None,
            "usage": self.usage(self.job.generated),
        }
