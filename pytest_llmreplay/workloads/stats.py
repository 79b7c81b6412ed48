"""What a workload looks like before it is replayed: the figures ``llmreplay inspect`` prints.

Reusable-prefix share (hash-id and token-id prompts): requests are taken in arrival order
(sessions by arrival, turns in order) into an unbounded prefix cache of blocks identified by the
chain of their ids, as vLLM's prefix cache does; a request's reusable tokens are those of its
leading blocks already in the cache::

    reusable_share = sum(reusable prompt tokens) / sum(prompt tokens of hash/token-id requests)

Token-id prompts count full blocks of ``block_size`` tokens only; a hash-id prompt's last block
may be partial. Session-history share (agent and chat traces): the part of growth turns' prompts
that is the previous prompt + response, over all prompt tokens. Shared-prefix share (synthetic
prefix groups): in the same arrival order, a prompt of a group reuses as much of its group prefix
as an earlier prompt of the group had (``min(prefix_tokens, longest earlier prefix)``), over all
prompt tokens.

Delays before later turns (multi-turn workloads): each turn after a session's first waits
``Turn.delay_s`` after the previous one completes (think time, a tool's run): their statistics
in seconds, to one that spots a trace written in another unit (milliseconds in trie's seconds).

Reasoning tokens (a reasoning workload's turns say how many of their output tokens the model
thinks before it answers): their statistics over the turns that state one, shown only when a
turn does.

Time span and request rate (timed workloads): over the requests' arrivals, not the sessions'
starts. A turn arrives at its session's arrival plus the delays of the turns up to it (the
response times between are not known before a replay, so a later turn's arrival is its
earliest)::

    request_rate = requests / (last request arrival - first request arrival)

A span or delay under a second is shown to three significant digits (``0.0012 s``, not ``0.0 s`` beside
a rate of 2,500 req/s). A trace of at least :data:`MIN_RATE_REQUESTS` requests loaded at a mean
rate over :data:`MAX_PLAUSIBLE_RATE` is most likely written in another unit than its format's
(seconds in Mooncake's millisecond ``timestamp``): :func:`unit_warning` says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from ..errors import LLMReplayError
from .workload import HashBlocks, Synthetic, TokenIds, Workload

DEFAULT_TOKEN_BLOCK = 16
MAX_PLAUSIBLE_RATE = 1_000.0  # req/s over a whole trace; recorded serving traffic is far below
MIN_RATE_REQUESTS = 20  # fewer arrivals (a hand-written test trace, a burst) say little of a unit
STATS = ("mean", "p50", "p90", "p99", "max")


@dataclass(frozen=True)
class WorkloadStats:
    """Figures of one workload; ``None`` where a figure does not apply."""

    format: str
    sessions: int
    requests: int
    turns_per_session: dict[str, float] | None  # None for a workload without sessions
    input_tokens: dict[str, float] | None
    output_tokens: dict[str, float] | None
    reasoning_tokens: dict[str, float] | None  # over the turns that state one; None when none does
    reasoning_turns: int  # turns that state their reasoning length
    later_turn_delays: dict[str, float] | None  # seconds; None when no session has a second turn
    unknown_lengths: int
    timed: bool
    span_s: float | None
    request_rate: float | None
    reusable_prefix_share: float | None
    session_history_share: float | None
    shared_prefix_share: float | None  # synthetic prefix groups; None when no prompt has one

    def rows(self) -> list[tuple[str, str]]:
        """(figure, value) pairs for a two-column table."""
        rows = [
            ("format", self.format),
            ("sessions", f"{self.sessions:,}"),
            ("requests", f"{self.requests:,}"),
            ("turns per session", _stats_text(self.turns_per_session, ("mean", "min", "max"))),
            ("input tokens", _stats_text(self.input_tokens, STATS)),
            ("output tokens", _stats_text(self.output_tokens, STATS)),
        ]
        if self.reasoning_tokens is not None:
            partial = (
                f"  ({self.reasoning_turns:,} of {self.requests:,} turns)"
                if self.reasoning_turns < self.requests
                else ""
            )
            rows.append(("reasoning tokens (of output)", _stats_text(self.reasoning_tokens, STATS) + partial))
        if self.later_turn_delays is not None:
            delays = "  ".join(f"{name} {_seconds_text(self.later_turn_delays[name])}" for name in STATS)
            rows.append(("delay before later turns", delays))
        if self.unknown_lengths:
            rows.append(("turns of unknown length", f"{self.unknown_lengths:,} (verbatim payloads)"))
        if self.span_s is not None:  # timed
            rows.append(("time span", _seconds_text(self.span_s)))
            rows.append(("request rate", f"{self.request_rate:,.2f} req/s" if self.request_rate is not None else "n/a"))
        else:
            rows.append(("time span", "untimed (replayed by concurrency)"))
        if self.reusable_prefix_share is not None:
            rows.append(("reusable prefix share", f"{self.reusable_prefix_share:.1%} (unbounded cache)"))
        if self.session_history_share is not None:
            rows.append(("session history share", f"{self.session_history_share:.1%}"))
        if self.shared_prefix_share is not None:
            rows.append(("shared prefix share", f"{self.shared_prefix_share:.1%} (prefix groups, unbounded cache)"))
        return rows


def describe(workload: Workload, *, token_block_size: int = DEFAULT_TOKEN_BLOCK) -> WorkloadStats:
    """Compute :class:`WorkloadStats` for ``workload``."""
    turns = [turn for _, _, turn in workload.turns()]
    inputs = [t.input_tokens for t in turns if t.input_tokens is not None]
    outputs = [t.output_tokens for t in turns if t.output_tokens is not None]
    thoughts = [t.reasoning_tokens for t in turns if t.reasoning_tokens is not None]
    delays = [turn.delay_s for session in workload.sessions for turn in session.turns[1:]]
    arrivals = list(request_arrivals(workload))
    span = (max(arrivals) - min(arrivals)) if arrivals else 0.0
    history = 0
    for session in workload.sessions:
        for index, (prev, turn) in enumerate(pairwise(session.turns), start=1):
            if isinstance(turn.prompt, Synthetic) and turn.prompt.extends_previous:
                if prev.input_tokens is None or prev.output_tokens is None:
                    raise LLMReplayError(
                        f"session {session.id!r} turn {index}: extends a turn of unknown length (a verbatim payload)"
                    )
                history += prev.input_tokens + prev.output_tokens
    return WorkloadStats(
        format=workload.format,
        sessions=len(workload.sessions),
        requests=len(turns),
        turns_per_session=_stats([len(s.turns) for s in workload.sessions], ("mean", "min", "max")),
        input_tokens=_stats(inputs, STATS),
        output_tokens=_stats(outputs, STATS),
        reasoning_tokens=_stats(thoughts, STATS),
        reasoning_turns=len(thoughts),
        later_turn_delays=_stats(delays, STATS),
        unknown_lengths=len(turns) - len(inputs),
        timed=workload.timed,
        span_s=span if workload.timed else None,
        request_rate=(len(turns) / span if span > 0 else None) if workload.timed else None,
        reusable_prefix_share=reusable_prefix_share(workload, token_block_size=token_block_size),
        session_history_share=history / sum(inputs) if history and inputs else None,
        shared_prefix_share=shared_prefix_share(workload),
    )


def unit_warning(workload: Workload, time_units: str) -> str | None:
    """A warning when a timed ``workload`` of at least :data:`MIN_RATE_REQUESTS` requests arrives
    at a mean rate over :data:`MAX_PLAUSIBLE_RATE`, ending in ``time_units`` (the format's time
    fields, their unit, what a unit mix-up does), else ``None``."""
    if not workload.timed:
        return None
    arrivals = list(request_arrivals(workload))
    span = max(arrivals) - min(arrivals)
    if len(arrivals) < MIN_RATE_REQUESTS or span <= 0 or len(arrivals) / span <= MAX_PLAUSIBLE_RATE:
        return None
    return f"{len(arrivals):,} requests arrive within {span:.3g} s ({len(arrivals) / span:,.0f} req/s): {time_units}"


def request_arrivals(workload: Workload) -> Iterable[float]:
    """Each request's earliest arrival: its session's arrival plus the delays up to its turn (or
    its own due time after the session's start, ``Turn.due_s``)."""
    for session in workload.sessions:
        arrival = session.arrival_s
        for turn in session.turns:
            arrival = session.arrival_s + turn.due_s if turn.due_s is not None else arrival + turn.delay_s
            yield arrival


def reusable_prefix_share(workload: Workload, *, token_block_size: int = DEFAULT_TOKEN_BLOCK) -> float | None:
    """Share of hash-id/token-id prompt tokens an unbounded prefix cache could serve (see above);
    ``None`` when the workload has no such prompts."""
    seen: set[int] = set()
    reusable = total = 0
    for session, index, turn in workload.turns():
        prompt = turn.prompt
        if isinstance(prompt, HashBlocks):
            if turn.input_tokens is None:
                raise LLMReplayError(f"session {session.id!r} turn {index}: no input length")
            blocks: Iterable = prompt.hash_ids
            size, length = prompt.block_size, turn.input_tokens
        elif isinstance(prompt, TokenIds):
            ids = prompt.ids
            size, length = token_block_size, len(ids)
            blocks = (ids[i : i + size] for i in range(0, len(ids) - size + 1, size))
        else:
            continue
        total += length
        chain, hit_blocks, missed = 0, 0, False
        for block in blocks:
            chain = hash((chain, block))
            if not missed and chain in seen:
                hit_blocks += 1
            else:
                missed = True
                seen.add(chain)
        reusable += min(hit_blocks * size, length)
    return reusable / total if total else None


def shared_prefix_share(workload: Workload) -> float | None:
    """Share of all prompt tokens that synthetic prompts take from a prefix group an earlier
    prompt already sent (see above); ``None`` when no prompt has a prefix group."""
    longest: dict[int, int] = {}  # group -> the longest prefix sent so far
    reused = total = 0
    for _, _, turn in workload.turns():
        total += turn.input_tokens or 0
        prompt = turn.prompt
        if not isinstance(prompt, Synthetic) or prompt.prefix_group is None or turn.input_tokens is None:
            continue
        prefix = min(prompt.prefix_tokens, turn.input_tokens)
        reused += min(prefix, longest.get(prompt.prefix_group, 0))
        longest[prompt.prefix_group] = max(prefix, longest.get(prompt.prefix_group, 0))
    return reused / total if longest and total else None


def _stats(values: list[int] | list[float], names: tuple[str, ...]) -> dict[str, float] | None:
    if not values:
        return None
    array = np.asarray(values, dtype=float)
    table = {"mean": array.mean(), "min": array.min(), "max": array.max()}
    for name in names:
        if name.startswith("p"):
            table[name] = float(np.percentile(array, int(name[1:])))
    return {name: float(table[name]) for name in names}


def _seconds_text(seconds: float) -> str:
    """``12.3 s`` from a second on; three significant digits below (``0.0012 s``, not ``0.0 s``)."""
    return f"{seconds:,.1f} s" if seconds >= 1 else f"{seconds:.3g} s"


def _stats_text(stats: dict[str, float] | None, names: tuple[str, ...]) -> str:
    if stats is None:
        return "n/a"
    return "  ".join(f"{name} {stats[name]:,.{1 if name == 'mean' else 0}f}" for name in names)
