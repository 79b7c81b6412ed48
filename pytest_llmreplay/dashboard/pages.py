"""The site's HTML: the index and one page per test. Each page carries its charts as Plotly
figures (:mod:`.charts`) in one JSON block, which ``assets/dashboard.js`` hands to Plotly.js;
the scripts and the style are the site's shared files in ``assets/`` (:mod:`.assets`).

**The index** (``index.html``): what was drawn (the store, the reference, how many commits,
tests and results), then a row per test in :mod:`.moved`'s order: the test (a link to its page),
each line's SLO outcome and margins and its latest verdict (:mod:`.verdicts`), what moved in the
last ``--recent`` commits (each change point there: figure, change, commit, how many commits
ago), and a sparkline per figure with its newest value.

**A test's page** (``tests/<test folder>.html``): each line's newest outcome, SLO table and
latest verdict, then a chart per figure (:func:`~.charts.figure_chart`): the gated ones first,
then those only an SLO names.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..metrics.units import format_figure
from ..report.rows import SLO_HEADERS, Headline
from ..wording import counted
from .charts import figure_chart, sparkline
from .commits import Commit
from .extract import outcome, point_slos
from .moved import Move, grouped
from .series import TestLines, ints

VERDICT_CLASSES = {"REGRESSION": "bad", "UNSTABLE": "bad", "no regression": "good"}


@dataclass
class Site:
    """What every page names: the ``store`` (in words) and ``reference`` (as given), the drawn ``commits``
    (oldest first), ``recent`` (how many of the newest commits count as recent) and
    ``commit_url`` (a template with ``{commit}``, or None)."""

    store: str
    reference: str
    commits: Sequence[Commit]
    recent: int
    commit_url: str | None = None

    @property
    def since(self) -> int:
        """The position of the oldest recent commit."""
        return max(0, len(self.commits) - self.recent)


@dataclass
class TestEntry:
    """A test as the pages show it: its lines, each line's latest verdict, its recent moves and
    :func:`~.moved.rank`."""

    lines: TestLines
    verdicts: list[Mapping[str, Any]]
    moves: list[Move] = field(default_factory=list)
    rank: str = "steady"

    @property
    def href(self) -> str:
        return f"tests/{self.lines.folder}.html"


def figure_keys(test: TestLines) -> list[str]:
    """The test's figures, gated ones first (each line's tolerance order), then SLO-only ones."""
    gated = [key for line in test.lines for key in line.facts["tolerances"] if key in line.series]
    others = [key for line in test.lines for key in line.series]
    return list(dict.fromkeys([*gated, *others]))


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element: every ``<``, ``>`` and ``&``
    written as its ``\\u`` escape (they occur only in strings), so that no text in it (``</script>``,
    a commit subject's ``<!--`` and ``<script``, which put the HTML parser in its double-escaped
    state and swallowed the page's own scripts) is read as markup."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(title: str, body: str, data: str, assets: str) -> str:
    """A whole page: ``body``, its charts' ``data`` (:func:`script_json`), the shared style and
    scripts under ``assets``."""
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="stylesheet" href="{assets}dashboard.css"></head>\n<body>\n{body}\n'
        f'<script type="application/json" id="page-data">{data}</script>\n'
        f'<script src="{assets}plotly.min.js"></script>\n<script src="{assets}dashboard.js"></script>\n'
        "</body></html>\n"
    )


def verdict_html(verdict: Mapping[str, Any]) -> str:
    cell = str(verdict["cell"])
    css = next((c for prefix, c in VERDICT_CLASSES.items() if cell.startswith(prefix)), "")
    against = verdict.get("against")
    vs = f" <span class=muted>vs {html.escape(against.rsplit('/', 1)[1][:12])}</span>" if against else ""
    return f'<span class="{css}">{html.escape(cell)}</span>{vs}'


def headline_html(line: Headline) -> str:
    css = {"PASS": "good", "FAIL": "bad"}.get(line.status, "")
    parts = [html.escape(part) for part in (line.failed, line.slos, line.closest) if part]
    return f'<span class="status {css}">{html.escape(line.status)}</span> · ' + " · ".join(parts)


def figure_name(key: str) -> str:
    """A figure as an SLO names it: ``error_rate`` for ``error_rate.value``."""
    return key.removesuffix(".value")


def short_label(label: str) -> str:
    """A line's label up to its first comma (``sim_profile llama-3.1-8b-h200``)."""
    return label.split(", ", 1)[0]


