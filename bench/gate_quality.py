"""How good is the regression gate (``pytest_llmreplay.gate.baseline.compare``) at telling a real slowdown from noise?

Issue 20's measure: on the simulator with injected noise, A/A pairs (no change) and A/B pairs
(a 10% prefill slowdown) of a CI perf test, at least 300 of each; report the false-alarm rate
(target <= 1%) and the detection rate (target >= 95%) of the gate at its defaults, with and
without repeats and with a stored history, next to what pytest-benchmark's ``median:5%`` check
and asv's Mann-Whitney rule would have said on the same data.

**Noise** (an assumption: the simulator on the virtual clock is deterministic). The profile's
timing model is wrapped in :class:`Jittered`: every iteration's duration (``iteration_s``, and
each step of ``decode_span_s``) is multiplied by an independent lognormal factor with mean 1 and
coefficient of variation ``ITERATION_CV`` (kernel and host jitter), and every duration of one run
by one more lognormal factor, mean 1, CV ``RUN_CV`` (runner-to-runner speed: clocks, thermals, a
neighbour on the host). Each run draws both from its own seed; the workload, the replay settings
and the endpoint seed are identical in every run (``compare`` refuses different settings).

**Slowdown** (A/B): iterations that carry prefill work (``batch.prefill_tokens > 0``) take
``--slowdown`` times as long (default 1.10), applied before the noise; decode-only iterations
are untouched. TTFT is the wait for the iteration in flight plus the prefill iteration(s), and
longer prefills change the batching, so the TTFT shift need not equal the factor: the script
reports the shift it produced (each A/B run against the A/A run with the same noise seed).

**Workload**: a generated multi-turn chat (``SyntheticSpec``): 150 sessions of 1-3 turns at 4
sessions/s (Poisson), prompts ~N(1024, 256) tokens of which half is one of 4 shared prefixes,
64-256 output tokens, on ``llama-3.1-8b-h100``: about 300 requests and 46 s of traffic, about
10 requests running at a time, no queueing. What a CI perf test can afford per commit on a
real GPU; one replay takes about 0.2 s here.

**Procedure**, per noise setting (``--noise ITERATION_CV:RUN_CV``; default 5%:1% and 5%:2%):
for pair i = 1..N, ``R`` = ``--repeat`` runs of each of: a baseline (seeds 10000 + i*R + j), an
A/A current (seeds i*R + j) and an A/B current (the same seeds, slowed). The runs of a side
are stored as one record of runs (``repeats.pool_records``, what ``--llm-repeat R`` stores), and
each row of the tables is computed for r = 1..R runs per side (the first r of them).

**Methods** on each pair (A/A: a false alarm is any regression row, any metric; A/B: detection
is ``ttft.p50`` called a regression):

- ``gate``: ``baseline.compare(base, current)`` with the default tolerances and confidence (two
  levels, runs then requests, when r > 1; Holm's step-down over the figures); next to it the
  rule before Holm: each figure compared alone at 95%;
- ``pytest-benchmark median:5%``: ``--benchmark-compare-fail=median:5%`` fails when
  ``current.median / saved.median * 100 - 100 > 5`` (pytest_benchmark/utils.py,
  ``PercentageRegressionCheck``), each request's TTFT one round (the runs' requests pooled);
- ``asv``: asv's rule for a change (``asv compare``, asv/_stats.py ``is_different``): the raw
  samples differ by Mann-Whitney's U at p < 0.002 (two-sided), here each request's TTFT a
  sample, and the result changed by more than the factor, here the gate's 5% on the median;
- ``history``: the gate with ``history.gate_with_history`` over K earlier results (K = 5, 10,
  20): each pair's history is K baseline records of *other* pairs (drawn without replacement,
  seeded), its own baseline the newest; the rule is the Student's t prediction statistic of
  ``gate/history.py``, next to the same with a z-score (normal quantile, the history's sd taken as
  exact: Bencher's z-score threshold) and Mann-Whitney's U between the history's values and the
  current runs' values (one-sided at the same level: asv's test over history), each confirming
  or vetoing the bootstrap's call (a regression needs both, as in the gate).

Rates come with Wilson 95% intervals.

    .venv/bin/python bench/gate_quality.py [--pairs 300] [--noise 0.05:0.01 0.05:0.02] [--repeat 3] [--rows 1 3] [--history 5 10 20] [--jobs 2]

Needs scipy for the Mann-Whitney rows (installed with the ``[history]`` extra).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np

from pytest_llmreplay import PromptFactory, ReplaySettings, Result, VirtualClock, load_tokenizer
from pytest_llmreplay.gate import baseline, history
from pytest_llmreplay.gate.repeats import pool_records
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.sim.timing import Batch, TimingModel
from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate

PROFILE = "llama-3.1-8b-h100"
SPEC = SyntheticSpec(
    sessions=150,
    input_tokens={"dist": "normal", "mean": 1024, "std": 256, "min": 64},
    output_tokens={"dist": "uniform", "min": 64, "max": 256},
    rate=4.0,
    turns={"dist": "uniform", "min": 1, "max": 3},
    delay={"dist": "uniform", "min": 0.5, "max": 2.0},
    shared_prefix_ratio=0.5,
    prefix_groups=4,
    seed=7,
)
SETTINGS = ReplaySettings()
PLAIN_THRESHOLD = 5  # pytest-benchmark median:5%
ASV_P = 0.002  # asv/_stats.py is_different
BASELINE_SEED_OFFSET = 10_000


def lognormal_factor(rng: np.random.Generator, cv: float, size: int | None = None) -> Any:
    """Lognormal draws with mean 1 and coefficient of variation ``cv`` (1.0 when cv is 0)."""
    if cv <= 0:
        return 1.0 if size is None else np.ones(size)
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), size)


class Jittered:
    """``timing`` with seeded noise (see the module docstring) and an optional prefill slowdown."""

    def __init__(
        self, timing: TimingModel, *, iteration_cv: float, run_cv: float, seed: int, prefill_slowdown: float = 1.0
    ) -> None:
        self.timing = timing
        self.iteration_cv = iteration_cv
        self.rng = np.random.default_rng(seed)
        self.run_factor = float(lognormal_factor(self.rng, run_cv))
        self.prefill_slowdown = prefill_slowdown

    def iteration_s(self, batch: Batch) -> float:
        duration = self.timing.iteration_s(batch)
        if batch.prefill_tokens > 0:
            duration *= self.prefill_slowdown
        return duration * self.run_factor * float(lognormal_factor(self.rng, self.iteration_cv))

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        durations = self.timing.decode_span_s(seqs, kv_tokens, kv_usage, usage_step, steps)
        return durations * self.run_factor * lognormal_factor(self.rng, self.iteration_cv, len(durations))


# ------------------------------------------------------------------------ one run

_WORKER: dict[str, Any] = {}


def _setup() -> None:
    """Load the workload, profile and tokenizer once per process."""
    if not _WORKER:
        _WORKER.update(workload=generate(SPEC), profile=load_profile(PROFILE), tokenizer=load_tokenizer(None))


def run_once(seed: int, iteration_cv: float, run_cv: float, slowdown: float = 1.0) -> dict[str, Any]:
    """One replay: the stored record, the same samples in workload order, and the wall time."""
    _setup()
    profile = _WORKER["profile"]
    timing = Jittered(profile.timing, iteration_cv=iteration_cv, run_cv=run_cv, seed=seed, prefill_slowdown=slowdown)
    prompts = PromptFactory(_WORKER["tokenizer"], seed=0)
    endpoint = SimEndpoint(dataclasses.replace(profile, timing=timing), prompts, seed=0)
    started = time.perf_counter()
    result = Result(replay(_WORKER["workload"], endpoint, prompts, SETTINGS, clock=VirtualClock()), gpus=profile.gpus)
    record = baseline.make_record(
        result,
        test="bench/gate_quality",
        fingerprint={"endpoint": endpoint.name},
        workload={"spec": repr(SPEC)},
        git={"commit": None},
    )
    return {"record": record, "wall_s": time.perf_counter() - started}


def side(seeds: list[int], iteration_cv: float, run_cv: float, slowdown: float = 1.0) -> list[dict[str, Any]]:
    return [run_once(seed, iteration_cv, run_cv, slowdown) for seed in seeds]


def stored(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first runs as ``--llm-repeat`` stores them: one record of runs."""
    return pool_records([run["record"] for run in runs], [{"seed": None, "cache_reset": None} for _ in runs])


