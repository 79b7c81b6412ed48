"""``llmreplay calibrate --from-run``: fit a roofline profile's efficiencies to a recorded run.

The run (:mod:`.measured_run`) is replayed offline, on the virtual clock, with the workload it
served and the base profile (model, hardware, engine settings) under candidate parameters; the
parameters that bring the simulated statistics closest to the measured ones win.

- Parameters (few and physical, each in a bounded range, :data:`BOUNDS`): ``mfu`` (share of peak
  compute reached), ``mbu`` (share of peak memory bandwidth), ``overhead_ms`` (fixed host cost
  per iteration), ``layer_overhead_ms`` (host cost per layer per iteration, sim/roofline.py),
  ``admission_overhead_ms`` (host cost per request in the iteration that first schedules it,
  sim/roofline.py) and ``frontend_ms`` (the server's fixed latency per request before the engine
  sees it, sim/cluster.py), or the subset ``fit`` names (default the first three); the others keep
  the base profile's values.
- Several runs (:func:`calibrate_from_runs`): runs of one machine and engine, each with the
  roofline profile of its own model, fitted at once: every candidate is replayed on each run's
  profile, and the loss is the mean of the runs' losses. What one run cannot tell apart, the
  runs together can: ``layer_overhead_ms`` needs models of two layer counts (one model's runs
  see only ``overhead_ms + layer_overhead_ms * L``, one number; refused otherwise), and
  ``frontend_ms`` is pinned by a run at light load with short prompts, whose TTFT is the front
  end plus one short step while its TPOT is one decode step (bench/sim_transfer.py's ``light``
  run); from a loaded run whose TTFT is mostly prefill it is not. A run is light when at least
  :data:`LIGHT_SHARE` of its requests had the server to themselves (:func:`alone_share`); with
  one among the runs, the front end is searched with the rest from the start, not in a second
  stage (on runs the simulator made with known values, the stages spent half the replays on a
  path the light run rules out, and ended 40% off in mbu where one stage came within 11%).
  ``admission_overhead_ms`` and ``frontend_ms`` both lengthen a request's TTFT by a constant; a
  request alone on the server cannot tell them apart (a light run pins their sum). The admission
  lengthens the step of every request decoding beside it, the front end delays nobody else: a
  loaded run, where requests arrive while others decode, tells them apart, in proportion to how
  often that happens (on runs the simulator made with dozens running at once, both came back
  within 15%; on vLLM CPU runs at 0.6 requests/s, bench/sim_transfer.py, see there).
  ``frontend_ms`` is fitted only when asked for, and only from a run timed by a client: one
  loaded run rarely tells it apart from the prefill's compute (fitted on a vLLM CPU run whose
  TTFT is mostly prefill, it came out anywhere from 9 to 163 ms depending on the search's path,
  bench/README.md). A run timed from the engine's queue (vLLM's records) has
  no front end in its TTFT: its replays run with ``frontend_ms`` 0, whatever the profile says,
  and the profile written keeps its own.
- Loss: the mean over the statistics in :data:`STATISTICS` (or the subset ``statistics``
  names) of ``log(simulated / measured)^2``
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
  sent after the previous answer, and for a run sent at a concurrency (:attr:`MeasuredRun.load`:
  the next request goes when one ends), the shift moves their sends too, so the reported errors come
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
from .measured_run import MeasuredRun, check_pace, check_pairing
from .nelder_mead import nelder_mead
from .profile import Profile, parse_profile, read_profile_json
from .profile_files import profile_path

BOUNDS: dict[str, tuple[float, float]] = {
    "mfu": (0.05, 1.0),
    "mbu": (0.05, 1.0),
    "overhead_ms": (0.01, 100.0),
    "layer_overhead_ms": (0.01, 100.0),
    "admission_overhead_ms": (0.01, 100.0),
    "frontend_ms": (0.01, 1000.0),
}
ENGINE_PARAMETERS = (
    "mfu",
    "mbu",
    "overhead_ms",
)  # the roofline's default fit; layer_overhead_ms, admission_overhead_ms and frontend_ms (timing.frontend_ms) on request
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
LIGHT_SHARE = 0.8  # a run is light when at least this share of its requests had the server to themselves
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


def loss(simulated: MeasuredRun, measured: MeasuredRun, statistics: Sequence[tuple[str, str]] = STATISTICS) -> float:
    """Mean of log(simulated / measured)^2 over ``statistics`` (default :data:`STATISTICS`; module doc)."""
    found = errors(simulated, measured)
    terms = [math.log1p(found[key]) ** 2 for key in statistics if math.isfinite(found[key]) and found[key] > -1]
    return sum(terms) / len(terms) if terms else math.inf


def simulate(
    profile: Profile, workload: Workload, prompts: Callable[[], PromptFactory], load: Mapping[str, Any] | None = None
) -> MeasuredRun:
    """The workload replayed offline on ``profile`` with a fresh endpoint, sent as ``load`` says
    (:attr:`MeasuredRun.load`: the measured run's own settings; none, its own timestamps)."""
    factory = prompts()
    settings = ReplaySettings(**(load or {}))
    run = replay(workload, SimEndpoint(profile, factory), factory, settings, clock=VirtualClock())
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


def best_shift(
    pairs: Sequence[tuple[MeasuredRun, MeasuredRun]],
    bounds: tuple[float, float],
    statistics: Sequence[tuple[str, str]] = STATISTICS,
) -> float:
    """The constant front-end latency in ``bounds`` (seconds) that minimises the mean over
    ``pairs`` (simulated, measured) of ``loss(shifted(simulated, c), measured)``: the best of
    :data:`SHIFT_GRID` log-spaced points, then golden-section search between its neighbours to 1
    microsecond (module doc)."""

    def total(c: float) -> float:
        return sum(loss(shifted(simulated, c), measured, statistics) for simulated, measured in pairs) / len(pairs)

    lo, hi = bounds
    grid = np.geomspace(lo, hi, SHIFT_GRID)
    scores = [total(float(c)) for c in grid]
    i = int(np.argmin(scores))
    a, b = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, len(grid) - 1)])
    ratio = (math.sqrt(5) - 1) / 2
    while b - a > 1e-6:
        left, right = b - ratio * (b - a), a + ratio * (b - a)
        if total(left) <= total(right):
            b = right
        else:
            a = left
    return (a + b) / 2


