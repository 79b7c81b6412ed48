"""A capacity search against a server measures each point as the offline simulator does: every
point on an empty prefix cache (the server's is reset before each, :meth:`Target.reset_cache`),
so against ``llmreplay sim`` each request of each point has the prompt, cached and output tokens
of the same request offline; a server with no reset is named once."""

from __future__ import annotations

import json

import pytest
from handlers import Handler, serving
from mockserver import free_port

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.gate.baseline import workload_digest
from pytest_llmreplay.search.capacity import CapacityPlan, Search, find_capacity
from pytest_llmreplay.target import Target, offline_target, start_sim_server
from pytest_llmreplay.workloads.formats import load_workload
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

# 12 sessions of distinct prompts, no prefix shared between them: offline, no request hits the
# cache; a point at concurrency 1 takes about half a second over HTTP
WORKLOAD = """\
synthetic:
  sessions: 12
  input_tokens: {dist: uniform, min: 1000, max: 2000}
  output_tokens: {dist: uniform, min: 4, max: 16}
  seed: 3
"""
PROFILE = "llama-3.1-8b-h100"


def tokens_by_point(found):
    """Per point (by load): each request's (prompt, cached, output) tokens, by session."""
    return {
        point.load: {
            record.session_id: (record.prompt_tokens, record.cached_tokens or 0, record.output_tokens)
            for record in point.result.run.records
        }
        for point in found.points
    }


def test_points_over_http_count_the_tokens_of_the_offline_points(tmp_path):
    path = tmp_path / "wl.yaml"
    path.write_text(WORKLOAD)
    workload = load_workload(path)
    prompts = PromptFactory(load_tokenizer(None), seed=0).salted(workload_digest(path))
    # every load passes: the two ends (1 and every session at once) run out, in that order
    plan = CapacityPlan(by="concurrency", slo={"ttft.p99": "< 60s"}, budget=2)
    offline = tokens_by_point(find_capacity(workload, offline_target(PROFILE, prompts), prompts, plan, workers=1))
    server = start_sim_server(PROFILE, None)
    try:
        # completions: the server counts the prompt as sent (chat adds its template's tokens)
        online = tokens_by_point(
            find_capacity(workload, Target("sim-server", server.url, api="completions", prompts=prompts), prompts, plan)
        )
    finally:
        server.stop()
    assert list(online) == list(offline) == [1, 12]
    assert all(cached == 0 for point in offline.values() for _, cached, _ in point.values())
    # the second point replays the first one's prompts: without a reset it hit their cache
    assert online == offline


class FakeServer(Handler):
    """Answers POST /reset_prefix_cache with the next of ``answers`` (a status, or a status and a
    JSON body; then 200), 404 elsewhere."""

    answers: list[int | tuple[int, dict]] = []
    posts: list[str] = []

    def do_POST(self):
        self.posts.append(self.path)
        answer = (self.answers.pop(0) if self.answers else 200) if self.path == "/reset_prefix_cache" else 404
        status, body = answer if isinstance(answer, tuple) else (answer, None)
        self.answer(status, json.dumps(body).encode() if body is not None else b"")


@pytest.fixture
def fake_server():
    FakeServer.answers, FakeServer.posts = [], []
    with serving(FakeServer) as url:
        yield url + "/v1"


def test_a_reset_refused_while_requests_are_in_flight_is_asked_again(fake_server):
    # our server answers 409 until it has seen the disconnects of a point stopped early
    FakeServer.answers = [409, 409]
    assert Target("live", fake_server).reset_cache() == "POST /reset_prefix_cache"
    assert FakeServer.posts == ["/reset_prefix_cache"] * 3


def test_vllm_refusing_a_reset_while_blocks_are_held_is_asked_again(fake_server):
    # vLLM's dev router answers 200 {"success": false} while blocks are held
    FakeServer.answers = [(200, {"success": False}), (200, {"success": False}), (200, {"success": True})]
    assert Target("live", fake_server).reset_cache() == "POST /reset_prefix_cache"
    assert FakeServer.posts == ["/reset_prefix_cache"] * 3


