"""The simulated engine's scheduler and KV cache on small hand-computed cases.

Every iteration lasts exactly 1 s of virtual time (a stub timing model), so the time of each
token is the number of the iteration that produced it.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.sim.engine import Engine, EngineConfig
from pytest_llmreplay.sim.kvcache import KVCache, block_hashes


class OneSecond:
    """Every iteration takes 1 s; records the batches it was asked about."""

    def __init__(self):
        self.batches = []

    def iteration_s(self, batch):
        self.batches.append(batch)
        return 1.0

    def decode_span_s(self, seqs, kv_tokens, kv_usage, usage_step, steps):
        return np.ones(steps)


def simulate(config, arrivals, timing=None):
    """Run requests ``(arrival_s, prompt_ids, output_len)`` to completion; the finished requests."""
    clock = VirtualClock()
    timing = timing or OneSecond()

    async def main():
        engine = Engine(config, timing, clock)
        engine.start()
        submitted = []
        for at, prompt, output in arrivals:
            if at > clock.now():  # requests arriving together are queued before the engine runs
                await clock.sleep_until(at)
            submitted.append(engine.submit(prompt, [1000 + i for i in range(output)]))
        for request in submitted:
            await request.done
        await engine.stop()
        return engine, submitted

    return clock.run(main())


def test_chunked_prefill_spends_the_budget_then_decodes():
    _, (a,) = simulate(
        EngineConfig(block_size=4, num_gpu_blocks=100, max_num_batched_tokens=10), [(0, list(range(25)), 3)]
    )
    # prefill 10 + 10 + 5 tokens in iterations 1-3: first token at 3; then 2 decode steps as one span
    assert a.times == [3.0, 5.0] and a.tokens == [1, 2]
    assert a.cached == 0 and a.generated == 3


def test_running_requests_first_then_waiting_ones_get_the_rest_of_the_budget():
    timing = OneSecond()
    _, (a, b) = simulate(
        EngineConfig(block_size=4, num_gpu_blocks=100, max_num_batched_tokens=10),
        [(0, list(range(8)), 5), (0, list(range(100, 120)), 2)],
        timing,
    )
    # it 1: A prefills 8, B 2; it 2: A decodes 1, B 9 (11); it 3: A decodes, B 9 (20): B's first token
    first_three = [(b.prefill_tokens, b.decode_seqs) for b in timing.batches[:3]]
    assert first_three == [(10, 0), (9, 1), (9, 1)]
    assert b.times[0] == 3.0 and a.times[0] == 1.0
    assert sum(a.tokens) == 5 and sum(b.tokens) == 2


def test_max_num_seqs_makes_later_requests_queue():
    _, (a, b) = simulate(
        EngineConfig(block_size=4, num_gpu_blocks=100, max_num_seqs=1),
        [(0, list(range(8)), 3), (0, list(range(50, 58)), 3)],
    )
    assert a.times == [1.0, 3.0] and a.scheduled_s == 0.0
    assert b.scheduled_s == 3.0 and b.times == [4.0, 6.0]


def test_prefix_hits_across_requests_in_whole_blocks():
    config = EngineConfig(block_size=4, num_gpu_blocks=100)
    prompt = list(range(1, 13))
    _, (a, b, c) = simulate(config, [(0, prompt, 2), (10, prompt[:8] + [90, 91, 92, 93, 94], 2), (20, prompt, 2)])
    assert a.cached == 0
    assert b.cached == 8  # two shared full blocks
    assert c.cached == 8  # fully cached: the last block is recomputed, as vLLM recomputes the last token


def test_generated_tokens_are_cached_for_the_next_turn():
    config = EngineConfig(block_size=4, num_gpu_blocks=100)
    prompt = list(range(1, 7))
    output = [1000 + i for i in range(7)]
    # turn 1 computes KV for 6 + 6 tokens (the last generated token's KV is never computed): 3 full blocks
    _, (a, b) = simulate(config, [(0, prompt, 7), (20, prompt + output + [77, 78, 79], 2)])
    assert b.cached == 12


def test_lru_eviction_takes_released_tail_blocks_first():
    cache = KVCache(num_blocks=4, block_size=4)
    a = cache.allocate(2)
    cache.register(a, block_hashes(list(range(8)), 4))
    cache.release(a)  # tail first: the free queue is now 2, 3, then a's tail, then a's head
    assert cache.allocate(2) == [2, 3]
    assert cache.allocate(1) == [a[1]]  # a's tail block is evicted before its head
    assert cache.match(block_hashes(list(range(8)), 4)) == [a[0]]  # the head block still hits


def test_cache_names_stay_one_to_one_through_random_allocations_registrations_and_releases():
    """``hash_of[b] == h`` exactly when ``cached[h] == b``: allocate relies on it to evict."""
    import random

    rng = random.Random(7)
    cache = KVCache(num_blocks=16, block_size=2)
    held: list[list[int]] = []
    for _ in range(2000):
        action = rng.random()
        if action < 0.45:
            prompt = [rng.randrange(3) for _ in range(2 * rng.randint(1, 4))]
            hashes = block_hashes(prompt, 2)
            hit = cache.match(hashes) if rng.random() < 0.7 else []  # else: a twin computed concurrently
            cache.take_cached(hit)
            fresh = cache.allocate(len(hashes) - len(hit))
            if fresh is None:
                cache.release(hit)
                continue
            blocks = hit + fresh
            cache.register(blocks, hashes)
            held.append(blocks)
        elif held:
            cache.release(held.pop(rng.randrange(len(held))))
        named = {b: h for b, h in enumerate(cache.hash_of) if h is not None}
        assert {b: h for h, b in cache.cached.items()} == named
        assert sorted(cache.free_queue()) == [b for b, r in enumerate(cache.ref) if r == 0]
        assert cache.free_blocks == len(cache.free_queue())


def test_engine_eviction_keeps_the_prefix_of_a_finished_request():
    config = EngineConfig(block_size=4, num_gpu_blocks=4)
    a_prompt = list(range(8))
    # A: 8 tokens + 1 output -> 2 blocks, released; B: 8 new tokens take the 2 unused blocks;
    # C: 4 new tokens need 1 more block: A's tail goes; D = A's prompt still hits A's head block
    _, (a, b, c, d) = simulate(
        config, [(0, a_prompt, 1), (5, list(range(20, 28)), 1), (10, list(range(40, 44)), 1), (15, a_prompt, 1)]
    )
    assert (b.cached, c.cached, d.cached) == (0, 0, 4)


def test_preemption_recomputes_the_newest_request_and_keeps_its_output_length():
    config = EngineConfig(block_size=4, num_gpu_blocks=3)
    engine, (a, b) = simulate(config, [(0, [1, 2, 3, 4], 6), (0, [5, 6, 7, 8], 6)])
    # both prefill in iteration 1 (1 block each); decoding the 5th token needs a new block each:
    # A gets the third block, B (the newest) is preempted and runs after A
    assert b.preemptions == 1 and a.preemptions == 0
    assert sum(a.tokens) == 6 and sum(b.tokens) == 6
    assert b.times[-1] > a.times[-1]
    assert engine.preemptions_total == 1


def test_an_arrival_cuts_a_decode_span_at_the_iteration_in_progress():
    _, (a, b) = simulate(
        EngineConfig(block_size=16, num_gpu_blocks=100), [(0, list(range(8)), 30), (10.5, list(range(50, 58)), 2)]
    )
    # A: first token at 1, then a span cut by B's arrival at 10.5: the iteration ending at 11 completes
    assert a.times[:2] == [1.0, 11.0] and a.tokens[:2] == [1, 10]
    assert b.scheduled_s == 11.0 and b.times[0] == 12.0
    assert sum(a.tokens) == 30


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_async_scheduling_decides_each_batch_one_iteration_ahead(async_scheduling):
    """vLLM's batch queue (sim/engine.py, async scheduling): a request arriving while iteration k
    runs joins iteration k + 2, stamped scheduled at k's end; a freed slot serves one later too."""
    config = EngineConfig(block_size=16, num_gpu_blocks=100, max_num_seqs=2, async_scheduling=async_scheduling)
    ahead = int(async_scheduling)
    # an idle engine takes A at once; B arrives during A's span, at 10.5 (iteration [10, 11])
    _, (a, b) = simulate(config, [(0, list(range(8)), 30), (10.5, list(range(50, 58)), 2)])
    assert a.scheduled_s == 0.0 and a.times[0] == 1.0
    assert b.scheduled_s == 11.0 and b.times[0] == 12.0 + ahead
    assert sum(a.tokens) == 30
    # two slots: C ends at 2; D, waiting since 0, takes its slot in iteration 3, or 4 one ahead
    _, (c, e, d) = simulate(config, [(0, list(range(8)), 2), (0, list(range(20, 28)), 10), (0, list(range(40, 48)), 2)])
    assert c.times[-1] == 2.0 and e.times[-1] == 10.0
    assert d.scheduled_s == 2.0 and d.times[0] == 3.0 + ahead


