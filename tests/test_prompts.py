"""PromptFactory: turns -> prompt token ids (and exact-length text) with the bundled tokenizer."""

from __future__ import annotations

import json

import pytest

from pytest_llmreplay import HashBlocks, LLMReplayError, Payload, Session, Synthetic, TokenIds, Turn, load_workload
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope="module")
def factory(tokenizer):
    return PromptFactory(tokenizer, seed=0)


def session(*turns: Turn, id: str = "s") -> Session:
    return Session(id, 0.0, tuple(turns))


def hashed(factory: PromptFactory, hash_ids, input_tokens: int, block_size: int = 4) -> list[int]:
    return factory.turn_ids(session(Turn(input_tokens, 1, HashBlocks(tuple(hash_ids), block_size))), 0)


def synthetic_ids(factory: PromptFactory, input_tokens: int, id: str = "s", **prompt) -> list[int]:
    return factory.turn_ids(session(Turn(input_tokens, 1, Synthetic(**prompt)), id=id), 0)


# --- token ids ---------------------------------------------------------------------------------


def test_token_ids_are_used_as_given(factory):
    ids = (5, 9, 5, 100_000, 0)  # even ids outside the tokenizer: they go out as ids
    assert factory.turn_ids(session(Turn(5, 1, TokenIds(ids))), 0) == list(ids)


# --- hash blocks -------------------------------------------------------------------------------


@pytest.mark.parametrize("input_tokens", [9, 10, 11, 12])
def test_hash_blocks_exact_length_last_block_cut(factory, input_tokens):
    full = hashed(factory, [1, 2, 3], 12)
    assert len(full) == 12
    assert hashed(factory, [1, 2, 3], input_tokens) == full[:input_tokens]


def test_equal_ids_equal_tokens_different_ids_different_tokens(factory):
    a = hashed(factory, [1, 2, 3], 12)
    b = hashed(factory, [1, 2, 7], 12)
    assert a[:8] == b[:8]
    assert a[8:] != b[8:]


def test_a_block_depends_only_on_its_id(factory):
    a = hashed(factory, [1, 2], 8)
    b = hashed(factory, [2, 1], 8)
    assert a[4:] == b[:4] and a[:4] == b[4:]
    assert hashed(factory, [2], 4, block_size=4) == b[:4]


def test_many_different_ids_give_pairwise_different_blocks(factory):
    ids = list(range(300)) + [len(factory.words) ** 2 - 1]
    tokens = hashed(factory, ids, 4 * len(ids))
    blocks = {tuple(tokens[i : i + 4]) for i in range(0, len(tokens), 4)}
    assert len(blocks) == len(ids)


def test_block_size_one(factory):
    tokens = hashed(factory, [3, 4, 3], 3, block_size=1)
    assert len(tokens) == 3 and tokens[0] == tokens[2]


def test_hash_ids_as_large_as_64_bit_hashes(factory):
    """Mooncake-style traces may carry 64-bit hashes as ids; the loader accepts any id >= 0."""
    ids = [2**63, 2**64 - 1, 2**63]
    tokens = hashed(factory, ids, 12)
    assert len(tokens) == 12
    assert tokens[:4] == tokens[8:] and tokens[:4] != tokens[4:8]


