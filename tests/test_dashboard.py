"""``llmreplay dashboard`` end to end, without a browser (tests/test_dashboard_browser.py draws
it): from each store kind (a folder, a git ref, an S3 bucket of a real S3 server), the index lists
every test with the ones that moved first, a test's page carries each figure's series with its
change point flagged and its SLO threshold, several endpoints are lines side by side (never
pooled), a rebuild after one new result reads and writes only what changed, and bad input is
one line."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import dashboard_site
import pytest
from dashboard_site import COMMITS, STEP, stored_test_ids
from test_plugin_baselines import git

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.gate.store import result_folder
from pytest_llmreplay.gate.store_url import open_store


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The synthetic store (tests/dashboard_site.py), made once for the module."""
    return dashboard_site.make(tmp_path_factory.mktemp("made"))


@pytest.fixture
def site(tmp_path, monkeypatch, made):
    """A copy of the repository (the cwd) and its results in a folder store; returns the store's path."""
    store = dashboard_site.copy_of(made, tmp_path)
    monkeypatch.chdir(tmp_path / "repo")
    return store


def page_data(path: Path) -> dict:
    """The JSON block a page hands to its script."""
    text = path.read_text()
    return json.loads(re.search(r'<script type="application/json" id="page-data">(.*?)</script>', text, re.S).group(1))


def page_of(out: Path, test: str) -> Path:
    return out / "tests" / f"{result_folder(test)}.html"


