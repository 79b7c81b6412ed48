"""The replay driver on the virtual clock: exact schedules for every mode, limit and fault.

A fake in-process endpoint answers every request after ``ttft`` seconds and then one token every
``itl`` seconds of *virtual* time, so every expected time below is computed by hand.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from itertools import pairwise

import pytest

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import Replay, replay
from pytest_llmreplay.replayer.endpoints import EndpointRequest
from pytest_llmreplay.replayer.plan import ReplaySettings, session_plan
from pytest_llmreplay.replayer.records import cancelled_note
from pytest_llmreplay.replayer.response import Response
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer
from pytest_llmreplay.workloads.workload import HashBlocks, Payload, Session, Synthetic, TokenIds, Turn, Workload


class FakeEndpoint:
    """Answers after ``ttft`` then ``itl`` per token (virtual time); ``fail`` maps a request's
    position to an error kind, ``raises`` to an exception; ``returns_ids`` adds token ids;
    ``tokenizer``: counts a text prompt's tokens with it, as a server encodes the text it gets."""

    name = "fake"

    def __init__(
        self,
        ttft=0.1,
        itl=0.01,
        api="completions",
        fail=(),
        raises=None,
        returns_ids=False,
        prompt_extra=0,
        usage_extra=0,
        busy=None,
        tokenizer=None,
    ):
        self.ttft, self.itl, self.api = ttft, itl, api
        self.fail, self.raises, self.returns_ids = (
            set(fail),
            dict(raises or {}),
            returns_ids,
        )  # raises: position -> exception
        self.prompt_extra, self.usage_extra, self.busy, self.tokenizer = prompt_extra, usage_extra, busy, tokenizer
        self.sent: list[tuple[float, EndpointRequest]] = []
        self.concurrency = "unset"
        self.in_flight = self.max_in_flight = 0

    async def open(self, clock, concurrency):
        self.clock, self.concurrency = clock, concurrency

    async def close(self):
        pass

    async def idle_warning(self):
        return self.busy

    async def send(self, request, response: Response):
        position = len(self.sent)
        self.sent.append((self.clock.now(), request))
        response.sent_s = self.clock.now()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if position in self.raises:
                raise self.raises[position]
            await self.clock.sleep(self.ttft)
            if position in self.fail:
                response.fail("http", "HTTP 503: overloaded")
                return
            tokens = request.body.get("max_tokens", 4)
            for i in range(tokens):
                if i:
                    await self.clock.sleep(self.itl)
                response.chunk_times.append(self.clock.now())
                response.chunk_tokens.append(1)
                response.text_parts.append(f" r{position}.{i}")
            if self.returns_ids:
                response.token_ids = [1000 + i for i in range(tokens)]
            prompt = request.body.get("prompt", request.body.get("messages"))
            counted = len(self.tokenizer.encode(prompt)) if self.tokenizer and isinstance(prompt, str) else 0
            response.prompt_tokens = (
                len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else counted
            ) + self.prompt_extra
            response.completion_tokens = tokens + self.usage_extra
            response.cached_tokens = 0
        finally:
            self.in_flight -= 1
            response.end_s = self.clock.now()


@pytest.fixture(scope="module")
def prompts():
    return PromptFactory(load_tokenizer(None))


def flat(*arrivals, output=4, input_tokens=20):
    return Workload(
        tuple(Session(f"s{i}", a, (Turn(input_tokens, output, Synthetic()),)) for i, a in enumerate(arrivals)), "test"
    )


def agent(session_id="a", arrival=0.0, delays=(0.0, 2.0, 1.0), output=4):
    turns = [Turn(20, output, Synthetic())]
    for delay in delays[1:]:
        previous = turns[-1].input_tokens + output
        turns.append(Turn(previous + 10, output, Synthetic(extends_previous=True), delay_s=delay))
    return Session(session_id, arrival, tuple(turns))


def run(workload, endpoint, prompts, **settings):
    return replay(workload, endpoint, prompts, ReplaySettings(**settings), clock=VirtualClock())


def sent_times(endpoint):
    return [round(t, 9) for t, _ in endpoint.sent]


