"""Keyed prompts: cache blocks named from (key, count) segments instead of generated tokens.

The promise: a keyed prompt names its blocks so that two prompts share a block hash exactly when
their token prompts (as PromptFactory.turn_ids makes them) share that block, so a replay with
keyed prompts gives the same numbers as one with token ids.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.engine import EngineConfig
from pytest_llmreplay.sim.kvcache import block_hashes, segment_block_hashes
from pytest_llmreplay.sim.polynomial import PolynomialTiming
from pytest_llmreplay.sim.profile import Profile
from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate
from pytest_llmreplay.workloads.prompts import Conversation, KeyedPrompt, PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer
from pytest_llmreplay.workloads.workload import HashBlocks, Session, Synthetic, TokenIds, Turn, Workload


@pytest.fixture(scope="module")
def factory():
    return PromptFactory(load_tokenizer(None), seed=0)


def tokens(segments):
    """Stand-in tokens for segments: token i of a segment is (key, i), depending only on the key."""
    return [(key, i) for key, count in segments for i in range(count)]


def shared(a, b):
    """How many leading entries two hash lists have in common."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def same_at(a, b):
    return [x == y for x, y in zip(a, b, strict=True)]


# --- segment_block_hashes ----------------------------------------------------------------------


def test_equal_segment_prefixes_give_equal_hashes():
    a = segment_block_hashes((("doc", 8), ("a", 8)), 4, 4)
    b = segment_block_hashes((("doc", 8), ("b", 8)), 4, 4)
    assert len(a) == len(b) == 4
    assert same_at(a, b) == [True, True, False, False]
    # the same segments named again give the same hashes (nothing random)
    assert segment_block_hashes((("doc", 8), ("a", 8)), 4, 4) == a


def test_a_different_key_in_the_middle_changes_every_hash_from_its_block_on():
    a = segment_block_hashes((("x", 8), ("y", 8), ("z", 8)), 4, 6)
    b = segment_block_hashes((("x", 8), ("other", 8), ("z", 8)), 4, 6)
    # blocks 0-1 are x in both; 2-3 differ; 4-5 are z in both but after different tokens
    assert same_at(a, b) == [True, True, False, False, False, False]
    assert len(set(a) | set(b)) == 2 + 4 + 4  # and no hash of one appears elsewhere in the other


def test_blocks_straddling_segment_boundaries_follow_the_documented_naming():
    # block size 6 over (a, 4) + (b, 8): block 0 = a[0:4] + b[0:2], block 1 = b[2:8]
    hashes = segment_block_hashes((("a", 4), ("b", 8)), 6, 2)
    chain = hash((0, hash("a"), 4))  # the chained hash of the segments before b
    assert hashes == [hash((chain, hash("b"), 2)), hash((chain, hash("b"), 8))]
    # a prompt that shares all of a and only b's first token still differs in block 0
    other = segment_block_hashes((("a", 4), ("b", 1), ("c", 7)), 6, 2)
    assert same_at(hashes, other) == [False, False]


@pytest.mark.parametrize("block_size", [3, 4, 6, 7])
def test_block_sizes_that_do_not_divide_segments_match_token_hashing(block_size):
    """Against real hashing of stand-in tokens: two keyed prompts share a block hash where their
    tokens share that block, for block sizes that cut segments anywhere."""
    prompts = [
        (("a", 5), ("b", 5), ("c", 5), ("d", 6)),
        (("a", 5), ("b", 5), ("x", 5), ("d", 6)),
        (("a", 5), ("b", 7), ("c", 9)),
        (("a", 5), ("b", 5), ("c", 5), ("e", 6)),
        (("a", 3), ("q", 18)),
    ]
    keyed = [segment_block_hashes(p, block_size, 100) for p in prompts]
    real = [block_hashes(tokens(p), block_size) for p in prompts]
    for i in range(len(prompts)):
        assert len(keyed[i]) == len(real[i]) == sum(c for _, c in prompts[i]) // block_size
        for j in range(len(prompts)):
            assert same_at(keyed[i], keyed[j]) == same_at(real[i], real[j]), (i, j)


