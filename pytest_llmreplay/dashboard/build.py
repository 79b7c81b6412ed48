"""One build of the site: the store's results along a reference's history -> ``OUT/``.

    OUT/index.html                  the index (:mod:`.pages`)
    OUT/tests/<test folder>.html    a page per test
    OUT/assets/                     Plotly.js, the site's script and style (:mod:`.assets`)
    OUT/.llmreplay-dashboard/       what the next build reuses (:mod:`.cache`)

**Incremental.** A rebuild reads from the store only the results it has not read before
(:func:`~.cache.gather`), runs Otava only on a series whose values changed, and there only on
the windows its new values reach (:mod:`.changes`), compares only a line whose newest results
changed (:class:`~.cache.DigestCache`; in threads while the series and charts are drawn:
:class:`~.verdicts.Judge`), and draws and writes a test's page only when what it shows changed
(the digest of its results' keys and places and the site's settings, kept in ``pages.json``:
:class:`Pages`); the index is written each time. Plotly.js is copied once.

``--out`` must be a new or empty folder, or one a build wrote (it holds
``.llmreplay-dashboard/``): a build removes the pages of tests it no longer draws.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LLMReplayError
from ..gate.store import Store
from ..wording import counted
from . import DEFAULT_DEPTH, DEFAULT_RECENT
from .assets import copy_assets, plotly_js
from .cache import STATE, DigestCache, gather, read_json, write_json
from .changes import finder
from .commits import first_parent_history
from .moved import ORDER, rank, recent_moves
from .pages import Charts, Site, TestEntry, index_page, test_charts, test_page
from .series import TestLines, add_series, ints, test_lines
from .verdicts import Judge

PAGE_VERSION = 1  # of what a page shows (with the package's version): a page of another is written again


@dataclass
class Built:
    """What a build did, for its summary line."""

    out: Path
    tests: int = 0
    results: int = 0
    read: int = 0
    cached: int = 0
    pages: int = 0
    change_points: int = 0
    verdicts: int = 0
    moved: int = 0
    unreadable: list[str] = field(default_factory=list)
    partial: int = 0

    def summary(self) -> list[str]:
        lines = [
            f"wrote {self.out / 'index.html'}: {counted(self.tests, 'test')} ({self.moved} moved recently), "
            f"{counted(self.results, 'result')} ({self.read:,} read from the store, {self.cached:,} from the cache); "
            f"{counted(self.pages, 'test page')} written, Otava run on {self.change_points:,} series, "
            f"{counted(self.verdicts, 'latest verdict')} compared"
        ]
        if self.partial:
            lines.append(
                f"left out {counted(self.partial, 'partial result')}: they measured part of their workload "
                "(interrupted, or a capacity search its server's failure cut short)"
            )
        if self.unreadable:
            lines.append(f"skipped {counted(len(self.unreadable), 'unreadable stored result')}: {self.unreadable[0]}")
        return lines


def check_out(out: Path) -> None:
    """``out`` is new, empty or a dashboard's (module docstring), and made if new; else
    :class:`LLMReplayError` (a file, a folder of other files, or one that cannot be made: under a
    file, on a read-only file system)."""
    if out.exists() and not out.is_dir():
        raise LLMReplayError(f"--out: {out} is a file; expected a folder for the dashboard")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LLMReplayError(f"--out: cannot make the folder {out}: {exc.strerror or exc}") from None
    if out.is_dir() and any(out.iterdir()) and not (out / STATE).is_dir():
        raise LLMReplayError(
            f"--out: {out} holds other files (no {STATE}/ of an earlier build); give a new or empty folder, or the one a build wrote"
        )


def build_dashboard(
    store: Store,
    out: Path,
    cwd: Path,
    ref: str = "HEAD",
    *,
    commit_url: str | None = None,
    depth: int = DEFAULT_DEPTH,
    recent: int = DEFAULT_RECENT,
    workers: int = 1,
) -> Built:
    """Build or update the site in ``out`` from ``store``'s results on the first-parent history
    of ``ref`` in the repository at ``cwd`` (its newest ``depth`` commits); ``recent``: the
    newest commits whose moves put a test first; ``commit_url``: where a click on a point goes,
    ``{commit}`` standing for the commit's id; ``workers``: the processes that read many new
    results (:func:`~.cache.read_all`) and the threads that compare latest verdicts
    (:class:`~.verdicts.Judge`)."""
    plotly_js()  # the extra is missing: say so before anything is read
    check_out(out)
    commits = first_parent_history(cwd, ref, depth)
    if not commits:
        raise LLMReplayError(f"--ref {ref}: no commit to draw")
    positions = {commit.short: index for index, commit in enumerate(commits)}
    gathered = gather(store, out, positions, workers)
    if not gathered.tests:
        raise LLMReplayError(
            f"--baseline-dir: no stored result in {store.label} at the newest {len(commits):,} commits of {ref}'s first-parent history"
            + (f" ({len(gathered.unreadable)} unreadable)" if gathered.unreadable else "")
        )
    site = Site(store.label, ref, commits, recent, commit_url)
    change_points, windows, verdicts = (DigestCache(out, name) for name in ("change_points", "windows", "verdicts"))
    find = finder(change_points, windows)
    tests = [test_lines(folder, results, names, positions) for folder, (results, names) in gathered.tests.items()]
    pages = Pages(out, site)
    with Judge(verdicts, store, workers) as judge:
        asked = judge.ask([line for test in tests for line in test.lines])  # compared while the charts are drawn
        for test in tests:
            add_series(test, find)
            pages.draw(test)
        judged = iter(judge.verdicts(asked))
    entries = []
    for test in tests:
        lines_judged = [next(judged) for _ in test.lines]
        moves = recent_moves(test, site.since)
        newest = [int(line.positions[-1]) for line in test.lines]
        entries.append(TestEntry(test, lines_judged, moves, rank(moves, lines_judged, newest, site.since)))
    entries.sort(key=lambda entry: (ORDER.index(entry.rank), entry.lines.test))
    drawn = sum(len(line) for test in tests for line in test.lines)  # as the index counts: a dirty result left out
    built = Built(out, len(entries), drawn, gathered.read, gathered.cached)
    built.unreadable, built.partial = gathered.unreadable, gathered.partial
    built.pages = pages.write(entries)
    copy_assets(out / "assets")
    (out / "index.html").write_text(index_page(site, entries), encoding="utf-8")
    for cache in (change_points, windows, verdicts):
        cache.save()
    built.change_points, built.verdicts, built.moved = (
        change_points.made,
        verdicts.made,
        sum(entry.rank != "steady" for entry in entries),
    )
    return built


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest-llmreplay")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


def page_digest(site: Site, test: TestLines) -> str:
    """What a test's page shows depends on: its results and where they sit, the site's settings
    (module docstring). Its verdicts too, which its results' keys decide (:mod:`.verdicts`)."""
    used = sorted({p for line in test.lines for p in ints(line.positions)})
    facts = [
        PAGE_VERSION,
        package_version(),
        site.store,
        site.reference,
        site.commit_url,
        [(p, site.commits[p].id) for p in used],
        [line.keys for line in test.lines],
    ]
    return hashlib.sha256(json.dumps(facts, default=str).encode()).hexdigest()[:24]


