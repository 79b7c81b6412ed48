"""Reasoning apart from the answer: the per-request metrics of a reasoning model's run.

A reasoning model (DeepSeek-R1, Qwen3 in thinking mode, gpt-oss) streams its thinking before it
answers, and its user waits for the answer: TTFT, the first token of any kind, is the first
reasoning token, which says nothing of that wait. These metrics measure the two parts apart,
named as AIPerf names them where it has a name. Per request (seconds, tokens, tokens/s):

- ``ttfr`` = first reasoning token - sent: the time to the first reasoning token (none for a
  request that did not reason);
- ``ttfo`` = first answer token - sent: AIPerf's time to first output token (TTFO), the first
  token of content or of a tool call, never of reasoning; a request that did not reason has its
  TTFT, one that reasoned until its ``max_tokens`` ran out has none;
- ``reasoning_tokens``: the output tokens that were reasoning (AIPerf's reasoning token count):
  the server's ``usage.completion_tokens_details.reasoning_tokens`` where it sends it, else the
  tokens of the stream's ``reasoning_content`` / ``reasoning`` deltas (scaled as ``output_tokens``
  is when the server's ``completion_tokens`` differs from the stream's count); 0 for a request
  that did not reason;
- ``answer_tokens`` = ``output_tokens`` - ``reasoning_tokens`` (AIPerf's output token count,
  which leaves reasoning out; ``output_tokens`` holds both, as AIPerf's output sequence length);
- ``reasoning_decode_tps`` = (reasoning_tokens - 1) / (last reasoning chunk - first reasoning
  chunk) and ``answer_decode_tps`` = (answer_tokens - 1) / (last answer chunk - first answer
  chunk): the decode speed over each part, where its tokens arrived over time.

A run has reasoning when one of its ok requests reasoned (:func:`has_reasoning`); a run without
shows none of these metrics, not zeros. A request that reasoned and never answered has no
``ttfo``: the run says how many (:func:`unanswered`), and goodput under a ``ttfo`` limit counts
it as not good. The time to first agent token of a session (``ttfat``)
ends at the first *answer* token of its last request (:func:`answer_start`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..replayer.records import RequestRecord


def reasoned(record: RequestRecord) -> bool:
    """Whether ``record``'s response held reasoning (a reasoning chunk, or reasoning tokens in
    the server's usage)."""
    return record.first_reasoning_s is not None or bool(record.reasoning_tokens)


def has_reasoning(records: Iterable[RequestRecord]) -> bool:
    """Whether any of ``records`` reasoned: a run that shows the reasoning metrics."""
    return any(reasoned(record) for record in records)


def answer_start(record: RequestRecord) -> float | None:
    """When the first answer token (content or a tool call) arrived: ``first_answer_s``; for a
    record that holds no reasoning and no answer time (made before they were recorded), its
    first token; None when it reasoned and never answered."""
    if record.first_answer_s is not None or reasoned(record):
        return record.first_answer_s
    return record.first_token_s


def unstreamed_reasoning(output: int, reasoning: int, counted: int, reasoning_counted: int) -> int:
    """Of a response's ``reasoning`` tokens (of ``output``, the server's counts), those its
    stream never carried, given the ``counted`` tokens of its chunks, ``reasoning_counted`` of
    them reasoning: reasoning - reasoning_counted x s, s = (output - reasoning) / (counted -
    reasoning_counted) the answer's tokens per token its chunks counted (1, or more from a server
    that merges tokens in a chunk), within 0 and ``reasoning``. OpenAI's reasoning models hide
    their reasoning, and stream at most a summary of it, as Claude 4 does of its thinking: those
    tokens were generated before the first answer token (their time is in TTFT), none in the
    chunks, and spread over the answer's ten chunks they made ITL 100x too short (0.5 ms for
    50 ms)."""
    answer_counted, answer = counted - reasoning_counted, output - reasoning
    scale = answer / answer_counted if answer_counted > 0 and answer > 0 else 1.0
    return max(0, min(reasoning, round(reasoning - reasoning_counted * scale)))


def streamed_tokens(record: RequestRecord) -> int:
    """``output_tokens`` less ``unstreamed_tokens``: the tokens the stream's chunks carried,
    which ``tpot``, ``itl`` and ``decode_tps`` spread over them."""
    return record.output_tokens - record.unstreamed_tokens


def _since_sent(record: RequestRecord, time: float | None) -> float | None:
    return None if time is None or record.sent_s is None else time - record.sent_s


def ttfo(record: RequestRecord) -> float | None:
    """First answer token - sent (:func:`answer_start`); None when no answer came."""
    return _since_sent(record, answer_start(record))


def unanswered(records: Iterable[RequestRecord]) -> str | None:
    """The warning for ``records`` (a run's ok requests) that reasoned and never answered (their
    ``max_tokens`` spent thinking): ``ttfo`` and ``ttfat`` have no value for them, so their
    statistics cover only the requests that answered, and goodput under a ``ttfo`` limit counts
    them as not good (:func:`misses_answer_limit`); None when every request that reasoned answered."""
    records = list(records)
    count = sum(reasoned(r) and answer_start(r) is None for r in records)
    if not count:
        return None
    return (
        f"{count} of {len(records)} requests reasoned and never answered (max_tokens spent thinking?): "
        "ttfo and ttfat cover only those that answered; goodput under a ttfo limit counts them as not good"
    )


def misses_answer_limit(record: RequestRecord) -> bool:
    """Whether ``record`` fails any limit on the time to its answer: it never answered, which no
    limit on ``ttfo`` allows (a request whose other metrics have no value, a one-token reply's
    ``tpot``, meets their limits)."""
    return ttfo(record) is None


def _decode_tps(tokens: int | None, first: float | None, last: float | None) -> float | None:
    """(tokens - 1) / (last - first); None for one token or fewer, or no time between them."""
    if tokens is None or tokens <= 1 or first is None or last is None or last <= first:
        return None
    return (tokens - 1) / (last - first)


def reasoning_values(record: RequestRecord) -> dict[str, Any]:
    """The reasoning metrics of one record (module docstring; None where not defined)."""
    thought = record.reasoning_tokens if record.reasoning_tokens is not None else 0 if not reasoned(record) else None
    answer = None if thought is None else max(record.output_tokens - thought, 0)
    return {
        "ttfr": _since_sent(record, record.first_reasoning_s),
        "ttfo": ttfo(record),
        "reasoning_tokens": thought,
        "answer_tokens": answer,
        "reasoning_decode_tps": _decode_tps(thought, record.first_reasoning_s, record.last_reasoning_s),
        "answer_decode_tps": _decode_tps(answer, record.first_answer_s, record.last_answer_s),
    }
