"""The canonical workload model every format loads into.

A :class:`Workload` is a list of :class:`Session`. A flat request is a session with one turn. A
:class:`Turn` is one LLM call; its ``prompt`` says where the prompt's tokens come from:

- :class:`TokenIds`: the exact token ids (LLMServingSim ``input_tok_ids``);
- :class:`HashBlocks`: Mooncake hash ids, one per ``block_size`` tokens; equal id = equal tokens;
- :class:`Payload`: a verbatim request body (AIPerf inputs.json, raw payloads), sent as is;
- :class:`Synthetic`: only a length, optionally sharing a prefix with a prefix group, or extending
  the previous turn (the prompt is the previous turn's prompt + its response + new tokens).

Times are seconds (float). ``Session.arrival_s`` is the offset from the start of the run;
``Turn.delay_s`` is the time after the previous turn *completes* before this turn may start, and
``Turn.due_s``, where a trace times a later turn itself (AIPerf's reading of a mooncake row's
``timestamp``), when after its session's start it is due: it is sent then, or at once when the
previous turn completes later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from operator import attrgetter, is_not
from pathlib import Path
from typing import Any

from ..errors import WorkloadError

MAX_TOKENS = 10_000_000  # per prompt or response: no model's context is longer (Llama 4 Scout's is 10M)
MAX_TIME_S = 10_000_000.0  # an arrival or delay (116 days): a larger one is an absolute time or a unit mix-up
MAX_REQUESTS = 10_000_000  # in one workload: about 10 GB of Python objects


@dataclass(frozen=True, slots=True)
class TokenIds:
    """The prompt is exactly these token ids."""

    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HashBlocks:
    """The prompt is ``len(hash_ids)`` blocks of ``block_size`` tokens (the last may be partial).

    Blocks with equal ids have equal tokens, so equal id prefixes are equal token prefixes.
    """

    hash_ids: tuple[int, ...]
    block_size: int


@dataclass(frozen=True, slots=True)
class Payload:
    """A verbatim request body (e.g. ``{"messages": [...], "max_tokens": 64}``), sent as is
    (with its turn's ``output_tokens`` as its API's output limit where it names none)."""

    body: Mapping[str, Any]


OUTPUT_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")  # each API's name for it


@dataclass(frozen=True, slots=True)
class Synthetic:
    """Only a length is known; the prompt is generated.

    ``prefix_group``/``prefix_tokens``: the first ``prefix_tokens`` tokens are the shared prefix of
    that group (equal in every prompt of the group). ``extends_previous``: the prompt is the
    previous turn's prompt + its response + ``input_tokens - (previous input + previous output)``
    new tokens, as in agent loops.
    """

    prefix_group: int | None = None
    prefix_tokens: int = 0
    extends_previous: bool = False


PromptSource = TokenIds | HashBlocks | Payload | Synthetic


@dataclass(frozen=True, slots=True)
class Turn:
    """One LLM call.

    ``input_tokens``/``output_tokens`` are ``None`` only for verbatim payloads whose lengths the
    file does not state (they depend on the server's tokenizer and chat template).
    ``output_token_ids`` are the planned response tokens when the trace has them.
    ``reasoning_tokens``: of ``output_tokens``, how many a reasoning model thinks before it
    answers, where the workload says (None: it does not); the simulator streams that many as
    reasoning. ``tool_call``: the turn's answer is a tool call, which runs for the next turn's
    ``delay_s`` and whose output the next turn's prompt carries (an agent trace's turns but the
    last: trie's, LLMServingSim's agentic sessions'). ``due_s``: a later turn timed by its trace,
    seconds after its session's start (module docstring); its ``delay_s`` is then 0.
    """

    input_tokens: int | None
    output_tokens: int | None
    prompt: PromptSource
    delay_s: float = 0.0
    output_token_ids: tuple[int, ...] | None = None
    reasoning_tokens: int | None = None
    tool_call: bool = False
    due_s: float | None = None


def next_synthetic(previous: Turn | None, input_tokens: int) -> Synthetic:
    """The synthetic prompt of a turn whose trace gives only its full length.

    It extends the previous turn (previous prompt + response + new tokens) when it is at least
    as long as both together, as a conversation or an agent loop does; otherwise it stands alone.
    """
    if previous is not None and previous.input_tokens is not None and previous.output_tokens is not None:
        if input_tokens >= previous.input_tokens + previous.output_tokens:
            return Synthetic(extends_previous=True)
    return Synthetic()


def request_name(line: int, taken: set[str]) -> str:
    """The id of an independent request from ``line`` of its file: ``line<N>``, suffixed with
    ``~2``, ``~3``... when the file itself names a session so."""
    name, suffix = f"line{line}", 1
    while name in taken:
        suffix += 1
        name = f"line{line}~{suffix}"
    return name


@dataclass(frozen=True, slots=True)
class Session:
    """An ordered list of turns; turn n+1 may start ``delay_s`` after turn n completes."""

    id: str
    arrival_s: float
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Workload:
    """Sessions sorted by arrival, plus where they came from.

    ``timed`` says whether arrival times come from the trace (open-loop replay is meaningful) or
    are all zero because the format has none (trie, AIPerf inputs: replay by concurrency).
    """

    sessions: tuple[Session, ...]
    format: str
    source: str | None = None
    timed: bool = True
    warnings: tuple[str, ...] = field(default=())

    def __iter__(self) -> Iterator[Session]:
        return iter(self.sessions)

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def num_requests(self) -> int:
        """Total number of turns (= requests) over all sessions."""
        return sum(len(s.turns) for s in self.sessions)

    def turns(self) -> Iterator[tuple[Session, int, Turn]]:
        """Every (session, turn index, turn) in session order."""
        for session in self.sessions:
            for index, turn in enumerate(session.turns):
                yield session, index, turn


def check_limits(workload: Workload, path: str | Path | None = None) -> None:
    """Raise :class:`WorkloadError` for sizes no replay can honour: more than
    :data:`MAX_REQUESTS` requests, a prompt or response over :data:`MAX_TOKENS` tokens (its
    prompt could not be made), an arrival or delay over :data:`MAX_TIME_S` (the replay would
    wait for months), reasoning tokens below 0 or over the turn's output tokens. Names the
    session and turn (a flat trace's session is ``line<N>``)."""
    if workload.num_requests > MAX_REQUESTS:
        raise WorkloadError(f"{workload.num_requests:,} requests is over the limit of {MAX_REQUESTS:,}", path=path)
    if _within_limits(workload.sessions):
        return
    for session in workload.sessions:  # something is over a limit (or NaN): find the first to name it
        if session.arrival_s > MAX_TIME_S:
            raise WorkloadError(_time_message(session.arrival_s), path=path, field=f"session {session.id!r}: arrival")
        for index, turn in enumerate(session.turns):
            for name, tokens in (("input tokens", turn.input_tokens), ("output tokens", turn.output_tokens)):
                if tokens is not None and tokens > MAX_TOKENS:
                    raise WorkloadError(
                        f"{tokens:,} is over the limit of {MAX_TOKENS:,} (no model's context is longer)",
                        path=path,
                        field=f"session {session.id!r} turn {index}: {name}",
                    )
            if turn.delay_s > MAX_TIME_S or (turn.due_s or 0.0) > MAX_TIME_S:
                raise WorkloadError(
                    _time_message(max(turn.delay_s, turn.due_s or 0.0)),
                    path=path,
                    field=f"session {session.id!r} turn {index}: delay",
                )
            thought = turn.reasoning_tokens
            if thought is not None and (
                thought < 0 or (turn.output_tokens is not None and thought > turn.output_tokens)
            ):
                raise WorkloadError(
                    f"{thought} must be >= 0 and at most the turn's output tokens ({turn.output_tokens}): reasoning is part of them",
                    path=path,
                    field=f"session {session.id!r} turn {index}: reasoning tokens",
                )


def _within_limits(sessions: tuple[Session, ...]) -> bool:
    """True when :func:`check_limits` has nothing to say, from maxima taken in C (a generated
    workload holds up to a million turns); False also for a NaN, which the detailed check judges."""
    turns = list(chain.from_iterable(map(attrgetter("turns"), sessions)))
    return (
        max(map(attrgetter("arrival_s"), sessions), default=0.0) <= MAX_TIME_S
        and max(map(attrgetter("delay_s"), turns), default=0.0) <= MAX_TIME_S
        and not any(turn.due_s is not None and turn.due_s > MAX_TIME_S for turn in turns)
        and max(filter(_given, map(attrgetter("input_tokens"), turns)), default=0) <= MAX_TOKENS
        and max(filter(_given, map(attrgetter("output_tokens"), turns)), default=0) <= MAX_TOKENS
        and not any(map(attrgetter("reasoning_tokens"), turns))  # None or 0 everywhere: nothing to check
    )


_given = partial(is_not, None)


def _time_message(seconds: float) -> str:
    return f"{seconds:.4g} s is over the limit of {MAX_TIME_S:,.0f} s (116 days): times must count from the trace's start, in the format's unit"
