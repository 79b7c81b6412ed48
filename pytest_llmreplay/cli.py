"""``llmreplay``: the command line. It only wires the library together.

    llmreplay validate FILE...            check files; exit 1 with the first error of each bad one
    llmreplay inspect FILE                a table of the workload's figures
    llmreplay convert IN OUT --to FORMAT  rewrite a workload in another format

Common options: ``--format NAME`` (skip detection), ``--block-size N`` (tokens per Mooncake
hash id, default 512). Errors are one line on stderr, never a traceback; exit status 1 for bad
input, 2 for bad usage (argparse).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from .errors import LLMReplayError


def _load(args: argparse.Namespace, path: str):
    from .formats import load_workload

    options: dict[str, Any] = {}
    if args.block_size is not None:
        options["block_size"] = args.block_size
    return load_workload(path, format=args.format, **options)


def cmd_validate(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            workload = _load(args, path)
        except LLMReplayError as exc:
            print(f"error: {exc}", file=sys.stderr)
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
        print(f"note: dropped or changed: {note}", file=sys.stderr)
    print(f"wrote {args.output}: {args.to}, {len(workload.sessions):,} sessions, {workload.num_requests:,} requests")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .formats import FORMATS

    names = sorted(FORMATS)
    writable = sorted(name for name, module in FORMATS.items() if hasattr(module, "write"))
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--format", choices=names, help="the input's format (default: detected from its first line)")
    common.add_argument("--block-size", type=int, metavar="N", help="tokens per Mooncake hash id (default 512)")

    parser = argparse.ArgumentParser(prog="llmreplay", description="Replay LLM serving workloads; check and convert them.")
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", parents=[common], help="check workload files; exit 1 if any is bad")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(run=cmd_validate)
    inspect = commands.add_parser("inspect", parents=[common], help="print a workload's figures")
    inspect.add_argument("file", metavar="FILE")
    inspect.add_argument("--token-block-size", type=int, default=16, metavar="N",
                         help="block size for the reusable-prefix share of token-id prompts (default 16, vLLM's)")
    inspect.set_defaults(run=cmd_inspect)
    convert = commands.add_parser("convert", parents=[common], help="rewrite a workload in another format")
    convert.add_argument("input", metavar="IN")
    convert.add_argument("output", metavar="OUT")
    convert.add_argument("--to", required=True, choices=writable, help="the output format")
    convert.add_argument("--allow-loss", action="store_true",
                         help="convert even when the target drops something (arrival times, token ids, ...); what is dropped is printed")
    convert.set_defaults(run=cmd_convert)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except LLMReplayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
