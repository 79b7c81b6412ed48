"""The simulated engine: vLLM-style continuous batching on a clock, stepping by events.

Each iteration (vLLM v1's scheduler):

1. running requests first, in admission order: a prefilling one gets a chunk of
   ``min(tokens left, budget)`` of the ``max_num_batched_tokens`` budget (chunked prefill), a
   decoding one gets 1 token; each must get the KV blocks it will fill, and when none are free
   the newest running request is preempted (recompute: its blocks are released, its full ones
   still named in the cache, it goes back to the front of the queue and later prefills its
   prompt and what it had generated, from whatever of those blocks was not reused meanwhile);
2. then waiting requests are admitted FCFS while budget, ``max_num_seqs`` and free blocks allow,
   starting from their longest cached prefix (all full blocks; a prompt fully cached recomputes
   its last block, as vLLM recomputes its last token); the free blocks must hold the first chunk,
   or with ``scheduler_reserve_full_isl`` the whole sequence (its prompt, and what a preempted
   request had generated), as vLLM checks with ``KVCacheManager.can_fit_full_sequence``;
3. the iteration lasts ``timing.iteration_s(batch)``; at its end every request whose prefill
   completed emits its first token and every decoding one its next token. A request ends with
   exactly ``output_len`` tokens (``ignore_eos`` semantics).

Event stepping: when an iteration would be decode-only and nothing waiting can be admitted, the
engine plans a *span* of k identical-shape iterations up to the next event (the first request to
finish, or the last step before a block shortage) and computes their durations at once
(``timing.decode_span_s``). An arrival during a span cuts it after the iteration in progress.
So the Python work grows with arrivals, completions and admissions, not with tokens. Tokens of a
span reach a request as one chunk at the span's end (``times``/``tokens``): TTFT is exact; ITL
within a span is its mean. A request whose first ``reasoning_len`` tokens are reasoning
(:mod:`.reasoning`) also ends a span at its last reasoning token and takes its first answer
token in a span of its own, so that its first answer token's time is exact too. ``spans=False`` (the HTTP server, which must stream every token at its
time) runs every iteration on its own; the times are the same.

Handing tokens out takes clock time on a wall clock: an iteration's tokens are handed out a
little before its simulated end, by how much measured online (:mod:`.wake_timing`). On the
virtual clock that lead is exactly 0.

An idle engine starts its next iteration at the arrival of the request that woke it, and a
request's arrival is when its server received it (``received_s``), not after the server parsed
and tokenized it: the simulator's own request handling (its tokenizer takes about 1.4 ms per
1,000 tokens of text) is not the modelled server's and must not delay the simulated times (a
calibrated profile's prefill times already hold the real server's share). The first token still
cannot go out before the request has been handled. On the virtual clock both are the same instant.

Async scheduling (``EngineConfig.async_scheduling``; vLLM's default on GPUs since v0.14.0, whose
release notes say "Async scheduling is now enabled by default", PR #27614, except with pipeline
parallelism, the CPU backend and some speculative decoding): vLLM's engine core then keeps two
batches in flight (``max_concurrent_batches`` 2, vllm/config/vllm.py) and
``EngineCore.step_with_batch_queue`` (vllm/v1/engine/core.py) schedules batch k+1 while batch k
runs, then blocks on batch k and processes its outputs. A request that reaches the engine core
while batch k runs is added (``queued_ts``) and scheduled (``scheduled_ts``) when batch k's
outputs are in, into batch k+2, which runs after batch k+1: from ``scheduled_ts`` its first token
takes the whole of batch k+1 and then its own batch, one iteration more than a synchronous
scheduler. A slot or KV blocks freed by batch k's finished requests serve batch k+2 likewise.
Modelled: when an iteration starts at the end of the previous one, which started at ``s``, a
waiting request joins it only if it arrived at or before ``s`` (its ``scheduled_s`` is then
``s``, when vLLM decided the batch), and the slots and blocks of the requests that finished at
the end of the previous iteration stay taken for this one. An engine with nothing running has
no batch in flight and admits at once, as vLLM's empty batch queue does.

Disaggregated serving: a request marked ``transferred`` (its prompt's KV came from a prefill
engine) takes blocks for its whole prompt at admission, computes nothing and decodes from the
next iteration on.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..replayer.clock import Clock
from ..workloads.prompts import KeyedPrompt
from .kvcache import KVCache, block_hashes, segment_block_hashes
from .loop_task import LoopTask
from .timing import Batch, TimingModel
from .wake_timing import WakeTiming

Tokens = Sequence[int] | KeyedPrompt
_TIMER = object()  # what the engine's wake-up future holds when its iteration timer fired


def _set(future: asyncio.Future, value: object) -> None:
    if not future.done():
        future.set_result(value)


MAX_GPU_BLOCKS = 10_000_000  # the cache keeps ~150 bytes of Python state per block: 1.5 GB here; a GPU holds far fewer


@dataclass(frozen=True)
class EngineConfig:
    """vLLM's scheduler and cache settings."""

    block_size: int = 16
    num_gpu_blocks: int = 8192
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    async_scheduling: bool = False  # vLLM's --async-scheduling: batches decided one iteration ahead (module doc)
    # vLLM's --scheduler-reserve-full-isl: admit a request only if its whole sequence fits (module doc, step 2)
    scheduler_reserve_full_isl: bool = False
    # the context served (vLLM's --max-model-len); None: the model's (Profile.max_model_len)
    max_model_len: int | None = None


