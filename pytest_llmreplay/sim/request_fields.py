"""The request fields the simulator honours, checked alike over HTTP and in process.

:func:`check_fields` reads a completions or chat request body (prompt aside) and returns
:class:`Limits`, or raises :class:`BadRequest` with the HTTP status, the OpenAI error type and
the field at fault, so a body the server refuses is refused by the offline simulator too:

- ``n``: 1 or absent (one choice per request);
- ``stream``, ``ignore_eos``, ``return_token_ids``, ``stream_options.include_usage``: true, false
  or absent (a string such as ``"false"`` is refused, not taken as true);
- ``stream_options``: an object or absent;
- the output limit: ``max_tokens``, or for chat ``max_completion_tokens`` when given: an integer
  >= 1, default :data:`DEFAULT_MAX_TOKENS`;
- ``min_tokens``: an integer from 0 to the limit, default 0.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

DEFAULT_MAX_TOKENS = 16
FLAGS = ("stream", "ignore_eos", "return_token_ids")


class BadRequest(Exception):
    """A request the server refuses: ``status``, OpenAI error ``type`` and the ``param`` at fault."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind

    def response(self) -> Any:
        """The OpenAI error object as an aiohttp response."""
        from aiohttp import web

        error = {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}
        return web.json_response({"error": error}, status=self.status)


class Limits(NamedTuple):
    max_tokens: int
    min_tokens: int
    limit_name: str  # the field that set max_tokens: max_tokens or max_completion_tokens


def check_fields(body: Mapping[str, Any], chat: bool) -> Limits:
    """The output limits of ``body``, or :class:`BadRequest` naming the first bad field.
    (Absent fields cost one lookup each: the offline simulator checks every request.)"""
    get = body.get
    if get("n") is not None and _integer(body, "n", 1, 1) != 1:
        raise BadRequest(f"n: only 1 is supported, got {get('n')!r}", "n")
    for name in FLAGS:
        if get(name) is not None:
            _check_flag(body, name)
    options = get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise BadRequest(f"stream_options: expected an object, got {options!r}", "stream_options")
        _check_flag(options, "include_usage", "stream_options.include_usage")
    limit_name = "max_completion_tokens" if chat and get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _integer(body, limit_name, DEFAULT_MAX_TOKENS, 1)
    if get("min_tokens") is None:
        return Limits(max_tokens, 0, limit_name)
    min_tokens = _integer(body, "min_tokens", 0, 0)
    if min_tokens > max_tokens:
        raise BadRequest(f"min_tokens: {min_tokens} is more than {limit_name} {max_tokens}", "min_tokens")
    return Limits(max_tokens, min_tokens, limit_name)


def _integer(body: Mapping[str, Any], name: str, default: int, minimum: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"{name}: expected an integer >= {minimum}, got {value!r}", name)
    return value


def _check_flag(body: Mapping[str, Any], name: str, field: str | None = None) -> None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(f"{field or name}: expected true or false, got {value!r}", field or name)
