"""``llmreplay calibrate --from-run``: fit a roofline profile's efficiencies to a recorded run.

The run (:mod:`.measured_run`) is replayed offline, on the virtual clock, with the workload it
served and the base profile (model, hardware, engine settings) under candidate parameters; the
parameters that bring the simulated statistics closest to the measured ones win.

- Parameters (few and physical, each in a bounded range, :data:`BOUNDS`): ``mfu`` (share of peak
  compute reached), ``mbu`` (share of peak memory bandwidth), ``overhead_ms`` (fixed host cost
  per iteration) and ``frontend_ms`` (the server's fixed latency per request before the engine
  sees it, sim/cluster.py), or the subset ``fit`` names (default the first three); the others
  keep the base profile's values. ``frontend_ms`` is fitted only when asked for, and only from a
  run timed by a client: one run rarely tells it apart from the prefill's compute (fitted on a
  vLLM CPU run whose TTFT is mostly prefill, it came out anywhere from 9 to 163 ms depending on
  the search's path, bench/README.md). A run timed from the engine's queue (vLLM's records) has
  no front end in its TTFT: its replays run with ``frontend_ms`` 0, whatever the profile says,
  and the profile written keeps its own.
- Loss: the mean over the statistics in :data:`STATISTICS` of ``log(simulated / measured)^2``
  (a relative error, symmetric in over- and under-estimate, blind to units). The p10s stand for
  the lightly loaded requests (a prefill or a decode step of few sequences: fixed overhead and
  weight reads), the p50/p90/means for the loaded ones (bandwidth and compute): together they
  tell ``mbu`` from ``overhead_ms``, which a loaded run alone confuses.
- Hold-out: the requests are split by key order into two halves, even positions ("fit") and odd
  ("hold-out"). Every replay serves the whole workload (the load is the run's), the loss reads
  only the fit half, and the report gives the error of each statistic on both halves: a fit that
  only holds on the requests it was fitted to shows as a hold-out error well above the fit error.
- The front end in closed form: a constant ``frontend_ms`` delays every request's arrival at the
  engines by the same amount, so the engines see the same arrivals later and every TTFT and
  latency grows by it, TPOT unchanged. For each candidate of the other parameters one replay
  without a front end is therefore shifted by the best constant (:func:`best_shift`), instead of
  searching a fourth dimension with replays (Nelder-Mead could not tell it from ``overhead_ms``
  in 100 replays). Exact for requests sent at their own times; for later turns of a session,
  sent after the previous answer, the shift moves their sends too, so the reported errors come
  from a replay with the fitted front end, not from the shift. With the front end fitted the
  search has two stages, each half the replays: the other parameters with the profile's front
  end, then all of them from there. Searched together from the start, a fast engine behind a slow
  front end was a valley the search fell into (vLLM CPU's agent run, bench/sim_transfer.py:
  frontend_ms 163, TTFT p90 -30% on the fitted run itself).
- Search: Nelder-Mead (Nelder & Mead 1965; the standard reflection 1, expansion 2, contraction
  1/2, shrink 1/2) in the unit cube that maps log-linearly onto the bounds (``value = lo *
  (hi / lo) ** u``: a step is the same ratio anywhere in the range), points clamped into it,
  started at the base profile's values (one below its range, such as a profile's absent front
  end, at the middle of the range: from the bound itself a step changes nothing the loss sees)
  with a step of :data:`START_STEP` per parameter; when the
  simplex's losses differ by less than ``1e-6`` it restarts around its best point (a collapsed
  simplex is the method's known failure in narrow valleys), until ``max_evals`` replays are
  spent or a restart finds nothing better. The virtual clock makes every replay deterministic,
  so the loss is a plain function.

What a calibration transfers to: the fitted efficiencies describe the GPU and the engine (kernels,
scheduler, CUDA graphs), not the workload, so they carry over to the same GPU and engine version
with another workload or another model of the same architecture family; not to another GPU,
another engine, another dtype or another parallel layout.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LLMReplayError
from ..gate.baseline import KEY_TURNS
from ..metrics.result import request_values
from ..replayer.clock import VirtualClock
from ..replayer.driver import replay
from ..replayer.plan import ReplaySettings
from ..workloads.prompts import PromptFactory
from ..workloads.workload import Workload
from .endpoint import SimEndpoint
from .measured_run import MeasuredRun
from .profile import Profile, parse_profile
from .profile_files import profile_path

BOUNDS: dict[str, tuple[float, float]] = {
    "mfu": (0.05, 1.0),
    "mbu": (0.05, 1.0),
    "overhead_ms": (0.01, 100.0),
    "frontend_ms": (0.01, 1000.0),
}
ENGINE_PARAMETERS = (
    "mfu",
    "mbu",
    "overhead_ms",
)  # the roofline's own; frontend_ms is the profile's (timing.frontend_ms)
STATISTICS = (
    ("ttft", "p10"),
    ("ttft", "p50"),
    ("ttft", "p90"),
    ("ttft", "mean"),
    ("tpot", "p10"),
    ("tpot", "p50"),
    ("tpot", "mean"),
    ("tpot", "p90"),
    ("latency", "p50"),
    ("latency", "mean"),
)
START_STEP = 0.15  # of each parameter's range: the first simplex's size
TOLERANCE = 1e-6
SHIFT_GRID = 61  # log-spaced front-end latencies tried before the golden-section search (6 per decade over 0.01 ms-1 s)


def statistic(values: np.ndarray, stat: str) -> float:
    """``mean`` or ``pNN`` (numpy's linear percentile) of the finite values; NaN when none."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return math.nan
    return float(finite.mean()) if stat == "mean" else float(np.percentile(finite, float(stat[1:])))


def errors(simulated: MeasuredRun, measured: MeasuredRun) -> dict[tuple[str, str], float]:
    """(simulated - measured) / measured of each of :data:`STATISTICS`, over the requests of
    ``measured`` (``simulated`` is matched to them by key)."""
    index = np.searchsorted(simulated.keys, measured.keys)
    out = {}
    for metric, stat in STATISTICS:
        real = statistic(measured.metric(metric), stat)
        sim = statistic(simulated.metric(metric)[index], stat)
        out[(metric, stat)] = (sim - real) / real if real > 0 else math.nan
    return out


def loss(simulated: MeasuredRun, measured: MeasuredRun) -> float:
    """Mean of log(simulated / measured)^2 over :data:`STATISTICS` (module doc)."""
    terms = [math.log1p(err) ** 2 for err in errors(simulated, measured).values() if math.isfinite(err) and err > -1]
    return sum(terms) / len(terms) if terms else math.inf


def simulate(profile: Profile, workload: Workload, prompts: Callable[[], PromptFactory]) -> MeasuredRun:
    """The workload replayed offline on ``profile`` (its own timestamps, a fresh endpoint)."""
    factory = prompts()
    run = replay(workload, SimEndpoint(profile, factory), factory, ReplaySettings(), clock=VirtualClock())
    rows = []
    for record in run.records:
        if record.status != "ok":
            raise LLMReplayError(f"calibrate: the simulator failed request {record.session_id}: {record.error}")
        values = request_values(record)
        tpot = values["tpot"] if values["tpot"] is not None else math.nan
        rows.append((record.session_index * KEY_TURNS + record.turn_index, values["ttft"], tpot, values["latency"]))
    rows.sort()
    columns = np.array(rows, dtype=np.float64)
    return MeasuredRun("<simulated>", columns[:, 0].astype(np.int64), columns[:, 1], columns[:, 2], columns[:, 3])


def shifted(run: MeasuredRun, seconds: float) -> MeasuredRun:
    """``run`` as a server ``seconds`` slower to hand each request to its engine would have
    measured it: TTFT and latency later by ``seconds``, TPOT the same."""
    return MeasuredRun(run.path, run.keys, run.ttft + seconds, run.tpot, run.latency + seconds, run.from_client)


def best_shift(simulated: MeasuredRun, measured: MeasuredRun, bounds: tuple[float, float]) -> float:
    """The constant front-end latency in ``bounds`` (seconds) that minimises
    ``loss(shifted(simulated, c), measured)``: the best of :data:`SHIFT_GRID` log-spaced points,
    then golden-section search between its neighbours to 1 microsecond (module doc)."""
    lo, hi = bounds
    grid = np.geomspace(lo, hi, SHIFT_GRID)
    scores = [loss(shifted(simulated, float(c)), measured) for c in grid]
    i = int(np.argmin(scores))
    a, b = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, len(grid) - 1)])
    ratio = (math.sqrt(5) - 1) / 2
    while b - a > 1e-6:
        left, right = b - ratio * (b - a), a + ratio * (b - a)
        if loss(shifted(simulated, left), measured) <= loss(shifted(simulated, right), measured):
            b = right
        else:
            a = left
    return (a + b) / 2