def build(store: str, out: Path, capsys, *more: str) -> str:
    assert main(["dashboard", "--baseline-dir", store, "--out", str(out), *more]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_index_lists_every_test_the_moved_ones_first(site, tmp_path, capsys):
    printed = build(str(site), tmp_path / "out", capsys, "--recent", str(COMMITS - STEP))
    total = COMMITS * 6  # five tests, test 0 on two profiles
    assert printed.startswith(
        f"wrote {tmp_path / 'out' / 'index.html'}: 5 tests (2 moved recently), {total} results ({total} read"
    )
    index = (tmp_path / "out" / "index.html").read_text()
    listed = re.findall(r'<td class="test"><a href="tests/[^"]+\.html">([^<]+)</a>', index)
    tests = stored_test_ids()
    assert listed == [tests[0], tests[2], tests[1], tests[3], tests[4]]  # the regression, the improvement, the rest
    step = git(site.parent / "repo", "rev-list", "--reverse", "HEAD").split()[STEP][:7]
    ago = COMMITS - 1 - STEP
    assert re.search(
        rf"regression</span> at {step} \({ago} commits ago\) <span class=muted>\(sim_profile llama-3.1-8b-h100\)</span>: [^<]*ttft.p50 \+(19|20|21)\.\d%",
        index,
    )
    assert re.search(
        rf"improved</span> at {step} \({ago} commits ago\): output_throughput.steady_state \+2\d\.\d%, [^<]*ttft.p50 -(19|20|21)\.\d%",
        index,
    )
    assert index.count('<script src="assets/plotly.min.js">') == 1
    assert [p.name for p in (tmp_path / "out").rglob("plotly.min.js")] == ["plotly.min.js"]  # one copy per site
    for test in tests:
        assert page_of(tmp_path / "out", test).is_file()


def test_a_test_page_draws_each_figure_with_its_change_point_and_slo(site, tmp_path, capsys):
    build(str(site), tmp_path / "out", capsys, "--commit-url", "https://example.invalid/c/{commit}")
    data = page_data(page_of(tmp_path / "out", stored_test_ids()[2]))
    commits = git(site.parent / "repo", "rev-list", "--reverse", "HEAD").split()
    assert data["commitUrl"] == "https://example.invalid/c/{commit}"
    assert data["commits"][str(STEP)][:3] == [commits[STEP], commits[STEP][:12], data["commits"][str(STEP)][2]]
    titles = [chart["layout"]["title"]["text"] for chart in data["charts"].values()]
    assert titles[:2] == ["ttft.p50 (gated, allowed change 5%)", "ttft.p90 (gated, allowed change 10%)"]
    assert {"ttft.p99 (an SLO's figure)", "error_rate (an SLO's figure)"} <= set(titles)
    ttft = next(c for c in data["charts"].values() if c["layout"]["title"]["text"].startswith("ttft.p50"))
    results, *rest = ttft["data"]
    assert results["x"] == list(range(COMMITS))  # each point's x is its commit's key in the page's commits
    assert results["hovertemplate"].startswith(
        "<b>%{customdata[1]}</b> %{customdata[2]}"
    )  # commit, date (the script's)
    level = next(t for t in rest if t["name"].endswith(": level"))
    assert level["x"] == [0, STEP, COMMITS - 1] and level["line"]["shape"] == "hv"  # the levels from where each starts
    assert level["y"][1] == level["y"][2] < level["y"][0] * 0.9
    assert min(results["y"][STEP:]) < max(results["y"][:STEP]) * 0.9  # 20% faster from STEP on, in ms
    improved = next(t for t in rest if t["name"] == "change point: improved")
    assert improved["x"] == [STEP] and re.match(
        r"improved: level [\d.]+ ms to [\d.]+ ms \(-\d\d\.\d%\), allowed 5%", improved["text"][0]
    )
    throughput = next(
        c for c in data["charts"].values() if c["layout"]["title"]["text"].startswith("output_throughput")
    )
    assert any(t["name"] == "change point: improved" for t in throughput["data"])  # higher is better there
    slo = next(c for c in data["charts"].values() if c["layout"]["title"]["text"].startswith("ttft.p99"))
    threshold = next(t for t in slo["data"] if t["name"] == "SLO ttft.p99 < 500ms")
    assert threshold["y"] == [500, 500] and slo["layout"]["yaxis"]["title"]["text"] == "ttft.p99 (ms)"


def test_change_points_are_the_ones_llmreplay_history_prints(site, tmp_path, capsys):
    build(str(site), tmp_path / "out", capsys)
    test = stored_test_ids()[2]
    data = page_data(page_of(tmp_path / "out", test))
    assert main(["history", test, "--baseline-dir", str(site)]) == 0
    printed = dict(re.findall(r"^([\w.]+): (change points at [\w, ]+|no change point)$", capsys.readouterr().out, re.M))
    drawn = {}
    for chart in data["charts"].values():
        key = chart["layout"]["title"]["text"].split(" ")[0]
        marked = sorted(x for t in chart["data"] if t["name"].startswith("change point") for x in t["x"])
        drawn[key] = (
            f"change points at {', '.join(data['commits'][str(x)][1] for x in marked)}" if marked else "no change point"
        )
    assert len(printed) == 7 and {key: drawn[key] for key in printed} == printed


def test_several_endpoints_are_lines_side_by_side_never_pooled(site, tmp_path, capsys):
    build(str(site), tmp_path / "out", capsys)
    page = page_of(tmp_path / "out", stored_test_ids()[0])
    data = page_data(page)
    ttft = data["charts"]["0"]
    lines = [t for t in ttft["data"] if t.get("mode") == "lines+markers"]
    assert [t["name"] for t in lines] == [
        "sim_profile llama-3.1-8b-h100, hardware 1 x NVIDIA H100 SXM5 80GB",
        "sim_profile llama-3.1-8b-h200, hardware 1 x NVIDIA H200 SXM 141GB",
    ]
    assert [len(t["y"]) for t in lines] == [COMMITS, COMMITS]  # each its own results
    assert all(a > b for a, b in zip(lines[0]["y"], lines[1]["y"], strict=True))  # the H200's a fifth faster
    regressions = [t for t in ttft["data"] if t["name"] == "change point: regression"]
    assert [t["x"] for t in regressions] == [[STEP], [STEP]] and [t["showlegend"] for t in regressions] == [True, False]
    assert "2 lines side by side, never pooled" in page.read_text()


def test_a_result_with_runs_draws_their_range(site, tmp_path, capsys):
    build(str(site), tmp_path / "out", capsys)
    ttft = page_data(page_of(tmp_path / "out", stored_test_ids()[4]))["charts"]["0"]
    results = ttft["data"][0]
    assert results["error_y"]["type"] == "data" and all(up >= 0 for up in results["error_y"]["array"])
    assert any(up > 0 for up in results["error_y"]["array"])
    assert re.fullmatch(r"<br>range of 3 runs: [\d.]+ ms to [\d.]+ ms", results["text"][0])


def test_a_rebuild_after_one_new_result_reads_and_writes_only_that(site, tmp_path, capsys):
    out = tmp_path / "out"
    build(str(site), out, capsys)
    untouched = page_of(out, stored_test_ids()[1])
    before = untouched.stat().st_mtime_ns
    assert "0 read from the store" in build(str(site), out, capsys)  # nothing new: all from the cache
    new = dashboard_site.add_commit(tmp_path)
    for path in site.glob(f"*/{new[:12]}-*.json"):  # the new commit's results but test 3's
        if path.parent.name != result_folder(stored_test_ids()[3]):
            path.unlink()
    printed = build(str(site), out, capsys)
    assert f"(1 read from the store, {COMMITS * 6} from the cache)" in printed
    assert "; 1 test page written" in printed and "1 latest verdict compared" in printed
    assert untouched.stat().st_mtime_ns == before
    data = page_data(page_of(out, stored_test_ids()[3]))
    assert data["commits"][str(COMMITS)][0] == new and data["charts"]["0"]["data"][0]["x"][-1] == COMMITS


def test_an_update_after_one_more_commit_writes_the_pages_a_build_from_scratch_writes(site, tmp_path, capsys):
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    build(str(site), out, capsys)
    new = dashboard_site.add_commit(tmp_path)
    assert len(list(site.glob(f"*/{new[:12]}-*.json"))) == 6  # a result of every test, two of test 0
    assert f"(6 read from the store, {COMMITS * 6} from the cache)" in build(str(site), out, capsys)
    build(str(site), scratch, capsys)
    pages = sorted(path.relative_to(out) for path in out.rglob("*.html"))
    assert pages == sorted(path.relative_to(scratch) for path in scratch.rglob("*.html")) and len(pages) == 6
    for page in pages:
        assert (out / page).read_bytes() == (scratch / page).read_bytes(), page
    assert len(page_data(page_of(out, stored_test_ids()[0]))["charts"]["0"]["data"][0]["x"]) == COMMITS + 1


def test_unreadable_and_partial_results_are_left_out_and_named(site, tmp_path, capsys):
    """A capacity search its server's failure cut short was drawn as a result (a 91% drop on the
    index, found by a review helper), where the gate and the history leave it out."""
    folder = site / result_folder(stored_test_ids()[1])
    first, second, third = sorted(folder.iterdir())[:3]
    second.write_text(json.dumps({**json.loads(second.read_text()), "interrupted": "SIGINT"}))
    cut = json.loads(third.read_text())
    third.write_text(json.dumps({**cut, "capacity": {**(cut.get("capacity") or {}), "incomplete": "server died"}}))
    original = first.read_text()
    first.write_text(json.dumps({**json.loads(original), "slo": "oops"}))  # hand-edited: a traceback stopped the build
    printed = build(str(site), tmp_path / "out", capsys)
    assert "left out 2 partial results: they measured part of their workload" in printed
    assert f"skipped 1 unreadable stored result: {first}: not a stored llmreplay result (slo: expected" in printed
    first.write_text(original)  # mended under its name: the next build reads it again (its cache kept it broken)
    printed = build(str(site), tmp_path / "out", capsys)
    assert "skipped" not in printed and "(1 read from the store" in printed


def test_a_dirty_trees_result_is_drawn_only_where_its_commit_has_no_clean_one(site, tmp_path, capsys):
    """A new user saved an uncommitted experiment (20% faster) at the newest commit, beside CI's
    clean result: the dashboard drew it, and the index called the test improved, where the gate
    and llmreplay history leave it out. A dirty result at a commit with no clean one is drawn."""
    test = stored_test_ids()[1]
    folder = site / result_folder(test)
    head = git(site.parent / "repo", "rev-parse", "HEAD")
    newest = next(path for path in folder.iterdir() if path.name.startswith(head[:12]))
    clean = json.loads(newest.read_text())
    experiment = {**clean, "dirty": True, "summary": {**clean["summary"], "ttft": {**clean["summary"]["ttft"]}}}
    experiment["summary"]["ttft"]["p50"] = clean["summary"]["ttft"]["p50"] * 0.8
    dirty = newest.with_name(newest.name.replace(newest.name[13:21], "99999999"))  # saved later, same commit
    dirty.write_text(json.dumps(experiment))
    printed = build(str(site), tmp_path / "out", capsys)
    drawn = re.search(r"(\d+) results in ", (tmp_path / "out" / "index.html").read_text())
    assert drawn and f"{drawn.group(1)} results (" in printed  # the dirty one is not counted as drawn
    ttft = next(
        chart
        for chart in page_data(page_of(tmp_path / "out", test))["charts"].values()
        if chart["layout"]["title"]["text"].startswith("ttft.p50")
    )
    results = ttft["data"][0]
    assert len(results["y"]) == COMMITS and results["y"][-1] == pytest.approx(
        clean["summary"]["ttft"]["p50"] * 1000, rel=1e-4
    )
    newest.unlink()  # now the commit has only the dirty one: it is the commit's result
    build(str(site), tmp_path / "again", capsys)
    ttft = next(
        chart
        for chart in page_data(page_of(tmp_path / "again", test))["charts"].values()
        if chart["layout"]["title"]["text"].startswith("ttft.p50")
    )
    assert ttft["data"][0]["y"][-1] == pytest.approx(experiment["summary"]["ttft"]["p50"] * 1000, rel=1e-4)


def test_from_a_git_ref(tmp_path, monkeypatch, capsys):
    dashboard_site.make(tmp_path, "git")
    assert not (tmp_path / "store").exists()
    monkeypatch.chdir(tmp_path / "repo")
    printed = build(f"git:{tmp_path / 'repo'}#refs/llmreplay/results", tmp_path / "out", capsys)
    assert f"5 tests (2 moved recently), {COMMITS * 6} results ({COMMITS * 6} read from the store" in printed
    data = page_data(page_of(tmp_path / "out", stored_test_ids()[0]))
    assert len(data["charts"]["0"]["data"][0]["y"]) == COMMITS


def test_from_an_s3_bucket(site, tmp_path, capsys, s3_env):
    store = open_store("s3://results/perf", tmp_path)
    for path in sorted(site.glob("*/*.json")):
        store.add(path.relative_to(site).as_posix(), path.read_bytes())
    printed = build("s3://results/perf", tmp_path / "out", capsys)
    assert f"5 tests (2 moved recently), {COMMITS * 6} results ({COMMITS * 6} read from the store" in printed
    data = page_data(page_of(tmp_path / "out", stored_test_ids()[0]))
    assert len(data["charts"]["0"]["data"][0]["y"]) == COMMITS
    assert s3_env["AWS_SECRET_ACCESS_KEY"] not in (tmp_path / "out" / "index.html").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--commit-url", "https://x/commit"],
            "error: --commit-url 'https://x/commit': expected a template with {commit}, *",
        ),
        (
            ["--ref", "no-such-branch"],
            "error: --ref: git cannot resolve 'no-such-branch' to a commit; expected a branch, tag or commit of the repository at *",
        ),
        (["--baseline-dir", "nowhere"], "error: --baseline-dir: */nowhere: no such folder; *"),
        (
            ["--baseline-dir", "empty"],
            "error: --baseline-dir: */empty: holds no stored result; expected where results were stored *",
        ),
        (["--out", "busy"], "error: --out: busy holds other files (no .llmreplay-dashboard/ of an earlier build); *"),
        (["--out", "busy/notes.txt/site"], "error: --out: cannot make the folder busy/notes.txt/site: Not a directory"),
    ],
)
def test_bad_input_is_one_line_with_the_bad_input_status(site, capsys, args, message):
    from fnmatch import fnmatch

    Path("empty").mkdir()
    Path("busy").mkdir()
    Path("busy", "notes.txt").write_text("mine\n")
    given = {"--baseline-dir": str(site), "--out": "site", **dict(zip(args[::2], args[1::2], strict=True))}
    assert main(["dashboard", *[word for pair in given.items() for word in pair]]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fnmatch(err, message), err
    assert not Path("site").exists() or not any(Path("site").iterdir())


def test_without_plotly_the_extra_is_named_before_anything_is_read(site, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)  # as if not installed
    assert main(["dashboard", "--baseline-dir", str(site), "--out", "site"]) == 3
    assert capsys.readouterr().err == (
        "error: the dashboard draws its charts with Plotly.js, from the plotly package: pip install 'pytest-llmreplay[dashboard]'\n"
    )
    assert not Path("site").exists()


def test_without_otava_the_extra_is_named_before_anything_is_read(site, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "otava", None)  # as if not installed
    assert main(["dashboard", "--baseline-dir", str(site), "--out", "site"]) == 3
    assert (
        capsys.readouterr().err == "error: change points need Apache Otava: pip install 'pytest-llmreplay[history]'\n"
    )
    assert not Path("site").exists()


def test_page_data_holds_no_markup_whatever_the_texts_in_it():
    """A commit subject with `<!--` and `<script` put the browser's HTML parser into its
    double-escaped script state: the page's own scripts were read as part of its JSON and no chart
    drew (found by a review helper, in Chromium). The data holds no `<`, `>` or `&` at all now."""
    from pytest_llmreplay.dashboard.pages import script_json

    texts = {"subject": "Strip <!-- comments inside <script> blocks", "end": "</script><!-- & -->", "ok": "a > b"}
    written = script_json(texts)
    assert not set("<>&") & set(written)
    assert json.loads(written) == texts


def test_an_engine_repositorys_results_of_every_version_are_one_line():
    # each commit of an engine repository builds another server version: drawn as a line each,
    # every line held one point; the version and where the workload file lies are no identity
    from pytest_llmreplay.dashboard.extract import line_of

    def result(version, path, engine="vllm"):
        return {
            "fingerprint": {"kind": "live", "model": "m", "engine": engine, "server_version": version},
            "workload": {"digest": "d", "path": path},
            "settings": {"concurrency": 4},
        }

    assert line_of(result("0.11.1.dev101+g1a2b3c4", "w.yaml")) == line_of(
        result("0.11.1.dev102+g5d6e7f8", "perf/w.yaml")
    )
    assert line_of(result("0.5.0", "w.yaml", "sglang")) != line_of(result("0.5.0", "w.yaml"))
