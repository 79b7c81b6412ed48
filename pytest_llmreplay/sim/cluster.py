"""Several simulated engines behind a router, aggregated or disaggregated (prefill / decode).

Routers pick an engine for each request; ties always go to the lowest engine index, so a run is
deterministic:

- ``round_robin``: request ``n`` goes to engine ``n mod N`` (per pool);
- ``least_loaded``: the engine with the fewest requests in it (running + waiting);
- ``vllm_dp``: vLLM's own data-parallel balancing (``DPLBAsyncMPClient.get_core_engine_for_request``
  in vllm/v1/engine/core_client.py): the lowest ``4 * waiting + running``, from counts the DP
  coordinator publishes every 100 ms (``stats_update_interval_ms``; here: the counts at the last
  multiple of 0.1 s), to which the front end adds 1 waiting for each request it has sent to an
  engine since (its optimistic increment); ties go to the lowest index (one front end: its
  ``eng_start_index`` is 0);
- ``kv_aware``: Dynamo's KV router cost, lowest wins:
  ``cost_i = overlap_weight * uncached_blocks_i + active_blocks_i``, where ``uncached_blocks_i``
  is the prompt's full blocks minus its longest prefix cached on engine ``i`` (read from the
  engine's cache, exact rather than from events), and ``active_blocks_i`` the blocks held by
  requests running there plus the blocks its waiting requests' prompts need.

Disaggregated serving (``prefill_engines > 0``): the request prefills on a prefill engine
(routed among ``prefill_engines``) and emits its first token there; its prompt's KV then moves to
a decode engine (routed among ``engines``), taking ``prompt_tokens * kv_bytes_per_token /
(kv_transfer_gbps * 1e9)`` seconds, and decodes the remaining tokens there, its KV arriving
whole (no prefill on the decode side). The first token's time is the prefill engine's; the
second comes after the transfer and a decode iteration. A one-token request never leaves its
prefill engine.

Front end (``timing.frontend_ms`` of the profile, default 0): a server's per-request work
outside the engine's iterations (HTTP, request set-up, handing the request to the engine core).
A request reaches the engines ``frontend_ms`` after the server received it (its arrival there, so
its queue time does not count the front end); requests pass the front end in the order received
(first in, first out), each after the same fixed latency, concurrently (it is a latency, not a
queue). A request the client abandons while in the front end never reaches an engine.

Data parallel: a profile whose hardware has ``data_parallel`` dp > 1 is one vLLM server of dp
engines (``data_parallel_size``), balanced by ``vllm_dp`` whatever ``router`` says; such a
server is simulated alone (``engines`` 1, no prefill pool). Each engine's timing is the
profile's (the roofline counts the MoE layers' traffic with the other ranks, sim/roofline.py).
The engines of a MoE model step in lockstep, as vLLM's ranks do (:mod:`.lockstep`); a dense
model's ranks are independent.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import LLMReplayError
from ..replayer.clock import Clock
from ..workloads.prompts import stable_hash
from .engine import Engine, SimRequest, Tokens
from .lockstep import LockstepGroup
from .profile import Profile, engine_timing

ROUTERS = ("round_robin", "least_loaded", "kv_aware", "vllm_dp")
DP_PUBLISH_S = 0.1  # vLLM's DP coordinator publishes request counts every 100 ms
DP_WAITING_WEIGHT = 4  # score = 4 * waiting + running
FRONT_END_SLACK_S = 1e-9  # a timer fires when its time is reached to within float rounding (a virtual clock's sum)


@dataclass(frozen=True)
class ClusterConfig:
    """How many engines and how requests reach them.

    ``engines``: aggregated engines, or the decode pool when ``prefill_engines`` > 0.
    ``kv_transfer_gbps``: prefill-to-decode link bandwidth in GB/s (default 50: one 400 Gb/s
    RDMA NIC). ``kv_bytes_per_token``: None takes the profile's model's
    (2 * layers * kv_heads * head_dim * dtype bytes); a profile without a model needs it given.
    """

    engines: int = 1
    router: str = "round_robin"
    prefill_engines: int = 0
    kv_transfer_gbps: float = 50.0
    kv_bytes_per_token: float | None = None
    overlap_weight: float = 1.0

    def validate(self) -> None:
        """Raise :class:`LLMReplayError` naming the first bad setting."""
        if self.router not in ROUTERS:
            raise LLMReplayError(f"router: expected one of {', '.join(ROUTERS)}, got {self.router!r}")
        if not isinstance(self.engines, int) or self.engines < 1:
            raise LLMReplayError(f"engines: expected an integer >= 1, got {self.engines!r}")
        if not isinstance(self.prefill_engines, int) or self.prefill_engines < 0:
            raise LLMReplayError(f"prefill_engines: expected an integer >= 0, got {self.prefill_engines!r}")
        for name in ("kv_transfer_gbps", "kv_bytes_per_token"):
            value = getattr(self, name)
            if value is not None and not 0 < value < math.inf:
                raise LLMReplayError(f"{name}: expected a finite number > 0, got {value!r}")
        if not self.overlap_weight >= 0:
            raise LLMReplayError(f"overlap_weight: expected a number >= 0, got {self.overlap_weight!r}")


def transfer_s_per_token(profile: Profile, config: ClusterConfig) -> float:
    """Seconds to move one token's KV from a prefill to a decode engine (0 when aggregated)."""
    if not config.prefill_engines:
        return 0.0
    per_token = config.kv_bytes_per_token or (profile.model.kv_bytes_per_token if profile.model else None)
    if per_token is None:
        raise LLMReplayError(
            f"kv_bytes_per_token: profile {profile.name!r} has no model to derive it from; give it for disaggregated serving"
        )
    return per_token / (config.kv_transfer_gbps * 1e9)


