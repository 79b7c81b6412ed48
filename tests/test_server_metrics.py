"""The server's /metrics during a run (pytest_llmreplay/replayer/server_metrics.py,
pytest_llmreplay/metrics/server.py): each engine's text mapped to our series, the ``server``
figures and their SLO keys, and scraping against our simulated server, a server without
/metrics, and with scraping off. The engines' texts in fixtures/metrics are hand-written from
their sources, but for one captured from llama.cpp (see the README there)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web
from mockserver import MockConfig, MockServer, ServerThread
from test_sim_server import serving, tiny_profile

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.gate.baseline import make_record
from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.metrics.server import hit_rate_gap, increase, server_figures
from pytest_llmreplay.metrics.slo import SLOBreach, parse_slos
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.replayer.server_metrics import ExpositionError, parse_exposition
from pytest_llmreplay.report.html import html_page
from pytest_llmreplay.report.terminal import render
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer
from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


@pytest.fixture(scope="module")
def prompts() -> PromptFactory:
    return PromptFactory(load_tokenizer(None))


def agent(index: int, turns: int = 4) -> Session:
    """A session whose turns extend each other: later turns hit the prefix cache."""
    items = [Turn(256, 16, Synthetic())]
    for _ in range(turns - 1):
        items.append(Turn(items[-1].input_tokens + 16 + 64, 16, Synthetic(extends_previous=True)))
    return Session(f"s{index}", 0.0, tuple(items))


AGENTS = Workload(tuple(agent(i) for i in range(8)), "test")


def run_against(url: str, prompts: PromptFactory, interval: float, workload: Workload = AGENTS) -> Result:
    endpoint = HTTPEndpoint(url, api="completions", metrics_interval_s=interval)
    return Result(replay(workload, endpoint, prompts, ReplaySettings(concurrency=4)))


# -- each engine's text ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        # two engines: requests and counters summed, usage the fuller engine's, from
        # kv_cache_usage_perc (0.8125), not the deprecated gpu_cache_usage_perc (0.5) beside it
        (
            "vllm",
            {
                "running": 21,
                "waiting": 3,
                "kv_cache_usage": 0.8125,
                "preemptions": 3,
                "prefix_cache_queries": 61440,
                "prefix_cache_hits": 40960,
            },
        ),
        (
            "vllm-0.8",
            {
                "running": 4,
                "waiting": 1,
                "kv_cache_usage": 0.25,
                "preemptions": 0,
                "prefix_cache_queries": 1000,
                "prefix_cache_hits": 250,
            },
        ),
        ("llamacpp", {"running": 2, "waiting": 1, "kv_cache_usage": 0.0625}),
        # captured: prompt_tokens_total counts the tokens computed, the queried ones are it plus the cached
        (
            "llamacpp-0c1e57098",
            {"running": 0, "waiting": 0, "prefix_cache_queries": 8219 + 29, "prefix_cache_hits": 29},
        ),
        (
            "sglang",
            {
                "running": 162,
                "waiting": 2826,
                "kv_cache_usage": 0.28,
                "preemptions": 7,
                "prefix_cache_queries": 8128902,
                "prefix_cache_hits": 4064451,
            },
        ),
    ],
)
def test_each_engines_text_maps_to_our_series(engine, expected):
    assert parse_exposition((DATA / f"{engine}.txt").read_text()) == expected


def test_text_that_is_not_prometheus_is_refused():
    with pytest.raises(ExpositionError, match="invalid metric name"):
        parse_exposition("<html>not found</html>")


def test_a_long_line_that_is_not_prometheus_is_named_in_its_first_120_characters():
    """The parser's message holds the whole bad line: a 100 KB one became a 100 KB warning."""
    with pytest.raises(ExpositionError) as info:
        parse_exposition("<html>" + "x" * 100_000 + "</html>")
    assert str(info.value) == "invalid metric name:<html>" + "x" * (120 - len("invalid metric name:<html>")) + "..."


# -- the figures -----------------------------------------------------------------------------------


def test_a_counters_increase_counts_a_restart_from_zero():
    assert increase([[-0.1, 5], [1, 7], [2, 7], [3, 2], [4, 4]]) == 2 + 0 + 2 + 2


