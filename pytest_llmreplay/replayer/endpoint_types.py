"""What the replay driver hands an endpoint and the protocol an endpoint follows
(:class:`EndpointRequest`, :class:`Endpoint`), with the names both sides share: apart from
:mod:`~pytest_llmreplay.replayer.endpoints` (which re-exports them), so that an offline replay on
the in-process simulator does not import the HTTP endpoint's modules (its API parsers, SSE
decoder and metrics scraper)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from .clock import Clock
from .response import Response

TOKENS_SO_FAR = re.compile(r"\bafter (\d+) tokens?\b")  # reads endpoints.progress()'s count back
SIM_REASONING_FIELD = "sim_reasoning_tokens"  # the simulator's request option: reasoning tokens before the answer
SIM_ENGINE = "llmreplay-sim"  # the engine the simulator's GET /version names


@dataclass(slots=True)
class EndpointRequest:
    """One call: ``api`` is one of :data:`~pytest_llmreplay.replayer.apis.APIS`; ``body`` is the
    JSON body without the endpoint's own fields (model, stream), which the endpoint adds unless the body has them;
    ``reasoning_tokens``: how many of its output tokens its workload says a reasoning model
    thinks before answering (None: it does not say), which the simulator streams as reasoning
    (a real server's model decides for itself); ``tool_call``: it asks for a tool call (on chat
    its body has ``tools`` and ``tool_choice``; the in-process simulator, which takes no chat
    bodies, reads this)."""

    api: str
    body: dict[str, Any]
    reasoning_tokens: int | None = None
    tool_call: bool = False


class Endpoint(Protocol):
    """Where the replay driver sends requests. ``open`` before the first, ``close`` after."""

    @property
    def name(self) -> str:
        """What the run's results name it by (read only: the endpoints derive it)."""
        ...

    api: str

    async def open(self, clock: Clock, concurrency: int | None) -> None:
        """Get ready for up to ``concurrency`` requests at once (None: no bound)."""

    async def send(self, request: EndpointRequest, response: Response) -> None: ...

    async def idle_warning(self) -> str | None: ...

    async def close(self) -> None: ...


def describe_error(exc: BaseException) -> str:
    """One line: ``connection refused`` when a refused connection is anywhere in ``exc``'s chain
    of causes (httpx-aiohttp calls it a ConnectTimeout), ``the host name HOST did not resolve
    (...)`` when a failed name lookup is, else ``Type: message``'s first line (httpx adds a
    second, a link to MDN), or just ``Type`` when the message is empty (timeouts)."""
    import socket

    cause: BaseException | None = exc
    host = None
    for _ in range(8):  # a chain is a few links; a cycle must not hang
        if cause is None:
            break
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        host = host or getattr(cause, "host", None)  # aiohttp's connector errors name it
        if isinstance(cause, socket.gaierror):
            named = f" {host}" if host else ""
            return f"the host name{named} did not resolve ({cause.strerror or cause})"
        cause = cause.__cause__ or cause.__context__
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
