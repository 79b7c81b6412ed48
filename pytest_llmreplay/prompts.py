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
from functools import cached_property
from typing import Sequence

import numpy as np

from .errors import LLMReplayError
from .tokenizer import Tokenizer
from .workload import HashBlocks, Payload, Session, TokenIds, Turn

_WORD = re.compile(r" ?[A-Za-z]{2,}")
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
REPAIR_ATTEMPTS = 10


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process (unlike ``hash()``)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, elementwise on uint64 (wraps modulo 2**64)."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class PromptFactory:
    """Deterministic prompt tokens for turns, for one tokenizer and seed."""

    def __init__(self, tokenizer: Tokenizer, seed: int = 0) -> None:
        self.tokenizer = tokenizer
        self.seed = seed

    @cached_property
    def words(self) -> np.ndarray:
        """The word-token ids generated prompts are made of (computed once per factory)."""
        decode, encode = self.tokenizer.decode, self.tokenizer.encode
        spaced, bare = [], []
        for token in range(self.tokenizer.vocab_size):
            text = decode([token])
            if _WORD.fullmatch(text) and encode(text) == [token]:
                (spaced if text.startswith(" ") else bare).append(token)
        chosen = spaced if len(spaced) >= 64 else spaced + bare
        if len(chosen) < 64:
            raise LLMReplayError(f"tokenizer {self.tokenizer.name!r} has too few plain word tokens ({len(chosen)}) to build prompts")
        return np.array(chosen, dtype=np.int64)

    def stream(self, key: int, start: int, count: int) -> list[int]:
        """Tokens ``start .. start+count`` of the endless word stream named by ``key``."""
        positions = np.arange(start, start + count, dtype=np.uint64)
        mixed = _mix(positions ^ _mix(np.full(count, key & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)))
        return self.words[(mixed % np.uint64(len(self.words))).astype(np.int64)].tolist()

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
        return blocks.reshape(-1)[:input_tokens].tolist()

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
            raise LLMReplayError(f"session {session.id!r} turn {index}: a verbatim payload has no token ids; send its body as is")
        length = _length(turn, session, index)
        head: list[int] = []
        if prompt.extends_previous:
            head = list(history)
        elif prompt.prefix_group is not None:
            head = self.stream(stable_hash("prefix", self.seed, prompt.prefix_group), 0, min(prompt.prefix_tokens, length))
        tail = max(length - len(head), 0)
        return head + self.stream(stable_hash("prompt", self.seed, session.id, index), 0, tail)

    def session_ids(self, session: Session) -> list[list[int]]:
        """Every turn's prompt ids, growth turns extending the planned responses."""
        prompts: list[list[int]] = []
        for index in range(len(session.turns)):
            history = prompts[-1] + self.planned_response(session, index - 1) if index else []
            prompts.append(self.turn_ids(session, index, history))
        return prompts

    def text(self, ids: Sequence[int]) -> tuple[str, list[int]]:
        """Text that encodes to ``len(ids)`` tokens, and the ids it really encodes to.

        Decoded as is when that round-trips (always for word tokens with byte-level BPE);
        otherwise repaired: a shrinking head of the re-encoded ids is kept and the rest filled
        with word tokens, until the text encodes to exactly ``len(ids)`` tokens.
        """
        vocab = self.tokenizer.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise LLMReplayError(
                f"token id {bad} is outside tokenizer {self.tokenizer.name!r} (vocabulary {vocab}); "
                "use the tokenizer the trace was made with (--llm-tokenizer)"
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


def _length(turn: Turn, session: Session, index: int) -> int:
    if turn.input_tokens is None:
        raise LLMReplayError(f"session {session.id!r} turn {index}: no input length")
    return turn.input_tokens
