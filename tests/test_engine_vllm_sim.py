"""The simulator server as a stand-in for vLLM, held against vLLM's CPU build: the same requests go
to both and get the same answers, where the tiny random-weight model can show them.

vLLM serves the tiny model (``scripts/setup_vllm_cpu.py``: the server ``test_engine_vllm.py``'s
runs share for the session, ``shared_vllm``); the simulator server serves a profile of the same model, read from the model's ``config.json``
(context, vocabulary, shape), with vLLM's block size and the same served name. On both:

- ``/v1/models``' ``max_model_len`` is the model's context (``max_position_embeddings``);
- a prompt past the context, or one that fills it, is refused with 400 (same message and param
  for token ids; a chat prompt past it names the same param);
- a token id past the vocabulary is refused with 400; the last id of the vocabulary is served;
- ``max_tokens`` left out or ``null`` is 16 for completions and the context left for chat;
- ``vllm:prompt_tokens_total`` counts a repeated prompt whole, though most of it is cached
  (and the cached count is the same).

Not shown here: ``min_tokens`` adding to a naturally stopped length (``--eos-mean-tokens``): the
random model does not stop before ``max_tokens``, so vLLM gives nothing to compare it with.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mockserver import ServerThread
from test_engine_vllm import BLOCK, setup_vllm_cpu
from test_sim_server import tiny_profile

from pytest_llmreplay.sim.engine import EngineConfig
from pytest_llmreplay.sim.profile import Profile
from pytest_llmreplay.sim.roofline import ModelSpec
from pytest_llmreplay.sim.server import SimServer
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

pytestmark = pytest.mark.engine

SERVERS = ("vllm", "sim")
REQUEST_TIMEOUT_S = 120  # a prompt of the whole context, prefilled on 2 CPU cores


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    """The tiny model's ``config.json``."""
    return json.loads((Path(setup_vllm_cpu()["model"]) / "config.json").read_text())


def model_profile(config: dict[str, Any]) -> Profile:
    """A simulator profile of the model ``config`` describes; its KV cache holds 4 contexts, so the
    context is what bounds a request, as on the vLLM server (1 GiB of KV cache)."""
    context = config["max_position_embeddings"]
    model = ModelSpec(
        "tiny",
        1e6,
        layers=config["num_hidden_layers"],
        hidden_size=config["hidden_size"],
        heads=config["num_attention_heads"],
        kv_heads=config["num_key_value_heads"],
        head_dim=config["head_dim"],
        vocab_size=config["vocab_size"],
        max_position_embeddings=context,
    )
    return dataclasses.replace(
        tiny_profile(), model=model, engine=EngineConfig(block_size=BLOCK, num_gpu_blocks=4 * context // BLOCK)
    )


@pytest.fixture(scope="module")
def servers(shared_vllm, config) -> Iterator[dict[str, str]]:
    """The base URLs of vLLM (the session's shared server) and of the simulator server, both
    serving the model as ``tiny``."""
    with ServerThread(SimServer(model_profile(config), PromptFactory(load_tokenizer(None)), model="tiny")) as sim:
        yield {"vllm": shared_vllm.url(), "sim": sim.url}


def post_both(servers: dict[str, str], path: str, body: dict[str, Any]) -> dict[str, httpx.Response]:
    """The same request to each server, one after the other."""
    return {
        name: httpx.post(servers[name] + path, json={"model": "tiny", **body}, timeout=REQUEST_TIMEOUT_S)
        for name in SERVERS
    }


def statuses(replies: dict[str, httpx.Response]) -> dict[str, int]:
    return {name: reply.status_code for name, reply in replies.items()}


def errors(replies: dict[str, httpx.Response]) -> dict[str, dict[str, Any]]:
    return {name: reply.json()["error"] for name, reply in replies.items()}


def prompt_tokens_total(url: str) -> float:
    """``vllm:prompt_tokens_total`` summed over engines."""
    lines = httpx.get(url + "/metrics", timeout=REQUEST_TIMEOUT_S).text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("vllm:prompt_tokens_total{"))