# request duration with the defaults: ttft 0.1 + 3 gaps of 0.01 for 4 tokens
DURATION = 0.13


def test_a_later_turn_its_trace_times_is_sent_at_its_time_or_when_the_previous_ends(prompts):
    # AIPerf's fixed schedule: a later turn's own timestamp, else at once when the previous turn
    # ended after it (a wait after each completion stretched a timed conversation by its latencies)
    turns = (Turn(20, 4, Synthetic()), Turn(20, 4, Synthetic(), due_s=0.05), Turn(20, 4, Synthetic(), due_s=5.0))
    workload = Workload((Session("a", 1.0, turns),), "test", timed=True)
    endpoint = FakeEndpoint()
    run(workload, endpoint, prompts, speedup=2.0)
    assert sent_times(endpoint) == [0.5, round(0.5 + DURATION, 9), 0.5 + 2.5]


def test_timestamps_mode_sends_at_arrival_divided_by_speedup(prompts):
    endpoint = FakeEndpoint()
    result = run(flat(0.0, 1.0, 2.5), endpoint, prompts, speedup=2.0, prompt_format="ids")
    assert sent_times(endpoint) == [0.0, 0.5, 1.25]
    assert [r.scheduled_s for r in result.records] == [0.0, 0.5, 1.25]
    assert all(r.sent_s - r.scheduled_s == 0 for r in result.records)
    assert result.settings["mode"] == "timestamps"
    assert endpoint.concurrency is None  # open loop: the endpoint must not cap connections


def test_agent_turns_wait_for_the_previous_turn_plus_its_delay(prompts):
    endpoint = FakeEndpoint()
    result = run(
        Workload((agent(delays=(0.0, 2.0, 1.0)),), "test"), endpoint, prompts, speedup=2.0, prompt_format="ids"
    )
    # turn 0 at 0, ends 0.13; turn 1 at 0.13 + 2.0/2; ends +0.13; turn 2 at that + 1.0/2
    assert sent_times(endpoint) == [0.0, round(0.13 + 1.0, 9), round(0.13 + 1.0 + 0.13 + 0.5, 9)]
    assert [r.turn_index for r in result.records] == [0, 1, 2]
    assert all(r.status == "ok" for r in result.records)


def test_virtual_clock_replays_an_hour_without_waiting(prompts):
    endpoint = FakeEndpoint()
    result = run(flat(0.0, 1800.0, 3600.0), endpoint, prompts, prompt_format="ids")
    assert sent_times(endpoint) == [0.0, 1800.0, 3600.0]
    assert result.duration_s == pytest.approx(3600.0 + DURATION)


def test_concurrency_mode_ignores_arrivals_and_keeps_order(prompts):
    endpoint = FakeEndpoint()
    result = run(
        flat(50.0, 0.0, 7.0, 3.0, 1.0), endpoint, prompts, mode="concurrency", concurrency=2, prompt_format="ids"
    )
    assert sent_times(endpoint) == [0.0, 0.0, DURATION, DURATION, 2 * DURATION]
    assert [r.session_id for r in sorted(result.records, key=lambda r: (r.sent_s, r.session_index))] == [
        "s0",
        "s1",
        "s2",
        "s3",
        "s4",
    ]
    assert endpoint.max_in_flight == 2 and endpoint.concurrency == 2


def test_untimed_workload_defaults_to_one_session_at_a_time(prompts):
    workload = Workload(flat(0, 0, 0).sessions, "test", timed=False)
    endpoint = FakeEndpoint()
    result = run(workload, endpoint, prompts, prompt_format="ids")
    assert result.settings["mode"] == "concurrency"
    assert sent_times(endpoint) == [0.0, DURATION, round(2 * DURATION, 9)]


def test_constant_rate_spaces_sessions_evenly(prompts):
    endpoint = FakeEndpoint()
    run(flat(9, 9, 9, 9), endpoint, prompts, mode="rate", rate=10.0, arrival="constant", prompt_format="ids")
    assert sent_times(endpoint) == [0.0, 0.1, 0.2, 0.3]


