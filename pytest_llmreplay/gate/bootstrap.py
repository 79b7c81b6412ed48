"""The bootstrap of a change between two stored results, and Holm's step-down over a test's figures.

**Change** of a statistic (``p50``, ``mean``; ``steady_state``: the mean of window rates):
change = stat(current) / stat(baseline) - 1. :func:`bootstrap_change` resamples requests (paired
when both sides hold the same requests: the same indices from both, so the spread between
requests cancels); :func:`hierarchical_bootstrap_change` resamples runs, then requests within
them, for sides of several runs. Both return :class:`Draws`: the point change and
:data:`BOOTSTRAP_RESAMPLES` resampled changes, seeded (the same two results give the same draws).

**Interval and p-value** (:class:`Draws`): the central interval at confidence c is the
resampled changes' percentiles (1 - c) / 2 and (1 + c) / 2; the two-sided p-value of "no change"
is p = min(1, 2 min(#(r <= 0) + 1, #(r >= 0) + 1) / (B + 1)) over the B resampled changes r (the
percentile bootstrap's test: the interval at confidence c excludes 0 about when p < 1 - c; the
+1s keep p above 0), and never below the **floor** (:func:`p_floor`): the smallest p-value the
exact randomization test of the same samples can give, 2^(1-n) for n pairs (sign flips) and
2 / C(n_b + n_c, n_b) for unpaired sides (permutations); for sides of R_b and R_c runs of n
paired requests, the smaller of 2^(1-n) and 2 / C(R_b + R_c, R_b) (whole runs exchanged: 5 runs a
side reach 0.008 however few their requests). The bootstrap of a few samples is far surer than
they allow (two paired requests, both slower: every resample above 0, p = 0.001; 57% of
unchanged two-request tests read REGRESSION), so a figure is significant at confidence c only
when its floor is at most 1 - c too: up to five pairs of one run a side never are at 95%.

**Samples a percentile needs** (:func:`tail_samples`): a percentile above the median is compared
only with two samples a side beyond it, since no resample reaches past the largest sample.

**Holm's step-down** (:func:`holm_levels`, Holm, *Scand. J. Statist.* 1979): a test gates m figures
at once; judging each at 95% calls a false regression in far more than 5% of unchanged tests.
Sorted by p-value, the k-th smallest (k = 1..m) is judged at confidence 1 - alpha / (m - k + 1),
as long as every smaller one was significant; from the first that is not, the rest are judged
at that first one's level (and are not significant either). The chance that an unchanged test
calls any figure significant is then at most alpha, whatever the figures' dependence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
SORTED_UP_TO = 256  # values per resample up to which resampled() sorts each before its percentile


def statistic(stat: str, draws: np.ndarray) -> np.ndarray:
    """``stat`` along the last axis (``steady_state``: the mean of the window rates)."""
    if stat in ("mean", "steady_state"):
        return draws.mean(axis=-1)
    return np.percentile(draws, float(stat[1:]), axis=-1)


def resampled(stat: str, draws: np.ndarray) -> np.ndarray:
    """:func:`statistic` of each row of ``draws``, resamples made for it, which it reorders. A
    percentile is numpy's of the same rows, so the same values (a percentile depends on a row's
    order statistics alone), found faster: rows of up to :data:`SORTED_UP_TO` values are sorted
    first, and the transpose is taken in place, its columns contiguous lanes to partition
    (along the last axis numpy copies each row out and back). On rows of 32-256 values, 2-3.5x
    faster; on longer rows, where sorting costs more than it saves, 1.2x."""
    if stat in ("mean", "steady_state") or draws.ndim != 2:
        return statistic(stat, draws)
    if draws.shape[1] <= SORTED_UP_TO:
        draws.sort(axis=-1)
    return np.percentile(draws.T, float(stat[1:]), axis=0, overwrite_input=True)


def p_floor(baseline: int, current: int, paired: bool) -> float:
    """The smallest two-sided p-value of an exact randomization test of "no change" (module
    docstring): 2^(1-n) for ``paired`` n = ``baseline`` pairs, else 2 / C(baseline + current,
    baseline); 0 where it is below 1e-12 (30 samples a side), as good as none."""
    if paired:
        return 2.0 ** (1 - baseline) if baseline < 41 else 0.0
    if min(baseline, current) >= 30:
        return 0.0
    floor = 2 / math.comb(baseline + current, baseline)
    return floor if floor >= 1e-12 else 0.0


@dataclass(frozen=True)
class Draws:
    """A bootstrapped change: ``point`` (the measured change), ``ratios`` (the resampled
    changes; NaN where a resample's baseline statistic and current statistic are both 0) and
    ``floor`` (:func:`p_floor` of the samples)."""

    point: float
    ratios: np.ndarray
    floor: float = 0.0

    def interval(self, confidence: float) -> tuple[float, float]:
        """The central ``confidence`` interval of the resampled changes (percentiles interpolated
        linearly). A resample whose baseline statistic is 0 (a windowed rate drawn only from
        empty windows) has an unbounded change: +inf when its current statistic is not 0, left
        out (NaN, no change to measure) when it is. When some change is +inf the ends are the
        order statistics outward of each percentile instead (interpolating next to an infinity
        is inf - inf): the interval is then never narrower, and its top is +inf when more than
        its tail of the resamples is."""
        tail = (1 - confidence) / 2 * 100
        measured = self.ratios[~np.isnan(self.ratios)]
        if not measured.size:
            return math.nan, math.nan
        if np.isinf(measured).any():
            return float(np.percentile(measured, tail, method="lower")), float(
                np.percentile(measured, 100 - tail, method="higher")
            )
        low, high = np.percentile(measured, [tail, 100 - tail])
        return float(low), float(high)

    def p_value(self) -> float:
        """The two-sided bootstrap p-value of "no change", never below the floor (module
        docstring); 1 when no resample measured a change."""
        measured = self.ratios[~np.isnan(self.ratios)]
        if not measured.size:
            return 1.0
        below, above = int((measured <= 0).sum()), int((measured >= 0).sum())
        return min(1.0, max(self.floor, 2 * (min(below, above) + 1) / (measured.size + 1)))


def bootstrap_change(
    baseline: np.ndarray, current: np.ndarray, stat: str, seed: int = 0, paired: bool = False
) -> Draws:
    """stat(current)/stat(baseline) - 1 and its resampled changes.

    ``paired`` (value i is the same request, session or window in both): the same indices are
    drawn from both, so differences between requests cancel and only the change between the runs
    is left; otherwise each side is resampled on its own."""
    point = float(statistic(stat, current) / statistic(stat, baseline) - 1)
    rng = np.random.default_rng(seed)
    ratios = []
    chunk = max(1, min(BOOTSTRAP_RESAMPLES, 2_000_000 // max(len(baseline), len(current))))
    for start in range(0, BOOTSTRAP_RESAMPLES, chunk):
        n = min(chunk, BOOTSTRAP_RESAMPLES - start)
        drawn = rng.integers(0, len(baseline), (n, len(baseline)))
        b = resampled(stat, baseline[drawn])
        c = resampled(stat, current[drawn if paired else rng.integers(0, len(current), (n, len(current)))])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(c / b - 1)
    return Draws(point, np.concatenate(ratios), p_floor(len(baseline), len(current), paired))


def hierarchical_bootstrap_change(
    baseline: list[np.ndarray], current: list[np.ndarray], stat: str, seed: int = 0, paired: bool = False
) -> Draws:
    """The change for results of several runs each (a list of per-run sample arrays).

    change = stat(current runs pooled) / stat(baseline runs pooled) - 1. Each bootstrap resample
    draws, on each side, as many runs as it has with replacement, then requests within each drawn
    run (the two-level bootstrap of Davison & Hinkley, *Bootstrap Methods*, 1997, section 3.8), and
    pools them: a shift of a whole run (a slower runner) moves the resampled statistic as much as
    it moved the measured one, so run-to-run noise is inside the interval, which the one-level
    :func:`bootstrap_change` of pooled samples leaves out. ``paired`` (every run of both sides
    holds the same requests in the same order): one set of request indices per resample serves
    every drawn run of both sides, so the spread between requests cancels as in
    :func:`bootstrap_change`; unpaired, each drawn run is resampled on its own, as many draws as
    it has samples, so that a resample pools its runs as the measured statistic pools them (runs
    of other sizes weigh by their sizes: drawn at the side's mean size, three 6-session runs 30%
    slower beside one of 60 put the change +1.7% outside its own interval [+1.9%, +35%]). With
    one run per side this is :func:`bootstrap_change`'s resampling."""
    point = float(statistic(stat, np.concatenate(current)) / statistic(stat, np.concatenate(baseline)) - 1)
    rng = np.random.default_rng(seed)
    per_resample = sum(len(run) for run in baseline) + sum(len(run) for run in current)
    chunk = max(1, min(BOOTSTRAP_RESAMPLES, 2_000_000 // per_resample))
    ratios = []
    ragged = [_ragged(side, paired) for side in (baseline, current)]
    for start in range(0, BOOTSTRAP_RESAMPLES, chunk):
        n = min(chunk, BOOTSTRAP_RESAMPLES - start)
        shared = rng.integers(0, len(baseline[0]), (n, len(baseline[0]))) if paired else None
        b = _side_statistic(stat, _two_level_draw(baseline, n, rng, shared), ragged[0])
        c = _side_statistic(stat, _two_level_draw(current, n, rng, shared), ragged[1])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(c / b - 1)
    sizes = [sum(map(len, side)) for side in (baseline, current)]
    runs = p_floor(len(baseline), len(current), False)  # whole runs exchanged between the sides
    floor = min(p_floor(len(baseline[0]), 0, True), runs) if paired else p_floor(sizes[0], sizes[1], False)
    return Draws(point, np.concatenate(ratios), floor)


def _two_level_draw(
    runs: list[np.ndarray], n: int, rng: np.random.Generator, requests: np.ndarray | None
) -> np.ndarray:
    """``n`` resamples of ``runs``, shape (n, runs * the longest run): runs drawn with
    replacement, then ``requests`` (n, length) indices in each drawn run, or each run's own
    uniform draws, as many as it has samples (NaN after them, in a run shorter than the longest)."""
    length = max(map(len, runs))
    padded = np.full((len(runs), length), np.nan)
    for i, run in enumerate(runs):
        padded[i, : len(run)] = run
    chosen = rng.integers(0, len(runs), (n, len(runs)))
    if requests is None:
        sizes = np.array([len(run) for run in runs])[chosen]
        index = (rng.random((n, len(runs), length)) * sizes[:, :, None]).astype(int)
    else:
        index = np.broadcast_to(requests[:, None, :], (n, len(runs), length))
    drawn = padded[chosen[:, :, None], index]
    if _ragged(runs, requests is not None):
        drawn[np.arange(length) >= sizes[:, :, None]] = np.nan
    return drawn.reshape(n, -1)


def _ragged(runs: list[np.ndarray], paired: bool) -> bool:
    """Whether :func:`_two_level_draw` pads the draws of ``runs`` with NaN: unpaired runs of
    several sizes."""
    return not paired and len(set(map(len, runs))) > 1


def _side_statistic(stat: str, draws: np.ndarray, ragged: bool) -> np.ndarray:
    """:func:`resampled`, or over each row's values that are not NaN for ``ragged`` draws (runs
    of several sizes, :func:`_ragged`), known from the runs rather than found by a scan of
    every resample."""
    if not ragged:
        return resampled(stat, draws)
    if stat in ("mean", "steady_state"):
        return np.nanmean(draws, axis=-1)
    return np.nanpercentile(draws, float(stat[1:]), axis=-1)


def holm_levels(draws: list[Draws], alpha: float) -> list[tuple[float, bool]]:
    """(confidence, significant) for each of ``draws`` (in their order) under Holm's step-down at
    family-wise level ``alpha`` (module docstring): the k-th smallest p-value is judged at
    1 - alpha / (m - k + 1) while every smaller one was significant (its interval at that
    confidence excludes 0, and its floor is at most 1 - that confidence); after the first that is not, the rest take that one's confidence and
    are not significant."""
    m = len(draws)
    order = sorted(range(m), key=lambda i: draws[i].p_value())
    found: list[tuple[float, bool]] = [(1 - alpha, False)] * m
    stopped_at: float | None = None
    for rank, index in enumerate(order):
        if stopped_at is not None:
            found[index] = (stopped_at, False)
            continue
        confidence = 1 - alpha / (m - rank)
        low, high = draws[index].interval(confidence)
        significant = (low > 0 or high < 0) and draws[index].floor <= 1 - confidence
        found[index] = (confidence, significant)
        if not significant:
            stopped_at = confidence
    return found


def tail_samples(stat: str) -> int:
    """The samples a side needs for its ``stat`` to be compared: 2 / (1 - q) for a percentile
    pq above the median (two samples beyond it: p90 20, p99 200), else 2. With fewer, a
    resample never reaches past the largest sample, and the interval is too narrow: a p99 of 20
    heavy-tailed requests read REGRESSION on an unchanged server in 9.5% of comparisons, a p99
    of 100 in 5%, of 200 in 1.7%; a p90 of 10 in 6.3%, of 20 in 1.3% (one figure at 10%, nominal
    2.5%; 300 trials each, a statistics review)."""
    if not stat.startswith("p") or float(stat[1:]) <= 50:
        return 2
    return math.ceil(round(2 / (1 - float(stat[1:]) / 100), 9))
