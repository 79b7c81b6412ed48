"""A simulated part that runs as one asyncio task: an engine's iteration loop, or a lockstep
group's (sim/engine.py, sim/lockstep.py)."""

from __future__ import annotations

import asyncio


class LoopTask:
    """Runs ``_run`` as a task from :meth:`start` until :meth:`stop` cancels it."""

    _task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        raise NotImplementedError


__all__ = ["LoopTask"]
