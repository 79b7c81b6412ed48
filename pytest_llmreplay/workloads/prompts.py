"""Turn -> the token ids (and text) a request carries.

- :class:`TokenIds`: the ids as given.
- :class:`HashBlocks`: each hash id expands to ``block_size`` tokens that depend only on the id
  (and the seed), so equal ids give equal tokens; the first two tokens of a block spell the id in
  base ``len(words)``, so different ids below ``len(words)**2`` always give different blocks.
- :class:`Synthetic`: ``prefix_tokens`` from the prefix group's fixed stream, then tokens that
  depend on (seed, session, turn); ``extends_previous`` prepends the previous prompt + response.

Generated tokens are drawn from the tokenizer's *word tokens*: ids whose text is a space and
letters and that encode back to themselves. With byte-level BPE tokenizers (GPT-2, Llama-3,
Qwen, the bundled one) a run of them decodes to text that re-encodes to exactly the same ids, so
text prompts have exact lengths and equal token prefixes stay equal text prefixes. For other
tokenizers :meth:`PromptFactory.text` decodes, re-encodes and repairs to the exact length (as
vLLM's and AIPerf's random prompts do) and returns the ids the server will really see.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Hashable, Sequence
from functools import cached_property
from typing import Any, cast

import numpy as np

from ..errors import LLMReplayError
from .tokenizer import Tokenizer
from .workload import OUTPUT_LIMIT_FIELDS, HashBlocks, Payload, Session, Synthetic, TokenIds, Turn

_WORD = re.compile(r" ?[A-Za-z]{2,}")
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
REPAIR_ATTEMPTS = 10


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process (unlike ``hash()``)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _ints(array: np.ndarray) -> list[int]:
    """``array.tolist()`` of a 1-D integer array: Python ints. (numpy's stubs type ``tolist`` by the
    array's static shape, which indexing loses; the cast says what a 1-D array gives.)"""
    return cast(list[int], array.tolist())


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, elementwise on uint64 (wraps modulo 2**64)."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class KeyedPrompt:
    """Tokens described, not generated: ``segments`` are ``(key, count)``, each ``count`` tokens
    that depend only on ``key``; the prompt is their concatenation. In-process endpoints (the
    simulator) name cache blocks from the keys (``sim.kvcache.segment_block_hashes``) without
    ever making the tokens. Keys are hashable values compared within one process (the
    simulator hashes them with ``hash()``), so plain tuples do: nothing needs a digest.

    Immutable, equal and hashed by its segments; ``length`` (``len``) is the sum of the counts,
    given by a caller that knows it (one request each: no sum to take) or summed here."""

    __slots__ = ("segments", "length")
    segments: tuple[tuple[Hashable, int], ...]
    length: int

    def __init__(self, segments: tuple[tuple[Hashable, int], ...], length: int | None = None) -> None:
        object.__setattr__(self, "segments", segments)
        object.__setattr__(
            self, "length", sum([count for _, count in segments]) if length is None else length
        )  # a list: no generator frame

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"KeyedPrompt is immutable: cannot set {name!r}")

    def __len__(self) -> int:
        return self.length

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyedPrompt) and other.segments == self.segments

    def __hash__(self) -> int:
        return hash(self.segments)

    def __repr__(self) -> str:
        return f"KeyedPrompt(segments={self.segments!r})"

    def __reduce__(self) -> tuple[type, tuple]:
        return KeyedPrompt, (self.segments, self.length)


