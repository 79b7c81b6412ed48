"""The simulator's OpenAI-compatible HTTP server (``pytest_llmreplay.sim.server``) over real
sockets: httpx, the openai SDK and the replay driver as clients; prefix caching, /metrics,
EOS simulation, request errors, seeded faults, clusters; and ``llmreplay sim`` as a process.

Most tests share one server on a tiny profile whose every iteration lasts 1 ms (``FastTiming``)
and whose KV cache holds 512 blocks of 16 tokens (8,192 tokens); tests that count requests from
zero (faults) or need other settings start their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import IntEnum
from importlib.metadata import version
from typing import Any

import httpx
import numpy as np
import pytest
from mockserver import ServerThread, wait_until_gone

from pytest_llmreplay.sim import lag_window
from pytest_llmreplay.sim.cluster import ClusterConfig
from pytest_llmreplay.sim.engine import EngineConfig
from pytest_llmreplay.sim.faults import FaultConfig
from pytest_llmreplay.sim.profile import Profile, load_profile
from pytest_llmreplay.sim.roofline import ModelSpec
from pytest_llmreplay.sim.server import READY, SimServer
from pytest_llmreplay.target import start_sim_server
from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import PIECE_CHARS, load_tokenizer

BLOCK = 16
BLOCKS = 512
CAPACITY = BLOCK * BLOCKS  # tokens one engine's KV cache holds
TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps"


class FastTiming:
    """Every iteration lasts ``seconds`` (1 ms): a request of n tokens streams in ~n ms."""

    def __init__(self, seconds: float = 0.001) -> None:
        self.seconds = seconds

    def iteration_s(self, batch: Any) -> float:
        return self.seconds

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        return np.full(steps, self.seconds)


def tiny_profile(seconds: float = 0.001, name: str = "tiny-test") -> Profile:
    engine = EngineConfig(block_size=BLOCK, num_gpu_blocks=BLOCKS, max_num_seqs=64, max_num_batched_tokens=2048)
    return Profile(name=name, timing=FastTiming(seconds), engine=engine)


@pytest.fixture(scope="module")
def prompts() -> PromptFactory:
    return PromptFactory(load_tokenizer(None))


@contextmanager
def serving(prompts: PromptFactory, profile: Profile | None = None, **options: Any) -> Iterator[ServerThread]:
    with ServerThread(SimServer(profile or tiny_profile(), prompts, **options)) as thread:
        yield thread


@pytest.fixture(scope="module")
def sim(prompts) -> Iterator[ServerThread]:
    with serving(prompts) as thread:
        yield thread


# -- helpers ---------------------------------------------------------------------------------------

HTTP = httpx.Client(timeout=10)  # one client for the process (a new one builds an SSL context: ~40 ms)


@pytest.fixture(scope="session", autouse=True)
def _close_http() -> Iterator[None]:
    """Closed at the session's end, not the module's: other test modules import :func:`stream`."""
    yield
    HTTP.close()


_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{([^}]*)\})? (\S+)$")


def scrape(url: str) -> list[tuple[str, dict[str, str], float]]:
    """/metrics as (name, labels, value) samples."""
    response = HTTP.get(url + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = []
    for line in response.text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def metric(url: str, name: str, engine: str | None = "0") -> float:
    """One engine's sample of ``vllm:<name>`` (engine None: summed over engines)."""
    values = [
        v for n, labels, v in scrape(url) if n == f"vllm:{name}" and (engine is None or labels.get("engine") == engine)
    ]
    assert values, f"no sample of vllm:{name} for engine {engine}"
    return sum(values)


def events(response: httpx.Response) -> list[Any]:
    """The ``data:`` payloads of an SSE response: JSON objects, and the string ``[DONE]``."""
    out: list[Any] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
        else:
            assert line == "", f"unexpected SSE line {line!r}"
    return out