class SimRequest:
    """One request inside the engine. ``times``/``tokens``: when tokens came out and how many.

    Its tokens are ``prompt`` then ``output``, both token ids, or both
    :class:`~pytest_llmreplay.workloads.prompts.KeyedPrompt` (blocks are then named from the keys and no
    token exists)."""

    __slots__ = (
        "id",
        "prompt",
        "output",
        "prompt_len",
        "output_len",
        "reasoning_len",
        "arrival_s",
        "scheduled_s",
        "transferred",
        "blocks",
        "hashes",
        "registered",
        "computed",
        "generated",
        "target",
        "cached",
        "admitted",
        "preemptions",
        "running",
        "times",
        "tokens",
        "done",
        "on_emit",
    )

    def __init__(self, prompt: Tokens, output: Tokens, reasoning_len: int = 0) -> None:
        if not len(output):
            raise ValueError("a request must generate at least one token")
        if isinstance(prompt, KeyedPrompt) != isinstance(output, KeyedPrompt):
            raise ValueError("prompt and output must both be token ids or both be keyed")
        self.id = -1  # set by the engine
        self.prompt = prompt
        self.output = output
        self.prompt_len = len(prompt)
        self.output_len = len(output)
        self.reasoning_len = min(reasoning_len, self.output_len)  # leading output tokens that are reasoning
        self.arrival_s = 0.0
        self.scheduled_s: float | None = None
        self.transferred = False  # the prompt's KV arrives from a prefill engine (disaggregated)
        self.blocks: list[int] = []
        self.hashes: list[int] = []  # chained hashes of the leading full blocks of prompt + output
        self.registered = 0  # leading blocks named in the cache
        self.computed = 0  # tokens whose KV is computed
        self.generated = 0
        self.target = self.prompt_len  # tokens to prefill: the prompt, plus the output so far after a preemption
        self.cached: int | None = None  # prompt tokens hit at first admission
        self.admitted = False
        self.preemptions = 0
        self.running = False
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.on_emit: Callable[[], None] | None = None  # called after each token chunk (the HTTP server streams on it)

    def continue_after_prefill(self) -> SimRequest:
        """The decode half of this request in a disaggregated cluster: the prompt's KV arrives
        complete, the first token is already out, and tokens go on into the same lists."""
        rest = SimRequest(self.prompt, self.output, self.reasoning_len)
        rest.transferred = True
        rest.generated = 1
        rest.hashes = self.hashes
        rest.times, rest.tokens, rest.on_emit = self.times, self.tokens, self.on_emit
        return rest

    def block_hashes(self, full: int, size: int) -> list[int]:
        """The chained hashes of the first ``full`` blocks (of ``size`` tokens) of prompt +
        output, extending the ones already computed."""
        if len(self.hashes) < full:
            prompt, output = self.prompt, self.output  # both keyed, or both token ids (__init__)
            if isinstance(prompt, KeyedPrompt):  # all at once: cheap, and no tokens to wait for
                assert isinstance(output, KeyedPrompt)
                self.hashes = segment_block_hashes(
                    prompt.segments + output.segments, size, (self.prompt_len + self.output_len) // size
                )
            else:
                assert not isinstance(output, KeyedPrompt)
                start = len(self.hashes)
                ids = (
                    prompt[: full * size]
                    if full * size <= self.prompt_len
                    else list(prompt) + list(output[: full * size - self.prompt_len])
                )
                self.hashes += block_hashes(ids, size, self.hashes[-1] if start else 0, start)
        return self.hashes[:full]