def check_pairing(run: MeasuredRun, workload: Workload) -> None:
    """Every request of ``run`` is one of ``workload``'s (same session and turn), else one line."""
    known = {
        session_index * KEY_TURNS + turn
        for session_index, session in enumerate(workload.sessions)
        for turn in range(len(session.turns))
    }
    strangers = [int(key) for key in run.keys if int(key) not in known]
    if strangers:
        key = strangers[0]
        raise LLMReplayError(
            f"{run.path}: request (session {key // KEY_TURNS}, turn {key % KEY_TURNS}) is not in the workload "
            f"({len(workload.sessions)} sessions): {len(strangers)} of {len(run.keys)} requests do not pair; is it a run of this workload?"
        )


def with_timing(base: Mapping[str, Any], values: Mapping[str, float]) -> dict[str, Any]:
    """The profile JSON ``base`` with its timing's ``values`` replaced, and the ranges its
    ``uncertainty`` section gave those fields dropped (sim/profile_ranges.py): they state how
    sure the values replaced were, not the fitted ones (a section left empty goes too)."""
    data = json.loads(json.dumps(base))
    data["timing"].update({name: float(value) for name, value in values.items()})
    ranges = data.get("uncertainty")
    if isinstance(ranges, dict):
        for name in values:
            ranges.pop(f"timing.{name}", None)
        if not ranges:
            del data["uncertainty"]
    return data


