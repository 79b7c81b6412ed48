"""OpenAI's Responses API (``POST /v1/responses``) as the client reads it into a
:class:`~.response.Response`.

A stream is typed events (``event:`` + ``data:``, dispatched here on the data's ``type``), with no
``[DONE]``: it ends with ``response.completed``, ``response.incomplete`` or ``response.failed``,
whose ``response.usage`` is the request's usage. Tokens: ``response.output_text.delta`` (and
``response.refusal.delta``) are the answer, ``response.reasoning_text.delta`` (vLLM, SGLang) and
``response.reasoning_summary_text.delta`` (OpenAI's own models) the reasoning,
``response.function_call_arguments.delta`` a piece of a tool call (its
``response.output_item.added`` names it, no token); one token per delta unless its
``logprobs`` list says how many (vLLM merges tokens into one delta when it lags, and always sends
``logprobs: []``: the usage corrects the count). Every other event (created, in_progress, items
and parts added or done) carries no token: ``response.created`` comes before the prefill, so the
first token is the first delta, not the first event.

Usage (OpenAI's convention): ``input_tokens`` is the whole prompt,
``input_tokens_details.cached_tokens`` the part found in the prefix cache, ``output_tokens``
everything generated, ``output_tokens_details.reasoning_tokens`` its reasoning. A run that hit
``max_output_tokens`` is ``status: "incomplete"`` with ``incomplete_details.reason``
(vLLM sends it in a ``response.completed`` event, the spec in ``response.incomplete``): the finish
reason is ``length`` then, else ``stop``. Errors: an ``error`` event, or ``response.failed`` with
``response.error``.

A whole reply is the response object: its ``output`` items (``message`` with ``output_text``
parts, ``reasoning`` with ``reasoning_text`` parts or a ``summary``, ``function_call``) and usage.
"""

from __future__ import annotations

from typing import Any

from ..wording import clipped
from .response import Response
from .sse import CallNumbers, StreamError, error_message, event_object

ANSWER_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
REASONING_DELTAS = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
TOOL_CALL_DELTA = "response.function_call_arguments.delta"
ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def take_response(obj: Any, response: Response) -> None:
    """Read a response object's usage and status into ``response``; :class:`StreamError`
    (``server``) when it failed."""
    if not isinstance(obj, dict):
        raise StreamError("protocol", f"expected a response object, got {type(obj).__name__}")
    usage = obj.get("usage")
    if isinstance(usage, dict):
        response.take_usage(usage, "input", "output")
    status = obj.get("status")
    if status == "failed":
        error = obj.get("error")
        detail = error.get("message") if isinstance(error, dict) else None
        raise StreamError("server", f"response failed: {detail or error or 'no error given'}")
    details = obj.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if status == "incomplete" or reason:
        response.finish_reason = "length" if reason in ("max_output_tokens", None) else str(reason)
    elif status == "completed":
        response.finish_reason = "stop"


class ResponsesParser:
    """One Responses reply, streamed or whole; ``calls``: the number of the tool call (in the
    response's order) of each ``function_call`` item's ``output_index``."""

    def __init__(self) -> None:
        self.calls = CallNumbers()

    def event(self, data: str, now: float, response: Response) -> bool:
        """Add one event's data to ``response``; True at the terminal event."""
        obj = event_object(data)
        kind = obj.get("type")
        if kind in ANSWER_DELTAS or kind in REASONING_DELTAS or kind == TOOL_CALL_DELTA:
            text = obj.get("delta")
            text = text if isinstance(text, str) else ""
            logprobs = obj.get("logprobs")
            tokens = len(logprobs) if isinstance(logprobs, list) and logprobs else 1
            if kind == TOOL_CALL_DELTA:
                piece = self.calls.piece(obj.get("output_index"), arguments=text)
                response.tool_call_delta(now, tokens, (piece,), text)
            elif kind in REASONING_DELTAS:
                response.reasoning_delta(now, tokens, text, blank=not text)
            else:
                response.answer_delta(now, tokens, text, blank=not text)
            return False
        if kind == "response.output_item.added" and isinstance(obj.get("item"), dict):
            item = obj["item"]
            if item.get("type") == "function_call":  # names the call; no token yet
                piece = self.calls.piece(obj.get("output_index"), item.get("call_id"), item.get("name"))
                response.tool_call_delta(now, 0, (piece,))
            return False
        if kind in ENDS:
            take_response(obj.get("response"), response)
            return True
        if kind == "error":
            message = obj.get("message") or error_message(obj) or data
            raise StreamError("server", f"error in stream: {message}")
        if not isinstance(kind, str):
            raise StreamError("protocol", f"malformed Responses event, no type: {clipped(data)}")
        return False

    def whole(self, obj: dict[str, Any], now: float, response: Response) -> None:
        """A whole reply: its output items' texts and tool calls, its usage and status."""
        take_response(obj, response)
        thought: list[str] = []
        answer: list[str] = []
        numbers, calls = CallNumbers(), []
        for position, item in enumerate(obj.get("output") or ()):
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "function_call":
                arguments = item.get("arguments")
                arguments = arguments if isinstance(arguments, str) else ""
                calls.append(numbers.piece(position, item.get("call_id"), item.get("name"), arguments))
            elif kind == "message":
                answer += _texts(item.get("content"))
            elif kind == "reasoning":
                thought += _texts(item.get("content")) + _texts(item.get("summary"))
        response.whole(now, "".join(thought), "".join(answer), calls)


def _texts(parts: Any) -> list[str]:
    """The texts of a list of content parts (``output_text``, ``refusal``, ``reasoning_text``,
    ``summary_text``)."""
    if not isinstance(parts, list):
        return []
    texts = (p.get("text", p.get("refusal")) for p in parts if isinstance(p, dict))
    return [t for t in texts if isinstance(t, str)]