def test_figures_read_gauges_during_the_run_and_counters_over_all_of_it():
    series = {
        "kv_cache_usage": [[-0.2, 0.99], [0.5, 0.4], [1.5, 0.6]],  # the pre-run scrape is no gauge reading
        "running": [[-0.2, 50], [0.5, 3], [1.5, 5]],
        "waiting": [[-0.2, 0], [0.5, 2], [1.5, 0]],
        "preemptions": [[-0.2, 10], [0.5, 10], [1.5, 12]],
        "prefix_cache_queries": [[-0.2, 1000], [1.5, 1400]],
        "prefix_cache_hits": [[-0.2, 100], [1.5, 400]],
    }
    assert server_figures(series) == pytest.approx(
        {
            "preemptions": 2,
            "kv_cache_usage.max": 0.6,
            "kv_cache_usage.mean": 0.5,
            "running.max": 5,
            "waiting.max": 2,
            "prefix_cache_hit_rate": 0.75,
        }
    )


@pytest.mark.parametrize("status", ["cancelled", "failed"])
def test_a_run_with_requests_not_ok_sets_no_client_hit_rate_beside_the_servers(status):
    """The server counts the prompts of requests the client cut (--duration, Ctrl-C) or saw fail;
    the client only the ok ones: '38.6% against 29.0%, one of the two counts is wrong' after
    --duration was no wrong count. The two are set side by side only when every request is ok."""
    from pytest_llmreplay.replayer.records import ReplayRun, RequestRecord

    records = [
        RequestRecord(f"s{i}", i, 0, 1, "ok", 0.0, sent_s=0.1, end_s=0.5, prompt_tokens=100, cached_tokens=50)
        for i in range(2)
    ]
    records.append(RequestRecord("s2", 2, 0, 1, status, 0.0, sent_s=0.1, end_s=0.5, prompt_tokens=100))
    series = {"prefix_cache_queries": [[-0.1, 0], [0.6, 300]], "prefix_cache_hits": [[-0.1, 0], [0.6, 240]]}
    result = Result(ReplayRun(records, [], {}, "w", "e", 0.6, 3, server_metrics=series))
    assert result.summary["server"]["prefix_cache_hit_rate"] == 0.8
    assert result.client_hit_rate is None and result.hit_rate_gap is None
    assert "client_hit_rate" not in make_record(result, test="t", fingerprint={}, workload={}, git={})


def test_figures_the_server_does_not_report_are_absent_not_zero():
    """llama.cpp: no preemption or prefix-cache counter; nothing queried: no hit rate."""
    series = {"running": [[0.1, 1]], "prefix_cache_queries": [[0, 5], [1, 5]], "prefix_cache_hits": [[0, 0], [1, 0]]}
    assert server_figures(series) == {"running.max": 1}
    assert server_figures({}) == {}


def test_the_servers_counts_stay_whole_over_repeated_runs_and_the_runs_that_lack_one_are_said():
    # Prometheus gives every sample as a float: the median of running.max 2.0 and 4.0 over two
    # runs was 3.0, of 0.0 and 3.0 1.5 requests running, and of preemptions 0.5; and a figure only
    # some runs measured (a run shorter than the scrape interval reads no gauge) said nothing
    from pytest_llmreplay.gate.repeats import repeats_line
    from pytest_llmreplay.metrics.runs import median_summary

    runs = [
        {"running": [[0.5, 0.0]], "preemptions": [[-1, 3.0], [2, 3.0]]},
        {"running": [[0.5, 3.0]], "preemptions": [[-1, 3.0], [2, 4.0]]},
        {"preemptions": [[-1, 4.0], [2, 4.0]]},
    ]
    figures = [server_figures(series) for series in runs]
    assert figures[1] == {"preemptions": 1, "running.max": 3} and isinstance(figures[1]["running.max"], int)
    pooled = median_summary([{"server": f} for f in figures])["server"]
    assert pooled == {"preemptions": 0, "running.max": 0}  # each a run's own count, never 1.5
    record = {"summary": {"server": pooled}, "runs": [{"summary": {"server": f}} for f in figures]}
    assert repeats_line(record).endswith("; server.running.max measured in 2 of 3 runs (the median of those)")


def test_hit_rates_further_apart_than_five_points_are_called_out():
    assert hit_rate_gap(0.70, 0.66) is None
    assert "73.0%" in (hit_rate_gap(0.73, 0.67) or "") and "6.0 points apart" in (hit_rate_gap(0.73, 0.67) or "")


