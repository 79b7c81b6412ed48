"""Data-parallel MoE engines step in lockstep (sim/lockstep.py): hand-computed cases on a stub
timing model whose iteration lasts 1 s plus 1 s per 10 prefill tokens, and the bundled profiles."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_llmreplay import PromptFactory, ReplaySettings, Result, VirtualClock, load_tokenizer
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.sim.cluster import Cluster
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.engine import Engine, EngineConfig
from pytest_llmreplay.sim.lockstep import LockstepGroup
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.workloads.formats import load_workload

CONFIG = EngineConfig(block_size=4, num_gpu_blocks=100, max_num_batched_tokens=40)


class PrefillCosts:
    """An iteration takes 1 s, plus 1 s per 10 prefill tokens."""

    def iteration_s(self, batch):
        return 1.0 + batch.prefill_tokens / 10

    def decode_span_s(self, seqs, kv_tokens, kv_usage, usage_step, steps):
        return np.ones(steps)


def run_group(arrivals, lockstep=True):
    """Requests ``(arrival_s, engine index, prompt length, output length)`` on two engines, in a
    lockstep group or each on its own; the finished requests."""
    clock = VirtualClock()

    async def main():
        engines = [Engine(CONFIG, PrefillCosts(), clock, spans=not lockstep) for _ in range(2)]
        group = LockstepGroup(engines, clock) if lockstep else None
        for engine in [group] if group else engines:
            engine.start()
        submitted = []
        for at, index, prompt, output in arrivals:
            if at > clock.now():
                await clock.sleep_until(at)
            submitted.append(engines[index].submit(list(range(prompt)), [1000 + i for i in range(output)]))
        for request in submitted:
            await request.done
        for engine in [group] if group else engines:
            await engine.stop()
        return submitted

    return clock.run(main())


def test_a_prefill_on_one_rank_lengthens_the_other_ranks_decode_step():
    # B decodes on engine 1 from t=1; at t=2 engine 0 gets a 30-token prompt (a 4 s iteration):
    # on its own B's steps are 1 s; in lockstep B's step from 2 to 6 waits for it
    arrivals = [(0, 1, 4, 6), (2, 0, 30, 2)]
    alone_b, alone_a = run_group(arrivals, lockstep=False)
    b, a = run_group(arrivals)
    assert alone_b.times == [1.4, 6.4] and alone_b.tokens == [1, 5]  # one span: its end carries the rest
    assert alone_a.times == [6.0, 7.0]  # engine 0 on its own: the 4 s prefill from 2, then a decode
    assert b.times == [1.4, 2.4, 6.4, 7.4, 8.4, 9.4]  # 1.4 (B's prefill) + 1 s, then A's 4 s prefill, then 1 s steps
    assert a.times == [6.4, 7.4]  # A joins at the step boundary 2.4, not at its arrival 2.0
    assert a.scheduled_s == pytest.approx(2.4)


def test_ranks_with_nothing_to_do_start_at_the_first_arrival():
    (b,) = run_group([(5, 1, 4, 2)])
    assert b.times == [6.4, 7.4]  # idle: the step starts at the arrival, as one engine's does
    (alone,) = run_group([(5, 1, 4, 2)], lockstep=False)
    assert alone.times == b.times


def test_a_lockstep_group_takes_only_engines_that_step_one_iteration_at_a_time():
    with pytest.raises(ValueError, match="spans=False"):
        LockstepGroup([Engine(CONFIG, PrefillCosts(), VirtualClock())], VirtualClock())


WORKLOAD = "synthetic:\n  sessions: 120\n  input_tokens: 600\n  output_tokens: 80\n  rate: 30\n  seed: 3\n"


def replayed(profile_name, tmp_path):
    spec = tmp_path / "lockstep.yaml"
    spec.write_text(WORKLOAD)
    profile = load_profile(profile_name)
    prompts = PromptFactory(load_tokenizer(None), seed=0)
    workload = load_workload(spec)
    endpoint = SimEndpoint(profile, prompts)
    return endpoint, Result(replay(workload, endpoint, prompts, ReplaySettings(), clock=VirtualClock()))


def test_a_moe_profiles_data_parallel_ranks_step_together_and_a_dense_ones_do_not(tmp_path):
    moe, moe_result = replayed("qwen3-30b-a3b-dp2-ep-h100", tmp_path)
    assert moe.cluster is not None and isinstance(moe.cluster.lockstep, LockstepGroup)
    assert [engine.spans for engine in moe.cluster.engines] == [False, False]
    assert moe_result.summary["requests"]["ok"] == 120
    assert replayed("qwen3-30b-a3b-dp2-ep-h100", tmp_path)[1].summary == moe_result.summary  # seeded and deterministic
    for dense in ("qwen3-30b-a3b-h100", "llama-3.1-8b-h100"):
        assert Cluster(load_profile(dense), VirtualClock()).lockstep is None