@dataclass
class Fit:
    """A calibration's outcome: the fitted values, the error per statistic on both halves."""

    values: dict[str, float]
    start: dict[str, float]
    fit_errors: dict[tuple[str, str], float]
    holdout_errors: dict[tuple[str, str], float]
    start_fit_errors: dict[tuple[str, str], float]
    start_holdout_errors: dict[tuple[str, str], float]
    evaluations: int
    loss: float


def halves(run: MeasuredRun) -> tuple[MeasuredRun, MeasuredRun]:
    """(fit, hold-out): even and odd positions in key order."""
    even = np.arange(len(run.keys)) % 2 == 0
    return run.subset(even), run.subset(~even)


def nelder_mead(
    function: Callable[[np.ndarray], float], start: np.ndarray, max_evals: int
) -> tuple[np.ndarray, float, int]:
    """Minimise ``function`` over the unit cube (points clamped into it) from ``start``, restarting
    around the best point while that helps (module doc); returns (best point, its value,
    evaluations)."""
    best, score, evals = _simplex_search(function, np.clip(start, 0, 1), max_evals)
    while evals < max_evals:
        point, again, used = _simplex_search(function, best, max_evals - evals)
        evals += used
        if again >= score - TOLERANCE:
            break
        best, score = point, again
    return best, score, evals


