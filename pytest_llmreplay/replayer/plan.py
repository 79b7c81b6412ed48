"""What a replay sends and when, decided before anything is sent: :class:`ReplaySettings` (the
modes, limits, order and warm-up that :mod:`~pytest_llmreplay.replayer.driver`'s docstring
describes, checked against a workload), :func:`session_plan` (the sessions in the order they are
sent, cycled to ``max_requests``/``max_sessions``), :func:`arrival_offsets` (open-loop start
times), the warm-up marks, :class:`Part` (a share of the plan for one process of a run on
workers), and the prompt format a run sends (:func:`sent_prompt_format`)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from ..errors import LLMReplayError
from ..workloads.prompts import extends_previous
from ..workloads.workload import HashBlocks, Payload, Session, Synthetic, Workload
from .records import RequestRecord

if TYPE_CHECKING:
    from .endpoint_types import Endpoint

MODES = ("auto", "timestamps", "concurrency", "rate")
ARRIVALS = ("poisson", "constant")
ORDERS = ("sequential", "shuffled", "sampled")
PROMPT_FORMATS = ("text", "ids")
MAX_PLANNED = 10_000_000  # max_requests/max_sessions: a plan holds a session object per session it sends


@dataclass(frozen=True)
class ReplaySettings:
    """How to replay; see the module docstring. Durations in seconds."""

    mode: str = "auto"
    speedup: float = 1.0
    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    duration_s: float | None = None
    grace_s: float = 30.0
    max_requests: int | None = None
    max_sessions: int | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    order: str = "sequential"
    seed: int = 0
    prompt_format: str | None = None
    check_idle: bool = True
    tool_calls: bool = False

    def resolved_mode(self, workload: Workload) -> str:
        if self.mode != "auto":
            return self.mode
        if self.rate is not None:
            return "rate"
        return "concurrency" if self.concurrency is not None or not workload.timed else "timestamps"

    def validate(self) -> None:
        """Raise :class:`LLMReplayError` naming the first bad setting."""
        _choice("mode", self.mode, MODES)
        _choice("arrival", self.arrival, ARRIVALS)
        _choice("order", self.order, ORDERS)
        if self.prompt_format is not None:
            _choice("prompt_format", self.prompt_format, PROMPT_FORMATS)
        for name in ("speedup", "rate", "duration_s"):
            value = getattr(self, name)
            if (value is not None or name == "speedup") and not (_number(value) and value > 0):
                raise LLMReplayError(f"{name}: expected a number > 0, got {value!r}")
        for name in ("concurrency", "max_requests", "max_sessions"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise LLMReplayError(f"{name}: expected an integer >= 1, got {value!r}")
            if value is not None and name != "concurrency" and value > MAX_PLANNED:
                raise LLMReplayError(
                    f"{name}: expected at most {MAX_PLANNED:,} (the plan holds every request it sends; "
                    f"for a longer soak, give a duration), got {value:,}"
                )
        for name in ("grace_s", "warmup_s", "warmup_requests"):
            value = getattr(self, name)
            if not (_number(value) and value >= 0):
                raise LLMReplayError(f"{name}: expected a number >= 0, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise LLMReplayError(f"seed: expected an integer >= 0, got {self.seed!r}")
        if not isinstance(self.tool_calls, bool):
            raise LLMReplayError(f"tool_calls: expected true or false, got {self.tool_calls!r}")
        if self.mode == "rate" and self.rate is None:
            raise LLMReplayError("rate: mode 'rate' needs a rate (sessions per second)")

    def check_for(self, workload: Workload) -> None:
        """Raise :class:`LLMReplayError` for settings that contradict the mode they resolve to
        on ``workload`` (a rate or an arrival other than the default outside rate mode, an order
        in timestamps mode, timestamps mode on a trace without times). An arrival it ignores was
        stored all the same, and results alike in all but it were "not compared"."""
        mode = self.resolved_mode(workload)
        if self.rate is not None and mode != "rate":
            raise LLMReplayError(f"rate: applies to rate mode; mode is {mode!r}")
        if self.arrival != ReplaySettings.arrival and mode != "rate":
            raise LLMReplayError(f"arrival: applies to rate mode (the spacing of its sessions); mode is {mode!r}")
        if mode == "timestamps" and self.order != "sequential":
            raise LLMReplayError(
                f"order: timestamps mode{' (picked by auto: the trace is timed)' if self.mode == 'auto' else ''} replays sessions "
                "in trace order; order applies to concurrency and rate modes"
            )
        if mode == "timestamps" and not workload.timed:
            raise LLMReplayError(
                f"mode: timestamps needs arrival times, and format {workload.format!r} has none; use concurrency or rate mode"
            )

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _number(value: object) -> bool:
    """A real number (not a bool, not a string): what a numeric setting must be."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise LLMReplayError(f"{name}: expected one of {', '.join(allowed)}, got {value!r}")