def test_segments_5_5_5_in_blocks_of_4_share_what_the_tokens_share():
    # blocks end at 4 (in a), 8 (in b) and 12 (in c): the first two only depend on a and b
    abc = segment_block_hashes((("a", 5), ("b", 5), ("c", 5)), 4, 3)
    abd = segment_block_hashes((("a", 5), ("b", 5), ("d", 5)), 4, 3)
    ab7 = segment_block_hashes((("a", 5), ("b", 7)), 4, 3)  # block 2 = b[3:7] instead of b[3:5] + c[0:2]
    assert same_at(abc, abd) == [True, True, False]
    assert same_at(abc, ab7) == [True, True, False]


def test_asking_for_more_blocks_than_exist_returns_only_the_full_ones():
    assert len(segment_block_hashes((("a", 10),), 4, 10)) == 2  # 10 tokens: 2 full blocks of 4
    assert len(segment_block_hashes((("a", 6), ("b", 5)), 4, 99)) == 2  # 11 tokens
    assert segment_block_hashes((("a", 3),), 4, 5) == []
    # fewer asked: a prefix of the full list
    full = segment_block_hashes((("a", 6), ("b", 10)), 4, 4)
    assert segment_block_hashes((("a", 6), ("b", 10)), 4, 2) == full[:2]


# --- PromptFactory.keyed -----------------------------------------------------------------------


def one_turn(turn, id="s"):
    return Session(id, 0.0, (turn,))


@pytest.mark.parametrize("input_tokens", [33, 40, 48])
def test_keyed_hash_blocks_have_the_turns_length_last_block_cut(factory, input_tokens):
    session = one_turn(Turn(input_tokens, 4, HashBlocks((1, 2, 3), 16)))
    keyed = factory.keyed(session, 0)
    assert isinstance(keyed, KeyedPrompt)
    assert len(keyed) == input_tokens == len(factory.turn_ids(session, 0))
    assert [count for _, count in keyed.segments] == [16, 16, input_tokens - 32]


def test_keyed_hash_blocks_share_exactly_the_shared_hash_ids(factory):
    # hash blocks of 16, engine blocks of 8: 2 shared hash ids = 2 * 16 / 8 = 4 shared engine blocks
    a = one_turn(Turn(64, 4, HashBlocks((1, 2, 3, 4), 16)), "a")
    b = one_turn(Turn(64, 4, HashBlocks((1, 2, 7, 8), 16)), "b")
    ka = segment_block_hashes(factory.keyed(a, 0).segments, 8, 8)
    kb = segment_block_hashes(factory.keyed(b, 0).segments, 8, 8)
    assert len(ka) == len(kb) == 8
    assert same_at(ka, kb) == [True] * 4 + [False] * 4
    # the token prompts share exactly as much
    ta, tb = block_hashes(factory.turn_ids(a, 0), 8), block_hashes(factory.turn_ids(b, 0), 8)
    assert same_at(ta, tb) == same_at(ka, kb)


def test_keyed_hash_blocks_with_a_partial_last_block_hit_the_full_one(factory):
    # 40 tokens of ids (5, 6, 7): the last hash block holds 8 of 7's 16 tokens; engine blocks of 4
    short = one_turn(Turn(40, 4, HashBlocks((5, 6, 7), 16)))
    full = one_turn(Turn(48, 4, HashBlocks((5, 6, 7), 16)))
    ks = segment_block_hashes(factory.keyed(short, 0).segments, 4, 99)
    kf = segment_block_hashes(factory.keyed(full, 0).segments, 4, 99)
    assert (len(ks), len(kf)) == (10, 12)
    assert kf[:10] == ks


