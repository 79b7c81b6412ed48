"""``llmreplay``: the command line. It only wires the library together.

    llmreplay validate FILE...            check files; exit 1 with the first error of each bad one
    llmreplay inspect FILE                a table of the workload's figures
    llmreplay convert IN OUT --to FORMAT  rewrite a workload in another format
    llmreplay run FILE --endpoint URL     replay a workload; print tables, write --out DIR
                   (or --sim PROFILE: the simulator in process, virtual time)
    llmreplay sim --profile P --port N    serve the simulated engine over HTTP (OpenAI API)
    llmreplay calibrate --endpoint URL    measure a live server, write a simulator profile
    llmreplay sweep FILE --sim P --slo K  capacity at SLO: the highest load meeting the SLOs (cli_sweep.py)
    llmreplay history TEST                a test's stored figures per commit, change points (cli_history.py)

Common options: ``--format NAME`` (skip detection), ``--block-size N`` (tokens per Mooncake
hash id, default 512). Errors are one line on stderr, never a traceback; exit status 1 for bad
input (``compare`` and ``run``: 3, see :data:`COMPARE_BAD_INPUT` and :data:`RUN_STATUS`), 2 for bad
usage (argparse). ``run`` exits 1 when more requests failed than ``--max-error-rate`` allows
(default none) and 4 when no request succeeded; stopped by SIGINT/SIGTERM it still reports what
it measured and exits 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import math
import re
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import LLMReplayError

# llmreplay run's exit statuses (README: "exit status"); 2 is argparse's (bad usage), a signal's
# is 128 + its number; bad input is 3, as compare's
RUN_STATUS = {"ok": 0, "requests_failed": 1, "bad_input": 3, "nothing_succeeded": 4}


def _load(args: argparse.Namespace, path: str):
    """``path`` loaded with ``--format`` and ``--block-size``; the block size goes only to formats
    that take one (``validate --block-size 16 *.jsonl`` checks a mix), with a warning for the others."""
    from .formats import detect_format, load_workload, loader_options

    options: dict[str, Any] = {}
    if args.block_size is not None:
        name = args.format or detect_format(path)
        if "block_size" in loader_options(name):
            options["block_size"] = args.block_size
        else:
            print(f"warning: {path}: --block-size does not apply to format {name!r} (only to hash-id traces: mooncake); ignored", file=sys.stderr)
    return load_workload(path, format=args.format, **options)


def cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            workload = _load(args, path)
        except LLMReplayError as exc:
            print(f"error: {spelled(str(exc), args.option_names)}", file=sys.stderr)
            failed += 1
            continue
        for warning in workload.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print(f"ok {path}: {workload.format}, {len(workload.sessions):,} sessions, {workload.num_requests:,} requests")
    return 1 if failed else 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from .workload_stats import describe

    workload = _load(args, args.file)
    for warning in workload.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    stats = describe(workload, token_block_size=args.token_block_size)
    print(tabulate(stats.rows(), headers=(args.file, ""), tablefmt="simple"))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from .formats import write_workload

    workload = _load(args, args.input)
    notes = write_workload(workload, args.output, args.to, allow_loss=args.allow_loss)
    for note in notes:
        print(f"note: dropped or changed: {spelled(note, args.option_names)}", file=sys.stderr)
    print(f"wrote {args.output}: {args.to}, {len(workload.sessions):,} sessions, {workload.num_requests:,} requests")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .baseline import workload_digest
    from .endpoints import HTTPEndpoint, ServerProcess, extra_body
    from .metrics import Result
    from .prompts import PromptFactory
    from .driver import Replay, ReplaySettings
    from .report import render
    from .tokenizer import load_tokenizer

    workload = _load(args, args.file)
    for warning in workload.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    settings = ReplaySettings(
        mode=args.mode, speedup=args.speedup, concurrency=args.concurrency, rate=args.rate, arrival=args.arrival,
        duration_s=args.duration_s, grace_s=args.grace_s, max_requests=args.max_requests, max_sessions=args.max_sessions,
        warmup_requests=args.warmup_requests, warmup_s=args.warmup_s, order=args.order, seed=args.seed,
        prompt_format=args.prompt_format, check_idle=not args.no_idle_check,
    )
    settings.validate()
    workers = _workers(args)
    if args.out:
        from .store import make_folder

        try:
            make_folder(Path(args.out), "result.json and requests.csv")
        except LLMReplayError as exc:
            raise LLMReplayError(f"--out: {exc}") from None
    store = _open_store("--save-to", args.save_to, writing=True) if args.save_to else None
    body = extra_body("--extra-body", args.extra_body, args.ignore_eos)
    # salted with the workload's digest, as the plugin does: two workloads share no prompt tokens
    digest = workload_digest(args.file)
    prompts = PromptFactory(load_tokenizer(args.tokenizer), seed=args.seed, tokenizer_option="--tokenizer").salted(digest)
    sim = _sim_target(args, prompts, body) if args.sim else None
    if sim is not None:  # the plugin's --llm-offline: the simulator in process, on the virtual clock
        endpoint, clock = sim.endpoint(), sim.clock()
    else:
        endpoint, clock = HTTPEndpoint(
            args.endpoint, model=args.model, api=args.api, stream=not args.no_stream, api_key_env=args.api_key_env,
            headers=dict(_header(h) for h in args.header), extra_body=body, timeout_s=args.timeout,
        ), None
    progress = ProgressLine(workload.num_requests if args.max_requests is None else args.max_requests)
    server = ServerProcess(args.server_cmd, args.endpoint, startup_timeout_s=args.server_timeout, timeout_option="--server-timeout",
                           progress=lambda line: print(line, file=sys.stderr)) if args.server_cmd else None
    try:
        if server is not None:
            server.start()
        if workers is not None:
            with workers:
                run = workers.replay(workload, endpoint, prompts, settings, on_record=progress.update, stop_on_signals=True)
        else:
            run = Replay(workload, endpoint, prompts, settings, clock=clock, on_record=progress.update, stop_on_signals=True).run()
    finally:
        progress.close()
        if server is not None:
            died = server.exit_message()
            server.stop()
            if died:
                print(f"warning: {died}", file=sys.stderr)
    result = Result(run, gpus=args.gpus)
    print(render(result))
    record = _record(result, args, digest, sim.fingerprint if sim is not None else None) if args.out or store else None
    if args.out:
        from .store import write_new

        out = Path(args.out)
        (out / "result.json").unlink(missing_ok=True)  # --out names a folder for this run's files
        print(f"wrote {write_new(out / 'result.json', record)} and {result.write_csv(out / 'requests.csv')}")
    if store is not None:
        try:
            print(f"saved {store.save(record)}")
        except LLMReplayError as exc:
            raise LLMReplayError(f"--save-to: {exc}") from None
    if run.interrupted:
        return 128 + getattr(signal, run.interrupted)  # the shell's status for a process a signal ended
    return _run_status(result.summary["requests"], args.max_error_rate)


def _run_status(counts: dict[str, int], max_error_rate: float) -> int:
    """:data:`RUN_STATUS` of a finished run from its measured request counts: nothing succeeded,
    else failed / (ok + failed) beyond ``max_error_rate``, else ok; a line on stderr says why."""
    ok, failed = counts["ok"], counts["failed"]
    if not ok:
        print(f"error: no request succeeded ({failed} failed, {counts['cancelled']} cancelled, {counts['warmup']} warm-up)", file=sys.stderr)
        return RUN_STATUS["nothing_succeeded"]
    if failed / (ok + failed) > max_error_rate:
        print(f"error: {failed} of {ok + failed} requests failed ({failed / (ok + failed):.1%}), more than --max-error-rate {max_error_rate:.1%} allows", file=sys.stderr)
        return RUN_STATUS["requests_failed"]
    return RUN_STATUS["ok"]


def _workers(args: argparse.Namespace) -> Any:
    """``--workers``' Ray workers (not started yet), None for one process."""
    if args.workers is None:
        if args.ray_address:
            raise LLMReplayError("--ray-address: needs --workers N, the number of workers to run on the cluster")
        return None
    if args.sim:
        raise LLMReplayError("--workers: --sim runs in virtual time, which cannot be shared across processes; "
                             "serve the simulator over HTTP (llmreplay sim) and give its --endpoint, or drop --workers")
    from .workers import RayWorkers, import_ray

    try:
        import_ray()
    except LLMReplayError as exc:
        raise LLMReplayError(f"--workers: {exc}") from None
    return RayWorkers(args.workers, args.ray_address)