@pytest.mark.parametrize(("hits", "warned"), [(80, True), (52, False)])
def test_the_servers_hit_rate_is_set_beside_the_clients_and_a_gap_is_warned_of(hits, warned):
    """Two requests of 100 prompt tokens, 50 cached each (client: 50%); the server counts
    ``hits`` of 200 queried tokens."""
    from pytest_llmreplay.replayer.records import ReplayRun, RequestRecord

    records = [
        RequestRecord(f"s{i}", i, 0, 1, "ok", 0.0, sent_s=0.1, end_s=0.5, prompt_tokens=100, cached_tokens=50)
        for i in range(2)
    ]
    series = {"prefix_cache_queries": [[-0.1, 0], [0.6, 200]], "prefix_cache_hits": [[-0.1, 0], [0.6, 2 * hits]]}
    result = Result(ReplayRun(records, [], {}, "w", "e", 0.6, 2, server_metrics=series))
    assert result.summary["server"]["prefix_cache_hit_rate"] == hits / 100 and result.client_hit_rate == 0.5
    text = render(result)
    assert f"prefix_cache_hit_rate {hits}%; client prefix-cache hit rate (cached_tokens) 50%" in text
    gap = f"prefix-cache hit rate: the server's /metrics says {hits:.1f}%, its responses' cached_tokens 50.0%"
    assert (gap in text) == warned
    record = make_record(result, test="t", fingerprint={}, workload={}, git={})
    assert record["client_hit_rate"] == 0.5
    assert [w for w in record["warnings"] if w.startswith(gap)] == ([result.hit_rate_gap] if warned else [])
    page = html_page([record])  # the report: both rates on the server's line, the gap in red
    assert "client prefix-cache hit rate (cached_tokens) 50%" in page
    assert (f'<p class="breach">{gap}'.replace("'", "&#x27;") in page) == warned


def test_server_slo_keys_parse_in_their_units_and_are_checked():
    slos = parse_slos({"server.preemptions": "== 0", "server.kv_cache_usage.max": "< 90%"})
    assert [(s.metric, s.stat, s.value) for s in slos] == [
        ("server", "preemptions", 0),
        ("server", "kv_cache_usage.max", 0.9),
    ]
    for key, threshold, message in (
        ("server.kv_cache_usage.max", "< 90", "server.kv_cache_usage.max is a share between 0 and 1"),
        ("server.preemptions", "< 2s", "unit 's' does not fit server.preemptions"),
        ("server.kv_cache", "< 90%", "server has no statistic 'kv_cache'"),
        ("server", "== 0", "name a statistic"),
    ):
        with pytest.raises(LLMReplayError, match=message):
            parse_slos({key: threshold})


# -- scraping during a replay ----------------------------------------------------------------------


def test_a_replay_against_the_simulated_server_collects_its_series(prompts):
    with serving(prompts, tiny_profile(0.005)) as sim:
        result = run_against(sim.url, prompts, interval=0.05)
    series = result.run.server_metrics
    assert set(series) == {
        "running",
        "waiting",
        "kv_cache_usage",
        "preemptions",
        "prefix_cache_queries",
        "prefix_cache_hits",
    }
    times = [t for t, _ in series["running"]]
    assert times == sorted(times) and len(times) >= 5  # every 50 ms over a run of ~1 s
    assert times[0] < 0 < times[-1] < result.run.duration_s  # one scrape before the first request
    counted = [t for t, _ in series["preemptions"]]
    # the scrape after the run keeps its counters only: an idle server's gauges (0 running, an
    # empty cache) lowered kv_cache_usage.mean (found by a review helper)
    assert counted[:-1] == times and counted[-1] > result.run.duration_s
    server = result.summary["server"]
    assert server["running.max"] == 4  # the concurrency
    assert 0 < server["kv_cache_usage.max"] < 1 and server["preemptions"] == 0
    # the first scrape comes before the first request, so the counters cover the whole run:
    # the server's hit rate is the client's
    assert server["prefix_cache_hit_rate"] == pytest.approx(result.client_hit_rate)
    result.assert_slo({"server.preemptions": "== 0", "server.kv_cache_usage.max": "< 90%"})
    with pytest.raises(SLOBreach, match="server.waiting.max"):
        result.assert_slo({"server.running.max": "<= 4", "server.waiting.max": "> 1000"})
    text = render(result)
    assert "Server (/metrics): preemptions 0;" in text and "client prefix-cache hit rate (cached_tokens)" in text
    assert "one of the two counts is wrong" not in text
    record = make_record(result, test="t", fingerprint={}, workload={}, git={})
    assert record["server_metrics"] == series and record["summary"]["server"] == server


