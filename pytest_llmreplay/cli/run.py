"""``llmreplay run FILE --endpoint URL`` (or ``--sim PROFILE``): replay a workload, print the
metric tables, write ``--out DIR`` and ``--save-to STORE``; the exit status says whether the
requests succeeded (:data:`RUN_STATUS`; stopped by SIGINT/SIGTERM: 128 + the signal's number,
after reporting, writing and saving what was measured, the result marked ``"interrupted"`` as
the plugin marks its own: never taken as a comparison baseline)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import sys
from collections.abc import Mapping
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
    open_store_option,
    out_folder_option,
    remember_http_only_defaults,
    share,
    workload_options,
)

# llmreplay run's exit statuses (docs/reference/exit-status.md); a signal's is 128 + its number; bad input,
# bad usage included (cli.CommandParser), is 3, as compare's and sweep's
RUN_STATUS = {"ok": 0, "requests_failed": 1, "bad_input": BAD_INPUT, "nothing_succeeded": 4}


def cmd_run(args: argparse.Namespace) -> int:
    from ..gate.baseline import interrupted_note, workload_digest, workload_facts
    from ..gate.git import git_state
    from ..gate.repeats import pool_records, repeats_line
    from ..metrics.result import Result
    from ..replayer.driver import Replay
    from ..replayer.endpoints import HTTPEndpoint, extra_body
    from ..replayer.plan import ReplaySettings
    from ..replayer.server_process import ServerProcess
    from ..report.terminal import render
    from ..workloads.prompts import PromptFactory
    from ..workloads.tokenizer import load_tokenizer

    options = workload_options(args, args.file)
    workload = load_workload_file(args, args.file, options)
    for warning in workload.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    settings = ReplaySettings(
        mode=args.mode,
        speedup=args.speedup,
        concurrency=args.concurrency,
        rate=args.rate,
        arrival=args.arrival,
        duration_s=args.duration_s,
        grace_s=args.grace_s,
        max_requests=args.max_requests,
        max_sessions=args.max_sessions,
        warmup_requests=args.warmup_requests,
        warmup_s=args.warmup_s,
        order=args.order,
        seed=args.seed,
        prompt_format=args.prompt_format,
        check_idle=not args.no_idle_check,
        tool_calls=args.tool_calls,
    )
    settings.validate()
    workers = _workers(args)
    out = out_folder_option("--out", args.out, "result.json and requests.csv", ("result.json", "requests.csv"))
    store = open_store_option("--save-to", args.save_to, writing=True) if args.save_to is not None else None
    body = extra_body("--extra-body", args.extra_body, args.ignore_eos)
    # salted with the workload's digest (the plugin adds the test's id): two workloads share no prompt tokens
    digest = workload_digest(args.file)
    prompts = PromptFactory(load_tokenizer(args.tokenizer), seed=args.seed, tokenizer_option="--tokenizer").salted(
        digest
    )
    sim = _sim_target(args, prompts, body) if args.sim else None
    if args.band is not None:
        check_band(args.band, sim)
    ignored = ignored_with_sim(args)
    if ignored:
        print(ignored, file=sys.stderr)
    if sim is not None:  # the plugin's --llm-offline: the simulator in process, on the virtual clock
        endpoint, clock = sim.endpoint(), sim.clock()
    else:
        endpoint, clock = (
            HTTPEndpoint(
                args.endpoint,
                model=args.model,
                api=args.api,
                stream=not args.no_stream,
                api_key_env=args.api_key_env,
                headers=dict(header(h) for h in args.header),
                extra_body=body,
                timeout_s=args.timeout,
                metrics_interval_s=args.metrics_interval,
                reasoning_hint=None,  # asked when opened: llmreplay sim started by hand takes the planned reasoning
            ),
            None,
        )
    repeats, once = _repeats(args, sim)
    resets = _cache_resets(args) if repeats > 1 and sim is None else None
    progress = ProgressLine(_planned_requests(workload, settings) * repeats)
    server = (
        ServerProcess(
            args.server_cmd,
            args.endpoint,
            startup_timeout_s=args.server_timeout,
            timeout_option="--server-timeout",
            progress=lambda line: print(line, file=sys.stderr),
        )
        if args.server_cmd
        else None
    )
    runs: list[Any] = []
    facts: list[dict[str, Any]] = []
    fingerprint: dict[str, Any] = {}  # what a result kept nowhere needs not ask the server for
    try:
        if server is not None:
            server.start()
        with workers or contextlib.nullcontext():
            for index in range(repeats):
                if index:  # a fresh simulator (its seed the run's) on a fresh clock, or a fresh client
                    endpoint, clock = (
                        (sim.endpoint(index), sim.clock()) if sim is not None else (dataclasses.replace(endpoint), None)
                    )
                reset = resets.reset_for_run() if resets is not None else None
                if index == 0 and resets is not None and resets.unreset_note(reset):
                    print(f"note: {resets.unreset_note(reset)}", file=sys.stderr)
                if workers is not None:
                    run = workers.replay(
                        workload, endpoint, prompts, settings, on_record=progress.update, stop_on_signals=True
                    )
                else:
                    run = Replay(
                        workload,
                        endpoint,
                        prompts,
                        settings,
                        clock=clock,
                        on_record=progress.update,
                        stop_on_signals=True,
                    ).run()
                runs.append(run)
                facts.append({"seed": sim.run_seed(index) if sim is not None else None, "cache_reset": reset})
                if run.interrupted:  # no more repeats; the runs so far are reported and kept
                    break
        if out is not None or store is not None:  # read while a --server-cmd server still runs
            fingerprint = sim.fingerprint if sim is not None else _live_fingerprint(args, body, resets)
    finally:
        progress.close()
        if server is not None:
            died = server.exit_message()
            server.stop()
            if died:
                print(f"warning: {died}", file=sys.stderr)
    results = [Result(run, gpus=args.gpus or (sim.gpus if sim is not None else 1)) for run in runs]
    result = results[-1]
    print(render(result))
    if once:
        print(once)
    bands = None
    if sim is not None and args.band:
        from ..sim.profile_band import band_lines, headline_bands

        def summarise(profile: Any) -> Mapping[str, Any]:  # the same replay, on a drawn profile
            target = dataclasses.replace(sim, profile=profile)
            return Result(Replay(workload, target.endpoint(), prompts, settings, clock=target.clock()).run()).summary

        bands = headline_bands(sim.profile, args.band, args.seed, summarise)
        print(band_lines(sim.profile, result.summary, bands, args.band))
    if out is not None or store is not None or len(results) > 1:  # the result as stored (its runs pooled)
        workload_part = workload_facts(args.file, args.format, digest, options)
        git = git_state(Path.cwd())
        record = pool_records([_record(each, args, workload_part, fingerprint, git) for each in results], facts)
    if len(results) > 1:
        print(repeats_line(record))
    if out is not None or store is not None:
        if bands is not None and sim is not None:
            from ..sim.profile_band import band_record

            record["band"] = band_record(sim.profile, bands, args.band)
        if out is not None:
            from ..gate.store import write_new

            print(
                f"wrote {write_new(out / 'result.json', record)}{interrupted_note(record)} and {result.write_csv(out / 'requests.csv', results[:-1])}"
            )
        if store is not None:
            from ..gate.store import UNSAVED

            try:
                print(
                    f"saved {store.save_or_keep(record, Path.cwd() / UNSAVED)}{interrupted_note(record)} as test {record['test']!r} (compare --store's --test)"
                )
            except LLMReplayError as exc:
                raise LLMReplayError(f"--save-to: {exc}") from None
    interrupted = next((run.interrupted for run in runs if run.interrupted), None)
    if interrupted:
        return 128 + getattr(signal, interrupted)  # the shell's status for a process a signal ended
    counts = [each.summary["requests"] for each in results]
    return _run_status({key: sum(c[key] for c in counts) for key in counts[0]}, args.max_error_rate)


def _run_status(counts: Mapping[str, float], max_error_rate: float) -> int:
    """:data:`RUN_STATUS` of a finished run from its measured request counts: nothing succeeded,
    else failed / (ok + failed) beyond ``max_error_rate``, else ok; a line on stderr says why."""
    ok, failed = counts["ok"], counts["failed"]
    if not ok:
        print(
            f"error: no request succeeded ({failed} failed, {counts['cancelled']} cancelled, {counts['warmup']} warm-up)",
            file=sys.stderr,
        )
        return RUN_STATUS["nothing_succeeded"]
    if failed / (ok + failed) > max_error_rate:
        print(
            f"error: {failed} of {ok + failed} requests failed ({failed / (ok + failed):.1%}), more than --max-error-rate {max_error_rate:.1%} allows",
            file=sys.stderr,
        )
        return RUN_STATUS["requests_failed"]
    return RUN_STATUS["ok"]


def _workers(args: argparse.Namespace) -> Any:
    """``--workers``' Ray workers (not started yet), None for one process."""
    if args.workers is None:
        if args.ray_address:
            raise LLMReplayError("--ray-address: needs --workers N, the number of workers to run on the cluster")
        return None
    if args.sim:
        raise LLMReplayError(
            "--workers: --sim runs in virtual time, which cannot be shared across processes; "
            "serve the simulator over HTTP (llmreplay sim) and give its --endpoint, or drop --workers"
        )
    from ..replayer.workers import RayWorkers, import_ray

    try:
        import_ray()
    except LLMReplayError as exc:
        raise LLMReplayError(f"--workers: {exc}") from None
    return RayWorkers(args.workers, args.ray_address)