@dataclass(frozen=True)
class Part:
    """A part of a run planned elsewhere (module docstring): ``sessions`` with their ``indices``
    in the whole run's plan and their start ``offsets`` (seconds from the start; None in
    concurrency mode), to run from the clock reading ``start_at``."""

    indices: tuple[int, ...]
    sessions: tuple[Session, ...]
    offsets: tuple[float, ...] | None
    start_at: float


def _cycle_period(sessions: list[Session]) -> float:
    """How much later each pass of a cycled timed trace arrives (:func:`session_plan`)."""
    first, last = min(s.arrival_s for s in sessions), max(s.arrival_s for s in sessions)
    if last <= first:
        raise LLMReplayError(
            "max_requests/max_sessions: cycling a timed trace whose sessions all arrive at once has no pace to repeat; use concurrency or rate mode"
        )
    return (last - first) * len(sessions) / (len(sessions) - 1)


def arrival_offsets(plan: list[Session], mode: str, settings: ReplaySettings) -> list[float] | None:
    """Start offsets (seconds from the start) of the planned sessions: ``arrival_s / speedup``
    in timestamps mode, seeded Poisson or constant gaps at ``rate`` in rate mode; None in
    concurrency mode (sessions start as others end)."""
    if mode == "concurrency":
        return None
    if mode == "timestamps":
        return [session.arrival_s / settings.speedup for session in plan]
    rate = settings.rate
    if rate is None:  # ReplaySettings.validate refuses this
        raise LLMReplayError("rate: mode 'rate' needs a rate (sessions per second)")
    rng = random.Random(settings.seed)
    offsets, t = [], 0.0
    for _ in plan:
        offsets.append(t)
        t += rng.expovariate(rate) if settings.arrival == "poisson" else 1.0 / rate
    return offsets


def check_warmup(settings: ReplaySettings, planned_requests: int) -> None:
    """Raise :class:`LLMReplayError` when the warm-up would take every request of the run: its
    ``warmup_requests`` all the run sends, or its ``warmup_s`` the whole of its ``duration_s``
    (every request scheduled in it: a test measured nothing and passed)."""
    if settings.warmup_requests and settings.warmup_requests >= planned_requests:
        raise LLMReplayError(
            f"warmup_requests: {settings.warmup_requests:,} is not fewer than the {planned_requests:,} requests this run "
            "sends at most; nothing would be measured"
        )
    if settings.warmup_s and settings.duration_s is not None and settings.warmup_s >= settings.duration_s:
        raise LLMReplayError(
            f"warmup_s: {settings.warmup_s:g} s is not less than the run's duration ({settings.duration_s:g} s): every request "
            "is scheduled in the warm-up; nothing would be measured"
        )


def mark_warmup(records: list[RequestRecord], settings: ReplaySettings) -> None:
    """Flag the first ``warmup_requests`` records (``records`` in schedule order) and every one
    scheduled in the first ``warmup_s`` seconds as warm-up."""
    for position, record in enumerate(records):
        record.warmup = position < settings.warmup_requests or record.scheduled_s < settings.warmup_s


def repeat_of(session: Session, copy: int) -> Session:
    """``session`` run for the ``copy``-th time (0: itself) in a cycled or sampled plan: named
    ``ID#copy``, so that its own prompt tokens (generated from its id) are new, and its hash-id
    blocks renamed (the ``stable_hash`` of ``copy`` and each id: blocks shared between sessions of
    one pass stay shared, none with a pass before), so a repeat hits the cache only where the
    workload shares between sessions (a synthetic prefix group, a system prompt), never on its
    own earlier run: that inflated the cache hit rate to 48% on a trace that shares nothing. Token
    ids and verbatim payloads are the workload's own text and repeat as they are."""
    from ..workloads.prompts import stable_hash  # numpy's: loaded only by a replay that repeats

    if not copy:
        return session
    turns = tuple(
        replace(
            turn,
            prompt=replace(turn.prompt, hash_ids=tuple(stable_hash("repeat", copy, h) for h in turn.prompt.hash_ids)),
        )
        if isinstance(turn.prompt, HashBlocks)
        else turn
        for turn in session.turns
    )
    return replace(session, id=f"{session.id}#{copy}", turns=turns)