def test_the_first_scrape_comes_before_the_first_request(prompts):
    """Even from a server slow to answer /metrics: the run waits for the first scrape, so that
    the counters' increase covers every request."""
    with ServerThread(MockServer(MockConfig(metrics_delay_s=0.2))) as server:
        result = run_against(server.url, prompts, interval=0.05, workload=Workload(AGENTS.sessions[:1], "test"))
    first_scrape = result.run.server_metrics["running"][0][0]
    assert first_scrape < 0 <= min(r.sent_s for r in result.records if r.sent_s is not None)


def test_a_server_without_metrics_gives_one_note_and_the_run_goes_on(prompts):
    with ServerThread(MockServer(MockConfig(metrics=False))) as server:
        result = run_against(server.url, prompts, interval=0.01)
    assert [r.status for r in result.records] == ["ok"] * 32
    notes = [w for w in result.warnings if "server metrics" in w]
    assert notes == [f"server metrics: {server.url}/metrics answered 404; the server has no /metrics, none scraped"]
    assert result.run.server_metrics == {} and "server" not in result.summary
    record = make_record(result, test="t", fingerprint={}, workload={}, git={})
    assert "server_metrics" not in record and "Server (/metrics)" not in html_page([record])
    with pytest.raises(SLOBreach, match="not measured"):
        result.assert_slo({"server.preemptions": "== 0"})


def test_scrapes_that_fail_are_counted_in_one_note():
    from mockserver import free_port

    from pytest_llmreplay.replayer.server_metrics import Scraper

    scraper = Scraper(f"http://127.0.0.1:{free_port()}", 0.01)  # nothing listens there
    scraper.start()
    time.sleep(0.1)
    scraped = scraper.stop()
    assert scraped.series == {} and len(scraped.notes) == 1
    assert re.fullmatch(
        r"server metrics: \d+ scrapes of http://\S+/metrics failed \(first: ConnectError: .*\)", scraped.notes[0]
    )
    assert int(scraped.notes[0].split()[2]) >= 3  # the first, some every 10 ms, the last


