"""SGLang's ``POST /flush_cache`` answers 400 while requests run or wait: the reset asks again
until it is granted, and one refused past the wait fails the test with one line naming the URL,
the endpoint and the last answer (:meth:`~pytest_llmreplay.target.Target.reset_cache`), never a
run on a cache it did not empty. Against :class:`~mockserver.MockServer` scripted as SGLang."""

from __future__ import annotations

import pytest
from mockserver import MockServer, ServerThread
from test_plugin_perf import no_traceback

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.target import Target

SGLANG_BUSY = (
    "400 Bad Request: Cache flushed. Please check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)"
)


def test_a_flush_refused_while_busy_is_asked_again_until_granted():
    server = MockServer(flush_cache=[400, 400, 400, 200])
    with ServerThread(server) as thread:
        assert Target("live", thread.url + "/v1").reset_cache() == "POST /flush_cache"
    assert server.flush_posts == 4


def test_a_flush_refused_past_the_wait_is_an_error_naming_the_url_and_the_last_answer():
    server = MockServer(flush_cache=[400])
    with ServerThread(server) as thread, pytest.raises(LLMReplayError) as info:
        Target("live", thread.url + "/v1").reset_cache(busy_wait_s=0.3)
    assert str(info.value) == (
        f"prefix-cache reset: POST {thread.url}/flush_cache still refused after 0.3 s (requests still running?); "
        f"its last answer: {SGLANG_BUSY}"
    )
    assert server.flush_posts >= 2


def test_repeats_on_a_server_that_never_flushes_stop_the_test_with_one_line(project, monkeypatch):
    monkeypatch.setattr("pytest_llmreplay.target.BUSY_WAIT_S", 0.3)
    server = MockServer(flush_cache=[400])
    with ServerThread(server) as thread:
        result = project.runpytest("--llm-endpoint", thread.url, "--llm-repeat", "2")
    result.assert_outcomes(errors=1)  # in the llm_result fixture, as every replay that cannot run
    result.stdout.fnmatch_lines(
        [
            f"*prefix-cache reset: POST {thread.url}/flush_cache still refused after 0.3 s *; its last answer: 400 Bad Request: *"
        ]
    )
    assert server.completions_count == 0  # no run on a cache it did not empty
    no_traceback(result)