class Job:
    """A request's way through the cluster: one engine request, or a prefill then a decode one.
    ``times``/``tokens`` gather the tokens of both; ``done`` resolves when the last is out."""

    def __init__(self, first: SimRequest) -> None:
        self.first = first
        self.current = first
        self.engine: Engine | None = None  # the engine ``current`` is in
        self.done: asyncio.Future = first.done
        self.pipeline: asyncio.Task | None = None  # the prefill -> transfer -> decode task
        self.abandoned = False  # aborted by the client (perhaps before it left the front end)

    @property
    def times(self) -> list[float]:
        return self.first.times

    @property
    def tokens(self) -> list[int]:
        return self.first.tokens

    @property
    def prompt_len(self) -> int:
        return self.first.prompt_len

    @property
    def cached(self) -> int | None:
        return self.first.cached

    @property
    def generated(self) -> int:
        return self.current.generated

    @property
    def queue_s(self) -> float | None:
        """Admission into the first engine - arrival (None if never admitted)."""
        return None if self.first.scheduled_s is None else self.first.scheduled_s - self.first.arrival_s


class Pool:
    """Engines of one role and the router that spreads requests over them."""

    def __init__(
        self, engines: Sequence[Engine], router: str, overlap_weight: float, clock: Clock | None = None
    ) -> None:
        self.engines = list(engines)
        self.router = router
        self.overlap_weight = overlap_weight
        self.clock = clock
        self._turn = 0
        self._published: int | None = None  # the 100 ms tick of the counts in ``_counts``
        self._counts: list[list[int]] = []  # [waiting, running] per engine, as the front end sees them

    def pick(self, request: SimRequest) -> Engine:
        if len(self.engines) == 1:
            return self.engines[0]
        if self.router == "round_robin":
            engine = self.engines[self._turn % len(self.engines)]
            self._turn += 1
            return engine
        if self.router == "least_loaded":
            return min(self.engines, key=Engine.load)  # min keeps the first of equals
        if self.router == "vllm_dp":
            return self._vllm_dp()
        return min(self.engines, key=lambda engine: self._kv_cost(engine, request))

    def _vllm_dp(self) -> Engine:
        """The lowest 4 * waiting + running on the last published counts plus the front end's own
        increments (module doc)."""
        tick = math.floor(self.clock.now() / DP_PUBLISH_S + 1e-9) if self.clock is not None else 0
        if tick != self._published:
            self._published = tick
            self._counts = [[len(engine.waiting), len(engine.running)] for engine in self.engines]
        scores = [DP_WAITING_WEIGHT * waiting + running for waiting, running in self._counts]
        index = scores.index(min(scores))
        self._counts[index][0] += 1
        return self.engines[index]

    def _kv_cost(self, engine: Engine, request: SimRequest) -> float:
        size = engine.config.block_size
        full = request.prompt_len // size
        cached = len(engine.cache.match(request.block_hashes(full, size)))
        return self.overlap_weight * (full - cached) + engine.active_blocks()