def test_a_metrics_page_that_trickles_is_given_up_on_and_the_run_is_not_held():
    """The client's timeout holds for each read: a /metrics page sent a byte at a time, each
    within it, held the run's start (which waits for the first scrape) and its end for as long
    as the page lasted (a review helper's reading; here a 60 s page)."""
    import threading

    from handlers import Handler
    from handlers import serving as serving_http

    from pytest_llmreplay.replayer.server_metrics import TIMEOUT_S, Scraper

    closing = threading.Event()

    class Trickle(Handler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            for _ in range(120):  # 60 s of a page, a byte every 0.5 s
                if closing.wait(0.5):
                    return
                try:
                    self.wfile.write(b"#")
                    self.wfile.flush()
                except OSError:
                    return

    with serving_http(Trickle) as url:
        scraper = Scraper(url, 60.0)
        started = time.monotonic()
        scraper.start()
        scraped = scraper.stop()
        took = time.monotonic() - started
        closing.set()
    assert took < 4 * TIMEOUT_S + 4  # two scrapes given up on: not the page's 60 s each
    assert scraped.series == {} and scraped.notes == [
        f"server metrics: 2 scrapes of {url}/metrics failed (first: TimeoutError: the page took longer than {TIMEOUT_S:g} s)"
    ]


def test_metrics_that_are_not_prometheus_text_are_noted_once(prompts):
    class HTMLMetrics(MockServer):
        async def metrics(self, request):
            return web.Response(text="<html>a dashboard</html>", content_type="text/html")

    with ServerThread(HTMLMetrics(MockConfig())) as server:
        result = run_against(server.url, prompts, interval=0.01)
    assert [w for w in result.warnings if "server metrics" in w] == [
        f"server metrics: {server.url}/metrics is not Prometheus text (invalid metric name:<html>a dashboard</html>); none scraped"
    ]
    assert result.run.server_metrics == {} and {r.status for r in result.records} == {"ok"}


def test_interval_zero_scrapes_nothing(prompts):
    with serving(prompts) as sim:
        result = run_against(sim.url, prompts, interval=0)
    assert result.run.server_metrics == {} and "server" not in result.summary
    assert not [w for w in result.warnings if "server metrics" in w]


def test_without_prometheus_client_one_note_says_scraping_is_off(prompts, monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    with serving(prompts) as sim:
        result = run_against(sim.url, prompts, interval=0.01)
    assert result.run.server_metrics == {}
    assert [w for w in result.warnings if "server metrics" in w] == [
        "server metrics: not scraped, prometheus_client is not installed (pip install 'pytest-llmreplay[metrics]')"
    ]


# -- the options -----------------------------------------------------------------------------------

TINY = "synthetic:\n  sessions: 3\n  input_tokens: 32\n  output_tokens: 4\n  seed: 1\n"
SCRAPING_TEST = """
import json

def test_served(llm_replay):
    result = llm_replay("tiny.yaml", concurrency=3, slo={"server.preemptions": "== 0", "server.kv_cache_usage.max": "< 90%"})
    json.dump(result.run.server_metrics, open("series.json", "w"))
"""


@pytest.mark.parametrize(("interval", "scraped"), [("0.05", True), ("0", False)])
def test_the_plugin_scrapes_the_served_simulator_at_its_interval(pytester, interval, scraped):
    import json

    pytester.path.joinpath("tiny.yaml").write_text(TINY)
    pytester.makepyfile(SCRAPING_TEST)
    result = pytester.runpytest(
        "-o", "llm_offline=false", "--llm-repeat", "1", f"--llm-metrics-interval={interval}", "--llm-report", "out"
    )
    if scraped:  # the server SLOs measured, and met
        result.assert_outcomes(passed=1)
        series = json.loads(pytester.path.joinpath("series.json").read_text())
        assert {"running", "kv_cache_usage", "preemptions"} <= set(series)
        page = pytester.path.joinpath("out", "index.html").read_text()
        assert "<h3>Server (/metrics)</h3>" in page
        for text in (
            "Requests on the server",
            "KV-cache usage",
            "Preemptions since the start",
            "SLO server.kv_cache_usage.max &lt; 90%",
        ):
            assert text in page
        assert page.index("<h3>Distributions</h3>") < page.index("<h3>Server (/metrics)</h3>")  # under the CDFs
    else:  # no series: the server SLOs are not measured, so they fail
        result.assert_outcomes(failed=1)
        assert json.loads(pytester.path.joinpath("series.json").read_text()) == {}
        result.stdout.fnmatch_lines(["*server.preemptions*not measured*BREACH*"])


def test_a_bad_metrics_interval_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-o", "llm_metrics_interval=often")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--llm-metrics-interval / llm_metrics_interval: expected a number of seconds >= 0 (0: off), got 'often'*"]
    )


def test_llmreplay_run_scrapes_and_stores_the_series(prompts, tmp_path, capsys):
    import json

    from pytest_llmreplay.cli.main import main

    workload = tmp_path / "w.yaml"
    workload.write_text(TINY)
    with serving(prompts) as sim:
        for interval, out in (("0.05", "on"), ("0", "off")):
            args = ["run", str(workload), "--endpoint", sim.url, "--concurrency", "2", "--out", str(tmp_path / out)]
            assert main([*args, "--metrics-interval", interval]) == 0
    printed = capsys.readouterr().out
    assert printed.count("Server (/metrics): preemptions 0;") == 1  # the run with scraping on
    stored = {out: json.loads((tmp_path / out / "result.json").read_text()) for out in ("on", "off")}
    assert stored["on"]["summary"]["server"]["preemptions"] == 0 and "server" not in stored["off"]["summary"]
    assert (
        set(stored["on"]["server_metrics"]) >= {"running", "prefix_cache_hits"}
        and "server_metrics" not in stored["off"]
    )


def test_a_bad_cli_metrics_interval_is_one_error_line(tmp_path, capsys):
    from pytest_llmreplay.cli.main import main

    workload = tmp_path / "w.yaml"
    workload.write_text(TINY)
    with pytest.raises(SystemExit):
        main(["run", str(workload), "--endpoint", "http://127.0.0.1:9", "--metrics-interval", "-1"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        "llmreplay run: error: argument --metrics-interval: expected a finite number >= 0, got '-1'"
    )
