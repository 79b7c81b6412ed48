"""``llmreplay calibrate --from-run RUN --workload TRACE --profile BASE --out FILE``.

Fits the base roofline profile's efficiencies to a recorded run of a real server
(:mod:`~pytest_llmreplay.sim.calibrate_run`), writes the calibrated profile and prints the error
of each statistic before and after the fit, on the requests fitted and on the held-out half.
cli.py registers the options with :func:`add_from_run_options` and calls :func:`cmd_calibrate_run`
(this module does not import cli.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from .errors import LLMReplayError


def add_from_run_options(parser: Any) -> None:
    group = parser.add_argument_group("calibrate from a recorded run (instead of --endpoint)")
    group.add_argument("--from-run", metavar="RUN", help="a recorded run: vLLM per-request .jsonl (queued/scheduled/first/last token times), "
                       "or llmreplay run --out's requests.csv or result.json")
    group.add_argument("--workload", metavar="TRACE", help="the workload the run served (with --from-run)")
    group.add_argument("--profile", metavar="NAME|FILE", help="the roofline profile to fit (model, hardware, engine; with --from-run)")
    group.add_argument("--fit", default="mfu,mbu,overhead_ms", metavar="P,P,...", help="parameters to fit, among mfu, mbu, overhead_ms (default all three)")
    group.add_argument("--max-evals", type=int, default=40, metavar="N", help="offline replays the search may spend (default 40)")


def cmd_calibrate_run(args: argparse.Namespace, engine: dict[str, int]) -> int:
    """The workload is read in its detected format (as ``llmreplay run`` does without ``--format``)."""
    from .formats import load_workload
    from .prompts import PromptFactory
    from .sim.calibrate import write_profile
    from .sim.calibrate_run import calibrate_from_run, report_lines
    from .sim.measured_run import read_run
    from .tokenizer import load_tokenizer

    if args.endpoint:
        raise LLMReplayError("--from-run: give either --endpoint (a live sweep) or --from-run (a recorded run), not both")
    for option in ("workload", "profile"):
        if not getattr(args, option):
            raise LLMReplayError(f"--{option}: missing (--from-run needs --workload TRACE and --profile NAME|FILE)")
    run = read_run(args.from_run)
    workload = load_workload(args.workload)
    tokenizer = load_tokenizer(args.tokenizer)
    fit = [name.strip() for name in args.fit.split(",") if name.strip()]
    print(f"calibrating {args.profile} on {args.from_run} ({len(run.keys)} requests) with {args.workload}: fitting {', '.join(fit)}", flush=True)
    profile, result = calibrate_from_run(
        args.profile, workload, run, lambda: PromptFactory(tokenizer, seed=args.seed), fit=fit, max_evals=args.max_evals,
        engine=engine, progress=lambda line: print(line, flush=True),
    )
    print(f"fitted after {result.evaluations} replays: " + ", ".join(f"{k} {v:g} (was {result.start[k]:g})" for k, v in result.values.items()))
    print("\n".join(report_lines(result)))
    if args.name:
        profile["name"] = args.name
    write_profile(profile, args.out)
    print(f"wrote {args.out}: use it with --llm-sim-profile {args.out} or llmreplay sim --profile {args.out}")
    return 0


__all__ = ["add_from_run_options", "cmd_calibrate_run"]
