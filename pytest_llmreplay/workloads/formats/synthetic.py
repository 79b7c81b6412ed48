"""Synthetic workloads: generated from a few numbers, seeded and deterministic.

In code, ``generate(SyntheticSpec(...))``; as a file, a YAML or JSON spec under ``synthetic:``::

    synthetic:
      sessions: 200                 # sessions to generate (= requests when turns is 1)
      input_tokens: {dist: normal, mean: 1024, std: 256}
      first_input_tokens: 8000      # optional: turn 1's length, when it differs (agents)
      output_tokens: 128
      reasoning_tokens: {dist: lognormal, mean: 900, std: 600}   # optional: thinking before each answer
      rate: 8                       # Poisson arrivals, sessions/s (or interval: seconds apart)
      turns: {dist: uniform, min: 1, max: 4}
      delay: {dist: uniform, min: 0.5, max: 2.0}   # seconds between turns
      shared_prefix_ratio: 0.5      # share of the first prompt taken from its group's prefix
      prefix_groups: 4
      seed: 7

A length is an integer or a distribution: ``{dist: fixed, value}``, ``{dist: uniform, min, max}``
(inclusive), ``{dist: normal, mean, std}`` or ``{dist: lognormal, mean, std}`` (mean and std of
the lengths themselves), each with optional ``min``/``max`` clamps; lengths are rounded and at
least 1 (a length or turn count that can never round to 1 or more is an error). ``delay`` takes the same forms in seconds (>= 0, not rounded). Turn 1 of a session has
``first_input_tokens`` tokens (default: drawn from ``input_tokens``), its first ``floor(shared_prefix_ratio * input)`` from the session's
prefix group (groups drawn uniformly); turn k > 1 extends turn k-1 by ``input_tokens`` new tokens.
Without ``rate`` or ``interval`` the workload is untimed (replayed by concurrency).
``reasoning_tokens`` (a length, at least 0 here) is a reasoning model's thinking before each
answer of ``output_tokens``: a turn's output is both (``max_tokens`` covers both, as a reasoning
model's does), the first ``reasoning_tokens`` of it reasoning (``Turn.reasoning_tokens``, which
the simulator streams as reasoning; a later turn's prompt holds the whole previous response).
A key given twice (``sessions:`` twice, or ``synthetic:`` twice) is an error naming its line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from ...errors import WorkloadError
from ..workload import MAX_REQUESTS, MAX_TOKENS, Session, Synthetic, Turn, Workload, check_limits
from ._text import read_text
from ._yaml import YamlProblem, load_yaml
from .distribution import Distribution, Length, check_number, drawn_text, parse_distribution

NAME = "synthetic"


@dataclass(frozen=True)
class SyntheticSpec:
    """The parameters of a synthetic workload (see the module docstring)."""

    sessions: int = 100
    input_tokens: Length = 512
    first_input_tokens: Length | None = None
    output_tokens: Length = 128
    reasoning_tokens: Length | None = None
    rate: float | None = None
    interval: float | None = None
    turns: Length = 1
    delay: Length = 0.0
    shared_prefix_ratio: float = 0.0
    prefix_groups: int = 1
    seed: int = 0


def detect(first_line: str) -> bool:
    """A YAML ``synthetic:`` mapping or a JSON object whose first key is ``"synthetic"``."""
    return re.match(r'\s*(synthetic:|\{\s*"synthetic"\s*:)', first_line) is not None


def load(path: str | Path) -> Workload:
    """Generate the workload a spec file describes."""
    path = Path(path)
    try:
        document = load_yaml(read_text(path))
    except YamlProblem as exc:
        reason = exc.reason if exc.duplicate else f"invalid YAML/JSON: {exc.reason}"
        raise WorkloadError(reason, path=path, line=exc.line, column=exc.column) from None
    if not isinstance(document, dict) or set(document) != {"synthetic"} or not isinstance(document["synthetic"], dict):
        raise WorkloadError("expected one top-level key 'synthetic' holding a mapping of parameters", path=path)
    known = {f.name for f in fields(SyntheticSpec)}
    for key in document["synthetic"]:
        if key not in known:
            raise WorkloadError(
                f"unknown parameter; expected one of {', '.join(sorted(known))}", path=path, field=f"synthetic.{key}"
            )
    return generate(SyntheticSpec(**document["synthetic"]), source=path)


def generate(spec: SyntheticSpec, *, source: str | Path | None = None) -> Workload:
    """The workload ``spec`` describes; the same spec always gives the same workload."""
    where = {"path": source}
    sessions = _check_int(spec.sessions, "sessions", 1, where)
    groups = _check_int(spec.prefix_groups, "prefix_groups", 1, where)
    seed = _check_int(spec.seed, "seed", 0, where)
    ratio = check_number(spec.shared_prefix_ratio, "synthetic.shared_prefix_ratio", where, high=1.0)
    if spec.rate is not None and spec.interval is not None:
        raise WorkloadError("give rate or interval, not both", field="synthetic.rate", path=source)
    rate = check_number(spec.rate, "synthetic.rate", where, positive=True) if spec.rate is not None else None
    interval = check_number(spec.interval, "synthetic.interval", where) if spec.interval is not None else None
    inputs_d, outputs_d, turns_d, delay_d = (
        parse_distribution(value, f"synthetic.{name}", where)
        for value, name in (
            (spec.input_tokens, "input_tokens"),
            (spec.output_tokens, "output_tokens"),
            (spec.turns, "turns"),
            (spec.delay, "delay"),
        )
    )
    for given, name, what in (
        (inputs_d, "input_tokens", "prompt token"),
        (outputs_d, "output_tokens", "output token"),
        (turns_d, "turns", "turn"),
    ):
        if given.highest() <= 0.5:  # counts are rounded (half to even) and raised to 1: none would silently be 1
            raise WorkloadError(
                f"gives at most {given.highest():g}; expected at least 1 {what} per {'session' if name == 'turns' else 'request'}",
                field=f"synthetic.{name}",
                path=source,
            )

    first_d, thought_d = (
        parse_distribution(value, f"synthetic.{name}", where) if value is not None else None
        for value, name in (
            (spec.first_input_tokens, "first_input_tokens"),
            (spec.reasoning_tokens, "reasoning_tokens"),
        )
    )
    if first_d is not None and first_d.highest() <= 0.5:  # as input_tokens: never silently 1
        raise WorkloadError(
            f"gives at most {first_d.highest():g}; expected at least 1 prompt token per session",
            field="synthetic.first_input_tokens",
            path=source,
        )
    rng = np.random.default_rng(seed)
    if sessions > MAX_REQUESTS:
        raise WorkloadError(
            f"must be at most {MAX_REQUESTS:,}, got {sessions:,}", field="synthetic.sessions", path=source
        )
    turn_counts = turns_d.sample(rng, sessions, integer=True)
    total = int(turn_counts.sum())
    if total > MAX_REQUESTS:
        raise WorkloadError(
            f"{drawn_text(total)} requests in all is over the limit of {MAX_REQUESTS:,}",
            field="synthetic.turns",
            path=source,
        )
    if rate is not None:
        arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0 / rate, sessions - 1))))
    else:
        arrivals = np.arange(sessions) * (interval or 0.0)
    group_of = rng.integers(0, groups, sessions)
    # tolist() of 1-D arrays: lists of Python ints or floats (numpy's stubs cannot see the dimension)
    new_tokens = cast(list[int], inputs_d.sample(rng, total, integer=True).tolist())
    out_tokens = cast(list[int], outputs_d.sample(rng, total, integer=True).tolist())
    delays = cast(list[float], delay_d.sample(rng, total, integer=False).tolist())
    firsts = cast(list[int], first_d.sample(rng, sessions, integer=True).tolist()) if first_d is not None else None
    thoughts = (  # drawn last: a spec without reasoning draws what it drew before reasoning existed
        cast(list[int], thought_d.sample(rng, total, integer=True, minimum=0).tolist())
        if thought_d is not None
        else [0] * total
    )
    out_tokens = [answer + thought for answer, thought in zip(out_tokens, thoughts, strict=True)]
    for name, lengths in (
        ("input_tokens", new_tokens),
        ("output_tokens", out_tokens),
        ("first_input_tokens", firsts or [0]),
    ):
        if max(lengths, default=0) > MAX_TOKENS:
            raise WorkloadError(
                f"draws {drawn_text(max(lengths))} tokens, over the limit of {MAX_TOKENS:,} (no model's context is longer)",
                field=f"synthetic.{name}",
                path=source,
            )

    out: list[Session] = []
    k = 0
    # turns are frozen: equal ones are one object (a fixed-length spec makes one turn for all)
    turn_of: dict[tuple[Any, ...], Turn] = {}
    alone, extending = Synthetic(), Synthetic(extends_previous=True)
    counts, starts = cast(list[int], turn_counts.tolist()), cast(list[float], arrivals.tolist())
    group_list = cast(list[int], group_of.tolist())
    for index in range(sessions):
        turns: list[Turn] = []
        length = 0
        for t in range(counts[index]):
            if t == 0:
                length = firsts[index] if firsts is not None else new_tokens[k]
                key: tuple[Any, ...] = (length, out_tokens[k], group_list[index] if ratio > 0 else None, thoughts[k])
                found = turn_of.get(key)
                if found is None:
                    prompt = Synthetic(group_list[index], int(ratio * length)) if ratio > 0 else alone
                    found = turn_of[key] = _with_reasoning(Turn(length, out_tokens[k], prompt), thought_d, thoughts[k])
                turn = found
            else:  # the previous prompt + its response + new tokens
                length += out_tokens[k - 1] + new_tokens[k]
                turn = _with_reasoning(Turn(length, out_tokens[k], extending, delays[k]), thought_d, thoughts[k])
            turns.append(turn)
            k += 1
        out.append(Session(f"session{index}", starts[index], tuple(turns)))
    timed = rate is not None or interval is not None
    workload = Workload(tuple(out), format=NAME, source=str(source) if source else None, timed=timed)
    check_limits(workload, source)  # turns that grow past the limit, arrivals at a tiny rate
    return workload


def _with_reasoning(turn: Turn, drawn: Distribution | None, thought: int) -> Turn:
    """``turn`` with its reasoning tokens when the spec draws them."""
    return replace(turn, reasoning_tokens=thought) if drawn is not None else turn


def _check_int(value: Any, name: str, minimum: int, where: Mapping[str, Any]) -> int:
    if type(value) is not int or value < minimum:
        raise WorkloadError(f"must be an integer >= {minimum}, got {value!r}", field=f"synthetic.{name}", **where)
    return value
