"""How good is the regression gate (``pytest_llmreplay.baseline.compare``) at telling a real slowdown from noise?

The issue: on the simulator, repeat a test 100 times with no change (A/A) and 100 times with a
10% TTFT slowdown injected (A/B); report the false-alarm rate (target <= 1%) and the detection
rate (target >= 95%), next to what pytest-benchmark's plain percentage check would have said on
the same data.

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

**Procedure**, per noise setting (``--noise ITERATION_CV:RUN_CV``; default 5%:1%, 2%:0.5% and
5%:2%): for i = 1..N, a baseline run (seed 10000 + i), an A/A run (seed i) and an A/B run
(seed i, slowed). *Paired* design (the headline): pair i compares
A/A run i, and A/B run i, with baseline run i: in CI each commit's baseline is itself one noisy
run. *Fixed-baseline* design: every A/A and A/B run against one baseline run (seed 0), the
simplest procedure; its rates are conditional on that one baseline's luck.

**Methods** on each pair:

- ``gate``: ``compare(base, current)`` with the default tolerances and 95% bootstrap; a false
  alarm is any regression row (any metric), detection is ``ttft.p50`` (or any TTFT row) called
  a regression;
- ``gate, tolerance only``: the same rows with the significance condition dropped (the change
  is worse than the tolerance);
- ``gate``: since 2026-11-22 the stored samples carry keys (request, session, window) and
  ``compare`` pairs the bootstrap when both runs hold the same ones, as they do here;
- ``gate at 80% confidence``: ``compare`` with ``baseline.CONFIDENCE`` replaced for the call;
- ``gate with an unpaired bootstrap``: the records without their ``sample_keys``, so that each
  side is resampled on its own (the gate before request keys);
- ``pytest-benchmark median:5%``: ``--benchmark-compare-fail=median:5%`` fails when
  ``current.median / saved.median * 100 - 100 > 5`` (pytest_benchmark/utils.py,
  ``PercentageRegressionCheck``), each request's TTFT taken as one round; also applied to the
  medians of ttft, tpot, latency and ttfat at once, as one benchmark per metric would;
- ``oracle``: the lowest threshold on the ttft.p50 change that at most 1% of these A/A pairs
  exceed, and the detection it gives: fitted to the data, so an upper bound for any rule that
  looks at the ttft.p50 change alone.

``--repeats K`` runs each side of a pair K times (seeds i*K .. i*K+K-1) and pools their samples
into one record before comparing, as a CI job that repeats the test would.

Rates come with Wilson 95% intervals. Also printed per metric: the A/A change's spread across
pairs (what the run-to-run noise really is) next to the width of the bootstrap's interval and how
often that interval contains 0 (95% if the interval were right).

    .venv/bin/python bench/gate_quality.py [--pairs 100] [--noise 0.05:0.01 ...] [--slowdown 1.10] [--repeats 1] [--jobs 2]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import multiprocessing
import os
import platform
import sys
import time
from typing import Any, Iterator

import numpy as np

from pytest_llmreplay import PromptFactory, ReplaySettings, Result, VirtualClock, load_tokenizer
from pytest_llmreplay import baseline
from pytest_llmreplay.formats.synthetic import SyntheticSpec, generate
from pytest_llmreplay.driver import replay
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.sim.timing import Batch, TimingModel

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
TTFT_KEYS = ("ttft.p50", "ttft.p90")
PLAIN_THRESHOLD = 5  # pytest-benchmark median:5%
PLAIN_METRICS = ("ttft", "tpot", "latency", "ttfat")
FIXED_BASELINE_SEED = 0
BASELINE_SEED_OFFSET = 10_000


def lognormal_factor(rng: np.random.Generator, cv: float, size: int | None = None) -> Any:
    """Lognormal draws with mean 1 and coefficient of variation ``cv`` (1.0 when cv is 0)."""
    if cv <= 0:
        return 1.0 if size is None else np.ones(size)
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), size)


class Jittered:
    """``timing`` with seeded noise (see the module docstring) and an optional prefill slowdown."""

    def __init__(self, timing: TimingModel, *, iteration_cv: float, run_cv: float, seed: int, prefill_slowdown: float = 1.0) -> None:
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
        result, test="bench/gate_quality", fingerprint={"endpoint": endpoint.name}, workload={"spec": repr(SPEC)}, git={"commit": None}
    )
    wall = time.perf_counter() - started
    return {"record": record, "unkeyed": {**record, "sample_keys": {}}, "wall_s": wall}


@contextlib.contextmanager
def patched(**values: Any) -> Iterator[None]:
    """Set module globals of ``baseline`` for the duration of a call (this process only)."""
    saved = {name: getattr(baseline, name) for name in values}
    for name, value in values.items():
        setattr(baseline, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(baseline, name, value)


def verdicts(base: dict[str, Any], current: dict[str, Any], **patch: Any) -> dict[str, dict[str, Any]]:
    """key -> {verdict, change, low, high} of ``baseline.compare`` (optionally patched)."""
    with patched(**patch):
        comparison = baseline.compare(base, current)
    if comparison.mismatch:
        raise SystemExit(f"bench: {comparison.mismatch}")
    return {row.key: {"verdict": row.verdict, "change": row.change, "low": row.low, "high": row.high, "beyond": beyond_tolerance(row)} for row in comparison.rows}


def beyond_tolerance(row: baseline.Row) -> bool:
    """The change is worse than the tolerance, significant or not."""
    if row.change is None:
        return False
    worse = -1.0 if row.key.partition(".")[0] in baseline.LOWER_IS_WORSE else 1.0
    return worse * row.change > row.tolerance


def plain_check(base: dict[str, Any], current: dict[str, Any], metric: str) -> bool:
    """pytest-benchmark's PercentageRegressionCheck on the median: fails when the median grew by
    more than PLAIN_THRESHOLD percent of the saved one (medians of the stored samples, pooled
    over repeats)."""
    saved = float(np.median(base["samples"][metric]))
    if not saved:
        return True
    return float(np.median(current["samples"][metric])) / saved * 100 - 100 > PLAIN_THRESHOLD


def evaluate(base: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """Every method's verdicts on one (baseline, current) pair."""
    record_b, record_c = base["record"], current["record"]
    out = {
        "gate": verdicts(record_b, record_c),
        "gate80": verdicts(record_b, record_c, CONFIDENCE=0.80),
        "paired": verdicts(base["unkeyed"], current["unkeyed"]),  # without keys: the unpaired bootstrap
        "plain": {metric: plain_check(record_b, record_c, metric) for metric in PLAIN_METRICS},
    }
    return out


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``runs`` as one: their samples (stored and aligned) concatenated, run by run."""
    if len(runs) == 1:
        return runs[0]
    out = {}
    for part in ("record", "unkeyed"):
        first = runs[0][part]
        samples = {name: [v for run in runs for v in run[part]["samples"][name]] for name in first["samples"]}
        out[part] = {**first, "samples": samples}
    return out


def pair_job(job: tuple[int, int, float, float, float, dict[str, Any] | None]) -> dict[str, Any]:
    """Pair i of one noise setting: runs baseline i, A/A i and A/B i (``repeats`` runs each,
    pooled) and evaluates them (and the A/A and A/B runs against the fixed baseline, if given)."""
    i, repeats, iteration_cv, run_cv, slowdown, fixed = job
    seeds = [i * repeats + j for j in range(repeats)]
    base_runs = [run_once(BASELINE_SEED_OFFSET + seed, iteration_cv, run_cv) for seed in seeds]
    aa_runs = [run_once(seed, iteration_cv, run_cv) for seed in seeds]
    ab_runs = [run_once(seed, iteration_cv, run_cv, slowdown) for seed in seeds]
    base, aa, ab = pooled(base_runs), pooled(aa_runs), pooled(ab_runs)
    out = {
        "aa": evaluate(base, aa),
        "ab": evaluate(base, ab),
        "shift": float(np.mean([b["record"]["summary"]["ttft"]["p50"] / a["record"]["summary"]["ttft"]["p50"] - 1 for a, b in zip(aa_runs, ab_runs)])),
        "shift_p90": float(np.mean([b["record"]["summary"]["ttft"]["p90"] / a["record"]["summary"]["ttft"]["p90"] - 1 for a, b in zip(aa_runs, ab_runs)])),
        "wall_s": [run["wall_s"] for run in base_runs + aa_runs + ab_runs],
    }
    if fixed is not None:
        out["fixed_aa"] = {"gate": verdicts(fixed["record"], aa["record"]), "plain": {m: plain_check(fixed["record"], aa["record"], m) for m in PLAIN_METRICS}}
        out["fixed_ab"] = {"gate": verdicts(fixed["record"], ab["record"]), "plain": {m: plain_check(fixed["record"], ab["record"], m) for m in PLAIN_METRICS}}
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
    low, high = wilson(hits, n)
    return f"{hits}/{n} ({hits / n:.0%}) [{low:.0%}, {high:.0%}]"


def best_threshold(aa_changes: np.ndarray, allowed_rate: float = 0.01) -> float:
    """The lowest threshold that at most ``allowed_rate`` of the A/A changes exceed."""
    ordered = np.sort(aa_changes)[::-1]
    k = int(math.floor(allowed_rate * len(ordered)))
    return float(ordered[k]) if k < len(ordered) else float(ordered[-1])


def gate_flags(rows: dict[str, dict[str, Any]], keys: tuple[str, ...] | None, tolerance_only: bool = False) -> bool:
    """True when any of ``keys`` (all rows when None) is a regression (or, with
    ``tolerance_only``, changed for the worse by more than its tolerance)."""
    return any(row["beyond"] if tolerance_only else row["verdict"] == "regression" for key, row in rows.items() if keys is None or key in keys)


METHODS = (
    # label, which evaluation, false alarm on, detection on, tolerance only
    ("gate (compare, defaults)", "gate", None, ("ttft.p50",), False),
    ("gate: tolerance only, no significance", "gate", None, ("ttft.p50",), True),
    ("gate at 80% confidence", "gate80", None, ("ttft.p50",), False),
    ("gate with an unpaired bootstrap (no sample keys: before 2026-11-22)", "paired", None, ("ttft.p50",), False),
)


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def report(results: list[dict[str, Any]], iteration_cv: float, run_cv: float, slowdown: float, repeats: int) -> str:
    n = len(results)
    pooled_note = f", each side {repeats} runs pooled" if repeats > 1 else ""
    out = [f"### Noise: iteration CV {iteration_cv:.0%}, run CV {run_cv:.1%}; slowdown x{slowdown:g} on prefill iterations; {n} pairs{pooled_note}"]
    shifts = np.array([r["shift"] for r in results])
    shifts90 = np.array([r["shift_p90"] for r in results])
    ab_changes = np.array([r["ab"]["gate"]["ttft.p50"]["change"] for r in results])
    aa_changes = np.array([r["aa"]["gate"]["ttft.p50"]["change"] for r in results])
    out.append(
        f"Injected TTFT shift (A/B run vs the A/A run with the same seed): p50 {shifts.mean():+.1%} mean (sd {shifts.std(ddof=1):.1%}), "
        f"p90 {shifts90.mean():+.1%} mean (sd {shifts90.std(ddof=1):.1%}). "
        f"ttft.p50 change vs the pair's baseline: A/A {aa_changes.mean():+.1%} mean, sd {aa_changes.std(ddof=1):.1%}; "
        f"A/B {ab_changes.mean():+.1%} mean, sd {ab_changes.std(ddof=1):.1%}."
    )
    out.append("")
    rows = []
    for label, which, fa_keys, det_keys, tol_only in METHODS:
        fa_any = sum(gate_flags(r["aa"][which], fa_keys, tol_only) for r in results)
        fa_ttft = sum(gate_flags(r["aa"][which], TTFT_KEYS, tol_only) for r in results)
        det = sum(gate_flags(r["ab"][which], det_keys, tol_only) for r in results)
        det_any_ttft = sum(gate_flags(r["ab"][which], TTFT_KEYS, tol_only) for r in results)
        rows.append([label, rate(fa_any, n), rate(fa_ttft, n), rate(det, n), rate(det_any_ttft, n)])
    for label, metrics in (("pytest-benchmark median:5%, TTFT", ("ttft",)), ("pytest-benchmark median:5%, ttft/tpot/latency/ttfat", PLAIN_METRICS)):
        fa_any = sum(any(r["aa"]["plain"][m] for m in metrics) for r in results)
        fa_ttft = sum(r["aa"]["plain"]["ttft"] for r in results)
        det = sum(r["ab"]["plain"]["ttft"] for r in results)
        rows.append([label, rate(fa_any, n), rate(fa_ttft, n), rate(det, n), rate(det, n)])
    # the best threshold on the ttft.p50 change alone, chosen after seeing the A/A data: an upper bound
    threshold = best_threshold(aa_changes)
    det = int(np.sum(ab_changes > threshold))
    fa = int(np.sum(aa_changes > threshold))
    rows.append([f"oracle: ttft.p50 change > {threshold:.1%} (threshold fitted to these A/A pairs)", rate(fa, n), rate(fa, n), rate(det, n), rate(det, n)])
    if "fixed_aa" in results[0]:
        fa_any = sum(gate_flags(r["fixed_aa"]["gate"], None) for r in results)
        fa_ttft = sum(gate_flags(r["fixed_aa"]["gate"], TTFT_KEYS) for r in results)
        det = sum(gate_flags(r["fixed_ab"]["gate"], ("ttft.p50",)) for r in results)
        det_any = sum(gate_flags(r["fixed_ab"]["gate"], TTFT_KEYS) for r in results)
        rows.append([f"gate, one fixed baseline (seed {FIXED_BASELINE_SEED})", rate(fa_any, n), rate(fa_ttft, n), rate(det, n), rate(det_any, n)])
        fa = sum(r["fixed_aa"]["plain"]["ttft"] for r in results)
        det = sum(r["fixed_ab"]["plain"]["ttft"] for r in results)
        rows.append(["pytest-benchmark median:5% TTFT, one fixed baseline", rate(fa, n), rate(fa, n), rate(det, n), rate(det, n)])
    out.append(table(["method (paired design unless said)", "A/A false alarms, any metric (<= 1%)", "A/A false alarms, TTFT rows", "A/B detection, ttft.p50 (>= 95%)", "A/B detection, any TTFT row"], rows))
    out.append("")
    # per metric: what the noise is, what the bootstrap thinks it is
    rows = []
    for key, allowed in baseline.DEFAULT_TOLERANCES.items():
        changes = np.array([r["aa"]["gate"][key]["change"] for r in results], dtype=float)
        half = np.array([(r["aa"]["gate"][key]["high"] - r["aa"]["gate"][key]["low"]) / 2 for r in results], dtype=float)
        half_p = np.array([(r["aa"]["paired"][key]["high"] - r["aa"]["paired"][key]["low"]) / 2 for r in results], dtype=float)
        cover = sum(r["aa"]["gate"][key]["low"] <= 0 <= r["aa"]["gate"][key]["high"] for r in results)
        cover_p = sum(r["aa"]["paired"][key]["low"] <= 0 <= r["aa"]["paired"][key]["high"] for r in results)
        spread = np.percentile(changes, 97.5) - np.percentile(changes, 2.5)
        fa = {which: sum(r["aa"][which][key]["verdict"] == "regression" for r in results) for which in ("gate", "gate80", "paired")}
        beyond = sum(r["aa"]["gate"][key]["beyond"] for r in results)
        det = sum(r["ab"]["gate"][key]["verdict"] == "regression" for r in results)
        rows.append([
            key, f"{allowed:.0%}", f"{changes.std(ddof=1):.2%}", f"±{spread / 2:.1%}", f"±{np.median(half):.1%}", f"{cover}/{n}",
            f"±{np.median(half_p):.1%}", f"{cover_p}/{n}", f"{beyond}", f"{fa['gate']} / {fa['gate80']} / {fa['paired']}", f"{det}",
        ])
    out.append(table(
        ["metric", "tolerance", "A/A change sd", "A/A 95% range", "bootstrap CI (median)", "CI holds 0", "unpaired CI (median)", "unpaired CI holds 0",
         "A/A beyond tolerance", "A/A regressions: gate / 80% / unpaired", "A/B regressions (gate)"],
        rows,
    ))
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--noise", nargs="+", default=["0.05:0.01", "0.02:0.005", "0.05:0.02"], help="ITERATION_CV:RUN_CV settings, the first is the headline")
    parser.add_argument("--slowdown", type=float, default=1.10, help="prefill iterations take this many times as long in A/B runs")
    parser.add_argument("--repeats", type=int, default=1, help="runs per side of a pair, their samples pooled (no fixed-baseline design then)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-fixed", action="store_true", help="skip the fixed-baseline design")
    args = parser.parse_args()

    started = time.perf_counter()
    _setup()
    workload = _WORKER["workload"]
    print(f"Workload: {SPEC}; {sum(len(s.turns) for s in workload.sessions)} requests; profile {PROFILE}; settings {SETTINGS}")
    print(f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {args.jobs} processes")
    walls: list[float] = []
    for setting in args.noise:
        iteration_cv, run_cv = (float(x) for x in setting.split(":"))
        fixed = None if args.no_fixed or args.repeats > 1 else run_once(FIXED_BASELINE_SEED, iteration_cv, run_cv)
        jobs = [(i, args.repeats, iteration_cv, run_cv, args.slowdown, fixed) for i in range(1, args.pairs + 1)]
        t0 = time.perf_counter()
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(pair_job, jobs, chunksize=4)
        elapsed = time.perf_counter() - t0
        for r in results:
            walls.extend(r["wall_s"])
        print()
        print(report(results, iteration_cv, run_cv, args.slowdown, args.repeats))
        print(f"\n{3 * args.pairs * args.repeats + (fixed is not None)} replays and their comparisons: {elapsed:.1f} s wall")
        sys.stdout.flush()
    print(f"\nOne replay (virtual clock, with the noise wrapper): median {np.median(walls):.3f} s, max {max(walls):.3f} s (one process of {args.jobs} busy).")
    print(f"Total wall time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
