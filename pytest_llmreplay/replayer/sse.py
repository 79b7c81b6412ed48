"""The wire format of OpenAI-compatible streaming: server-sent events and the chunks they carry.

Pure functions and a small incremental decoder, no I/O, so every quirk is unit-testable:

- :class:`SSEDecoder` splits a byte stream into event data strings whatever the read boundaries
  (``\\n``, ``\\r\\n`` or ``\\r`` line ends, several ``data:`` lines joined by ``\\n``, comments and
  other fields ignored), as the WHATWG EventSource rules say;
- :func:`read_chunk` turns one ``data:`` payload of a completions or chat stream into a
  :class:`Chunk`: how many tokens it carries, their text and ids, whether they are reasoning (a
  chat delta's ``reasoning_content`` or ``reasoning``, as vLLM and SGLang stream them with a
  reasoning parser on) or a tool call, usage (and llama.cpp's ``timings``), finish reason, or the
  error object a server put in the stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..wording import clipped

DONE = "[DONE]"
_loads = json.JSONDecoder().decode


class SSEDecoder:
    """Incremental decoder: ``feed(bytes)`` returns the data of every event completed so far."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, raw: bytes) -> list[str]:
        buffer = self._buffer + raw
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):  # may be the first half of \r\n: wait for the next read
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buffer.split(b"\n")
        self._buffer = lines.pop() + held  # the incomplete last line (and a held \r)
        events: list[str] = []
        for line in lines:
            self._take(line, events)
        return events

    def close(self) -> list[str]:
        """The data of an event the stream ended in without its closing blank line."""
        events: list[str] = []
        tail = self._buffer.rstrip(b"\r")
        self._buffer = b""
        if tail:
            self._take(tail, events)
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events

    def _take(self, line: bytes, events: list[str]) -> None:
        if not line:
            if self._data:
                events.append("\n".join(self._data))
                self._data = []
            return
        if line.startswith(b"data:"):
            value = line[6:] if line.startswith(b"data: ") else line[5:]
            self._data.append(value.decode("utf-8", errors="replace"))
        elif line == b"data":  # a field name alone has an empty value
            self._data.append("")