def test_kv_usage_and_decode_batch_reach_the_timing_model():
    timing = OneSecond()
    simulate(
        EngineConfig(block_size=4, num_gpu_blocks=10, max_num_batched_tokens=100),
        [(0, list(range(8)), 1), (0, list(range(20, 32)), 1)],
        timing,
    )
    first = timing.batches[0]
    assert (first.prefill_tokens, first.prefill_context, first.decode_seqs) == (20, 20, 0)
    assert first.kv_usage == pytest.approx(5 / 10)  # 2 + 3 blocks held while the batch runs


def test_same_inputs_give_identical_times():
    rng = np.random.default_rng(7)
    arrivals = [
        (float(t), rng.integers(0, 50, int(n)).tolist(), int(o))
        for t, n, o in zip(
            np.cumsum(rng.exponential(2.0, 40)), rng.integers(4, 60, 40), rng.integers(1, 30, 40), strict=True
        )
    ]
    config = EngineConfig(block_size=4, num_gpu_blocks=40, max_num_seqs=6, max_num_batched_tokens=32)
    runs = [[(r.times, r.tokens, r.cached, r.preemptions) for r in simulate(config, arrivals)[1]] for _ in range(2)]
    assert runs[0] == runs[1]
    assert all(sum(tokens) == output for (times, tokens, _, _), (_, _, output) in zip(runs[0], arrivals, strict=True))