def test_poisson_rate_is_seeded(prompts):
    def times(seed):
        endpoint = FakeEndpoint()
        run(flat(*[0] * 200), endpoint, prompts, mode="rate", rate=100.0, seed=seed, prompt_format="ids")
        return sent_times(endpoint)

    first, again, other = times(1), times(1), times(2)
    assert first == again and first != other
    gaps = [b - a for a, b in pairwise(first)]
    assert len(set(round(g, 6) for g in gaps)) > 100  # not constant spacing
    assert 0.007 < sum(gaps) / len(gaps) < 0.013  # mean gap near 1 / rate


def test_concurrency_caps_open_loop_and_shows_as_schedule_lag(prompts):
    endpoint = FakeEndpoint()
    result = run(flat(0.0, 0.0, 0.0), endpoint, prompts, concurrency=1, mode="timestamps", prompt_format="ids")
    assert sent_times(endpoint) == [0.0, DURATION, round(2 * DURATION, 9)]
    assert [round(r.sent_s - r.scheduled_s, 9) for r in result.records] == [0.0, DURATION, round(2 * DURATION, 9)]


def test_duration_limit_stops_admitting_then_cancels_after_grace(prompts):
    endpoint = FakeEndpoint(ttft=0.1, itl=1.0)  # tokens at +0.1, +1.1, +2.1, +3.1
    result = run(flat(0, 1, 2, 3, 4, 5, 6), endpoint, prompts, duration_s=4.5, grace_s=1.0, prompt_format="ids")
    assert sent_times(endpoint) == [0.0, 1.0, 2.0, 3.0, 4.0]  # nothing admitted at or after 4.5
    statuses = {r.session_id: r.status for r in result.records}
    # ends at 3.1, 4.1, 5.1 (before 4.5 + 1.0) are ok; 6.1 and 7.1 are cut at 5.5
    assert statuses == {"s0": "ok", "s1": "ok", "s2": "ok", "s3": "cancelled", "s4": "cancelled"}
    cancelled = [r for r in result.records if r.status == "cancelled"]
    # what arrived before the cut is kept: s3 got tokens at 3.1, 4.1, 5.1; s4 at 4.1, 5.1
    assert [len(r.chunk_times) for r in cancelled] == [3, 2]
    assert all(r.error is None and r.end_s == pytest.approx(5.5) for r in cancelled)
    assert result.duration_s == pytest.approx(5.5)


def test_a_request_that_fails_as_the_run_cuts_its_requests_is_cancelled_not_failed(prompts):
    # a capacity point stopped early against vLLM: two requests in flight failed ("Can not write
    # request body", "server disconnected") as the run cancelled them, and counted as the
    # server's failures (the engine test's error_rate 0 broke)
    class FailsWhenCut(FakeEndpoint):
        async def send(self, request, response):
            try:
                await super().send(request, response)
            except asyncio.CancelledError:  # the client's connection closed under it: an error, not a cancel
                response.fail("connect", "ClientOSError: Can not write request body")

    endpoint = FailsWhenCut(ttft=0.1, itl=1.0)
    result = run(flat(0, 1, 2, 3, 4, 5, 6), endpoint, prompts, duration_s=4.5, grace_s=1.0, prompt_format="ids")
    statuses = {r.session_id: r.status for r in result.records}
    assert statuses == {"s0": "ok", "s1": "ok", "s2": "ok", "s3": "cancelled", "s4": "cancelled"}
    cut = [r for r in result.records if r.status == "cancelled"]
    assert all(
        r.notes[-1].startswith("failed while the run cancelled its requests in flight, so cancelled: connect: ")
        for r in cut
    )


def test_a_signal_before_the_replay_started_says_nothing_was_sent(prompts):
    """SIGINT while the endpoint opens (the run has no start yet): the warning says so, with no
    time (once a clock reading since boot was printed as the time into the run)."""

    class SignalledWhileOpening(FakeEndpoint):
        async def open(self, clock, concurrency):
            await super().open(clock, concurrency)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):  # until the driver's handler has run on the loop
                if driver.interrupted:
                    break
                await asyncio.sleep(0)

    endpoint = SignalledWhileOpening()
    driver = Replay(
        flat(0, 1), endpoint, prompts, ReplaySettings(prompt_format="ids"), clock=VirtualClock(), stop_on_signals=True
    )
    result = driver.run()
    assert result.interrupted == "SIGINT" and endpoint.sent == [] and result.records == []
    assert result.warnings == ["interrupted by SIGINT before the replay started: nothing was sent"]


