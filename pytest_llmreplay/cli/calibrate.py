"""``llmreplay calibrate``: write a simulator profile from a server's measured timing.

``--endpoint URL``: a short, bounded profiling sweep against a live server
(:mod:`~pytest_llmreplay.sim.calibrate`), written as a table-timing profile.
``--from-run RUN --workload TRACE --profile BASE``: fits the base roofline profile's
efficiencies to a recorded run of a real server (:mod:`~pytest_llmreplay.sim.calibrate_run`),
writes the calibrated profile and prints the error of each statistic before and after the fit,
on the requests fitted and on the held-out half. Exit status 0 when the profile is written; any
error (bad usage, a bad option value, a server it cannot measure, a run it cannot use) is one
``error:`` line and 3 (:data:`~pytest_llmreplay.cli.options.BAD_INPUT`), as ``run``'s and ``sweep``'s.

``--out FILE`` is checked (and its folder made) before anything is measured, and a profile that
cannot be written after all is printed rather than lost (:func:`_write_out`).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from .options import BAD_INPUT, add_engine_options, engine_overrides, integer, out_file_option


def add_from_run_options(parser: Any) -> None:
    group = parser.add_argument_group("calibrate from a recorded run (instead of --endpoint)")
    group.add_argument(
        "--from-run",
        metavar="RUN",
        action="append",
        help="a recorded run: vLLM per-request .jsonl (queued/scheduled/first/last token times), "
        "llmreplay run --out's requests.csv or result.json, or vllm bench serve's --save-detailed result .json; "
        "repeat it to fit several runs of one machine at once",
    )
    group.add_argument(
        "--workload",
        metavar="TRACE",
        action="append",
        help="the workload the run served, sent as the run sent it (with --from-run; once, or once per --from-run "
        "in the same order; for vllm bench serve's result, that file itself)",
    )
    group.add_argument(
        "--profile",
        metavar="NAME|FILE",
        action="append",
        help="the roofline profile to fit (model, hardware, engine; with --from-run; once, or once per --from-run: "
        "each run's own model); the first is the one written",
    )
    group.add_argument(
        "--fit",
        default="mfu,mbu,overhead_ms",
        metavar="P,P,...",
        help="parameters to fit, among mfu, mbu, overhead_ms, layer_overhead_ms, admission_overhead_ms, frontend_ms "
        "(default the first three; layer_overhead_ms only from runs of two layer counts; frontend_ms only from a run "
        "a client timed, requests.csv or result.json, best a light one; admission_overhead_ms beside it needs a "
        "loaded run too)",
    )
    group.add_argument(
        "--max-evals", type=int, default=40, metavar="N", help="offline replays the search may spend (default 40)"
    )


def _write_out(profile: dict[str, Any], out: Path) -> None:
    """Write the calibrated ``profile`` to ``out`` (checked before anything was measured) and say
    how to use it. When writing fails all the same (the folder went away, the disk filled up),
    the profile is printed on stdout and one error line says so: a finished fit is never lost."""
    from ..sim.calibrate import write_profile

    try:
        write_profile(profile, out)
    except OSError as exc:
        print(json.dumps(profile, indent=2))
        raise LLMReplayError(
            f"--out: cannot write {out} ({exc.strerror or exc}); the profile is printed above on stdout, save it from there"
        ) from None
    print(
        f"wrote {out}: use it with {shlex.quote(f'--llm-sim-profile={out}')} or llmreplay sim --profile {shlex.quote(str(out))}"
    )


def per_run(option: str, given: list[str] | None, runs: int) -> list[str]:
    """``--workload`` or ``--profile`` for each of ``runs`` runs: given once (for every run) or once per run."""
    if not given:
        raise LLMReplayError(f"--{option}: missing (--from-run needs --workload TRACE and --profile NAME|FILE)")
    if len(given) not in (1, runs):
        raise LLMReplayError(
            f"--{option}: expected one, or one per --from-run ({runs}), got {len(given)}: {', '.join(given)}"
        )
    return given * runs if len(given) == 1 else given


def same_file_format(workload: str, run: str) -> str | None:
    """The workload's format when it is the run's own file: a vLLM benchmark result (the only
    file that is both), read as one even pretty-printed; None (detected) otherwise."""
    same = Path(workload).resolve() == Path(run).resolve()
    return "vllm-bench" if same else None


def cmd_calibrate_run(args: argparse.Namespace, engine: dict[str, int], out: Path) -> int:
    """The workload is read in its detected format (as ``llmreplay run`` does without ``--format``)."""
    from ..sim.calibrate_run import FitRun, calibrate_from_runs, check_fit, layers, read_base, report_lines, worse_lines
    from ..sim.measured_run import read_run
    from ..workloads.formats import load_workload
    from ..workloads.prompts import PromptFactory
    from ..workloads.tokenizer import load_tokenizer

    if args.endpoint:
        raise LLMReplayError(
            "--from-run: give either --endpoint (a live sweep) or --from-run (a recorded run), not both"
        )
    workloads = per_run("workload", args.workload, len(args.from_run))
    profiles = per_run("profile", args.profile, len(args.from_run))
    runs = [read_run(path) for path in args.from_run]
    try:
        counts = [layers(read_base(profile, engine)[2]) for profile in profiles]
    except LLMReplayError as exc:  # with engine options the conflict may be theirs, not the file's
        given = "".join(f" {args.option_names[key]}" for key in engine)
        raise LLMReplayError(f"--profile{' with' + given if given else ''}: {exc}") from None
    tokenizer = load_tokenizer(args.tokenizer)
    fit = [name.strip() for name in args.fit.split(",") if name.strip()]
    check_fit(fit, runs, args.max_evals, counts)  # refused before the line that says the fit begins
    parts = [
        FitRun(profile, load_workload(workload, format=same_file_format(workload, path)), run)
        for profile, workload, run, path in zip(profiles, workloads, runs, args.from_run, strict=True)
    ]
    sent = [part.run.sent_as(part.workload) for part in parts]
    print(
        "calibrating "
        + "; ".join(
            f"{profile} on {path} ({len(run.keys)} requests) with {workload}"
            + (f" sent as the run sent it, {how}" if how else "")
            for profile, path, run, workload, how in zip(profiles, args.from_run, runs, workloads, sent, strict=True)
        )
        + f": fitting {', '.join(fit)}",
        flush=True,
    )
    profile, result = calibrate_from_runs(
        parts,
        lambda: PromptFactory(tokenizer, seed=args.seed),
        fit=fit,
        max_evals=args.max_evals,
        engine=engine,
        progress=lambda line: print(line, flush=True),
    )
    print(
        f"fitted after {result.evaluations} replays: "
        + ", ".join(f"{k} {v:g} (was {result.start[k]:g})" for k, v in result.values.items())
    )
    print("\n".join(report_lines(result)))
    for line in worse_lines(result):
        print(line, file=sys.stderr)
    profile["name"] = args.name or out.stem  # as --help says: two calibrations are two profiles, two endpoints
    _write_out(profile, out)
    return 0


# the options of one way to calibrate that the other never reads (said, not ignored: a live
# sweep's --workload, --fit and --max-evals were silently dropped, and --from-run's --budget)
SWEEP_ONLY = (
    *("prefill_tokens", "decode_seqs", "decode_prompt_tokens", "decode_output_tokens", "repeats", "budget"),
    *("model", "api_key_env", "timeout"),
)
FROM_RUN_ONLY = ("workload", "profile", "fit", "max_evals")


def refuse_the_other_ways_options(args: argparse.Namespace, names: tuple[str, ...], applies_to: str) -> None:
    """An :class:`LLMReplayError` naming the options of ``names`` given a value other than their
    default, which ``applies_to`` says where they apply."""
    given = [args.option_names[name] for name in names if getattr(args, name) != args.parser.get_default(name)]
    if given:
        raise LLMReplayError(f"{', '.join(given)}: {'apply' if len(given) > 1 else 'applies'} to {applies_to}")


def _points(option: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise LLMReplayError(f"{option}: expected comma-separated integers, got {text!r}") from None


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ..replayer.endpoints import HTTPEndpoint
    from ..sim.calibrate import CalibrationPlan, calibrate
    from ..workloads.prompts import PromptFactory
    from ..workloads.tokenizer import load_tokenizer

    out = out_file_option("--out", args.out, "the simulator profile")
    if not 0 < args.timeout < math.inf:
        raise LLMReplayError(f"--timeout: expected seconds > 0, got {args.timeout}")
    engine = engine_overrides(args)
    if args.from_run:
        refuse_the_other_ways_options(args, SWEEP_ONLY, "a live sweep (--endpoint), not to --from-run")
        return cmd_calibrate_run(args, engine, out)
    refuse_the_other_ways_options(args, FROM_RUN_ONLY, "--from-run (a recorded run), not to a live sweep")
    if not args.endpoint:
        raise LLMReplayError(
            "--endpoint: missing (give --endpoint URL for a live sweep, or --from-run RUN to fit a recorded run)"
        )
    plan = CalibrationPlan(
        prefill_tokens=_points("--prefill-tokens", args.prefill_tokens),
        decode_seqs=_points("--decode-seqs", args.decode_seqs),
        decode_prompt_tokens=args.decode_prompt_tokens,
        decode_output_tokens=args.decode_output_tokens,
        repeats=args.repeats,
        budget_s=args.budget,
        engine=engine,
    )
    try:
        plan.validate()
    except LLMReplayError as exc:
        fields, sep, why = str(exc).partition(": ")
        raise LLMReplayError("--" + fields.replace("_", "-").replace("budget-s", "budget") + sep + why) from None
    endpoint = HTTPEndpoint(
        args.endpoint,
        model=args.model,
        api="completions",
        api_key_env=args.api_key_env,
        extra_body={"ignore_eos": True},
        timeout_s=args.timeout,
    )
    prompts = PromptFactory(load_tokenizer(args.tokenizer), seed=args.seed)
    profile = calibrate(
        endpoint,
        prompts,
        plan,
        args.name or out.stem,
        progress=lambda line: print(line, flush=True),
        warn=lambda line: print(f"warning: {line}; raise --budget to measure the rest", file=sys.stderr, flush=True),
    )
    _write_out(profile, out)
    return 0


def add_calibrate_parser(commands: Any) -> None:
    calibrate = commands.add_parser(
        "calibrate",
        help="measure a live server, or fit a recorded run, and write a simulator profile",
        description="Run a short, bounded profiling sweep against a live server and write a table-timing simulator profile; "
        "or (--from-run) fit a roofline profile's efficiencies to a recorded run of a real server.",
    )
    calibrate.add_argument("--endpoint", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    calibrate.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="the profile JSON to write (checked, and its folder made, before anything is measured)",
    )
    calibrate.add_argument("--name", help="the profile's name (default: the file's stem)")
    calibrate.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    calibrate.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the API key")
    calibrate.add_argument(
        "--tokenizer",
        metavar="NAME|PATH",
        help="tokenizer for prompts (default: the bundled one; lengths are read from the server's usage)",
    )
    calibrate.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="fail a request after S seconds without data (default 600)",
    )
    calibrate.add_argument("--seed", type=integer(0), default=0, help="seed of the prompts (default 0)")
    sweep = calibrate.add_argument_group("sweep")
    sweep.add_argument(
        "--prefill-tokens",
        default="128,512,1024,2048,4096",
        metavar="L,L,...",
        help="prompt lengths to time (default 128,512,1024,2048,4096)",
    )
    sweep.add_argument(
        "--decode-seqs", default="1,4,16,64", metavar="B,B,...", help="decode batch sizes to time (default 1,4,16,64)"
    )
    sweep.add_argument(
        "--decode-prompt-tokens",
        type=int,
        default=64,
        metavar="N",
        help="prompt length of the decode requests (default 64)",
    )
    sweep.add_argument(
        "--decode-output-tokens",
        type=int,
        default=64,
        metavar="N",
        help="output length of the decode requests (default 64)",
    )
    sweep.add_argument(
        "--repeats", type=int, default=3, metavar="N", help="repeats per point; the median is kept (default 3)"
    )
    sweep.add_argument(
        "--budget",
        type=float,
        default=300.0,
        metavar="S",
        help="stop the sweep after S seconds, keeping the points measured; a warning names those left out (default 300)",
    )
    add_engine_options(
        calibrate.add_argument_group(
            "engine settings (not visible from outside unless the server exports vllm:cache_config_info)"
        ),
        "exported, else 16",
        "exported, else required",
        "256",
        "8192",
    )
    add_from_run_options(calibrate)
    calibrate.set_defaults(run=cmd_calibrate, bad_input_status=BAD_INPUT)
