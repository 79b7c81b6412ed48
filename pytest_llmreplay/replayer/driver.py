"""The replay driver: sends a workload's sessions to an endpoint as the trace says, on a clock.

When sessions start (``mode``):

- ``timestamps``: open loop, session *i* starts at ``arrival_s / speedup``;
- ``concurrency``: ``concurrency`` sessions in flight, the next starting when one ends (the
  trace's arrival times are ignored, its order and delays kept);
- ``rate``: open loop at ``rate`` sessions/s, Poisson (seeded) or constant spacing;
- ``auto``: ``rate`` when a rate is given, else ``concurrency`` when a concurrency is given or
  the workload is untimed, else ``timestamps``.

Within a session the loop is always closed: turn *n+1* is scheduled when turn *n* completes plus
its ``delay_s / speedup`` (tool time, think time), or, for a turn its trace times itself
(``Turn.due_s``), at its session's start plus ``due_s / speedup``, or when turn *n* completes if
that is later (AIPerf's fixed schedule). ``concurrency`` in the open-loop modes caps the
sessions in flight (later ones wait, which shows as schedule lag).

Limits: ``duration_s`` stops admitting sessions and turns at that time, waits ``grace_s`` for
requests in flight, then cancels them (status ``cancelled``, not ``failed``; so is a request
that fails while the run cancels its requests, its connection closed under it, noted).
``max_requests``/``max_sessions`` take whole sessions in order until the count is reached (the
session that reaches it runs to its end), cycling through the workload again when it is shorter
(in timestamps mode each pass arrives later by the trace's span plus one mean gap). Settings that
contradict the mode they resolve to (a rate outside rate mode, an order in timestamps mode,
timestamps mode on an untimed trace) are errors, not ignored.
Warm-up: the first ``warmup_requests`` requests (by schedule) and every request scheduled in the
first ``warmup_s`` seconds are recorded but flagged, and metrics leave them out.

Prompts on completions endpoints are text, or token ids with ``prompt_format="ids"`` (on the other
APIs they are messages, text, and the run's settings say ``text`` whatever was asked); unset, the
endpoint's ``preferred_prompt_format`` decides, else text. The in-process simulator prefers
``keyed`` (:class:`~pytest_llmreplay.workloads.prompts.KeyedPrompt`: hash-id and synthetic prompts named by
keys, not generated; ids for agent chains), which only in-process endpoints understand.

Session order (concurrency and rate modes): ``sequential``, ``shuffled`` (a seeded permutation
per pass) or ``sampled`` (seeded draws with replacement), as AIPerf offers for inputs.json.

Tool calls (``tool_calls``, off by default: it changes what a real server generates): a turn
whose workload says it ends in a tool call (``Turn.tool_call``: an agent trace's turns but the
last) asks for one, on chat with ``tools`` and a ``tool_choice`` naming the one tool
(:mod:`~pytest_llmreplay.workloads.prompts`), and its answer's tool call goes back in the next
turn's history, the tool's output as a ``tool`` message, after the tool's ``delay_s``; the
simulator answers with one. Over another API the turns go without ``tools`` (the run warns once),
except to the in-process simulator, which answers them with a call whatever the API.

Every request yields a :class:`~pytest_llmreplay.replayer.records.RequestRecord`, whatever happened to it; a failed request ends its
session (an agent cannot go on without the answer). Times in records are seconds from the start.

Interrupts: with ``stop_on_signals`` (the command line's), SIGINT (Ctrl-C) or SIGTERM stops the
run as the duration limit does, at once: what is in flight is cancelled, nothing more is sent,
and the run returns every record so far, with ``interrupted`` naming the signal. A second signal
has its default effect. :meth:`Replay.stop` ends a run the same way from code (an ``on_record``
callback that has seen enough), with ``stopped`` giving the reason; :meth:`Replay.interrupt` as
a signal does, from a signal handler that outlives the run (several replays under one handler:
:mod:`~pytest_llmreplay.replayer.signal_stop`).

Parts (:class:`~pytest_llmreplay.replayer.plan.Part`, planned by :mod:`~pytest_llmreplay.replayer.workers`): a run split over processes
gives each a part of the whole run's plan, with the sessions' indices and start offsets in it,
and one start instant ``start_at`` (this process's clock reading of the common start); records
then count from that instant and carry the whole run's session indices, so the parts' records
merge into the whole run's. Warm-up marks need the whole run: :func:`~pytest_llmreplay.replayer.plan.mark_warmup` on the merge.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter

from ..errors import LLMReplayError
from ..metrics.reasoning import unstreamed_reasoning
from ..wording import counted
from ..workloads.prompts import Conversation, PromptFactory, extends_previous
from ..workloads.workload import OUTPUT_LIMIT_FIELDS, HashBlocks, Session, Synthetic, Workload
from .clock import Clock, VirtualClock, WallClock, check_virtual_span
from .endpoint_types import Endpoint, EndpointRequest, describe_error
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
from .records import ReplayRun, RequestRecord, cancelled_note, fill_unreported_cached
from .response import Response

LEAD_S = 0.05  # a session's first request is built this long before it is due
CHAT_TEMPLATE_ALLOWANCE = (64, 16)  # tokens a chat template may add: fixed, per message


USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")  # Response's, from usage


class Replay:
    """One run of a workload against an endpoint. Use :func:`replay` unless you need the parts."""

    def __init__(
        self,
        workload: Workload,
        endpoint: Endpoint,
        prompts: PromptFactory,
        settings: ReplaySettings = ReplaySettings(),
        clock: Clock | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
        stop_on_signals: bool = False,
        part: Part | None = None,
    ) -> None:
        settings.validate()
        settings.check_for(workload)
        self.workload = workload
        self.endpoint = endpoint
        self.prompts = prompts
        self.settings = settings
        self.clock = clock or WallClock()
        self.on_record = on_record
        self.mode = settings.resolved_mode(workload)
        self.part = part
        if part is None:
            self.plan = session_plan(workload, settings)
            self.indices: Sequence[int] = range(len(self.plan))
            self.offsets: Sequence[float] | None = arrival_offsets(self.plan, self.mode, settings)
            check_warmup(settings, sum(len(session.turns) for session in self.plan))
        else:  # planned by the whole run: limits, order and warm-up are the whole run's business
            self.plan, self.indices, self.offsets = list(part.sessions), part.indices, part.offsets
        self.prompt_format = sent_prompt_format(settings, endpoint, self.plan)
        self.records: list[RequestRecord] = []
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        self._start = 0.0
        self._started = False  # _start is the run's start (not yet while the endpoint opens)
        self._deadline: float | None = None
        self._slots: asyncio.Semaphore | None = None
        self.stop_on_signals = stop_on_signals
        self._tasks: list[asyncio.Task] = []  # the dispatcher or workers, and the sessions they started
        self.interrupted: str | None = None
        self.stopped: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # while the run is on it
        self._finished = False
        self._cut = False  # the run is cancelling its requests in flight (a stop, a signal, the duration's end)

    def run(self) -> ReplayRun:
        """Run to completion on the clock (its own event loop) and return the outcome."""
        return self.clock.run(self.run_async())

    async def run_async(self) -> ReplayRun:
        concurrency = self.settings.concurrency or (1 if self.mode == "concurrency" else None)
        self._loop = asyncio.get_running_loop()
        handled = self._handle_signals() if self.stop_on_signals else []
        await self.endpoint.open(self.clock, concurrency)
        try:
            if self.settings.check_idle:
                busy = await self.endpoint.idle_warning()
                if busy:
                    self.warnings.append(busy)
            self._check_virtual_span()
            self._prepare_prompts()
            self._warn_unasked_tool_calls()
            self._warn_unbounded_outputs()
            self._start = self.clock.now()
            if self.part is not None:
                late = self._start - self.part.start_at
                if late > 0:
                    self.warnings.append(
                        f"this worker was ready {late * 1e3:.0f} ms after the common start; its schedule lag counts that delay"
                    )
                else:
                    await self.clock.sleep_until(self.part.start_at)
                self._start = self.part.start_at
            self._started = True
            if self.settings.duration_s is not None:
                self._deadline = self._start + self.settings.duration_s
            await self._drive(concurrency)
            duration = self.clock.now() - self._start
        finally:
            for signum in handled:
                asyncio.get_running_loop().remove_signal_handler(signum)
            await self.endpoint.close()
        self._finished = True  # an interrupt from now on is too late to cut anything
        scraped = getattr(self.endpoint, "scraped", None)  # an HTTP endpoint's /metrics series
        if scraped is not None:
            self.warnings.extend(scraped.notes)
        self.records.sort(key=attrgetter("scheduled_s", "session_index", "turn_index"))
        if self.part is None:
            mark_warmup(self.records, self.settings)
            filled = fill_unreported_cached(self.records)
            if filled:
                self.warnings.append(filled)
        return ReplayRun(
            records=self.records,
            warnings=self.warnings,
            settings={
                **self.settings.as_dict(),
                "mode": self.mode,
                "api": self.endpoint.api,
                "prompt_format": self.prompt_format,
            },
            workload=self.workload.source or self.workload.format,
            endpoint=self.endpoint.name,
            duration_s=duration,
            planned_requests=sum(len(s.turns) for s in self.plan),
            interrupted=self.interrupted,
            stopped=self.stopped,
            server_metrics={} if scraped is None else scraped.relative_to(self._start),
        )

    def _check_virtual_span(self) -> None:
        """On a virtual clock, refuse a plan whose sessions start or turns wait past
        :data:`~pytest_llmreplay.replayer.clock.MAX_VIRTUAL_S` (its arrival offsets and delays
        over the speedup), before anything is sent: there the clock spun for ever."""
        if not isinstance(self.clock, VirtualClock):
            return
        offsets = self.offsets if self.offsets is not None else [0.0] * len(self.plan)
        speedup = self.settings.speedup
        check_virtual_span(
            self.clock.now()
            + max(
                (offset + _latest_wait(session) / speedup) for offset, session in zip(offsets, self.plan, strict=True)
            )
            if self.plan
            else 0.0
        )

    def _warn_unasked_tool_calls(self) -> None:
        """With ``tool_calls`` over an API other than chat, the turns that end in a tool call go
        without ``tools`` (module docstring): say so once, rather than a run whose records'
        ``tool_calls`` stay 0 in silence. Not for an endpoint that reads the request's
        ``tool_call`` flag itself (``reads_tool_call_flag``: the in-process simulator); and
        :func:`~.plan.no_tool_call_turns` (a worker's share: the whole run says it)."""
        unasked = no_tool_call_turns(self.settings, self.plan) if self.part is None else None
        self.warnings.extend([unasked] if unasked else [])
        turns = sum(turn.tool_call for session in self.plan for turn in session.turns)
        if self.settings.tool_calls and turns and self.endpoint.api != "chat":
            if not getattr(self.endpoint, "reads_tool_call_flag", False):
                self.warnings.append(
                    f"tool_calls: asked for on the chat API only; over {self.endpoint.api} the {turns} turns that end in a "
                    "tool call were sent without tools, so no figure measures a tool call (replay with api chat for them)"
                )

    def _warn_unbounded_outputs(self) -> None:
        """An endpoint whose outputs end only at their ``max_tokens`` (``stops_at_max_tokens``:
        the in-process simulator, which models no end of sequence) makes a turn that names no
        output length (a verbatim payload without ``max_tokens``, none in the extra body either)
        generate up to the model's context, 131,070 tokens on a 128k model: say so once."""
        if not getattr(self.endpoint, "stops_at_max_tokens", False):
            return
        if set(getattr(self.endpoint, "extra_body", {})) & set(OUTPUT_LIMIT_FIELDS):
            return
        turns = sum(turn.output_tokens is None for session in self.plan for turn in session.turns)
        if turns:
            self.warnings.append(
                f"{counted(turns, 'request')} with no output length (no max_tokens): the simulator models no end of "
                "sequence, so each generates up to the model's context; give max_tokens in the workload, or in --extra-body "
                "(pytest: --llm-extra-body)"
            )

    def _handle_signals(self) -> list[int]:
        """Stop on SIGINT/SIGTERM (module docstring); the signals handled (none off the main
        thread, or where the loop cannot handle signals)."""
        loop = asyncio.get_running_loop()
        handled: list[int] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, self._interrupt, signum)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            handled.append(signum)
        return handled

    def _interrupt(self, signum: int) -> None:
        loop = asyncio.get_running_loop()
        for handled in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(handled)  # a second signal has its default effect
        self._end_interrupted(signal.Signals(signum).name)

    def interrupt(self, name: str) -> None:
        """End the run as the signal ``name`` (``SIGINT``) does under ``stop_on_signals``, from a
        signal handler of the caller's: on the run's loop while it runs (woken at once), now when
        the run has not started (it then sends nothing); nothing once the run is over."""
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._end_interrupted, name)
        else:
            self._end_interrupted(name)

    def _end_interrupted(self, name: str) -> None:
        if self.interrupted is None and not self._finished:
            self.interrupted = name
            self._cancel(f"interrupted by {name}")

    def stop(self, reason: str) -> None:
        """End the run now, as a signal does: requests in flight are cancelled, nothing more is
        sent, and the run returns its records with ``stopped`` = ``reason``. Later calls do nothing."""
        if self.stopped is None and self.interrupted is None:
            self.stopped = reason
            self._cancel(f"stopped ({reason})")

    def _cancel(self, why: str) -> None:
        self._cut = True
        self.warnings.append(f"{why} {cancelled_note(self.clock.now() - self._start if self._started else None)}")
        for task in self._tasks:
            task.cancel()

    def _prepare_prompts(self) -> None:
        """Compute the prompt factory's word tables now, not in the first request's time, for
        the generated tokens the requests will carry (synthetic and hash-block turns): text (every
        API but completions, or the text format) needs the word texts, ids only the word list.
        Keyed prompts carry no tokens, except in agent chains (a turn extending the previous
        one), which go as ids."""
        if not any(isinstance(turn.prompt, (Synthetic, HashBlocks)) for session in self.plan for turn in session.turns):
            return
        if self.endpoint.api != "completions" or self.prompt_format == "text":
            _ = self.prompts.word_texts  # a cached property: computed here, read by every request
        elif self.prompt_format == "ids" or any(
            extends_previous(session, index) for session in self.plan for index in range(1, len(session.turns))
        ):
            _ = self.prompts.words

    async def _drive(self, concurrency: int | None) -> None:
        if self.interrupted or self.stopped:  # a signal came while the endpoint was opening: send nothing
            return
        tasks = self._tasks
        if self.mode == "concurrency":
            queue = iter(zip(self.indices, self.plan, strict=True))
            tasks.extend(
                asyncio.ensure_future(self._worker(queue)) for _ in range(min(concurrency or 1, len(self.plan)))
            )
        else:
            if self.settings.concurrency is not None:
                self._slots = asyncio.Semaphore(self.settings.concurrency)
            tasks.append(asyncio.ensure_future(self._dispatch(tasks)))
        duration_s = self.settings.duration_s  # set exactly when there is a deadline
        limit = None if duration_s is None else duration_s + self.settings.grace_s
        await self._finish(tasks, limit)

    async def _finish(self, tasks: list[asyncio.Task], limit: float | None) -> None:
        """Wait for every task (the list grows while the dispatcher runs). At ``limit`` seconds
        from the start, or when a task fails with an error, cancel the rest."""
        while True:
            pending = [t for t in tasks if not t.done()]
            failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception()), None)
            if not pending or failed is not None:
                break
            timeout = None if limit is None else max(self._start + limit - self.clock.now(), 0.0)
            await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION)
            if limit is not None and self.clock.now() >= self._start + limit:
                break
        self._cut = self._cut or any(not task.done() for task in tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if failed is not None:
            error = failed.exception()
            assert error is not None  # failed was picked for having one
            raise error

    async def _worker(self, queue: Iterator[tuple[int, Session]]) -> None:
        for index, session in queue:
            now = self.clock.now()
            if self._closed(now):
                return
            await self._session(index, session, now)

    async def _dispatch(self, tasks: list[asyncio.Task]) -> None:
        assert self.offsets is not None  # None only in concurrency mode, which has no dispatcher
        for index, session, offset in zip(self.indices, self.plan, self.offsets, strict=True):
            due = self._start + offset
            if self._closed(due):
                return
            await self.clock.sleep_until(due - LEAD_S)
            tasks.append(asyncio.ensure_future(self._session(index, session, due)))

    def _closed(self, t: float) -> bool:
        return self._deadline is not None and t >= self._deadline

    async def _session(self, index: int, session: Session, due: float) -> None:
        if self._slots is None:
            await self._turns(index, session, due)
            return
        async with self._slots:
            await self._turns(index, session, due)

    async def _turns(self, index: int, session: Session, due: float) -> None:
        conversation = Conversation(
            self.prompts, session, self.endpoint.api, self.prompt_format, self.settings.tool_calls
        )
        scheduled = due
        for turn_index, turn in enumerate(session.turns):
            if turn_index:
                now = self.clock.now()
                if turn.due_s is None:
                    scheduled = now + turn.delay_s / self.settings.speedup
                else:  # its trace's own time, or at once if the previous turn ended after it
                    scheduled = max(now, due + turn.due_s / self.settings.speedup)
            if self._closed(scheduled):
                return
            try:
                api, body, planned_prompt = conversation.request(turn_index)
            except LLMReplayError as exc:
                raise LLMReplayError(f"session {session.id!r} turn {turn_index}: {exc}") from None
            record = RequestRecord(
                session_id=session.id,
                session_index=index,
                turn_index=turn_index,
                turns_in_session=len(session.turns),
                status="ok",
                scheduled_s=scheduled - self._start,
                planned_prompt_tokens=planned_prompt,
                planned_output_tokens=turn.output_tokens,
                history=conversation.history_source(turn_index),
            )
            if scheduled > self.clock.now():  # due already (a closed loop's next request): no yield to pay for
                await self.clock.sleep_until(scheduled)
            response = Response()
            try:
                asked = EndpointRequest(api, body, turn.reasoning_tokens, self.settings.tool_calls and turn.tool_call)
                await self.endpoint.send(asked, response)
            except asyncio.CancelledError:
                record.status = "cancelled"
                self._keep(record, response, api, body)
                raise
            except LLMReplayError:
                raise
            except Exception as exc:  # an endpoint bug must not lose the run's other records
                response.fail("client", describe_error(exc))
            self._keep(record, response, api, body)
            if record.status != "ok":
                return
            if turn_index + 1 < len(session.turns):  # what the next turn extends (none after the last)
                conversation.respond(
                    response.text,
                    response.token_ids,
                    record.output_tokens,
                    response.calls,
                    record.reasoning_tokens or 0,
                )

    def _keep(self, record: RequestRecord, response: Response, api: str, body: dict) -> None:
        """Copy the response into the record (times made relative), check counts, store it."""
        self._drop_impossible_usage(record, response)
        start = self._start
        record.sent_s = None if response.sent_s is None else response.sent_s - start
        record.end_s = None if response.end_s is None else response.end_s - start
        record.chunk_times = [t - start for t in response.chunk_times] if start else list(response.chunk_times)
        record.chunk_tokens = list(response.chunk_tokens)
        if record.chunk_times:
            record.first_token_s, record.last_token_s = record.chunk_times[0], record.chunk_times[-1]
        record.prompt_tokens = response.prompt_tokens
        record.cached_tokens = response.cached_tokens
        record.queue_s = response.queue_s
        counted = sum(response.chunk_tokens)
        record.output_tokens = response.completion_tokens if response.completion_tokens is not None else counted
        self._keep_reasoning(record, response, counted)
        hidden = record.unstreamed_tokens
        if hidden:
            self._warn_once(
                "hidden",
                f"the server counted reasoning tokens it did not stream (first: {hidden} of {record.output_tokens}): "
                "they are in output_tokens and reasoning_tokens, their time in TTFT; TPOT, ITL and decode_tps "
                "are over the tokens streamed",
            )
        if response.completion_tokens is not None and counted and counted + hidden != response.completion_tokens:
            record.notes.append(f"usage says {response.completion_tokens} output tokens, chunks carried {counted}")
            self._warn_once(
                "count",
                f"the server's usage.completion_tokens differs from the tokens counted in its stream (first: {record.notes[-1]}); metrics use the server's count",
            )
        if response.error is not None and record.status == "ok":
            record.status = "failed"
        if record.status == "failed" and self._cut:  # its connection went as the run cut its requests
            record.status = "cancelled"
            record.notes.append(
                f"failed while the run cancelled its requests in flight, so cancelled: {response.error}"
            )
        record.error = response.error
        if record.error and record.error.startswith("http: HTTP 404") and "model" in record.error.lower():
            self._warn_once(
                "model",
                f"the server does not serve the model the request named (first: {body.get('model')!r}: {record.error}); "
                "name the served model (llmreplay run --model, pytest --llm-model): it replaces every payload's",
            )
        planned, server = record.planned_prompt_tokens, record.prompt_tokens
        if record.status == "ok" and server is not None and planned is not None:
            self._check_prompt(record, planned, server, api, body)
        if api == "messages" and record.status == "ok" and record.output_tokens < (record.planned_output_tokens or 0):
            self._warn_once(
                "messages-length",
                f"the Messages API takes neither ignore_eos nor min_tokens (vLLM drops both): outputs end where the model stops "
                f"(first: session {record.session_id!r} turn {record.turn_index}, {record.output_tokens} of {record.planned_output_tokens} planned tokens); "
                "output figures are the model's lengths, not the workload's",
            )
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    def _drop_impossible_usage(self, record: RequestRecord, response: Response) -> None:
        """A server's usage holding a count no request can have (a negative one; more cached
        than prompt tokens) is not used at all (its counts set to None: the figures then come
        from the stream and the plan, or are not measured), said in the record's notes and
        warned of once: a 1000% cache hit rate or a negative throughput passed SLOs no real run
        could."""
        impossible = [
            f"{name} {value}" for name in USAGE_COUNTS if (value := getattr(response, name)) is not None and value < 0
        ]
        cached, prompt = response.cached_tokens, response.prompt_tokens
        if cached is not None and prompt is not None and cached > prompt:
            impossible.append(f"cached_tokens {cached} of {prompt} prompt tokens")
        if not impossible:
            return
        for name in USAGE_COUNTS:
            setattr(response, name, None)
        record.notes.append(f"usage not used: {', '.join(impossible)}")
        self._warn_once(
            "usage",
            f"the server's usage holds counts no request can have (first: {', '.join(impossible)}); its counts are not used",
        )

    def _keep_reasoning(self, record: RequestRecord, response: Response, counted: int) -> None:
        """The reasoning's and the answer's times (made relative) and the reasoning's count: the
        server's (with the part of it no chunk carried, ``unstreamed_tokens``), else the stream's
        count scaled as ``output_tokens`` was (a server that merges
        tokens per event says so in ``completion_tokens``), else None when no reasoning came. A
        server's 0 beside reasoning the stream carried is not taken: vLLM (0.32) counts only the
        reasoning that follows a ``<think>`` the model generated, so with a chat template that
        opens it in the prompt (DeepSeek-R1's) it reports 0 on every request."""
        rel = self._relative
        if response.first_reasoning_s is not None or response.last_reasoning_s is not None:
            record.first_reasoning_s = rel(response.first_reasoning_s)
            record.last_reasoning_s = rel(response.last_reasoning_s)
        if response.first_answer_s is not None or response.last_answer_s is not None:
            record.first_answer_s = rel(response.first_answer_s)
            record.last_answer_s = rel(response.last_answer_s)
        record.tool_calls = len(response.calls)
        if response.reasoning_tokens is not None and (response.reasoning_tokens or not response.reasoning_counted):
            record.reasoning_tokens = min(response.reasoning_tokens, record.output_tokens)
            record.unstreamed_tokens = unstreamed_reasoning(
                record.output_tokens, record.reasoning_tokens, counted, response.reasoning_counted
            )
        elif response.reasoning_counted:
            scale = record.output_tokens / counted if counted else 1.0
            record.reasoning_tokens = min(round(response.reasoning_counted * scale), record.output_tokens)

    def _relative(self, t: float | None) -> float | None:
        return None if t is None else t - self._start

    def _check_prompt(self, record: RequestRecord, planned: int, server: int, api: str, body: dict) -> None:
        """Warn once when the server's prompt_tokens (``server``) cannot come from our tokenizer's
        count (``planned``), both the record's.

        Completions: they must be equal, within one token per join of a text prompt's parts (a
        later turn's prompt is the history's texts and the new one's joined, and the server
        encodes the whole: a word split at a join may merge, two a turn). Chat, responses,
        messages: the template may add 0 to ``64 + 16 * messages`` tokens (Llama-3's adds about
        25 + 5 per message), a system prompt given apart (``system``, ``instructions``) counting
        as one.
        """
        if api != "completions":
            fixed, per_message = CHAT_TEMPLATE_ALLOWANCE
            messages = body.get("messages", body.get("input"))
            count = (len(messages) if isinstance(messages, list) else 1) + bool(
                body.get("system") or body.get("instructions")
            )
            ok = 0 <= server - planned <= fixed + per_message * count
        else:
            joins = 2 * record.turn_index if self.prompt_format == "text" else 0
            ok = abs(server - planned) <= joins
        if not ok:
            self._warn_once(
                "tokenizer",
                f"tokenizer mismatch: the server counted {server} prompt tokens where {self.prompts.tokenizer.name} planned {planned} "
                f"(session {record.session_id!r} turn {record.turn_index}); prompt lengths and cache figures are off: "
                + self.prompts.use_another_tokenizer("the server model's tokenizer"),
            )

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warnings.append(message)


def _latest_wait(session: Session) -> float:
    """How long after its start a session's turns wait at most, its own latencies aside: its
    delays together, past its latest due time (``Turn.due_s``: times after the start, not waits)."""
    return max((turn.due_s or 0.0) for turn in session.turns) + sum(turn.delay_s for turn in session.turns)


def replay(
    workload: Workload,
    endpoint: Endpoint,
    prompts: PromptFactory,
    settings: ReplaySettings = ReplaySettings(),
    clock: Clock | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> ReplayRun:
    """Replay ``workload`` against ``endpoint`` and return every request's record."""
    return Replay(workload, endpoint, prompts, settings, clock, on_record).run()
