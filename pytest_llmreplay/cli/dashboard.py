"""``llmreplay dashboard``: the static results site over a store (:mod:`~pytest_llmreplay.dashboard`).

    llmreplay dashboard --baseline-dir STORE --out DIR [--ref REF] [--commit-url TEMPLATE]
                        [--depth N] [--recent N] [--workers N]

Writes (or updates: only what changed is read and written) the site in ``--out``: an index of
every test in the store along the first-parent history of ``--ref``, and a page per test with
each gated figure over commits. It needs the ``[dashboard]`` extra (Plotly.js) and the
``[history]`` extra (change points); without them, one line naming them before anything is read.
Bad input (a store that cannot be read, a ``--ref`` git cannot walk, an ``--out`` that holds
other files, a ``--commit-url`` without ``{commit}``) is one ``error:`` line and exit status 3
(:data:`~pytest_llmreplay.cli.options.BAD_INPUT`). cli/main.py registers the command with
:func:`add_dashboard_parser`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from .options import BAD_INPUT, integer, open_store_option


def cmd_dashboard(args: argparse.Namespace) -> int:
    from ..dashboard.assets import plotly_js
    from ..dashboard.build import build_dashboard
    from ..dashboard.cache import default_workers
    from ..dashboard.changes import require_otava

    if args.commit_url is not None and "{commit}" not in args.commit_url:
        raise LLMReplayError(
            f"--commit-url {args.commit_url!r}: expected a template with {{commit}}, e.g. https://github.com/ORG/REPO/commit/{{commit}}"
        )
    if not args.out.strip():
        raise LLMReplayError("--out: empty; expected a folder for the dashboard")
    plotly_js()
    require_otava()  # without the [history] extra: one line naming it, before anything is read
    store = open_store_option("--baseline-dir", args.baseline_dir, False)
    built = build_dashboard(
        store,
        Path(args.out),
        Path.cwd(),
        args.ref,
        commit_url=args.commit_url,
        depth=args.depth,
        recent=args.recent,
        workers=args.workers or default_workers(),
    )
    print("\n".join(built.summary()))
    return 0


def add_dashboard_parser(commands: Any) -> None:
    from ..dashboard import DEFAULT_DEPTH, DEFAULT_RECENT

    dashboard = commands.add_parser(
        "dashboard",
        help="a static site of every test's stored figures over commits",
        description="Write (or update) a static site in --out, readable from file:// or any static host: an index "
        "of every test in the store, each with its latest verdict, SLO margins and a small line per gated figure "
        "(tests that moved in the last --recent commits first), and a page per test with each figure over the "
        "first-parent history of --ref, change points marked and flagged, SLO thresholds drawn, and the lines of "
        "several endpoints or server configs side by side. Needs pip install 'pytest-llmreplay[dashboard]' (Plotly.js and Otava's change points).",
    )
    dashboard.add_argument(
        "--baseline-dir",
        default=".llmreplay",
        metavar="STORE",
        help="the store: a folder, git:REMOTE#REF or an fsspec URL, as --llm-baseline-dir (default .llmreplay)",
    )
    dashboard.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="the site's folder: new, empty, or one an earlier build wrote (it is updated)",
    )
    dashboard.add_argument(
        "--ref", default="HEAD", metavar="REF", help="whose first-parent history to draw (default HEAD)"
    )
    dashboard.add_argument(
        "--commit-url",
        metavar="TEMPLATE",
        help="where a click on a point goes, {commit} standing for the commit id, e.g. "
        "https://github.com/ORG/REPO/commit/{commit} (default: no link)",
    )
    dashboard.add_argument(
        "--depth",
        type=integer(1),
        default=DEFAULT_DEPTH,
        metavar="N",
        help=f"draw the newest N commits of the history (default {DEFAULT_DEPTH})",
    )
    dashboard.add_argument(
        "--recent",
        type=integer(1),
        default=DEFAULT_RECENT,
        metavar="N",
        help=f"a change point or regression in the newest N commits puts a test first (default {DEFAULT_RECENT})",
    )
    dashboard.add_argument(
        "--workers",
        type=integer(1),
        metavar="N",
        help="processes that read the results of a first build (thousands of new results) and threads that "
        "compare the latest verdicts of lines with new results (default: the cores this process may use, at most "
        "8; 1: this thread alone)",
    )
    dashboard.set_defaults(run=cmd_dashboard, bad_input_status=BAD_INPUT)
