"""The session's report files (``--llm-report DIR``), written by the controller at the end.

Each perf test's process writes ``DIR/tests/<test>.json`` (the stored result, plus the
comparison and the baseline's samples when compared) and ``DIR/tests/<test>.csv`` (one row per
request). From the JSON files this module writes:

- ``DIR/summary.md``: one row per test (the outcome, requests, TTFT p50/p99, TPOT p50, TTFAT p90, cache hit
  rate, output throughput, SLOs met, regressions), then each test's headline (with the server),
  SLO table with margins and comparison with intervals (:mod:`~pytest_llmreplay.report.rows`);
- ``DIR/index.html``: the same with CDF plots, one self-contained page
  (:mod:`~pytest_llmreplay.report.html`, plots by :mod:`~pytest_llmreplay.report.plots`).

The same Markdown, with or without ``--llm-report`` (:func:`write_summaries`), goes to
``--llm-summary-md PATH`` and is appended to ``$GITHUB_STEP_SUMMARY`` when GitHub Actions sets it,
cut to fit what is left of GitHub's :data:`STEP_SUMMARY_LIMIT` (:func:`fit_to`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from .rows import (
    ALL_JUDGED,
    SLO_HEADERS,
    NotJudged,
    capacity_in,
    comparison_rows,
    endpoint_text,
    headline,
    mark_test_outcomes,
    overview_headers,
    overview_row,
    reasoning_in,
    session_title,
    slo_rows,
)

STEP_SUMMARY_LIMIT = 1024 * 1024  # bytes: GitHub refuses a step's summary file larger than 1 MiB


def read_results(records_dir: Path) -> dict[Path, dict[str, Any]]:
    """Every test's report record in ``records_dir`` (one JSON file each) by its file, in test id order."""
    found = {path: json.loads(path.read_text(encoding="utf-8")) for path in records_dir.glob("*.json")}
    return dict(sorted(found.items(), key=lambda item: item[1]["test"]))


def keep_test_outcomes(results: Mapping[Path, Mapping[str, Any]]) -> None:
    """Rewrite each record file whose record now has ``test_outcome`` (pytest's outcome, known only
    after its process wrote the file), through a temporary file beside it: what
    ``DIR/tests/<test>.json`` says of a test is what the session's summary says."""
    from ..gate.store import encode

    for path, record in results.items():
        if "test_outcome" in record:
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temporary.write_bytes(encode(record))
            os.replace(temporary, path)


def markdown(results: Sequence[Mapping[str, Any]], not_judged: NotJudged = ALL_JUDGED) -> str:
    """summary.md: its title (:func:`~pytest_llmreplay.report.rows.session_title`) and the line
    naming the tests ``not_judged`` when there are any, the summary table, then per test its
    headline, the endpoint it measured (the fingerprint's words), SLO table and comparison.
    Every text from a result (a test id, a workload path in a message, a comparison's header)
    goes through :func:`markdown_text`: GitHub renders HTML in a step summary, as index.html
    would if it did not escape it."""
    from ..gate.comparison_table import COMPARISON_HEADERS

    lines = [
        f"## {markdown_text(session_title(len(results), not_judged))}",
        *(part for line in not_judged.line().splitlines() for part in ("", f"**{markdown_text(line)}**")),
        "",
        _table(
            [overview_row(r, reasoning_in(results), capacity_in(results)) for r in results], overview_headers(results)
        ),
    ]
    for record in results:
        lines += ["", f"### {markdown_text(record['test'])}", "", f"**{markdown_text(headline(record).text())}**"]
        lines += ["", f"Endpoint: {markdown_text(endpoint_text(record.get('fingerprint')))}"]
        rows = slo_rows(record)
        if rows:
            lines += ["", "**SLOs**", "", _table(rows, SLO_HEADERS)]
        comparison = record.get("comparison")
        if comparison:
            lines += ["", f"**Compared with {markdown_text(comparison['baseline'])}**", ""]
            if comparison.get("header"):
                lines += [markdown_text(comparison["header"]), ""]
            lines.append(
                markdown_text(comparison["mismatch"])
                if comparison.get("mismatch")
                else _table(comparison_rows(comparison), COMPARISON_HEADERS)
            )
            if comparison.get("unstable"):
                lines += ["", f"**UNSTABLE**: {markdown_text(comparison['unstable'])}"]
    return "\n".join(lines) + "\n"