def moved_html(moves: Sequence[Move], site: Site) -> str:
    """One item per :func:`~.moved.grouped` group: its figures and changes, flag, commit, how long ago."""
    first = moves[0]
    ago = len(site.commits) - 1 - first.position
    changes = ", ".join(
        f"{html.escape(figure_name(m.key))} {f'{m.change:+.1%}' if m.change is not None else 'from 0'}" for m in moves
    )
    css = {"regression": "bad", "improved": "good"}.get(first.flag, "")
    who = f" <span class=muted>({html.escape(short_label(first.label))})</span>" if first.label != "results" else ""
    return (
        f'<li><span class="{css}">{first.flag}</span> at {html.escape(site.commits[first.position].id[:7])} '
        f"({counted(ago, 'commit')} ago){who}: {changes}</li>"
    )


def index_row(entry: TestEntry, site: Site, charts: dict[str, Any]) -> str:
    test = entry.lines
    states = []
    for line, verdict in zip(test.lines, entry.verdicts, strict=True):
        label = f'<div class="label">{html.escape(short_label(line.label))}</div>' if len(test.lines) > 1 else ""
        head, rows = outcome(line.newest.figures)
        margins = "".join(
            f"<li>{html.escape(key)} {html.escape(measured)} vs {html.escape(threshold)}: "
            f'<span class="{"good" if status == "ok" else "bad"}">{html.escape(margin or status)}</span></li>'
            for key, threshold, measured, margin, status in rows
        )
        states.append(
            f'<div class="state">{label}<div>{headline_html(head)}</div>'
            f"<div>latest verdict: {verdict_html(verdict)}</div>"
            + (f'<ul class="margins">{margins}</ul>' if margins else "")
            + "</div>"
        )
    moves = "".join(moved_html(group, site) for group in grouped(entry.moves))
    sparks = []
    for key in figure_keys(test):
        chart_id = f"{test.folder}:{key}"
        charts[chart_id] = sparkline(key, test.lines)
        newest = next(float(line.series[key].values[-1]) for line in test.lines if key in line.series)
        sparks.append(
            f'<figure><div class="chart spark" data-chart="{html.escape(chart_id)}"></div>'
            f"<figcaption>{html.escape(figure_name(key))} {html.escape(format_figure(key, newest))}</figcaption></figure>"
        )
    return (
        f'<tr class="{entry.rank}"><td class="test"><a href="{html.escape(entry.href)}">{html.escape(test.test)}</a>'
        f'<div class="muted">{sum(len(line) for line in test.lines)} results'
        + (f", {len(test.lines)} lines side by side" if len(test.lines) > 1 else "")
        + f"</div></td><td>{''.join(states)}</td>"
        f'<td><ul class="moves">{moves or "<li class=muted>nothing</li>"}</ul></td>'
        f'<td><div class="sparks">{"".join(sparks)}</div></td></tr>'
    )


def drawn_line(site: Site, tests: int, results: int) -> str:
    """What the index draws: how many tests and results, from where, along which commits."""
    newest = site.commits[-1]
    return (
        f"{counted(tests, 'test')}, {counted(results, 'result')} in {html.escape(site.store)}, along the first-parent "
        f"history of {html.escape(site.reference)}: {counted(len(site.commits), 'commit')}, the newest {html.escape(newest.short)} "
        f"of {html.escape(newest.date)}"
    )