def _sim_target(args: argparse.Namespace, prompts: Any, body: dict[str, Any]) -> Any:
    """``--sim PROFILE``: the plugin's offline :class:`~pytest_llmreplay.target.Target`."""
    from ..target import offline_target

    if args.server_cmd:
        raise LLMReplayError(
            "--server-cmd: starts a server for --endpoint; --sim runs the simulator in process (leave one out)"
        )
    try:
        return offline_target(args.sim, prompts, body)
    except LLMReplayError as exc:
        raise LLMReplayError(f"--sim: {exc}") from None


def _repeats(args: argparse.Namespace, sim: Any) -> tuple[int, str | None]:
    """How many times to replay (``--repeat``), and the line that says why it is once where it
    was asked more: the simulator in process without timing jitter gives the same figures on
    every run (as the plugin's ``--llm-repeat``)."""
    if sim is not None and sim.deterministic and args.repeat > 1:
        return (
            1,
            f"ran once, not {args.repeat} times: {sim.name} without timing jitter gives the same figures on every run",
        )
    return args.repeat, None


def _cache_resets(args: argparse.Namespace) -> Any:
    """What empties the server's prefix cache before each of ``--repeat``'s runs (the plugin's
    :meth:`~pytest_llmreplay.target.Target.reset_for_run`), turned off by ``--no-cache-reset``."""
    from ..target import Target

    resets = Target("live", url=args.endpoint, api_key_env=args.api_key_env)
    if args.no_cache_reset:
        resets.without_cache_reset()
    return resets


