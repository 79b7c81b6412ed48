"""A metric over commits: a test's stored results along a first-parent history, the run-to-run
spread they show, the gate that uses it, and change points.

**Points.** :func:`history_points` reads the stored results of one test at each of ``commits``
(newest first, as :func:`~pytest_llmreplay.gate.git.reference_history` gives them) through
:class:`~pytest_llmreplay.gate.store.Store` (any kind: folder, git ref, fsspec URL), keeps those with the same fingerprint,
workload and settings as ``like`` and as many runs (``--llm-repeat``), and returns them oldest
first. A file that cannot be read is skipped (its key and why kept in :attr:`History.unreadable`), never fatal; a result stopped by a
signal (``"interrupted"``, :mod:`~pytest_llmreplay.plugin.interrupt`) or a capacity search a
server's failure cut short (``capacity.incomplete``) is skipped: it measured only part of its
workload (:func:`~pytest_llmreplay.gate.stored_record.partial_reason`).

**History gate** (:func:`gate_with_history`). With K >= :data:`MIN_HISTORY` earlier results
(the newest :data:`HISTORY_WINDOW`), each compared figure's history ``h_1..h_K`` (mean ``m``,
sample standard deviation ``s``) predicts where the next result of an unchanged commit falls.
The current value ``x`` is judged by the Student's t prediction statistic

    t = (x - m) / (s * sqrt(1 + 1/K)),   K - 1 degrees of freedom,

worse = ``t`` (``-t`` for figures where lower is worse). A regression is called only when the
bootstrap called one (the change against the baseline beyond the tolerance, its interval clear
of zero: the runs of this job do not explain it) *and* worse > t_{K-1}(q), the one-sided
quantile q = 1 - (1 - CONFIDENCE) / (2 m) over the m figures judged (Bonferroni: 0.975 at the
default 95% for the test's figures together, the level at which the bootstrap's two-sided
interval lies clear of zero): the earlier jobs' spread does not explain it either. Judged at
0.975 each, seven figures let through a false alarm in 16-20% of unchanged one-run
comparisons at 8% run-to-run noise (where the bootstrap of one run a side, blind to that noise,
calls nearly every figure; a statistics review, 800 trials). The history is the current level's: values before the newest step in it
(:func:`last_step`: an accepted change, which would widen ``s`` and move ``m`` so that a
second change of the same size reads as noise) are left out, and a row with fewer than
:data:`MIN_HISTORY` values since the step is judged by the bootstrap alone. Each test guards
against one source of noise, so the history only vetoes: an
intersection-union test (Berger, *Technometrics* 1982), whose false-alarm rate is at most that of
either test alone, where letting the history overrule the bootstrap would call a regression that
the job's own runs contradict (runs of one side that disagree widely, measured on a live engine
whose streams sometimes arrived in one burst: bench/README.md). Chosen by measurement
(``bench/gate_quality.py``, bench/README.md, 300 A/A and A/B pairs per setting, before the veto:
the history then overruled the bootstrap): with three runs per result it never raised more false
alarms than either alternative, at any depth (K = 5, 10, 20) or noise level: 0-4 of 300 against
4-7 for a z-score on the same figures (Bencher's threshold, which takes ``s`` as exact) and 3-8 for Mann-Whitney's U between the history and the current runs
(asv's test, which cannot fire at all with one current value: its smallest one-sided p-value
is 1/(K+1)); the price is detection with only K = 5 results. Improvements are the mirror
image.

**Change points** (:func:`change_points`, :func:`metric_series`): Apache Otava's e-divisive with
t-test significance (``otava.analysis.compute_change_points``, the Hunter algorithm of Fleming
et al., ICPE 2023), from the optional extra ``pytest-llmreplay[history]``, imported when used.

**Trend** (:func:`trend`): what the report's trend plot draws, each gated figure over the
earlier results then this run, with its change points; the gate stores it in the report's record.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ..errors import LLMReplayError
from ..wording import counted
from .baseline import CONFIDENCE, LOWER_IS_WORSE, Comparison, mismatch
from .repeats import run_count
from .store import Store
from .stored_record import partial_reason

MIN_HISTORY = 5
JUDGED = ("regression", "improved", "noise", "ok")  # the verdicts the history confirms, vetoes or notes
MIN_LEVEL_CHANGE = 0.01  # a change point's level change must be at least 1% (sizeable)
STEP_ALPHA = 0.01  # at most 1% of searches find a step in a history without one (last_step)
HISTORY_WINDOW = 20
TREND_WINDOW = 50  # the newest earlier results a trend plot draws
MIN_TREND = 2  # earlier results a trend plot needs
CHANGE_POINT_PVALUE = 0.001  # Otava's default significance for a change point
CHANGE_POINT_WINDOW = 50  # results in each window of Otava's split step
MIN_CHANGE_POINT_RESULTS = 3  # fewer results hold no change point to look for: a new level needs one on each side
EXTRA = "pip install 'pytest-llmreplay[history]'"


@dataclass
class History:
    """The stored results that match, oldest first (``points``: (commit, record)), the files
    that could not be read (``unreadable``: store key -> why, newest first) and how many results
    were read and left out as not :func:`alike` (``unlike``: another endpoint, workload, settings
    or number of runs)."""

    points: list[tuple[str, Mapping[str, Any]]]
    unreadable: dict[str, str] = field(default_factory=dict)
    unlike: int = 0

    def values(self, key: str) -> list[float | None]:
        return [figure(record, key) for _, record in self.points]


def figure(record: Mapping[str, Any], key: str) -> float | None:
    """``metric.stat`` of a stored result's summary (None when it was not measured)."""
    metric, _, stat = key.partition(".")
    value = (record.get("summary") or {}).get(metric, {}).get(stat)
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