def index_page(site: Site, entries: Sequence[TestEntry]) -> str:
    charts: dict[str, Any] = {}
    rows = "".join(index_row(entry, site, charts) for entry in entries)
    moved = sum(entry.rank != "steady" for entry in entries)
    results = sum(len(line) for entry in entries for line in entry.lines.lines)
    body = (
        "<h1>Perf results over commits</h1>"
        f'<p class="facts">{drawn_line(site, len(entries), results)}</p>'
        f'<p class="summary">{moved} of {len(entries)} tests moved in the last {site.recent} commits '
        "(a change point there, or a regression in the latest verdict); they come first.</p>"
        '<table class="tests"><colgroup><col class="test"><col class="state"><col class="moves"><col></colgroup>'
        "<thead><tr><th>test</th><th>newest result: SLOs and margins, latest verdict</th>"
        f"<th>moved in the last {site.recent} commits</th><th>figures over commits</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )
    data = script_json({"charts": charts, "commits": {}, "commitUrl": None})
    return page("Perf results over commits", body, data, "assets/")


def slo_table(rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in SLO_HEADERS)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{("good" if cell == "ok" else "bad") if column == 4 else ""}">{html.escape(cell)}</td>'
            for column, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f'<table class="slo"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


@dataclass(frozen=True)
class Charts:
    """A test page's charts: their ``divs`` and the page's ``data`` (:func:`script_json`),
    drawn before the page's verdicts are known (the build draws them while they are compared)."""

    divs: str
    data: str


def test_charts(site: Site, test: TestLines) -> Charts:
    charts: dict[str, Any] = {}
    divs = []
    thresholds = {slo["figure"]: slo for line in reversed(test.lines) for slo in point_slos(line.newest.figures)}
    for index, key in enumerate(figure_keys(test)):
        charts[str(index)] = figure_chart(
            key, test.lines, [c.id for c in site.commits], site.reference, thresholds.get(key)
        )
        divs.append(
            f'<div class="chart figure" id="chart-{index}" data-chart="{index}" data-key="{html.escape(key)}"></div>'
        )
    used = sorted({p for line in test.lines for p in ints(line.positions)})
    commits = {
        p: [site.commits[p].id, site.commits[p].id[:12], site.commits[p].date, site.commits[p].subject] for p in used
    }
    return Charts("".join(divs), script_json({"charts": charts, "commits": commits, "commitUrl": site.commit_url}))


def test_page(site: Site, entry: TestEntry, charts: Charts) -> str:
    test = entry.lines
    blocks = []
    for line, verdict in zip(test.lines, entry.verdicts, strict=True):
        newest = line.newest
        commit = site.commits[newest.position]
        title = html.escape(line.label) if len(test.lines) > 1 else "newest result"
        head, rows = outcome(newest.figures)
        blocks.append(
            f'<section class="line"><h2>{title}</h2><p>{headline_html(head)}</p>'
            f'<p class="facts">{len(line)} results; the newest at {html.escape(commit.id[:12])} '
            f"({html.escape(commit.date)}); latest verdict: {verdict_html(verdict)}</p>"
            + (slo_table(rows) if rows else "")
            + "</section>"
        )
    side = f" · {len(test.lines)} lines side by side, never pooled" if len(test.lines) > 1 else ""
    body = (
        f'<p><a href="../index.html">all tests</a></p><h1>{html.escape(test.test)}</h1>'
        f'<p class="facts">{sum(len(line) for line in test.lines):,} results in {html.escape(site.store)}, '
        f"along the first-parent history of {html.escape(site.reference)}{side}</p>"
        + "".join(blocks)
        + '<h2>Figures over commits</h2><p class="muted">Hover a point for its commit, a click opens it'
        + (" (--commit-url)" if site.commit_url else " (with --commit-url)")
        + "; a diamond is a change point (Otava), red where the level got worse than the gate allows.</p>"
        + f'<div class="charts">{charts.divs}</div>'
    )
    return page(test.test, body, charts.data, "../assets/")
