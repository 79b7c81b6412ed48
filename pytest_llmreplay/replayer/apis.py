"""The APIs the replay speaks, in one table: each one's route, what ends its stream, its parser.

=============== ======================== ============================ ===============================
API             route                    stream ends with             parser
=============== ======================== ============================ ===============================
``chat``        ``/v1/chat/completions`` ``data: [DONE]``             :mod:`.api_chat`
``completions`` ``/v1/completions``      ``data: [DONE]``             :mod:`.api_chat`
``responses``   ``/v1/responses``        ``response.completed``       :mod:`.api_responses`
``messages``    ``/v1/messages``         ``message_stop``             :mod:`.api_messages`
=============== ======================== ============================ ===============================

A parser is made per request (:class:`Parser`: the Messages API's usage comes in two events) and
reports what it reads to the request's :class:`~.response.Response` through the methods every
API's parser shares. Chat and completions stream their usage only when the request asks
(``stream_options.include_usage``); the other two always do. Every server this project targets
serves chat and completions; the Responses and Messages APIs are newer, so an endpoint checks
that its server serves them before a run sends anything (``probed``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .api_chat import ChatParser
from .api_messages import MessagesParser
from .api_responses import ResponsesParser
from .response import Response


class Parser(Protocol):
    def event(self, data: str, now: float, response: Response) -> bool:
        """Add one SSE event's data, which arrived at ``now``; True once the stream's end was read."""
        ...

    def whole(self, obj: dict[str, Any], now: float, response: Response) -> None:
        """Add a whole (not streamed) reply, which arrived at ``now``."""


@dataclass(frozen=True)
class API:
    name: str
    title: str  # what its documentation calls it
    path: str
    end: str  # what ends a stream: named when one ends without it
    parser: Callable[[], Parser]
    usage_on_request: bool  # streams its usage only when asked (stream_options.include_usage)
    probed: bool  # checked before a run, since a server may not serve it


API_TABLE = {
    "chat": API("chat", "Chat Completions", "/v1/chat/completions", "[DONE]", ChatParser, True, False),
    "completions": API("completions", "Completions", "/v1/completions", "[DONE]", ChatParser, True, False),
    "responses": API("responses", "Responses", "/v1/responses", "response.completed", ResponsesParser, False, True),
    "messages": API("messages", "Messages", "/v1/messages", "message_stop", MessagesParser, False, True),
}
APIS = tuple(API_TABLE)
