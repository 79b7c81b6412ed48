"""The data-parallel engines of a MoE model, stepping in lockstep.

vLLM's data-parallel deployment of a MoE model (``data_parallel_size`` dp, with or without
``enable_expert_parallel``) runs one engine core per rank, each with its own scheduler and KV
cache, but "the data parallel ranks are not completely independent. Forward passes must be
aligned, and expert layers across all ranks are required to synchronize during every forward
pass, even when there are fewer requests to be processed than DP ranks", and a rank with nothing
scheduled runs "dummy" forward passes while any other rank has requests in progress (vLLM docs,
"Data Parallel Deployment", docs.vllm.ai/en/latest/serving/data_parallel_deployment/; the DP
coordinator process keeps the ranks stepping together). Each MoE layer gathers every rank's
tokens, so no rank's forward pass ends before the slowest rank's: a prefill chunk scheduled on
one rank lengthens the decode step of every other.

Model (:class:`LockstepGroup`): one loop steps all dp engines. At each step, every engine with
requests schedules its iteration (:meth:`~.engine.Engine.plan_iteration`, one iteration each:
no decode spans), the step lasts the longest of their iterations, and each engine's iteration
ends at the step's end (:meth:`~.engine.Engine.end_iteration`). A rank with no requests runs a
dummy pass of one token, never longer than a busy rank's iteration (the roofline grows with
tokens), so the step is the busy ranks' longest. A request that reaches an idle rank while
another rank is busy joins at the next step, as the rank's dummy pass is in flight; when every
rank is idle, the first arrival starts a step at once, as an idle engine does. Arrivals never
cut a step short. On a wall clock the step's tokens go out early by the group's
:class:`~.wake_timing.WakeTiming`, as one engine's do.

Not modelled: the dummy pass's own MoE traffic, and the roofline's assumption that every rank
carries the same tokens (its expert bytes count dp times one rank's tokens: sim/roofline.py),
which overstates the expert traffic of a step where a rank is idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..replayer.clock import Clock
from .engine import Engine
from .loop_task import LoopTask
from .wake_timing import WakeTiming


class LockstepGroup(LoopTask):
    """``engines`` (made with ``spans=False``) stepping together on ``clock`` (module doc);
    :meth:`start` runs them, in place of each engine's own :meth:`~.engine.Engine.start`."""

    def __init__(self, engines: Sequence[Engine], clock: Clock) -> None:
        if any(engine.spans for engine in engines):
            raise ValueError("a lockstep group steps one iteration at a time: make its engines with spans=False")
        self.engines = list(engines)
        self.clock = clock
        self.wake_timing = WakeTiming()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        clock = self.clock
        start = clock.now()
        while True:
            if not any(engine.busy() for engine in self.engines):
                idle_from = start
                wake = loop.create_future()
                for engine in self.engines:
                    engine.wait_for_arrival(wake)
                await wake
                now = clock.now()
                first = min((engine.waiting[0].arrival_s for engine in self.engines if engine.waiting), default=now)
                start = max(idle_from, min(now, first))
                continue
            for engine in self.engines:
                engine.wait_for_arrival(None)  # arrivals queue until the next step
            await clock.settle()  # requests sent at this very instant join this step
            plans = [(engine, engine.plan_iteration(start)) for engine in self.engines if engine.busy()]
            length = max(plan.ends[0] for _, plan in plans)
            due = start + length - self.wake_timing.early_s(sum(len(p.prefills) + len(p.decodes) for _, p in plans))
            asked = clock.now()
            await clock.sleep_until(due)
            applied = clock.now()
            self.wake_timing.lateness.append(applied - max(due, asked))
            handed = sum(engine.end_iteration(plan, start, length) for engine, plan in plans)
            self.wake_timing.handed_out(clock.now() - applied, handed)
            start += length  # back to back, in simulated time (as one engine's iterations)
            if clock.now() < start:
                await clock.sleep_until(start)


__all__ = ["LockstepGroup"]