class SignalledAtTheSecondRequest(FakeEndpoint):
    """Sends this process SIGINT as it gets its second request (mid-run), then answers as usual."""

    async def send(self, request, response):
        if len(self.sent) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        await super().send(request, response)


def test_a_handler_over_several_replays_cuts_the_one_running_and_lets_no_other_send(prompts):
    """SignalStop (llmreplay sweep's points): the first SIGINT cuts the replay it watches as
    ``stop_on_signals`` does, a replay watched after it sends nothing, and a second SIGINT has
    its default effect."""
    from pytest_llmreplay.replayer.signal_stop import SignalStop

    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        with SignalStop() as signals:
            endpoint = SignalledAtTheSecondRequest()
            cut = Replay(flat(0, 1, 2, 3), endpoint, prompts, ReplaySettings(prompt_format="ids"), clock=VirtualClock())
            with signals.watch(cut):
                first = cut.run()
            later = FakeEndpoint()
            late = Replay(flat(0, 1), later, prompts, ReplaySettings(prompt_format="ids"), clock=VirtualClock())
            with signals.watch(late):
                after = late.run()
        assert signals.signal == first.interrupted == after.interrupted == "SIGINT"
        assert len(endpoint.sent) == 2 and [r.status for r in first.records] == [
            "ok",
            "cancelled",
        ]  # the second was in flight
        assert first.warnings == [
            "interrupted by SIGINT at 1.0 s: requests in flight were cancelled and nothing more was sent"
        ]
        assert (
            later.sent == []
            and after.records == []
            and after.warnings == ["interrupted by SIGINT before the replay started: nothing was sent"]
        )
        assert (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        )
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def test_the_cancelled_note_never_gives_a_time_before_the_start():
    # Ray workers wait for a common start a moment ahead: a signal in that wait is "before", not "at -0.3 s"
    assert cancelled_note(-0.3) == cancelled_note(None) == "before the replay started: nothing was sent"
    assert cancelled_note(0.04) == "at 0.0 s: requests in flight were cancelled and nothing more was sent"
    assert cancelled_note(12.34) == "at 12.3 s: requests in flight were cancelled and nothing more was sent"


def test_duration_limit_does_not_start_a_turn_after_the_deadline(prompts):
    endpoint = FakeEndpoint()
    result = run(
        Workload((agent(delays=(0.0, 5.0, 0.0)),), "test"), endpoint, prompts, duration_s=2.0, prompt_format="ids"
    )
    assert [r.turn_index for r in result.records] == [0]


def test_request_limit_takes_whole_sessions(prompts):
    workload = Workload(tuple(agent(f"a{i}", arrival=i) for i in range(4)), "test")
    endpoint = FakeEndpoint()
    result = run(workload, endpoint, prompts, max_requests=4, prompt_format="ids")
    assert sorted((r.session_id, r.turn_index) for r in result.records) == [
        (s, t) for s in ("a0", "a1") for t in range(3)
    ]
    assert result.planned_requests == 6


def test_session_limit_cycles_a_short_workload(prompts):
    plan = session_plan(flat(0, 1), ReplaySettings(max_sessions=5, mode="concurrency"))
    assert [s.id for s in plan] == ["s0", "s1", "s0#1", "s1#1", "s0#2"]  # each repeat a new user


