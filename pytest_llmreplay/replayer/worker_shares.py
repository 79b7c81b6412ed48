"""How a run on workers is shared out (:mod:`~pytest_llmreplay.replayer.workers`' rules, as pure
functions): which sessions each worker gets (:func:`shard_sessions`), its share of the
concurrency (:func:`split_concurrency`), and the failed records of a worker that died
(:func:`unfinished_records`)."""

from __future__ import annotations

from collections.abc import Sequence

from .plan import Part
from .records import RequestRecord


def shard_sessions(sizes: Sequence[int], workers: int, weights: Sequence[int | None] = ()) -> list[list[int]]:
    """Positions of the planned sessions (``sizes``: each one's requests) given to each of
    ``min(workers, len(sizes))`` workers: in plan order, each to the worker with the fewest
    planned requests so far per unit of its ``weights`` (its share of the concurrency; 1 each
    when none is given or None), the lowest index on a tie."""
    count = min(workers, len(sizes))
    shares = [float(w) if w else 1.0 for w in weights][:count] if weights else [1.0] * count
    shards: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for position, size in enumerate(sizes):
        chosen = min(range(count), key=lambda k: loads[k] / shares[k])
        shards[chosen].append(position)
        loads[chosen] += size
    return shards


def split_concurrency(total: int | None, workers: int) -> list[int | None]:
    """Each of ``workers``'s share of the concurrency ``total`` (None: no cap): ``total //
    workers``, plus one for the first ``total % workers``; ``workers`` must be <= ``total``."""
    if total is None:
        return [None] * workers
    return [total // workers + (1 if k < total % workers else 0) for k in range(workers)]


def unfinished_records(
    part: Part,
    received: Sequence[RequestRecord],
    cause: str,
    at_s: float,
    deadline_s: float | None,
    in_flight: int | None = None,
) -> list[RequestRecord]:
    """A ``failed`` record (error ``worker: <cause>``) for every request of ``part`` that did not
    come back from its dead worker: the remaining turns of each session that had not ended
    (a session ends at a failed or cancelled turn). Scheduled at the session's offset (open loop)
    or at ``at_s`` (when the worker died); sessions due at or after ``deadline_s`` were never to
    run. In a closed loop (no offsets) with a deadline, when a queued session would have started
    is not known: only the first ``in_flight`` (the worker's concurrency) of the sessions not
    ended count, those it had in flight (all of them counted, a 2.7 s remainder of a run made
    199 failed requests of sessions that would never have been sent)."""
    done: dict[int, set[int]] = {}
    ended: set[int] = set()
    for record in received:
        done.setdefault(record.session_index, set()).add(record.turn_index)
        if record.status != "ok":
            ended.add(record.session_index)
    failed = []
    slots = in_flight if part.offsets is None and deadline_s is not None and in_flight is not None else None
    for position, (index, session) in enumerate(zip(part.indices, part.sessions, strict=True)):
        offset = part.offsets[position] if part.offsets is not None else at_s
        if index in ended or (deadline_s is not None and offset >= deadline_s):
            continue
        if len(done.get(index, ())) == len(session.turns):
            continue  # every turn came back
        if slots is not None:
            if slots <= 0:
                break
            slots -= 1
        for turn_index, turn in enumerate(session.turns):
            if turn_index not in done.get(index, ()):
                failed.append(
                    RequestRecord(
                        session_id=session.id,
                        session_index=index,
                        turn_index=turn_index,
                        turns_in_session=len(session.turns),
                        status="failed",
                        scheduled_s=max(offset, at_s) if turn_index else offset,
                        planned_output_tokens=turn.output_tokens,
                        error=f"worker: {cause}",
                    )
                )
    return failed
