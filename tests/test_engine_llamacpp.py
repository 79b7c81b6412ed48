"""End to end on a second real engine: llama.cpp's ``llama-server`` (the C++ server, built from
the sources llama-cpp-python's sdist vendors) serving a tiny random-weight GGUF Llama whose
tokenizer is the plugin's own.

``scripts/setup_llama_cpp.py`` builds the server and the model once per machine (cached outside
the checkout; the build time is in docs/engines.md). The server starts in about a second, so:

- the requests sent straight from our client (:class:`HTTPEndpoint`) go to one server for the
  module (``llama_server``), its slots erased before each test (``POST /slots/{id}?action=erase``,
  through :meth:`Target.reset_cache`, which names what it did);
- the perf tests run by the plugin in a pytester project declare the server (``server={"cmd":
  ...}`` in the marker, ``{port}`` chosen by the plugin), so the plugin starts and stops it: the
  script's 4-slot server for the agent tests, a one-slot one for the capacity search.

What must hold: chat and completions stream with usage (prompt counts exactly the plugin's
tokenizer's, plus ChatML's tokens on chat; every output token counted once); cached tokens are
read from what llama.cpp reports (``usage.prompt_tokens_details.cached_tokens`` in this build,
``timings.cache_n`` in every build) and are exactly the prompt's prefix in the slot's cache,
0 with ``cache_prompt: false``; repeats erase the slots and the report says so; the server's
``/metrics`` is scraped during a run and its prefix-cache hit rate equals the client's; a
capacity search bisects on it. About 25 s on the shared 2-core machine once built.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import test_engine_vllm
from mockserver import free_port
from test_cli_sweep import assert_bisected

from pytest_llmreplay.replayer.clock import WallClock
from pytest_llmreplay.replayer.endpoints import EndpointRequest, HTTPEndpoint, Response
from pytest_llmreplay.replayer.server_metrics import parse_exposition
from pytest_llmreplay.replayer.server_process import ServerProcess
from pytest_llmreplay.target import Target, live_fingerprint
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

pytestmark = pytest.mark.engine

RUN_TIMEOUT_S = 300
SLOTS = 4  # the setup script's --parallel
RESET = f"POST /slots/{{id}}?action=erase ({SLOTS} slots)"


@pytest.fixture(scope="module")
def llama_server(llamacpp, tmp_path_factory) -> Iterator[str]:
    """One llama-server for the module's direct requests, on a free loopback port; its URL."""
    port = free_port()
    server = ServerProcess(
        llamacpp["command"].replace("'{port}'", str(port)),
        f"http://127.0.0.1:{port}",
        startup_timeout_s=120,
        log_path=tmp_path_factory.mktemp("llama-log") / "llama-server.log",
    )
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def cold(llama_server) -> str:
    """The module's server, every slot erased (as a fresh server's): the reset repeats use."""
    assert Target("live", llama_server).reset_cache() == RESET
    return llama_server


def send(url: str, api: str, body: dict[str, Any]) -> Response:
    """One request through the plugin's HTTP endpoint (streamed, usage asked for)."""

    async def go() -> Response:
        endpoint, response = HTTPEndpoint(url, api=api, metrics_interval_s=0), Response()
        await endpoint.open(WallClock(), 1)
        try:
            await endpoint.send(EndpointRequest(api, body), response)
        finally:
            await endpoint.close()
        return response

    return asyncio.run(go())


def ids(count: int, seed: int) -> list[int]:
    """``count`` token ids of ordinary tokens (not the three special ones), varied by ``seed``."""
    return [3 + (seed * 7919 + i * 104729) % 4000 for i in range(count)]


# every chunk then has timings.predicted_n, which counts the tokens of one that holds several
EXACT = {"max_tokens": 8, "ignore_eos": True, "timings_per_token": True}


def test_llamacpp_streams_completions_and_chat_with_usage(cold):
    prompt = ids(64, 1)
    completion = send(cold, "completions", {"prompt": prompt, **EXACT})
    assert completion.error is None, completion.error
    assert (completion.prompt_tokens, completion.completion_tokens, completion.cached_tokens) == (64, 8, 0)
    assert sum(completion.chunk_tokens) == 8 and completion.finish_reason == "length"

    tokenizer = load_tokenizer(None)
    content = tokenizer.decode(ids(40, 2))
    chat = send(cold, "chat", {"messages": [{"role": "user", "content": content}], **EXACT})
    assert chat.error is None, chat.error
    # the model's ChatML template, tokenized by the plugin's tokenizer: the server's count exactly
    rendered = f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
    assert chat.prompt_tokens == len(tokenizer.encode(rendered))
    # the opening chunk (role, content null) is no token
    assert chat.completion_tokens == 8 and sum(chat.chunk_tokens) == 8
    assert chat.cached_tokens == 0 and chat.finish_reason == "length"