class StreamError(Exception):
    """The stream broke the protocol or carried an error; ``kind`` is ``protocol`` or ``server``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class ToolCallPiece:
    """A piece of the tool call numbered ``index`` in its response: its first piece names it
    (``id``, ``name``), every piece may add to its ``arguments`` (any API's parser reports
    these: a chat delta's ``tool_calls`` entries, a Responses API's function-call arguments, a
    Messages API's ``tool_use`` block)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class CallNumbers:
    """Numbers the tool calls of one response in their order, by the key each API's events name
    a call's item with (a Responses ``output_index``, a Messages block ``index``)."""

    def __init__(self) -> None:
        self.numbers: dict[Any, int] = {}

    def piece(self, key: Any, call_id: Any = None, name: Any = None, arguments: str = "") -> ToolCallPiece:
        """The piece of the call ``key`` names (numbered on first sight): ``call_id`` and
        ``name`` when they are strings, and ``arguments``."""
        number = self.numbers.setdefault(key, len(self.numbers))
        return ToolCallPiece(
            number, call_id if type(call_id) is str else None, name if type(name) is str else None, arguments
        )


@dataclass(slots=True)
class Chunk:
    """What one event carried. ``tokens`` is 0 for role-only, usage-only or closing chunks;
    ``blank``: its one token is an empty text (see :func:`read_chunk`); ``reasoning``: its tokens
    are reasoning (a chat delta with reasoning text and neither content nor a tool call);
    ``tool_calls``: the pieces of tool calls it carries (``delta.tool_calls``). ``text`` is the
    reasoning's text in a reasoning chunk, else the content; ``thought``: the reasoning's text of
    a delta that also starts the answer (vLLM's ``deepseek_r1`` parser, when ``</think>`` falls
    inside one delta), kept apart from the answer's, which the next turn sends back. ``timings``: llama.cpp's per-request figures on its
    last chunk (``cache_n``: prompt tokens taken from the cache)."""

    tokens: int = 0
    blank: bool = False
    reasoning: bool = False
    tool_calls: tuple[ToolCallPiece, ...] = ()
    text: str = ""
    thought: str = ""
    token_ids: list[int] | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    timings: dict[str, Any] | None = None


def read_chunk(data: str) -> Chunk:
    """Interpret one event's data (not ``[DONE]``).

    A choice counts as tokens when it has text, token ids, logprobs or a tool call, or when it is
    an empty-text chunk with neither a role nor a finish reason (engines emit those for tokens that
    decode to nothing); such a chunk is marked ``blank``, and a blank chunk before any token is
    no token (:mod:`~pytest_llmreplay.replayer.endpoints` skips it: servers open streams with one, which
    made the first token early and one too many). Tokens per chunk: ``len(token_ids)``, else the
    number of logprobs entries, else 1 (a server that merges tokens without saying so is
    corrected by ``usage``).
    """
    obj = event_object(data)
    if "error" in obj or obj.get("object") == "error":
        message = error_message(obj)
        if message is not None:
            raise StreamError("server", f"error in stream: {message}")
    usage, timings = obj.get("usage"), obj.get("timings")
    chunk = Chunk(usage=usage if type(usage) is dict else None, timings=timings if type(timings) is dict else None)
    choices = obj.get("choices")
    if choices is None and chunk.usage is None:
        raise StreamError("protocol", f"malformed SSE event, no choices and no usage: {clipped(data)}")
    if not choices:
        return chunk
    choice = choices[0]
    if type(choice) is not dict:
        raise StreamError("protocol", f"malformed SSE event, choices[0] is not an object: {clipped(data)}")
    chunk.finish_reason = choice.get("finish_reason")
    delta = choice.get("delta")
    if type(delta) is dict:  # chat
        text = delta.get("content")
        text = text if type(text) is str else ""
        chunk.tool_calls = tool_call_pieces(delta.get("tool_calls"))
        if "reasoning_content" in delta or "reasoning" in delta:
            thought = "".join(p for p in (delta.get("reasoning_content"), delta.get("reasoning")) if type(p) is str)
            if text or chunk.tool_calls:  # the reasoning ends in the delta where the answer starts
                chunk.thought = thought
            else:
                chunk.reasoning, text = bool(thought) or "content" not in delta, thought
        has_text_field = (
            "content" in delta or "reasoning_content" in delta or "reasoning" in delta or bool(chunk.tool_calls)
        )
        role_only = not text and "role" in delta
    else:
        text = choice.get("text")
        text = text if type(text) is str else ""
        has_text_field, role_only = "text" in choice, False
    chunk.text = text
    ids = choice.get("token_ids")
    if type(ids) is list:
        chunk.token_ids = [int(t) for t in ids]
    logprobs = _logprob_count(choice["logprobs"]) if choice.get("logprobs") else 0
    if chunk.token_ids:
        chunk.tokens = len(chunk.token_ids)
    elif logprobs:
        chunk.tokens = logprobs
    elif text or chunk.tool_calls or (has_text_field and not role_only and chunk.finish_reason is None):
        chunk.tokens = 1
        chunk.blank = not text and not chunk.tool_calls
    return chunk


def tool_call_pieces(entries: Any) -> tuple[ToolCallPiece, ...]:
    """The :class:`ToolCallPiece` of each entry of an OpenAI chat ``tool_calls`` list (a stream's
    delta, numbered by ``index``, or a whole message's, numbered by position); entries that are
    not objects are left out."""
    if type(entries) is not list:
        return ()
    pieces = []
    for position, entry in enumerate(entries):
        if type(entry) is not dict:
            continue
        function: dict[str, Any] = entry["function"] if type(entry.get("function")) is dict else {}
        index, name, arguments = entry.get("index", position), function.get("name"), function.get("arguments")
        pieces.append(
            ToolCallPiece(
                index if type(index) is int else position,
                entry["id"] if type(entry.get("id")) is str else None,
                name if type(name) is str else None,
                arguments if type(arguments) is str else "",
            )
        )
    return tuple(pieces)


def event_object(data: str) -> dict[str, Any]:
    """One event's data as a JSON object, or :class:`StreamError` (``protocol``) saying it is not one."""
    try:
        obj = _loads(data)
    except (ValueError, RecursionError):  # RecursionError: nested past what json reads
        raise StreamError("protocol", f"malformed SSE event, not JSON: {clipped(data)}") from None
    if type(obj) is not dict:
        raise StreamError("protocol", f"malformed SSE event, not a JSON object: {clipped(data)}")
    return obj


def _logprob_count(logprobs: Any) -> int:
    if isinstance(logprobs, dict):
        entries = logprobs.get("content", logprobs.get("tokens"))
        if isinstance(entries, list):
            return len(entries)
    return 0


def error_message(obj: Any) -> str | None:
    """The message of an error object: OpenAI's and Anthropic's (``{"error": {"message": ...}}``,
    Anthropic's with ``"type": "error"`` beside it), vLLM's older ``{"object": "error",
    "message": ...}``, FastAPI's ``{"detail": "Not Found"}``; else None."""
    if not isinstance(obj, dict):
        return None
    error = obj.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(error, str) and error:
        return error
    if obj.get("object") == "error":
        return str(obj.get("message") or obj)
    if isinstance(obj.get("detail"), str) and obj["detail"]:  # FastAPI's own (vLLM, SGLang): an unknown route
        return obj["detail"]
    return None
