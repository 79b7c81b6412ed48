"""Per-request and one-turn-session metrics of many records at once, as flat numpy arrays, and
the complete sessions among records (:func:`complete_sessions`), for
:attr:`~pytest_llmreplay.metrics.result.Result.summary` (a dict per request cost more than the
statistics over 100,000 requests).

Each array holds, per record, the value that :func:`~pytest_llmreplay.metrics.result.request_values`
(or :func:`~pytest_llmreplay.metrics.result.session_values`, for a complete session of one turn)
gives, NaN where that gives None, computed with the same floating-point operation on the same
operands (a subtraction of two times, a division by ``output_tokens - 1``), so every value is
bit for bit the one of the per-record functions; their statistics
(:func:`~pytest_llmreplay.metrics.result.stats`, which sorts the values first) do not depend on
the order of the values, so the summary is the same too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter

import numpy as np

from ..replayer.records import RequestRecord
from .reasoning import answer_start


def column(records: Sequence[RequestRecord], name: str) -> np.ndarray:
    """Field ``name`` of every record as floats (None -> NaN)."""
    return np.array(list(map(attrgetter(name), records)), dtype=float)


def _divided(numerator: np.ndarray, denominator: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``numerator / denominator`` where ``where``, else NaN."""
    out = np.full(len(numerator), np.nan)
    np.divide(numerator, denominator, out=out, where=where)
    return out


def request_columns(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """``ttft``, ``tpot``, ``latency``, ``queue``, ``prompt_tokens``, ``cached_tokens`` and
    ``output_tokens`` of ``records`` (module docstring: :func:`~pytest_llmreplay.metrics.result.request_values`'s)."""
    sent = column(records, "sent_s")
    ttft = column(records, "first_token_s") - sent
    latency = column(records, "end_s") - sent
    outputs = column(records, "output_tokens")
    streamed = outputs - column(records, "unstreamed_tokens")
    chunks = np.fromiter((len(r.chunk_times) for r in records), dtype=np.int64, count=len(records))
    return {
        "ttft": ttft,
        "tpot": _divided(latency - ttft, streamed - 1, (streamed > 1) & (chunks > 1)),
        "latency": latency,
        "queue": column(records, "queue_s"),
        "prompt_tokens": np.array(
            [r.prompt_tokens if r.prompt_tokens is not None else r.planned_prompt_tokens for r in records], dtype=float
        ),
        "cached_tokens": column(records, "cached_tokens"),
        "output_tokens": outputs,
    }


def schedule_lag_column(records: Sequence[RequestRecord]) -> np.ndarray:
    """sent - scheduled of every record (NaN where it was never sent)."""
    return column(records, "sent_s") - column(records, "scheduled_s")


def one_turn_session_columns(
    records: Sequence[RequestRecord], requests: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The session metrics of complete one-turn sessions, ``records`` (each its session's only
    turn), given their :func:`request_columns` ``requests``: ``session_latency`` is the latency,
    ``ttfat`` the first answer token - sent, ``decode_tps`` (streamed output - 1) / (last token -
    first token) where that time is > 0, ``cache_hit_rate`` cached / prompt where both are reported
    and prompt > 0, ``eligible_cache_hit_rate`` none (no earlier turn), and
    ``output_tokens_per_session`` the output tokens."""
    outputs, cached, prompts = requests["output_tokens"], requests["cached_tokens"], requests["prompt_tokens"]
    streamed = outputs - column(records, "unstreamed_tokens")
    decode_time = column(records, "last_token_s") - column(records, "first_token_s")
    answered = np.array([answer_start(r) for r in records], dtype=float)
    return {
        "session_latency": requests["latency"],
        "ttfat": answered - column(records, "sent_s"),
        "decode_tps": _divided(streamed - 1, decode_time, (streamed > 1) & (decode_time > 0)),
        "cache_hit_rate": _divided(cached, prompts, prompts > 0),  # a NaN (not reported) stays NaN
        "eligible_cache_hit_rate": np.full(len(records), np.nan),
        "output_tokens_per_session": outputs,
    }


def complete_sessions(records: Iterable[RequestRecord]) -> list[list[RequestRecord]]:
    """The records of every complete session among ``records`` (each of its turns there, ok and
    not warm-up), in turn order; sessions in the order of their first record."""
    by_session: dict[int, list[RequestRecord]] = {}
    for record in records:
        by_session.setdefault(record.session_index, []).append(record)
    complete = []
    for turns in by_session.values():
        if len(turns) > 1:
            turns.sort(key=attrgetter("turn_index"))
            if len(turns) == turns[0].turns_in_session and all(r.status == "ok" and not r.warmup for r in turns):
                complete.append(turns)
        else:  # a flat trace's session: no sort, no generator
            only = turns[0]
            if only.turns_in_session == 1 and only.status == "ok" and not only.warmup:
                complete.append(turns)
    return complete
