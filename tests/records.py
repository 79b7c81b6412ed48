"""Hand-made replay records and results for the metrics and report tests."""

from __future__ import annotations

from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.replayer.records import ReplayRun, RequestRecord


def rec(
    session: int,
    turn: int = 0,
    turns: int = 1,
    *,
    status: str = "ok",
    sent: float | None = None,
    scheduled: float | None = None,
    chunks: tuple[tuple[float, int], ...] = (),
    end: float | None = None,
    output: int | None = None,
    prompt: int | None = None,
    planned: int | None = None,
    cached: int | None = None,
    warmup: bool = False,
    error: str | None = None,
    queue: float | None = None,
    sid: str | None = None,
    notes: tuple[str, ...] = (),
    history: str | None = None,
) -> RequestRecord:
    """A record as the replay driver makes one: first/last token are the first/last chunk's time,
    output tokens the chunks' sum unless ``output`` gives the server's count; ``history``: where
    the previous answer in its prompt came from (``server``), None for a turn that sends none."""
    times = [t for t, _ in chunks]
    tokens = [n for _, n in chunks]
    return RequestRecord(
        session_id=sid or f"s{session}",
        session_index=session,
        turn_index=turn,
        turns_in_session=turns,
        status=status,
        scheduled_s=scheduled if scheduled is not None else (sent if sent is not None else 0.0),
        sent_s=sent,
        first_token_s=times[0] if times else None,
        last_token_s=times[-1] if times else None,
        end_s=end,
        chunk_times=times,
        chunk_tokens=tokens,
        planned_prompt_tokens=planned,
        prompt_tokens=prompt,
        cached_tokens=cached,
        output_tokens=sum(tokens) if output is None else output,
        error=error,
        warmup=warmup,
        queue_s=queue,
        notes=list(notes),
        history=history,
    )


def make(records, gpus=1, goodput=None, warnings=(), planned=None, duration=100.0) -> Result:
    run = ReplayRun(
        records=list(records),
        warnings=list(warnings),
        settings={},
        workload="w",
        endpoint="e",
        duration_s=duration,
        planned_requests=len(records) if planned is None else planned,
    )
    return Result(run, gpus=gpus, goodput=goodput or {})