def _live_fingerprint(args: argparse.Namespace, body: dict[str, Any], resets: Any) -> dict[str, Any]:
    """The live server's fingerprint, read after the run (before a ``--server-cmd`` server is
    stopped), with what changes what is measured as the plugin's has it: ``body``
    (``--extra-body``, ``--ignore-eos``) and cache resets turned off."""
    from ..gate.stored_record import NOT_RESET
    from ..target import live_fingerprint

    try:
        fingerprint = live_fingerprint(args.endpoint, args.model, "--endpoint", args.api_key_env)
    except LLMReplayError:  # the server died with the run: what is known
        fingerprint = {
            "kind": "live",
            "model": args.model,
            "engine": None,
            "server_version": None,
            "sim_profile": None,
            "hardware": None,
        }
    if body:
        fingerprint["extra_body"] = body
    if resets is not None and not resets.cache_reset:
        fingerprint["cache_reset"] = NOT_RESET
    return fingerprint


def _record(
    result: Any, args: argparse.Namespace, workload: dict[str, Any], fingerprint: dict[str, Any], git: dict[str, Any]
) -> dict[str, Any]:
    """One run as a stored result (what ``llmreplay compare`` and the plugin's baselines read);
    its test name is ``llmreplay run <workload file name>``."""
    from ..gate.baseline import make_record

    return make_record(
        result, test=f"llmreplay run {Path(args.file).name}", fingerprint=fingerprint, workload=workload, git=git
    )