class Pages:
    """The test pages of a build: :meth:`draw` draws the charts of a test whose page's digest
    changed (or whose page is missing), :meth:`write` writes those pages and removes the pages
    of tests no longer drawn; the digests are kept in ``pages.json``."""

    def __init__(self, out: Path, site: Site) -> None:
        self.out, self.site = out, site
        self.record = out / STATE / "pages.json"
        known = read_json(self.record)
        self.known: dict[str, str] = known if isinstance(known, dict) else {}
        self.digests: dict[str, str] = {}
        self.drawn: dict[str, Charts] = {}

    def draw(self, test: TestLines) -> None:
        digest = self.digests[test.folder] = page_digest(self.site, test)
        if self.known.get(test.folder) != digest or not (self.out / "tests" / f"{test.folder}.html").is_file():
            self.drawn[test.folder] = test_charts(self.site, test)

    def write(self, entries: list[TestEntry]) -> int:
        """Write the drawn tests' pages; how many."""
        for entry in entries:
            charts = self.drawn.get(entry.lines.folder)
            if charts is not None:
                path = self.out / entry.href
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(test_page(self.site, entry, charts), encoding="utf-8")
        for folder in set(self.known) - set(self.digests):
            (self.out / "tests" / f"{folder}.html").unlink(missing_ok=True)
        write_json(self.record, self.digests)
        return len(self.drawn)