def _simplex_search(
    function: Callable[[np.ndarray], float], start: np.ndarray, max_evals: int
) -> tuple[np.ndarray, float, int]:
    """One Nelder-Mead run until the losses converge or ``max_evals``."""
    evals = 0

    def value(point: np.ndarray) -> float:
        nonlocal evals
        evals += 1
        return function(point)

    dims = len(start)
    simplex = [start]
    for i in range(dims):
        vertex = simplex[0].copy()
        vertex[i] = vertex[i] + START_STEP if vertex[i] + START_STEP <= 1 else vertex[i] - START_STEP
        simplex.append(vertex)
    scores = [value(p) for p in simplex]
    while evals < max_evals:
        order = np.argsort(scores)
        simplex, scores = [simplex[i] for i in order], [scores[i] for i in order]
        if scores[-1] - scores[0] < TOLERANCE:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = np.clip(centroid + (centroid - simplex[-1]), 0, 1)
        r_score = value(reflected)
        if r_score < scores[0]:
            expanded = np.clip(centroid + 2 * (centroid - simplex[-1]), 0, 1)
            e_score = value(expanded)
            simplex[-1], scores[-1] = (expanded, e_score) if e_score < r_score else (reflected, r_score)
        elif r_score < scores[-2]:
            simplex[-1], scores[-1] = reflected, r_score
        else:
            contracted = np.clip(centroid + 0.5 * (simplex[-1] - centroid), 0, 1)
            c_score = value(contracted)
            if c_score < scores[-1]:
                simplex[-1], scores[-1] = contracted, c_score
            else:
                for i in range(1, len(simplex)):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    scores[i] = value(simplex[i])
    best = int(np.argmin(scores))
    return simplex[best], scores[best], evals


def check_fit(fit: Sequence[str], run: MeasuredRun, max_evals: int) -> tuple[list[str], bool]:
    """Refuse a fit that cannot run (unknown or repeated names, ``frontend_ms`` from engine-timed
    records, a budget below one simplex: len(searched) + 1 replays, twice when staged) before
    anything is replayed. Returns (the names Nelder-Mead searches, whether the front end is fitted
    in a second stage after them)."""
    unknown = [name for name in fit if name not in BOUNDS]
    if unknown or not fit or len(set(fit)) != len(fit):
        raise LLMReplayError(f"--fit: expected distinct names among {', '.join(BOUNDS)}, got {','.join(fit)}")
    if "frontend_ms" in fit and not run.from_client:
        raise LLMReplayError(
            f"--fit: frontend_ms cannot be fitted from {run.path}: vLLM's per-request records are timed from the engine's queue, "
            "without the server's front end; fit it from a run a client timed (llmreplay run --out's requests.csv or result.json)"
        )
    searched = [name for name in fit if name != "frontend_ms"]  # by Nelder-Mead; the front end in closed form
    staged = "frontend_ms" in fit and bool(searched)
    needed = (len(searched) + 1) * (2 if staged else 1)
    if max_evals < needed:
        raise LLMReplayError(
            f"--max-evals: expected at least {needed} ({'two simplices' if staged else 'one simplex'}), got {max_evals}"
        )
    return searched, staged