def alone_share(run: MeasuredRun, workload: Workload) -> float:
    """The share of ``run``'s requests that had the server to themselves: single-turn sessions
    whose [arrival, arrival + latency] overlaps no other request's (a later turn's send time
    depends on the answers before it, so multi-turn sessions count as not alone). A run sent at
    a recorded load (:attr:`MeasuredRun.load`) instead of its workload's timestamps: all of them
    at concurrency 1, none otherwise (its send times are not its workload's); timestamps at a
    ``speedup`` are divided by it."""
    settings = run.replay_settings()
    mode = settings.resolved_mode(workload)
    if mode in ("concurrency", "rate"):
        return 1.0 if mode == "concurrency" and (settings.concurrency or 1) == 1 else 0.0
    starts = {
        session_index * KEY_TURNS: session.arrival_s / settings.speedup
        for session_index, session in enumerate(workload.sessions)
        if len(session.turns) == 1
    }
    spans = sorted(
        (starts[int(key)], starts[int(key)] + float(latency))
        for key, latency in zip(run.keys, run.latency, strict=True)
        if int(key) in starts
    )
    ended_before = np.maximum.accumulate([-math.inf] + [end for _, end in spans])  # the latest end before span i
    alone = sum(
        1
        for i, (start, end) in enumerate(spans)
        if ended_before[i] <= start and (i + 1 == len(spans) or end <= spans[i + 1][0])
    )
    return alone / len(run.keys)


