"""How far apart are the runs of one stored side? Data for an ``unstable`` verdict.

A side is what ``--llm-repeat R`` stores: R runs of one test, each with its own summary
(``record["runs"][i]["summary"]``; here the raw sides of ``bench/gate_live.py``, whose
``records[i]["summary"]`` are the same summaries before pooling). For every side and every
figure the gate compares (``baseline.DEFAULT_TOLERANCES``) this script computes the spread
between the side's runs: ``max/min`` of the runs' figure (for throughputs and the cache hit rate
too: the ratio is symmetric) and the CV (population sd / mean, as ``gate_live.py`` reports it),
and marks **burst** runs, runs that received each response's stream in one burst
(``itl.p50 == 0`` or ``tpot.p50 < 0.1 ms``).

**Data**:

- live: the raw sides of ``bench/gate_live.py`` (``--live``; default the four runs in
  ``bench/results``, ``.jsonl`` or ``.jsonl.xz``). The first three (2026-11-25, -25b, -25c) are
  the data a rule is chosen from; the fourth (2026-11-26, five runs per side, bimodal) is reported
  as a check. Baseline (A) sides and slowed (B) sides are counted apart; each is taken with its
  first r runs, r = 3 (every run) and r = 5 (where the side holds 5).
- simulated: ``bench/gate_quality.py``'s noise model (``Jittered``: lognormal per-iteration CV
  and per-run CV, its workload, profile and settings), for each ``--noise`` setting ``--pairs``
  pairs of sides of ``--repeat`` runs with ``gate_quality.py``'s seeds (pair i: baseline
  10000 + i*R + j, current i*R + j), i.e. the A/A sides ``gate_quality.py --repeat R`` measures.
  The runs' summaries are cached in ``--sim-cache`` (JSON lines; a rerun only simulates what is
  missing).

- resampled: the quiet live runs' (names with "quiet") A sides have 3 runs, the gate's default
  is 5 now: ``--resample`` made-up sides of 3 and of 5 runs drawn from their runs (each run as its
  figures' log deviation from its side's mean, whole runs drawn with replacement, see
  :func:`resampled`), what the same noise would spread over 5 runs.

**Rules** (a side is flagged; a comparison is ``unstable`` when either side is): a time figure's
max/min over the runs beyond T; any gated figure's max/min beyond T; a time figure's CV beyond c;
burst and streamed runs mixed in the side. For each, the flagged sides per data set, and on the
live A/A pairs (consecutive A sides, as ``gate_live.py`` pairs them) the gate's false alarms
(``baseline.compare`` at its defaults, any regression row) that the rule would turn into
``unstable``: "comparison" when either side is flagged on any figure, "per figure" when every
regression row's own figure is flagged on either side; on the live A/B pairs, the detections
(ttft.p50 called a regression) it would turn into ``unstable`` (the rule's cost).

    .venv/bin/python bench/run_spread.py [--pairs 150] [--repeat 5] [--noise 0.05:0.01 0.05:0.02] [--jobs 1] [--sim-cache FILE] [--live FILE ...] [--resample 2000] [--no-verdicts]

``--pairs 0`` reports on the live sides alone; ``--live`` with no file, on the simulated ones.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import multiprocessing
import statistics
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "bench" / "gate_quality.py").exists():
    ROOT = Path.cwd()
sys.path.insert(0, str(ROOT / "bench"))

from gate_quality import BASELINE_SEED_OFFSET, judge, run_once  # noqa: E402

from pytest_llmreplay import baseline  # noqa: E402
from pytest_llmreplay.gate.repeats import pool_records  # noqa: E402

GATED = list(baseline.DEFAULT_TOLERANCES)
TIME = [key for key in GATED if key.partition(".")[0] in ("ttft", "tpot", "latency", "ttfat")]
KEPT = sorted(
    set(GATED) | {"itl.p50", "tpot.p50", "tpot.min", "ttft.p50", "latency.p50", "latency.min"}
)  # what the sim cache keeps of a run's summary
BURST_TPOT_S = 1e-4
LIVE_DEFAULT = [
    "gate_live_2026-11-25.jsonl.xz",
    "gate_live_2026-11-25b.jsonl.xz",
    "gate_live_2026-11-25c.jsonl.xz",
    "gate_live_2026-11-26.jsonl.xz",
]
LIVE_NAMES = {
    "2026-11-25": "live 1 (loaded)",
    "2026-11-25b": "live 2 (quiet)",
    "2026-11-25c": "live 3 (quiet)",
    "2026-11-26": "live 4 (check)",
}
RATIO_T = (1.25, 1.5, 2.0, 2.5, 3.0, 4.0)
CV_C = (0.1, 0.2, 0.3, 0.5)


# ------------------------------------------------------------------------ figures of a run


def value(summary: dict[str, Any], key: str) -> float | None:
    metric, _, stat = key.partition(".")
    v = (summary.get(metric) or {}).get(stat)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def is_burst(summary: dict[str, Any]) -> bool | None:
    """The run received its responses in one burst each (None when the summary cannot tell)."""
    itl, tpot = value(summary, "itl.p50"), value(summary, "tpot.p50")
    if itl is None and tpot is None:
        return None
    return (itl is not None and itl == 0.0) or (tpot is not None and tpot < BURST_TPOT_S)


def ratio(values: list[float]) -> float:
    low, high = min(values), max(values)
    return math.inf if low <= 0 < high else (1.0 if high == low else high / low)


def cv(values: list[float]) -> float:
    mean = statistics.mean(values)
    return statistics.pstdev(values) / mean if mean > 0 else math.inf


def burst_share(tpots: list[float]) -> float:
    """The share of a run's requests that received their stream in one burst (TPOT < 0.1 ms)."""
    return sum(t < BURST_TPOT_S for t in tpots) / len(tpots) if tpots else 0.0