def test_llamacpp_cached_tokens_are_the_prefix_in_the_slot(cold):
    first, second = ids(300, 3), ids(200, 4)
    hits_before = parse_exposition(httpx.get(cold + "/metrics").text)["prefix_cache_hits"]
    # one output token: the slot then holds exactly the prompt (a sampled token's KV is never computed)
    assert send(cold, "completions", {"prompt": first, "max_tokens": 1}).cached_tokens == 0
    extended = send(cold, "completions", {"prompt": first + second, "max_tokens": 1})
    assert (extended.prompt_tokens, extended.cached_tokens) == (500, 300)
    # the same prompt again: all of it but the last token, whose logits must be computed
    again = send(cold, "completions", {"prompt": first + second, "max_tokens": 1})
    assert again.cached_tokens == 499
    uncached = send(cold, "completions", {"prompt": first + second, "max_tokens": 1, "cache_prompt": False})
    assert uncached.error is None and uncached.cached_tokens == 0
    # what the server itself counts (llamacpp:prompt_tokens_cached_total) rose by as much
    assert parse_exposition(httpx.get(cold + "/metrics").text)["prefix_cache_hits"] - hits_before == 300 + 499


def test_llamacpp_fingerprint_names_its_build(cold):
    fingerprint = live_fingerprint(cold, None, "--llm-endpoint")
    assert fingerprint["model"] == "tiny"
    assert fingerprint["server_version"].startswith("llama.cpp b") and "0c1e57098" in fingerprint["server_version"]


# the vLLM tests' agent, as many sessions as slots: each keeps its slot (its prefix), whatever the order
AGENT = test_engine_vllm.AGENT.replace("sessions: 6", f"sessions: {SLOTS}")
# 24 sessions of 128 tokens on a server of one slot: one at a time a first token waits for its
# prompt only, all at once for half the replies before it. Seen on the shared 2 cores (load 6-8):
# TTFT p50 one at a time 13 and 17 ms, all at once 657 and 702 ms; 0.1 s lies a factor 6 or more
# from each end
QUEUE = "synthetic:\n  sessions: 24\n  input_tokens: 64\n  output_tokens: 128\n  seed: 9\n"
CAPACITY_TTFT_S = 0.1
PERF_TESTS = """
import pytest

LLAMA = {"cmd": COMMAND}
ONE_SLOT = {"cmd": ONE_SLOT_COMMAND}


@pytest.mark.llmreplay(workload="agent.yaml", prompt_format="ids", concurrency=4, server=LLAMA,
                       slo={"error_rate": "== 0", "eligible_cache_hit_rate.mean": ">= 90%",
                            "server.prefix_cache_hit_rate": ">= 50%"})
def test_agent(llm_result):
    pass


@pytest.mark.llmreplay(workload="agent.yaml", prompt_format="ids", concurrency=4, server=LLAMA, repeat=2,
                       slo={"error_rate": "== 0"})
def test_agent_twice(llm_result):
    pass


@pytest.mark.llmreplay(workload="queue.yaml", server=ONE_SLOT,
                       capacity={"by": "concurrency", "slo": {"ttft.p50": "< THRESHOLD"}, "budget": 4},
                       slo={"capacity.concurrency": ">= 1", "error_rate": "== 0"})
def test_capacity(llm_result):
    pass
"""


@pytest.fixture
def project(pytester, llamacpp):
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("agent.yaml").write_text(AGENT)
    pytester.path.joinpath("queue.yaml").write_text(QUEUE)
    one_slot = llamacpp["command"].replace(f"--ctx-size {4 * 8192} --parallel {SLOTS}", "--ctx-size 8192 --parallel 1")
    assert one_slot != llamacpp["command"]
    pytester.makepyfile(
        test_perf=PERF_TESTS.replace("ONE_SLOT_COMMAND", repr(one_slot))
        .replace("COMMAND", repr(llamacpp["command"]))
        .replace("THRESHOLD", f"{CAPACITY_TTFT_S * 1e3:g}ms")
    )
    return pytester


