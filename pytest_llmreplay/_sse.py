"""The wire format of OpenAI-compatible streaming: server-sent events and the chunks they carry.

Pure functions and a small incremental decoder, no I/O, so every quirk is unit-testable:

- :class:`SSEDecoder` splits a byte stream into event data strings whatever the read boundaries
  (``\\n``, ``\\r\\n`` or ``\\r`` line ends, several ``data:`` lines joined by ``\\n``, comments and
  other fields ignored), as the WHATWG EventSource rules say;
- :func:`read_chunk` turns one ``data:`` payload of a completions or chat stream into a
  :class:`Chunk`: how many tokens it carries, their text and ids, usage, finish reason, or the
  error object a server put in the stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"


class SSEDecoder:
    """Incremental decoder: ``feed(bytes)`` returns the data of every event completed so far."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, raw: bytes) -> list[str]:
        self._buffer += raw
        events: list[str] = []
        while True:
            end = _line_end(self._buffer)
            if end is None:
                return events
            line, rest = self._buffer[: end[0]], self._buffer[end[1]:]
            if end[1] == len(self._buffer) and self._buffer.endswith(b"\r"):
                return events  # a lone \r at the end may be the first half of \r\n
            self._buffer = rest
            self._take(line.decode("utf-8", errors="replace"), events)

    def close(self) -> list[str]:
        """The data of an event the stream ended in without its closing blank line."""
        events: list[str] = []
        if self._buffer:
            self._take(self._buffer.rstrip(b"\r").decode("utf-8", errors="replace"), events)
            self._buffer = b""
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events

    def _take(self, line: str, events: list[str]) -> None:
        if not line:
            if self._data:
                events.append("\n".join(self._data))
                self._data = []
            return
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    """(end of the first line, start of the next) or None when no line is complete."""
    n, r = buffer.find(b"\n"), buffer.find(b"\r")
    if r != -1 and (n == -1 or r < n):
        return (r, r + 2) if buffer[r + 1 : r + 2] == b"\n" else (r, r + 1)
    if n != -1:
        return n, n + 1
    return None


class StreamError(Exception):
    """The stream broke the protocol or carried an error; ``kind`` is ``protocol`` or ``server``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class Chunk:
    """What one event carried. ``tokens`` is 0 for role-only, usage-only or closing chunks."""

    tokens: int = 0
    text: str = ""
    token_ids: list[int] | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None


def read_chunk(data: str) -> Chunk:
    """Interpret one event's data (not ``[DONE]``).

    A choice counts as tokens when it has text, token ids or logprobs, or when it is an
    empty-text chunk with neither a role nor a finish reason (engines emit those for tokens that
    decode to nothing). Tokens per chunk: ``len(token_ids)``, else the number of logprobs
    entries, else 1 (a server that merges tokens without saying so is corrected by ``usage``).
    """
    try:
        obj = json.loads(data)
    except ValueError:
        raise StreamError("protocol", f"malformed SSE event, not JSON: {_clip(data)}") from None
    if not isinstance(obj, dict):
        raise StreamError("protocol", f"malformed SSE event, not a JSON object: {_clip(data)}")
    message = error_message(obj)
    if message is not None:
        raise StreamError("server", f"error in stream: {message}")
    chunk = Chunk(usage=obj.get("usage") if isinstance(obj.get("usage"), dict) else None)
    choices = obj.get("choices")
    if choices is None and chunk.usage is None:
        raise StreamError("protocol", f"malformed SSE event, no choices and no usage: {_clip(data)}")
    if not choices:
        return chunk
    choice = choices[0]
    if not isinstance(choice, dict):
        raise StreamError("protocol", f"malformed SSE event, choices[0] is not an object: {_clip(data)}")
    chunk.finish_reason = choice.get("finish_reason")
    delta = choice.get("delta")
    if isinstance(delta, dict):  # chat
        pieces = [delta.get(k) for k in ("reasoning_content", "reasoning", "content")]
        chunk.text = "".join(p for p in pieces if isinstance(p, str))
        has_text_field = any(k in delta for k in ("content", "reasoning_content", "reasoning")) or bool(delta.get("tool_calls"))
        role_only = "role" in delta and not chunk.text
    else:
        text = choice.get("text")
        chunk.text = text if isinstance(text, str) else ""
        has_text_field, role_only = "text" in choice, False
    ids = choice.get("token_ids")
    chunk.token_ids = [int(t) for t in ids] if isinstance(ids, list) else None
    logprobs = _logprob_count(choice.get("logprobs"))
    if chunk.token_ids:
        chunk.tokens = len(chunk.token_ids)
    elif logprobs:
        chunk.tokens = logprobs
    elif chunk.text or (has_text_field and not role_only and chunk.finish_reason is None):
        chunk.tokens = 1
    return chunk


def _logprob_count(logprobs: Any) -> int:
    if isinstance(logprobs, dict):
        entries = logprobs.get("content", logprobs.get("tokens"))
        if isinstance(entries, list):
            return len(entries)
    return 0


def error_message(obj: Any) -> str | None:
    """The message of an OpenAI-style error object (``{"error": {...}}`` or
    ``{"object": "error", "message": ...}``), else None."""
    if not isinstance(obj, dict):
        return None
    error = obj.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(error, str) and error:
        return error
    if obj.get("object") == "error":
        return str(obj.get("message") or obj)
    return None


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