def test_keyed_synthetic_prefix_groups_share_the_prefix_blocks(factory):
    # prefix of 40 tokens, engine blocks of 16: 2 full blocks of prefix; block 2 = 8 prefix + 8 own tokens
    s1 = one_turn(Turn(100, 4, Synthetic(prefix_group=3, prefix_tokens=40)), "one")
    s2 = one_turn(Turn(100, 4, Synthetic(prefix_group=3, prefix_tokens=40)), "two")
    other_group = one_turn(Turn(100, 4, Synthetic(prefix_group=4, prefix_tokens=40)), "three")
    k1, k2, k3 = (segment_block_hashes(factory.keyed(s, 0).segments, 16, 99) for s in (s1, s2, other_group))
    assert len(k1) == 6 and len(factory.keyed(s1, 0)) == 100
    assert shared(k1, k2) == 2 and shared(k1, k3) == 0
    assert set(k1[2:]).isdisjoint(k2)
    ids = [block_hashes(factory.turn_ids(s, 0), 16) for s in (s1, s2, other_group)]
    assert (shared(ids[0], ids[1]), shared(ids[0], ids[2])) == (2, 0)


def test_keyed_synthetic_without_a_group_is_one_segment_of_its_own(factory):
    keyed = factory.keyed(one_turn(Turn(50, 4, Synthetic())), 0)
    assert len(keyed.segments) == 1 and len(keyed) == 50
    # a prefix as long as the prompt: only the group's segment
    whole = factory.keyed(one_turn(Turn(30, 4, Synthetic(prefix_group=1, prefix_tokens=64))), 0)
    assert len(whole.segments) == 1 and len(whole) == 30


def test_growth_turns_and_token_ids_are_not_keyed(factory):
    session = Session(
        "s",
        0.0,
        (Turn(20, 4, Synthetic()), Turn(40, 4, Synthetic(extends_previous=True)), Turn(3, 4, TokenIds((1, 2, 3)))),
    )
    assert isinstance(factory.keyed(session, 0), KeyedPrompt)
    assert factory.keyed(session, 1) is None
    assert factory.keyed(session, 2) is None


# --- Conversation in "keyed" format ------------------------------------------------------------


def test_conversation_keyed_single_turn_sends_a_keyed_prompt(factory):
    session = one_turn(Turn(50, 7, HashBlocks((1, 2, 3, 4), 16)))
    api, body, planned = Conversation(factory, session, "completions", "keyed").request(0)
    assert api == "completions"
    assert isinstance(body["prompt"], KeyedPrompt) and len(body["prompt"]) == 50
    assert body["max_tokens"] == 7 and planned == 50


def test_conversation_keyed_sends_ids_for_a_chain_and_keys_for_a_standalone_turn(factory):
    # turn 2 extends turn 1 (both need real ids); turn 3 stands alone and nothing extends it
    session = Session(
        "s",
        0.0,
        (
            Turn(20, 5, Synthetic()),
            Turn(40, 5, Synthetic(extends_previous=True)),
            Turn(30, 5, Synthetic(prefix_group=2, prefix_tokens=16)),
        ),
    )
    conversation = Conversation(factory, session, "completions", "keyed")
    _, first, planned1 = conversation.request(0)
    response = [int(t) for t in factory.words[:5]]
    conversation.respond("", response, 5)
    assert conversation.history_source(1) == "server"  # the response's token ids came back
    _, second, planned2 = conversation.request(1)
    conversation.respond("", None, 5)
    _, third, planned3 = conversation.request(2)
    assert isinstance(first["prompt"], list) and len(first["prompt"]) == 20 == planned1
    # turn 2 = turn 1's prompt + the server's response + 15 new tokens
    assert isinstance(second["prompt"], list)
    assert second["prompt"][:25] == first["prompt"] + response and len(second["prompt"]) == 40 == planned2
    assert isinstance(third["prompt"], KeyedPrompt) and len(third["prompt"]) == 30 == planned3


# --- keyed and ids replays give identical numbers ----------------------------------------------


def small_profile():
    """Few blocks and seats: requests queue, cached blocks are evicted, running ones preempted
    (16 blocks of 16 tokens; the longest request below needs 15)."""
    return Profile(
        name="small",
        timing=PolynomialTiming(),
        engine=EngineConfig(block_size=16, num_gpu_blocks=16, max_num_seqs=3, max_num_batched_tokens=96),
    )


