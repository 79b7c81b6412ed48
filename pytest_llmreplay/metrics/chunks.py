"""Every token chunk of a run's records in flat arrays (:class:`Chunks`: cheap for 100k
requests), and the spread of a server's token count over a stream's chunks
(:func:`spread_counts`), which the ITL and the output events read (the formulas:
:mod:`~pytest_llmreplay.metrics.result`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from itertools import chain

import numpy as np

from ..replayer.records import RequestRecord
from .reasoning import streamed_tokens


def spread_counts(tokens: Sequence[int], total: int) -> list[int]:
    """The stream's token counts per chunk (``tokens``) scaled to sum to ``total`` (the server's
    count), in whole tokens: chunk i gets round(C_i * total / C) - round(C_(i-1) * total / C),
    C_i being the stream's count up to and with chunk i and C its whole count (round half up),
    so every chunk's share is as even as whole tokens allow. ``tokens`` as they are when they
    already sum to ``total`` or to 0."""
    counted = sum(tokens)
    if counted == total or not counted:
        return list(tokens)
    spread, before, cumulative = [], 0, 0
    for count in tokens:
        cumulative += count
        upto = math.floor(cumulative * total / counted + 0.5)
        spread.append(upto - before)
        before = upto
    return spread


class Chunks:
    """Every token chunk of ``records`` in flat arrays (cheap for 100k requests): ``times``,
    ``tokens`` and ``first`` (the chunk opens its record's stream)."""

    def __init__(self, records: Sequence[RequestRecord]) -> None:
        lengths = np.fromiter((len(r.chunk_times) for r in records), dtype=np.int64, count=len(records))
        total = int(lengths.sum())
        self.lengths = lengths
        self.times = np.fromiter(chain.from_iterable(r.chunk_times for r in records), dtype=np.float64, count=total)
        self.tokens = np.fromiter(chain.from_iterable(r.chunk_tokens for r in records), dtype=np.int64, count=total)
        self.first = np.zeros(total, dtype=bool)
        self.first[(np.cumsum(lengths) - lengths)[lengths > 0]] = True  # each record's first chunk
        self.records = records

    def itl(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap per token, tokens) of every chunk after its stream's first (:func:`~.result.itl_chunks`,
        the same spread of each record's count over its chunks)."""
        tokens = self.spread_tokens()
        later = ~self.first[1:] & (tokens[1:] > 0)
        gaps = (self.times[1:] - self.times[:-1])[later] / tokens[1:][later]
        return gaps, tokens[1:][later]

    @functools.cached_property
    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per record: the tokens its chunks carried (the stream's count) and its
        ``output_tokens`` (the server's, where it gave one): what :meth:`spread_tokens` and
        :meth:`output_events` scale the chunks by."""
        owner = np.repeat(np.arange(len(self.records)), self.lengths)
        counted = np.bincount(owner, weights=self.tokens, minlength=len(self.records)).astype(np.int64)
        outputs = np.fromiter((r.output_tokens for r in self.records), dtype=np.int64, count=len(self.records))
        return counted, outputs

    def spread_tokens(self) -> np.ndarray:
        """Each chunk's tokens, each record's counts spread to sum to its ``output_tokens`` less a
        hidden reasoning's (:func:`spread_counts`, in arrays, of
        :func:`~pytest_llmreplay.metrics.reasoning.streamed_tokens`)."""
        counted, _ = self.counts
        outputs = np.fromiter(map(streamed_tokens, self.records), dtype=np.int64, count=len(self.records))
        if np.array_equal(counted, outputs) or not self.tokens.size:
            return self.tokens
        cumulative = np.cumsum(self.tokens)
        before_record = np.concatenate([[0], cumulative])[np.cumsum(self.lengths) - self.lengths]
        within = cumulative - np.repeat(before_record, self.lengths)  # C_i, within each record
        scale = np.repeat(np.divide(outputs, counted, out=np.ones(len(outputs)), where=counted > 0), self.lengths)
        upto = np.where(np.repeat(counted > 0, self.lengths), np.floor(within * scale + 0.5), within).astype(np.int64)
        before = np.concatenate([[0], upto[:-1]])
        before[self.first] = 0
        return upto - before

    def output_events(self) -> tuple[np.ndarray, np.ndarray]:
        """Output tokens at their chunks' times, scaled per record so they add up to the
        server's count; a record without chunks counts all at its end."""
        counted, outputs = self.counts
        scale = np.divide(outputs, counted, out=np.zeros(len(outputs)), where=counted > 0)
        amounts = self.tokens * np.repeat(scale, self.lengths)
        bare = [r for r, n in zip(self.records, counted, strict=True) if not n and r.end_s is not None]
        times = np.concatenate([self.times, [r.end_s for r in bare]])
        return times, np.concatenate([amounts, [float(r.output_tokens) for r in bare]])