@dataclass
class _Plan:
    prefills: list[tuple[SimRequest, int]]
    decodes: list[SimRequest]
    ends: list[
        float
    ]  # cumulative end of each planned iteration, from the plan's start (floats: no numpy scalar per read)


class Engine(LoopTask):
    """One simulated engine on ``clock``. ``submit`` a request, await its ``done`` future."""

    def __init__(self, config: EngineConfig, timing: TimingModel, clock: Clock, spans: bool = True) -> None:
        self.config = config
        self.spans = spans
        self.timing = timing
        self.clock = clock
        self.cache = KVCache(config.num_gpu_blocks, config.block_size)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.preemptions_total = 0
        self._next_id = 0
        self._wake: asyncio.Future | None = None
        self._start = 0.0  # when the iteration being scheduled starts
        self._decided: float | None = None  # async scheduling: when vLLM decided that iteration (None: at its start)
        self._held_slots = 0  # async scheduling: requests that finished as it started, still counted as running
        self._held_blocks = 0  # ... and the blocks they released
        self._aborts = 0  # aborts since the last hand-out: only then can a planned request have left
        self.wake_timing = WakeTiming()  # how early hand-outs start (module docstring)

    def submit(self, prompt: Tokens, output: Tokens, reasoning_len: int = 0) -> SimRequest:
        """Queue a request that generates exactly ``len(output)`` tokens, the first
        ``reasoning_len`` of them reasoning (see :meth:`enqueue`)."""
        return self.enqueue(SimRequest(prompt, output, reasoning_len))

    def enqueue(self, request: SimRequest, received_s: float | None = None) -> SimRequest:
        """Queue ``request``; it is admitted at the next iteration boundary. ``received_s``: when
        its server received it, if earlier than now (module docstring: the server's own work)."""
        request.id = self._next_id
        now = self.clock.now()
        request.arrival_s = now if received_s is None else min(received_s, now)
        self._next_id += 1
        self.waiting.append(request)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        return request

    def abort(self, request: SimRequest) -> None:
        """Drop a request the client gave up on, releasing its blocks."""
        self._aborts += 1  # the iteration in flight hands nothing to it
        if request.running:
            self.running.remove(request)
            request.running = False
            self.cache.release(request.blocks)
            request.blocks = []
        elif request in self.waiting:
            self.waiting.remove(request)

    def load(self) -> int:
        """Requests in the engine (running + waiting), for routers."""
        return len(self.running) + len(self.waiting)

    def active_blocks(self) -> int:
        """Blocks held by running requests + blocks the waiting ones' prompts need (routers)."""
        size = self.config.block_size
        return self.cache.num_blocks - self.cache.free_blocks + sum(-(-r.target // size) for r in self.waiting)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        start = self.clock.now()
        while True:
            if not self.running and not self.waiting:
                idle_from = start
                self._wake = loop.create_future()
                await self._wake
                now = self.clock.now()
                start = max(idle_from, min(now, self.waiting[0].arrival_s if self.waiting else now))
                self._decided = None  # no batch in flight: the next one is decided as it starts
                continue
            self._wake = None
            await self.clock.settle()  # requests sent at this very instant join this iteration
            self._start = start
            plan = self._schedule()
            steps = len(plan.ends)
            early = self.wake_timing.early_s(len(plan.prefills) + len(plan.decodes))
            while True:
                due = start + plan.ends[steps - 1] - early
                self._wake = loop.create_future()
                asked = self.clock.now()
                timer = loop.call_later(max(due - asked, 0.0), _set, self._wake, _TIMER)
                woken_by = await self._wake
                timer.cancel()
                if woken_by is _TIMER or steps == 1:
                    if self.clock.now() >= due:
                        break
                    continue
                # an arrival: finish the iteration in progress, then let it join
                steps = min(bisect_right(plan.ends, self.clock.now() - start) + 1, steps)
            self._wake = None
            applied = self.clock.now()
            if woken_by is _TIMER:
                self.wake_timing.lateness.append(applied - max(due, asked))
            self._decide_next(plan, steps, start)
            handed = self._apply(plan, steps, start)
            self.wake_timing.handed_out(self.clock.now() - applied, handed)
            # back to back: the next iteration starts when this one ended in simulated time, even
            # if the event loop woke late (wall clock), so lateness does not pile up
            start += plan.ends[steps - 1]
            if self.clock.now() < start:
                await self.clock.sleep_until(start)  # its tokens went out early: the next iteration starts on time

    def _decide_next(self, plan: _Plan, steps: int, start: float) -> None:
        """Async scheduling (module doc): the next iteration was decided as the last of the
        ``steps`` applied started; the slots and blocks held for it are free again."""
        if self.config.async_scheduling:
            self._decided = start + (plan.ends[steps - 2] if steps > 1 else 0.0)
            self._held_slots = self._held_blocks = 0

    # -- one iteration at a time, for a lockstep group (sim/lockstep.py) ----------------------

    def busy(self) -> bool:
        """Requests running or waiting: the engine has an iteration to run."""
        return bool(self.running or self.waiting)

    def wait_for_arrival(self, wake: asyncio.Future | None) -> None:
        """Set ``wake``'s result at the next request queued (None: arrivals wake nobody)."""
        self._wake = wake

    def plan_iteration(self, start: float) -> _Plan:
        """Schedule the iteration that starts at ``start`` (an engine made with ``spans=False``
        plans one iteration: ``plan.ends`` holds its own duration)."""
        self._start = start
        return self._schedule()

    def end_iteration(self, plan: _Plan, start: float, length: float) -> int:
        """The iteration of ``plan`` started at ``start`` and lasted ``length`` (its group's step,
        at least its own duration): async scheduling's bookkeeping, then its tokens handed out at
        ``start + length``. Returns how many requests got tokens."""
        plan.ends = [length]
        self._decide_next(plan, 1, start)
        return self._apply(plan, 1, start)

    # -- scheduling ---------------------------------------------------------------------------

    def _schedule(self) -> _Plan:
        budget = self.config.max_num_batched_tokens
        size = self.config.block_size
        prefills: list[tuple[SimRequest, int]] = []
        decodes: list[SimRequest] = []
        kv_tokens = 0  # Σ computed over the decodes
        preempted_before = self.preemptions_total
        for request in list(self.running):
            if not request.running or budget <= 0:
                continue
            computed = request.computed
            if computed < request.target:
                chunk = min(request.target - computed, budget)
                if self._grow(request, computed + chunk):
                    prefills.append((request, chunk))
                    budget -= chunk
            elif computed < len(request.blocks) * size or self._grow(request, computed + 1):
                decodes.append(request)
                kv_tokens += computed
                budget -= 1
        preempted = self.preemptions_total > preempted_before
        if preempted:  # a later request's growth may have preempted an earlier one
            decodes = [r for r in decodes if r.running]
            prefills = [(r, c) for r, c in prefills if r.running]
            kv_tokens = sum(r.computed for r in decodes)
        if not self.running:  # nothing in flight (async scheduling: module doc)
            self._decided, self._held_slots, self._held_blocks = None, 0, 0
        decided = self._decided
        admitted_now = 0  # requests scheduled for the first time, or again after a preemption (Batch.new_requests)
        while (
            self.waiting
            and budget > 0
            and len(self.running) + self._held_slots < self.config.max_num_seqs
            and not preempted
            and (decided is None or self.waiting[0].arrival_s <= decided)
        ):
            admitted = self._admit(self.waiting[0], budget)
            if admitted is None:
                break
            request = self.waiting.popleft()
            if request.transferred:
                self._register(request)  # its KV arrived whole: decoding from the next iteration
                continue
            prefills.append((request, admitted))
            budget -= admitted
            admitted_now += 1
        if (
            self.spans
            and not prefills
            and decodes
            and (not self.waiting or len(self.running) >= self.config.max_num_seqs)
        ):
            return self._decode_span(decodes, kv_tokens)
        batch = Batch(
            prefill_tokens=sum(c for _, c in prefills),
            prefill_context=sum(r.computed + c for r, c in prefills),
            decode_seqs=len(decodes),
            kv_tokens=kv_tokens,
            kv_usage=self.cache.usage,
            new_requests=admitted_now,
        )
        return _Plan(prefills, decodes, [float(self.timing.iteration_s(batch))])

    def _admit(self, request: SimRequest, budget: int) -> int | None:
        """Take the longest cached prefix and blocks for the first chunk; the chunk, or None.
        A transferred request takes blocks for its whole prompt and no chunk (0)."""
        size = self.config.block_size
        hit = self.cache.match(request.block_hashes(request.target // size, size))
        if len(hit) * size >= request.target and not request.transferred:
            hit = hit[:-1]
        computed = request.target if request.transferred else len(hit) * size
        chunk = min(request.target - computed, budget)
        need = -(-(computed + chunk) // size) - len(hit)
        fits = -(-request.target // size) - len(hit) if self.config.scheduler_reserve_full_isl else need
        reusable = sum(1 for block in hit if self.cache.ref[block] == 0) if hit else 0
        if fits > self.cache.free_blocks - reusable - self._held_blocks:
            return None
        if hit:
            self.cache.take_cached(hit)
        fresh = self.cache.allocate(need)
        assert fresh is not None  # checked just above: enough blocks are free
        request.blocks = hit + fresh
        request.registered = len(hit)
        request.computed = computed
        if not request.admitted:
            request.admitted = True
            request.cached = computed
            request.scheduled_s = max(self._start if self._decided is None else self._decided, request.arrival_s)
            if not request.transferred:
                self.cache.queries += request.prompt_len
                self.cache.hits += computed
        self.running.append(request)
        request.running = True
        return chunk

    def _grow(self, request: SimRequest, tokens: int) -> bool:
        """Give ``request`` blocks for ``tokens`` tokens, preempting the newest running requests
        while none are free; False if ``request`` itself was preempted."""
        need = -(-tokens // self.config.block_size) - len(request.blocks)
        while need > 0:
            blocks = self.cache.allocate(need)
            if blocks is not None:
                request.blocks += blocks
                return True
            victim = self.running[-1]
            self._preempt(victim)
            if victim is request:
                return False
        return True

    def _preempt(self, request: SimRequest) -> None:
        """Back to the front of the queue, its blocks released. Its full blocks are named in the
        cache first, generated ones too: vLLM caches a block as it fills (``KVCacheManager.
        allocate_slots`` -> ``cache_blocks``), so a preempted request resumes from whatever of its
        blocks were not reused meanwhile and recomputes only the rest; here decode blocks are
        otherwise named only when a request finishes."""
        self._register(request)
        self.running.remove(request)
        request.running = False
        request.target = request.prompt_len + request.generated
        request.transferred = False  # what it had is recomputed here
        self.cache.release(request.blocks)
        request.blocks, request.computed, request.registered = [], 0, 0
        request.preemptions += 1
        self.preemptions_total += 1
        self.waiting.appendleft(request)

    def _decode_span(self, decodes: list[SimRequest], kv_tokens: int) -> _Plan:
        """k decode-only iterations up to the first completion, block shortage, or end of a
        request's reasoning (then its first answer token alone: module docstring);
        ``kv_tokens``: Σ computed over ``decodes``, summed by the caller's walk."""
        size = self.config.block_size
        k = min(
            (r.output_len if r.generated > r.reasoning_len else max(r.reasoning_len, r.generated + 1)) - r.generated
            for r in decodes
        )
        rooms = [len(r.blocks) * size - r.computed for r in decodes]  # tokens each fits in the blocks it holds

        def blocks_needed(steps: int) -> int:
            return sum(-((room - steps) // size) for room in rooms if room < steps)

        free = self.cache.free_blocks
        if blocks_needed(k) > free:
            low, high = 1, k  # blocks_needed(1) <= free: _schedule gave each its next block
            while low < high:
                mid = (low + high + 1) // 2
                low, high = (mid, high) if blocks_needed(mid) <= free else (low, mid - 1)
            k = low
        for request, room in zip(decodes, rooms, strict=True):
            if room < k:
                fresh = self.cache.allocate(-((room - k) // size))
                assert fresh is not None  # k was chosen so that blocks_needed(k) are free
                request.blocks += fresh
        seqs = len(decodes)
        usage_step = seqs / size / self.cache.num_blocks
        durations = self.timing.decode_span_s(seqs, kv_tokens, self.cache.usage, usage_step, k)
        return _Plan([], decodes, np.cumsum(durations).tolist())

    # -- applying -----------------------------------------------------------------------------

    def _apply(self, plan: _Plan, steps: int, start: float) -> int:
        """The planned iteration(s) ended: requests aborted meanwhile get nothing. Returns how
        many requests got tokens."""
        now = start + plan.ends[steps - 1]
        firsts = []  # prefills that completed: their first token is out
        for request, chunk in plan.prefills:
            if not request.running:
                continue
            request.computed += chunk
            self._register(request)
            if request.computed >= request.target:
                firsts.append(request)
                if not request.generated:  # vLLM counts a request's whole prompt, cached or not, once
                    self.prompt_tokens_total += request.prompt_len
        self._hand_out(firsts, now, 1)
        decodes = [request for request in plan.decodes if request.running] if self._aborts else plan.decodes
        self._aborts = 0
        self._hand_out(decodes, now, steps, steps)
        return len(firsts) + len(decodes)

    def _hand_out(self, requests: list[SimRequest], now: float, count: int, computed: int = 0) -> None:
        """``count`` tokens to each of ``requests`` at ``now`` (and ``computed`` more tokens'
        KV); finish those done, tell their streams. One inline loop, no call per request but to
        finish or stream: a long decode span's hot path. (A request's finish and stream touch
        only that request, and an abort from its stream only that one: so one pass, each
        request given its tokens just before its own finish and stream.)"""
        self.generation_tokens_total += count * len(requests)
        finish = self._finish
        for request in requests:
            request.computed += computed
            request.generated += count
            request.times.append(now)
            request.tokens.append(count)
            if request.generated >= request.output_len:
                finish(request)
            if request.on_emit is not None:
                request.on_emit()

    def _register(self, request: SimRequest) -> None:
        """Name the request's newly full blocks (prompt and generated) in the cache."""
        size = self.config.block_size
        full = min(request.computed // size, len(request.blocks))
        if full <= request.registered:
            return
        hashes = request.block_hashes(full, size)
        self.cache.register(request.blocks[request.registered : full], hashes[request.registered : full])
        request.registered = full

    def _finish(self, request: SimRequest) -> None:
        self._register(request)
        self.running.remove(request)
        request.running = False
        if self.config.async_scheduling:
            self._held_slots += 1
            self._held_blocks += len(request.blocks)
        self.cache.release(request.blocks)
        request.blocks = []
        if not request.done.done():
            request.done.set_result(None)

    def stats(self) -> dict[str, Any]:
        """Gauges and counters for ``/metrics`` (vLLM's names where they exist)."""
        return {
            "num_requests_running": len(self.running),
            "num_requests_waiting": len(self.waiting),
            "kv_cache_usage_perc": self.cache.usage,
            "prefix_cache_queries_total": self.cache.queries,
            "prefix_cache_hits_total": self.cache.hits,
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
            "num_preemptions_total": self.preemptions_total,
        }