def _sim_target(args: argparse.Namespace, prompts: Any, body: dict[str, Any]) -> Any:
    """``--sim PROFILE``: the plugin's offline :class:`~pytest_llmreplay.target.Target`."""
    from .target import offline_target

    if args.server_cmd:
        raise LLMReplayError("--server-cmd: starts a server for --endpoint; --sim runs the simulator in process (leave one out)")
    try:
        return offline_target(args.sim, prompts, body)
    except LLMReplayError as exc:
        raise LLMReplayError(f"--sim: {exc}") from None


def _record(result: Any, args: argparse.Namespace, digest: str, fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run as a stored result (what ``llmreplay compare`` and the plugin's baselines read);
    its test name is ``llmreplay run <workload file name>``; ``fingerprint``: the simulator's
    (``--sim``), else read from the live server."""
    from .baseline import git_state, make_record
    from .target import live_fingerprint

    if fingerprint is None:
        try:
            fingerprint = live_fingerprint(args.endpoint, args.model, args.api_key_env)
        except LLMReplayError:  # the server is gone (it was started by --server-cmd): what is known
            fingerprint = {"kind": "live", "model": args.model, "server_version": None, "sim_profile": None, "hardware": None}
    workload = {"path": args.file, "format": args.format, "digest": digest}
    return make_record(result, test=f"llmreplay run {Path(args.file).name}", fingerprint=fingerprint, workload=workload, git=git_state(Path.cwd()))


def _open_store(option: str, text: str, writing: bool) -> Any:
    """The store ``text`` names, checked (see :mod:`~pytest_llmreplay.store`); errors name ``option``."""
    from .store import open_store

    try:
        store = open_store(text, Path.cwd())
        store.check(writing)
    except LLMReplayError as exc:
        raise LLMReplayError(f"{option}: {exc}") from None
    return store


def _stored_side(store: Any, test: str, side: str, ref: str) -> tuple[dict[str, Any], str]:
    """(record, where) of ``test``'s newest result at ``ref`` (``side`` A or B: a name git resolves
    here, or a commit id of 12 hex digits or more, which a store may hold from another clone)."""
    from .baseline import resolve_commit

    commit = resolve_commit(Path.cwd(), ref)
    if commit is None:
        if not re.fullmatch(r"[0-9a-f]{12,40}", ref):
            raise LLMReplayError(f"{side}: git cannot resolve {ref!r} to a commit here; expected a branch, tag or commit of this repository, or a commit id of 12 hex digits or more")
        commit = ref
    found = store.latest(test, [commit])
    if found is None:
        raise LLMReplayError(f"--store: no stored result of {test!r} at {ref} ({commit[:12]}) in {store.label}")
    return store.read(found), f"{store.label}/{found}"


def cmd_compare(args: argparse.Namespace) -> int:
    from .baseline import compare, comparison_table, read_record

    allowed = _regression_overrides(args.regression)  # every option is checked before anything is read or printed
    if args.test and not args.store:
        raise LLMReplayError("--test is read with --store only (A and B are then commits); without --store, A and B are result files")
    if args.store:
        if not args.test:
            raise LLMReplayError("--store needs --test: the stored test whose results to compare")
        store = _open_store("--store", args.store, writing=False)
        (baseline, source), (current, _) = _stored_side(store, args.test, "A", args.baseline), _stored_side(store, args.test, "B", args.current)
    else:
        baseline, current, source = read_record(args.baseline), read_record(args.current), args.baseline
    for name, record in (("A", baseline), ("B", current)):
        where = f"commit {str(record.get('commit'))[:12]}{' (dirty)' if record.get('dirty') else ''}" if record.get("commit") else "no commit"
        print(f"{name}: {record.get('test')}, {where}, {record.get('time')}, endpoint {record['fingerprint']}")
    comparison = compare(baseline, current, allowed, label=f"A ({source})", across_endpoints=True)
    print(comparison_table(comparison))
    if comparison.mismatch:
        return 2
    return 1 if comparison.regressions else 0


def _regression_overrides(texts: list[str]) -> dict[str, float]:
    """The allowed changes of ``compare``: the defaults with each ``--regression KEY=ALLOWED``
    applied (:func:`baseline.tolerances` checks key and value); a key given twice is refused."""
    from .baseline import tolerances

    overrides: dict[str, str] = {}
    for text in texts:
        key, sep, value = (part.strip() for part in text.partition("="))
        if not sep or not key:
            raise LLMReplayError(f"--regression: expected KEY=ALLOWED such as ttft.p50=10%, got {text!r}")
        if key in overrides:
            raise LLMReplayError(f"--regression: {key} is given twice ({overrides[key]!r} and {value!r}); expected each key once")
        overrides[key] = value
    try:
        return tolerances(overrides)
    except LLMReplayError as exc:  # its messages start "regression 'KEY': ..."
        raise LLMReplayError(f"--{exc}") from None


COMPARE_BAD_INPUT = 3  # compare's 1 and 2 say what the comparison found


def _add_compare_parser(commands: Any) -> None:
    compare = commands.add_parser("compare", help="compare two stored results (baselines, reports, run --out)",
                                  description="Compare stored result B against A, metric by metric, with bootstrap intervals. "
                                              "Different endpoints (vLLM against SGLang) on the same workload and settings may be compared; "
                                              "the header says so. Exit status: 0 no regression, 1 a regression, 2 not comparable, 3 bad input.")
    compare.add_argument("baseline", metavar="A", help="the reference: a file under .llmreplay/, a report's tests/*.json, or run --out's result.json; with --store, a commit")
    compare.add_argument("current", metavar="B", help="the result to judge against A (with --store, a commit)")
    compare.add_argument("--store", metavar="STORE", help="read A and B from a store (a folder, git:REMOTE#REF or a URL such as s3://BUCKET/PREFIX): "
                                                          "the newest result of --test at each commit (an id, or a branch or tag git resolves here)")
    compare.add_argument("--test", metavar="TEST", help="with --store: the test id, as stored (a pytest node id, or 'llmreplay run FILE')")
    compare.add_argument("--regression", action="append", default=[], metavar="KEY=ALLOWED",
                         help="allowed change of a compared metric, e.g. ttft.p50=10%% or ttft.p90=off (repeatable)")
    compare.set_defaults(run=cmd_compare, bad_input_status=COMPARE_BAD_INPUT)


class ProgressLine:
    """``done/total requests, failed, elapsed`` on stderr, shown only once a run has lasted
    ``after_s`` seconds (short runs print nothing). On a terminal one line is redrawn in place
    at most every half second; elsewhere (a CI log, a file) a plain line is written at most
    every ``log_every_s`` seconds, so logs hold no carriage returns."""

    def __init__(self, total: int, after_s: float = 3.0, log_every_s: float = 10.0, stream: Any = None) -> None:
        from .clock import WallClock

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
            print(f"\r{line}" if self.interactive else line, end="" if self.interactive else "\n", file=self.stream, flush=True)

    def close(self) -> None:
        if self.shown and self.interactive:
            print(file=self.stream)


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name.strip()):
        raise LLMReplayError(f"--header: expected NAME:VALUE with a NAME of letters, digits and !#$%&'*+-.^_`|~, got {text!r}")
    return name.strip(), value.strip()


def _integer(low: int) -> Any:
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    return parse


def _number(positive: bool) -> Any:
    """An argparse type: a finite number > 0 (``positive``) or >= 0."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"expected a finite number {'>' if positive else '>='} 0, got {text!r}")
        return value

    return parse


def _share(text: str) -> float:
    """An argparse type: a share from 0 to 1, a fraction (0.05) or a percentage (5%), read as
    the SLO ``error_rate <= text`` is."""
    from .slo import parse_slo

    try:
        value = parse_slo("error_rate", f"<= {text}").value
    except LLMReplayError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1 such as 0.05 or 5%, got {text!r}")
    return value


def _add_run_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    from .driver import ARRIVALS, MODES, ORDERS, PROMPT_FORMATS

    run = commands.add_parser("run", parents=[common], help="replay a workload against an endpoint",
                              description="Replay a workload against an OpenAI-compatible endpoint; print the metric tables.")
    run.add_argument("file", metavar="FILE")
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    where.add_argument("--sim", metavar="PROFILE|FILE", help="no server: the simulator of this profile in process, in virtual time (as the plugin's --llm-offline)")
    run.add_argument("--save-to", metavar="STORE", help="also store the result (as llmreplay run <workload file name>, this commit) in STORE: a folder, git:REMOTE#REF, or a URL such as s3://BUCKET/PREFIX (checked before the run)")
    run.add_argument("--max-error-rate", type=_share, default=0.0, metavar="SHARE",
                     help="exit 0 although up to SHARE of the measured requests failed, e.g. 0.05 or 5%% (default 0: any failure exits 1)")
    run.add_argument("--out", metavar="DIR", help="write DIR/result.json (a stored result: summary, samples, fingerprint; see llmreplay compare) and DIR/requests.csv (one row per request)")
    target = run.add_argument_group("endpoint")
    target.add_argument("--model", help="model name to send, replacing a verbatim payload's (default: the payload's, else the first of /v1/models)")
    target.add_argument("--api", choices=("chat", "completions"), default="chat", help="which API to call (default chat)")
    target.add_argument("--prompt-format", choices=PROMPT_FORMATS, help="completions prompts as text or token ids (default text)")
    target.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the API key (sent as a bearer token)")
    target.add_argument("--header", action="append", default=[], metavar="NAME:VALUE", help="extra HTTP header (repeatable)")
    target.add_argument("--extra-body", metavar="JSON", help='fields merged into every request body, e.g. \'{"min_tokens": 64}\'')
    target.add_argument("--ignore-eos", action="store_true", help="send ignore_eos: true (output lengths exactly as planned, vLLM/SGLang)")
    target.add_argument("--no-stream", action="store_true", help="non-streaming requests (TTFT = latency)")
    target.add_argument("--timeout", type=_number(True), default=600.0, metavar="S", help="fail a request after S seconds without data (default 600)")
    target.add_argument("--tokenizer", metavar="NAME|PATH", help="tokenizer for prompts: the served model's (default: the bundled one)")
    target.add_argument("--server-cmd", metavar="CMD", help="start this server command first, wait for --endpoint to answer /health, stop it after")
    target.add_argument("--server-timeout", type=_number(True), default=600.0, metavar="S", help="how long the server command may take to get ready (default 600)")
    target.add_argument("--no-idle-check", action="store_true", help="skip the check that the server's /metrics shows no requests in flight")
    plan = run.add_argument_group("replay")
    plan.add_argument("--mode", choices=MODES, default="auto", help="timestamps (open loop), concurrency, rate; auto: rate if --rate, concurrency if --concurrency or the trace is untimed, else timestamps")
    plan.add_argument("--concurrency", type=_integer(1), metavar="N", help="sessions in flight (concurrency mode; a cap in the others)")
    plan.add_argument("--speedup", type=_number(True), default=1.0, metavar="X", help="divide trace arrival times and turn delays by X (default 1)")
    plan.add_argument("--rate", type=_number(True), metavar="R", help="sessions per second (rate mode)")
    plan.add_argument("--arrival", choices=ARRIVALS, default="poisson", help="rate mode spacing (default poisson)")
    plan.add_argument("--duration", dest="duration_s", type=_number(True), metavar="S", help="stop admitting after S seconds; cancel what is still in flight after --grace")
    plan.add_argument("--grace", dest="grace_s", type=_number(False), default=30.0, metavar="S", help="wait for requests in flight after --duration (default 30)")
    plan.add_argument("--max-requests", type=_integer(1), metavar="N", help="take whole sessions until N requests (cycling the workload if needed)")
    plan.add_argument("--max-sessions", type=_integer(1), metavar="N", help="run N sessions (cycling the workload if needed)")
    plan.add_argument("--warmup-requests", type=_integer(0), default=0, metavar="N", help="leave the first N requests out of the metrics")
    plan.add_argument("--warmup-seconds", dest="warmup_s", type=_number(False), default=0.0, metavar="S", help="leave requests scheduled in the first S seconds out of the metrics")
    plan.add_argument("--workers", type=_integer(1), metavar="N", help="replay in N worker processes on Ray (pip install 'pytest-llmreplay[ray]'): a local instance, or the cluster at --ray-address")
    plan.add_argument("--ray-address", metavar="ADDR", help="an existing Ray cluster for --workers (default: RAY_ADDRESS, else a local instance)")
    plan.add_argument("--order", choices=ORDERS, default="sequential", help="session order in concurrency and rate modes (default sequential)")
    plan.add_argument("--seed", type=_integer(0), default=0, help="seed of prompts (salted with the workload file's digest), shuffling, sampling and Poisson arrivals (default 0)")
    plan.add_argument("--gpus", type=_integer(1), default=1, metavar="N", help="GPUs behind the endpoint, for per-GPU throughput (default 1)")
    run.set_defaults(run=cmd_run, bad_input_status=RUN_STATUS["bad_input"])


def cmd_sim(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses
    import socket

    from .prompts import PromptFactory
    from .sim.cluster import ClusterConfig
    from .sim.faults import FaultConfig
    from .sim.server import SimServer, ready_line, serve
    from .sim.profile import MAX_JITTER, load_profile
    from .tokenizer import load_tokenizer

    cluster = ClusterConfig(engines=args.engines, router=args.router, prefill_engines=args.prefill_engines,
                            kv_transfer_gbps=args.kv_transfer_gbps, kv_bytes_per_token=args.kv_bytes_per_token)
    faults = FaultConfig(error_rate=args.fault_error_rate, stall_rate=args.fault_stall_rate, stall_s=args.fault_stall_s,
                         disconnect_rate=args.fault_disconnect_rate, seed=args.seed)
    try:
        profile = load_profile(args.profile)
    except LLMReplayError as exc:
        raise LLMReplayError(f"--profile: {exc}") from None
    overrides = _engine_overrides(args)
    if overrides:
        profile = dataclasses.replace(profile, engine=dataclasses.replace(profile.engine, **overrides))
    if args.timing_jitter is not None:
        if not 0 <= args.timing_jitter <= MAX_JITTER:
            raise LLMReplayError(f"--timing-jitter: expected a coefficient of variation from 0 to {MAX_JITTER:g}, got {args.timing_jitter:g}")
        profile = dataclasses.replace(profile, jitter=args.timing_jitter)
    prompts = PromptFactory(load_tokenizer(args.tokenizer), seed=args.seed)
    try:
        server = SimServer(profile, prompts, model=args.model, cluster=cluster, faults=faults,
                           eos_mean_tokens=args.eos_mean_tokens, seed=args.seed)
    except LLMReplayError as exc:  # "field: why" -> "--option: why"
        fields, sep, why = str(exc).partition(": ")
        raise LLMReplayError(re.sub(r"[a-z_]+", lambda m: _SIM_OPTIONS.get(m.group(0), m.group(0)), fields) + sep + why) from None

    def ready(url: str) -> None:
        print(ready_line(profile.name, server.model, url), flush=True)

    if not 0 <= args.port <= 65535:
        raise LLMReplayError(f"--port: expected a port from 0 to 65535, got {args.port}")
    try:
        asyncio.run(serve(server, args.host, args.port, ready, args.parent_pid))
    except socket.gaierror as exc:
        raise LLMReplayError(f"--host {args.host}: not an address to listen on ({exc.strerror or exc})") from None
    except OSError as exc:
        raise LLMReplayError(f"--port {args.port}: cannot listen on {args.host}: {exc.strerror or exc}") from None
    return 0


_SIM_OPTIONS = {
    "engines": "--engines", "router": "--router", "prefill_engines": "--prefill-engines", "kv_transfer_gbps": "--kv-transfer-gbps", "kv_bytes_per_token": "--kv-bytes-per-token",
    "error_rate": "--fault-error-rate", "stall_rate": "--fault-stall-rate", "stall_s": "--fault-stall-s",
    "disconnect_rate": "--fault-disconnect-rate", "eos_mean_tokens": "--eos-mean-tokens", "model": "--model",
}


def _add_sim_parser(commands: Any) -> None:
    from .sim.cluster import ROUTERS

    sim = commands.add_parser("sim", help="serve the simulated engine over HTTP",
                              description="Serve the simulated engine as an OpenAI-compatible HTTP server.")
    sim.add_argument("--profile", default="llama-3.1-8b-h100", metavar="NAME|FILE",
                     help="a bundled profile name or a profile JSON file (default llama-3.1-8b-h100)")
    sim.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sim.add_argument("--port", type=int, default=8000, metavar="N", help="port (default 8000; 0 picks a free one and prints it)")
    sim.add_argument("--parent-pid", type=int, metavar="PID", help="stop when process PID is no longer this one's parent (it died): the pytest plugin passes its own")
    sim.add_argument("--model", metavar="NAME", help="served model name (default: the profile's name)")
    sim.add_argument("--tokenizer", metavar="NAME|PATH", help="tokenizer for prompt text and output text (default: the bundled one)")
    sim.add_argument("--seed", type=int, default=0, help="seed of output tokens, natural lengths and faults (default 0)")
    sim.add_argument("--eos-mean-tokens", type=float, metavar="N",
                     help="simulate EOS: requests without ignore_eos stop after a geometric number of tokens with mean N (default: always max_tokens)")
    group = sim.add_argument_group("engine settings (override the profile's)")
    _add_engine_options(group, *(["the profile's"] * 4))
    group.add_argument("--timing-jitter", type=float, metavar="CV",
                       help="coefficient of variation of iteration times, 0 to 1 (default: the profile's timing.jitter, else 0)")
    group = sim.add_argument_group("cluster")
    group.add_argument("--engines", type=int, default=1, metavar="N", help="engines (the decode pool with --prefill-engines; default 1)")
    group.add_argument("--router", choices=ROUTERS, default="round_robin", help="how requests are spread over engines (default round_robin)")
    group.add_argument("--prefill-engines", type=int, default=0, metavar="N", help="disaggregated serving: N prefill engines in front of the --engines decode pool")
    group.add_argument("--kv-transfer-gbps", type=float, default=50.0, metavar="GBPS", help="prefill-to-decode KV link bandwidth in GB/s (default 50)")
    group.add_argument("--kv-bytes-per-token", type=float, metavar="B", help="KV bytes per token (default: from the profile's model)")
    group = sim.add_argument_group("fault injection (seeded)")
    group.add_argument("--fault-error-rate", type=_share, default=0.0, metavar="P", help="share of requests answered HTTP 500 before any token (default 0)")
    group.add_argument("--fault-stall-rate", type=_share, default=0.0, metavar="P", help="share of requests whose response pauses --fault-stall-s after a random token but the last (default 0)")
    group.add_argument("--fault-stall-s", type=_number(False), default=10.0, metavar="S", help="length of a stall in seconds (default 10)")
    group.add_argument("--fault-disconnect-rate", type=_share, default=0.0, metavar="P", help="share of requests whose connection is closed after a random token but the last (default 0)")
    sim.set_defaults(run=cmd_sim)


def _points(option: str, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise LLMReplayError(f"{option}: expected comma-separated integers, got {text!r}") from None


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .endpoints import HTTPEndpoint
    from .prompts import PromptFactory
    from .sim.calibrate import CalibrationPlan, calibrate, write_profile
    from .tokenizer import load_tokenizer

    if not 0 < args.timeout < math.inf:
        raise LLMReplayError(f"--timeout: expected seconds > 0, got {args.timeout}")
    engine = _engine_overrides(args)
    if args.from_run:
        from .cli_calibrate import cmd_calibrate_run

        return cmd_calibrate_run(args, engine)
    if not args.endpoint:
        raise LLMReplayError("--endpoint: missing (give --endpoint URL for a live sweep, or --from-run RUN to fit a recorded run)")
    plan = CalibrationPlan(
        prefill_tokens=_points("--prefill-tokens", args.prefill_tokens), decode_seqs=_points("--decode-seqs", args.decode_seqs),
        decode_prompt_tokens=args.decode_prompt_tokens, decode_output_tokens=args.decode_output_tokens,
        repeats=args.repeats, budget_s=args.budget, engine=engine,
    )
    try:
        plan.validate()
    except LLMReplayError as exc:
        fields, sep, why = str(exc).partition(": ")
        raise LLMReplayError("--" + fields.replace("_", "-").replace("budget-s", "budget") + sep + why) from None
    endpoint = HTTPEndpoint(args.endpoint, model=args.model, api="completions", api_key_env=args.api_key_env,
                            extra_body={"ignore_eos": True}, timeout_s=args.timeout)
    prompts = PromptFactory(load_tokenizer(args.tokenizer), seed=args.seed)
    name = args.name or Path(args.out).stem
    profile = calibrate(endpoint, prompts, plan, name, progress=lambda line: print(line, flush=True))
    write_profile(profile, args.out)
    print(f"wrote {args.out}: use it with --llm-sim-profile {args.out} or llmreplay sim --profile {args.out}")
    return 0


ENGINE_OPTIONS = ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens")


def _add_engine_options(group: Any, *defaults: str) -> None:
    """--block-size, --num-gpu-blocks, --max-num-seqs, --max-num-batched-tokens (vLLM's names)."""
    helps = ("KV block size", "KV blocks per engine", "running requests at most", "tokens per iteration at most")
    for key, text, default in zip(ENGINE_OPTIONS, helps, defaults):
        group.add_argument("--" + key.replace("_", "-"), type=int, metavar="N", help=f"{text} (default: {default})")


def _engine_overrides(args: argparse.Namespace) -> dict[str, int]:
    """The engine options given on the command line, each an integer >= 1 (``--num-gpu-blocks``
    at most :data:`~.sim.engine.MAX_GPU_BLOCKS`)."""
    from .sim.engine import MAX_GPU_BLOCKS

    given = {key: getattr(args, key) for key in ENGINE_OPTIONS if getattr(args, key) is not None}
    for key, value in given.items():
        if value < 1:
            raise LLMReplayError(f"--{key.replace('_', '-')}: expected an integer >= 1, got {value}")
        if key == "num_gpu_blocks" and value > MAX_GPU_BLOCKS:
            raise LLMReplayError(f"--num-gpu-blocks: expected at most {MAX_GPU_BLOCKS:,} (the simulator keeps per-block state in memory), got {value:,}")
    return given


def _add_calibrate_parser(commands: Any) -> None:
    from .cli_calibrate import add_from_run_options

    calibrate = commands.add_parser("calibrate", help="measure a live server, or fit a recorded run, and write a simulator profile",
                                    description="Run a short, bounded profiling sweep against a live server and write a table-timing simulator profile; "
                                                "or (--from-run) fit a roofline profile's efficiencies to a recorded run of a real server.")
    calibrate.add_argument("--endpoint", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    calibrate.add_argument("--out", required=True, metavar="FILE", help="the profile JSON to write")
    calibrate.add_argument("--name", help="the profile's name (default: the file's stem)")
    calibrate.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    calibrate.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the API key")
    calibrate.add_argument("--tokenizer", metavar="NAME|PATH", help="tokenizer for prompts (default: the bundled one; lengths are read from the server's usage)")
    calibrate.add_argument("--timeout", type=float, default=600.0, metavar="S", help="fail a request after S seconds without data (default 600)")
    calibrate.add_argument("--seed", type=int, default=0, help="seed of the prompts (default 0)")
    sweep = calibrate.add_argument_group("sweep")
    sweep.add_argument("--prefill-tokens", default="128,512,1024,2048,4096", metavar="L,L,...", help="prompt lengths to time (default 128,512,1024,2048,4096)")
    sweep.add_argument("--decode-seqs", default="1,4,16,64", metavar="B,B,...", help="decode batch sizes to time (default 1,4,16,64)")
    sweep.add_argument("--decode-prompt-tokens", type=int, default=64, metavar="N", help="prompt length of the decode requests (default 64)")
    sweep.add_argument("--decode-output-tokens", type=int, default=64, metavar="N", help="output length of the decode requests (default 64)")
    sweep.add_argument("--repeats", type=int, default=3, metavar="N", help="repeats per point; the median is kept (default 3)")
    sweep.add_argument("--budget", type=float, default=300.0, metavar="S", help="stop the sweep after S seconds, keeping the points measured (default 300)")
    _add_engine_options(calibrate.add_argument_group("engine settings (not visible from outside unless the server exports vllm:cache_config_info)"),
                        "exported, else 16", "exported, else required", "256", "8192")
    add_from_run_options(calibrate)
    calibrate.set_defaults(run=cmd_calibrate)


def build_parser() -> argparse.ArgumentParser:
    from .formats import FORMATS

    names = sorted(FORMATS)
    writable = sorted(name for name, module in FORMATS.items() if hasattr(module, "write"))
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--format", choices=names, help="the input's format (default: detected from its first line)")
    common.add_argument("--block-size", type=_integer(1), metavar="N", help="tokens per Mooncake hash id (default 512)")

    parser = argparse.ArgumentParser(prog="llmreplay", description="Replay LLM serving workloads; check and convert them.")
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", parents=[common], help="check workload files; exit 1 if any is bad")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(run=cmd_validate)
    inspect = commands.add_parser("inspect", parents=[common], help="print a workload's figures")
    inspect.add_argument("file", metavar="FILE")
    inspect.add_argument("--token-block-size", type=_integer(1), default=16, metavar="N",
                         help="block size for the reusable-prefix share of token-id prompts (default 16, vLLM's)")
    inspect.set_defaults(run=cmd_inspect)
    convert = commands.add_parser("convert", parents=[common], help="rewrite a workload in another format")
    convert.add_argument("input", metavar="IN")
    convert.add_argument("output", metavar="OUT")
    convert.add_argument("--to", required=True, choices=writable, help="the output format")
    convert.add_argument("--allow-loss", action="store_true",
                         help="convert even when the target drops something (arrival times, token ids, ...); what is dropped is printed")
    convert.set_defaults(run=cmd_convert)
    _add_run_parser(commands, common)
    _add_sim_parser(commands)
    _add_calibrate_parser(commands)
    _add_compare_parser(commands)
    from .cli_sweep import add_sweep_parser
    from .cli_history import add_history_parser

    add_sweep_parser(commands, common, _load, _number, _integer)
    add_history_parser(commands, _open_store)
    for command in commands.choices.values():
        command.set_defaults(option_names=option_names(command))
    return parser


def option_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each setting ``parser`` takes, by the library's name for it (the option's destination,
    e.g. ``duration_s``), with its long option (``--duration``)."""
    return {action.dest: max(action.option_strings, key=len) for action in parser._actions if action.option_strings}


_SETTING_AT_START = re.compile(r"[a-z][a-z0-9_]*(?:/[a-z][a-z0-9_]*)*(?=: )")
_SETTING_HINT = re.compile(r"(?<![\w./?&=-])([a-z][a-z0-9_]*)=(\w?)")


def spelled(text: str, names: dict[str, str]) -> str:
    """``text`` with the library's names of settings (the keys of ``names``) spelled as the
    options of the command the user typed: a leading ``duration_s: ...`` becomes
    ``--duration: ...`` (``max_requests/max_sessions: ...``, ``--max-requests/--max-sessions: ...``), and a hint ``name it with format=`` or ``load with block_size=16``
    becomes ``name it with --format`` or ``load with --block-size 16``. Other words are kept."""
    head = _SETTING_AT_START.match(text)
    if head and all(name in names for name in head.group(0).split("/")):
        text = "/".join(names[name] for name in head.group(0).split("/")) + text[head.end():]

    def option(match: re.Match[str]) -> str:
        name, value = match.groups()
        if name not in names:
            return match.group(0)
        return f"{names[name]} {value}" if value else names[name]

    return _SETTING_HINT.sub(option, text)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except LLMReplayError as exc:
        print(f"error: {spelled(str(exc), args.option_names)}", file=sys.stderr)
        return getattr(args, "bad_input_status", 1)
    except KeyboardInterrupt:  # before a run started, or a second Ctrl-C during one
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
