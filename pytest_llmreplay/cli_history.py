"""``llmreplay history``: a test's stored figures per commit, with change points
(:mod:`~pytest_llmreplay.history`).

    llmreplay history TEST [--metric ttft.p50 ...] [--baseline-dir DIR|git:REMOTE#REF|URL] [--ref HEAD]

Prints, for each gated figure (or each ``--metric``), the test's stored results along the
first-parent history of ``--ref``, oldest first, one row per result, and the change points
Apache Otava's e-divisive finds (the level before and after each). Needs the ``[history]``
extra; without it, one line naming it, before anything else. cli.py registers the command with
:func:`add_history_parser`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .cli_options import open_store_option
from .errors import LLMReplayError


def cmd_history(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from .baseline import DEFAULT_TOLERANCES, reference_history
    from .history import change_points, history_points, level_means, metric_series

    keys = args.metric or list(DEFAULT_TOLERANCES)
    for key in keys:
        metric, dot, stat = key.partition(".")
        if not (metric and dot and stat):
            raise LLMReplayError(f"--metric: expected METRIC.STAT such as ttft.p50, got {key!r}")
    change_points([])  # without the [history] extra: one line naming it, before anything is printed
    store = open_store_option("--baseline-dir", args.baseline_dir, False)
    try:
        label, commits = reference_history(Path.cwd(), args.ref)
    except LLMReplayError as exc:
        raise LLMReplayError(str(exc).replace("--llm-compare", "--ref")) from None
    history = history_points(store, args.test, commits)
    if not history.points:
        raise LLMReplayError(f"{args.test}: no stored result in {store.label} on the first-parent history of {label}")
    print(f"{args.test}: {len(history.points)} stored results on the first-parent history of {label}, oldest first"
          + (f"; {history.unreadable} unreadable file(s) skipped" if history.unreadable else ""))
    for key in keys:
        commits_of, values, points = metric_series(history, key)
        if not values:
            print(f"\n{key}: not measured")
            continue
        levels = level_means(values, points)
        rows = []
        for i, (commit, value) in enumerate(zip(commits_of, values)):
            step = f"change point: level {levels[i - 1]:.6g} -> {levels[i]:.6g} ({levels[i] / levels[i - 1] - 1:+.1%})" if i in points and levels[i - 1] else ""
            rows.append([commit[:12], f"{value:.6g}", step])
        found = ", ".join(commits_of[i][:12] for i in points) or "none"
        print(f"\n{key}: change points at {found}\n" + tabulate(rows, headers=["commit", key, ""], tablefmt="simple"))
    return 0


def add_history_parser(commands: Any) -> None:
    history = commands.add_parser("history", help="a test's stored figures per commit, with change points",
                                  description="Print each gated figure of TEST's stored results per commit along the first-parent history "
                                              "of --ref (oldest first) and the change points Apache Otava's e-divisive finds in it "
                                              "(needs pip install 'pytest-llmreplay[history]').")
    history.add_argument("test", metavar="TEST", help="the test id as stored, e.g. tests/perf/test_chat.py::test_chat")
    history.add_argument("--metric", action="append", metavar="KEY", help="METRIC.STAT to show (repeatable; default: the gated ones)")
    history.add_argument("--baseline-dir", default=".llmreplay", metavar="STORE",
                         help="the store: a folder, git:REMOTE#REF or an fsspec URL, as --llm-baseline-dir (default .llmreplay)")
    history.add_argument("--ref", default="HEAD", metavar="REF", help="whose first-parent history to walk (default HEAD)")
    history.set_defaults(run=cmd_history)