def test_a_reset_vllm_never_grants_is_an_error_naming_the_url_and_its_last_answer(fake_server):
    """vLLM has a reset but refused it past the wait: going on would measure a warm cache."""
    FakeServer.answers = [(200, {"success": False})] * 1000
    with pytest.raises(LLMReplayError) as info:
        Target("live", fake_server).reset_cache(busy_wait_s=0.3)
    assert str(info.value) == (
        f"prefix-cache reset: POST {fake_server.removesuffix('/v1')}/reset_prefix_cache still refused after 0.3 s "
        '(requests still running?); its last answer: 200 OK: {"success": false}'
    )
    assert FakeServer.posts.count("/reset_prefix_cache") >= 2 and "/flush_cache" not in FakeServer.posts


def test_a_server_busy_past_the_wait_is_an_error(fake_server):
    FakeServer.answers = [409] * 1000
    with pytest.raises(LLMReplayError, match=r"reset_prefix_cache still refused after 0\.3 s .*409 Conflict"):
        Target("live", fake_server).reset_cache(busy_wait_s=0.3)
    assert FakeServer.posts.count("/reset_prefix_cache") >= 2 and "/flush_cache" not in FakeServer.posts


def test_a_reset_answered_with_a_server_error_is_an_error_naming_the_url_and_the_answer(fake_server):
    FakeServer.answers = [(500, {"error": "engine core died"})]
    with pytest.raises(LLMReplayError) as info:
        Target("live", fake_server).reset_cache()
    base = fake_server.removesuffix("/v1")
    assert str(info.value) == (
        f'prefix-cache reset: POST {base}/reset_prefix_cache answered 500 Internal Server Error: {{"error": "engine core died"}}'
    )


def test_a_reset_that_gets_no_answer_is_an_error_naming_the_url(fake_server):
    """Not "answers neither POST /reset_prefix_cache ...": a server that is not there (it died) is
    no server without a reset."""
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(LLMReplayError) as info:
        Target("live", url + "/v1").reset_cache()
    assert str(info.value) == (
        f"prefix-cache reset: POST {url}/reset_prefix_cache: no answer (connection refused); is the server running?"
    )


class NoReset(Target):
    def reset_cache(self, busy_wait_s: float | None = None) -> None:
        self.resets = getattr(self, "resets", 0) + 1
        return None


def two_points_progress(tmp_path, target):
    """The progress lines of a search on ``target`` readying the server for two points."""
    path = tmp_path / "wl.yaml"
    path.write_text(WORKLOAD)
    lines = []
    search = Search(
        load_workload(path),
        target,
        PromptFactory(load_tokenizer(None), seed=0),
        CapacityPlan(by="concurrency", slo={"ttft.p99": "< 1s"}),
        progress=lines.append,
    )
    search.fresh_server()
    search.fresh_server()
    return lines


def test_a_server_with_no_reset_is_named_once_in_the_progress(tmp_path):
    target = NoReset("live", "http://127.0.0.1:9/v1")
    lines = two_points_progress(tmp_path, target)
    assert target.resets == 2
    assert lines == [
        "note: http://127.0.0.1:9/v1 answers neither POST /reset_prefix_cache (vLLM: VLLM_SERVER_DEV_MODE=1), POST /flush_cache (SGLang) "
        "nor POST /slots/{id}?action=erase (llama.cpp: --slot-save-path): each point may measure a prefix cache the previous one warmed"
    ]


def test_resets_turned_off_are_never_asked_and_said_once_in_the_progress(tmp_path):
    target = NoReset("live", "http://127.0.0.1:9/v1")
    target.without_cache_reset()  # llmreplay sweep --no-cache-reset
    lines = two_points_progress(tmp_path, target)
    assert getattr(target, "resets", 0) == 0
    assert target.fingerprint == {"cache_reset": "off"}
    assert lines == [
        "note: http://127.0.0.1:9/v1: cache not reset between runs (resets turned off): "
        "each point may measure a prefix cache the previous one warmed"
    ]
