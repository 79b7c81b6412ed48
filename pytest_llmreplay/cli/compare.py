"""``llmreplay compare A B``: two stored results (files, or with ``--store`` the newest result of
a test at two commits) compared metric by metric. With ``--store``, A is the newest result at its
commit measured as B was (endpoint, workload and settings: the plugin's gate takes its baseline
so), the newest of all only where none is, and the verdicts also come from
the test's history, as the plugin's gate does: the results stored on A's first-parent history
(A's own included, B's commit left out), through :func:`~pytest_llmreplay.gate.history.gate_with_history`
once there are enough of them. Exit status 0 no regression, 1 a regression, 2 not comparable
(a result file marked interrupted, which measured part of its workload, is compared and shown
but not judged: 2 too), 3 bad input (:data:`COMPARE_BAD_INPUT`), 4 unstable (:data:`COMPARE_UNSTABLE`)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from ..gate.store import result_folder
from ..report.rows import endpoint_text
from .options import BAD_INPUT, open_store_option


def _stored_side(
    store: Any, test: str, side: str, ref: str, like: dict[str, Any] | None = None
) -> tuple[dict[str, Any], str, str, str | None]:
    """(record, where, commit, its skipped line or None) of ``test``'s newest result at ``ref``
    that was not interrupted (``side`` A or B: a name git resolves here, or a commit id of 12 hex
    digits or more, which a store may hold from another clone); with ``like``, the newest that
    :func:`~pytest_llmreplay.gate.baseline.mismatch` finds alike, where there is one (another
    runner's result saved later at the same commit hides nobody's baseline)."""
    from ..gate.baseline import mismatch
    from ..gate.git import resolve_commit

    commit = resolve_commit(Path.cwd(), ref)
    if commit is None:
        if not re.fullmatch(r"[0-9a-f]{12,40}", ref):
            raise LLMReplayError(
                f"{side}: git cannot resolve {ref!r} to a commit here; expected a branch, tag or commit of this repository, or a commit id of 12 hex digits or more"
            )
        commit = ref
    alike = None if like is None else (lambda stored: mismatch(stored, like) is None)
    newest = store.newest_complete(test, [commit], alike)
    skipped = newest.skipped_line()
    if newest.record is None:
        only = (
            ": only ones that measured part or none of their workload (interrupted, or no request succeeded), "
            "which are never compared"
            if newest.partial
            else ""
        )
        if not newest.unreadable and not newest.partial and not store.names(result_folder(test)):
            # a store holding nothing was refused as it was opened (Store.nothing_stored)
            only = f"; it holds no result of that test, only of {', '.join(map(repr, store.tests()))}"
        readable = "readable " if skipped else ""
        raise LLMReplayError(
            f"--store: no {readable}stored result of {test!r} at {ref} ({commit[:12]}) in {store.label}{only}"
            + (f"; {skipped}" if skipped else "")
        )
    return newest.record, f"{store.label}/{newest.key}", commit, skipped or None


def _history(store: Any, test: str, commit: str, leave_out: str, current: dict[str, Any]) -> Any:
    """The results of ``test`` like ``current`` on ``commit``'s first-parent history, without
    ``leave_out`` (B's commit); only ``commit``'s own where git here does not know it."""
    from ..gate.git import reference_history
    from ..gate.history import HISTORY_WINDOW, history_points

    try:
        commits = reference_history(Path.cwd(), commit)[1]
    except LLMReplayError:  # not a checkout, or a commit of another clone
        commits = [commit]
    return history_points(store, test, [c for c in commits if c != leave_out], like=current, limit=HISTORY_WINDOW)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..gate.baseline import compare, gated_tolerances
    from ..gate.comparison_table import comparison_table
    from ..gate.history import gate_with_history
    from ..gate.stored_record import read_record

    overrides = _regression_overrides(args.regression)  # every option is checked before anything is read or printed
    if args.test and args.store is None:
        raise LLMReplayError(
            "--test is read with --store only (A and B are then commits); without --store, A and B are result files"
        )
    if args.store is not None:  # an empty one is refused by name
        if not args.test:
            raise LLMReplayError("--store needs --test: the stored test whose results to compare")
        store = open_store_option("--store", args.store, writing=False)
        current, _, current_commit, current_skipped = _stored_side(store, args.test, "B", args.current)
        baseline, source, commit, skipped = _stored_side(store, args.test, "A", args.baseline, like=current)
        for side, line in (("A", skipped), ("B", current_skipped)):
            if line:
                print(f"{side}: {line}")
        history = _history(store, args.test, commit, current_commit, current)
    else:
        baseline, current, source, history = read_record(args.baseline), read_record(args.current), args.baseline, None
    for name, record in (("A", baseline), ("B", current)):
        where = (
            f"commit {str(record.get('commit'))[:12]}{' (dirty)' if record.get('dirty') else ''}"
            if record.get("commit")
            else "no commit"
        )
        stopped = f", interrupted by {record['interrupted']}" if record.get("interrupted") else ""
        print(
            f"{name}: {record.get('test')}, {where}, {record.get('time')}{stopped}, endpoint: {endpoint_text(record['fingerprint'])}"
        )
    allowed = {**(current.get("regression") or {}), **overrides}  # the test's own (stored with B), then the options'
    comparison = compare(
        baseline, current, gated_tolerances(current, allowed, baseline), label=f"A ({source})", across_endpoints=True
    )
    if history is not None and comparison.mismatch is None:
        gate_with_history(comparison, current, history)
    print(comparison_table(comparison))
    if comparison.mismatch:
        return 2
    partial = [name for name, record in (("A", baseline), ("B", current)) if record.get("interrupted")]
    if partial:  # as the plugin's gate: shown, never judged
        print(
            f"not judged: {' and '.join(partial)} {'was' if len(partial) == 1 else 'were'} interrupted and measured "
            "part of the workload; the comparison is shown, its verdicts hold for no whole run (exit status 2: not comparable)"
        )
        return 2
    if comparison.regressions:  # under unstable, the ones no noise explains: a figure lost, requests lost
        return 1
    return COMPARE_UNSTABLE if comparison.unstable else 0


def _regression_overrides(texts: list[str]) -> dict[str, str]:
    """Each ``--regression KEY=ALLOWED`` as KEY -> ALLOWED, checked (key and value as
    :func:`baseline.tolerances` checks them; a key given twice is refused), for
    :func:`baseline.gated_tolerances` to apply to what the results compared gate."""
    from ..gate.baseline import tolerances

    overrides: dict[str, str] = {}
    for text in texts:
        key, sep, value = (part.strip() for part in text.partition("="))
        if not sep or not key:
            raise LLMReplayError(f"--regression: expected KEY=ALLOWED such as ttft.p50=10%, got {text!r}")
        if key in overrides:
            raise LLMReplayError(
                f"--regression: {key} is given twice ({overrides[key]!r} and {value!r}); expected each key once"
            )
        overrides[key] = value
    try:
        tolerances(overrides)
    except LLMReplayError as exc:  # its messages start "regression 'KEY': ..."
        raise LLMReplayError(f"--{exc}") from None
    return overrides


COMPARE_BAD_INPUT = BAD_INPUT  # bad usage included (cli.CommandParser): compare's 1 and 2 say what the comparison found
COMPARE_UNSTABLE = 4  # the runs of a side disagree too much for a verdict (gate/stability.py): neither 0 nor 1


def add_compare_parser(commands: Any) -> None:
    compare = commands.add_parser(
        "compare",
        help="compare two stored results (baselines, reports, run --out)",
        description="Compare stored result B against A, metric by metric, with bootstrap intervals. "
        "Different endpoints (vLLM against SGLang) on the same workload and settings may be compared; "
        "the header says so. Exit status: 0 no regression, 1 a regression, 2 not comparable (or a side interrupted: "
        "shown, not judged), 3 bad input, "
        "4 unstable (a side's runs disagree too much for a verdict).",
    )
    compare.add_argument(
        "baseline",
        metavar="A",
        help="the reference: a file under .llmreplay/, a report's tests/*.json, or run --out's result.json; with --store, a commit",
    )
    compare.add_argument("current", metavar="B", help="the result to judge against A (with --store, a commit)")
    compare.add_argument(
        "--store",
        metavar="STORE",
        help="read A and B from a store (a folder, git:REMOTE#REF or a URL such as s3://BUCKET/PREFIX): "
        "the newest result of --test at each commit (an id, or a branch or tag git resolves here), "
        "A's the newest measured as B's was (same endpoint, workload and settings) where there is one",
    )
    compare.add_argument(
        "--test",
        metavar="TEST",
        help="with --store: the test id, as stored (a pytest node id, or 'llmreplay run FILE')",
    )
    compare.add_argument(
        "--regression",
        action="append",
        default=[],
        metavar="KEY=ALLOWED",
        help="allowed change of a compared metric, e.g. ttft.p50=10%% or ttft.p90=off (repeatable)",
    )
    compare.set_defaults(run=cmd_compare, bad_input_status=COMPARE_BAD_INPUT)
