"""What a replay measured: one :class:`RequestRecord` per request, and the :class:`ReplayRun`
that holds them with the run's settings, warnings and span (one :class:`WorkerOutcome` per worker
process when the run was split over workers). Made by :mod:`~pytest_llmreplay.replayer.driver` (and merged
by :mod:`~pytest_llmreplay.replayer.workers`); read by :mod:`~pytest_llmreplay.metrics.result`, which need not
know where records came from.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request. Times are seconds from the start of the run
    (None: it never happened); ``cached_tokens`` is None when the server does not report it.

    ``status``: ``ok``, ``failed`` (``error`` says why: ``kind: detail``) or ``cancelled`` (in
    flight when the duration limit's grace ran out). ``history``: where the previous response
    in this prompt came from (``server``/``planned``), None for turns that do not extend one.

    Reasoning apart from the answer (None: not seen; a record made before these fields existed
    has none, and its first token counts as its first answer token):
    ``first_reasoning_s``/``last_reasoning_s`` and ``first_answer_s``/``last_answer_s``, the
    first and last chunk of each kind (an answer is content or a tool call);
    ``reasoning_tokens``: of ``output_tokens``, those that were reasoning (the server's
    ``completion_tokens_details.reasoning_tokens``, else counted in the stream);
    ``unstreamed_tokens``: of those, the ones no chunk carried (hidden reasoning, a summary of
    thinking in its place: :func:`~pytest_llmreplay.metrics.reasoning.unstreamed_reasoning`);
    ``tool_calls``: how many tool calls the response made.
    """

    session_id: str
    session_index: int
    turn_index: int
    turns_in_session: int
    status: str
    scheduled_s: float
    sent_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    end_s: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    planned_prompt_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    planned_output_tokens: int | None = None
    output_tokens: int = 0
    error: str | None = None
    history: str | None = None
    warmup: bool = False
    queue_s: float | None = None
    notes: list[str] = field(default_factory=list)
    first_reasoning_s: float | None = None
    last_reasoning_s: float | None = None
    first_answer_s: float | None = None
    last_answer_s: float | None = None
    reasoning_tokens: int | None = None
    unstreamed_tokens: int = 0
    tool_calls: int = 0


@dataclass
class WorkerOutcome:
    """One worker process of a run on workers (:mod:`~pytest_llmreplay.replayer.workers`): where it ran,
    its share of the plan, its own client figures (schedule lag p50/p99 in seconds, effective
    concurrency, from the same metrics as the whole run's), and ``died``: why it ended early."""

    index: int
    where: str
    planned_requests: int
    records: int = 0
    schedule_lag_p50: float | None = None
    schedule_lag_p99: float | None = None
    effective_concurrency: float | None = None
    died: str | None = None


@dataclass
class ReplayRun:
    """The raw outcome of a replay: records (in schedule order), warnings, and the run's span;
    ``workers``: one outcome per worker process when the run was split over workers;
    ``server_metrics``: the server's own series scraped during the run, name -> ``[[t, value],
    ...]`` with ``t`` in seconds from the start (:mod:`~pytest_llmreplay.replayer.server_metrics`;
    empty when none were)."""

    records: list[RequestRecord]
    warnings: list[str]
    settings: dict[str, Any]
    workload: str
    endpoint: str
    duration_s: float
    planned_requests: int
    interrupted: str | None = None  # the signal that stopped the run early (SIGINT, SIGTERM)
    stopped: str | None = None  # why Replay.stop ended the run early
    workers: list[WorkerOutcome] = field(default_factory=list)
    server_metrics: dict[str, list[list[float]]] = field(default_factory=dict)

    def __repr__(self) -> str:
        """One line: the counts, not every record (a repr of each ran to megabytes in a failed
        test's captured output)."""
        statuses = Counter(record.status for record in self.records)
        counts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
        stopped = f", interrupted by {self.interrupted}" if self.interrupted else ""
        return (
            f"ReplayRun({len(self.records)} records ({counts or 'none'}), workload {self.workload!r}, "
            f"endpoint {self.endpoint!r}, {self.duration_s:.3g} s{stopped})"
        )


def cancelled_note(elapsed_s: float | None) -> str:
    """How far a stopped or interrupted replay got, for its warning: ``at 12.3 s: requests in
    flight were cancelled and nothing more was sent``; ``before the replay started: nothing was
    sent`` when ``elapsed_s`` (seconds since the run's start) is None or negative (workers stopped
    while waiting for their common start)."""
    if elapsed_s is None or elapsed_s < 0:
        return "before the replay started: nothing was sent"
    return f"at {elapsed_s:.1f} s: requests in flight were cancelled and nothing more was sent"


def fill_unreported_cached(records: list[RequestRecord]) -> str | None:
    """Set ``cached_tokens`` to 0 on the ok records whose usage gave prompt tokens and no cached
    count, in a run where the server gave a cached count on some: vLLM with
    ``--enable-prompt-tokens-details`` sends ``prompt_tokens_details`` only when a request had a
    cached token (its serving code: ``if self.enable_prompt_tokens_details and num_cached_tokens``,
    in the chat, completions and Responses paths of the versions read), so a request
    that missed the cache reads as "not reported", and the hit rates were taken over the requests
    that hit alone. The warning that says so (None when nothing was set): the records changed
    say so in their notes."""
    if not any(r.cached_tokens is not None for r in records):
        return None
    filled = [r for r in records if r.status == "ok" and r.cached_tokens is None and r.prompt_tokens is not None]
    for record in filled:
        record.cached_tokens = 0
        record.notes.append("no cached_tokens in the usage: taken as 0")
    if not filled:
        return None
    reported = sum(r.cached_tokens is not None for r in records) - len(filled)
    return (
        f"the server's usage gave cached_tokens on {reported} requests and none on {len(filled)} others, "
        "taken as 0 cached tokens (vLLM sends prompt_tokens_details only when a request hit the cache)"
    )