def with_timing(base: Mapping[str, Any], values: Mapping[str, float]) -> dict[str, Any]:
    """The profile JSON ``base`` with its timing's ``values`` replaced, and the ranges its
    ``uncertainty`` section gave those fields dropped (sim/profile_ranges.py): they state how
    sure the values replaced were, not the fitted ones (a section left empty goes too). The
    ``timing.discrepancy`` range goes with any fit: it is the structural error measured for the
    values from specs, which a fit to the machine's own runs replaces."""
    data = json.loads(json.dumps(base))
    data["timing"].update({name: float(value) for name, value in values.items()})
    ranges = data.get("uncertainty")
    if isinstance(ranges, dict):
        for name in [*values, "discrepancy"] if values else []:
            ranges.pop(f"timing.{name}", None)
        if not ranges:
            del data["uncertainty"]
    return data


@dataclass(frozen=True)
class FitRun:
    """One run to fit: the roofline profile of its model and hardware (a bundled name or a file),
    the workload it served, and what it measured."""

    base: str | Path
    workload: Workload
    run: MeasuredRun


@dataclass
class RunErrors:
    """One fitted run's error per statistic, before and after the fit, on both halves."""

    path: str
    fit_errors: dict[tuple[str, str], float]
    holdout_errors: dict[tuple[str, str], float]
    start_fit_errors: dict[tuple[str, str], float]
    start_holdout_errors: dict[tuple[str, str], float]


@dataclass
class Fit:
    """A calibration's outcome: the fitted values, each run's errors (:class:`RunErrors`, in the
    order given)."""

    values: dict[str, float]
    start: dict[str, float]
    runs: list[RunErrors]
    evaluations: int
    loss: float


def halves(run: MeasuredRun) -> tuple[MeasuredRun, MeasuredRun]:
    """(fit, hold-out): even and odd positions in key order."""
    even = np.arange(len(run.keys)) % 2 == 0
    return run.subset(even), run.subset(~even)


def check_fit(
    fit: Sequence[str], runs: Sequence[MeasuredRun], max_evals: int, layer_counts: Sequence[int] = ()
) -> tuple[list[str], bool]:
    """Refuse a fit that cannot run or cannot be identified (unknown or repeated names,
    ``frontend_ms`` with no run timed by a client, ``layer_overhead_ms`` without runs of two layer
    counts among ``layer_counts`` (one per run), a budget below one simplex: len(searched) + 1 replays,
    twice when staged) before anything is replayed. Returns (the names Nelder-Mead searches,
    whether the front end is fitted in a second stage after them)."""
    unknown = [name for name in fit if name not in BOUNDS]
    if unknown or not fit or len(set(fit)) != len(fit):
        raise LLMReplayError(f"--fit: expected distinct names among {', '.join(BOUNDS)}, got {','.join(fit)}")
    if "frontend_ms" in fit and not any(run.from_client for run in runs):
        raise LLMReplayError(
            f"--fit: frontend_ms cannot be fitted from {runs[0].path}: vLLM's per-request records are timed from the engine's queue, "
            "without the server's front end; fit it from a run a client timed (llmreplay run --out's requests.csv or result.json)"
        )
    if "layer_overhead_ms" in fit and len(set(layer_counts)) < 2:
        raise LLMReplayError(
            "--fit: layer_overhead_ms needs runs of models with different layer counts on the same machine "
            f"(got {len(runs)} run{'s' if len(runs) != 1 else ''} of {' and '.join(map(str, sorted(set(layer_counts)))) or 'no'} layers): "
            "one model's runs cannot tell the host's cost per layer from its cost per step; "
            "give --from-run, --workload and --profile once per model"
        )
    searched = [name for name in fit if name != "frontend_ms"]  # by Nelder-Mead; the front end in closed form
    staged = "frontend_ms" in fit and bool(searched)
    needed = (len(searched) + 1) * (2 if staged else 1)
    if max_evals < needed:
        raise LLMReplayError(
            f"--max-evals: expected at least {needed} ({'two simplices' if staged else 'one simplex'}), got {max_evals}"
        )
    return searched, staged