def alike(like: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """``record`` is a point of ``like``'s history: the same fingerprint, workload and settings
    (nothing :func:`~pytest_llmreplay.gate.baseline.mismatch` names) and as many runs."""
    return mismatch(like, record) is None and run_count(like) == run_count(record)


def history_points(
    store: Store, test: str, commits: Iterable[str], like: Mapping[str, Any] | None = None, limit: int | None = None
) -> History:
    """The stored results of ``test`` at ``commits`` (newest first), matching ``like`` when given
    (see the module docstring), at most ``limit`` of the newest, returned oldest first. At a
    commit that holds a result saved from a clean tree, those saved from a dirty one (tracked
    files changed: not the commit's code) are left out."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    unreadable: dict[str, str] = {}
    unlike = 0
    for commit in commits:
        here = []
        for key in reversed(store.stored(test, commit)):
            try:
                record = store.read(key)
            except LLMReplayError as exc:
                unreadable[key] = str(exc)
                continue
            if partial_reason(record):
                continue
            if like is None or alike(like, record):
                here.append(record)
            else:
                unlike += 1
        clean = [record for record in here if not record.get("dirty")]
        found += [(commit, record) for record in (clean or here)]  # a dirty tree's is no commit's own
        if limit is not None and len(found) >= limit:
            break
    return History(list(reversed(found[:limit] if limit is not None else found)), unreadable, unlike)


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile, no scipy needed: the Cornish-Fisher expansion (Abramowitz & Stegun
    26.7.5: within 0.2% for df >= 4 at q <= 0.995), which for an integer ``df`` and q > 0.5 starts
    a bisection on :func:`t_two_sided_p` to the exact value (the history's Bonferroni levels go
    past 0.995: 5.052 for 5.068 at df 4, q 0.99643)."""
    z = statistics.NormalDist().inv_cdf(q)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    start = z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4
    if q <= 0.5 or df != int(df) or df < 1:
        return start
    tail, low, high = 2 * (1 - q), 0.0, 2 * start
    while t_two_sided_p(high, int(df)) > tail:
        high *= 2
    for _ in range(80):  # to double precision
        middle = (low + high) / 2
        low, high = (middle, high) if t_two_sided_p(middle, int(df)) > tail else (low, middle)
    return (low + high) / 2


def prediction_t(history: list[float], value: float) -> float:
    """(value - mean) / (sd * sqrt(1 + 1/K)) over ``history`` (module docstring); inf when the
    history does not vary and ``value`` differs from it, 0 when equal."""
    mean, sd = statistics.fmean(history), statistics.stdev(history)
    if sd <= 1e-12 * abs(mean):  # a history without spread (an exact simulator): rounding is not a change
        return 0.0 if math.isclose(value, mean, rel_tol=1e-9) else math.copysign(math.inf, value - mean)
    return (value - mean) / (sd * math.sqrt(1 + 1 / len(history)))


def worse_t(key: str, history: list[float], value: float) -> float:
    """:func:`prediction_t` of ``value`` over ``history`` with its sign turned so that positive is
    worse (``-t`` for figures where lower is worse: throughputs, cache hit rates)."""
    worse = -1.0 if key.partition(".")[0] in LOWER_IS_WORSE else 1.0
    return worse * prediction_t(history, value)


def t_threshold(count: int, confidence: float = CONFIDENCE) -> float:
    """The gate's bar for :func:`worse_t` over ``count`` earlier results: Student's t quantile
    1 - (1 - confidence) / 2 at ``count - 1`` degrees of freedom (module docstring)."""
    return t_quantile(1 - (1 - confidence) / 2, count - 1)


def gate_with_history(
    comparison: Comparison, current: Mapping[str, Any], history: History, confidence: float = CONFIDENCE
) -> None:
    """Re-judge ``comparison``'s rows on ``history`` when it holds >= :data:`MIN_HISTORY` results
    (module docstring); each judged row's note gives its statistic. The comparison's header says
    how many results gated it (or, with fewer, only that stored files were unreadable or that
    results of this test were left out as unlike this one: a changed ``--llm-repeat`` or setting
    starts a new history, which the header says rather than dropping the old one silently)."""
    count = len(history.points)
    skipped = f"; {counted(len(history.unreadable), 'stored file')} unreadable, skipped" if history.unreadable else ""
    if history.unlike and count < MIN_HISTORY:
        skipped += (
            f"; {counted(history.unlike, 'stored result')} of this test with another endpoint, workload, settings"
            " or number of runs (--llm-repeat) not used"
        )
    if count < MIN_HISTORY:  # the usual case until a store has grown: the table stays as it was
        if skipped:
            line = f"history: {counted(count, 'earlier result')} (< {MIN_HISTORY}), verdicts from the bootstrap alone{skipped}"
            comparison.header = f"{comparison.header}\n{line}" if comparison.header else line
        return
    judged_rows = [  # the rows the history judges: a statistic, on a figure the bootstrap could flag
        (row, values, value)
        for row in comparison.rows
        if row.change is not None
        and row.verdict in JUDGED
        and (value := figure(current, row.key)) is not None
        and len(values := [v for v in history.values(row.key) if v is not None]) >= MIN_HISTORY
        and judge_on_history(row.key, values, value, confidence).t is not None
    ]
    each = 1 - (1 - confidence) / max(1, len(judged_rows))  # Bonferroni over the figures judged
    threshold = t_threshold(count, each)
    line = (
        f"history: {count} earlier results gate the verdicts (Student's t prediction over them, one-sided "
        f"{1 - (1 - each) / 2:.2%} each, {1 - (1 - confidence) / 2:.1%} over the {counted(len(judged_rows), 'figure')}: "
        f"t > {threshold:.2f}){skipped}"
        if judged_rows
        else f"history: {count} earlier results, no figure judged on them (each row says why){skipped}"
    )
    comparison.header = f"{comparison.header}\n{line}" if comparison.header else line
    for row in comparison.rows:  # a row the history leaves to the bootstrap still says why
        values = [v for v in history.values(row.key) if v is not None]
        value = figure(current, row.key)
        if row.change is None or row.verdict not in JUDGED or value is None or len(values) < MIN_HISTORY:
            continue  # an unstable row keeps its verdict and note
        judged = judge_on_history(row.key, values, value, each)
        row.note = judged.note
        if judged.t is None:  # a step too recent: the bootstrap's verdict stands
            continue
        if row.verdict == "regression" and not judged.t > judged.bar:
            row.verdict = "noise"
        elif row.verdict == "improved" and not judged.t < -judged.bar:
            row.verdict = "noise"


@dataclass(frozen=True)
class HistoryJudgement:
    """One figure judged on its history: ``t`` (:func:`worse_t`, positive is worse) against
    ``bar`` (:func:`t_threshold`), or ``t`` None when fewer than :data:`MIN_HISTORY` values are
    left since the newest step (the bootstrap alone decides); ``note`` says which, for the row."""

    t: float | None
    bar: float
    note: str


def judge_on_history(
    key: str, values: Sequence[float], value: float, confidence: float = CONFIDENCE
) -> HistoryJudgement:
    """``value`` of figure ``key`` against ``values`` (>= :data:`MIN_HISTORY`, oldest first), the
    current level's only: the values from the newest :func:`last_step` on, less its
    :func:`outliers` (a regression reverted at the next commit is one such value: kept, it widened
    the spread until the same regression landing again read as noise). The newest value is never
    one of those: it is the comparison's own baseline (the reference's result), and off the rest
    it is a step too recent for :func:`last_step` to see (one value a side of it), so the
    bootstrap alone decides, as for any step with fewer than :data:`MIN_HISTORY` values since;
    left out, a change that had just landed was judged against the level before it (a pull
    request undoing a 20% faster decode read as noise, history t -0.36)."""
    step = last_step(values)
    level = list(values[step or 0 :])  # the current level: a step's spread is no run-to-run noise
    left_out = outliers(level)
    if len(level) - 1 in left_out:
        return HistoryJudgement(
            None, math.inf, "the newest result is off the rest, a step 1 result ago: history unused"
        )
    level = [v for i, v in enumerate(level) if i not in left_out]
    dropped = f", {counted(len(left_out), 'outlying result')} left out" if left_out else ""
    if len(level) < MIN_HISTORY:
        where = f"a step {len(level) + len(left_out)} results ago" if step is not None else "the history"
        left = f"{dropped}: {len(level)} left" if left_out else ""
        return HistoryJudgement(None, math.inf, f"{where}{left}: history unused")
    t, bar = worse_t(key, level, value), t_threshold(len(level), confidence)
    since = "" if step is None else f" over the {len(level)} since a step"
    shown_bar = f" (> {bar:.2f})" if step is not None or left_out else ""
    return HistoryJudgement(t, bar, f"history t {t:+.2f}{since}{dropped}{shown_bar}")


def outliers(values: Sequence[float], alpha: float = STEP_ALPHA) -> set[int]:
    """The indices of ``values`` that lie outside the rest: each in turn, the value furthest from
    the others by the prediction t of it over them, ``t = (v - m) / (s * sqrt(1 + 1/(n - 1)))``
    (m, s of the n - 1 others, n - 2 degrees of freedom: :func:`prediction_t`), is left out when
    its two-sided p-value times n (Bonferroni over the values) is below ``alpha``; then the next,
    until none is (at least three values kept). So a history of one level with normal noise loses
    a value in at most ``alpha`` of histories, and a result far off its neighbours (a regression
    reverted at the next commit, a run on a sick machine) does not widen the spread."""
    kept = list(range(len(values)))
    while len(kept) >= 4:
        worst, worst_t = kept[0], -1.0
        for i in kept:
            others = [values[j] for j in kept if j != i]
            t = abs(prediction_t(others, values[i]))
            if t > worst_t:
                worst, worst_t = i, t
        if not t_two_sided_p(worst_t, len(kept) - 2) * len(kept) < alpha:
            break
        kept.remove(worst)
    return set(range(len(values))) - set(kept)


def last_step(values: Sequence[float], alpha: float = STEP_ALPHA) -> int | None:
    """The index where the newest level of ``values`` (oldest first) starts, or None. Binary
    segmentation from the oldest value on: over the values left, each split with at least two
    values a side gives the two-sample t of its means (pooled SD about each side's own mean,
    which a step does not inflate: ``t = |m_r - m_l| / (s_p * sqrt(1/n_l + 1/n_r))``, n - 2
    degrees of freedom); the largest is a step when its two-sided p-value times the number of
    splits tried (Bonferroni) is below ``alpha``, so that a history without a step shows one in
    at most ``alpha`` of searches, however short it is. The search goes on after a step. A
    history without spread (an exact simulator) steps wherever its means differ beyond rounding."""
    start, found = 0, None
    while len(values) - start >= 4:
        segment = values[start:]
        n = len(segment)
        best, best_t = 0, 0.0
        for i in range(2, n - 1):
            left, right = segment[:i], segment[i:]
            mean_left, mean_right = statistics.fmean(left), statistics.fmean(right)
            squares = sum((v - mean_left) ** 2 for v in left) + sum((v - mean_right) ** 2 for v in right)
            pooled_sd, shift = math.sqrt(squares / (n - 2)), abs(mean_right - mean_left)
            scale = max(abs(mean_left), abs(mean_right))
            if pooled_sd <= 1e-12 * scale:
                t = math.inf if shift > 1e-9 * scale else 0.0
            else:
                t = shift / (pooled_sd * math.sqrt(1 / i + 1 / (n - i)))
            if t > best_t:
                best, best_t = i, t
        if not t_two_sided_p(best_t, n - 2) * (n - 3) < alpha:
            break
        start = found = start + best
    return found


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= t) for Student's t with integer ``df`` >= 1, exact (Abramowitz & Stegun 26.7.3
    and 26.7.4, with theta = atan(t / sqrt(df)) and c = cos(theta)): one minus
    (2/pi)(theta + sin(theta)(c + 2/3 c^3 + ... + (2*4...(df-3))/(1*3...(df-2)) c^(df-2))) for odd
    df, sin(theta)(1 + 1/2 c^2 + ... + (1*3...(df-3))/(2*4...(df-2)) c^(df-2)) for even df."""
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:
        term = total = math.cos(theta) if df > 1 else 0.0
        for j in range(1, (df - 1) // 2):
            term *= c2 * (2 * j) / (2 * j + 1)
            total += term
        inside = 2 / math.pi * (theta + math.sin(theta) * total)
    else:
        term = total = 1.0
        for j in range(df // 2 - 1):
            term *= c2 * (2 * j + 1) / (2 * j + 2)
            total += term
        inside = math.sin(theta) * total
    return max(0.0, 1.0 - inside)


# ------------------------------------------------------------------------ change points


def change_points(values: list[float], max_pvalue: float = CHANGE_POINT_PVALUE) -> list[int]:
    """Indices i where ``values[i:]`` starts a new level (Otava's e-divisive; module docstring)."""
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        raise LLMReplayError(f"change points need Apache Otava: {EXTRA}") from None
    if len(values) < MIN_CHANGE_POINT_RESULTS:
        return []
    found, _ = compute_change_points(values, window_len=CHANGE_POINT_WINDOW, max_pvalue=max_pvalue)
    return sizeable(values, sorted(int(point.index) for point in found))


def sizeable(values: Sequence[float], points: Sequence[int], minimum: float = MIN_LEVEL_CHANGE) -> list[int]:
    """``points`` without those whose level change (after / before - 1 of :func:`level_means`)
    is under ``minimum``: the smallest dropped first and the levels taken again after each drop.
    On results with little noise (the simulator's) e-divisive finds 0.1% shifts significant,
    which no one would act on."""
    kept = list(points)
    while kept:
        levels = level_means(list(values), kept)
        sizes = [abs(levels[i] / levels[i - 1] - 1) if levels[i - 1] else math.inf for i in kept]
        smallest = min(range(len(kept)), key=sizes.__getitem__)
        if sizes[smallest] >= minimum:
            break
        del kept[smallest]
    return kept


def metric_series(history: History, key: str) -> tuple[list[str], list[float], list[int]]:
    """(commits, values, change point indices) of ``key`` over ``history``, oldest first,
    results that did not measure it left out: what a trend plot draws."""
    pairs = [
        (commit, value)
        for (commit, _), value in zip(history.points, history.values(key), strict=True)
        if value is not None
    ]
    commits, values = [c for c, _ in pairs], [v for _, v in pairs]
    return commits, values, change_points(values)


def level_means(values: list[float], points: list[int]) -> list[float]:
    """Each value's level: the mean of the values between the change points around it."""
    bounds = [0, *points, len(values)]
    out: list[float] = []
    for start, end in pairwise(bounds):
        out += [statistics.fmean(values[start:end])] * (end - start)
    return out


def trend(history: History, current: Mapping[str, Any], keys: Sequence[str], reference: str) -> dict[str, Any]:
    """What the report's trend plot draws (the gate stores it as the report's ``record["history"]``):
    ``reference`` (whose first-parent history ``history`` is), ``earlier`` (its result count) and

    - ``series``: key -> ``{"commits", "values", "change_points"}`` (:func:`metric_series`) over
      ``history`` then ``current`` (this run, always the last point), for each of ``keys`` this
      run measured; or
    - ``note``: the one line that says why there is no plot: fewer than :data:`MIN_TREND` earlier
      results, Apache Otava not installed, or none of ``keys`` measured."""
    block: dict[str, Any] = {"reference": reference, "earlier": len(history.points)}
    if len(history.points) < MIN_TREND:
        block["note"] = (
            f"{counted(len(history.points), 'earlier result')} like this one on the first-parent history of {reference}; "
            f"a trend needs {MIN_TREND} (save some with --llm-save)"
        )
        return block
    with_this_run = History([*history.points, (str(current.get("commit") or "this run"), current)])
    series: dict[str, Any] = {}
    try:
        for key in keys:
            if figure(current, key) is not None:
                commits, values, points = metric_series(with_this_run, key)
                series[key] = {"commits": commits, "values": values, "change_points": points}
    except LLMReplayError as exc:  # no Otava
        block["note"] = str(exc)
        return block
    if series:
        block["series"] = series
    else:
        block["note"] = f"this run measured none of the gated figures ({', '.join(keys)})"
    return block
