"""The OpenAI Chat Completions and Completions APIs (``/v1/chat/completions``, ``/v1/completions``)
as the client reads them into a :class:`~.response.Response`.

A stream is ``data:`` events of :func:`~.sse.read_chunk`'s chunks, ended by ``data: [DONE]``; the
usage comes in a last chunk with no choices when the request asked for it
(``stream_options.include_usage``). A whole reply is one JSON object with ``choices[0]`` and
``usage``. The usage: ``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens`` and ``completion_tokens_details.reasoning_tokens``.
llama.cpp's server adds ``timings`` (:meth:`~.response.Response.take_timings`): its cached tokens
where the usage has none, and with ``timings_per_token`` each chunk's token count.
"""

from __future__ import annotations

from typing import Any

from .response import Response
from .sse import DONE, read_chunk, tool_call_pieces


class ChatParser:
    """Chat and completions replies (one parser for both: a chunk says which it is)."""

    def event(self, data: str, now: float, response: Response) -> bool:
        """Add one event's data to ``response``; True at ``[DONE]``."""
        if data.strip() == DONE:
            return True
        chunk = read_chunk(data)
        if chunk.usage is not None:
            response.take_usage(chunk.usage)
        if chunk.timings is not None:
            counted = response.take_timings(chunk.timings, chunk.tokens)
            if counted is not None:  # tokens the server says it generated, text or not
                chunk.tokens, chunk.blank = counted, False
        if chunk.finish_reason is not None:
            response.finish_reason = chunk.finish_reason
        if chunk.token_ids is not None:
            response.token_ids = (response.token_ids or []) + chunk.token_ids
        if chunk.thought:  # no token of its own: the chunk's are counted as the answer's
            response.reasoning_delta(now, 0, chunk.thought)
        if chunk.reasoning:
            response.reasoning_delta(now, chunk.tokens, chunk.text, chunk.blank)
        elif chunk.tool_calls:
            response.tool_call_delta(now, chunk.tokens, chunk.tool_calls, chunk.text)
        else:
            response.answer_delta(now, chunk.tokens, chunk.text, chunk.blank)
        return False

    def whole(self, obj: dict[str, Any], now: float, response: Response) -> None:
        """A whole reply: ``choices[0]``'s message (``reasoning_content`` or ``reasoning``, then
        ``content`` and ``tool_calls``) or text, its token ids and finish reason, and the usage."""
        choice = (obj.get("choices") or [{}])[0]
        message: dict[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
        text = message.get("content") if message else choice.get("text")
        thought = "".join(p for p in (message.get("reasoning_content"), message.get("reasoning")) if isinstance(p, str))
        if isinstance(choice.get("token_ids"), list):
            response.token_ids = [int(t) for t in choice["token_ids"]]
        response.finish_reason = choice.get("finish_reason")
        if isinstance(obj.get("usage"), dict):
            response.take_usage(obj["usage"])
        if isinstance(obj.get("timings"), dict):
            response.take_timings(obj["timings"], 0)  # cache_n only: the one chunk is counted by usage
        answer = text if isinstance(text, str) else ""
        response.whole(now, thought, answer, tool_call_pieces(message.get("tool_calls")))
