"""Shared rules for writing a workload in a format: what it cannot express, said clearly.

A writer records every *loss* (something the target drops, e.g. arrival times, token ids) and
raises at once on what the target cannot express at all. Losses fail the conversion unless the
user allows them (``llmreplay convert --allow-loss``); then they come back as notes to print.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import LLMReplayError
from ..workload import Payload, PromptSource, Session, Synthetic, Workload
from ._compressed import open_for_writing


class Losses:
    """What a conversion to ``target`` drops, counted by reason."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.reasons: Counter[str] = Counter()

    def add(self, reason: str) -> None:
        self.reasons[reason] += 1

    def settle(self, allow_loss: bool) -> list[str]:
        """The notes to print; raises when there are losses the user did not allow."""
        notes = [f"{reason} ({count}x)" if count > 1 else reason for reason, count in self.reasons.items()]
        if notes and not allow_loss:
            raise LLMReplayError(
                f"converting to {self.target} would lose: "
                + "; ".join(notes)
                + ". Pass allow_loss=True to convert anyway"  # llmreplay convert: "Pass --allow-loss"
            )
        return notes


def cannot(target: str, session: Session, index: int | None, what: str) -> LLMReplayError:
    """The error for something ``target`` cannot express at all."""
    where = f"session {session.id!r}" + (f" turn {index}" if index is not None else "")
    return LLMReplayError(f"{target} cannot express {where}: {what}")


def known_lengths(target: str, session: Session, index: int) -> tuple[int, int]:
    """The input and output lengths of a turn, for targets that store lengths; a verbatim
    payload without them cannot be expressed."""
    turn = session.turns[index]
    if isinstance(turn.prompt, Payload) or turn.input_tokens is None or turn.output_tokens is None:
        raise cannot(target, session, index, "a verbatim payload without token counts")
    return turn.input_tokens, turn.output_tokens


def lengths_only(prompt: PromptSource) -> bool:
    """Whether a prompt is fully described by its length (synthetic, no prefix group)."""
    return isinstance(prompt, Synthetic) and prompt.prefix_group is None


def untimed_losses(workload: Workload, losses: Losses) -> None:
    """Record that an untimed workload's sessions all get time 0 in a target that needs times."""
    if not workload.timed and len(workload.sessions) > 1:
        losses.add("untimed workload: every session is written at time 0")


def reasoning_losses(workload: Workload, losses: Losses) -> None:
    """Record the loss of the turns' reasoning lengths for a target that has no field for them
    (their output lengths keep the reasoning)."""
    if any(turn.reasoning_tokens is not None for _, _, turn in workload.turns()):
        losses.add("reasoning lengths (the target has no field for them; output lengths still count them)")


def due_losses(workload: Workload, losses: Losses) -> None:
    """Record the loss of later turns' own times (``Turn.due_s``) for a target that only waits
    after the previous turn: such a turn is written to follow at once."""
    if any(turn.due_s is not None for _, _, turn in workload.turns()):
        losses.add("later turns' own times (each sent at its time or when the previous turn ends): they follow at once")


def tool_call_losses(workload: Workload, losses: Losses) -> None:
    """Record the loss of which turns end in a tool call, for a target that does not say."""
    if any(turn.tool_call for _, _, turn in workload.turns()):
        losses.add("tool calls (the target does not mark the turns that end in one)")


def arrival_losses(workload: Workload, losses: Losses) -> None:
    """Record the loss of arrival times for a target that has none."""
    if workload.timed and any(s.arrival_s for s in workload.sessions):
        losses.add("arrival times (the target has none; sessions are replayed by concurrency)")


def tidy(value: float, digits: int) -> int | float:
    """``value`` rounded to ``digits`` decimals (nanoseconds of the unit: no float noise such as
    0.35700000000000004 from ns round trips), as an integer when whole."""
    rounded = round(value, digits)
    return int(rounded) if rounded == int(rounded) else rounded


def write_json_lines(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write one compact JSON object a line (compressed when ``path`` ends in ``.gz`` or ``.zst``)."""
    with open_for_writing(path) as stream:
        for row in rows:
            stream.write(json.dumps(row, separators=(", ", ": ")) + "\n")


def payload_bodies(workload: Workload, target: str, losses: Losses) -> list[list[dict[str, Any]]]:
    """Every session's request bodies, for targets that hold only verbatim payloads; arrival
    times, delays and later turns' own times are losses."""
    arrival_losses(workload, losses)
    due_losses(workload, losses)
    sessions = []
    for session in workload.sessions:
        bodies = []
        for index, turn in enumerate(session.turns):
            if not isinstance(turn.prompt, Payload):
                raise cannot(
                    target,
                    session,
                    index,
                    "a prompt that is not a verbatim request body (only payload workloads convert to AIPerf)",
                )
            if turn.delay_s:
                losses.add("delays between turns")
            bodies.append(dict(turn.prompt.body))
        sessions.append(bodies)
    return sessions
