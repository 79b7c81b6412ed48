"""``llmreplay``: the command line. It only wires the library together.

    llmreplay validate FILE...            check files; exit 1 with the first error of each bad one
    llmreplay inspect FILE                a table of the workload's figures
    llmreplay convert IN OUT --to FORMAT  rewrite a workload in another format
    llmreplay run FILE --endpoint URL     replay a workload; print tables, write --out DIR (cli/run.py)
                   (or --sim PROFILE: the simulator in process, virtual time)
    llmreplay compare A B                 two stored results, metric by metric (cli/compare.py)
    llmreplay sim --profile P --port N    serve the simulated engine over HTTP, OpenAI API (cli/sim.py)
    llmreplay calibrate --endpoint URL    measure a live server, write a simulator profile (cli/calibrate.py)
    llmreplay sweep FILE --sim P --slo K  capacity at SLO: the highest load meeting the SLOs (cli/sweep.py)
    llmreplay history TEST                a test's stored figures per commit, change points (cli/history.py)
    llmreplay dashboard --out DIR         a static site of every test's figures over commits (cli/dashboard.py)

Common options: ``--format NAME`` (skip detection), ``--block-size N`` (tokens per Mooncake
hash id, default 512). Errors are one line on stderr, never a traceback; exit status 1 for bad
input, 2 for bad usage (argparse's message: an unknown option, a value of the wrong form). ``run``,
``compare``, ``sweep``, ``calibrate``, ``history`` and ``dashboard``, whose statuses CI scripts read, exit 3 for
both (:data:`~pytest_llmreplay.cli.options.BAD_INPUT`: :data:`~pytest_llmreplay.cli.run.RUN_STATUS`, :data:`~pytest_llmreplay.cli.compare.COMPARE_BAD_INPUT`,
:data:`~pytest_llmreplay.cli.sweep.SWEEP_STATUS`), so that compare's 2 means only "not comparable". ``run`` exits 1 when more requests failed than ``--max-error-rate`` allows
(default none) and 4 when no request succeeded; stopped by SIGINT/SIGTERM it still reports what
it measured and exits 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..errors import LLMReplayError
from .calibrate import add_calibrate_parser
from .compare import add_compare_parser
from .dashboard import add_dashboard_parser
from .history import add_history_parser
from .options import integer, load_workload_file
from .process import reader_tolerant_stdout, single_threaded_blas
from .run import add_run_parser
from .sim import add_sim_parser
from .sweep import add_sweep_parser


def cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            workload = load_workload_file(args, path)
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

    from ..workloads.stats import describe

    workload = load_workload_file(args, args.file)
    for warning in workload.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    stats = describe(workload, token_block_size=args.token_block_size)
    print(tabulate(stats.rows(), headers=(args.file, ""), tablefmt="simple"))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from ..workloads.formats import write_workload

    workload = load_workload_file(args, args.input)
    notes = write_workload(workload, args.output, args.to, allow_loss=args.allow_loss)
    for note in notes:
        print(f"note: dropped or changed: {spelled(note, args.option_names)}", file=sys.stderr)
    print(f"wrote {args.output}: {args.to}, {len(workload.sessions):,} sessions, {workload.num_requests:,} requests")
    return 0


USAGE_LINES = 3  # argparse's usage longer than this hides the error: a short one instead


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors exit with the command's ``bad_input_status`` default
    where it sets one (2 otherwise), after argparse's usage (a command with so many options that
    it runs past :data:`USAGE_LINES` lines: one line naming its arguments and ``--help``) and
    message."""

    def error(self, message: str) -> NoReturn:
        usage = self.format_usage()
        if usage.count("\n") > USAGE_LINES:  # the message would scroll behind every option
            arguments = [str(a.metavar or a.dest.upper()) for a in self._actions if not a.option_strings]
            usage = f"usage: {' '.join([self.prog, *arguments])} [options] (each option: {self.prog} --help)\n"
        sys.stderr.write(usage)
        self.exit(self.get_default("bad_input_status") or 2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from ..workloads.formats import FORMATS

    names = sorted(FORMATS)
    writable = sorted(name for name, module in FORMATS.items() if hasattr(module, "write"))
    common = CommandParser(add_help=False)  # a parent of the subcommands' parsers, which are CommandParsers
    common.add_argument("--format", choices=names, help="the input's format (default: detected from its first line)")
    common.add_argument("--block-size", type=integer(1), metavar="N", help="tokens per Mooncake hash id (default 512)")

    parser = CommandParser(prog="llmreplay", description="Replay LLM serving workloads; check and convert them.")
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", parents=[common], help="check workload files; exit 1 if any is bad")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(run=cmd_validate)
    inspect = commands.add_parser("inspect", parents=[common], help="print a workload's figures")
    inspect.add_argument("file", metavar="FILE")
    inspect.add_argument(
        "--token-block-size",
        type=integer(1),
        default=16,
        metavar="N",
        help="block size for the reusable-prefix share of token-id prompts (default 16, vLLM's)",
    )
    inspect.set_defaults(run=cmd_inspect)
    convert = commands.add_parser("convert", parents=[common], help="rewrite a workload in another format")
    convert.add_argument("input", metavar="IN")
    convert.add_argument("output", metavar="OUT")
    convert.add_argument("--to", required=True, choices=writable, help="the output format")
    convert.add_argument(
        "--allow-loss",
        action="store_true",
        help="convert even when the target drops something (arrival times, token ids, ...); what is dropped is printed",
    )
    convert.set_defaults(run=cmd_convert)
    add_run_parser(commands, common)
    add_sim_parser(commands)
    add_calibrate_parser(commands)
    add_compare_parser(commands)
    add_sweep_parser(commands, common)
    add_history_parser(commands)
    add_dashboard_parser(commands)
    for command in commands.choices.values():
        command.set_defaults(option_names=option_names(command), parser=command)
    return parser


def option_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each setting ``parser`` takes, by the library's name for it (the option's destination,
    e.g. ``duration_s``), with its long option (``--duration``)."""
    return {action.dest: max(action.option_strings, key=len) for action in parser._actions if action.option_strings}


_SETTING_AT_START = re.compile(r"[a-z][a-z0-9_]*(?:/[a-z][a-z0-9_]*)*(?=: )")
_SETTING_HINT = re.compile(r"(?<![\w./?&=-])([a-z][a-z0-9_]*)=(True\b|\w?)")


def spelled(text: str, names: dict[str, str]) -> str:
    """``text`` with the library's names of settings (the keys of ``names``) spelled as the
    options of the command the user typed: a leading ``duration_s: ...`` becomes
    ``--duration: ...`` (``max_requests/max_sessions: ...``, ``--max-requests/--max-sessions: ...``), and a hint ``name it with format=`` or ``load with block_size=16``
    becomes ``name it with --format`` or ``load with --block-size 16`` (``allow_loss=True``, a
    flag's: ``--allow-loss``). Other words are kept."""
    head = _SETTING_AT_START.match(text)
    if head and all(name in names for name in head.group(0).split("/")):
        text = "/".join(names[name] for name in head.group(0).split("/")) + text[head.end() :]

    def option(match: re.Match[str]) -> str:
        name, value = match.groups()
        if name not in names:
            return match.group(0)
        return f"{names[name]} {value}" if value and value != "True" else names[name]

    return _SETTING_HINT.sub(option, text)


def main(argv: Sequence[str] | None = None) -> int:
    single_threaded_blas()  # first: building the parser loads numpy
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # the command's error, not the top parser's: its status, its usage line
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with reader_tolerant_stdout():  # `llmreplay run ... | head` still writes --out
            return args.run(args)
    except LLMReplayError as exc:
        print(f"error: {spelled(str(exc), args.option_names)}", file=sys.stderr)
        return getattr(args, "bad_input_status", 1)
    except KeyboardInterrupt:  # before a run started, or a second Ctrl-C during one
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