def test_models_report_the_models_context(servers, config):
    for name, url in servers.items():
        [card] = httpx.get(url + "/v1/models", timeout=REQUEST_TIMEOUT_S).json()["data"]
        assert (card["id"], card["max_model_len"]) == ("tiny", config["max_position_embeddings"]), name


@pytest.mark.parametrize("past", [1, 0], ids=["past-the-context", "filling-it"])
def test_a_prompt_past_or_filling_the_context_is_refused_alike(servers, config, past):
    replies = post_both(
        servers, "/v1/completions", {"prompt": [7] * (config["max_position_embeddings"] + past), "max_tokens": 1}
    )
    assert statuses(replies) == {"vllm": 400, "sim": 400}
    found = errors(replies)
    assert (found["sim"]["message"], found["sim"]["param"]) == (found["vllm"]["message"], found["vllm"]["param"])


def test_a_chat_prompt_past_the_context_is_refused_alike(servers, config):
    context = config["max_position_embeddings"]
    replies = post_both(
        servers, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hello " * context}]}
    )
    assert statuses(replies) == {"vllm": 400, "sim": 400}
    for name, error in errors(replies).items():  # the prompt's length in it differs: vLLM stops counting at context + 1
        assert error["param"] == "input_tokens" and error["message"].startswith(
            f"This model's maximum context length is {context} tokens."
        ), (name, error)


def test_a_token_id_past_the_vocabulary_is_refused_alike(servers, config):
    vocab = config["vocab_size"]
    past = post_both(servers, "/v1/completions", {"prompt": [1, vocab, 2], "max_tokens": 1})
    assert statuses(past) == {"vllm": 400, "sim": 400}
    for name, error in errors(past).items():
        assert f"Token id {vocab} is out of vocabulary" in error["message"], (name, error)
    assert statuses(post_both(servers, "/v1/completions", {"prompt": [1, vocab - 1, 2], "max_tokens": 1})) == {
        "vllm": 200,
        "sim": 200,
    }


@pytest.mark.parametrize("left_out", [{}, {"max_tokens": None}], ids=["absent", "null"])
def test_max_tokens_left_out_is_16_for_completions_and_the_context_left_for_chat(servers, config, left_out):
    """``ignore_eos``: the random model could otherwise stop before either limit."""
    context = config["max_position_embeddings"]
    completions = post_both(servers, "/v1/completions", {"prompt": [1, 2, 3], "ignore_eos": True, **left_out})
    assert {name: reply.json()["usage"]["completion_tokens"] for name, reply in completions.items()} == {
        "vllm": 16,
        "sim": 16,
    }
    # a prompt that leaves about 100 tokens (2 per "hello "), so the default shows without a long decode
    chat = post_both(
        servers,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hello " * ((context - 120) // 2)}], "ignore_eos": True, **left_out},
    )
    for name, reply in chat.items():
        usage = reply.json()["usage"]
        assert usage["completion_tokens"] == context - usage["prompt_tokens"] > 16, (name, usage)
        assert reply.json()["choices"][0]["finish_reason"] == "length", name


def test_prompt_tokens_total_counts_a_repeated_prompt_whole(servers):
    body = {"prompt": list(range(1000, 1256)), "max_tokens": 1}  # 256 ids no other test sends
    before = {name: prompt_tokens_total(url) for name, url in servers.items()}
    first, second = post_both(servers, "/v1/completions", body), post_both(servers, "/v1/completions", body)
    counted = {name: prompt_tokens_total(url) - before[name] for name, url in servers.items()}
    assert counted == {"vllm": 512, "sim": 512}
    cached = {name: reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"] for name, reply in second.items()}
    assert cached == {"vllm": 224, "sim": 224}  # the full blocks of 32 but the last, whose last token is recomputed
    assert statuses(first) == {"vllm": 200, "sim": 200}