def test_hash_ids_of_a_loaded_trace(factory, tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 700, "output_length": 3, "hash_ids": [0, 1]},
        {"timestamp": 1, "input_length": 1000, "output_length": 3, "hash_ids": [0, 2]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    first, second = (factory.session_ids(s)[0] for s in load_workload(path))
    assert (len(first), len(second)) == (700, 1000)
    assert first[:512] == second[:512] and first[512:700] != second[512:700]


# --- synthetic ---------------------------------------------------------------------------------


def test_plain_synthetic_exact_length_and_per_session(factory):
    a, b = synthetic_ids(factory, 50, "a"), synthetic_ids(factory, 50, "b")
    assert len(a) == len(b) == 50
    assert a != b
    assert synthetic_ids(factory, 50, "a") == a


def test_salted_factories_share_no_tokens_but_are_deterministic(factory):
    session = Session(
        "s0", 0.0, (Turn(200, 8, prompt=Synthetic(prefix_group=0, prefix_tokens=64)), Turn(100, 8, prompt=Synthetic()))
    )
    block = HashBlocks((0, 1), block_size=16)
    one, again, other = factory.salted("digest-a"), factory.salted("digest-a"), factory.salted("digest-b")
    assert one.words is factory.words  # shared, not recomputed
    for index in (0, 1):
        assert one.turn_ids(session, index) == again.turn_ids(session, index)
        assert len({tuple(f.turn_ids(session, index)[:16]) for f in (factory, one, other)}) == 3
    assert one.hash_blocks(block, 32) == again.hash_blocks(block, 32) != other.hash_blocks(block, 32)


def test_prefix_group_shares_exactly_prefix_tokens(factory):
    a = synthetic_ids(factory, 30, "a", prefix_group=3, prefix_tokens=10)
    b = synthetic_ids(factory, 40, "b", prefix_group=3, prefix_tokens=10)
    other_group = synthetic_ids(factory, 30, "a", prefix_group=4, prefix_tokens=10)
    assert (len(a), len(b)) == (30, 40)
    assert a[:10] == b[:10]
    assert a[10] != b[10] and a[10:] != b[10:30]
    assert other_group[:10] != a[:10]


def test_longer_prefix_of_a_group_extends_the_shorter_one(factory):
    short = synthetic_ids(factory, 20, "a", prefix_group=1, prefix_tokens=8)
    long = synthetic_ids(factory, 20, "b", prefix_group=1, prefix_tokens=16)
    assert long[:8] == short[:8]


def test_prefix_longer_than_the_prompt_is_cut(factory):
    ids = synthetic_ids(factory, 6, "a", prefix_group=1, prefix_tokens=50)
    assert ids == synthetic_ids(factory, 60, "b", prefix_group=1, prefix_tokens=50)[:6]


def test_extends_previous_is_previous_prompt_response_and_new_tokens(factory):
    grown = session(
        Turn(20, 5, Synthetic()),
        Turn(40, 3, Synthetic(extends_previous=True)),
        Turn(60, 2, Synthetic(extends_previous=True)),
    )
    prompts = factory.session_ids(grown)
    assert [len(p) for p in prompts] == [20, 40, 60]
    response = factory.planned_response(grown, 0)
    assert len(response) == 5
    assert prompts[1][:25] == prompts[0] + response
    assert prompts[2][:43] == prompts[1] + factory.planned_response(grown, 1)
    # what a growth turn extends is the history handed in (the server's real response)
    history = prompts[0] + [7, 7, 7]
    assert factory.turn_ids(grown, 1, history)[:23] == history


def test_planned_response_uses_the_traces_output_ids(factory):
    turns = session(
        Turn(3, 2, TokenIds((1, 2, 3)), output_token_ids=(8, 9)), Turn(7, 1, Synthetic(extends_previous=True))
    )
    assert factory.session_ids(turns)[1][:5] == [1, 2, 3, 8, 9]


# --- seeds -------------------------------------------------------------------------------------


def test_same_seed_same_tokens_other_seed_other_tokens(tokenizer):
    mixed = session(
        Turn(12, 4, HashBlocks((1, 2, 3), 4)),
        Turn(30, 4, Synthetic(extends_previous=True)),
        Turn(20, 4, Synthetic(prefix_group=0, prefix_tokens=10)),
    )
    one, two, other = PromptFactory(tokenizer, 5), PromptFactory(tokenizer, 5), PromptFactory(tokenizer, 6)
    assert one.session_ids(mixed) == two.session_ids(mixed)
    assert all(a != b for a, b in zip(one.session_ids(mixed), other.session_ids(mixed), strict=True))


# --- text --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda f: hashed(f, [0, 1, 2, 99], 2000, block_size=512),
        lambda f: synthetic_ids(f, 777, "t", prefix_group=2, prefix_tokens=300),
        lambda f: f.session_ids(session(Turn(40, 30, Synthetic()), Turn(100, 1, Synthetic(extends_previous=True))))[1],
    ],
)
def test_generated_text_round_trips_to_the_same_ids(factory, tokenizer, make):
    ids = make(factory)
    text, encoded = factory.text(ids)
    assert encoded == ids
    assert tokenizer.encode(text) == ids


def test_text_of_arbitrary_ids_has_the_exact_length(factory, tokenizer):
    ids = list(range(0, 60)) + [tokenizer.vocab_size - 1] * 5  # specials and split bytes do not round-trip
    text, encoded = factory.text(ids)
    assert len(encoded) == len(ids)
    assert tokenizer.encode(text) == encoded


@pytest.mark.parametrize("bad", [4096, 10**6, -1])
def test_out_of_vocabulary_id(factory, bad):
    assert factory.tokenizer.vocab_size == 4096
    with pytest.raises(
        LLMReplayError, match=rf"token id {bad} is outside tokenizer 'llmreplay-bpe-4k' \(vocabulary 4096\)"
    ):
        factory.text([1, 2, bad])


def test_real_trace_ids_from_a_larger_vocabulary(factory, trace_data):
    workload = load_workload(trace_data / "llmservingsim" / "sharegpt-llama-3.1-8b-300-sps10.jsonl.gz")
    ids = factory.session_ids(workload.sessions[0])[0]
    assert len(ids) == workload.sessions[0].turns[0].input_tokens
    with pytest.raises(LLMReplayError, match="use the tokenizer the trace was made with"):
        factory.text(ids)


# --- turns without token ids -------------------------------------------------------------------


def test_payload_has_no_token_ids(factory):
    with pytest.raises(LLMReplayError, match="session 'p' turn 0: a verbatim payload has no token ids"):
        factory.turn_ids(session(Turn(None, None, Payload({"messages": []})), id="p"), 0)


@pytest.mark.parametrize("prompt", [Synthetic(), HashBlocks((1,), 4)])
def test_unknown_input_length(factory, prompt):
    with pytest.raises(LLMReplayError, match="session 'p' turn 0: no input length"):
        factory.turn_ids(session(Turn(None, 3, prompt), id="p"), 0)