class Cluster:
    """The engines of one profile on ``clock``; :meth:`submit` routes a request through them."""

    def __init__(
        self, profile: Profile, clock: Clock, config: ClusterConfig = ClusterConfig(), spans: bool = True, seed: int = 0
    ) -> None:
        config.validate()
        self.config = config
        self.clock = clock

        data_parallel = profile.hardware.data_parallel if profile.hardware is not None else 1
        lockstep = data_parallel > 1 and profile.model is not None and bool(profile.model.experts)

        def engines(role: str, count: int) -> list[Engine]:
            return [
                Engine(
                    profile.engine,
                    engine_timing(profile, stable_hash("sim-timing", seed, role, i)),
                    clock,
                    spans and not lockstep,
                )
                for i in range(count)
            ]

        if data_parallel > 1:
            if config.engines != 1 or config.prefill_engines:
                raise LLMReplayError(
                    f"engines: profile {profile.name!r} is one data-parallel server of {data_parallel} engines; "
                    "simulate it with engines 1 and no prefill engines"
                )
            config = replace(config, engines=data_parallel, router="vllm_dp")
            self.config = config
        self.decode = Pool(engines("decode", config.engines), config.router, config.overlap_weight, clock)
        self.prefill = (
            Pool(engines("prefill", config.prefill_engines), config.router, config.overlap_weight, clock)
            if config.prefill_engines
            else None
        )
        self.lockstep = LockstepGroup(self.decode.engines, clock) if lockstep else None
        self.transfer_s_per_token = transfer_s_per_token(profile, config)
        self.frontend_s = profile.frontend_ms / 1e3
        self._front_end: deque[tuple[float, Job]] = deque()  # (when it reaches the engines, job), in order received
        self._front_end_timer: asyncio.TimerHandle | None = None
        self._pipelines: set[asyncio.Task] = set()

    @property
    def engines(self) -> list[Engine]:
        """Every engine, prefill pool first."""
        return (self.prefill.engines if self.prefill else []) + self.decode.engines

    def stats(self) -> dict[str, float]:
        """The engines' :meth:`Engine.stats` summed (``kv_cache_usage_perc``: their mean)."""
        every = [engine.stats() for engine in self.engines]
        total = {name: sum(s[name] for s in every) for name in every[0]}
        total["kv_cache_usage_perc"] /= len(every)
        return total

    def start(self) -> None:
        if self.lockstep is not None:
            self.lockstep.start()
            return
        for engine in self.engines:
            engine.start()

    async def stop(self) -> None:
        if self._front_end_timer is not None:
            self._front_end_timer.cancel()
        self._front_end.clear()
        for task in list(self._pipelines):
            task.cancel()
        await asyncio.gather(*self._pipelines, return_exceptions=True)
        if self.lockstep is not None:
            await self.lockstep.stop()
        for engine in self.engines:
            await engine.stop()

    def submit(self, prompt: Tokens, output: Tokens, received_s: float | None = None, reasoning_len: int = 0) -> Job:
        """Route a request that generates exactly ``len(output)`` tokens (fit it to the profile's
        ``max_model_len`` first: a request larger than the cache would wait forever), the first
        ``reasoning_len`` of them reasoning (:mod:`.reasoning`); ``received_s``: when the server
        received it (:meth:`Engine.enqueue`); it reaches the engines ``frontend_s`` later
        (module doc: front end)."""
        job = Job(SimRequest(prompt, output, reasoning_len))
        disaggregated = self.prefill is not None and job.first.output_len > 1
        if disaggregated:
            job.done = asyncio.get_running_loop().create_future()
        if not self.frontend_s:
            self._route(job, received_s)
            return job
        now = self.clock.now()
        ready = (now if received_s is None else min(received_s, now)) + self.frontend_s
        if self._front_end:
            ready = max(ready, self._front_end[-1][0])  # first in, first out
        self._front_end.append((ready, job))
        if len(self._front_end) == 1:
            self._front_end_timer = asyncio.get_running_loop().call_later(ready - now, self._leave_front_end)
        return job

    def _leave_front_end(self) -> None:
        """Route every job whose front-end latency has passed, in order; wait for the next one."""
        now = self.clock.now()
        while self._front_end and self._front_end[0][0] <= now + FRONT_END_SLACK_S:
            ready, job = self._front_end.popleft()
            if not job.abandoned:
                self._route(job, ready)
        self._front_end_timer = (
            asyncio.get_running_loop().call_later(self._front_end[0][0] - now, self._leave_front_end)
            if self._front_end
            else None
        )

    def _route(self, job: Job, received_s: float | None) -> None:
        """Hand ``job`` to an engine, or start its prefill -> transfer -> decode pipeline."""
        if job.done is job.first.done:
            self._enqueue(job, self.prefill or self.decode, job.first, received_s)
            return
        job.pipeline = asyncio.ensure_future(self._disaggregated(job, received_s))
        self._pipelines.add(job.pipeline)
        job.pipeline.add_done_callback(self._pipelines.discard)

    @staticmethod
    def _enqueue(job: Job, pool: Pool, request: SimRequest, received_s: float | None = None) -> None:
        job.current, job.engine = request, pool.pick(request)
        job.engine.enqueue(request, received_s)

    async def _disaggregated(self, job: Job, received_s: float | None) -> None:
        first = job.first
        first.output_len = 1  # the prefill engine produces the first token only
        assert self.prefill is not None  # a disaggregated cluster has its prefill pool
        self._enqueue(job, self.prefill, first, received_s)
        await first.done
        job.engine = None
        await self.clock.sleep(first.prompt_len * self.transfer_s_per_token)
        self._enqueue(job, self.decode, first.continue_after_prefill())
        await job.current.done
        if not job.done.done():
            job.done.set_result(None)

    def abort(self, job: Job) -> None:
        """Drop a job the client gave up on, wherever it is."""
        job.abandoned = True
        if job.pipeline is not None:
            job.pipeline.cancel()
        if job.engine is not None:
            job.engine.abort(job.current)