def session_plan(workload: Workload, settings: ReplaySettings) -> list[Session]:
    """The sessions to run, in admission order, after order and count limits.

    Count limits take whole sessions until the count is reached, cycling when the workload is
    shorter; without a limit each session runs once (``sampled`` draws ``len(workload)``). In
    timestamps mode pass *p* of a cycle arrives ``p * period`` later, ``period`` = the trace's
    span of arrivals * n / (n - 1) for n sessions (the span plus one mean gap), so the passes
    follow each other at the trace's own pace. A session's every run after its first (a later
    pass, a later draw) is :func:`repeat_of` it: a new user, not the same prompts again.
    """
    sessions = list(workload.sessions)
    if not sessions:
        raise LLMReplayError("the workload holds no sessions")
    rng = random.Random(settings.seed)
    limited = settings.max_requests is not None or settings.max_sessions is not None
    period = _cycle_period(sessions) if limited and settings.resolved_mode(workload) == "timestamps" else 0.0

    def stream() -> Iterator[Session]:
        passes = 0
        drawn: dict[int, int] = {}  # sampled: how often each session was drawn
        while True:
            if settings.order == "sampled":
                index = rng.randrange(len(sessions))
                drawn[index] = drawn.get(index, -1) + 1
                yield repeat_of(sessions[index], drawn[index])
                continue
            batch = sessions[:]
            if settings.order == "shuffled":
                rng.shuffle(batch)
            if passes:
                batch = [replace(repeat_of(s, passes), arrival_s=s.arrival_s + passes * period) for s in batch]
            yield from batch
            passes += 1
            if not limited:
                return

    plan: list[Session] = []
    requests = 0
    for session in stream():
        if settings.max_sessions is not None and len(plan) >= settings.max_sessions:
            break
        if settings.max_requests is not None and requests >= settings.max_requests:
            break
        if not limited and settings.order == "sampled" and len(plan) >= len(sessions):
            break
        plan.append(session)
        requests += len(session.turns)
    return plan


def sent_prompt_format(settings: ReplaySettings, endpoint: Endpoint, plan: Sequence[Session]) -> str:
    """The prompt format a run sends and its settings store (the driver's docstring): ``text``
    on every API but completions, whatever was asked (a suite's ``prompt_format="ids"`` run with
    ``--llm-api chat`` sends what a run without it sends, and is compared with it); else the one
    asked, else the endpoint's preferred one, ``ids`` for ``keyed`` where keys would split a
    prefix (:func:`keyed_prefixes_split`)."""
    if endpoint.api != "completions":
        return "text"
    if settings.prompt_format is not None:
        return settings.prompt_format
    preferred: str = getattr(endpoint, "preferred_prompt_format", "text")
    return "ids" if preferred == "keyed" and keyed_prefixes_split(plan) else preferred


def keyed_prefixes_split(plan: Sequence[Session]) -> bool:
    """Whether keyed prompts would split a shared prefix in two: some turn extends the previous
    one (it goes as token ids, and so does the turn it extends) and some synthetic prompt shares
    a prefix group. A group's prefix named by its key in one turn and by its token ids in
    another is two prefixes to the simulator's cache, so the hits between them were lost (46.6%
    offline where the served simulator hit 51.6% on synthetic_chat): such a run sends ids."""
    extending = any(extends_previous(session, index) for session in plan for index in range(1, len(session.turns)))
    return extending and any(
        isinstance(turn.prompt, Synthetic) and turn.prompt.prefix_group is not None and turn.prompt.prefix_tokens
        for session in plan
        for turn in session.turns
    )


def no_tool_call_turns(settings: ReplaySettings, plan: Sequence[Session]) -> str | None:
    """The warning for ``tool_calls`` asked on a plan none of whose turns ends in a tool call (a
    synthetic spec, a flat trace: the option changed nothing and said nothing); None when some
    turn does, or a verbatim payload may carry its own ``tools``."""
    if not settings.tool_calls:
        return None
    turns = [turn for session in plan for turn in session.turns]
    if any(turn.tool_call or isinstance(turn.prompt, Payload) for turn in turns):
        return None
    return (
        "tool_calls: no turn of this workload ends in a tool call (trie and LLMServingSim agentic traces "
        "mark them), so none was asked for"
    )