def read_base(base: str | Path, engine: Mapping[str, int] | None) -> tuple[Path, dict[str, Any], Profile]:
    """A roofline base profile's path, JSON (``engine`` overrides applied) and parsed profile
    (which has a model: a roofline needs one)."""
    path = profile_path(base)
    data = read_profile_json(path)
    # overrides go into an engine object; any other shape is parse_profile's to refuse
    if engine and isinstance(data, dict) and isinstance(data.setdefault("engine", {}), dict):
        data["engine"].update(engine)
    profile = parse_profile(data, origin=str(path))
    if data.get("timing", {}).get("kind") != "roofline":
        raise LLMReplayError(
            f"{path}: timing.kind: calibrating from a run fits a roofline profile's efficiencies, got {data.get('timing', {}).get('kind')!r}"
        )
    return path, data, profile


def layers(profile: Profile) -> int:
    """The number of layers of a roofline profile's model."""
    return profile.model.layers if profile.model is not None else 0


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
    return calibrate_from_runs([FitRun(base, workload, run)], prompts, fit, max_evals, engine, progress)


def calibrate_from_runs(
    runs: Sequence[FitRun],
    prompts: Callable[[], PromptFactory],
    fit: Sequence[str] = ENGINE_PARAMETERS,
    max_evals: int = 40,
    engine: Mapping[str, int] | None = None,
    progress: Callable[[str], None] = lambda line: None,
    statistics: Sequence[tuple[str, str]] = STATISTICS,
) -> tuple[dict[str, Any], Fit]:
    """Fit ``fit`` to several runs on one machine at once (module doc: several runs): each run is
    replayed on its own base profile with the same timing values, and the loss is the mean of
    the runs' losses over ``statistics`` (the errors reported are every one of :data:`STATISTICS`).
    Returns (the first run's profile JSON with the fitted values, :class:`Fit`)."""
    bases = [read_base(part.base, engine) for part in runs]
    searched, staged = check_fit(
        fit, [part.run for part in runs], max_evals, [layers(profile) for _, _, profile in bases]
    )
    for part in runs:
        check_pairing(part.run, part.workload)
        check_pace(part.run, part.workload)
    if any(part.run.from_client and alone_share(part.run, part.workload) >= LIGHT_SHARE for part in runs):
        staged = False  # a light run pins the front end from the first replay (module doc)
    elif "frontend_ms" in fit:
        progress(
            f"note: no run is light (at least {LIGHT_SHARE:.0%} of its requests alone on the server): frontend_ms "
            "trades against the engine's parameters there and is fitted after them; a run of short requests sent "
            "one at a time pins it down (add it with another --from-run)"
        )
    split = [halves(part.run) for part in runs]
    first_profile = bases[0][2]
    start = {
        **{
            name: float(getattr(first_profile.timing, name))
            for name in (*ENGINE_PARAMETERS, "layer_overhead_ms", "admission_overhead_ms")
        },
        "frontend_ms": first_profile.frontend_ms,
    }

    def values_at(point: np.ndarray) -> dict[str, float]:
        return {
            name: BOUNDS[name][0] * (BOUNDS[name][1] / BOUNDS[name][0]) ** float(u)
            for name, u in zip(searched, point, strict=True)
        }

    def replayed(values: Mapping[str, float]) -> list[MeasuredRun]:
        """Each run's workload replayed on its base profile with ``values`` (a run timed from the
        engine's queue without a front end)."""
        return [
            simulate(
                parse_profile(
                    with_timing(data, {**values, **({} if part.run.from_client else {"frontend_ms": 0.0})}),
                    origin=str(path),
                ),
                part.workload,
                prompts,
                part.run.load,
            )
            for part, (path, data, _) in zip(runs, bases, strict=True)
        ]

    def mean_loss(simulated: Sequence[MeasuredRun]) -> float:
        return sum(loss(sim, fit_half, statistics) for sim, (fit_half, _) in zip(simulated, split, strict=True)) / len(
            runs
        )

    def scored(values: dict[str, float], front_end: bool = True) -> tuple[float, dict[str, float]]:
        """The loss at ``values``; when the front end is fitted (and ``front_end``), at its best value for them."""
        if not (front_end and "frontend_ms" in fit):
            return mean_loss(replayed(values)), values
        without = replayed({**values, "frontend_ms": 0.0})
        low_ms, high_ms = BOUNDS["frontend_ms"]
        client = [
            (sim, fit_half)
            for sim, (fit_half, _), part in zip(without, split, runs, strict=True)
            if part.run.from_client
        ]
        front_end_s = best_shift(client, (low_ms / 1e3, high_ms / 1e3), statistics)
        moved = [
            shifted(sim, front_end_s) if part.run.from_client else sim for sim, part in zip(without, runs, strict=True)
        ]
        return mean_loss(moved), {**values, "frontend_ms": front_end_s * 1e3}

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
        runs=[
            RunErrors(
                part.run.path,
                errors(after, fit_half),
                errors(after, holdout),
                errors(before, fit_half),
                errors(before, holdout),
            )
            for part, after, before, (fit_half, holdout) in zip(runs, final, first, split, strict=True)
        ],
        evaluations=evals,
        loss=best_loss,
    )
    path, data, _ = bases[0]
    out = with_timing(data, result.values)
    out["name"] = f"{data.get('name', path.stem)}-calibrated"
    out.setdefault("notes", []).append(
        f"timing {', '.join(f'{k} {v:g}' for k, v in result.values.items())} fitted by llmreplay calibrate --from-run "
        + "; ".join(
            f"{errs.path} ({len(part.run.keys)} requests on {profile.model.name if profile.model else '?'}; fit on half, hold-out errors: "
            + ", ".join(f"{m} {s} {e:+.1%}" for (m, s), e in errs.holdout_errors.items() if math.isfinite(e))
            + ")"
            for errs, part, (_, _, profile) in zip(result.runs, runs, bases, strict=True)
        )
        + f"; started from {', '.join(f'{k} {start[k]:g}' for k in fit)}. Transfers to the same GPU and engine with another "
        "workload or model; not to another GPU, engine, dtype or parallel layout."
    )
    return out, result