class ProgressLine:
    """``done/total requests, failed, elapsed`` on stderr, shown only once a run has lasted
    ``after_s`` seconds (short runs print nothing). On a terminal one line is redrawn in place
    at most every half second; elsewhere (a CI log, a file) a plain line is written at most
    every ``log_every_s`` seconds, so logs hold no carriage returns."""

    def __init__(self, total: int, after_s: float = 3.0, log_every_s: float = 10.0, stream: Any = None) -> None:
        from ..replayer.clock import WallClock

        self.clock = WallClock()
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty()
        self.total, self.after_s = total, after_s
        self.every_s = 0.5 if self.interactive else log_every_s
        self.start = self.clock.now()
        self.last = self.start - self.every_s
        self.done = self.failed = 0
        self.shown = False

    def update(self, record: Any) -> None:
        self.done += 1
        self.failed += record.status == "failed"
        now = self.clock.now()
        if now - self.start >= self.after_s and now - self.last >= self.every_s:
            self.last, self.shown = now, True
            line = f"{self.done:,}/{self.total:,} requests, {self.failed:,} failed, {now - self.start:.0f} s"
            print(
                f"\r{line}" if self.interactive else line,
                end="" if self.interactive else "\n",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self.shown and self.interactive:
            print(file=self.stream)


def add_run_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    from ..replayer.apis import APIS
    from ..replayer.plan import ARRIVALS, MODES, ORDERS

    run = commands.add_parser(
        "run",
        parents=[common],
        help="replay a workload against an endpoint",
        description="Replay a workload against an OpenAI-compatible endpoint; print the metric tables.",
    )
    run.add_argument("file", metavar="FILE")
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    where.add_argument(
        "--sim",
        metavar="PROFILE|FILE",
        help="no server: the simulator of this profile in process, in virtual time (as the plugin's --llm-offline)",
    )
    run.add_argument(
        "--band",
        type=int,
        metavar="N",
        help="with --sim: also replay N times with the profile's uncertain parameters drawn over their ranges "
        '(its "uncertainty" section; seeded by --seed) and print each headline figure with its 10th-90th '
        "percentile band, e.g. TTFT p50 61 ms (45-80), kept in --out's result.json as 'band'; at least 10 draws; "
        "the figure itself is the profile's nominal one, which can lie outside the band when its parameters sit "
        "near an end of their ranges (default: no band)",
    )
    run.add_argument(
        "--repeat",
        type=integer(1),
        default=1,
        metavar="N",
        help="replay N times (a fresh simulator, or the server's prefix cache emptied before each: vLLM, SGLang, "
        "llama.cpp) and keep the N runs as one result, each figure the median over the runs, which compare's "
        "interval then resamples run by run (the plugin's --llm-repeat); the tables show the last run "
        "(default 1; the simulator without timing jitter runs once)",
    )
    run.add_argument(
        "--no-cache-reset",
        action="store_true",
        help="with --repeat: never empty the server's prefix cache before a run: each may hit the cache the earlier ones warmed",
    )
    run.add_argument(
        "--save-to",
        metavar="STORE",
        help="also store the result (as llmreplay run <workload file name>, this commit) in STORE: a folder, git:REMOTE#REF, or a URL such as s3://BUCKET/PREFIX (checked before the run)",
    )
    run.add_argument(
        "--max-error-rate",
        type=share,
        default=0.0,
        metavar="SHARE",
        help="exit 0 although up to SHARE of the measured requests failed, e.g. 0.05 or 5%% (default 0: any failure exits 1)",
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        help="write DIR/result.json (a stored result: summary, samples, fingerprint; see llmreplay compare) and DIR/requests.csv (one row per request)",
    )
    target = run.add_argument_group("endpoint")
    target.add_argument(
        "--model",
        help="model name to send, replacing a verbatim payload's (default: the payload's, else the first of /v1/models)",
    )
    target.add_argument(
        "--api",
        choices=APIS,
        default="chat",
        help="which API to call: chat (/v1/chat/completions), completions, responses (/v1/responses) or messages (/v1/messages); default chat",
    )
    target.add_argument(
        "--api-key-env", metavar="NAME", help="environment variable holding the API key (sent as a bearer token)"
    )
    add_request_options(target)
    target.add_argument(
        "--no-stream", action="store_true", help="non-streaming requests (TTFT = latency; no TPOT or ITL)"
    )
    target.add_argument(
        "--tokenizer", metavar="NAME|PATH", help="tokenizer for prompts: the served model's (default: the bundled one)"
    )
    target.add_argument(
        "--server-cmd",
        metavar="CMD",
        help="start this server command first, wait for --endpoint to answer /health, stop it after",
    )
    target.add_argument(
        "--server-timeout",
        type=number(True),
        default=600.0,
        metavar="S",
        help="how long the server command may take to get ready (default 600)",
    )
    target.add_argument(
        "--metrics-interval",
        type=number(False),
        default=1.0,
        metavar="S",
        help="scrape the server's /metrics every S seconds during the run (default 1; 0: off)",
    )
    target.add_argument(
        "--no-idle-check",
        action="store_true",
        help="skip the check that the server's /metrics shows no requests in flight",
    )
    plan = run.add_argument_group("replay")
    plan.add_argument(
        "--mode",
        choices=MODES,
        default="auto",
        help="timestamps (open loop), concurrency, rate; auto: rate if --rate, concurrency if --concurrency or the trace is untimed, else timestamps",
    )
    plan.add_argument(
        "--concurrency", type=integer(1), metavar="N", help="sessions in flight (concurrency mode; a cap in the others)"
    )
    plan.add_argument(
        "--speedup",
        type=number(True),
        default=1.0,
        metavar="X",
        help="divide trace arrival times and turn delays by X (default 1)",
    )
    plan.add_argument("--rate", type=number(True), metavar="R", help="sessions per second (rate mode)")
    plan.add_argument("--arrival", choices=ARRIVALS, default="poisson", help="rate mode spacing (default poisson)")
    plan.add_argument(
        "--duration",
        dest="duration_s",
        type=number(True),
        metavar="S",
        help="stop admitting after S seconds; cancel what is still in flight after --grace",
    )
    plan.add_argument(
        "--grace",
        dest="grace_s",
        type=number(False),
        default=30.0,
        metavar="S",
        help="wait for requests in flight after --duration (default 30)",
    )
    plan.add_argument(
        "--max-requests",
        type=integer(1),
        metavar="N",
        help="take whole sessions until N requests (cycling the workload if needed)",
    )
    plan.add_argument(
        "--max-sessions", type=integer(1), metavar="N", help="run N sessions (cycling the workload if needed)"
    )
    plan.add_argument(
        "--warmup-requests",
        type=integer(0),
        default=0,
        metavar="N",
        help="leave the first N requests out of the metrics",
    )
    plan.add_argument(
        "--warmup-seconds",
        dest="warmup_s",
        type=number(False),
        default=0.0,
        metavar="S",
        help="leave requests scheduled in the first S seconds out of the metrics",
    )
    plan.add_argument(
        "--workers",
        type=integer(1),
        metavar="N",
        help="replay in N worker processes on Ray (pip install 'pytest-llmreplay[ray]'): a local instance, or the cluster at --ray-address",
    )
    plan.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="an existing Ray cluster for --workers (default: RAY_ADDRESS, else a local instance)",
    )
    plan.add_argument(
        "--order",
        choices=ORDERS,
        default="sequential",
        help="session order in concurrency and rate modes (default sequential)",
    )
    plan.add_argument(
        "--seed",
        type=integer(0),
        default=0,
        help="seed of prompts (salted with the workload file's digest), shuffling, sampling and Poisson arrivals (default 0)",
    )
    plan.add_argument(
        "--gpus",
        type=integer(1),
        metavar="N",
        help="GPUs behind the endpoint, for per-GPU throughput (default: the --sim profile's, else 1)",
    )
    run.set_defaults(run=cmd_run, bad_input_status=RUN_STATUS["bad_input"])
    remember_http_only_defaults(run)


def _planned_requests(workload: Any, settings: Any) -> int:
    """The requests the run plans (its count limits' whole sessions: the progress line's total;
    the workload's own count read 79/193 where ``--max-sessions 3`` planned 84); the workload's
    count where the plan is refused (the replay then says why)."""
    from ..replayer.plan import session_plan

    try:
        return sum(len(session.turns) for session in session_plan(workload, settings))
    except LLMReplayError:
        return workload.num_requests
