"""``llmreplay calibrate``: measure a live server with a short, bounded sweep; write a profile.

The sweep, through the replay driver and :class:`~pytest_llmreplay.replayer.endpoints.HTTPEndpoint`
(streaming completions, ``ignore_eos``, fresh prompts so nothing hits the prefix cache):

- prefill: for each length ``L`` in ``prefill_tokens``, ``repeats`` single requests one at a
  time with ``max_tokens`` 1, after one warm-up request of the same shape that is not measured
  (it opens the connection and pays the server's first-request costs); the point is (median of
  the server's ``prompt_tokens``, median TTFT);
- decode: for each batch size ``B`` in ``decode_seqs``, ``B`` requests at once, each
  ``decode_prompt_tokens`` in and ``decode_output_tokens`` out; the point is (B, median ITL of
  all their tokens), repeated ``repeats`` times and the median taken.

The points become a ``table`` timing profile (interpolated, clamped; see
:class:`~.timing.TableTiming`). The engine settings cannot be seen from outside except where the
server exports vLLM's ``vllm:cache_config_info`` (block size, GPU blocks) on ``/metrics``; the
rest come from the options (vLLM's defaults otherwise) and the profile's notes say which.
``budget_s`` bounds the whole sweep: points not reached by then are left out (at least one of
each kind is required), and one line says which (to ``warn``, and in the profile's notes).
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from ..metrics.result import itl, ttft
from ..replayer.clock import WallClock
from ..replayer.driver import replay
from ..replayer.endpoints import HTTPEndpoint, describe_error
from ..replayer.plan import ReplaySettings
from ..replayer.records import RequestRecord
from ..workloads.prompts import PromptFactory
from ..workloads.workload import Session, Synthetic, Turn, Workload
from .profile import parse_profile

VLLM_DEFAULTS = {"block_size": 16, "max_num_seqs": 256, "max_num_batched_tokens": 8192}


@dataclass(frozen=True)
class CalibrationPlan:
    """What the sweep measures; ``engine`` overrides what the server does not tell."""

    prefill_tokens: tuple[int, ...] = (128, 512, 1024, 2048, 4096)
    decode_seqs: tuple[int, ...] = (1, 4, 16, 64)
    decode_prompt_tokens: int = 64
    decode_output_tokens: int = 64
    repeats: int = 3
    budget_s: float = 300.0
    engine: dict[str, int] = field(default_factory=dict)

    def validate(self) -> None:
        for name in ("prefill_tokens", "decode_seqs"):
            points = getattr(self, name)
            if (
                not points
                or any(not isinstance(p, int) or p < 1 for p in points)
                or list(points) != sorted(set(points))
            ):
                raise LLMReplayError(f"{name}: expected increasing integers >= 1, got {list(points)}")
        for name in ("decode_prompt_tokens", "repeats"):
            if getattr(self, name) < 1:
                raise LLMReplayError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if self.decode_output_tokens < 8:
            raise LLMReplayError(
                f"decode_output_tokens: expected at least 8 (ITL needs tokens), got {self.decode_output_tokens}"
            )
        if not self.budget_s > 0:
            raise LLMReplayError(f"budget_s: expected seconds > 0, got {self.budget_s}")


def calibrate(
    endpoint: HTTPEndpoint,
    prompts: PromptFactory,
    plan: CalibrationPlan,
    name: str,
    progress: Callable[[str], None] = lambda line: None,
    warn: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Run the sweep against ``endpoint``; the profile as a JSON-ready dict (checked by
    :func:`~.timing.parse_profile`). ``progress`` gets a line per point measured, ``warn`` one
    line when the budget ran out before every point was measured."""
    plan.validate()
    engine, engine_notes = _engine_settings(endpoint, plan)  # before the sweep: it may be missing
    deadline = time.monotonic() + plan.budget_s
    run_index = 0

    def records(count: int, input_tokens: int, output_tokens: int, concurrency: int, warmup: int = 0) -> list:
        """The ``count`` measured records of one run, after ``warmup`` unmeasured requests."""
        nonlocal run_index
        run_index += 1
        sessions = tuple(
            Session(f"calibrate-{run_index}-{i}", 0.0, (Turn(input_tokens, output_tokens, Synthetic()),))
            for i in range(warmup + count)
        )
        settings = ReplaySettings(concurrency=concurrency, seed=run_index, check_idle=False, warmup_requests=warmup)
        run = replay(Workload(sessions, "calibrate"), endpoint, prompts, settings, clock=WallClock())
        failed = [r for r in run.records if r.status != "ok"]
        if failed:
            raise LLMReplayError(f"calibrate: a request to {endpoint.url} failed: {failed[0].error}")
        return [r for r in run.records if not r.warmup]

    prefill: list[tuple[float, float]] = []
    for length in plan.prefill_tokens:
        if time.monotonic() > deadline and prefill:
            break
        done = records(plan.repeats, length, 1, 1, warmup=1)
        point = (
            statistics.median(r.prompt_tokens or length for r in done),
            statistics.median(_ttft(r, endpoint.url) * 1000 for r in done),
        )
        prefill.append(point)
        progress(f"prefill {point[0]:.0f} tokens: {point[1]:.2f} ms")
    decode: list[tuple[int, float]] = []
    for seqs in plan.decode_seqs:
        if time.monotonic() > deadline and decode:
            break
        medians = []
        for _ in range(plan.repeats):
            done = records(seqs, plan.decode_prompt_tokens, plan.decode_output_tokens, seqs)
            medians.append(statistics.median(gap for r in done for gap in itl(r)) * 1000)
        decode.append((seqs, statistics.median(medians)))
        progress(f"decode batch {seqs}: {decode[-1][1]:.3f} ms per step")
    cut = _cut_short(plan, len(prefill), len(decode))
    if cut:
        warn(cut)
    prefill = _increasing(prefill)
    profile = {
        "name": name,
        "description": f"Calibrated against {endpoint.url} (model {endpoint.model or 'served'}) on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "engine": engine,
        "timing": {
            "kind": "table",
            "prefill": {"tokens": [p[0] for p in prefill], "ms": [round(p[1], 4) for p in prefill]},
            "decode": {"seqs": [d[0] for d in decode], "ms": [round(d[1], 4) for d in decode]},
        },
        "sources": [
            f"llmreplay calibrate: prefill = median TTFT of {plan.repeats} single requests (max_tokens 1) per length, after one unmeasured warm-up; "
            f"decode = median ITL of B requests of {plan.decode_prompt_tokens} in / {plan.decode_output_tokens} out "
            f"at once (ignore_eos), median of {plan.repeats} repeats"
        ],
        "notes": engine_notes
        + ["TTFT includes the client's and the network's share (loopback: about a millisecond)."]
        + ([cut] if cut else []),
    }
    parse_profile(profile, origin="calibrated profile")  # the file must load
    return profile