def result_of(report: Path, test: str) -> dict:
    (found,) = (report / "tests").glob(f"test_perf.py_{test}-*.json")
    return json.loads(found.read_text())


def rows_of(report: Path, test: str) -> list[dict]:
    import csv

    (found,) = (report / "tests").glob(f"test_perf.py_{test}-*.csv")
    with found.open() as rows:
        return list(csv.DictReader(rows))


def test_llamacpp_perf_tests_on_a_declared_server(project):
    result = project.runpytest_subprocess(
        "--llm-api",
        "completions",
        "--llm-ignore-eos",
        "--llm-extra-body",
        '{"cache_prompt": true, "timings_per_token": true}',
        "--llm-metrics-interval",
        "0.2",
        "--llm-repeat",
        "1",
        "--llm-report",
        "report",
        "-p",
        "no:cacheprovider",
        "-v",
        timeout=RUN_TIMEOUT_S,
    )
    text = result.stdout.str()
    result.assert_outcomes(passed=3)
    assert "Traceback" not in text
    report = project.path / "report"
    # a llama-server per config: the 4-slot one started for the agent tests and kept for both,
    # then stopped for the capacity test's one-slot server (one server at a time)
    assert len(list((report / "servers").iterdir())) == 2

    # the agent: turn 0 hits nothing; a later turn hits at least the previous turn's prompt (the
    # history the plugin sends is the planned reply: llama.cpp streams no token ids, and the
    # sampled tokens are the slot's past that prompt)
    agent = rows_of(report, "test_agent")
    assert len(agent) == 16 and {r["status"] for r in agent} == {"ok"}
    assert all(r["output_tokens"] == r["planned_output_tokens"] == "24" for r in agent)
    by_turn = {(r["session_id"], int(r["turn_index"])): r for r in agent}
    for (session, turn), row in by_turn.items():
        cached, prompt = int(row["cached_tokens"]), int(row["prompt_tokens"])
        assert prompt == int(row["planned_prompt_tokens"]), (session, turn)
        if turn == 0:
            assert cached == 0, (session, turn)
            continue
        before = by_turn[session, turn - 1]
        assert row["history"] == "planned"
        assert int(before["prompt_tokens"]) <= cached < int(before["prompt_tokens"]) + 24, (session, turn, cached)

    # /metrics scraped during the run: llama.cpp's own series, its hit rate (from counters, so
    # whatever the scrapes' timing) the client's; its gauges read, though a run of half a second
    # scraped every 0.2 s may see no request in flight (CI saw running.max 0)
    agent_result = result_of(report, "test_agent")
    server = agent_result["summary"]["server"]
    assert server["running.max"] >= 0 and "preemptions" not in server
    cached = sum(int(r["cached_tokens"]) for r in agent)
    prompt = sum(int(r["prompt_tokens"]) for r in agent)
    assert server["prefix_cache_hit_rate"] == pytest.approx(cached / prompt)
    assert agent_result["fingerprint"]["server_version"].startswith("llama.cpp b")

    # repeats of the same prompts, each on erased slots (named in the result and the terminal):
    # each run hits the cache exactly as the first run on a fresh server did, turn 0 nothing
    twice = result_of(report, "test_agent_twice")
    assert [run["cache_reset"] for run in twice["runs"]] == [RESET, RESET]
    assert f"cache reset by {RESET} before each" in text
    first_hits = agent_result["summary"]["cache_hit_rate"]["mean"]
    assert [run["summary"]["cache_hit_rate"]["mean"] for run in twice["runs"]] == [first_hits, first_hits]
    last_run = rows_of(report, "test_agent_twice")  # the per-request rows are the last run's
    assert {r["cached_tokens"] for r in last_run if r["turn_index"] == "0"} == {"0"}

    # the capacity search: every point a real replay; the ends split by the SLO, then bisected
    result.stdout.fnmatch_lines(
        ["point 1/4    low concurrency 1: pass  ttft.p50 *", "point 2/4   high concurrency 24: FAIL  ttft.p50 *"]
    )
    search = result_of(report, "test_capacity")["capacity"]
    assert_bisected(search, CAPACITY_TTFT_S)
    assert len(search["points"]) == 4 and all(point["error_rate"] == 0 for point in search["points"])