_MARKUP = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?\w+;)|[*\[\]`]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_ESCAPES = {"<": "&lt;", "&": "&amp;", "*": "\\*", "[": "\\[", "]": "\\]", "`": "\\`", "_": "\\_"}


def markdown_text(text: str) -> str:
    """``text`` read as plain text in GitHub-flavoured Markdown: a ``<`` that would open an HTML
    tag, comment or autolink is written ``&lt;``, an ``&`` that would start an entity ``&amp;``;
    a ``*`` (emphasis; a masked secret's ``***``), ``[`` and ``]`` (a link or an image: a test
    parameter ``see](https://...)``), a backtick (code) and a ``_`` that could open or close
    emphasis (one not between two letters or digits: ``[__init__]``) get a backslash; every
    other character stays as it is, so ``ttft.p99 < 20ms`` and ``test_chat`` read the same in the file."""
    return _MARKUP.sub(lambda found: _ESCAPES[found.group()], text)


def _table(rows: list[list[Any]], headers: Sequence[str]) -> str:
    """A GitHub Markdown table of ``rows``, each text cell through :func:`markdown_text` and its
    ``|`` written ``\\|`` (else it would end the cell: a test id ``test_x[a|b]``)."""
    from tabulate import tabulate

    return tabulate(
        [[markdown_text(cell).replace("|", "\\|") if isinstance(cell, str) else cell for cell in row] for row in rows],
        headers=headers,
        tablefmt="github",
    )


OWNER_MARK = ".llmreplay-report"  # in a report folder: this plugin made it, and may clear it


def claim_report_dir(report_dir: Path) -> None:
    """Make ``report_dir`` this session's, emptied of what an earlier session wrote, so it only
    ever describes one session; raise :class:`LLMReplayError` for a folder that cannot be.

    Only a folder this plugin made (it holds :data:`OWNER_MARK`), an empty one or a new one is
    taken; only the files this module, the gate and the declared servers write are removed
    (``tests/*.json``, ``tests/*.csv``, ``summary.md``, ``index.html``, ``servers/**/*.log``). A
    folder holding anything else is refused: its ``summary.md`` or ``index.html`` may be someone
    else's. Called by the controller alone, before any worker starts a server."""
    from ..gate.store import make_folder

    make_folder(report_dir, "the reports")
    if any(report_dir.iterdir()) and not (report_dir / OWNER_MARK).is_file():
        raise LLMReplayError(
            f"{report_dir} already holds files that pytest-llmreplay did not write; name a new or empty folder "
            f"(the plugin empties its report folder at each session, and only one it made, marked by {OWNER_MARK})"
        )
    try:
        (report_dir / "tests").mkdir(exist_ok=True)
        (report_dir / OWNER_MARK).write_text(
            "This folder holds pytest-llmreplay's reports; each session replaces them.\n", encoding="utf-8"
        )
        for stale in [
            *(report_dir / "tests").glob("*.json"),
            *(report_dir / "tests").glob("*.csv"),
            report_dir / "summary.md",
            report_dir / "index.html",
            *(report_dir / "servers").rglob("*.log"),  # an earlier session's servers' logs, appended to otherwise
        ]:
            stale.unlink(missing_ok=True)
    except OSError as exc:
        raise LLMReplayError(f"cannot write reports to {report_dir}: {exc.strerror or exc}") from None


def write_session_reports(
    records_dir: Path,
    report_dir: Path | None,
    summary_path: Path | None,
    not_judged: NotJudged = ALL_JUDGED,
    outcomes: Mapping[str, str] | None = None,
) -> tuple[list[Path], str | None]:
    """From the tests' records in ``records_dir`` (nothing when no perf test ran), read and made
    into Markdown once: with ``report_dir``, its summary.md and index.html; the Markdown summary
    to ``summary_path`` and ``$GITHUB_STEP_SUMMARY`` (:func:`write_summaries`). The tests
    ``not_judged`` are named under the title, and their results headed NOT JUDGED; ``outcomes``
    (test id -> pytest's outcome) head each result as pytest judged its test
    (:func:`~.rows.mark_test_outcomes`). The files written, and why a summary could not be
    written (None when it could)."""
    by_file = read_results(records_dir)
    if not by_file and not not_judged.errors:  # no perf test ran (every one errored: said all the same)
        return [], None
    results = list(by_file.values())
    mark_test_outcomes(results, outcomes or {})
    if report_dir is not None:
        keep_test_outcomes(by_file)
    not_judged.mark(results)
    text = markdown(results, not_judged)
    written = []
    if report_dir is not None:
        from .html import html_page

        written = [report_dir / "summary.md", report_dir / "index.html"]
        written[0].write_text(text, encoding="utf-8")
        written[1].write_text(html_page(results, not_judged), encoding="utf-8")
    try:
        return written + write_summaries(text, summary_path), None
    except LLMReplayError as exc:
        return written, str(exc)


def write_summaries(text: str, summary_path: Path | None) -> list[Path]:
    """The Markdown summary ``text``, written whole to ``summary_path`` (its folders made) and
    appended to ``$GITHUB_STEP_SUMMARY`` when set, cut to the room left there; the files written
    whole. A file that cannot be written is an :class:`LLMReplayError` naming it."""
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path is not None:
        try:
            summary_path.parent.mkdir(parents=True, exist_ok=True)
            summary_path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise LLMReplayError(f"--llm-summary-md {summary_path}: cannot write it: {exc.strerror or exc}") from None
    if step_summary:
        path = Path(step_summary)
        try:
            used = path.stat().st_size if path.exists() else 0
            with open(path, "a", encoding="utf-8") as stream:
                stream.write(fit_to(text, STEP_SUMMARY_LIMIT - used))
        except OSError as exc:
            raise LLMReplayError(f"$GITHUB_STEP_SUMMARY {path}: cannot append to it: {exc.strerror or exc}") from None
    return [summary_path] if summary_path is not None else []


def fit_to(text: str, room: int) -> str:
    """``text`` when its UTF-8 size is at most ``room`` bytes; else its first whole lines and, after
    a blank line (which ends a Markdown table), one line saying how many lines were cut and where
    the whole summary is, all within ``room``; empty when not even that line fits."""
    if len(text.encode()) <= room:
        return text
    lines = text.splitlines(keepends=True)

    def cut_line(cut: int) -> str:
        return (
            f"\n_{cut} more line{'s' if cut != 1 else ''} of this summary cut here, to stay under GitHub's "
            f"{STEP_SUMMARY_LIMIT // 1024} KiB step-summary limit: the whole of it is in --llm-summary-md or "
            "--llm-report's summary.md._\n"
        )

    budget = room - len(cut_line(len(lines)).encode())  # the longest count: the line never outgrows it
    if budget < 0:
        return ""
    kept, size = 0, 0
    for line in lines:
        size += len(line.encode())
        if size > budget:
            break
        kept += 1
    return "".join(lines[:kept]) + cut_line(len(lines) - kept)
