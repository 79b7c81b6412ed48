"""``llmreplay history``: a test's stored figures per commit, with change points
(:mod:`~pytest_llmreplay.gate.history`).

    llmreplay history TEST [--metric ttft.p50 ...] [--baseline-dir DIR|git:REMOTE#REF|URL] [--ref HEAD]

Prints, for each gated figure (or each ``--metric``, a key as an SLO names it), the test's
stored results along the first-parent history of ``--ref``, oldest first, one row per result in
the figure's unit, and the change points Apache Otava's e-divisive finds (the level before and
after each). Needs the ``[history]`` extra; without it, one line naming it, before anything
else. Stored files that cannot be read are skipped and named (at most five, then how many more);
when none could be read, that is the error. Bad input (an unknown ``--metric``, a store folder
that does not exist, no readable stored result, an empty ``TEST``, no extra) is one ``error:`` line and exit status 3 (:data:`~pytest_llmreplay.cli.options.BAD_INPUT`), as
``run``'s. cli/main.py registers the command with :func:`add_history_parser`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from ..wording import counted, listed
from .options import BAD_INPUT, open_store_option

EXAMPLE_TEST = "tests/perf/test_chat.py::test_chat"


def cmd_history(args: argparse.Namespace) -> int:
    from ..gate.baseline import gated_tolerances
    from ..gate.git import reference_history
    from ..gate.history import History, alike, change_points, history_points
    from ..metrics.slo import parse_key

    change_points([])  # without the [history] extra: one line naming it, before anything is printed
    if not args.test.strip():
        raise LLMReplayError(f"TEST: empty; expected a test id as stored, e.g. {EXAMPLE_TEST}")
    store = open_store_option("--baseline-dir", args.baseline_dir, False)
    label, commits = reference_history(Path.cwd(), args.ref, "--ref")
    every = history_points(store, args.test, commits)
    if not every.points:
        if every.unreadable:
            raise LLMReplayError(
                f"{args.test}: no readable stored result on the first-parent history of {label}; {_unreadable(store, every.unreadable)}"
            )
        raise LLMReplayError(f"{args.test}: no stored result in {store.label} on the first-parent history of {label}")
    # the newest result's series: results of another endpoint, workload or settings are never one line with it
    newest = every.points[-1][1]
    history = History([(commit, record) for commit, record in every.points if alike(newest, record)], every.unreadable)
    others = len(every.points) - len(history.points)
    keys = args.metric or list(gated_tolerances(newest))  # what the newest result is gated on
    # a key as an SLO key is read (error_rate alone is its value); a plugin's metric is one the results hold
    stored = {metric for _, record in history.points for metric in record.get("summary") or {}}
    figures = {key: ".".join(parse_key(key, f"--metric {key!r}", stored)) for key in keys}
    print(
        f"{args.test}: {counted(len(history.points), 'stored result')} on the first-parent history of {label}, oldest first"
        + (
            f"; {others} of another endpoint, workload, settings or run count than the newest left out "
            "(llmreplay dashboard draws each as its own line)"
            if others
            else ""
        )
    )
    if history.unreadable:
        print(f"skipped: {_unreadable(store, history.unreadable)}")
    for key, figure in figures.items():
        print("\n" + _series_table(history, key, figure))
    return 0


def _unreadable(store: Any, unreadable: dict[str, str]) -> str:
    """``N stored files in STORE could not be read: KEY, ... and N more (the newest: WHY)``, from
    :attr:`~pytest_llmreplay.gate.history.History.unreadable` (key -> why, newest first)."""
    keys = list(unreadable)
    why = unreadable[keys[0]].removeprefix(f"{store.label}/{keys[0]}: ")  # the why names the file: once is enough
    return f"{counted(len(keys), 'stored file')} in {store.label} could not be read: {listed(keys)} (the newest: {why})"


def _series_table(history: Any, key: str, figure: str) -> str:
    """``key``'s values per commit (``figure``: its ``metric.stat`` in the stored summaries) in
    its unit, oldest first, with a ``change point`` column (the level before and after) when
    Otava finds one; a line saying so when no stored result measured it."""
    from tabulate import tabulate

    from ..gate.history import MIN_CHANGE_POINT_RESULTS, level_means, metric_series
    from ..metrics.units import format_figure

    commits_of, values, points = metric_series(history, figure)
    if not values:
        return f"{key}: not measured"
    levels = level_means(values, points)
    rows = [[commit[:12], format_figure(figure, value)] for commit, value in zip(commits_of, values, strict=True)]
    for i in points:
        if levels[i - 1]:
            rows[i].append(
                f"level {format_figure(figure, levels[i - 1])} -> {format_figure(figure, levels[i])} ({levels[i] / levels[i - 1] - 1:+.1%})"
            )
    found = (
        f"change points at {', '.join(commits_of[i][:12] for i in points)}"
        if points
        else f"no change point looked for: {len(values)} results, too few ({MIN_CHANGE_POINT_RESULTS} at least)"
        if len(values) < MIN_CHANGE_POINT_RESULTS
        else "no change point"
    )
    headers = ["commit", key] + (["change point"] if any(len(row) > 2 for row in rows) else [])
    return f"{key}: {found}\n" + tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def add_history_parser(commands: Any) -> None:
    history = commands.add_parser(
        "history",
        help="a test's stored figures per commit, with change points",
        description="Print each gated figure of TEST's stored results per commit along the first-parent history "
        "of --ref (oldest first) and the change points Apache Otava's e-divisive finds in it "
        "(needs pip install 'pytest-llmreplay[history]').",
    )
    history.add_argument("test", metavar="TEST", help=f"the test id as stored, e.g. {EXAMPLE_TEST}")
    history.add_argument(
        "--metric",
        action="append",
        metavar="KEY",
        help="a figure as an SLO key names it, e.g. ttft.p50 or error_rate (repeatable; default: the gated ones)",
    )
    history.add_argument(
        "--baseline-dir",
        default=".llmreplay",
        metavar="STORE",
        help="the store: a folder, git:REMOTE#REF or an fsspec URL, as --llm-baseline-dir (default .llmreplay)",
    )
    history.add_argument(
        "--ref", default="HEAD", metavar="REF", help="whose first-parent history to walk (default HEAD)"
    )
    history.set_defaults(run=cmd_history, bad_input_status=BAD_INPUT)
