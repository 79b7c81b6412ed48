"""``llmreplay sweep``: capacity at SLO from the command line (:mod:`~pytest_llmreplay.search.capacity`).

    llmreplay sweep FILE (--endpoint URL | --sim PROFILE) --slo 'ttft.p99<1s' [--slo ...]
                    [--by rate|concurrency] [--min X] [--max X] [--resolution 5%] [--budget N]
                    [--arrival poisson|constant|trace] [--no-cache-reset] [--band N] [--out DIR]
                    [run's request options: --extra-body, --ignore-eos, --header, --timeout, ...]

A line per point on stderr as it finishes; then a table of the points (by load; a rate search's
estimates, closed-loop runs that only say where to look, apart below it) and the capacity with
its bracket on stdout (``at least X``, no upper bound, when no load failed). ``--out DIR`` writes what ``llmreplay run --out`` writes, for the
point at capacity (``result.json``, a stored result with the search under ``capacity``, which
``llmreplay compare`` and the gate read; ``requests.csv``), ``points.csv``, a row per run, estimates
included (``role`` and ``mode`` say which; the load curve's figures), and ``load_curve.svg``, the load curve drawn
(:mod:`~pytest_llmreplay.report.load_curve`). Exit status (:data:`SWEEP_STATUS`) 0 when some load meets the
SLOs, 1 when none does, 3 for bad input (as ``run`` and ``compare``), 5 when the server failed
during the search (the points before it printed and written, the search marked ``incomplete``).

SIGINT (Ctrl-C) or SIGTERM stops the sweep as it stops ``llmreplay run``
(:mod:`~pytest_llmreplay.replayer.signal_stop`): the point replaying is cut at once (its requests in
flight cancelled, nothing more sent) and no other starts; the table, the capacity and ``--out``
hold every point measured until then, ``result.json`` marked ``"interrupted"`` (never taken as a
comparison baseline), and the exit status is 128 + the signal's number (130, 143).

``--sim PROFILE`` runs the simulator in process on the virtual clock (seconds for an hour of
traffic), through :func:`sim_target`. ``--band N`` (with ``--sim``) then says how sure that
capacity is (:func:`capacity_band`): the same search again on N profiles whose uncertain
parameters are drawn over their ranges (:mod:`~pytest_llmreplay.sim.profile_band`), and the 10th
to 90th percentile of the N capacities found, a nominal 80% band, printed under the capacity and
kept in ``result.json`` as ``band``. cli/main.py registers the command with :func:`add_sweep_parser`.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from .options import (
    BAD_INPUT,
    add_request_options,
    check_band,
    header,
    ignored_with_sim,
    integer,
    load_workload_file,
    number,
    out_folder_option,
    remember_http_only_defaults,
    workload_options,
)

# llmreplay sweep's exit statuses (docs/reference/exit-status.md); a signal's is 128 + its number; bad
# input, bad usage included (cli.CommandParser), is 3, as run's and compare's
SWEEP_STATUS = {"capacity_found": 0, "no_load_meets_the_slos": 1, "bad_input": BAD_INPUT, "server_failed": 5}

SLO_OPTION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*((?:<=|>=|==|<|>).*)$")


def slo_option(text: str) -> tuple[str, str]:
    """``'ttft.p99<1s'`` -> (``ttft.p99``, ``<1s``)."""
    match = SLO_OPTION.match(text)
    if not match:
        raise LLMReplayError(f"--slo: expected METRIC.STAT OP VALUE such as 'ttft.p99<1s', got {text!r}")
    return match.group(1), match.group(2)


def sim_target(profile_name: str, prompts: Any, body: dict[str, Any]) -> Any:
    """``--sim PROFILE``: the offline simulator as a :class:`~pytest_llmreplay.target.Target`
    (virtual clock); ``body``: the fields every request adds, checked as its server checks them."""
    from ..target import offline_target

    try:
        return offline_target(profile_name, prompts, body)
    except LLMReplayError as exc:
        raise LLMReplayError(f"--sim: {exc}") from None


def live_target(args: argparse.Namespace, prompts: Any, body: dict[str, Any]) -> Any:
    """``--endpoint URL``: the live server as the plugin's ``--llm-endpoint`` makes it
    (:func:`~pytest_llmreplay.target.live_target`): ``--model``, when given, is the model sent and
    fingerprinted; ``body``: the fields every request adds (``--extra-body``, ``--ignore-eos``);
    ``--header`` and ``--timeout`` go with every request."""
    from ..replayer.endpoints import check_endpoint_url
    from ..target import live_target as make_live_target

    try:
        check_endpoint_url(args.endpoint)
    except LLMReplayError as exc:
        raise LLMReplayError(f"--endpoint: {exc}") from None
    target = make_live_target(args.endpoint, args.model, "--endpoint", args.api, args.api_key_env, prompts, body)
    target.headers, target.timeout_s = dict(header(h) for h in args.header), args.timeout
    return target


def plan_from(args: argparse.Namespace) -> Any:
    """The search plan of the options; a bad one names the option (``--min``, not ``capacity.min``);
    an SLO key given twice is refused."""
    from ..search.capacity import CapacityPlan, parse_resolution

    slos: dict[str, str] = {}
    for key, threshold in map(slo_option, args.slo):
        if key in slos:  # as compare refuses a --regression key given twice
            raise LLMReplayError(
                f"--slo: {key} is given twice ({slos[key]!r} and {threshold!r}); expected each key once"
            )
        slos[key] = threshold
    plan = CapacityPlan(
        by=args.by,
        slo=slos,
        min=args.min,
        max=args.max,
        resolution=parse_resolution(args.resolution),
        budget=args.budget,
        arrival=args.arrival,
        early_stop=not args.no_early_stop,
    )
    try:
        plan.validate()
    except LLMReplayError as exc:
        raise LLMReplayError(
            re.sub(r"^capacity\.(\w+)", lambda m: "--" + m.group(1).replace("_", "-"), str(exc))
        ) from None
    return plan


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..gate.baseline import interrupted_note, make_record, workload_digest, workload_facts
    from ..gate.git import git_state
    from ..gate.store import write_new
    from ..replayer.endpoints import extra_body
    from ..replayer.plan import ReplaySettings
    from ..replayer.signal_stop import SignalStop
    from ..search.capacity import find_capacity
    from ..workloads.prompts import PromptFactory
    from ..workloads.tokenizer import load_tokenizer

    plan = plan_from(args)
    options = workload_options(args, args.file)
    workload = load_workload_file(args, args.file, options)
    for warning in workload.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    settings = ReplaySettings(
        seed=args.seed,
        max_requests=args.max_requests,
        max_sessions=args.max_sessions,
        warmup_requests=args.warmup_requests,
        prompt_format=args.prompt_format,
        tool_calls=args.tool_calls,
    )
    settings.validate()
    names = ("result.json", "requests.csv", "points.csv", "load_curve.svg")
    out = out_folder_option("--out", args.out, "result.json, requests.csv, points.csv and load_curve.svg", names)
    digest = workload_digest(args.file)
    prompts = PromptFactory(load_tokenizer(args.tokenizer), seed=args.seed, tokenizer_option="--tokenizer").salted(
        digest
    )
    body = extra_body("--extra-body", args.extra_body, args.ignore_eos)
    sim = sim_target(args.sim, prompts, body) if args.sim else None
    if args.band is not None:
        check_band(args.band, sim)  # before a server is asked anything
    target = sim or live_target(args, prompts, body)
    if args.no_cache_reset:
        target.without_cache_reset()
    ignored = ignored_with_sim(args)
    if ignored:
        print(ignored, file=sys.stderr)
    with SignalStop() as signals:
        found = find_capacity(
            workload,
            target,
            prompts,
            plan,
            settings,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            workers=args.workers,
            signals=signals,
        )
        band = None
        if args.band and not found.interrupted:
            band = capacity_band(found, args, workload, target, prompts, plan, settings, signals)
    print(found.table())
    if band is not None:
        print(band["line"])
    if out is not None:
        result = found.result
        record = make_record(
            result,
            test=f"llmreplay sweep {Path(args.file).name}",
            fingerprint=target.fingerprint,
            workload=workload_facts(args.file, args.format, digest, options),
            git=git_state(Path.cwd()),
        )
        record["capacity"] = found.as_dict()
        if band is not None:
            record["band"] = {key: value for key, value in band.items() if key != "line"}
        if found.interrupted:  # a search cut short: kept, never a comparison baseline (as run's)
            record["interrupted"] = found.interrupted
        written = []
        written.append(write_new(out / "result.json", record))
        written.append(result.write_csv(out / "requests.csv"))
        written.append(write_points(found, out / "points.csv"))
        written.append(write_load_curve(record["capacity"], out / "load_curve.svg"))
        print("wrote " + ", ".join(str(path) for path in written) + interrupted_note(record))
    if found.incomplete:  # the points before the failure are printed and written above, marked incomplete
        print(f"error: the server failed during the search: {found.incomplete}", file=sys.stderr)
        return SWEEP_STATUS["server_failed"]
    stopped = found.interrupted or (band or {}).get("interrupted")
    if stopped:
        return 128 + getattr(signal, stopped)  # the shell's status for a process a signal ended
    return SWEEP_STATUS["capacity_found"] if found.value > 0 else SWEEP_STATUS["no_load_meets_the_slos"]


def capacity_band(
    found: Any,
    args: argparse.Namespace,
    workload: Any,
    target: Any,
    prompts: Any,
    plan: Any,
    settings: Any,
    signals: Any,
) -> dict[str, Any]:
    """``--band N``: the search of ``found`` run again, one search per drawn profile
    (:func:`~pytest_llmreplay.sim.profile_band.draw_profiles`, seeded by ``--seed``), a line per
    draw on stderr; the band is the 10th-90th percentile of the N capacities. A draw whose search
    found no failing load gives its capacity as a lower bound, counted in ``lower_bounds``, and one
    whose capacity is a ceiling (the rate carried, the workload too short) in ``ceilings``. The
    stored band: how it was drawn (:func:`~pytest_llmreplay.sim.profile_band.band_facts`),
    ``figures`` {capacity key: [low, high]}, ``capacities`` (each draw's), ``lower_bounds``,
    ``ceilings`` and ``line``, the line printed under the capacity. A signal ends the draws: no
    ``figures``, the line says so, ``interrupted`` names the signal, and the draws done are kept
    (``capacities``, ``lower_bounds``, ``ceilings``)."""
    import dataclasses

    from ..metrics.names import capacity_stat
    from ..metrics.units import format_figure
    from ..search.capacity import find_capacity
    from ..sim.profile_band import band, band_facts, draw_profiles, drawn_parameters

    key = f"capacity.{capacity_stat(plan.by, found.rate_unit)}"
    capacities: list[float] = []
    lower_bounds = ceilings = 0

    def stored(line: str, **more: Any) -> dict[str, Any]:
        """The band as kept: how it was drawn, ``more``, the draws done so far and ``line``."""
        counts = {"capacities": capacities, "lower_bounds": lower_bounds, "ceilings": ceilings}
        return {**band_facts(target.profile, args.band), **more, **counts, "line": line}

    for index, profile in enumerate(draw_profiles(target.profile, args.band, args.seed), 1):
        drawn = find_capacity(
            workload,
            dataclasses.replace(target, profile=profile),
            prompts,
            plan,
            settings,
            workers=args.workers,
            signals=signals,
        )
        if drawn.interrupted:  # no band; the draws done are kept
            line = f"capacity band: none, draw {index} of {args.band} {drawn.ended}"
            if capacities:
                line += f" (the {len(capacities)} draw{'s' if len(capacities) > 1 else ''} done kept in result.json)"
            return stored(line, interrupted=drawn.interrupted)
        capacities.append(drawn.value)
        lower_bounds += drawn.at_least
        ceilings += drawn.ceiling
        shown = ("at least " if drawn.at_least else "") + format_figure(key, drawn.value)
        print(f"band draw {index}/{args.band}: capacity {shown}", file=sys.stderr, flush=True)
    low, high = band(capacities)
    line = (
        f"capacity band: {format_figure(key, low)} to {format_figure(key, high)} (10th-90th percentile of "
        f"{args.band} searches on profiles drawn over {drawn_parameters(target.profile)})"
    )
    if lower_bounds:
        line += f"; {lower_bounds} of {args.band} found no failing load, their capacity a lower bound"
    if ceilings:
        line += f"; {ceilings} of {args.band} a ceiling, the rate carried (the workload is too short for the rate)"
    return stored(line, figures={key: [low, high]})


def write_points(found: Any, path: Path) -> Path:
    """A row per point in run order: load, role, verdict, why it stopped, each SLO's measured
    value (``slo:<key>``), the point's throughput, goodput and latency figures, and its commonest
    errors (``text (xN); ...``)."""
    import csv

    rows = []
    for point in found.points:
        figures = point.figures()
        settings, measured, errors = figures.pop("settings"), figures.pop("slo"), figures.pop("errors")
        rows.append(
            {
                **figures,
                **{f"slo:{key}": value for key, value in measured.items()},
                "mode": settings["mode"],
                "errors": "; ".join(f"{text} (x{count})" for text, count in errors.items()),
            }
        )
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_load_curve(capacity: Any, path: Path) -> Path:
    """The load curve of the stored search ``capacity`` as a standalone SVG file."""
    from ..report.load_curve import load_curve_svg

    path.write_text(load_curve_svg("load-curve", capacity) or "", encoding="utf-8")
    return path


def add_sweep_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    from ..replayer.apis import APIS
    from ..search.capacity import ARRIVALS, BY, DEFAULT_BUDGET

    sweep = commands.add_parser(
        "sweep",
        parents=[common],
        help="find the highest load that meets SLOs (capacity at SLO)",
        description="Search the highest request rate or concurrency at which every SLO holds. By rate: a synchronous and a saturating run "
        "estimate where to look, points at rates bracket the answer (growing it while the top passes), then bisection "
        "to --resolution or --budget runs; by concurrency: 1 and every session at once, then bisection. "
        "Exit status 0 when a load meets the SLOs, 1 when none does, 3 bad input; "
        "Ctrl-C or SIGTERM stops it as run, keeping every point measured: 130, 143.",
    )
    sweep.add_argument("file", metavar="FILE")
    where = sweep.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", metavar="URL", help="a live OpenAI-compatible server; points run one at a time")
    where.add_argument(
        "--sim",
        metavar="PROFILE",
        help="the simulator in process, in virtual time: a bundled profile name or a profile JSON file",
    )
    sweep.add_argument(
        "--slo",
        action="append",
        required=True,
        metavar="KEY<VALUE",
        help="an SLO every point must meet, e.g. 'ttft.p99<1s' or 'tpot.p90<=50ms' (repeatable): upper bounds on ttft, ttfo, tpot, latency, itl; error_rate; goodput share",
    )
    sweep.add_argument(
        "--by",
        choices=BY,
        default="rate",
        help="the load: sessions per second (open loop) or sessions in flight (closed loop); default rate",
    )
    sweep.add_argument(
        "--min",
        type=number(True),
        metavar="X",
        help="lowest load (default by rate: the rate the synchronous run carried; by concurrency: 1)",
    )
    sweep.add_argument(
        "--max",
        type=number(True),
        metavar="X",
        help="highest load (default by rate: none, starting at the rate the saturating run carried and doubling while it passes; by concurrency: every session)",
    )
    sweep.add_argument(
        "--resolution",
        default="5%",
        metavar="R",
        help="stop when the bracket is within R of its top, e.g. 5%% or 0.05 (default 5%%)",
    )
    sweep.add_argument(
        "--budget",
        type=integer(2),
        default=DEFAULT_BUDGET,
        metavar="N",
        help=f"run at most N replays, a rate search's estimates included (default {DEFAULT_BUDGET})",
    )
    sweep.add_argument(
        "--arrival",
        choices=ARRIVALS,
        default="poisson",
        help="rate points: Poisson, constant spacing, or the trace's own arrivals scaled (default poisson)",
    )
    sweep.add_argument(
        "--no-early-stop", action="store_true", help="run every point to its end, even once its SLOs are lost"
    )
    sweep.add_argument(
        "--no-cache-reset",
        action="store_true",
        help="never empty the server's prefix cache before a point: each may hit the cache the earlier ones warmed",
    )
    sweep.add_argument(
        "--workers",
        type=integer(1),
        default=2,
        metavar="N",
        help="processes for the two estimates and the two ends with --sim (default 2)",
    )
    sweep.add_argument(
        "--band",
        type=int,
        metavar="N",
        help="with --sim: how sure the capacity is: the same search on N profiles with the profile's uncertain "
        'parameters drawn over their ranges (its "uncertainty" section; seeded by --seed), printing the 10th-90th '
        "percentile of the N capacities found and keeping it in --out's result.json as 'band'; at least 10 draws, "
        "each a whole search (default: no band)",
    )
    sweep.add_argument(
        "--out",
        metavar="DIR",
        help="write DIR/result.json and DIR/requests.csv (the point at capacity, as run --out), DIR/points.csv (a row per run) and DIR/load_curve.svg (the load curve)",
    )
    sweep.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    sweep.add_argument(
        "--api",
        choices=APIS,
        default="chat",
        help="which API to call: chat, completions, responses or messages (default chat)",
    )
    sweep.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the API key")
    add_request_options(sweep)
    sweep.add_argument("--tokenizer", metavar="NAME|PATH", help="tokenizer for prompts (default: the bundled one)")
    sweep.add_argument("--seed", type=integer(0), default=0, help="seed of prompts and Poisson arrivals (default 0)")
    sweep.add_argument(
        "--max-requests",
        type=integer(1),
        metavar="N",
        help="each point takes whole sessions until N requests (cycling the workload if needed)",
    )
    sweep.add_argument(
        "--max-sessions",
        type=integer(1),
        metavar="N",
        help="each point runs N sessions (cycling the workload if needed)",
    )
    sweep.add_argument(
        "--warmup-requests",
        type=integer(0),
        default=0,
        metavar="N",
        help="leave each point's first N requests out of its metrics",
    )
    sweep.set_defaults(run=cmd_sweep, bad_input_status=SWEEP_STATUS["bad_input"])
    remember_http_only_defaults(sweep)
