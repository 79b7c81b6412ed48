"""What came back from one request, filled while it arrives: :class:`Response`.

Every API's parser (:mod:`~pytest_llmreplay.replayer.apis`) reports to it the same way: token chunks as reasoning, answer or tool-call deltas, and the usage's
counts, so that the replay driver keeps each part's times and counts whatever API spoke.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .sse import ToolCallPiece


@dataclass(slots=True)
class Response:
    """What came back, filled while it arrives. Times are ``clock.now()`` values.

    ``chunk_times[i]`` is when the read holding token chunk ``i`` arrived and ``chunk_tokens[i]``
    how many tokens it carried. ``prompt_tokens``/``cached_tokens``/``completion_tokens``/
    ``reasoning_tokens`` are the server's ``usage`` (None when it gave none). ``error`` is ``kind:
    detail`` with kind one of connect, closed, timeout, http, stream, protocol, server, client.

    Reasoning apart from the answer: a stream parser (one per API) reports each delta with
    :meth:`reasoning_delta`, :meth:`answer_delta` (content) or :meth:`tool_call_delta` (an
    answer too: the model acts instead of thinking), and the usage with :meth:`set_usage`;
    ``first_reasoning_s``/``last_reasoning_s`` and ``first_answer_s``/``last_answer_s`` are the
    arrival times of the first and last chunk of each kind, ``reasoning_counted`` the reasoning
    tokens the stream carried and ``calls`` the tool calls its pieces built (``id``, ``name``,
    ``arguments``, in their order: what an agent's next turn sends back). An endpoint that fills
    ``chunk_times`` itself (the in-process simulator) says which tokens were reasoning with
    :meth:`split_reasoning`; a parser of a whole (not streamed) reply calls :meth:`whole`.

    :attr:`text` is the answer alone (content, and tool calls' text), :attr:`reasoning_text`
    the reasoning apart: what a multi-turn chat sends back as the assistant's message on the
    next turn is the answer, never the reasoning (vLLM's and DeepSeek's docs: a reply's
    ``reasoning_content`` is not to be sent back), while the reasoning's times and counts above
    still make the reasoning figures (:mod:`~pytest_llmreplay.metrics.reasoning`).
    """

    sent_s: float | None = None
    end_s: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    reasoning_parts: list[str] = field(default_factory=list)
    token_ids: list[int] | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    queue_s: float | None = None  # time in the engine's queue, when the endpoint knows it (simulator)
    first_reasoning_s: float | None = None
    last_reasoning_s: float | None = None
    first_answer_s: float | None = None
    last_answer_s: float | None = None
    reasoning_counted: int = 0
    calls: list[dict[str, str]] = field(default_factory=list)
    decoded: int | None = None  # llama.cpp's timings.predicted_n at the last token chunk that had it (take_timings)
    # the server's index of each tool call -> its place in calls (tool_call_delta)
    call_positions: dict[int, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The answer's text (class docstring)."""
        return "".join(self.text_parts)

    @property
    def reasoning_text(self) -> str:
        """The reasoning's text, apart from the answer (class docstring)."""
        return "".join(self.reasoning_parts)

    def fail(self, kind: str, detail: str) -> None:
        if self.error is None:
            self.error = f"{kind}: {detail}"

    def reasoning_delta(self, now: float, tokens: int, text: str = "", blank: bool = False) -> None:
        """``tokens`` reasoning tokens (``text``) arrived at ``now`` (:meth:`answer_delta`'s rules)."""
        if self._chunk(now, tokens, text, blank, self.reasoning_parts):
            if self.first_reasoning_s is None:
                self.first_reasoning_s = now
            self.last_reasoning_s = now
            self.reasoning_counted += tokens

    def answer_delta(self, now: float, tokens: int, text: str = "", blank: bool = False) -> None:
        """``tokens`` answer tokens (``text``) arrived at ``now``; ``blank``: one token of empty
        text, which counts only once a token came (servers open streams with one)."""
        if self._chunk(now, tokens, text, blank, self.text_parts):
            if self.first_answer_s is None:
                self.first_answer_s = now
            self.last_answer_s = now

    def tool_call_delta(self, now: float, tokens: int, pieces: Sequence[ToolCallPiece], text: str = "") -> None:
        """``pieces`` of tool calls (``tokens`` of their names or arguments) arrived at ``now``:
        an answer, the first of which ends the time to the first answer token; a piece of a call
        not seen before starts it (in :attr:`calls`, in the order their indices first came:
        servers and gateways number calls from 0, from 1 or from -1), a later one adds to its
        arguments."""
        for piece in pieces:
            position = self.call_positions.setdefault(piece.index, len(self.calls))
            if position == len(self.calls):
                self.calls.append({"id": f"call_{position}", "name": "", "arguments": ""})
            call = self.calls[position]
            call["id"] = piece.id or call["id"]
            call["name"] = piece.name or call["name"]
            call["arguments"] += piece.arguments
        self.answer_delta(now, tokens, text)

    def _chunk(self, now: float, tokens: int, text: str, blank: bool, parts: list[str]) -> bool:
        """Keep ``text`` in ``parts`` (the answer's or the reasoning's), and the chunk when it
        holds a token; whether it did."""
        if text:
            parts.append(text)
        if not tokens or (blank and not self.chunk_times):  # a blank chunk opening the stream is no token
            return False
        self.chunk_times.append(now)
        self.chunk_tokens.append(tokens)
        return True

    def split_reasoning(self, reasoning: int) -> None:
        """The first ``reasoning`` tokens of the chunks in ``chunk_times`` were reasoning, the
        rest the answer (a chunk is one or the other: the simulator ends its chunks at the
        boundary); sets the times of both kinds and ``reasoning_counted``."""
        times, tokens = self.chunk_times, self.chunk_tokens
        boundary = seen = 0
        while boundary < len(times) and seen < reasoning:
            seen += tokens[boundary]
            boundary += 1
        if boundary:
            self.first_reasoning_s, self.last_reasoning_s, self.reasoning_counted = times[0], times[boundary - 1], seen
        if boundary < len(times):
            self.first_answer_s, self.last_answer_s = times[boundary], times[-1]

    def whole(self, now: float, thought: str, answer: str, pieces: Sequence[ToolCallPiece] = ()) -> None:
        """A whole (not streamed) reply arrived at ``now`` with the reasoning ``thought``, the
        ``answer`` and the tool calls ``pieces`` (its usage already set): one chunk of
        ``completion_tokens`` tokens (else of the token ids returned), whose arrival is both the
        reasoning's and the answer's time (the answer's also when nothing but reasoning came)."""
        tokens = self.completion_tokens if self.completion_tokens is not None else len(self.token_ids or ())
        self.reasoning_parts.append(thought)
        self.text_parts.append(answer)
        self.chunk_times.append(now)
        self.chunk_tokens.append(tokens)
        if thought:
            self.first_reasoning_s = self.last_reasoning_s = now
        if pieces:
            self.tool_call_delta(now, 0, pieces)
        if answer or pieces or not thought:
            self.first_answer_s = self.last_answer_s = now

    def set_usage(
        self,
        prompt_tokens: Any = None,
        completion_tokens: Any = None,
        cached_tokens: Any = None,
        reasoning_tokens: Any = None,
    ) -> None:
        """Take the counts a server's usage gave (each kept only when it is a number: a later,
        partial usage does not erase an earlier count)."""
        self.prompt_tokens = _int_or(prompt_tokens, self.prompt_tokens)
        self.completion_tokens = _int_or(completion_tokens, self.completion_tokens)
        self.cached_tokens = _int_or(cached_tokens, self.cached_tokens)
        self.reasoning_tokens = _int_or(reasoning_tokens, self.reasoning_tokens)

    def take_usage(self, usage: Mapping[str, Any], prompt: str = "prompt", completion: str = "completion") -> None:
        """Read an OpenAI ``usage`` object: ``{prompt}_tokens``, ``{completion}_tokens``,
        ``{prompt}_tokens_details.cached_tokens`` and ``{completion}_tokens_details.reasoning_tokens``
        (chat and completions; the Responses API names them ``input`` and ``output``)."""
        prompt_details = usage.get(f"{prompt}_tokens_details")
        completion_details = usage.get(f"{completion}_tokens_details")
        self.set_usage(
            usage.get(f"{prompt}_tokens"),
            usage.get(f"{completion}_tokens"),
            prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None,
            completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None,
        )

    def take_timings(self, timings: Mapping[str, Any], tokens: int) -> int | None:
        """Read llama.cpp's ``timings`` of a chunk counted as ``tokens``; return how many tokens
        the chunk holds when the timings tell (None: they do not).

        ``cache_n`` (prompt tokens reused from the slot's cache) is ``cached_tokens`` unless
        ``usage`` gave them: builds before ``prompt_tokens_details`` report the hit only there
        (read whichever comes first; usage's, when it comes, wins). ``predicted_n`` is the
        count of tokens generated so far, on every chunk with ``timings_per_token: true``:
        llama.cpp holds back a token whose text ends inside a UTF-8 sequence and sends it with
        the next (several tokens in one chunk, no ids to say so), or never when it is the last.
        Trusted only when every token chunk so far carried it (without ``timings_per_token``
        only the closing chunk has timings): a chunk with tokens then holds ``predicted_n``
        minus the last token chunk's (at least the count it was given), and a chunk without
        text (the closing one) those generated since."""
        if self.cached_tokens is None:
            self.cached_tokens = _int_or(timings.get("cache_n"), None)
        decoded = _int_or(timings.get("predicted_n"), None)
        if decoded is None or (self.decoded is None and (not tokens or self.chunk_tokens)):
            return None
        held = decoded - (self.decoded or 0)
        self.decoded = max(decoded, self.decoded or 0)
        return max(tokens, held)


def _int_or(value: Any, default: int | None) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