def plain_check(base: dict[str, Any], current: dict[str, Any], metric: str = "ttft") -> bool:
    """pytest-benchmark's PercentageRegressionCheck on ``metric``'s median (module docstring)."""
    saved = float(np.median(base["samples"][metric]))
    return float(np.median(current["samples"][metric])) / saved * 100 - 100 > PLAIN_THRESHOLD


def asv_check(base: dict[str, Any], current: dict[str, Any], metric: str = "ttft") -> bool:
    """asv's is_different (Mann-Whitney U, p < ASV_P) and a median change of ``metric`` beyond 5%."""
    from scipy.stats import mannwhitneyu

    b, c = base["samples"][metric], current["samples"][metric]
    return float(np.median(c)) / float(np.median(b)) - 1 > 0.05 and mannwhitneyu(b, c).pvalue < ASV_P


def judge(base: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """The gate's verdicts (Holm's step-down over the figures), each figure's regression judged
    alone at 95% (``per_figure``, the rule before Holm: the change beyond its tolerance on the worse
    side and the bootstrap's p < 5%), and the other methods'."""
    comparison = baseline.compare(base, current)
    if comparison.mismatch:
        raise SystemExit(f"bench: {comparison.mismatch}")
    rows = {
        row.key: {"verdict": row.verdict, "change": row.change, "tolerance": row.tolerance} for row in comparison.rows
    }
    per_figure = {
        row.key: "regression"
        if row.change is not None
        and worse(row.key) * row.change > row.tolerance
        and row.p_value < 1 - baseline.CONFIDENCE
        else row.verdict
        for row in comparison.rows
    }
    return {
        "rows": rows,
        "per_figure": per_figure,
        "unstable": comparison.unstable is not None,
        "plain": plain_check(base, current),
        "asv": asv_check(base, current),
        "figures": {key: history.figure(current, key) for key in rows},
        "run_figures": {key: [history.figure(run, key) for run in current.get("runs") or [current]] for key in rows},
    }


def pair_job(job: tuple[int, int, float, float, float, tuple[int, ...]]) -> dict[str, Any]:
    """Pair i: R runs of baseline, A/A and A/B; judged for each r of ``judged`` runs per side."""
    i, repeat, iteration_cv, run_cv, slowdown, judged = job
    seeds = [i * repeat + j for j in range(repeat)]
    base = side([BASELINE_SEED_OFFSET + seed for seed in seeds], iteration_cv, run_cv)
    aa = side(seeds, iteration_cv, run_cv)
    ab = side(seeds, iteration_cv, run_cv, slowdown)
    out: dict[str, Any] = {"wall_s": [run["wall_s"] for run in base + aa + ab], "by_r": {}}
    for r in judged:
        b = stored(base[:r])
        out["by_r"][r] = {
            "aa": judge(b, stored(aa[:r])),
            "ab": judge(b, stored(ab[:r])),
            "base_figures": {key: history.figure(b, key) for key in baseline.DEFAULT_TOLERANCES},
        }
    return out


# ------------------------------------------------------------------------ reporting


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(hits: int, n: int) -> str:
    if n == 0:
        return "- (no pairs)"
    low, high = wilson(hits, n)
    return f"{hits}/{n} ({hits / n:.1%}) [{low:.1%}, {high:.1%}]"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def any_regression(judged: dict[str, Any]) -> bool:
    return any(row["verdict"] == "regression" for row in judged["rows"].values())


def worse(key: str) -> float:
    """+1 where higher is worse, -1 where lower is (throughputs, cache hit rates)."""
    return -1.0 if key.partition(".")[0] in baseline.LOWER_IS_WORSE else 1.0


def history_flags(
    judged: dict[str, Any], past: list[dict[str, float]], rule: str, keys: tuple[str, ...] | None
) -> bool:
    """Would ``rule`` (t, z or mw over ``past``'s figures) confirm a regression the bootstrap called
    on any of ``keys`` (``history.gate_with_history``'s intersection of the two)?"""
    from scipy.stats import mannwhitneyu

    level = 1 - (1 - baseline.CONFIDENCE) / 2
    for key, row in judged["rows"].items():
        if (keys is not None and key not in keys) or row[
            "verdict"
        ] != "regression":  # the history only vetoes the bootstrap's call (gate/history.py)
            continue
        values = [figures[key] for figures in past if figures.get(key) is not None]
        value = judged["figures"][key]
        if rule == "t":  # the gate's own rule, as history.gate_with_history applies it (its step rule too)
            gated = history.judge_on_history(key, values, value)
            hit = gated.t is None or gated.t > gated.bar  # no level since a step: the bootstrap's call stands
        elif rule == "z":
            sd = float(np.std(values, ddof=1))
            hit = sd > 0 and worse(key) * (value - float(np.mean(values))) / sd > statistics.NormalDist().inv_cdf(level)
        else:
            runs = [v for v in judged["run_figures"][key] if v is not None]
            hit = (
                mannwhitneyu(
                    [worse(key) * v for v in runs], [worse(key) * v for v in values], alternative="greater"
                ).pvalue
                < 1 - level
            )
        if hit:
            return True
    return False


def report(
    results: list[dict[str, Any]],
    iteration_cv: float,
    run_cv: float,
    slowdown: float,
    judged: tuple[int, ...],
    depths: list[int],
) -> str:
    n = len(results)
    out = [
        f"### Noise: iteration CV {iteration_cv:.0%}, run CV {run_cv:.1%}; slowdown x{slowdown:g} on prefill iterations; {n} pairs",
        "",
    ]
    rows = []
    for r in judged:
        by = [res["by_r"][r] for res in results]
        fa = sum(any_regression(b["aa"]) for b in by)
        det = sum(b["ab"]["rows"]["ttft.p50"]["verdict"] == "regression" for b in by)
        rows.append([f"gate (Holm over the figures), {r} run(s) per side", rate(fa, n), rate(det, n)])
        fa_alone = sum(any(v == "regression" for v in b["aa"]["per_figure"].values()) for b in by)
        rows.append(
            [
                f"gate, each figure at 95% (before Holm), {r} run(s)",
                rate(fa_alone, n),
                rate(sum(b["ab"]["per_figure"]["ttft.p50"] == "regression" for b in by), n),
            ]
        )
        rows.append(
            [
                f"gate: comparisons called unstable, {r} run(s)",
                rate(sum(b["aa"]["unstable"] for b in by), n),
                rate(sum(b["ab"]["unstable"] for b in by), n),
            ]
        )
        rows.append(
            [
                f"pytest-benchmark median:5% on TTFT, {r} run(s)",
                rate(sum(b["aa"]["plain"] for b in by), n),
                rate(sum(b["ab"]["plain"] for b in by), n),
            ]
        )
        rows.append(
            [
                f"asv (Mann-Whitney p < {ASV_P}, > 5%), {r} run(s)",
                rate(sum(b["aa"]["asv"] for b in by), n),
                rate(sum(b["ab"]["asv"] for b in by), n),
            ]
        )
    out.append(table(["method", "A/A false alarms, any metric (<= 1%)", "A/B detection, ttft.p50 (>= 95%)"], rows))
    out.append("")
    rng = np.random.default_rng(0)
    rows = []
    for depth in depths:
        for r in sorted({min(judged), max(judged)}):
            by = [res["by_r"][r] for res in results]
            pasts = []
            for i in range(n):
                others = rng.choice([j for j in range(n) if j != i], size=depth - 1, replace=False)
                pasts.append([by[j]["base_figures"] for j in others] + [by[i]["base_figures"]])
            for rule, label in (("t", "Student's t prediction (the gate)"), ("z", "z-score"), ("mw", "Mann-Whitney U")):
                fa = sum(history_flags(by[i]["aa"], pasts[i], rule, None) for i in range(n))
                det = sum(history_flags(by[i]["ab"], pasts[i], rule, ("ttft.p50",)) for i in range(n))
                rows.append([f"K = {depth}, {r} run(s) per result", label, rate(fa, n), rate(det, n)])
    out.append(
        table(["history", "rule", "A/A false alarms, any metric (<= 1%)", "A/B detection, ttft.p50 (>= 95%)"], rows)
    )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--noise", nargs="+", default=["0.05:0.01", "0.05:0.02"], help="ITERATION_CV:RUN_CV settings")
    parser.add_argument(
        "--slowdown", type=float, default=1.10, help="prefill iterations take this many times as long in A/B runs"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per side (rows for 1..R)")
    parser.add_argument(
        "--rows",
        type=int,
        nargs="*",
        help="judge only these numbers of runs per side (default 1..R; each costs comparisons)",
    )
    parser.add_argument("--history", type=int, nargs="*", default=[5, 10, 20], help="history depths K")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    started = time.perf_counter()
    _setup()
    workload = _WORKER["workload"]
    print(
        f"Workload: {SPEC}; {sum(len(s.turns) for s in workload.sessions)} requests; profile {PROFILE}; settings {SETTINGS}"
    )
    print(
        f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {args.jobs} processes; confidence {baseline.CONFIDENCE}"
    )
    walls: list[float] = []
    for setting in args.noise:
        iteration_cv, run_cv = (float(x) for x in setting.split(":"))
        judged = tuple(sorted(set(args.rows or range(1, args.repeat + 1))))
        jobs = [(i, args.repeat, iteration_cv, run_cv, args.slowdown, judged) for i in range(1, args.pairs + 1)]
        t0 = time.perf_counter()
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(pair_job, jobs, chunksize=4)
        elapsed = time.perf_counter() - t0
        for res in results:
            walls.extend(res["wall_s"])
        print()
        print(report(results, iteration_cv, run_cv, args.slowdown, judged, args.history))
        print(f"\n{3 * args.pairs * args.repeat} replays and their comparisons: {elapsed:.1f} s wall")
        sys.stdout.flush()
    print(
        f"\nOne replay (virtual clock, with the noise wrapper): median {np.median(walls):.3f} s, max {max(walls):.3f} s."
    )
    print(f"Total wall time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