def both_formats(workload, factory):
    runs = []
    for settings in (ReplaySettings(prompt_format="ids"), ReplaySettings()):
        endpoint = SimEndpoint(small_profile(), factory)
        run = replay(workload, endpoint, factory, settings, clock=VirtualClock())
        runs.append((run, endpoint.cluster.stats()))
    return runs


def numbers(run):
    return [
        (r.session_id, r.status, r.prompt_tokens, r.cached_tokens, r.chunk_times, r.chunk_tokens, r.end_s)
        for r in run.records
    ]


@pytest.mark.parametrize("hash_block", [16, 32])
def test_hash_id_workload_gives_identical_records_with_ids_and_keyed_prompts(factory, hash_block):
    """30 Mooncake-like requests 0.1 s apart: 6 documents of 2-4 hash blocks, then 0-2 own
    blocks, the last block cut (with 0 own blocks, a document's block that others have whole:
    with hash blocks of 32, its first 16 tokens make a full engine block that must hit); 16
    engine blocks of 16 tokens of cache for about 80 distinct hash blocks."""
    rng = np.random.default_rng(3)
    sessions = []
    for i in range(30):
        doc = int(rng.integers(0, 6))
        ids = tuple(100 * doc + j for j in range(2 + doc % 3)) + tuple(10_000 + 10 * i + j for j in range(i % 3))
        length = hash_block * len(ids) - int(rng.integers(0, hash_block))
        sessions.append(
            Session(f"r{i}", 0.1 * i, (Turn(length, int(rng.integers(4, 40)), HashBlocks(ids, hash_block)),))
        )
    (ids_run, ids_stats), (keyed_run, keyed_stats) = both_formats(Workload(tuple(sessions), "mooncake"), factory)
    assert ids_run.settings["prompt_format"] == "ids" and keyed_run.settings["prompt_format"] == "keyed"
    assert numbers(keyed_run) == numbers(ids_run)
    assert keyed_stats == ids_stats
    # the case is not trivial: prefixes hit, requests queue, some are preempted and recomputed
    assert sum(r.cached_tokens for r in keyed_run.records) > 0
    assert max(r.queue_s for r in keyed_run.records) > 0
    assert keyed_stats["num_preemptions_total"] > 0


def grouped(**more):
    """30 sessions of 60-200 prompt tokens sharing three prefix groups, ``more`` spec fields added."""
    return generate(
        SyntheticSpec(
            sessions=30,
            input_tokens={"dist": "uniform", "min": 60, "max": 200},
            output_tokens={"dist": "uniform", "min": 2, "max": 30},
            rate=8.0,
            shared_prefix_ratio=0.5,
            prefix_groups=3,
            seed=5,
            **more,
        )
    )


def test_synthetic_prefix_groups_give_identical_records_with_ids_and_keyed_prompts(factory):
    workload = grouped()
    assert all(len(s.turns) == 1 and s.turns[0].prompt.prefix_group is not None for s in workload)
    (ids_run, ids_stats), (keyed_run, keyed_stats) = both_formats(workload, factory)
    assert numbers(keyed_run) == numbers(ids_run)
    assert keyed_stats == ids_stats
    assert sum(r.cached_tokens for r in keyed_run.records) > 0
    assert keyed_stats["num_preemptions_total"] > 0
    assert all(r.status == "ok" for r in keyed_run.records)


def test_multi_turn_sessions_sharing_prefix_groups_give_identical_records_with_ids_and_by_default(factory):
    # turns of a chain go as token ids and a one-turn session's as keys: a group's prefix named by
    # its key and by its ids was two prefixes, and the hits between them were lost (46.6% offline
    # where the served simulator hit 51.6% on synthetic_chat); such a run sends ids, and says so
    workload = grouped(turns={"dist": "uniform", "min": 1, "max": 3})
    assert {len(s.turns) for s in workload} == {1, 2, 3}
    (ids_run, ids_stats), (default_run, default_stats) = both_formats(workload, factory)
    assert default_run.settings["prompt_format"] == "ids"
    assert numbers(default_run) == numbers(ids_run) and default_stats == ids_stats