def stream(url: str, path: str, body: dict[str, Any], timeout: float = 10.0) -> list[Any]:
    with HTTP.stream("POST", url + path, json={**body, "stream": True}, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return events(response)


def post(url: str, path: str, body: Any, timeout: float = 10.0) -> httpx.Response:
    if isinstance(body, (bytes, str)):
        return HTTP.post(url + path, content=body, headers={"Content-Type": "application/json"}, timeout=timeout)
    return HTTP.post(url + path, json=body, timeout=timeout)


def token_events(items: list[Any]) -> list[dict[str, Any]]:
    """The events carrying a choice (not the usage-only one, not [DONE]), without chat's role event."""
    out = []
    for item in items:
        if isinstance(item, dict) and item.get("choices"):
            delta = item["choices"][0].get("delta")
            if delta is not None and "role" in delta:
                continue
            out.append(item)
    return out


def streamed_ids(items: list[Any]) -> list[int]:
    """Every token id of a stream sent with ``return_token_ids``, in order. (An event carries one
    token while the server keeps up; what came out since its last write goes as one event.)"""
    return [t for item in token_events(items) for t in item["choices"][0]["token_ids"]]


def finish_reasons(items: list[Any]) -> list[str | None]:
    return [item["choices"][0]["finish_reason"] for item in token_events(items)]


def chat_prompt_tokens(prompts: PromptFactory, messages: list[dict[str, str]]) -> int:
    """The documented chat template: ``<|role|>\\n`` + content + ``\\n`` per message, then ``<|assistant|>\\n``."""
    encode = prompts.tokenizer.encode
    count = sum(len(encode(f"<|{m['role']}|>\n")) + len(encode(m["content"])) + len(encode("\n")) for m in messages)
    return count + len(encode("<|assistant|>\n"))


def ids(start: int, count: int) -> list[int]:
    """Token ids no other test sends (each test takes its own range): no accidental cache hits."""
    return list(range(start, start + count))


async def _gather_posts(url: str, path: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await asyncio.gather(*(client.post(url + path, json=body) for body in bodies))


def post_all(url: str, path: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send ``bodies`` concurrently; their JSON replies (each must be 200)."""
    responses = asyncio.run(_gather_posts(url, path, bodies))
    assert [r.status_code for r in responses] == [200] * len(bodies), [r.text for r in responses]
    return [r.json() for r in responses]


# -- small routes ----------------------------------------------------------------------------------


def test_health_version_and_models(sim):
    health = HTTP.get(sim.url + "/health")
    assert (health.status_code, health.text) == (200, "ok")
    assert HTTP.get(sim.url + "/version").json() == {
        "version": version("pytest-llmreplay"),
        "engine": "llmreplay-sim",
        "profile": "tiny-test",
        "settings": sim.server.settings_digest(),
    }
    models = HTTP.get(sim.url + "/v1/models").json()
    assert models["object"] == "list"
    (card,) = models["data"]
    assert (card["id"], card["object"], card["root"], card["max_model_len"]) == (
        "tiny-test",
        "model",
        "tiny-test",
        CAPACITY,
    )


def test_model_option_renames_the_served_model(prompts):
    with serving(prompts, model="my-model") as thread:
        assert [m["id"] for m in HTTP.get(thread.url + "/v1/models").json()["data"]] == ["my-model"]
        reply = post(thread.url, "/v1/completions", {"model": "my-model", "prompt": TEXT, "max_tokens": 2}).json()
        assert reply["model"] == "my-model"
        assert any(labels.get("model_name") == "my-model" for _, labels, _ in scrape(thread.url))
        assert (
            post(thread.url, "/v1/completions", {"model": "tiny-test", "prompt": TEXT, "max_tokens": 2}).status_code
            == 404
        )


# -- completions and chat --------------------------------------------------------------------------


def test_completion_with_a_text_prompt(sim, prompts):
    reply = post(sim.url, "/v1/completions", {"prompt": TEXT, "max_tokens": 7, "return_token_ids": True}).json()
    assert reply["object"] == "text_completion" and reply["model"] == "tiny-test" and reply["id"].startswith("cmpl-")
    (choice,) = reply["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == 7
    # the text is the tokenizer's text of those ids: it re-encodes to exactly them
    assert prompts.tokenizer.encode(choice["text"]) == choice["token_ids"]
    prompt_tokens = len(prompts.tokenizer.encode(TEXT))
    assert reply["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 7,
        "total_tokens": prompt_tokens + 7,
        "prompt_tokens_details": {"cached_tokens": reply["usage"]["prompt_tokens_details"]["cached_tokens"]},
    }


def test_completion_with_token_ids_and_a_batch_of_one(sim):
    for prompt in (ids(50_000, 37), [ids(50_100, 37)]):
        reply = post(sim.url, "/v1/completions", {"prompt": prompt, "max_tokens": 5}).json()
        assert reply["usage"]["prompt_tokens"] == 37
        assert reply["usage"]["completion_tokens"] == 5 and reply["usage"]["total_tokens"] == 42
        assert reply["choices"][0]["finish_reason"] == "length"
        assert "token_ids" not in reply["choices"][0]


def test_default_max_tokens_is_16(sim):
    reply = post(sim.url, "/v1/completions", {"prompt": ids(50_200, 20)}).json()
    assert reply["usage"]["completion_tokens"] == 16


def test_streamed_completion_tokens_then_usage_and_done(sim):
    items = stream(
        sim.url,
        "/v1/completions",
        {
            "prompt": ids(51_000, 40),
            "max_tokens": 6,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert items[-1] == "[DONE]"
    usage_event = items[-2]
    assert usage_event["choices"] == [] and usage_event["object"] == "text_completion"
    assert usage_event["usage"]["prompt_tokens"] == 40 and usage_event["usage"]["completion_tokens"] == 6
    assert usage_event["usage"]["total_tokens"] == 46 and usage_event["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 0
    }
    tokens = items[:-2]
    assert token_events(items) == tokens and 1 <= len(tokens) <= 6
    assert len(streamed_ids(items)) == 6
    assert finish_reasons(items) == [None] * (len(tokens) - 1) + ["length"]
    assert len({e["id"] for e in tokens}) == 1 and tokens[0]["id"] == usage_event["id"]


def test_each_token_is_its_own_event_while_the_server_keeps_up(prompts):
    # 20 ms iterations: the server writes each token long before the next one comes out
    with serving(prompts, tiny_profile(0.02)) as thread:
        items = stream(
            thread.url, "/v1/completions", {"prompt": ids(52_000, 40), "max_tokens": 5, "return_token_ids": True}
        )
        assert [len(e["choices"][0]["token_ids"]) for e in token_events(items)] == [1] * 5
        assert finish_reasons(items) == [None] * 4 + ["length"] and items[-1] == "[DONE]" and len(items) == 6
        chat = stream(
            thread.url,
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": TEXT}], "max_tokens": 3, "return_token_ids": True},
        )
        assert [len(e["choices"][0]["token_ids"]) for e in token_events(chat)] == [1] * 3 and len(chat) == 5


def test_the_profiles_front_end_latency_comes_before_the_first_token(prompts):
    """timing.frontend_ms 300 and 1 ms iterations: no token can come out sooner than 0.3 s after
    the request was sent (a lower bound only: a slow machine may add to it, never take away)."""
    with serving(prompts, dataclasses.replace(tiny_profile(), frontend_ms=300.0)) as thread:
        sent = time.perf_counter()
        with HTTP.stream(
            "POST", thread.url + "/v1/completions", json={"prompt": ids(53_000, 8), "max_tokens": 2, "stream": True}
        ) as response:
            first = next(line for line in response.iter_lines() if line.startswith("data: {"))
            first_token_s = time.perf_counter() - sent
        assert json.loads(first[6:])["choices"][0]["text"] is not None
        assert first_token_s >= 0.3


def test_streamed_completion_without_include_usage_has_no_usage_event(sim, prompts):
    items = stream(sim.url, "/v1/completions", {"prompt": TEXT, "max_tokens": 3})
    assert items[-1] == "[DONE]" and 2 <= len(items) <= 4
    assert all(item["choices"] and "usage" not in item for item in items[:-1])
    assert len(prompts.tokenizer.encode("".join(item["choices"][0]["text"] for item in items[:-1]))) == 3
    assert "token_ids" not in items[0]["choices"][0]


def test_streamed_and_whole_chat(sim, prompts):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": TEXT}]
    prompt_tokens = chat_prompt_tokens(prompts, messages)
    whole = post(sim.url, "/v1/chat/completions", {"messages": messages, "max_tokens": 5}).json()
    assert whole["object"] == "chat.completion" and whole["id"].startswith("chatcmpl-")
    (choice,) = whole["choices"]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    assert len(prompts.tokenizer.encode(choice["message"]["content"])) == 5
    assert whole["usage"]["prompt_tokens"] == prompt_tokens and whole["usage"]["completion_tokens"] == 5

    items = stream(
        sim.url,
        "/v1/chat/completions",
        {
            "messages": messages,
            "max_completion_tokens": 4,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert items[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(item["object"] == "chat.completion.chunk" for item in items[:-1])
    tokens = token_events(items)
    assert items[1:-2] == tokens and 1 <= len(tokens) <= 4
    assert finish_reasons(items) == [None] * (len(tokens) - 1) + ["length"]
    text = "".join(e["choices"][0]["delta"]["content"] for e in tokens)
    token_ids = streamed_ids(items)
    assert len(token_ids) == 4 and prompts.tokenizer.encode(text) == token_ids
    assert items[-2]["choices"] == [] and items[-2]["usage"]["completion_tokens"] == 4
    assert items[-2]["usage"]["prompt_tokens"] == prompt_tokens
    assert items[-1] == "[DONE]"


def test_chat_content_parts_count_like_the_joined_text(sim, prompts):
    parts = [
        {"type": "text", "text": "The quick brown fox"},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": " jumps"},
    ]
    reply = post(
        sim.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": parts}], "max_tokens": 1}
    ).json()
    assert reply["usage"]["prompt_tokens"] == chat_prompt_tokens(
        prompts, [{"role": "user", "content": "The quick brown fox jumps"}]
    )


# -- prefix caching --------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [600, 608])
def test_a_repeated_prompt_hits_its_full_blocks(sim, length):
    prompt = ids(60_000 + length * 1000, length)
    body = {"prompt": prompt, "max_tokens": 2}
    first = post(sim.url, "/v1/completions", body).json()  # whole: stream_options only with a stream (vLLM)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    hits, queries = metric(sim.url, "prefix_cache_hits_total"), metric(sim.url, "prefix_cache_queries_total")
    items = stream(sim.url, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    # every full block of the prompt hits; a prompt that is all full blocks recomputes its last one
    full = length // BLOCK
    expected = (full - 1 if length % BLOCK == 0 else full) * BLOCK
    assert expected == {600: 592, 608: 592}[length]
    assert items[-2]["usage"]["prompt_tokens_details"]["cached_tokens"] == expected
    assert metric(sim.url, "prefix_cache_hits_total") - hits == expected
    assert metric(sim.url, "prefix_cache_queries_total") - queries == length


def test_a_chat_conversation_hits_its_earlier_turns(sim, prompts):
    first_messages = [
        {"role": "system", "content": "You help with long answers. " * 6},
        {"role": "user", "content": TEXT * 3},
    ]
    first = post(sim.url, "/v1/chat/completions", {"messages": first_messages, "max_tokens": 8}).json()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    reply = first["choices"][0]["message"]
    second_messages = first_messages + [reply, {"role": "user", "content": "And then?"}]
    items = stream(
        sim.url,
        "/v1/chat/completions",
        {"messages": second_messages, "max_tokens": 2, "stream_options": {"include_usage": True}},
    )
    usage = items[-2]["usage"]
    assert usage["prompt_tokens"] == chat_prompt_tokens(prompts, second_messages)
    # the first request's prompt is a prefix of the second's: at least all its full blocks hit
    assert usage["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] // BLOCK * BLOCK > 0


# -- /metrics --------------------------------------------------------------------------------------


def test_metrics_names_labels_and_counters(sim):
    samples = scrape(sim.url)
    names = {
        "num_requests_running",
        "num_requests_waiting",
        "kv_cache_usage_perc",
        "prefix_cache_queries_total",
        "prefix_cache_hits_total",
        "prompt_tokens_total",
        "generation_tokens_total",
        "num_preemptions_total",
    }
    vllm = {n.removeprefix("vllm:"): labels for n, labels, _ in samples if n.startswith("vllm:") and "engine" in labels}
    assert set(vllm) == names
    assert all(labels == {"engine": "0", "model_name": "tiny-test"} for labels in vllm.values())
    info = [(labels, value) for n, labels, value in samples if n == "vllm:cache_config_info"]
    assert info == [({"block_size": "16", "enable_prefix_caching": "True", "num_gpu_blocks": "512"}, 1.0)]
    text = HTTP.get(sim.url + "/metrics").text
    assert "# TYPE vllm:num_requests_running gauge" in text and "# TYPE vllm:prefix_cache_hits counter" in text

    before_gen, before_prompt = metric(sim.url, "generation_tokens_total"), metric(sim.url, "prompt_tokens_total")
    stream(sim.url, "/v1/completions", {"prompt": ids(70_000, 33), "max_tokens": 9})
    post(sim.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 4})
    assert metric(sim.url, "generation_tokens_total") - before_gen == 13
    assert metric(sim.url, "prompt_tokens_total") - before_prompt >= 33
    # nothing in flight between requests: idle gauges
    assert metric(sim.url, "num_requests_running") == 0 and metric(sim.url, "num_requests_waiting") == 0
    assert metric(sim.url, "kv_cache_usage_perc") == 0.0

    samples = scrape(sim.url)
    lag = {
        labels.get("quantile"): value for n, labels, value in samples if n.startswith("llmreplay:sim_emit_lag_seconds")
    }
    error = {
        labels.get("quantile"): value
        for n, labels, value in samples
        if n.startswith("llmreplay:sim_emit_error_seconds")
    }
    assert set(lag) == {"0.0", "0.01", "0.5", "0.99", "1.0", None} and set(error) == {"0.5", "0.9", "0.99", "1.0", None}
    assert lag[None] == error[None] >= 9  # the streamed request's chunks were measured
    assert lag["0.0"] <= lag["0.01"] <= lag["0.5"] <= lag["0.99"] <= lag["1.0"]
    assert 0 <= error["0.5"] <= error["0.9"] <= error["0.99"] <= error["1.0"] == max(-lag["0.0"], lag["1.0"])


def test_a_model_name_with_quotes_is_escaped_in_metrics_labels(prompts):
    with serving(prompts, model='my "model"\\v2') as thread:
        scrape(thread.url)  # every line is still a Prometheus sample
        assert (
            'vllm:num_requests_running{engine="0",model_name="my \\"model\\"\\\\v2"} 0.0'
            in HTTP.get(thread.url + "/metrics").text
        )


def test_emit_lag_is_nan_before_any_stream(prompts):
    with serving(prompts) as thread:
        samples = [
            (n, labels.get("quantile"), value) for n, labels, value in scrape(thread.url) if n.startswith("llmreplay:")
        ]
        assert {n for n, _, _ in samples} >= {
            "llmreplay:sim_emit_lag_seconds",
            "llmreplay:sim_emit_error_seconds_count",
        }
        assert all(value == 0 if q is None else np.isnan(value) for _, q, value in samples)


def test_lag_window_keeps_exactly_the_last_values_across_flushes_and_wraps(monkeypatch):
    monkeypatch.setattr(lag_window, "FLUSH", 7)  # flush often: every path of the ring is taken
    window = lag_window.LagWindow(10)
    added: list[float] = []
    for step in range(1, 40):
        batch = [float(step * 100 + i) for i in range(step % 4)]  # 0-3 values per hand-out
        if len(batch) == 1:
            window.add(batch[0])
        else:
            window.extend(batch)
        window.trim()
        added += batch
        assert sorted(window.values()) == sorted(added[-10:])
    window.extend([float(i) for i in range(25)])  # more than the window at once
    assert sorted(window.values()) == [float(i) for i in range(15, 25)]


def test_lag_window_quantiles_are_numpys_and_computed_off_the_event_loop(monkeypatch):
    values = np.random.default_rng(3).normal(0.0, 0.002, 1000)
    window = lag_window.LagWindow(600)
    window.extend(list(values))
    threads = []
    real_quantile = np.quantile

    def spying_quantile(*args, **kwargs):
        threads.append(threading.current_thread())
        return real_quantile(*args, **kwargs)

    monkeypatch.setattr(lag_window.np, "quantile", spying_quantile)
    lags, errors, count = asyncio.run(window.summaries((0.0, 0.5, 1.0), (0.5, 0.99)))
    last = values[-600:]
    assert count == 600
    np.testing.assert_array_equal(lags, real_quantile(last, (0.0, 0.5, 1.0)))
    np.testing.assert_array_equal(errors, real_quantile(np.abs(last), (0.5, 0.99)))
    assert threads and threading.main_thread() not in threads


# -- output lengths: max_tokens, min_tokens, ignore_eos --------------------------------------------


def test_without_eos_simulation_every_request_gives_max_tokens(sim):
    replies = post_all(
        sim.url, "/v1/completions", [{"prompt": ids(80_000 + 100 * i, 20), "max_tokens": 3 + i} for i in range(8)]
    )
    assert [r["usage"]["completion_tokens"] for r in replies] == [3 + i for i in range(8)]
    assert {r["choices"][0]["finish_reason"] for r in replies} == {"length"}


def test_eos_mean_tokens_stops_early_but_respects_min_tokens_and_ignore_eos(prompts):
    def lengths(replies):
        return [(r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]) for r in replies]

    def one_by_one(url, bodies):  # in order: request n draws the natural length of number n
        return lengths([post(url, "/v1/completions", body).json() for body in bodies])

    with serving(prompts, eos_mean_tokens=4) as thread:
        free = one_by_one(thread.url, [{"prompt": TEXT, "max_tokens": 64} for _ in range(20)])
        assert all(1 <= n <= 64 for n, _ in free)
        assert all(reason == ("stop" if n < 64 else "length") for n, reason in free)
        assert sum(reason == "stop" for _, reason in free) >= 10
        assert np.mean([n for n, _ in free]) < 16  # geometric with mean 4

        forced = lengths(
            post_all(
                thread.url,
                "/v1/chat/completions",
                [
                    {"messages": [{"role": "user", "content": TEXT}], "max_tokens": 64, "ignore_eos": True}
                    for _ in range(8)
                ],
            )
        )
        assert forced == [(64, "length")] * 8

        # min_tokens == max_tokens: exactly that many, finish "length"
        exact = lengths(
            post_all(
                thread.url, "/v1/completions", [{"prompt": TEXT, "max_tokens": 12, "min_tokens": 12} for _ in range(4)]
            )
        )
        assert exact == [(12, "length")] * 4

        # a stream stopped early: as many token events as completion_tokens, the last says "stop"
        items = stream(
            thread.url,
            "/v1/completions",
            {"prompt": TEXT, "max_tokens": 64, "return_token_ids": True, "stream_options": {"include_usage": True}},
        )
        generated = len(streamed_ids(items))
        assert generated == items[-2]["usage"]["completion_tokens"]
        assert finish_reasons(items)[-1] == ("stop" if generated < 64 else "length")
        assert items[-1] == "[DONE]"

    # vLLM masks EOS for the first min_tokens tokens and the chance of EOS is the same at every
    # later one: the natural length comes after min_tokens (a fresh server: the same draws)
    with serving(prompts, eos_mean_tokens=4) as thread:
        floor = one_by_one(thread.url, [{"prompt": TEXT, "max_tokens": 64, "min_tokens": 10} for _ in range(20)])
    assert floor == [(min(10 + n, 64), "stop" if 10 + n < 64 else "length") for n, _ in free]


# -- refused requests ------------------------------------------------------------------------------


REFUSED = [
    ("/v1/completions", b"{not json", 400, None),
    ("/v1/completions", b"[1, 2]", 400, None),
    ("/v1/completions", {"max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"prompt": "", "max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"prompt": [], "max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"prompt": [1, -2, 3], "max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"prompt": ["one prompt", "another"], "max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"prompt": [[1, 2], [3, 4]], "max_tokens": 4}, 400, "prompt"),
    ("/v1/completions", {"prompt": TEXT, "n": 2}, 400, "n"),
    ("/v1/completions", {"prompt": TEXT, "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": TEXT, "max_tokens": "8"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": TEXT, "max_tokens": True}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": TEXT, "min_tokens": -1}, 400, "min_tokens"),
    ("/v1/completions", {"prompt": TEXT, "max_tokens": 4, "min_tokens": 5}, 400, "min_tokens"),
    (
        "/v1/completions",
        {"prompt": list(range(CAPACITY + 1)), "max_tokens": 1},
        400,
        "input_tokens",
    ),  # longer than the context (vLLM's param)
    (
        "/v1/completions",
        {"prompt": list(range(CAPACITY)), "max_tokens": 1},
        400,
        "max_tokens",
    ),  # leaves no room for output (vLLM's param)
    ("/v1/completions", b"[" * 100_000 + b"]" * 100_000, 400, None),  # nested deeper than the JSON parser goes
    ("/v1/completions", {"prompt": TEXT, "n": True}, 400, "n"),
    ("/v1/completions", {"prompt": TEXT, "stream": "false"}, 400, "stream"),
    ("/v1/completions", {"prompt": TEXT, "ignore_eos": "false"}, 400, "ignore_eos"),
    ("/v1/completions", {"prompt": TEXT, "return_token_ids": 1}, 400, "return_token_ids"),
    ("/v1/completions", {"prompt": TEXT, "stream": True, "stream_options": "x"}, 400, "stream_options"),
    (
        "/v1/completions",
        {"prompt": TEXT, "stream": True, "stream_options": {"include_usage": "no"}},
        400,
        "stream_options.include_usage",
    ),
    ("/v1/completions", {"model": "gpt-4", "prompt": TEXT}, 404, "model"),
    ("/v1/chat/completions", {"max_tokens": 4}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [], "max_tokens": 4}, 400, "messages"),
    ("/v1/chat/completions", {"messages": ["hi"], "max_tokens": 4}, 400, "messages[0]"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": 5}], "max_tokens": 4},
        400,
        "messages[0].content",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}], "max_tokens": 4},
        400,
        "messages[0].content",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0},
        400,
        "max_completion_tokens",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi " * CAPACITY}], "max_tokens": 4},
        400,
        "input_tokens",
    ),
    ("/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
    (
        "/v1/completions",
        rb'{"prompt": "\ud800", "max_tokens": 2}',
        400,
        "prompt",
    ),  # an unpaired surrogate: not Unicode text
    ("/v1/completions", rb'{"prompt": "a\udc00", "max_tokens": 2, "stream": true}', 400, "prompt"),
    (
        "/v1/chat/completions",
        rb'{"messages": [{"role": "user", "content": "x\udc00y"}], "max_tokens": 2}',
        400,
        "messages[0].content",
    ),
    (
        "/v1/chat/completions",
        rb'{"messages": [{"role": "\ud800", "content": "hi"}], "max_tokens": 2}',
        400,
        "messages[0].role",
    ),
    # sampling vLLM refuses (a client sending it passed every test against the simulator)
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "temperature": "hot"}, 400, "temperature"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "top_p": 7}, 400, "top_p"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "top_k": -2}, 400, "top_k"),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    REFUSED,
    ids=[f"{p.rsplit('/', 1)[1]}-{s}-{q}-{i}" for i, (p, _, s, q) in enumerate(REFUSED)],
)
def test_refused_requests_get_an_openai_error_object(sim, path, body, status, param):
    running_before = metric(sim.url, "num_requests_running")
    response = post(sim.url, path, body)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["code"] == status
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")
    assert isinstance(error["message"], str) and error["message"]
    assert metric(sim.url, "num_requests_running") == running_before == 0


def test_refusal_messages_say_why(sim):
    too_long = post(sim.url, "/v1/completions", {"prompt": list(range(CAPACITY + 1)), "max_tokens": 16}).json()[
        "error"
    ]["message"]
    assert too_long.startswith(
        f"This model's maximum context length is {CAPACITY} tokens. However, your prompt contains at least {CAPACITY + 1} input tokens"
    )
    no_room = post(sim.url, "/v1/completions", {"prompt": list(range(CAPACITY)), "max_tokens": 16}).json()["error"][
        "message"
    ]
    assert no_room == "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    batched = post(sim.url, "/v1/completions", {"prompt": ["a", "b"]}).json()["error"]["message"]
    assert "batched prompts are not supported" in batched
    unknown = post(sim.url, "/v1/completions", {"model": "gpt-4", "prompt": "a"}).json()["error"]["message"]
    assert "gpt-4" in unknown
    # the largest request that fits is served
    fits = post(sim.url, "/v1/completions", {"prompt": ids(90_000, CAPACITY - 1), "max_tokens": 1}).json()
    assert fits["usage"]["prompt_tokens"] == CAPACITY - 1 and fits["usage"]["completion_tokens"] == 1


# -- the model's context and vocabulary, as vLLM applies them --------------------------------------

CONTEXT = 256  # the context of context_profile's model: far below its KV cache (CAPACITY)
HUGE_TEXT = " ".join(["word"] * 400_000)  # 2M characters: past encode_within's piece
VOCAB = 5000  # its vocabulary: past the bundled tokenizer's 4,096 ids


def context_profile() -> Profile:
    model = ModelSpec(
        "tiny-model",
        1e6,
        layers=2,
        hidden_size=64,
        heads=2,
        kv_heads=2,
        head_dim=32,
        vocab_size=VOCAB,
        max_position_embeddings=CONTEXT,
    )
    return dataclasses.replace(tiny_profile(), model=model)


@pytest.fixture(scope="module")
def context_sim(prompts) -> Iterator[ServerThread]:
    with serving(prompts, context_profile()) as thread:
        yield thread


def test_models_reports_the_models_context_and_the_kv_cache_caps_it(context_sim):
    assert HTTP.get(context_sim.url + "/v1/models").json()["data"][0]["max_model_len"] == CONTEXT
    small_cache = dataclasses.replace(context_profile(), engine=EngineConfig(block_size=16, num_gpu_blocks=8))
    assert small_cache.max_model_len == 128  # vLLM would not start with the model's 256: its largest that fits
    assert load_profile("llama-3.1-8b-h100").max_model_len == 131_072  # not its 440,112-token KV cache


def test_a_prompt_past_the_context_is_refused_with_vllms_message(context_sim):
    for length, param, start in (
        (
            CONTEXT + 1,
            "input_tokens",
            "This model's maximum context length is 256 tokens. However, your prompt contains at least 257 input tokens",
        ),
        (CONTEXT, "max_tokens", "max_tokens must be at least 1, got 0."),
    ):
        reply = post(context_sim.url, "/v1/completions", {"prompt": ids(200, length), "max_tokens": 1})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == param
        assert reply.json()["error"]["message"].startswith(start)
    chat = post(context_sim.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": TEXT * 40}]})
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "input_tokens"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/chat/completions",
            {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": HUGE_TEXT}]},
        ),
        ("/v1/completions", {"prompt": HUGE_TEXT}),
    ],
    ids=["chat", "completions"],
)
def test_a_huge_text_prompt_is_refused_without_tokenizing_it_whole(recording_tokenizer, path, body):
    """A 15 MB message took the server 2.2 GB to tokenize before its refusal: it is tokenized a
    piece at a time, only until it is past the context."""
    with serving(PromptFactory(recording_tokenizer), context_profile()) as server:
        reply = post(server.url, path, body)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "input_tokens"
    assert reply.json()["error"]["message"].startswith(
        f"This model's maximum context length is {CONTEXT} tokens. However, your prompt contains at least "
    )
    assert max(recording_tokenizer.encoded) <= PIECE_CHARS < len(HUGE_TEXT)


def test_max_tokens_past_the_context_is_cut_to_what_it_leaves(context_sim):
    reply = post(context_sim.url, "/v1/completions", {"prompt": ids(1000, CONTEXT - 10), "max_tokens": 100}).json()
    assert (reply["usage"]["completion_tokens"], reply["choices"][0]["finish_reason"]) == (10, "length")


def test_default_max_tokens_is_16_for_completions_and_the_context_left_for_chat(context_sim):
    completion = post(context_sim.url, "/v1/completions", {"prompt": ids(1500, 20)}).json()
    assert completion["usage"]["completion_tokens"] == 16
    explicit_null = post(context_sim.url, "/v1/completions", {"prompt": ids(1600, 20), "max_tokens": None}).json()
    assert explicit_null["usage"]["completion_tokens"] == 16  # as absent (vLLM 0.32)
    chat = post(context_sim.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": TEXT}]}).json()
    assert chat["usage"]["completion_tokens"] == CONTEXT - chat["usage"]["prompt_tokens"]
    assert chat["choices"][0]["finish_reason"] == "length"
    chat_null = post(
        context_sim.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": TEXT}], "max_tokens": None}
    ).json()
    assert chat_null["usage"]["completion_tokens"] == CONTEXT - chat_null["usage"]["prompt_tokens"]


def test_token_ids_past_the_vocabulary_are_refused(context_sim):
    ok = post(context_sim.url, "/v1/completions", {"prompt": [1, VOCAB - 1], "max_tokens": 1})
    assert ok.status_code == 200
    reply = post(context_sim.url, "/v1/completions", {"prompt": [1, VOCAB, 2], "max_tokens": 1})
    assert reply.status_code == 400
    assert (
        reply.json()["error"]["param"] == "prompt"
        and f"Token id {VOCAB} is out of vocabulary" in reply.json()["error"]["message"]
    )


def test_prompt_tokens_total_counts_the_whole_prompt_cached_or_not(context_sim):
    before = metric(context_sim.url, "prompt_tokens_total")
    body = {"prompt": ids(3000, 64), "max_tokens": 1}
    post(context_sim.url, "/v1/completions", body)
    second = post(context_sim.url, "/v1/completions", body).json()
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 48  # its last block recomputed
    assert metric(context_sim.url, "prompt_tokens_total") - before == 64 + 64


# -- fault injection -------------------------------------------------------------------------------


def _replies(url: str, count: int) -> list[httpx.Response]:
    return [HTTP.post(url + "/v1/completions", json={"prompt": [7, 8, 9], "max_tokens": 1}) for _ in range(count)]


def test_error_rate_fails_the_requests_the_seed_says(prompts):
    faults = FaultConfig(error_rate=0.3, seed=1)
    predicted = [500 if (f := faults.draw(n, 1)) is not None and f.kind == "error" else 200 for n in range(100)]
    assert 15 <= predicted.count(500) <= 45
    with serving(prompts, faults=faults) as thread:
        replies = _replies(thread.url, 100)
        assert metric(thread.url, "generation_tokens_total") == predicted.count(200)  # a 500 never reaches the engine
    assert [r.status_code for r in replies] == predicted
    failed = next(r for r in replies if r.status_code == 500)
    assert failed.json() == {
        "error": {
            "message": "injected fault (fault_error_rate)",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
    with serving(prompts, faults=FaultConfig(error_rate=0.3, seed=1)) as thread:  # a fresh server, the same seed
        assert [r.status_code for r in _replies(thread.url, 100)] == predicted
    with serving(prompts, faults=FaultConfig(error_rate=0.3, seed=2)) as thread:
        assert [r.status_code for r in _replies(thread.url, 100)] != predicted


def _cut_stream(url: str, body: dict[str, Any], timeout: float = 1.0) -> int:
    """Stream ``body``; the tokens received before the server closed the connection early."""
    received: list[Any] = []

    def read_stream() -> None:
        with HTTP.stream(
            "POST", url + "/v1/completions", json={**body, "stream": True, "return_token_ids": True}, timeout=timeout
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    received.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))

    with pytest.raises(httpx.RemoteProtocolError):  # not a timeout: the server closed the connection
        read_stream()
    assert "[DONE]" not in received
    return len(streamed_ids(received))


def test_disconnects_cut_every_stream_and_the_engine_releases_the_requests(prompts):
    with serving(prompts, faults=FaultConfig(disconnect_rate=1.0, seed=0)) as thread:
        with pytest.raises(httpx.RemoteProtocolError):  # a whole response is cut too: no response at all
            post(thread.url, "/v1/completions", {"prompt": ids(100_900, 40), "max_tokens": 2}, timeout=1.0)
        for index in range(4):
            received = _cut_stream(thread.url, {"prompt": ids(100_000 + 100 * index, 40), "max_tokens": 2})
            assert received < 2
        time.sleep(0.05)  # let the engine finish the iteration the aborted requests were in
        assert metric(thread.url, "num_requests_running") == 0
        assert metric(thread.url, "num_requests_waiting") == 0
        assert metric(thread.url, "kv_cache_usage_perc") == 0.0


def test_a_client_that_goes_away_mid_stream_is_dropped_from_the_engine(prompts):
    with serving(prompts, tiny_profile(0.005)) as thread:
        with HTTP.stream(
            "POST", thread.url + "/v1/completions", json={"prompt": ids(105_000, 40), "max_tokens": 200, "stream": True}
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    break
        # closing the response closes the connection: the server aborts the request on its next write
        deadline = time.perf_counter() + 2.0
        while metric(thread.url, "num_requests_running") and time.perf_counter() < deadline:
            time.sleep(0.01)
        assert metric(thread.url, "num_requests_running") == 0 and metric(thread.url, "kv_cache_usage_perc") == 0.0
        assert metric(thread.url, "generation_tokens_total") < 200  # it stopped generating (200 tokens take 1 s)
        reply = post(thread.url, "/v1/completions", {"prompt": ids(105_100, 10), "max_tokens": 3}).json()
        assert reply["usage"]["completion_tokens"] == 3


def test_a_client_that_gives_up_on_a_whole_response_is_dropped_from_the_engine(prompts):
    with serving(prompts, tiny_profile(0.005)) as thread:
        with pytest.raises(httpx.ReadTimeout):  # 200 tokens take 1 s; the client waits 0.2 s
            httpx.post(
                thread.url + "/v1/completions", json={"prompt": ids(106_000, 40), "max_tokens": 200}, timeout=0.2
            )
        deadline = time.perf_counter() + 2.0
        while metric(thread.url, "num_requests_running") and time.perf_counter() < deadline:
            time.sleep(0.01)
        assert metric(thread.url, "num_requests_running") == 0 and metric(thread.url, "kv_cache_usage_perc") == 0.0
        assert metric(thread.url, "generation_tokens_total") < 200  # it stopped generating


def test_a_request_aborted_during_its_last_iteration_does_not_stop_the_engine():
    """What the server does when a client goes away (``Cluster.abort``), at a moment the engine's
    iteration that would produce the request's last token is already under way: the engine must
    drop the request and go on serving. On the virtual clock (1 s per iteration) to hit that moment."""
    from pytest_llmreplay.replayer.clock import VirtualClock
    from pytest_llmreplay.sim.cluster import Cluster

    clock = VirtualClock()

    async def main():
        cluster = Cluster(tiny_profile(1.0), clock, spans=False)
        cluster.start()
        try:
            job = cluster.submit(ids(1, 20), [1001, 1002])  # token 1 at t=1, its last token at t=2
            await clock.sleep_until(1.5)
            assert job.tokens == [1]
            cluster.abort(job)  # during the iteration that would end it
            after = cluster.submit(ids(100, 20), [1003, 1004, 1005])
            await asyncio.wait({after.done}, timeout=30)  # virtual seconds: 4 are enough
            task = cluster.engines[0]._task
            crash = task.exception() if task is not None and task.done() else None
            return job, after, cluster.stats(), crash
        finally:
            await cluster.stop()

    job, after, stats, crash = clock.run(main())
    assert after.done.done(), f"the engine stopped serving after the abort (its task raised {crash!r})"
    assert after.generated == 3 and not job.done.done()
    assert (
        stats["num_requests_running"] == 0
        and stats["num_requests_waiting"] == 0
        and stats["kv_cache_usage_perc"] == 0.0
    )


class _SlowTokenizer:
    """The bundled tokenizer, taking ``delay_s`` more to encode a prompt (a text of 100
    characters or more; the prompt factory's word list is built from short ones); ``began``:
    the ``time.perf_counter()`` at which each such encoding started."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s
        self.name, self.vocab_size = inner.name, inner.vocab_size
        self.began: list[float] = []

    def encode(self, text: str) -> list[int]:
        if len(text) >= 100:
            self.began.append(time.perf_counter())
            time.sleep(self.delay_s)
        return self.inner.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(ids)


def test_the_servers_own_tokenizing_is_not_model_time(prompts):
    """An idle engine's iteration starts when the request was received, not once the server
    has tokenized it: the first token is simulated one iteration (0.2 s) after receipt, and goes
    out as soon as the tokenizing (0.12 s) is done, not 0.12 s + 0.2 s after receipt."""
    slow = PromptFactory(_SlowTokenizer(prompts.tokenizer, 0.12))
    with serving(slow, tiny_profile(0.2)) as thread:
        jobs: list[Any] = []
        submit = thread.server.cluster.submit
        thread.server.cluster.submit = lambda *args, **options: jobs.append(submit(*args, **options)) or jobs[-1]
        for attempt in range(2):  # the second: the engine went idle after an iteration
            items = stream(thread.url, "/v1/completions", {"prompt": TEXT * 2 + str(attempt), "max_tokens": 1})
            assert finish_reasons(items) == ["length"]
            first = jobs[-1].first
            assert first.arrival_s <= slow.tokenizer.began[-1]  # received before tokenizing began, not after it
            assert first.times[0] - first.arrival_s == pytest.approx(0.2, abs=1e-6)


def test_a_disconnect_comes_after_the_drawn_token(prompts):
    """The fault's ``after_tokens`` (drawn in [1, max_tokens - 1]) tokens reach the client, then
    the connection closes (faults.py: "the connection is closed after such a token")."""
    max_tokens, count = 8, 5
    # a seed whose first requests cut well before their end (so the engine is never asked to
    # finish an aborted request, see test_disconnects_cut_every_stream...)
    seed = next(
        s
        for s in range(1000)
        if all(FaultConfig(disconnect_rate=1.0, seed=s).draw(n, max_tokens).after_tokens <= 4 for n in range(count))
        and any(FaultConfig(disconnect_rate=1.0, seed=s).draw(n, max_tokens).after_tokens == 1 for n in range(count))
    )
    faults = FaultConfig(disconnect_rate=1.0, seed=seed)
    with serving(prompts, tiny_profile(0.005), faults=faults) as thread:
        received = [
            _cut_stream(thread.url, {"prompt": ids(110_000 + 100 * n, 24), "max_tokens": max_tokens})
            for n in range(count)
        ]
    assert received == [faults.draw(n, max_tokens).after_tokens for n in range(count)]


def test_stalls_delay_streams_that_still_complete(prompts):
    with serving(prompts, faults=FaultConfig(stall_rate=1.0, stall_s=0.3, seed=2)) as thread:
        for index in range(2):
            started = time.perf_counter()
            items = stream(
                thread.url,
                "/v1/completions",
                {
                    "prompt": ids(120_000 + 100 * index, 30),
                    "max_tokens": 6,
                    "return_token_ids": True,
                    "stream_options": {"include_usage": True},
                },
            )
            elapsed = time.perf_counter() - started
            assert elapsed >= 0.3
            assert (
                len(streamed_ids(items)) == 6 and items[-2]["usage"]["completion_tokens"] == 6 and items[-1] == "[DONE]"
            )
            assert finish_reasons(items)[-1] == "length"
        for path, body in (
            ("/v1/completions", {"prompt": ids(120_200, 30)}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": TEXT}]}),
        ):
            # one token: the stall strikes after the last one, which must still carry the finish_reason
            items = stream(thread.url, path, {**body, "max_tokens": 1})
            assert finish_reasons(items) == ["length"] and items[-1] == "[DONE]"
        started = time.perf_counter()
        whole = post(thread.url, "/v1/completions", {"prompt": ids(120_500, 30), "max_tokens": 6})
        assert time.perf_counter() - started >= 0.3
        assert whole.status_code == 200 and whole.json()["usage"]["completion_tokens"] == 6
        # a faulty stream's lag is its fault: the server's own timing error leaves it out
        lag_count = [v for n, labels, v in scrape(thread.url) if n == "llmreplay:sim_emit_lag_seconds_count"]
        assert lag_count == [0.0]
        assert metric(thread.url, "num_requests_running") == 0 and metric(thread.url, "kv_cache_usage_perc") == 0.0


# -- the openai SDK --------------------------------------------------------------------------------


@pytest.fixture(params=["in-process", "llmreplay sim"])
def sdk_url(request, sim) -> Iterator[str]:
    """The module's server thread, or ``llmreplay sim`` as a process with the same model name
    and block size (and the bundled profile's timing)."""
    if request.param == "in-process":
        yield sim.url
        return
    process, url = _sim_process("--model", "tiny-test", "--block-size", str(BLOCK))
    try:
        yield url
    finally:
        _stop(process, timeout=10)


def test_openai_sdk_chat_and_completions(sdk_url, prompts):
    import openai

    client = openai.OpenAI(base_url=sdk_url + "/v1", api_key="x", max_retries=0, timeout=10)
    assert [m.id for m in client.models.list()] == ["tiny-test"]
    messages = [{"role": "system", "content": "Be brief. " * 8}, {"role": "user", "content": TEXT * 2}]

    whole = client.chat.completions.create(model="tiny-test", messages=messages, max_tokens=6)
    assert whole.choices[0].message.role == "assistant" and whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 6 and whole.usage.prompt_tokens == chat_prompt_tokens(prompts, messages)

    chunks = list(
        client.chat.completions.create(
            model="tiny-test", messages=messages, max_tokens=5, stream=True, stream_options={"include_usage": True}
        )
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(prompts.tokenizer.encode(content)) == 5
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == 5
    # the same messages again: their full blocks are in the cache (a prompt of full blocks recomputes its last)
    full = usage.prompt_tokens // BLOCK - (usage.prompt_tokens % BLOCK == 0)
    assert usage.prompt_tokens_details.cached_tokens == full * BLOCK > 0

    completions = list(
        client.completions.create(
            model="tiny-test",
            prompt=ids(124_000, 50),
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in completions if c.choices)
    assert len(prompts.tokenizer.encode(text)) == 4 and completions[-1].usage.prompt_tokens == 50
    assert [c.choices[0].finish_reason for c in completions if c.choices][-1] == "length"
    assert completions[-1].usage.prompt_tokens_details.cached_tokens == 0

    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other", prompt="hi", max_tokens=1)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny-test", prompt="hi", max_tokens=2, extra_body={"min_tokens": 3})
    assert caught.value.body["param"] == "min_tokens"


# -- the replay driver -----------------------------------------------------------------------------


def test_replay_an_agentic_workload_against_the_server(sim, prompts):
    from pytest_llmreplay.metrics.result import Result
    from pytest_llmreplay.replayer.driver import replay
    from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
    from pytest_llmreplay.replayer.plan import ReplaySettings

    workload = generate(SyntheticSpec(sessions=6, input_tokens=48, output_tokens=6, turns=3, seed=3))
    assert workload.num_requests == 18
    before = metric(sim.url, "generation_tokens_total")
    run = replay(
        workload, HTTPEndpoint(sim.url, api="completions"), prompts, ReplaySettings(prompt_format="ids", concurrency=4)
    )
    result = Result(run)
    records = result.records
    assert [r.status for r in records] == ["ok"] * 18
    assert all(r.output_tokens == 6 for r in records)
    assert metric(sim.url, "generation_tokens_total") - before == 18 * 6
    first, later = [r for r in records if r.turn_index == 0], [r for r in records if r.turn_index > 0]
    assert len(first) == 6 and len(later) == 12
    assert all(r.cached_tokens == 0 for r in first)
    assert all(r.cached_tokens > 0 for r in later)
    for record in later:  # each later prompt extends the previous one: all its full blocks hit
        previous = next(
            p for p in records if p.session_id == record.session_id and p.turn_index == record.turn_index - 1
        )
        assert record.cached_tokens >= previous.prompt_tokens // BLOCK * BLOCK
    assert result.ok


# -- clusters --------------------------------------------------------------------------------------


def test_a_round_robin_cluster_of_two_engines(prompts):
    with serving(prompts, cluster=ClusterConfig(engines=2, router="round_robin")) as thread:
        replies = [
            post(thread.url, "/v1/completions", {"prompt": ids(121_000 + 100 * i, 20), "max_tokens": 3}).json()
            for i in range(4)
        ]
        assert [r["usage"]["completion_tokens"] for r in replies] == [3] * 4
        engines = {
            labels["engine"] for n, labels, _ in scrape(thread.url) if n.startswith("vllm:") and "engine" in labels
        }
        assert engines == {"0", "1"}
        for engine in ("0", "1"):  # requests 0 and 2 on engine 0, 1 and 3 on engine 1
            assert metric(thread.url, "generation_tokens_total", engine) == 6
            assert metric(thread.url, "prompt_tokens_total", engine) == 40
            assert metric(thread.url, "num_requests_running", engine) == 0
        assert HTTP.get(thread.url + "/v1/models").json()["data"][0]["max_model_len"] == CAPACITY


def test_a_disaggregated_cluster_streams_every_token(prompts):
    profile = load_profile("llama-3.1-8b-h100")
    with serving(prompts, profile, cluster=ClusterConfig(engines=1, prefill_engines=1)) as thread:
        items = stream(
            thread.url,
            "/v1/completions",
            {
                "prompt": ids(122_000, 64),
                "max_tokens": 5,
                "return_token_ids": True,
                "stream_options": {"include_usage": True},
            },
        )
        assert len(streamed_ids(items)) == 5
        reasons = finish_reasons(items)
        assert reasons == [None] * (len(reasons) - 1) + ["length"]
        assert items[-2]["usage"]["completion_tokens"] == 5 and items[-2]["usage"]["prompt_tokens"] == 64
        assert items[-1] == "[DONE]"
        chat = post(
            thread.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": TEXT}], "max_tokens": 4}
        ).json()
        assert chat["usage"]["completion_tokens"] == 4
        one = post(thread.url, "/v1/completions", {"prompt": ids(122_100, 10), "max_tokens": 1}).json()
        assert one["usage"]["completion_tokens"] == 1
        # engine 0 prefills and makes each first token; engine 1 decodes the rest, computing no prompt
        assert metric(thread.url, "generation_tokens_total", "0") == 3
        assert metric(thread.url, "generation_tokens_total", "1") == 4 + 3
        assert metric(thread.url, "prompt_tokens_total", "1") == 0
        assert metric(thread.url, "prompt_tokens_total", "0") == 64 + chat["usage"]["prompt_tokens"] + 10
        assert (
            metric(thread.url, "num_requests_running", None) == 0
            and metric(thread.url, "kv_cache_usage_perc", None) == 0.0
        )


def test_a_disaggregated_stream_whose_prefill_ends_before_its_headers_go_out(prompts, monkeypatch):
    """The decode half of a request takes the stream's writer when the prefill ends: a writer
    attached only after the headers were sent would leave that stream without tokens."""
    from aiohttp import web

    prepare = web.StreamResponse.prepare

    async def slow_prepare(self, request):
        await asyncio.sleep(0.3)  # the prefill (and the KV transfer) end meanwhile
        return await prepare(self, request)

    monkeypatch.setattr(web.StreamResponse, "prepare", slow_prepare)
    with serving(
        prompts, load_profile("llama-3.1-8b-h100"), cluster=ClusterConfig(engines=1, prefill_engines=1)
    ) as thread:
        items = stream(
            thread.url, "/v1/completions", {"prompt": ids(123_000, 64), "max_tokens": 200, "return_token_ids": True}
        )
        assert len(streamed_ids(items)) == 200 and items[-1] == "[DONE]"
        assert metric(thread.url, "generation_tokens_total", "1") > 0  # the decode engine made tokens after the prefill


# -- llmreplay sim as a process --------------------------------------------------------------------


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "pytest_llmreplay.cli.main", "sim", *argv]


def _first_line(process: subprocess.Popen, timeout: float = 30.0) -> str:
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(timeout), "llmreplay sim printed nothing"
    return process.stdout.readline()


def test_llmreplay_sim_serves_until_sigterm():
    process, url = _sim_process(
        "--model",
        "served",
        "--engines",
        "2",
        "--eos-mean-tokens",
        "1000",
        "--num-gpu-blocks",
        "64",
        "--block-size",
        "32",
    )
    try:
        assert int(url.rsplit(":", 1)[1]) > 0  # port 0: the one it picked
        assert (
            HTTP.get(url + "/v1/models").json()["data"][0]["max_model_len"] == 64 * 32
        )  # the engine options override the profile's
        info = [labels for n, labels, _ in scrape(url) if n == "vllm:cache_config_info"]
        assert info == [{"block_size": "32", "enable_prefix_caching": "True", "num_gpu_blocks": "64"}]
        assert HTTP.get(url + "/health").text == "ok"
        assert HTTP.get(url + "/version").json()["profile"] == "llama-3.1-8b-h100"
        assert [m["id"] for m in HTTP.get(url + "/v1/models").json()["data"]] == ["served"]
        items = stream(
            url,
            "/v1/completions",
            {
                "model": "served",
                "prompt": TEXT,
                "max_tokens": 4,
                "ignore_eos": True,
                "return_token_ids": True,
                "stream_options": {"include_usage": True},
            },
        )
        assert len(streamed_ids(items)) == 4 and items[-2]["usage"]["completion_tokens"] == 4 and items[-1] == "[DONE]"
        assert {labels["engine"] for n, labels, _ in scrape(url) if n == "vllm:num_requests_running"} == {"0", "1"}
        code, err = _stop(process, timeout=10)
        assert code == 0 and "Traceback" not in err, err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_plugins_sim_server_binds_its_own_port_and_is_found_from_its_ready_line():
    servers = [start_sim_server("llama-3.1-8b-h100", None, seed) for seed in (0, 1)]
    try:
        for server in servers:
            assert (
                server.args[server.args.index("--port") + 1] == "0"
            )  # no port picked here for another process to take
            assert HTTP.get(server.url + "/version").json()["profile"] == "llama-3.1-8b-h100"
        assert servers[0].url != servers[1].url
    finally:
        for server in servers:
            server.stop()


def test_the_plugins_sim_server_does_not_outlive_a_killed_test_run(tmp_path):
    """A run killed by SIGKILL (or SIGTERM, which pytest does not catch) runs no teardown: the
    server it started must notice its parent is gone and exit."""
    pid_file = tmp_path / "server.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pytest_llmreplay.target import start_sim_server\n"
                "server = start_sim_server('llama-3.1-8b-h100', None)\n"
                f"open({str(pid_file)!r}, 'w').write(str(server.process.pid)); time.sleep(60)"
            ),
        ]
    )
    try:
        deadline = time.perf_counter() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.perf_counter() < deadline:
            time.sleep(0.05)
        server_pid = int(pid_file.read_text())
        parent.kill()
        parent.wait()
        assert wait_until_gone(server_pid, 10), "the simulator server outlived the killed run"
    finally:
        parent.kill()


def _sim_process(*argv: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(_cli("--port", "0", *argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = _first_line(process)
    match = READY.search(line)  # what the plugin reads to find a server it started with --port 0
    assert match, line
    assert re.match(r"llmreplay sim: \S+ serving model '[^']+' on http://127\.0\.0\.1:\d+ \(Ctrl-C stops\)$", line), (
        line
    )
    return process, match.group(1)


def _stop(process: subprocess.Popen, timeout: float) -> tuple[int | None, str]:
    """SIGTERM; (exit status, or None if it did not exit within ``timeout`` s and was killed; stderr)."""
    process.send_signal(signal.SIGTERM)
    try:
        code: int | None = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
        process.kill()
        process.wait()
    return code, process.communicate()[1]


def test_llmreplay_sim_stops_promptly_with_a_stream_in_flight():
    process, url = _sim_process()
    try:
        with HTTP.stream(
            "POST", url + "/v1/completions", json={"prompt": TEXT, "max_tokens": 100_000, "stream": True}, timeout=30
        ) as response:
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            code, err = _stop(process, timeout=3)
            assert code == 0, f"llmreplay sim did not exit within 3 s of SIGTERM with a stream in flight (exit {code})"
            assert "Traceback" not in err, err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_llmreplay_sim_a_client_disconnect_prints_no_traceback():
    process, url = _sim_process()
    try:
        with HTTP.stream(
            "POST", url + "/v1/completions", json={"prompt": TEXT, "max_tokens": 1000, "stream": True}
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    break
        deadline = time.perf_counter() + 5.0
        while metric(url, "num_requests_running") and time.perf_counter() < deadline:
            time.sleep(0.02)
        assert metric(url, "num_requests_running") == 0 and metric(url, "generation_tokens_total") < 1000
        code, err = _stop(process, timeout=10)
        assert code == 0
        assert "Traceback" not in err and "Error handling request" not in err, err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


BAD_OPTIONS = [
    (
        ("--fault-error-rate", "0.6", "--fault-stall-rate", "0.6"),
        "--fault-error-rate + --fault-stall-rate + --fault-disconnect-rate",
    ),
    (("--engines", "0"), "--engines"),
    (("--num-gpu-blocks", "0"), "--num-gpu-blocks"),
    (("--eos-mean-tokens", "0.5"), "--eos-mean-tokens"),
    (("--timing-jitter", "1.5"), "--timing-jitter"),
    (("--profile", "nope"), "--profile"),
    (("--profile", "dynamo-mocker-polynomial", "--prefill-engines", "1"), "--kv-bytes-per-token"),
    (
        ("--profile", "dynamo-mocker-polynomial", "--prefill-engines", "1", "--kv-bytes-per-token", "inf"),
        "--kv-bytes-per-token",
    ),
    (("--num-gpu-blocks", str(10**12)), "--num-gpu-blocks"),
    (("--eos-mean-tokens", "inf"), "--eos-mean-tokens"),
    (("--port", "70000"), "--port"),
    (("--host", "999.1.1.1"), "--host"),
    (("--model", ""), "--model"),
    (("--model", "  "), "--model"),
]


def _main_in_thread(argv: list[str], timeout: float = 30.0) -> int | BaseException | None:
    """``cli.main(argv)`` in a worker thread (a command that wrongly starts serving cannot hang
    the suite: it would fail to install its signal handlers there): its exit status, the
    exception it raised, or None if still running after ``timeout`` s."""
    from pytest_llmreplay.cli.main import main

    outcome: list[int | BaseException] = []

    def target() -> None:
        try:
            outcome.append(main(argv))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else None


@pytest.mark.parametrize(
    ("argv", "option"),
    BAD_OPTIONS,
    ids=[option.split(" ")[0] + ("-sum" if "+" in option else "") for _, option in BAD_OPTIONS],
)
def test_llmreplay_sim_bad_options_say_which_one(capsys, argv, option):
    code = _main_in_thread(["sim", "--port", "0", *argv])
    out, err = capsys.readouterr()
    assert code == 1 and out == "", (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: {option}") or (option == "--kv-bytes-per-token" and option in lines[0]), lines[
        0
    ]


def test_llmreplay_sim_bad_option_as_a_process():
    done = subprocess.run(
        _cli("--port", "0", "--fault-error-rate", "0.6", "--fault-stall-rate", "0.6"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert (
        done.stderr
        == "error: --fault-error-rate + --fault-stall-rate + --fault-disconnect-rate: expected at most 1 in all\n"
    )


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--fault-stall-rate", "1.5", "a share from 0 to 1 such as 0.05 or 5%"),
        ("--fault-error-rate", "2", "a share from 0 to 1 such as 0.05 or 5%"),
        ("--fault-disconnect-rate", "-0.1", "a share from 0 to 1 such as 0.05 or 5%"),
        ("--fault-stall-s", "-3", "a finite number >= 0"),
        ("--fault-stall-s", "inf", "a finite number >= 0"),
    ],
)
def test_llmreplay_sim_bad_fault_numbers_are_usage_errors_naming_the_option(capsys, option, value, expected):
    """As ``llmreplay run``'s numbers: argparse's status 2 and its one line."""
    from pytest_llmreplay.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["sim", "--port", "0", option, value])
    assert exc.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == f"llmreplay sim: error: argument {option}: expected {expected}, got {value!r}"
    )


def test_llmreplay_sim_fault_rate_as_a_percentage():
    from pytest_llmreplay.cli.main import build_parser

    args = build_parser().parse_args(["sim", "--fault-stall-rate", "5%", "--fault-stall-s", "0"])
    assert (args.fault_stall_rate, args.fault_stall_s) == (0.05, 0.0)


@pytest.mark.parametrize(
    ("prompt", "accepted"),
    [
        ([0, 5, 99], True),
        ([3, IntEnum("Id", {"A": 7}).A], True),  # an int subclass, checked item by item
        ([], False),
        ([1, -1], False),
        ([1, True], False),
        ([1, 2.0], False),
        ([1, "2"], False),
        ("12", False),  # not a list
        ([1, 100], False),  # out of a vocabulary of 100
    ],
)
def test_token_id_prompts_are_checked_item_by_item(prompt, accepted):
    from pytest_llmreplay.sim.request_fields import BadRequest, check_token_ids

    if accepted:
        check_token_ids(prompt, 100)
    else:
        with pytest.raises(BadRequest):
            check_token_ids(prompt, 100)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--router", "kv_aware"],
            "error: --router kv_aware: one engine serves every request (--engines 1, --prefill-engines 0): "
            "give --engines N > 1 to route between engines",
        ),
        (
            ["--profile", "qwen3-30b-a3b-dp2-ep-h100", "--router", "least_loaded"],
            "error: --router least_loaded: --profile is one data-parallel server of 2 engines, balanced as vLLM "
            "balances them (vllm_dp); leave --router out",
        ),
        (
            ["--kv-transfer-gbps", "10"],
            "error: --kv-transfer-gbps: no KV moves without --prefill-engines N (disaggregated serving); "
            "give both or neither",
        ),
        (
            ["--engines", "2", "--kv-bytes-per-token", "1000"],
            "error: --kv-bytes-per-token: no KV moves without --prefill-engines N (disaggregated serving); "
            "give both or neither",
        ),
        (
            ["--fault-stall-s", "3"],
            "error: --fault-stall-s: no request stalls without --fault-stall-rate P > 0; give both or neither",
        ),
    ],
)
def test_llmreplay_sim_refuses_an_option_that_would_change_nothing(argv, expected):
    """A router with one engine, a KV link with no prefill pool, a stall length with no stalls were
    taken and ignored: a user believed they simulated what they asked for."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest_llmreplay.cli.main", "sim", "--port", "0", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (1, "", expected + "\n")


def test_llmreplay_sim_takes_the_cluster_options_where_they_apply():
    from pytest_llmreplay.cli.main import build_parser
    from pytest_llmreplay.cli.sim import refuse_idle_options

    for argv in (
        ["sim", "--engines", "2", "--router", "kv_aware"],
        ["sim", "--prefill-engines", "2", "--router", "least_loaded", "--kv-transfer-gbps", "10"],
        ["sim", "--fault-stall-rate", "1%", "--fault-stall-s", "2"],
        ["sim", "--router", "vllm_dp"],
    ):
        refuse_idle_options(build_parser().parse_args(argv), data_parallel=2 if "vllm_dp" in argv else 1)