def spread(summaries: list[dict[str, Any]], shares: list[float] | None = None) -> dict[str, Any]:
    """Per gated figure: max/min and CV over the runs; the runs' burst marks (whole runs:
    :func:`is_burst`; requests: ``shares``, each run's :func:`burst_share`, None when unknown)."""
    out: dict[str, Any] = {"ratio": {}, "cv": {}, "runs": len(summaries), "shares": shares}
    out["share_range"] = (max(shares) - min(shares)) if shares else None
    for key in GATED:
        values = [v for s in summaries if (v := value(s, key)) is not None]
        if len(values) >= 2:
            out["ratio"][key], out["cv"][key] = ratio(values), cv(values)
    bursts = [is_burst(s) for s in summaries]
    out["bursts"] = None if any(b is None for b in bursts) else sum(bursts)
    out["mixed"] = out["bursts"] is not None and 0 < out["bursts"] < len(summaries)
    return out


def live_spread(side: dict[str, Any], r: int) -> dict[str, Any]:
    """A gate_live.py side's first r runs."""
    records = side["records"][:r]
    return spread([rec["summary"] for rec in records], [burst_share(rec["samples"]["tpot"]) for rec in records])


def sim_spread(side: dict[str, Any], r: int) -> dict[str, Any]:
    runs = [unflatten(run) for run in side["runs"][:r]]
    return spread(runs, [0.0] * r if all((run["tpot"].get("min") or 0.0) >= BURST_TPOT_S for run in runs) else None)