def _rounded(value: float) -> float:
    return float(f"{value:.4g}")


def report_lines(result: Fit) -> list[str]:
    """The fit as a table per run: each statistic's error before and after, on the fit and hold-out halves."""
    lines: list[str] = []
    for errs in result.runs:
        if len(result.runs) > 1:
            lines += ([""] if lines else []) + [f"{errs.path}:"]
        lines += [
            "| statistic | before (fit half) | after (fit half) | before (hold-out) | after (hold-out) |",
            "|---|---:|---:|---:|---:|",
        ]
        for key in STATISTICS:
            cells = [
                errs.start_fit_errors[key],
                errs.fit_errors[key],
                errs.start_holdout_errors[key],
                errs.holdout_errors[key],
            ]
            lines.append(f"| {key[0]} {key[1]} | " + " | ".join(f"{c:+.1%}" for c in cells) + " |")
    return lines


def worse_lines(result: Fit) -> list[str]:
    """A warning for each run whose held-out half the fitted values predict worse than the values
    they started from (mean |error| over :data:`STATISTICS`): the profile is still written (a
    finished fit is never lost), but a fit that made its own hold-out worse is no calibration,
    and most often the run is not the workload as replayed."""
    lines = []
    for errs in result.runs:
        before, after = (
            sum(abs(errors[key]) for key in STATISTICS) / len(STATISTICS)
            for errors in (errs.start_holdout_errors, errs.holdout_errors)
        )
        if after > before:
            lines.append(
                f"warning: {errs.path}: the fitted values predict its held-out half worse than the ones they started "
                f"from (mean |error| {after:.1%} against {before:.1%}): check that the run is of this workload, sent as "
                "the replay sends it"
            )
    return lines


__all__ = [
    "BOUNDS",
    "ENGINE_PARAMETERS",
    "STATISTICS",
    "Fit",
    "FitRun",
    "LIGHT_SHARE",
    "RunErrors",
    "alone_share",
    "best_shift",
    "calibrate_from_run",
    "calibrate_from_runs",
    "errors",
    "halves",
    "loss",
    "nelder_mead",
    "report_lines",
    "simulate",
    "worse_lines",
]