def test_a_repeated_session_shares_no_prompt_token_with_its_earlier_runs(prompts):
    """A cycled Azure trace (no shared prefixes) hit the cache on 48% of its prompts: each pass
    resent the first one's. A repeat's own tokens and hash-id blocks are new; what the workload
    shares between sessions (a prefix group; a hash id two sessions of one pass name) stays so."""
    grouped = Synthetic(prefix_group=1, prefix_tokens=8)
    workload = Workload(
        (
            Session("a", 0.0, (Turn(20, 2, grouped),)),
            Session("b", 0.0, (Turn(20, 2, HashBlocks((7, 8), 4)),)),
            Session("c", 0.0, (Turn(4, 2, HashBlocks((7,), 4)),)),
        ),
        "test",
    )
    plan = session_plan(workload, ReplaySettings(max_sessions=6, mode="concurrency"))
    ids = [prompts.turn_ids(session, 0) for session in plan]
    assert ids[3][:8] == ids[0][:8] and ids[3][8:] != ids[0][8:]  # the group's prefix, then its own
    assert ids[4][:4] != ids[1][:4] and ids[4][4:] != ids[1][4:]  # both hash-id blocks renamed
    assert ids[5] == ids[4][:4] and ids[2] == ids[1][:4]  # hash id 7's block, shared within each pass


def test_timestamps_cycles_follow_each_other_at_the_traces_pace(prompts):
    endpoint = FakeEndpoint()
    run(flat(1.0, 2.0, 4.0), endpoint, prompts, max_sessions=7, prompt_format="ids")
    # period = span 3 s * 3 / 2 = 4.5 s: the span plus one mean gap
    assert sent_times(endpoint) == [1.0, 2.0, 4.0, 5.5, 6.5, 8.5, 10.0]


def test_cycling_a_timed_trace_that_arrives_all_at_once_is_refused(prompts):
    with pytest.raises(
        LLMReplayError, match="^max_requests/max_sessions: cycling a timed trace whose sessions all arrive at once"
    ):
        run(flat(0.0, 0.0), FakeEndpoint(), prompts, max_sessions=3)


@pytest.mark.parametrize(
    ("workload", "settings", "message"),
    [
        (
            flat(0, 1),
            {"order": "shuffled"},
            "order: timestamps mode (picked by auto: the trace is timed) replays sessions in trace order",
        ),
        (
            flat(0, 1),
            {"mode": "timestamps", "order": "sampled"},
            "order: timestamps mode replays sessions in trace order",
        ),
        (flat(0, 1), {"mode": "timestamps", "rate": 5.0}, "rate: applies to rate mode; mode is 'timestamps'"),
        (flat(0, 1), {"mode": "concurrency", "rate": 5.0}, "rate: applies to rate mode; mode is 'concurrency'"),
        (
            Workload(flat(0, 0).sessions, "trie", timed=False),
            {"mode": "timestamps"},
            "mode: timestamps needs arrival times, and format 'trie' has none",
        ),
    ],
)
def test_settings_that_contradict_their_mode_are_refused(prompts, workload, settings, message):
    with pytest.raises(LLMReplayError, match="^" + re.escape(message)):
        run(workload, FakeEndpoint(), prompts, **settings)


def test_shuffled_and_sampled_orders_are_seeded(prompts):
    workload = flat(*range(20))
    shuffled = [s.id for s in session_plan(workload, ReplaySettings(order="shuffled", seed=3, mode="concurrency"))]
    assert sorted(shuffled) == sorted(s.id for s in workload) and shuffled != [s.id for s in workload]
    assert shuffled == [
        s.id for s in session_plan(workload, ReplaySettings(order="shuffled", seed=3, mode="concurrency"))
    ]
    sampled = [s.id for s in session_plan(workload, ReplaySettings(order="sampled", seed=3, mode="concurrency"))]
    drawn = [s.partition("#")[0] for s in sampled]
    assert len(sampled) == len(set(sampled)) == 20 and len(set(drawn)) < 20  # with replacement, each draw a new user
    assert sampled != [
        s.id for s in session_plan(workload, ReplaySettings(order="sampled", seed=4, mode="concurrency"))
    ]


def test_warmup_flags_first_requests_and_first_seconds(prompts):
    result = run(flat(0, 1, 2, 3, 4), FakeEndpoint(), prompts, warmup_requests=1, prompt_format="ids")
    assert [r.warmup for r in result.records] == [True, False, False, False, False]
    result = run(flat(0, 1, 2, 3, 4), FakeEndpoint(), prompts, warmup_s=2.5, prompt_format="ids")
    assert [r.warmup for r in result.records] == [True, True, True, False, False]