def _hand_outs(hand_out_s):
    """Two requests of 5 tokens, one iteration a second; writing a stream's tokens takes
    ``hand_out_s(iteration)`` of clock time. (token times, when each iteration's first stream was written)."""
    clock = VirtualClock()
    handed = []

    def on_emit():
        handed.append(round(clock.now(), 6))
        clock.advance(hand_out_s((len(handed) - 1) // 2))

    async def main():
        engine = Engine(EngineConfig(block_size=4, num_gpu_blocks=100), OneSecond(), clock, spans=False)
        engine.start()
        requests = [engine.submit(list(range(n, n + 4)), [1] * 5) for n in (0, 10)]
        for request in requests:
            request.on_emit = on_emit
        for request in requests:
            await request.done
        await engine.stop()
        return [r.times for r in requests]

    return clock.run(main()), handed[::2]


def test_a_slow_hand_out_goes_out_early_and_leaves_the_simulated_times_alone():
    """A hand-out that takes clock time (the HTTP server writing streams) starts half its
    duration before the iteration's end; token times and the next iteration's start do not move."""
    instant_times, instant_handed = _hand_outs(lambda _: 0.0)
    times, handed = _hand_outs(lambda _: 0.01)  # 20 ms per iteration's hand-out: a 10 ms lead from the second on
    assert times == instant_times == [[1.0, 2.0, 3.0, 4.0, 5.0]] * 2
    assert instant_handed == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert handed == [1.0, 1.99, 2.99, 3.99, 4.99]


def test_one_stretched_hand_out_does_not_send_later_tokens_early():
    """The lead follows the median hand-out, not the last: the third iteration's 400 ms hand-out
    (a stall on a shared machine) leaves the next ones 10 ms early, not 200 ms."""
    times, handed = _hand_outs(lambda iteration: 0.2 if iteration == 2 else 0.01)
    assert times == [[1.0, 2.0, 3.0, 4.0, 5.0]] * 2
    assert handed == [1.0, 1.99, 2.99, 3.99, 4.99]


def test_the_early_start_is_bounded():
    """However slow hand-outs are, tokens go out at most MAX_LEAD_S (+ MAX_LATE_S) early."""
    from pytest_llmreplay.sim.wake_timing import MAX_LEAD_S

    _, handed = _hand_outs(lambda _: 0.3)  # 600 ms per hand-out, in a 1 s iteration
    assert handed[:3] == [1.0, round(2.0 - MAX_LEAD_S, 6), round(3.0 - MAX_LEAD_S, 6)]


def test_a_preempted_request_resumes_from_its_cached_blocks_generated_ones_too():
    # 7 blocks of 4: A (8 + 6) and B (8 + 10) decode until B, the newer, is preempted with 13
    # tokens computed, 3 full blocks (the third filled by its own output); A finishes and B comes
    # back: vLLM caches a block as it fills, so B recomputes only the token past its full blocks
    timing = OneSecond()
    engine, (a, b) = simulate(
        EngineConfig(block_size=4, num_gpu_blocks=7, max_num_batched_tokens=100),
        [(0, list(range(8)), 6), (0, list(range(100, 108)), 10)],
        timing,
    )
    assert engine.preemptions_total == 1 and b.preemptions == 1
    assert [batch.prefill_tokens for batch in timing.batches[1:] if batch.prefill_tokens] == [1]
    assert b.times == [1.0, 5.0, 7.0, 11.0] and sum(b.tokens) == 10


@pytest.mark.parametrize("reserve_full_isl", [False, True])
def test_a_request_waits_until_its_whole_sequence_fits_with_the_full_isl_gate(reserve_full_isl):
    """vLLM 0.19's ``--scheduler-reserve-full-isl`` (on by default): a waiting request is admitted
    only when its whole prompt fits in the free blocks, not just its first chunk; without it the
    long request is admitted with a partial chunk and then preempted when it needs the rest."""
    config = EngineConfig(
        block_size=4, num_gpu_blocks=6, max_num_batched_tokens=8, scheduler_reserve_full_isl=reserve_full_isl
    )
    # A: 8 prompt tokens (2 blocks) + 6 out; B: 16 prompt tokens, 4 blocks, never free with A's 3
    # to 4 held: without the gate B takes 2 blocks for a 7-token chunk in iteration 2 and is
    # preempted in iteration 3, when its next chunk needs 2 more
    engine, (a, b) = simulate(config, [(0, list(range(8)), 6), (0, list(range(100, 116)), 2)])
    assert sum(a.tokens) == 6 and sum(b.tokens) == 2 and a.preemptions == 0
    if reserve_full_isl:
        assert engine.preemptions_total == 0 and b.scheduled_s == a.times[-1]
    else:
        assert engine.preemptions_total == b.preemptions >= 1 and b.scheduled_s == 1.0
