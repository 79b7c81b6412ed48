"""The simulator's fast paths give exactly the figures of the plain ones they replaced.

The block pool:

:class:`~pytest_llmreplay.sim.kvcache.KVCache` takes free blocks by slicing a list and skips the
stale entries a prefix hit leaves behind (its docstring). :class:`LRUPool` below is the plain
statement of the same contract (an ``OrderedDict`` of free blocks, one pop per block, as vLLM's
free queue), the pure path the fast one replaced. Every bundled workload (``workloads/``, which
``tests/perf`` replays) goes through the offline simulator twice with a fixed seed, once with each
pool, on a cache small enough to evict cached prefixes and preempt requests: every record's
virtual-time figures and every engine counter must be equal, bit for bit.

The summary: :attr:`~pytest_llmreplay.metrics.result.Result.summary` computes its distributions
from flat arrays (:mod:`~pytest_llmreplay.metrics.columns`); on the same replays (and with
reasoning) every statistic must equal, bit for bit, the one of the per-record functions
(``request_values``, ``session_rows``) it replaced.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_llmreplay.metrics.names import REASONING_METRICS, REQUEST_METRICS, SESSION_METRICS
from pytest_llmreplay.metrics.result import Result, request_values, schedule_lag, stats
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.replayer.records import ReplayRun
from pytest_llmreplay.sim import engine as engine_module
from pytest_llmreplay.sim.cluster import ClusterConfig
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.workloads.formats import load_workload
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer

BLOCKS = 1024  # of 64 tokens: 64k tokens per engine, a few long prompts' worth
NOTHING_SHARED = ("azure_conv_head200.csv", "llmservingsim_example.jsonl")  # no prompt repeats another's start
WORKLOADS = sorted(p.name for p in (Path(__file__).parents[1] / "workloads").iterdir() if p.name != "README.md")
FIGURES = (
    "sent_s",
    "first_token_s",
    "last_token_s",
    "end_s",
    "chunk_times",
    "chunk_tokens",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "queue_s",
    "status",
)


class LRUPool:
    """vLLM's block pool stated plainly: free blocks in an ``OrderedDict`` (least recently
    released first), names evicted as their block is taken, references counted."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        self.ref = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.queries = self.hits = 0

    @property
    def free_blocks(self) -> int:
        return len(self.free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self.free) / self.num_blocks

    def match(self, hashes: Sequence[int]) -> list[int]:
        found = []
        for h in hashes:
            if h not in self.cached:
                break
            found.append(self.cached[h])
        return found

    def take_cached(self, blocks: Sequence[int]) -> None:
        for block in blocks:
            if self.ref[block] == 0:
                del self.free[block]
            self.ref[block] += 1

    def allocate(self, count: int) -> list[int] | None:
        if count > len(self.free):
            return None
        taken = [self.free.popitem(last=False)[0] for _ in range(count)]
        for block in taken:
            if self.hash_of[block] is not None:
                del self.cached[self.hash_of[block]]
                self.hash_of[block] = None
            self.ref[block] = 1
        return taken

    def register(self, blocks: Sequence[int], hashes: Sequence[int]) -> None:
        for block, h in zip(blocks, hashes, strict=True):
            if self.hash_of[block] is None and h not in self.cached:
                self.hash_of[block], self.cached[h] = h, block

    def release(self, blocks: Sequence[int]) -> None:
        for block in reversed(blocks):
            self.ref[block] -= 1
            if not self.ref[block]:
                self.free[block] = None


def replayed(name: str, extra_body: dict | None = None) -> tuple[ReplayRun, SimEndpoint]:
    """``name`` replayed offline (seed 3, two engines routed by KV overlap, 1024 blocks of 64
    tokens each, 120 requests), and the endpoint; ``extra_body``: the simulator's request options."""
    profile = load_profile("llama-3.1-8b-h100")
    small = dataclasses.replace(profile.engine, block_size=64, num_gpu_blocks=BLOCKS, max_num_seqs=16)
    profile = dataclasses.replace(profile, engine=small)
    prompts = PromptFactory(load_tokenizer(None))
    endpoint = SimEndpoint(
        profile, prompts, seed=3, cluster=ClusterConfig(engines=2, router="kv_aware"), extra_body=extra_body
    )
    workload = load_workload(Path(__file__).parents[1] / "workloads" / name)
    run = replay(workload, endpoint, prompts, ReplaySettings(concurrency=8, max_requests=120), clock=VirtualClock())
    return run, endpoint


def replay_figures(name: str, monkeypatch: pytest.MonkeyPatch, pool: type | None) -> tuple[list, dict]:
    """Every record's figures and the engines' counters of ``name`` replayed (:func:`replayed`),
    with ``pool`` as the block pool (None: the simulator's own)."""
    if pool is not None:
        monkeypatch.setattr(engine_module, "KVCache", pool)
    run, endpoint = replayed(name)
    assert endpoint.cluster is not None
    records = [[getattr(record, field) for field in FIGURES] for record in run.records]
    return records, {**endpoint.cluster.stats(), "duration_s": run.duration_s}


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_fast_block_pool_replays_every_bundled_workload_exactly_as_the_plain_one(name, monkeypatch):
    fast_records, fast_counters = replay_figures(name, monkeypatch, None)
    plain_records, plain_counters = replay_figures(name, monkeypatch, LRUPool)
    assert fast_counters == plain_counters
    assert fast_records == plain_records
    # the comparison has teeth: prefixes were hit and the small cache made requests wait or evict
    # the comparison has teeth: prefixes were hit in every workload whose prompts share any
    assert fast_counters["prefix_cache_hits_total"] > 0 or name in NOTHING_SHARED


def per_record_distributions(result: Result) -> dict[str, dict | None]:
    """The summary's distributions (ITL's apart: its path did not change) as the per-record
    functions give them."""
    rows = [request_values(record, result.reasoning) for record in result.ok]
    names = [name for name in REQUEST_METRICS + (REASONING_METRICS if result.reasoning else ()) if name != "itl"]
    found = {
        name: stats(
            [schedule_lag(r) for r in result.measured] if name == "schedule_lag" else [row[name] for row in rows]
        )
        for name in names
    }
    found.update((name, stats(row[name] for row in result.session_rows)) for name in SESSION_METRICS)
    return found


@pytest.mark.parametrize(
    ("name", "reasoning"), [(name, None) for name in WORKLOADS] + [("synthetic_swe_agent.yaml", 7)]
)
def test_the_summary_from_columns_equals_the_per_record_functions(name, reasoning):
    run, _ = replayed(name, None if reasoning is None else {"sim_reasoning_tokens": reasoning})
    result = Result(run)
    expected = per_record_distributions(result)
    assert {name: result.summary.get(name) for name in expected} == expected
    assert result.summary["requests"]["sessions_complete"] == len(result.session_rows)
    # the comparison has teeth: sessions were complete, and the reasoning run reasoned
    assert result.session_rows and expected["ttft"] is not None
    assert result.reasoning == (reasoning is not None)
