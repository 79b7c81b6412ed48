"""The replay driver (:mod:`~pytest_llmreplay.replayer.driver`) in N worker processes, as Ray actors.

One client process tops out at about 1.5k streamed requests/s; :class:`RayWorkers` runs the same
:class:`~pytest_llmreplay.replayer.driver.Replay` in N actors, on a local Ray instance it starts with
bounded resources (``num_cpus=N``, no dashboard, no usage statistics, loopback only) and stops
after, or on an existing Ray cluster (``address``, else ``RAY_ADDRESS``), actors spread over its
nodes. Ray is an optional extra, imported only here, when workers are asked for.

The rules:

- **Plan**: the whole run is planned once, here, as one process would (order, count limits,
  arrival offsets: :func:`~pytest_llmreplay.replayer.plan.session_plan`,
  :func:`~pytest_llmreplay.replayer.plan.arrival_offsets`).
- **Sharding** (:func:`~.worker_shares.shard_sessions`): whole sessions go to workers (a session's turns stay in
  one process: its loop is closed); each session, in plan order, goes to the worker with the
  fewest planned requests so far for each session it may have in flight (its share of the
  concurrency, below; 1 each without a cap; lowest index on a tie), so at every point of the
  schedule the workers' queues drain at one pace: a worker with 2 of a concurrency of 3 gets two
  thirds of the sessions (an even split left the other running alone for half the run, the run
  at 2 in flight where 3 were asked). Never more workers than sessions.
- **Start**: every worker starts at one instant, the wall-clock epoch the driver hands out plus
  :data:`LEAD_S`; each converts it to its own clock, so its records (and its schedule lag) count
  from the common start. Across hosts this needs synchronised clocks (NTP: the offset adds to
  every time). Before the instant is handed out, each worker opens and closes the endpoint once
  (:meth:`ReplayWorker.warm`): a fresh process's first opening (imports, the HTTP client's
  set-up) took over 1 s on a busy machine, past the lead, and its worker started late.
- **Timestamps mode**: each worker keeps its sessions' offsets of the global schedule
  (``arrival_s / speedup``), so the merged stream is the trace's.
- **Rate mode**: the one seeded arrival process at the asked rate is drawn here and each worker
  is given its sessions' draws: worker *k* runs at ``rate * share_k`` (its share of the
  sessions), and the merged stream is exactly the asked one, the same as one process's.
- **Concurrency mode** (and the cap in the open-loop modes): the global concurrency C is split,
  worker *k* getting ``C // N`` plus one for ``k < C % N`` (never more workers than C); at the
  tail, when one worker's queue is empty first, fewer than C sessions are in flight.
- **Merge**: the records come back (polled every :data:`POLL_S` while the run goes on), are
  sorted in schedule order, warm-up is marked over the whole run, and the run is one
  :class:`~pytest_llmreplay.replayer.records.ReplayRun` with the whole run's settings, so the Result, the
  baseline, the reports and the gate are those of a single-process run; ``workers`` adds each
  worker's own schedule lag and effective concurrency.
- **Server metrics**: the server's ``/metrics`` is scraped here, once for the whole run
  (:meth:`~pytest_llmreplay.replayer.endpoints.HTTPEndpoint.metrics_scraper`), not by the workers,
  whose endpoints are sent with scraping off.
- **A worker that dies** (killed, its node lost) is reported: every request of its part that
  had not come back is a ``failed`` record with the cause (:func:`~.worker_shares.unfinished_records`); the run
  finishes and what the other workers measured is kept. One that does not end by the run's
  deadline (``duration_s`` + ``grace_s`` + :data:`TAKE_TIMEOUT_S`: a frozen process) is taken
  as dead then. After a death, or an error raised out of a worker's run (which stops the
  others), every actor is killed and the next run on the same :class:`RayWorkers` (a session's
  next test) starts fresh ones.
- **Interrupts**: with ``stop_on_signals``, SIGINT or SIGTERM stops every worker as
  :meth:`~pytest_llmreplay.replayer.driver.Replay.stop` does and the run returns what was measured, with
  ``interrupted`` naming the signal; a second signal has its default effect.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

from ..errors import LLMReplayError
from ..workloads.workload import Workload
from .clock import WallClock
from .driver import Replay
from .endpoints import HTTPEndpoint
from .plan import (
    Part,
    ReplaySettings,
    arrival_offsets,
    check_warmup,
    mark_warmup,
    no_tool_call_turns,
    sent_prompt_format,
    session_plan,
)
from .records import ReplayRun, RequestRecord, WorkerOutcome, cancelled_note, fill_unreported_cached
from .worker_shares import shard_sessions, split_concurrency, unfinished_records

RAY_EXTRA = "pip install 'pytest-llmreplay[ray]'"
LEAD_S = 1.0  # from handing out the start instant to the start: workers open their endpoint meanwhile
POLL_S = 0.25  # how often records are fetched from the workers while the run goes on
TAKE_TIMEOUT_S = 30.0  # a worker that does not answer a fetch within this long is left to its run's outcome
OBJECT_STORE_BYTES = 256 << 20  # the local instance's shared-memory object store
ACTOR_START_TIMEOUT_S = 60.0  # workers (1 CPU each) not placed by then: the cluster lacks the CPUs
REACH_TIMEOUT_S = 5.0  # a Ray head's HOST:PORT that takes no connection within this long is not there


def import_ray() -> Any:
    """The ``ray`` module, or :class:`LLMReplayError` naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise LLMReplayError(f"workers run on Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


def start_ray(address: str | None, cpus: int) -> None:
    """Connect to the Ray cluster at ``address``, or start a local instance bounded to ``cpus``
    CPUs, without dashboard or usage statistics, on loopback; :class:`LLMReplayError` if neither works."""
    ray = import_ray()
    if address:
        check_reachable(address)
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            ray.init(
                num_cpus=cpus,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                object_store_memory=OBJECT_STORE_BYTES,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError...
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise LLMReplayError(f"cannot start {where}: {_first_line(exc)}") from None


def check_reachable(address: str) -> None:
    """:class:`LLMReplayError` when a ``HOST:PORT`` Ray address (its head's GCS) takes no TCP
    connection within :data:`REACH_TIMEOUT_S`: ``ray.init`` retries such an address for about 14
    minutes before it gives up. ``auto`` and ``ray://`` (Ray Client, which fails within 30 s
    itself) are left to Ray."""
    if address in ("auto", "local") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise LLMReplayError(f"Ray address {address!r}: expected HOST:PORT (the head's GCS), auto, or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise LLMReplayError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} (is its head running there?)"
        ) from None


class ReplayWorker:
    """A Ray actor (``max_concurrency=2``: ``take``/``stop`` answer while ``run`` runs): one
    :class:`Replay` of a part, its records handed out as they come (:meth:`take`)."""

    def __init__(self) -> None:
        self.pending: deque[RequestRecord] = deque()  # thread-safe appends and pops
        self.replay: Replay | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_reason: str | None = None

    def where(self) -> str:
        return f"{socket.gethostname()} pid {os.getpid()}"

    def pid(self) -> int:
        return os.getpid()

    def warm(self, endpoint: Any) -> None:
        """Open and close ``endpoint`` once, so that what a first opening costs in this process
        is paid before the start instant rather than inside the lead."""
        clock = WallClock()

        async def once() -> None:
            await endpoint.open(clock, 1)
            await endpoint.close()

        clock.run(once())

    def run(
        self,
        workload: Workload,
        endpoint: Any,
        prompts: Any,
        settings: ReplaySettings,
        indices: tuple[int, ...],
        offsets: tuple[float, ...] | None,
        start_epoch: float,
    ) -> ReplayRun:
        """Replay the part from the common start; the records not yet taken come back with the run."""
        clock = WallClock()
        part = Part(indices, workload.sessions, offsets, clock.at_epoch(start_epoch))
        self.replay = replay = Replay(
            workload, endpoint, prompts, settings, clock, on_record=self.pending.append, part=part
        )

        async def main() -> ReplayRun:
            self.loop = asyncio.get_running_loop()
            if self.stop_reason is not None:
                replay.stop(self.stop_reason)
            return await replay.run_async()

        run = clock.run(main())
        run.records = self.take()
        return run

    def take(self) -> list[RequestRecord]:
        taken = []
        while self.pending:
            taken.append(self.pending.popleft())
        return taken

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        if self.loop is not None and self.replay is not None:
            try:
                self.loop.call_soon_threadsafe(self.replay.stop, reason)
            except RuntimeError:  # the run has ended
                pass


@dataclass
class _Running:
    """The driver's view of one worker during a run."""

    index: int
    actor: Any
    part: Part
    outcome: WorkerOutcome
    received: list[RequestRecord]
    cap: int | None = None  # its share of the concurrency
    run_ref: Any = None
    run: ReplayRun | None = None


class RayWorkers:
    """``count`` replay workers on Ray (module docstring); a context manager: the Ray instance
    it started (or the connection it opened) and its actors go when it closes. ``where``: each
    started worker's host and process id; ``pids``: their process ids."""

    def __init__(self, count: int, address: str | None = None) -> None:
        if not isinstance(count, int) or count < 1:
            raise LLMReplayError(f"workers: expected an integer >= 1, got {count!r}")
        self.count = count
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.ray: Any = None
        self.actors: list[Any] = []
        self.where: list[str] = []
        self.pids: list[int] = []
        self._owns_ray = False
        self._interrupted: str | None = None
        self._interrupted_at = 0.0  # seconds from the start
        self._start = 0.0  # the driver's clock reading of the run's common start

    def __enter__(self) -> RayWorkers:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Start (or connect to) Ray and the actors, and wait until every actor answers."""
        if self.actors:
            return
        ray = self.ray = import_ray()
        if not ray.is_initialized():  # else: this process's Ray (the caller's), left as it is
            start_ray(self.address, self.count)
            self._owns_ray = True
        actor_class = ray.remote(num_cpus=1, max_concurrency=2)(ReplayWorker)
        self.actors = [actor_class.options(scheduling_strategy="SPREAD").remote() for _ in range(self.count)]
        try:
            self.where = ray.get([actor.where.remote() for actor in self.actors], timeout=ACTOR_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            total = ray.cluster_resources().get("CPU", 0)
            self.close()
            raise LLMReplayError(
                f"{self.count} workers need {self.count} CPUs of the Ray cluster; not all were placed within "
                f"{ACTOR_START_TIMEOUT_S:.0f} s (the cluster has {total:g} CPUs, some maybe taken by others)"
            ) from None
        self.pids = ray.get([actor.pid.remote() for actor in self.actors])

    def close(self) -> None:
        if self.ray is None:
            return
        self._drop_actors()
        if self._owns_ray:
            self.ray.shutdown()
            self._owns_ray = False

    def _drop_actors(self) -> None:
        """Kill the actors: the next run starts fresh ones (:meth:`start`)."""
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors, self.where, self.pids = [], [], []

    def replay(
        self,
        workload: Workload,
        endpoint: Any,
        prompts: Any,
        settings: ReplaySettings = ReplaySettings(),
        on_record: Callable[[RequestRecord], None] | None = None,
        stop_on_signals: bool = False,
    ) -> ReplayRun:
        """Replay ``workload`` on the workers (module docstring); the merged run. ``endpoint``
        (an HTTP endpoint, not yet opened) is copied to each worker; ``on_record`` sees each
        record as it comes back."""
        settings.validate()
        settings.check_for(workload)
        mode = settings.resolved_mode(workload)
        plan = session_plan(workload, settings)
        check_warmup(settings, sum(len(session.turns) for session in plan))
        offsets = arrival_offsets(plan, mode, settings)
        concurrency = settings.concurrency or (1 if mode == "concurrency" else None)
        count = min(self.count, concurrency or self.count, len(plan))
        caps = split_concurrency(concurrency, count)
        shards = shard_sessions([len(session.turns) for session in plan], count, caps)
        self.start()
        scraper = endpoint.metrics_scraper() if isinstance(endpoint, HTTPEndpoint) else None
        if scraper is not None:  # this process scrapes the server's /metrics once, the workers not
            endpoint = replace(endpoint, metrics_interval_s=0.0)
        self._warm(endpoint, len(shards))
        self._interrupted = None
        if scraper is not None:
            scraper.start()
        clock = WallClock()
        start_epoch = clock.epoch() + LEAD_S
        start = self._start = clock.at_epoch(start_epoch)
        running = []
        for k, (positions, cap) in enumerate(zip(shards, caps, strict=True)):
            part = Part(
                tuple(positions),
                tuple(plan[p] for p in positions),
                None if offsets is None else tuple(offsets[p] for p in positions),
                start,
            )
            share = replace(settings, mode=mode, concurrency=cap, check_idle=settings.check_idle and k == 0)
            worker = _Running(
                k,
                self.actors[k],
                part,
                WorkerOutcome(k, self.where[k], sum(len(s.turns) for s in part.sessions)),
                [],
                cap,
            )
            worker.run_ref = worker.actor.run.remote(
                replace(workload, sessions=part.sessions, warnings=()),
                endpoint,
                prompts,
                share,
                part.indices,
                part.offsets,
                start_epoch,
            )
            running.append(worker)
        handled = self._handle_signals() if stop_on_signals else []
        try:
            self._collect(running, settings, clock, start, on_record)
        except BaseException:
            # the other workers' runs go on otherwise, loading the server, their records taken
            # by the next run on the same actors: every actor goes, the next run starts fresh ones
            self._drop_actors()
            raise
        finally:
            for signum, previous in handled:
                signal.signal(signum, previous)
            scraped = scraper.stop() if scraper is not None else None
        if any(worker.outcome.died for worker in running):
            self._drop_actors()  # a dead actor is not given the next run (a session's next test)
        merged = self._merge(
            running,
            workload,
            endpoint,
            settings,
            mode,
            sent_prompt_format(settings, endpoint, plan),
            clock.now() - start,
        )
        unasked = no_tool_call_turns(settings, plan)  # of the whole plan: no worker's share says it
        merged.warnings.extend([unasked] if unasked else [])
        if scraped is not None:
            merged.warnings.extend(scraped.notes)
            merged.server_metrics = scraped.relative_to(start)
        return merged

    def _warm(self, endpoint: Any, count: int) -> None:
        """The first ``count`` workers open and close ``endpoint`` once (:meth:`ReplayWorker.warm`);
        an :class:`LLMReplayError` (the endpoint cannot be opened) is raised as a run's would be,
        any other failure is left to the run's outcome."""
        ray = self.ray
        for ref in [actor.warm.remote(endpoint) for actor in self.actors[:count]]:
            try:
                ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, LLMReplayError):
                    raise exc.cause from None
            except ray.exceptions.RayError:
                pass

    def _collect(
        self,
        running: list[_Running],
        settings: ReplaySettings,
        clock: WallClock,
        start: float,
        on_record: Callable[[RequestRecord], None] | None,
    ) -> None:
        """Fetch records until every worker's run has ended (or its worker died, or did not end
        by the run's deadline: module docstring)."""
        ray = self.ray
        stopping = False
        deadline = (
            None if settings.duration_s is None else start + settings.duration_s + settings.grace_s + TAKE_TIMEOUT_S
        )

        def keep(worker: _Running, records: list[RequestRecord]) -> None:
            worker.received.extend(records)
            if on_record is not None:
                for record in records:
                    on_record(record)

        while any(w.run is None and w.outcome.died is None for w in running):
            if self._interrupted and not stopping:
                stopping = True
                for worker in running:
                    worker.actor.stop.remote(f"interrupted by {self._interrupted}")
            live = [w for w in running if w.run is None and w.outcome.died is None]
            if deadline is not None and clock.now() > deadline:
                for worker in live:
                    late = f"worker {worker.index} ({worker.outcome.where}) did not end {TAKE_TIMEOUT_S:g} s after the run's duration and grace"
                    self._died(worker, late, clock.now() - start, settings)
                break
            ready, _ = ray.wait([w.run_ref for w in live], num_returns=1, timeout=POLL_S)
            for worker in live:
                if worker.run_ref in ready:
                    try:
                        worker.run = ray.get(worker.run_ref)
                    except ray.exceptions.RayTaskError as exc:
                        if isinstance(exc.cause, LLMReplayError):
                            raise exc.cause from None
                        self._died(
                            worker,
                            f"worker {worker.index} ({worker.outcome.where}) failed: {_first_line(exc.cause)}",
                            clock.now() - start,
                            settings,
                        )
                    except ray.exceptions.RayError as exc:
                        self._died(
                            worker,
                            f"worker {worker.index} ({worker.outcome.where}) died: {_first_line(exc)}",
                            clock.now() - start,
                            settings,
                        )
                    if worker.run is not None:
                        keep(worker, worker.run.records)
                else:
                    try:
                        keep(worker, ray.get(worker.actor.take.remote(), timeout=TAKE_TIMEOUT_S))
                    except ray.exceptions.RayError:
                        pass  # its run's outcome says what happened

    def _died(self, worker: _Running, cause: str, at_s: float, settings: ReplaySettings) -> None:
        worker.outcome.died = cause
        worker.received.extend(
            unfinished_records(worker.part, worker.received, cause, at_s, settings.duration_s, worker.cap)
        )

    def _merge(
        self,
        running: list[_Running],
        workload: Workload,
        endpoint: Any,
        settings: ReplaySettings,
        mode: str,
        prompt_format: str,
        ended_s: float,
    ) -> ReplayRun:
        from ..metrics.result import Result

        records = sorted(
            (r for w in running for r in w.received), key=attrgetter("scheduled_s", "session_index", "turn_index")
        )
        mark_warmup(records, settings)
        filled = fill_unreported_cached(records)
        warnings: list[str] = [filled] if filled else []
        seen: set[str] = set()
        for worker in running:
            for warning in ([worker.outcome.died] if worker.outcome.died else []) + (
                worker.run.warnings if worker.run else []
            ):
                if warning not in seen:
                    seen.add(warning)
                    warnings.append(
                        f"worker {worker.index}: {warning}"
                        if not warning.startswith(f"worker {worker.index} ")
                        else warning
                    )
        outcomes = []
        for worker in running:
            own = sorted(worker.received, key=attrgetter("scheduled_s", "session_index", "turn_index"))
            summary = Result(ReplayRun(own, [], {}, "", "", 0.0, worker.outcome.planned_requests)).summary
            lag = summary.get("schedule_lag") or {}
            outcomes.append(
                replace(
                    worker.outcome,
                    records=len(own),
                    schedule_lag_p50=lag.get("p50"),
                    schedule_lag_p99=lag.get("p99"),
                    effective_concurrency=summary.get("effective_concurrency", {}).get("value"),
                )
            )
        stopped = next((w.run.stopped for w in running if w.run is not None and w.run.stopped), None)
        if self._interrupted:  # as one process says it
            warnings.insert(0, f"interrupted by {self._interrupted} {cancelled_note(self._interrupted_at)}")
        return ReplayRun(
            records=records,
            warnings=warnings,
            settings={
                **settings.as_dict(),
                "mode": mode,
                "api": endpoint.api,
                "prompt_format": prompt_format,
            },
            workload=workload.source or workload.format,
            endpoint=endpoint.name,
            duration_s=max(
                [w.run.duration_s for w in running if w.run is not None]
                + [ended_s if any(w.outcome.died for w in running) else 0.0]
            ),
            planned_requests=sum(w.outcome.planned_requests for w in running),
            interrupted=self._interrupted,
            stopped=None if self._interrupted else stopped,
            workers=outcomes,
        )

    def _handle_signals(self) -> list[tuple[int, Any]]:
        """Stop the workers on SIGINT/SIGTERM (module docstring); the handlers replaced."""

        def interrupt(signum: int, frame: Any) -> None:
            for handled, previous in replaced:
                signal.signal(handled, previous)  # a second signal has its default effect
            self._interrupted = signal.Signals(signum).name
            self._interrupted_at = WallClock().now() - self._start

        replaced: list[tuple[int, Any]] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                replaced.append((signum, signal.signal(signum, interrupt)))
            except ValueError:  # not the main thread
                continue
        return replaced


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