def resampled(sides: list[dict[str, Any]], r: int, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` made-up sides of ``r`` runs from 3-run live sides: each run of each side as its
    figures' log deviation from the side's mean log (scaled by sqrt(k / (k - 1)), k runs, so that
    their variance is the runs' own), whole runs drawn with replacement from the pool (one run's
    figures stay together), r of them a side, each figure exp(deviation) of 1: what r runs of the
    same noise would spread."""
    rng = np.random.default_rng(seed)
    pool = []
    for side in sides:
        k = len(side["records"])
        logs = np.array(
            [[math.log(value(rec["summary"], key) or math.nan) for key in GATED] for rec in side["records"]]
        )
        pool.extend((logs - logs.mean(axis=0)) * math.sqrt(k / (k - 1)))
    pool = np.array(pool)
    out = []
    for _ in range(n):
        runs = np.exp(pool[rng.integers(0, len(pool), r)])
        out.append(
            spread(
                [
                    unflatten({key: float(run[i]) for i, key in enumerate(GATED) if math.isfinite(run[i])})
                    for run in runs
                ]
            )
        )
    return out


# ------------------------------------------------------------------------ rules


def rules() -> list[tuple[str, Any]]:
    """(name, side spread -> set of flagged figures; empty = not flagged)."""
    out = []
    for t in RATIO_T:
        out.append((f"time figure max/min > {t:g}", lambda s, t=t: {k for k in TIME if s["ratio"].get(k, 1.0) > t}))
    for t in RATIO_T:
        out.append(
            (f"any gated figure max/min > {t:g}", lambda s, t=t: {k for k in GATED if s["ratio"].get(k, 1.0) > t})
        )
    for c in CV_C:
        out.append((f"time figure CV > {c:.0%}", lambda s, c=c: {k for k in TIME if s["cv"].get(k, 0.0) > c}))
    for t in RATIO_T:
        out.append(
            (
                f"time figure but ttft.p90 max/min > {t:g}",
                lambda s, t=t: {k for k in TIME if k != "ttft.p90" and s["ratio"].get(k, 1.0) > t},
            )
        )
    out.append(("burst and streamed runs mixed (run level)", lambda s: set(TIME) if s["mixed"] else set()))
    for share in (0.1, 0.2):
        out.append(
            (
                f"runs' burst-request shares differ by >= {share:.0%}",
                lambda s, share=share: set(TIME) if (s["share_range"] or 0.0) >= share else set(),
            )
        )
    out.append(
        (
            "time max/min > 2 and burst shares differ by >= 10%",
            lambda s: {k for k in TIME if s["ratio"].get(k, 1.0) > 2.0} if (s["share_range"] or 0.0) >= 0.1 else set(),
        )
    )
    return out


# ------------------------------------------------------------------------ data


def read_live(path: Path) -> list[dict[str, Any]]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def sim_side(job: tuple[str, int, str, int]) -> dict[str, Any]:
    noise, i, role, repeat = job
    iteration_cv, run_cv = (float(x) for x in noise.split(":"))
    seeds = [(BASELINE_SEED_OFFSET if role == "base" else 0) + i * repeat + j for j in range(repeat)]
    summaries, walls = [], []
    for seed in seeds:
        run = run_once(seed, iteration_cv, run_cv)
        summary = run["record"]["summary"]
        summaries.append({key: value(summary, key) for key in KEPT})
        walls.append(run["wall_s"])
    return {"noise": noise, "i": i, "role": role, "repeat": repeat, "seeds": seeds, "runs": summaries, "wall_s": walls}


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for key, v in flat.items():
        metric, _, stat = key.partition(".")
        out.setdefault(metric, {})[stat] = v
    return out


def simulated(noises: list[str], pairs: int, repeat: int, cache: Path, jobs: int) -> dict[str, list[dict[str, Any]]]:
    have = {}
    if cache.exists():
        for line in cache.read_text().splitlines():
            if line.strip():
                side = json.loads(line)
                have[side["noise"], side["i"], side["role"], side["repeat"]] = side
    todo = [
        (n, i, role, repeat)
        for n in noises
        for i in range(1, pairs + 1)
        for role in ("base", "current")
        if (n, i, role, repeat) not in have
    ]
    if todo:
        t0 = time.perf_counter()
        print(
            f"simulating {len(todo)} sides of {repeat} runs ({jobs} process(es)) into {cache}",
            file=sys.stderr,
            flush=True,
        )
        with open(cache, "a") as out, multiprocessing.get_context("fork").Pool(jobs) as pool:
            for k, side in enumerate(pool.imap_unordered(sim_side, todo, chunksize=1), 1):
                have[side["noise"], side["i"], side["role"], side["repeat"]] = side
                out.write(json.dumps(side) + "\n")
                out.flush()
                if k % 50 == 0:
                    print(f"  {k}/{len(todo)} sides, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        print(f"simulated in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return {n: [have[n, i, role, repeat] for i in range(1, pairs + 1) for role in ("base", "current")] for n in noises}


# ------------------------------------------------------------------------ reporting


def table(headers: list[str], rows: list[list[Any]]) -> str:
    return "\n".join(
        [
            "| " + " | ".join(headers) + " |",
            "|" + "|".join("---" for _ in headers) + "|",
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
        ]
    )


def fmt(x: float) -> str:
    return "inf" if math.isinf(x) else (f"{x:.3f}" if x < 10 else f"{x:.0f}")


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    arr = np.array(values)
    finite = arr[np.isfinite(arr)]

    def q(p):
        return (
            fmt(float(np.percentile(arr, p))) if np.isfinite(arr).all() or p < 100 * len(finite) / len(arr) else "inf"
        )

    return f"{q(50)} / {q(90)} / {q(99)} / {fmt(float(arr.max()))}"


def wilson_upper(hits: int, n: int, z: float = 1.96) -> float:
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    return min(1.0, centre + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", nargs="*", default=[str(ROOT / "bench" / "results" / name) for name in LIVE_DEFAULT])
    parser.add_argument(
        "--pairs", type=int, default=150, help="simulated pairs of sides per noise setting (2 sides each)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per simulated side")
    parser.add_argument("--noise", nargs="*", default=["0.05:0.01", "0.05:0.02"], help="ITERATION_CV:RUN_CV settings")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--sim-cache", default="spread_sim.jsonl")
    parser.add_argument(
        "--resample", type=int, default=2000, help="made-up sides of the quiet live runs' A runs, resampled (0: none)"
    )
    parser.add_argument("--no-verdicts", action="store_true", help="skip the gate's verdicts on the live pairs")
    args = parser.parse_args()
    started = time.perf_counter()

    datasets: list[dict[str, Any]] = []
    sims = simulated(args.noise, args.pairs, args.repeat, Path(args.sim_cache), args.jobs) if args.pairs else {}
    for noise, sides in sims.items():
        iteration_cv, run_cv = (float(x) for x in noise.split(":"))
        for r in sorted({3, args.repeat}):
            if r <= args.repeat:
                datasets.append(
                    {
                        "name": f"sim {iteration_cv:.0%}/{run_cv:.0%}",
                        "kind": "sim",
                        "r": r,
                        "sides": [sim_spread(side, r) for side in sides],
                        "pairs": [(2 * k, 2 * k + 1) for k in range(len(sides) // 2)],
                    }
                )
    live_raw = {}
    for path in map(Path, args.live):
        stem = path.name.removeprefix("gate_live_").removesuffix(".xz").removesuffix(".jsonl")
        name = LIVE_NAMES.get(stem, stem)
        raw = read_live(path)
        live_raw[name] = raw
        most = max(len(s["records"]) for s in raw)
        for kind in ("A", "B"):
            for r in sorted({3, most}):
                sides = [s for s in raw if (s["kind"] == "A") == (kind == "A") and len(s["records"]) >= r]
                if sides:
                    datasets.append({"name": name, "kind": kind, "r": r, "sides": [live_spread(s, r) for s in sides]})
    quiet = [s for name, raw in live_raw.items() if "quiet" in name for s in raw if s["kind"] == "A"]
    if quiet and args.resample:
        for r in (3, 5):
            datasets.append(
                {"name": "live 2+3 (quiet) resampled", "kind": "A", "r": r, "sides": resampled(quiet, r, args.resample)}
            )
    groups = [
        ("simulated sides", [d for d in datasets if d["kind"] == "sim"]),
        ("live baseline (A) sides", [d for d in datasets if d["kind"] == "A"]),
        ("live slowed (B) sides", [d for d in datasets if d["kind"] == "B"]),
    ]

    label = lambda d: f"{d['name']}{' ' + d['kind'] if d['kind'] != 'sim' else ''}, r={d['r']} ({len(d['sides'])})"  # noqa: E731
    print("## Spread between the runs of a side\n")
    print(
        "max/min of the runs' figure over sides: median / p90 / p99 / max. Data set: name, runs per side r (sides).\n"
    )
    print(
        table(
            ["data set", *GATED],
            [
                [label(d), *(quantiles([s["ratio"][k] for s in d["sides"] if k in s["ratio"]]) for k in GATED)]
                for d in datasets
            ],
        )
    )
    print("\nCV of the runs' figure (population sd / mean) over sides: median / p90 / max\n")
    cvq = lambda vals: f"{np.median(vals):.1%} / {np.percentile(vals, 90):.1%} / {max(vals):.1%}" if vals else "-"  # noqa: E731
    print(
        table(
            ["data set", *GATED],
            [[label(d), *(cvq([s["cv"][k] for s in d["sides"] if k in s["cv"]]) for k in GATED)] for d in datasets],
        )
    )

    print("\n## Bursts\n")
    print(
        "A burst run: itl.p50 == 0 or tpot.p50 < 0.1 ms (most of its responses arrived in one burst); a burst request: TPOT < 0.1 ms."
        " Mixed (run level): a side with burst and streamed runs; burst shares differ: the runs' shares of burst requests span >= 10 points."
        " Sim: shares 0 when every run's tpot.min >= 0.1 ms.\n"
    )
    rows = []
    for d in datasets:
        n_runs = sum(s["runs"] for s in d["sides"])
        shares = [x for s in d["sides"] for x in (s["shares"] or [])]
        rows.append(
            [
                label(d),
                f"{sum(s['bursts'] or 0 for s in d['sides'])}/{n_runs}",
                sum(s["bursts"] == s["runs"] for s in d["sides"]),
                sum(s["bursts"] == 0 for s in d["sides"]),
                sum(s["mixed"] for s in d["sides"]),
                f"{sum(x > 0 for x in shares)}/{len(shares)}" if shares else "?",
                f"{np.median(shares):.0%} / {max(shares):.0%}" if shares else "?",
                sum((s["share_range"] or 0) >= 0.1 for s in d["sides"]),
            ]
        )
    print(
        table(
            [
                "data set",
                "burst runs",
                "sides all burst runs",
                "sides all streamed runs",
                "**sides mixed (run level)**",
                "runs with a burst request",
                "burst share of a run: median / max",
                "**sides whose burst shares differ >= 10 pts**",
            ],
            rows,
        )
    )

    print("\n## The largest time-figure max/min of a side, by class\n")
    print(
        "worst = max over ttft.p50, ttft.p90, tpot.p50, latency.p50, ttfat.p50 of the side's max/min: median / p90 / p99 / max (n)\n"
    )
    rows = []
    for d in datasets:
        worst = [max(s["ratio"][k] for k in TIME if k in s["ratio"]) for s in d["sides"]]
        steady = [w for w, s in zip(worst, d["sides"], strict=True) if not s["mixed"] and (s["share_range"] or 0) < 0.1]
        mixed = [w for w, s in zip(worst, d["sides"], strict=True) if s["mixed"]]
        shares = [w for w, s in zip(worst, d["sides"], strict=True) if (s["share_range"] or 0) >= 0.1]
        q = lambda v: f"{quantiles(v)} ({len(v)})" if v else "-"  # noqa: E731
        rows.append(
            [
                label(d),
                q(steady),
                q(mixed),
                f"{fmt(min(mixed))}" if mixed else "-",
                q(shares),
                f"{fmt(min(shares))}" if shares else "-",
            ]
        )
    print(
        table(
            [
                "data set",
                "neither mixed nor shares differing",
                "mixed (run level)",
                "mixed: smallest worst",
                "burst shares differ >= 10 pts",
                "smallest",
            ],
            rows,
        )
    )

    rule_list = rules()
    for title, group in groups:
        if not group:
            continue
        print(f"\n## Candidate rules: {title} flagged\n")
        rows = []
        for name, rule in rule_list:
            cells = []
            for d in group:
                hits = sum(bool(rule(s)) for s in d["sides"])
                cell = f"{hits}/{len(d['sides'])}"
                if d["kind"] == "sim":
                    pairs = sum(bool(rule(d["sides"][a]) or rule(d["sides"][b])) for a, b in d["pairs"])
                    cell += f" (pairs {pairs}/{len(d['pairs'])}; <= {wilson_upper(hits, len(d['sides'])):.1%})"
                else:
                    mixed = [s for s in d["sides"] if s["mixed"]]
                    shares = [s for s in d["sides"] if (s["share_range"] or 0) >= 0.1]
                    cell += f" (mixed {sum(bool(rule(s)) for s in mixed)}/{len(mixed)}; shares {sum(bool(rule(s)) for s in shares)}/{len(shares)})"
                cells.append(cell)
            rows.append([name, *cells])
        print(table(["rule", *(label(d) for d in group)], rows))
    print(
        "\nSim cells: flagged sides (pairs (baseline_i, current_i) with either side flagged; Wilson 95% upper bound of the side rate);"
        " live cells: flagged sides (flagged among the run-level mixed sides; among the sides whose burst shares differ >= 10 pts)."
    )
    print("\nWhich figures flag (sides flagged by each figure's own max/min):\n")
    rows = []
    for t in (2.0, 3.0):
        for d in datasets:
            rows.append([f"> {t:g}", label(d), *(sum(s["ratio"].get(k, 1.0) > t for s in d["sides"]) for k in GATED)])
    print(table(["T", "data set", *GATED], rows))

    if not args.no_verdicts:
        print("\n## Live pairs: the gate's verdicts and what each rule turns into `unstable`\n")
        t0 = time.perf_counter()
        verdicts = {}
        for name, raw in live_raw.items():
            a_sides = [s for s in raw if s["kind"] == "A"]
            by_step = {s["step"]: s for s in a_sides}
            most = max(len(s["records"]) for s in raw)
            for r in sorted({3, most}):
                stored = lambda s, r=r: pool_records(s["records"][:r], s["facts"][:r])  # noqa: E731
                aa = [(prev, cur, judge(stored(prev), stored(cur))) for prev, cur in pairwise(a_sides)]
                ab = [
                    (by_step[s["step"]], s, judge(stored(by_step[s["step"]]), stored(s)))
                    for s in raw
                    if s["kind"] != "A"
                ]
                verdicts[name, r] = (aa, ab)
        print(f"({time.perf_counter() - t0:.0f} s of comparisons; baseline.compare from {baseline.__file__})\n")
        rows = []
        for (_name, r), (aa, ab) in verdicts.items():
            fa = [p for p in aa if any(row["verdict"] == "regression" for row in p[2]["rows"].values())]
            det = [p for p in ab if p[2]["rows"]["ttft.p50"]["verdict"] == "regression"]
            per_metric = {k: sum(p[2]["rows"][k]["verdict"] == "regression" for p in fa) for k in GATED}
            rows.append(
                [
                    f"{name}, r={r}",
                    f"{len(fa)}/{len(aa)}",
                    ", ".join(f"{k} {n}" for k, n in per_metric.items() if n),
                    f"{sum(live_spread(p[0], r)['mixed'] or live_spread(p[1], r)['mixed'] for p in fa)} / {sum(max(live_spread(p[0], r)['share_range'], live_spread(p[1], r)['share_range']) >= 0.1 for p in fa)}",
                    f"{len(det)}/{len(ab)}" if ab else "-",
                ]
            )
        print(
            table(
                [
                    "live run, runs per side",
                    "A/A false alarms (any regression row)",
                    "false alarms per figure",
                    "of them, a side mixed (run level) / burst shares differ",
                    "A/B ttft.p50 detected",
                ],
                rows,
            )
        )
        print()
        headers = ["rule"]
        for name, r in verdicts:
            headers.append(f"{name}, r={r}")
        rows = []
        for rule_name, rule in rule_list:
            cells = []
            for (_name, r), (aa, ab) in verdicts.items():
                flag = lambda s, rule=rule, r=r: rule(live_spread(s, r))  # noqa: E731
                fa = whole = each = passes = 0
                for prev, cur, j in aa:
                    flagged = flag(prev) | flag(cur)
                    regressions = {k for k, row in j["rows"].items() if row["verdict"] == "regression"}
                    if regressions:
                        fa += 1
                        whole += bool(flagged)
                        each += regressions <= flagged
                    else:
                        passes += bool(flagged)
                det = [(p, c) for p, c, j in ab if j["rows"]["ttft.p50"]["verdict"] == "regression"]
                lost = sum(bool(flag(p) | flag(c)) for p, c in det)
                cells.append(
                    f"FA {whole}/{fa} (per fig {each}); non-FA A/A {passes}/{len(aa) - fa}"
                    + (f"; A/B det. lost {lost}/{len(det)}" if ab else "")
                )
            rows.append([rule_name, *cells])
        print(table(headers, rows))
        print(
            "\nFA w/n: of the n A/A pairs the gate called a regression, w have a flagged side (the comparison `unstable`);"
            " per fig: those whose every regression row's own figure is flagged on a side;"
            " non-FA A/A: the other A/A pairs (no regression) that the rule turns `unstable`;"
            " A/B det. lost: ttft.p50 detections of the slowed side that would become `unstable`."
        )
    print(f"\nTotal wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