class PromptFactory:
    """Deterministic prompt tokens for turns, for one tokenizer and seed. ``tokenizer_option``:
    how the user chose the tokenizer (``--tokenizer``, ``--llm-tokenizer``), named in the hint of
    a message that says another tokenizer is needed."""

    def __init__(self, tokenizer: Tokenizer, seed: int = 0, tokenizer_option: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self.tokenizer_option = tokenizer_option

    def use_another_tokenizer(self, which: str) -> str:
        """The hint that ends such a message: ``use <which> (--option)``."""
        return f"use {which}" + (f" ({self.tokenizer_option})" if self.tokenizer_option else "")

    def salted(self, salt: str) -> PromptFactory:
        """A factory for the same tokenizer whose seed is ``stable_hash(seed, salt)``: with a
        workload's digest and a test's id as the salt (the plugin's), two tests never share
        generated tokens (session ``s0`` of one and of another, hash id 0 of two traces, or the
        same workload in two tests), so on a real engine one test cannot warm the prefix cache
        for the next, and a test's figures do not depend on which tests ran before it. The word list is computed once, here, and
        shared."""
        factory = PromptFactory(
            self.tokenizer, seed=stable_hash(self.seed, salt), tokenizer_option=self.tokenizer_option
        )
        factory.words = self.words
        return factory

    @cached_property
    def words(self) -> np.ndarray:
        """The word-token ids generated prompts are made of (computed once per factory)."""
        decode, encode = self.tokenizer.decode, self.tokenizer.encode
        spaced: list[int] = []
        bare: list[int] = []
        for token in range(self.tokenizer.vocab_size):
            text = decode([token])
            if _WORD.fullmatch(text) and encode(text) == [token]:
                (spaced if text.startswith(" ") else bare).append(token)
        chosen = spaced if len(spaced) >= 64 else spaced + bare
        if len(chosen) < 64:
            raise LLMReplayError(
                f"tokenizer {self.tokenizer.name!r} has too few plain word tokens ({len(chosen)}) to build prompts"
            )
        return np.array(chosen, dtype=np.int64)

    def stream(self, key: int, start: int, count: int) -> list[int]:
        """Tokens ``start .. start+count`` of the endless word stream named by ``key``."""
        positions = np.arange(start, start + count, dtype=np.uint64)
        mixed = _mix(positions ^ _mix(np.full(count, key & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)))
        return _ints(self.words[(mixed % np.uint64(len(self.words))).astype(np.int64)])

    def hash_blocks(self, prompt: HashBlocks, input_tokens: int) -> list[int]:
        """The ``input_tokens`` ids of a hash-id prompt (the last block cut to fit)."""
        size, n, words = prompt.block_size, len(self.words), self.words
        ids = np.array(prompt.hash_ids, dtype=np.uint64)
        base = _mix(ids ^ np.uint64(stable_hash("block", self.seed)))
        grid = _mix(base[:, None] + np.arange(size, dtype=np.uint64)[None, :])
        blocks = words[(grid % np.uint64(n)).astype(np.int64)]
        if size >= 2:
            width = np.uint64(n)
            blocks[:, 0] = words[((ids // width) % width).astype(np.int64)]
            blocks[:, 1] = words[(ids % width).astype(np.int64)]
        return _ints(blocks.reshape(-1)[:input_tokens])

    def planned_response(self, session: Session, index: int) -> list[int]:
        """The response ids a turn is planned to get: the trace's, else generated words."""
        turn = session.turns[index]
        if turn.output_token_ids is not None:
            return list(turn.output_token_ids)
        return self.stream(stable_hash("response", self.seed, session.id, index), 0, turn.output_tokens or 0)

    def turn_ids(self, session: Session, index: int, history: Sequence[int] = ()) -> list[int]:
        """The prompt ids of turn ``index``; ``history`` is the previous prompt + its response
        (what a growth turn extends: the server's real response during a replay)."""
        turn = session.turns[index]
        prompt = turn.prompt
        if isinstance(prompt, TokenIds):
            return list(prompt.ids)
        if isinstance(prompt, HashBlocks):
            return self.hash_blocks(prompt, _length(turn, session, index))
        if isinstance(prompt, Payload):
            raise LLMReplayError(
                f"session {session.id!r} turn {index}: a verbatim payload has no token ids; send its body as is"
            )
        length = _length(turn, session, index)
        head: list[int] = []
        if prompt.extends_previous:
            head = list(history)
        elif prompt.prefix_group is not None:
            head = self.stream(
                stable_hash("prefix", self.seed, prompt.prefix_group), 0, min(prompt.prefix_tokens, length)
            )
        tail = max(length - len(head), 0)
        return head + self.stream(stable_hash("prompt", self.seed, session.id, index), 0, tail)

    def keyed(self, session: Session, index: int) -> KeyedPrompt | None:
        """Turn ``index``'s prompt as keyed segments, naming the same tokens as :meth:`turn_ids`
        (hash blocks: one segment per hash id; synthetic: the prefix group's stream, then the
        turn's own), or None for token ids and growth turns, which need real ids."""
        turn = session.turns[index]
        prompt = turn.prompt
        if isinstance(prompt, HashBlocks):
            length, size = _length(turn, session, index), prompt.block_size
            return KeyedPrompt(
                tuple(
                    (("block", self.seed, h), min(size, length - i * size))
                    for i, h in enumerate(prompt.hash_ids)
                    if i * size < length
                )
            )
        if isinstance(prompt, Synthetic) and not prompt.extends_previous:
            length = _length(turn, session, index)
            head = min(prompt.prefix_tokens, length) if prompt.prefix_group is not None else 0
            segments = ((("prefix", self.seed, prompt.prefix_group), head),) if head else ()
            tail = ((("prompt", self.seed, session.id, index), length - head),) if length > head else ()
            return KeyedPrompt(segments + tail, length)  # head <= length
        return None

    def session_ids(self, session: Session) -> list[list[int]]:
        """Every turn's prompt ids, growth turns extending the planned responses."""
        prompts: list[list[int]] = []
        for index in range(len(session.turns)):
            history = prompts[-1] + self.planned_response(session, index - 1) if index else []
            prompts.append(self.turn_ids(session, index, history))
        return prompts

    @cached_property
    def word_texts(self) -> dict[int, str] | None:
        """Each word token's text, when runs of word tokens are known to decode to the joined
        texts and to re-encode to the same ids (checked once, on 4,096 seeded words); else None."""
        texts = {int(w): self.tokenizer.decode([int(w)]) for w in self.words}
        sample = self.stream(stable_hash("round-trip check", self.seed), 0, 4096)
        joined = "".join(texts[t] for t in sample)
        if self.tokenizer.decode(sample) == joined and self.tokenizer.encode(joined) == sample:
            return texts
        return None

    def text(self, ids: Sequence[int]) -> tuple[str, list[int]]:
        """Text that encodes to ``len(ids)`` tokens, and the ids it really encodes to.

        Prompts made only of word tokens are joined from :attr:`word_texts` without a round
        trip (10x faster for long prompts; the property was checked once). Other ids are
        decoded as is when that round-trips; otherwise repaired: a shrinking head of the
        re-encoded ids is kept and the rest filled with word tokens, until the text encodes to
        exactly ``len(ids)`` tokens.
        """
        table = self.word_texts
        if table is not None and table.keys() >= set(ids):  # set and map: C loops over 10^5-10^6 ids
            return "".join(map(table.__getitem__, ids)), list(ids)
        vocab = self.tokenizer.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise LLMReplayError(
                f"token id {bad} is outside tokenizer {self.tokenizer.name!r} (vocabulary {vocab}); "
                + self.use_another_tokenizer("the tokenizer the trace was made with")
            )
        target = len(ids)
        current = list(ids)
        for attempt in range(1, REPAIR_ATTEMPTS + 1):
            text = self.tokenizer.decode(current)
            encoded = self.tokenizer.encode(text)
            if len(encoded) == target:
                return text, encoded
            # keep a shrinking head of what re-encoded, pad with word tokens; the last try is
            # all word tokens, which always round-trip with byte-level BPE
            keep = min(len(encoded), target) * (REPAIR_ATTEMPTS - attempt) // REPAIR_ATTEMPTS
            current = encoded[:keep] + self.stream(stable_hash("repair", self.seed, attempt), 0, target - keep)
        raise LLMReplayError(f"could not make text of exactly {target} tokens with tokenizer {self.tokenizer.name!r}")


# the one tool a replayed agent trace's turns call (the trace says when, not which): its
# arguments are the tokens the model generates for the call
TOOL_NAME = "replayed_tool"
TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Runs the next step of the agent whose trace is replayed",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
    },
}
TOOL_CHOICE = {"type": "function", "function": {"name": TOOL_NAME}}


def extends_previous(session: Session, index: int) -> bool:
    """Whether turn ``index`` carries the previous turn's prompt and response (an agent loop);
    a verbatim payload never does (its body already holds its history)."""
    prompt = session.turns[index].prompt
    return index > 0 and not isinstance(prompt, Payload) and getattr(prompt, "extends_previous", False)


def payload_api(payload: dict, api: str) -> str:
    """The API a verbatim payload goes to: the run's ``api`` when the payload has that API's
    shape (``messages`` for chat and messages, ``input`` for responses, ``prompt`` for
    completions; an Anthropic payload and a chat payload both hold ``messages``: the run's API
    tells them apart), else the one its shape names (``messages``: chat, ``input``: responses,
    else completions)."""
    key = {"chat": "messages", "messages": "messages", "responses": "input"}.get(api, "prompt")
    if key in payload:
        return api
    return "chat" if "messages" in payload else "responses" if "input" in payload else "completions"


def _length(turn: Turn, session: Session, index: int) -> int:
    if turn.input_tokens is None:
        raise LLMReplayError(f"session {session.id!r} turn {index}: no input length")
    return turn.input_tokens


class Conversation:
    """The requests of one session, built turn by turn as the replay goes.

    ``api`` is ``chat``, ``completions``, ``responses`` or ``messages``; ``prompt_format``
    (completions only) is ``text``, ``ids`` or ``keyed`` (in-process endpoints only: a
    :class:`KeyedPrompt` for every turn that neither extends the previous one nor is extended by
    the next, ids for the others). Each API's body holds the turn in its own shape: chat
    ``messages`` and ``max_tokens``; Responses ``input`` (a list of ``{role, content}`` input
    items: the whole history, as the API is used without server-side state) and
    ``max_output_tokens``; Messages ``messages`` and ``max_tokens`` (a system prompt would go in
    ``system``: generated prompts have none). A turn that extends the previous one (an agent loop)
    carries the previous prompt plus the server's *actual* response, as a real agent does (its
    answer: a reasoning model's reasoning is never sent back, :meth:`respond`):

    - chat, responses, messages: the previous messages + ``assistant: <response text>`` +
      ``user: <new tokens>``; on chat, after a tool call, the assistant message carries the call
      (``tool_calls``) and the new tokens are the tool's output (``tool``: its ``tool_call_id``,
      the first call's);
    - completions, text: previous prompt text + response text + new text;
    - completions, ids: previous prompt ids + the response's token ids when the server returned
      them (those after its reasoning), else the planned response ids.

    :meth:`history_source` says which (``server`` or ``planned``). Verbatim payloads are sent as
    they are (their ``messages``, ``input`` or ``prompt`` already hold the history), to the API
    :func:`payload_api` names. With ``tool_calls``, a chat turn that ends in a tool call
    (``Turn.tool_call``) asks for one: ``tools`` holds :data:`TOOL`, and ``tool_choice`` names it
    (the Responses and Messages APIs are not asked for tool calls).
    """

    def __init__(
        self, factory: PromptFactory, session: Session, api: str, prompt_format: str = "text", tool_calls: bool = False
    ) -> None:
        self.factory = factory
        self.session = session
        self.api = api
        self.prompt_format = prompt_format
        self.tool_calls = tool_calls
        self._calls: list[dict[str, str]] = []  # the tool calls of the previous response
        self._planned: list[int] = []  # prompt ids of the previous turn, as planned
        self._sent: list[int] = []  # prompt ids of the previous turn, as sent (ids format)
        self._messages: list[dict[str, Any]] = []
        self._prompt_text = ""
        self._response_text = ""
        self._response_ids: list[int] | None = None
        self._tokens = 0  # tokens of everything sent so far that the next turn repeats
        self._response_tokens = 0

    def history_source(self, index: int) -> str | None:
        """``server`` or ``planned``: where the previous response in turn ``index``'s prompt
        came from; None when the turn does not extend the previous one."""
        if not extends_previous(self.session, index):
            return None
        if self.api == "completions" and self.prompt_format in ("ids", "keyed") and self._response_ids is None:
            return "planned"
        return "server"

    def request(self, index: int) -> tuple[str, dict, int | None]:
        """(api, body, planned prompt tokens) of turn ``index``; ``body`` has the prompt and the
        output limit (the endpoint adds model and streaming). On chat, responses and messages the
        planned count is the messages' content only: the server's chat template adds its own
        tokens."""
        turn = self.session.turns[index]
        if isinstance(turn.prompt, Payload):
            payload = dict(turn.prompt.body)
            api = payload_api(payload, self.api)
            if turn.output_tokens is not None and not any(key in payload for key in OUTPUT_LIMIT_FIELDS):
                # a mooncake row's text_input or messages (or a payload naming no limit) with its
                # output_length: without a limit the server generated to the context's end
                payload["max_output_tokens" if api == "responses" else "max_tokens"] = turn.output_tokens
            return api, payload, turn.input_tokens
        extends = extends_previous(self.session, index)
        if (
            self.api == "completions"
            and self.prompt_format == "keyed"
            and not extends
            and not (index + 1 < len(self.session.turns) and extends_previous(self.session, index + 1))
        ):
            keyed = self.factory.keyed(self.session, index)
            if keyed is not None:
                return self.api, {"prompt": keyed, "max_tokens": turn.output_tokens}, len(keyed)
        planned_response = self.factory.planned_response(self.session, index - 1) if extends else []
        planned_history = self._planned + planned_response if extends else []
        ids = self.factory.turn_ids(self.session, index, planned_history)
        new_ids = ids[len(planned_history) :]
        self._planned = ids
        body: dict = {}
        # what the server should count: the history as really sent and answered, plus new tokens
        self._tokens = (self._tokens + self._response_tokens if extends else 0) + len(new_ids)
        planned_tokens = self._tokens
        if self.api != "completions":
            text, _ = self.factory.text(new_ids)
            self._messages = (
                (self._messages + self._answer_messages(text)) if extends else [{"role": "user", "content": text}]
            )
            body["input" if self.api == "responses" else "messages"] = list(self._messages)
            if self.tool_calls and turn.tool_call and self.api == "chat":
                body["tools"], body["tool_choice"] = [TOOL], TOOL_CHOICE
        elif self.prompt_format in ("ids", "keyed"):
            response = self._response_ids if self._response_ids is not None else planned_response
            self._sent = (self._sent + response if extends else []) + new_ids
            body["prompt"] = list(self._sent)
            planned_tokens = self._tokens = len(self._sent)
        else:
            text, _ = self.factory.text(new_ids)
            self._prompt_text = (self._prompt_text + self._response_text if extends else "") + text
            body["prompt"] = self._prompt_text
        if turn.output_tokens is not None:
            body["max_output_tokens" if self.api == "responses" else "max_tokens"] = turn.output_tokens
        return self.api, body, planned_tokens

    def _answer_messages(self, text: str) -> list[dict[str, Any]]:
        """The previous response and then ``text`` (the new tokens), as messages (class
        docstring): on chat the tool's output after a tool call, else the user's."""
        if not self._calls or self.api != "chat":
            return [{"role": "assistant", "content": self._response_text}, {"role": "user", "content": text}]
        calls = [
            {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
            for call in self._calls
        ]
        return [
            {"role": "assistant", "content": self._response_text or None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": text},
        ]

    def respond(
        self,
        text: str,
        token_ids: Sequence[int] | None,
        tokens: int,
        calls: Sequence[dict[str, str]] = (),
        reasoning_tokens: int = 0,
    ) -> None:
        """Record the server's response to the last request (what the next turn extends): its
        answer's text, its token ids when the server returned them and its token count (both
        with the reasoning), its tool calls (``id``, ``name``, ``arguments``), and how many of
        its leading tokens were reasoning. The next turn sends back the answer alone, never the
        reasoning (vLLM's and DeepSeek's docs: it is not to be sent back), on every API, so its
        history holds the ids and counts the tokens after the reasoning. Sent back as text (every
        API but completions with ids), the answer counts as the tokenizer encodes its text, which
        is what the server counts: a model's generated tokens are not the text's own encoding
        (llama.cpp's 64 generated tokens were 68 to 78 tokens of text), and the difference read as
        a tokenizer mismatch on every multi-turn run."""
        self._response_text = text
        self._response_ids = list(token_ids)[reasoning_tokens:] if token_ids is not None else None
        if self.api != "completions" or self.prompt_format == "text":
            # on chat a tool call goes back too, shown by its arguments (a chat template's, the
            # simulator's): left out, every tool-call turn warned of a tokenizer mismatch
            shown = text + "".join(call["arguments"] for call in calls) if self.api == "chat" else text
            self._response_tokens = len(self.factory.tokenizer.encode(shown))
        else:
            self._response_tokens = (
                len(self._response_ids) if self._response_ids is not None else max(tokens - reasoning_tokens, 0)
            )
        self._calls = list(calls)
