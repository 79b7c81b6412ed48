"""What several ``llmreplay`` commands share: the workload loader behind ``--format`` and
``--block-size``, the store behind ``--save-to``/``--store`` and the folder or file behind
``--out``, checked before anything is measured (errors name the option), argparse
value types (checked while parsing, so a bad value is a usage error naming the option: status 2,
or the command's bad-input status, see cli/main.py), the engine options of ``sim`` and ``calibrate`` (vLLM's names), and the check of ``run``'s and
``sweep``'s ``--band``."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError

# the exit status of bad input and bad usage (cli.CommandParser) of the commands whose statuses
# CI scripts read (run, compare, sweep, calibrate, history): apart from each one's 1 and 2
BAD_INPUT = 3
MIN_BAND_DRAWS = 10  # --band: the 10th-90th percentile of fewer draws is their extremes


def workload_options(args: argparse.Namespace, path: str) -> dict[str, Any]:
    """The options ``path``'s loader takes from the command line: ``--block-size`` goes only to
    formats that take one (``validate --block-size 16 *.jsonl`` checks a mix), with a warning for
    the others."""
    from ..workloads.formats import detect_format, loader_options

    options: dict[str, Any] = {}
    if args.block_size is not None:
        name = args.format or detect_format(path)
        if "block_size" in loader_options(name):
            options["block_size"] = args.block_size
        else:
            print(
                f"warning: {path}: --block-size does not apply to format {name!r} (only to hash-id traces: mooncake); ignored",
                file=sys.stderr,
            )
    return options


def load_workload_file(args: argparse.Namespace, path: str, options: dict[str, Any] | None = None):
    """``path`` loaded with ``--format`` and ``options`` (None: :func:`workload_options`'). An
    error of a file read with ``--format`` says so (the format may be the mistake)."""
    from ..workloads.formats import load_workload

    if options is None:
        options = workload_options(args, path)
    try:
        return load_workload(path, format=args.format, **options)
    except LLMReplayError as exc:
        if args.format is None:
            raise
        raise LLMReplayError(f"{exc} (read as {args.format!r}, as --format says)") from None


def open_store_option(option: str, text: str, writing: bool) -> Any:
    """The store ``text`` names, checked (see :mod:`~pytest_llmreplay.gate.store`); errors name ``option``.
    A store only read (not ``writing``: ``compare --store``, ``history --baseline-dir``) must hold
    some result (:meth:`~pytest_llmreplay.gate.store.Store.nothing_stored`): a mistyped folder, ref
    or prefix says so, not that it holds no result of the test. One
    written to needs a repository git can read (:func:`~pytest_llmreplay.gate.git.check_git_readable`)."""
    from ..gate.git import check_git_readable
    from ..gate.store import refuse_empty
    from ..gate.store_url import open_store

    if writing:  # a result stored as 'nogit' no comparison would find
        check_git_readable(Path.cwd(), option)
    try:
        store = open_store(text, Path.cwd())
        store.check(writing)
        empty = None if writing else store.nothing_stored()
        if empty:
            raise refuse_empty(empty, store.similar())
    except LLMReplayError as exc:
        raise LLMReplayError(f"{option}: {exc}") from None
    return store


def out_folder_option(option: str, text: str | None, contents: str, files: tuple[str, ...] = ()) -> Path | None:
    """The folder ``text`` names for ``contents`` (``run --out DIR``), made now, before anything
    is measured; None when the option was not given. An empty value, a file there, a folder
    that cannot be made or written, or one already holding one of ``files`` (an earlier run's
    result.json: a second run into the folder replaced it without a word) is an
    :class:`LLMReplayError` naming ``option``."""
    from ..gate.store import make_folder

    if text is None:
        return None
    if not text.strip():
        raise LLMReplayError(f"{option}: empty; expected a folder for {contents}")
    held = [name for name in files if (Path(text) / name).exists()]
    if held:
        raise LLMReplayError(
            f"{option} {text}: holds {' and '.join(held)} of an earlier run, which this one would replace; "
            "name another folder, or remove those files first"
        )
    try:
        make_folder(Path(text), contents)
    except LLMReplayError as exc:
        raise LLMReplayError(f"{option}: {exc}") from None
    return Path(text)


def out_file_option(option: str, text: str, contents: str) -> Path:
    """The file ``text`` names for ``contents`` (``calibrate --out FILE``), checked before
    anything is measured: its folder is made as :func:`out_folder_option` makes one. An empty
    value, a folder, a file that cannot be replaced or a folder that cannot be made or written
    is an :class:`LLMReplayError` naming ``option``."""
    if not text.strip():
        raise LLMReplayError(f"{option}: empty; expected a file for {contents}")
    path = Path(text)
    if path.is_dir():
        raise LLMReplayError(f"{option}: {path} is a folder; expected a file for {contents}")
    if path.exists() and not os.access(path, os.W_OK):
        raise LLMReplayError(f"{option}: {path} is not writable")
    out_folder_option(option, str(path.parent), contents)
    return path


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name.strip()):
        raise LLMReplayError(
            f"--header: expected NAME:VALUE with a NAME of letters, digits and !#$%&'*+-.^_`|~, got {text!r}"
        )
    return name.strip(), value.strip()


def integer(low: int) -> Any:
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


def number(positive: bool) -> Any:
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


def share(text: str) -> float:
    """An argparse type: a share from 0 to 1, a fraction (0.05) or a percentage (5%), its number
    and unit read as an ``error_rate`` SLO's are (``==``: the SLO's refusal of a bound no run can
    fail, ``<= 1``, is no concern of an option whose 1 means "any share")."""
    from ..metrics.slo import parse_slo

    try:
        value = parse_slo("error_rate", f"== {text}").value
    except LLMReplayError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1 such as 0.05 or 5%, got {text!r}")
    return value


def add_request_options(group: Any) -> None:
    """What ``run`` and ``sweep`` send with every request: ``--prompt-format``, ``--tool-calls``,
    ``--header``, ``--extra-body``, ``--ignore-eos``, ``--timeout``."""
    from ..replayer.plan import PROMPT_FORMATS

    group.add_argument(
        "--prompt-format", choices=PROMPT_FORMATS, help="completions prompts as text or token ids (default text)"
    )
    group.add_argument(
        "--tool-calls",
        action="store_true",
        help="chat: a turn that ends in a tool call (an agent trace's turns but the last) asks for one, and the next sends it back with the tool's output",
    )
    group.add_argument(
        "--header", action="append", default=[], metavar="NAME:VALUE", help="extra HTTP header (repeatable)"
    )
    group.add_argument(
        "--extra-body", metavar="JSON", help="fields merged into every request body, e.g. '{\"min_tokens\": 64}'"
    )
    group.add_argument(
        "--ignore-eos",
        action="store_true",
        help="send ignore_eos: true (output lengths exactly as planned, vLLM/SGLang)",
    )
    group.add_argument(
        "--timeout",
        type=number(True),
        default=600.0,
        metavar="S",
        help="fail a request after S seconds without data (default 600)",
    )


# what only an HTTP endpoint reads: with --sim (the simulator in process) these are ignored
HTTP_ONLY_OPTIONS = (
    "no_cache_reset",
    "model",
    "api",
    "api_key_env",
    "header",
    "no_stream",
    "timeout",
    "server_timeout",
    "metrics_interval",
    "no_idle_check",
)


def remember_http_only_defaults(parser: argparse.ArgumentParser) -> None:
    """Keep the defaults of the :data:`HTTP_ONLY_OPTIONS` that ``parser`` takes, for
    :func:`ignored_with_sim` to tell which ones were given."""
    dests = {action.dest for action in parser._actions}
    parser.set_defaults(
        http_only_defaults={dest: parser.get_default(dest) for dest in HTTP_ONLY_OPTIONS if dest in dests}
    )


def ignored_with_sim(args: argparse.Namespace) -> str | None:
    """With ``--sim``, one warning line naming the HTTP-only options given a value other than
    their default (the in-process simulator reads none of them); None when there are none."""
    given = [
        args.option_names[dest] for dest, default in args.http_only_defaults.items() if getattr(args, dest) != default
    ]
    if not args.sim or not given:
        return None
    return f"warning: {', '.join(given)}: ignored with --sim (the simulator runs in process; these options are for an HTTP --endpoint)"


ENGINE_OPTIONS = ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens")


def add_engine_options(group: Any, *defaults: str) -> None:
    """--block-size, --num-gpu-blocks, --max-num-seqs, --max-num-batched-tokens (vLLM's names)."""
    helps = ("KV block size", "KV blocks per engine", "running requests at most", "tokens per iteration at most")
    for key, text, default in zip(ENGINE_OPTIONS, helps, defaults, strict=True):
        group.add_argument("--" + key.replace("_", "-"), type=int, metavar="N", help=f"{text} (default: {default})")


def engine_overrides(args: argparse.Namespace) -> dict[str, int]:
    """The engine options given on the command line, each an integer >= 1 (``--num-gpu-blocks``
    at most :data:`~pytest_llmreplay.sim.engine.MAX_GPU_BLOCKS`)."""
    from ..sim.engine import MAX_GPU_BLOCKS

    given = {key: getattr(args, key) for key in ENGINE_OPTIONS if getattr(args, key) is not None}
    for key, value in given.items():
        if value < 1:
            raise LLMReplayError(f"--{key.replace('_', '-')}: expected an integer >= 1, got {value}")
        if key == "num_gpu_blocks" and value > MAX_GPU_BLOCKS:
            raise LLMReplayError(
                f"--num-gpu-blocks: expected at most {MAX_GPU_BLOCKS:,} (the simulator keeps per-block state in memory), got {value:,}"
            )
    return given


def check_band(draws: int, sim: Any) -> None:
    """Refuse a ``--band`` (``run``'s and ``sweep``'s) that cannot run, before anything is
    replayed: no ``--sim`` (``sim``, the offline target, None), fewer than
    :data:`MIN_BAND_DRAWS` draws, a profile without uncertain parameters."""
    if sim is None:
        raise LLMReplayError("--band: draws a simulator profile's uncertain parameters; give --sim PROFILE")
    if draws < MIN_BAND_DRAWS:
        raise LLMReplayError(
            f"--band: expected at least {MIN_BAND_DRAWS} draws (the 10th and 90th percentiles of fewer are the "
            f"extremes of a handful; 20 or more give a steadier band), got {draws}"
        )
    if not sim.profile.uncertainty:
        raise LLMReplayError(
            f'--band: profile {sim.profile.name!r} states no uncertain parameters (its "uncertainty" section: '
            "each parameter's range and source, docs/simulator.md#error-band)"
        )