def _cut_short(plan: CalibrationPlan, prefill_done: int, decode_done: int) -> str | None:
    """The line that says which points the budget left unmeasured (the sweep measured the first
    ``prefill_done`` lengths and ``decode_done`` batch sizes), or None when it measured all."""
    left = [
        f"{what} {', '.join(map(str, points[done:]))}"
        for what, points, done in (
            ("prefill lengths", plan.prefill_tokens, prefill_done),
            ("decode batch sizes", plan.decode_seqs, decode_done),
        )
        if done < len(points)
    ]
    if not left:
        return None
    return (
        f"calibration stopped at its budget of {plan.budget_s:g} s before measuring {' and '.join(left)}; the "
        f"profile holds the {prefill_done + decode_done} points measured (its table is clamped beyond them)"
    )


def _ttft(record: RequestRecord, url: str) -> float:
    """The TTFT of an ok calibration request, which must have sent a token."""
    value = ttft(record)
    if value is None:
        raise LLMReplayError(f"calibrate: a request to {url} answered without a token")
    return value


def _increasing(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Keep the first point of each prompt length, in increasing order (the table needs it)."""
    kept: list[tuple[float, float]] = []
    for tokens, ms in sorted(points):
        if not kept or tokens > kept[-1][0]:
            kept.append((tokens, ms))
    return kept


def _engine_settings(endpoint: HTTPEndpoint, plan: CalibrationPlan) -> tuple[dict[str, int], list[str]]:
    """Engine figures: options first, then vLLM's cache_config_info, then vLLM's defaults."""
    exported = _cache_config(endpoint)
    engine: dict[str, int] = {}
    notes = []
    for key in ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens"):
        if key in plan.engine:
            engine[key], origin = plan.engine[key], "given"
        elif key in exported:
            engine[key], origin = exported[key], "the server's vllm:cache_config_info"
        elif key in VLLM_DEFAULTS:
            engine[key], origin = VLLM_DEFAULTS[key], "vLLM's default (not visible from outside: check it)"
        else:
            raise LLMReplayError("calibrate: the server does not export vllm:cache_config_info; give --num-gpu-blocks")
        notes.append(f"engine.{key} = {engine[key]}: {origin}")
    context = _served_context(endpoint)
    if context is not None:  # else the profile serves what its KV cache holds (Profile.max_model_len)
        engine["max_model_len"] = context
        notes.append(f"engine.max_model_len = {context}: the server's /v1/models")
    return engine, notes


def _served_context(endpoint: HTTPEndpoint) -> int | None:
    """``max_model_len`` of the served model in the server's ``GET /v1/models`` (vLLM's, SGLang's
    and our simulator's list it; the endpoint's model, else the first), or None."""
    import httpx

    try:
        listed = httpx.get(f"{endpoint.url}/v1/models", timeout=min(endpoint.timeout_s, 10.0)).json()["data"]
        entry = next((m for m in listed if m.get("id") == endpoint.model), listed[0])
        value = entry.get("max_model_len")
    except (httpx.HTTPError, ValueError, RecursionError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _cache_config(endpoint: HTTPEndpoint) -> dict[str, int]:
    """``block_size`` and ``num_gpu_blocks`` from ``vllm:cache_config_info`` labels, if any;
    :class:`LLMReplayError` when the server does not answer at all."""
    import httpx

    try:
        text = httpx.get(f"{endpoint.url}/metrics", timeout=min(endpoint.timeout_s, 10.0)).text
    except httpx.TransportError as exc:
        raise LLMReplayError(
            f"calibrate: {endpoint.url}: no answer to GET /metrics ({describe_error(exc)}); is the server running?"
        ) from None
    except httpx.HTTPError:
        return {}
    line = next((line for line in text.splitlines() if line.startswith("vllm:cache_config_info{")), None)
    if line is None:
        return {}
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    return {key: int(labels[key]) for key in ("block_size", "num_gpu_blocks") if labels.get(key, "").isdigit()}


def write_profile(profile: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(profile, indent=2) + "\n")