def calibrate_from_run(
    base: str | Path,
    workload: Workload,
    run: MeasuredRun,
    prompts: Callable[[], PromptFactory],
    fit: Sequence[str] = ENGINE_PARAMETERS,
    max_evals: int = 40,
    engine: Mapping[str, int] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> tuple[dict[str, Any], Fit]:
    """Fit ``fit`` of the roofline profile ``base`` (a bundled name or a file) to ``run`` of
    ``workload``; ``engine`` overrides engine settings. Returns (profile JSON, :class:`Fit`)."""
    searched, staged = check_fit(fit, run, max_evals)
    path = profile_path(base)
    data = json.loads(path.read_text(encoding="utf-8"))
    if engine:
        data.setdefault("engine", {}).update(engine)
    profile = parse_profile(data, origin=str(path))
    if data.get("timing", {}).get("kind") != "roofline":
        raise LLMReplayError(
            f"{path}: timing.kind: calibrating from a run fits a roofline profile's efficiencies, got {data.get('timing', {}).get('kind')!r}"
        )
    check_pairing(run, workload)
    fit_half, holdout = halves(run)
    start = {
        **{name: float(getattr(profile.timing, name)) for name in ENGINE_PARAMETERS},
        "frontend_ms": profile.frontend_ms,
    }
    timed_from_engine = {} if run.from_client else {"frontend_ms": 0.0}

    def values_at(point: np.ndarray) -> dict[str, float]:
        return {
            name: BOUNDS[name][0] * (BOUNDS[name][1] / BOUNDS[name][0]) ** float(u)
            for name, u in zip(searched, point, strict=True)
        }

    def replayed(values: Mapping[str, float]) -> MeasuredRun:
        return simulate(
            parse_profile(with_timing(data, {**values, **timed_from_engine}), origin=str(path)), workload, prompts
        )

    def scored(values: dict[str, float], front_end: bool = True) -> tuple[float, dict[str, float]]:
        """The loss at ``values``; when the front end is fitted (and ``front_end``), at its best value for them."""
        if not (front_end and "frontend_ms" in fit):
            return loss(replayed(values), fit_half), values
        without = replayed({**values, "frontend_ms": 0.0})
        low_ms, high_ms = BOUNDS["frontend_ms"]
        front_end_s = best_shift(without, fit_half, (low_ms / 1e3, high_ms / 1e3))
        return loss(shifted(without, front_end_s), fit_half), {**values, "frontend_ms": front_end_s * 1e3}

    def objective(front_end: bool) -> Callable[[np.ndarray], float]:
        def at(point: np.ndarray) -> float:
            score, values = scored(values_at(point), front_end)
            progress("  " + ", ".join(f"{name} {value:.4g}" for name, value in values.items()) + f": loss {score:.5f}")
            return score

        return at

    origin = np.array(
        [
            0.5
            if start[name] < BOUNDS[name][0]
            else math.log(start[name] / BOUNDS[name][0]) / math.log(BOUNDS[name][1] / BOUNDS[name][0])
            for name in searched
        ]
    )
    first = replayed(start)
    evals = 0
    if staged:
        origin, _, evals = nelder_mead(objective(front_end=False), origin, max_evals // 2)
    best, best_loss, more = nelder_mead(objective(front_end=True), origin, max_evals - evals)
    evals += more
    values = values_at(best)
    if "frontend_ms" in fit:  # the best front end for the engine's values found (a replay without it, shifted)
        values = scored(values)[1]
    values = {name: values[name] for name in fit}
    final = replayed(values)
    result = Fit(
        values={name: _rounded(value) for name, value in values.items()},
        start=start,
        fit_errors=errors(final, fit_half),
        holdout_errors=errors(final, holdout),
        start_fit_errors=errors(first, fit_half),
        start_holdout_errors=errors(first, holdout),
        evaluations=evals,
        loss=best_loss,
    )
    out = with_timing(data, result.values)
    out["name"] = f"{data.get('name', path.stem)}-calibrated"
    out.setdefault("notes", []).append(
        f"timing {', '.join(f'{k} {v:g}' for k, v in result.values.items())} fitted by llmreplay calibrate --from-run {run.path} "
        f"({len(run.keys)} requests; fit on half, hold-out errors: "
        + ", ".join(f"{m} {s} {e:+.1%}" for (m, s), e in result.holdout_errors.items() if math.isfinite(e))
        + f"); started from {', '.join(f'{k} {start[k]:g}' for k in fit)}. Transfers to the same GPU and engine with another "
        "workload or model; not to another GPU, engine, dtype or parallel layout."
    )
    return out, result


def _rounded(value: float) -> float:
    return float(f"{value:.4g}")


def report_lines(result: Fit) -> list[str]:
    """The fit as a table: each statistic's error before and after, on the fit and hold-out halves."""
    lines = [
        "| statistic | before (fit half) | after (fit half) | before (hold-out) | after (hold-out) |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in STATISTICS:
        cells = [
            result.start_fit_errors[key],
            result.fit_errors[key],
            result.start_holdout_errors[key],
            result.holdout_errors[key],
        ]
        lines.append(f"| {key[0]} {key[1]} | " + " | ".join(f"{c:+.1%}" for c in cells) + " |")
    return lines


__all__ = [
    "BOUNDS",
    "ENGINE_PARAMETERS",
    "STATISTICS",
    "Fit",
    "best_shift",
    "calibrate_from_run",
    "errors",
    "halves",
    "loss",
    "nelder_mead",
    "report_lines",
    "simulate",
]