def test_failed_request_is_recorded_and_ends_only_its_session(prompts):
    workload = Workload((agent("a", 0.0), agent("b", 0.05)), "test")
    endpoint = FakeEndpoint(fail={0})  # a's first turn fails
    result = run(workload, endpoint, prompts, prompt_format="ids")
    by_session = {}
    for record in result.records:
        by_session.setdefault(record.session_id, []).append(record)
    assert [(r.turn_index, r.status, r.error) for r in by_session["a"]] == [(0, "failed", "http: HTTP 503: overloaded")]
    assert [r.status for r in by_session["b"]] == ["ok", "ok", "ok"]


def test_endpoint_exception_becomes_a_failed_record(prompts):
    endpoint = FakeEndpoint(raises={1: RuntimeError("endpoint bug"), 2: TimeoutError()})
    result = run(flat(0, 1, 2), endpoint, prompts, prompt_format="ids")
    assert [r.status for r in result.records] == ["ok", "failed", "failed"]
    assert [r.error for r in result.records[1:]] == [
        "client: RuntimeError: endpoint bug",
        "client: TimeoutError",
    ]  # no dangling ': '


def test_bad_prompt_stops_the_run_with_the_session_named(prompts):
    workload = Workload((Session("bad", 0.0, (Turn(2, 4, TokenIds((1, 10**9))),)),), "test")
    with pytest.raises(LLMReplayError, match="session 'bad' turn 0: token id 1000000000 is outside"):
        run(workload, FakeEndpoint(), prompts)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mode": "fast"}, "mode: expected one of auto, timestamps, concurrency, rate, got 'fast'"),
        ({"speedup": 0}, "speedup: expected a number > 0"),
        ({"concurrency": 0}, "concurrency: expected an integer >= 1"),
        # a plan holds every session it sends: 10**26 hung while the plan was built
        ({"max_requests": 10**26}, "max_requests: expected at most 10,000,000 (the plan holds every request"),
        ({"max_sessions": 10**8}, "max_sessions: expected at most 10,000,000"),
        ({"mode": "rate"}, "mode 'rate' needs a rate"),
        ({"warmup_s": -1}, "warmup_s: expected a number >= 0"),
        ({"seed": -1}, "seed: expected an integer >= 0, got -1"),  # as run --seed and --llm-seed
        ({"seed": 1.5}, "seed: expected an integer >= 0, got 1.5"),
        ({"order": "shuffled", "mode": "timestamps"}, "order: timestamps mode replays sessions in trace order"),
        ({"prompt_format": "bytes"}, "prompt_format: expected one of text, ids"),
    ],
)
def test_bad_settings_name_the_setting(settings, message, prompts):
    with pytest.raises(LLMReplayError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(flat(0), FakeEndpoint(), prompts, **settings)


def test_busy_server_warning_is_kept(prompts):
    result = run(flat(0), FakeEndpoint(busy="server busy"), prompts, prompt_format="ids")
    assert result.warnings == ["server busy"]
    assert run(flat(0), FakeEndpoint(busy="server busy"), prompts, prompt_format="ids", check_idle=False).warnings == []


def test_completions_ids_history_uses_returned_ids_else_planned(prompts):
    workload = Workload((agent(delays=(0.0, 0.0)),), "test")
    with_ids = FakeEndpoint(returns_ids=True)
    result = run(workload, with_ids, prompts, prompt_format="ids")
    first, second = (request.body["prompt"] for _, request in with_ids.sent)
    assert second[: len(first) + 4] == first + [1000, 1001, 1002, 1003]
    assert len(second) == 20 + 4 + 10 and [r.history for r in result.records] == [None, "server"]
    planned = FakeEndpoint()
    result = run(workload, planned, prompts, prompt_format="ids")
    first, second = (request.body["prompt"] for _, request in planned.sent)
    assert second[: len(first) + 4] == first + prompts.planned_response(workload.sessions[0], 0)
    assert [r.history for r in result.records] == [None, "planned"]


def test_chat_history_carries_the_actual_response(prompts):
    workload = Workload((agent(delays=(0.0, 0.0, 0.0)),), "test")
    endpoint = FakeEndpoint(api="chat")
    run(workload, endpoint, prompts)
    messages = [request.body["messages"] for _, request in endpoint.sent]
    assert [len(m) for m in messages] == [1, 3, 5]
    assert messages[1][:2] == [messages[0][0], {"role": "assistant", "content": " r0.0 r0.1 r0.2 r0.3"}]
    assert messages[2][3] == {"role": "assistant", "content": " r1.0 r1.1 r1.2 r1.3"}
    assert len(prompts.tokenizer.encode(messages[1][2]["content"])) == 10  # only the new tokens


def test_completions_text_history_appends_response_text(prompts):
    workload = Workload((agent(delays=(0.0, 0.0)),), "test")
    endpoint = FakeEndpoint()
    run(workload, endpoint, prompts, prompt_format="text")
    first, second = (request.body["prompt"] for _, request in endpoint.sent)
    assert second.startswith(first + " r0.0 r0.1 r0.2 r0.3")


def test_payload_is_sent_verbatim_on_its_own_api(prompts):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    workload = Workload((Session("p", 0.0, (Turn(None, None, Payload(body)),)),), "test")
    endpoint = FakeEndpoint(api="completions")
    result = run(workload, endpoint, prompts)
    assert endpoint.sent[0][1] == EndpointRequest("chat", body)
    assert result.records[0].output_tokens == 3


def test_tokenizer_mismatch_warns_once_with_both_figures(prompts):
    endpoint = FakeEndpoint(prompt_extra=7)
    result = run(flat(0, 1, 2), endpoint, prompts, prompt_format="ids")
    mismatch = [w for w in result.warnings if "tokenizer mismatch" in w]
    assert len(mismatch) == 1 and "counted 27 prompt tokens where llmreplay-bpe-4k planned 20" in mismatch[0]
    assert not [w for w in run(flat(0), FakeEndpoint(), prompts, prompt_format="ids").warnings if "tokenizer" in w]


def test_a_history_sent_as_text_is_counted_as_its_text_encodes(prompts):
    # a model's generated tokens are not its text's own encoding (llama.cpp's 64 tokens were 68
    # to 78 of text; here 4 tokens " r0.0 r0.1 r0.2 r0.3" are more): the planned count took the
    # generated count, and every multi-turn run over completions warned of a tokenizer mismatch
    workload = Workload((agent(delays=(0.0, 0.0, 0.0)),), "test")
    endpoint = FakeEndpoint(tokenizer=prompts.tokenizer)
    result = run(workload, endpoint, prompts, prompt_format="text")
    assert not [w for w in result.warnings if "tokenizer" in w], result.warnings
    later = result.records[1]
    assert len(prompts.tokenizer.encode(" r0.0 r0.1 r0.2 r0.3")) > 4  # what made the difference
    assert abs(later.prompt_tokens - later.planned_prompt_tokens) <= 2
    assert (
        "tokenizer mismatch"
        in run(
            workload, FakeEndpoint(tokenizer=prompts.tokenizer, prompt_extra=9), prompts, prompt_format="text"
        ).warnings[0]
    )


def test_chat_allows_template_tokens_but_not_fewer_tokens(prompts):
    # the fake counts a chat prompt as prompt_extra tokens; 20 were planned (flat's input_tokens)
    assert run(flat(0), FakeEndpoint(api="chat", prompt_extra=25), prompts).warnings == []
    assert "tokenizer mismatch" in run(flat(0), FakeEndpoint(api="chat", prompt_extra=15), prompts).warnings[0]


def test_usage_count_wins_over_chunks_and_the_difference_is_noted(prompts):
    result = run(flat(0, 1), FakeEndpoint(usage_extra=2), prompts, prompt_format="ids")
    assert [r.output_tokens for r in result.records] == [6, 6]
    assert result.records[0].notes == ["usage says 6 output tokens, chunks carried 4"]
    assert sum("differs from the tokens counted" in w for w in result.warnings) == 1


@pytest.mark.parametrize(
    ("settings", "timed", "mode"),
    [
        ({}, True, "timestamps"),
        ({}, False, "concurrency"),
        ({"concurrency": 4}, True, "concurrency"),
        ({"rate": 5.0}, False, "rate"),
        ({"mode": "timestamps", "concurrency": 2}, True, "timestamps"),
    ],
)
def test_auto_mode_follows_what_was_given(settings, timed, mode):
    workload = Workload(flat(0).sessions, "test", timed=timed)
    assert ReplaySettings(**settings).resolved_mode(workload) == mode


def test_package_replay_is_the_function_whichever_import_came_first(prompts):
    import pytest_llmreplay
    import pytest_llmreplay.replayer.driver  # importing the driver module binds nothing named replay
    from pytest_llmreplay import replay as exported

    assert exported is replay and pytest_llmreplay.replay is replay
    run_ = exported(flat(0), FakeEndpoint(), prompts, ReplaySettings(prompt_format="ids"), VirtualClock())
    assert [r.status for r in run_.records] == ["ok"]


@pytest.mark.parametrize(
    ("api", "prompt_format", "workload", "tables"),
    [
        ("completions", "text", flat(0), {"words", "word_texts"}),
        ("chat", "ids", flat(0), {"words", "word_texts"}),
        ("completions", "ids", flat(0), {"words"}),
        ("completions", "keyed", Workload((agent(),), "test"), {"words"}),  # an agent chain goes as ids
        ("completions", "keyed", flat(0, 1), set()),  # keyed prompts carry no token
    ],
)
def test_word_tables_are_built_before_the_first_request_only_for_the_tokens_sent(api, prompt_format, workload, tables):
    factory = PromptFactory(load_tokenizer(None))
    built_at_first_send = []

    class Watching(FakeEndpoint):
        preferred_prompt_format = prompt_format  # keyed: only an in-process endpoint asks for it

        async def send(self, request, response):
            if not self.sent:
                built_at_first_send.append({name for name in ("words", "word_texts") if name in vars(factory)})
            await super().send(request, response)

    run(workload, Watching(api=api), factory, concurrency=1)
    assert built_at_first_send == [tables]


def test_a_payload_with_no_output_length_on_the_simulator_is_warned_of(prompts):
    """A verbatim payload without max_tokens generated 131,070 tokens a request on the simulator
    (a 24-minute stream over HTTP), and nothing said why (found by a review helper)."""
    from pytest_llmreplay.sim.endpoint import SimEndpoint
    from pytest_llmreplay.sim.profile import load_profile

    body = {"messages": [{"role": "user", "content": "yo"}]}
    workload = Workload((Session("p", 0.0, (Turn(None, None, Payload(body)),)),), "aiperf-payloads")
    profile = load_profile("dynamo-mocker-polynomial")
    unbounded = replay(workload, SimEndpoint(profile, prompts, api="chat"), prompts, clock=VirtualClock())
    assert unbounded.warnings == [
        "1 request with no output length (no max_tokens): the simulator models no end of sequence, so each "
        "generates up to the model's context; give max_tokens in the workload, or in --extra-body (pytest: --llm-extra-body)"
    ]
    bounded = SimEndpoint(profile, prompts, api="chat", extra_body={"max_tokens": 4})
    run = replay(workload, bounded, prompts, clock=VirtualClock())
    assert run.warnings == [] and run.records[0].output_tokens == 4


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_token_id_prompts_asked_on_a_message_api_send_and_store_text_as_a_run_without(prompts, api):
    """Only completions takes token ids: a suite's ``prompt_format="ids"`` run with ``--llm-api
    chat`` sent messages, as a run without it, but stored ``ids`` and so was never compared with
    one (``replay settings differ``)."""
    workload = Workload((agent(),), "test")
    asked, plain = FakeEndpoint(api=api), FakeEndpoint(api=api)
    with_ids = run(workload, asked, prompts, prompt_format="ids")
    without = run(workload, plain, prompts)
    assert with_ids.settings["prompt_format"] == without.settings["prompt_format"] == "text"
    assert [request.body for _, request in asked.sent] == [request.body for _, request in plain.sent]
    assert all(
        isinstance(request.body["input" if api == "responses" else "messages"], list) for _, request in asked.sent
    )
