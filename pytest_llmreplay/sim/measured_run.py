"""A recorded run of a real server, read as per-request TTFT, TPOT and latency (for calibration).

Three files are understood (by their suffix; each may be gzip- or zstd-compressed, read as the
workloads are: ``run.jsonl.gz``):

- ``*.jsonl``: one request a line as vLLM's own per-request timestamps are recorded in
  LLMServingSim's benchmark (``*_vllm_requests.jsonl``): ``output_toks``, ``queued_ts``,
  ``scheduled_ts``, ``first_token_ts``, ``last_token_ts`` (seconds). Line ``n`` is the
  workload's request ``n`` (session ``n``, turn 0). TTFT = first - queued; TPOT = (last - first)
  / (output - 1); latency = last - queued (as vLLM's own metrics count them: from the request's
  arrival in the engine, so without the server's front end: ``from_client`` False).
- ``requests.csv`` (``llmreplay run --out``): the ``ok`` rows, keyed by ``session_index`` and
  ``turn_index``, with their ``ttft``, ``tpot``, ``latency`` columns (seconds; ``tpot`` empty for a
  one-token output), and each session's start (its first turn's ``scheduled_s``, any status):
  the file does not say how its run was sent, so the calibration checks that pace
  (:func:`check_pace`).
- ``result.json`` (``llmreplay run --out``, a stored result): its per-request ``samples`` of
  ``ttft``, ``tpot``, ``latency`` and their ``sample_keys``.
- a vLLM benchmark result (``vllm bench serve --save-result --save-detailed``, any ``.json``
  holding ``ttfts``): per request its ``ttfts`` and ``itls``; TTFT = ttft, latency = ttft +
  Σ itls, TPOT = Σ itls / (output - 1), as vLLM's benchmark counts them (timed by its client).
  Only the requests that completed are kept, in order, request N as session N: the workload the
  same file gives (:mod:`~pytest_llmreplay.workloads.formats.vllm_bench`) keeps the same ones.

A request's key is ``session_index * KEY_TURNS + turn_index`` (:data:`~..baseline.KEY_TURNS`),
the key stored results use, so a run pairs with a replay of the same workload request by request.
The replay that pairs with it sends the workload as the run did (``load``: the replay settings of
:data:`LOAD_SETTINGS` the run recorded): a ``result.json``'s own settings, a vLLM benchmark's
``max_concurrency`` (else every request at once) or ``request_rate``; none for the others, which
were sent at the workload's own timestamps (or one at a time, untimed).
A file that cannot be used is one :class:`LLMReplayError` line naming the file and what is wrong:
a missing column, times out of order, fewer than :data:`MIN_REQUESTS` requests.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LLMReplayError
from ..gate.baseline import KEY_TURNS
from ..json_text import JSONTextError, parse_json
from ..replayer.plan import ReplaySettings
from ..workloads.workload import Workload

MIN_REQUESTS = 10  # fewer cannot give a percentile worth fitting, nor two halves
METRICS = ("ttft", "tpot", "latency")
# the replay settings that shape a run's load: what a stored result's settings give the replay
LOAD_SETTINGS = (
    "mode",
    "speedup",
    "concurrency",
    "rate",
    "arrival",
    "order",
    "seed",
    "max_requests",
    "max_sessions",
    "duration_s",
)
VLLM_FIELDS = ("output_toks", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")


@dataclass(frozen=True)
class MeasuredRun:
    """Per-request metrics in seconds, sorted by ``keys``; ``tpot`` is NaN for one-token outputs.
    ``from_client``: TTFT and latency were timed by a client (from sending the request), so they
    include the server's front end; False when timed from the request's arrival in the engine.
    ``load``: the replay settings (:class:`~pytest_llmreplay.replayer.plan.ReplaySettings` fields)
    that send the workload as the run sent it (module doc); empty: its own timestamps.
    ``session_starts``: session index -> when its first request was scheduled, in seconds from the
    run's start, where the file records it (a ``requests.csv``; empty for the others)."""

    path: str
    keys: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    latency: np.ndarray
    from_client: bool = True
    load: Mapping[str, Any] = field(default_factory=dict)
    session_starts: Mapping[int, float] = field(default_factory=dict)

    def metric(self, name: str) -> np.ndarray:
        return getattr(self, name)

    def replay_settings(self) -> ReplaySettings:
        """The settings a replay of the run's workload is sent with (``load``; read_run checked them)."""
        return ReplaySettings(**self.load)

    def sent_as(self, workload: Workload) -> str:
        """How a replay sends ``workload`` to pair with this run, in words (``""``: no recorded
        load, or one at its own timestamps unsped)."""
        if not self.load:
            return ""
        settings = self.replay_settings()
        mode = settings.resolved_mode(workload)
        if mode == "concurrency":
            return f"concurrency {settings.concurrency or 1}"
        if mode == "rate":
            return f"rate {settings.rate:g}/s ({settings.arrival})"
        return f"its timestamps at speedup {settings.speedup:g}" if settings.speedup != 1.0 else ""

    def subset(self, mask: np.ndarray) -> MeasuredRun:
        return MeasuredRun(
            self.path,
            self.keys[mask],
            self.ttft[mask],
            self.tpot[mask],
            self.latency[mask],
            self.from_client,
            self.load,
            self.session_starts,
        )


Row = tuple[int, float, float, float]  # a request's (key, ttft, tpot, latency), as a reader gives it
Read = tuple[list[Row], dict[str, Any], dict[int, float]]  # rows, MeasuredRun.load, MeasuredRun.session_starts


def read_run(path: str | Path) -> MeasuredRun:
    """The run in ``path`` (module doc); at least :data:`MIN_REQUESTS` usable requests."""
    from ..workloads.formats._compressed import uncompressed_name
    from ..workloads.formats._text import read_text

    path = Path(path)
    if not path.is_file():
        raise LLMReplayError(f"{path}: run file not found")
    readers = {".jsonl": _vllm_jsonl, ".csv": _requests_csv, ".json": _result_json}
    reader = readers.get(Path(uncompressed_name(path)).suffix)
    if reader is None:
        raise LLMReplayError(
            f"{path}: expected a vLLM per-request .jsonl, a requests.csv or a result.json (llmreplay run --out), "
            "or vllm bench serve's result .json, plain or compressed (.gz, .zst)"
        )
    try:
        rows, load, starts = reader(path, read_text(path, "UTF-8 JSONL, CSV or JSON"))
    except OSError as exc:
        raise LLMReplayError(f"{path}: cannot read: {exc.strerror}") from None
    _check_load(path, load)
    if len(rows) < MIN_REQUESTS:
        raise LLMReplayError(f"{path}: {len(rows)} usable requests, at least {MIN_REQUESTS} are needed to calibrate")
    rows.sort(key=lambda row: row[0])
    if len({row[0] for row in rows}) != len(rows):
        raise LLMReplayError(f"{path}: a request appears twice (same session and turn)")
    columns = np.array(rows, dtype=np.float64)
    return MeasuredRun(
        str(path),
        columns[:, 0].astype(np.int64),
        columns[:, 1],
        columns[:, 2],
        columns[:, 3],
        from_client=reader is not _vllm_jsonl,
        load=load,
        session_starts=starts,
    )


def _check_load(path: Path, load: Mapping[str, Any]) -> None:
    """The run's recorded load must make valid replay settings (a stored result edited by hand)."""
    try:
        ReplaySettings(**load).validate()
    except LLMReplayError as exc:
        raise LLMReplayError(f"{path}: settings.{exc}") from None


def _json(text: str, where: str, whole_file: bool = False) -> Any:
    """``text`` parsed, an object naming a key twice refused (as every JSON workload format
    refuses it, docs/workloads.md: the second value would silently win); one error naming
    ``where`` (the file, or the file and line) otherwise, and the line and column in a
    ``whole_file``."""
    try:
        return parse_json(text)
    except JSONTextError as exc:
        raise LLMReplayError(exc.at(where) if whole_file else f"{where}: {exc.reason}") from None


def _number(value: Any, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LLMReplayError(f"{where}: {name}: expected a number, got {value!r}")
    return float(value)


def _vllm_jsonl(path: Path, text: str) -> Read:
    rows: list[Row] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        row = _json(line, where)
        if not isinstance(row, dict):
            raise LLMReplayError(f"{where}: expected an object with {', '.join(VLLM_FIELDS)}")
        missing = [name for name in VLLM_FIELDS if name not in row]
        if missing:
            raise LLMReplayError(
                f"{where}: missing {', '.join(missing)} (a vLLM per-request record needs {', '.join(VLLM_FIELDS)})"
            )
        output, queued, scheduled, first, last = (_number(row[name], where, name) for name in VLLM_FIELDS)
        if not queued <= scheduled <= first <= last:
            raise LLMReplayError(
                f"{where}: times out of order (expected queued_ts <= scheduled_ts <= first_token_ts <= last_token_ts)"
            )
        if output < 1:
            raise LLMReplayError(f"{where}: output_toks: expected >= 1, got {output:g}")
        tpot = (last - first) / (output - 1) if output > 1 else math.nan
        rows.append((len(rows) * KEY_TURNS, first - queued, tpot, last - queued))
    return rows, {}, {}


def _requests_csv(path: Path, text: str) -> Read:
    needed = ("session_index", "turn_index", "status", *METRICS)
    with io.StringIO(text, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in needed if name not in (reader.fieldnames or [])]
        if missing:
            raise LLMReplayError(
                f"{path}: missing column {', '.join(missing)} (expected llmreplay run --out's requests.csv)"
            )
        rows = []
        starts: dict[int, float] = {}
        timed = "scheduled_s" in (reader.fieldnames or [])
        for number, row in enumerate(reader, 2):
            where = f"{path}:{number}"
            if timed and row["turn_index"] == "0":
                try:
                    starts[int(row["session_index"])] = float(row["scheduled_s"])
                except ValueError:
                    raise LLMReplayError(f"{where}: session_index, scheduled_s: expected numbers") from None
            if row["status"] != "ok":
                continue
            try:
                key = int(row["session_index"]) * KEY_TURNS + int(row["turn_index"])
                ttft, latency = float(row["ttft"]), float(row["latency"])
                tpot = float(row["tpot"]) if row["tpot"] else math.nan
            except ValueError:
                raise LLMReplayError(
                    f"{where}: session_index, turn_index, ttft, tpot, latency: expected numbers"
                ) from None
            if not 0 <= ttft <= latency:
                raise LLMReplayError(f"{where}: times out of order (expected 0 <= ttft <= latency)")
            rows.append((key, ttft, tpot, latency))
    return rows, {}, starts


def _result_json(path: Path, text: str) -> Read:
    record = _json(text, str(path), whole_file=True)
    if isinstance(record, dict) and "ttfts" in record:
        return _vllm_bench(path, record)
    if isinstance(record, dict) and "samples" not in record and {"request_rate", "num_prompts"} & record.keys():
        raise LLMReplayError(
            f"{path}: a vllm bench serve result without per-request times: run it again with --save-detailed"
        )
    samples = record.get("samples") if isinstance(record, dict) else None
    keys = record.get("sample_keys") if isinstance(record, dict) else None
    if not isinstance(samples, dict) or not isinstance(keys, dict):
        raise LLMReplayError(
            f"{path}: missing samples and sample_keys (expected a stored result: llmreplay run --out's result.json)"
        )
    found: dict[str, dict[int, float]] = {}
    for name in METRICS:
        values, names = samples.get(name), keys.get(name)
        if name != "tpot" and (not isinstance(values, list) or not isinstance(names, list)):
            raise LLMReplayError(f"{path}: samples.{name}: missing (the per-request {name} of each request)")
        if isinstance(values, list) and isinstance(names, list) and len(values) != len(names):
            raise LLMReplayError(f"{path}: samples.{name}: {len(values)} values for {len(names)} sample_keys")
        found[name] = dict(zip(names or [], values or [], strict=False))
    rows = []
    for key, ttft in found["ttft"].items():
        latency = found["latency"].get(key)
        if latency is None:
            continue
        if not 0 <= ttft <= latency:
            raise LLMReplayError(f"{path}: request key {key}: times out of order (expected 0 <= ttft <= latency)")
        rows.append((key, ttft, found["tpot"].get(key, math.nan), latency))
    settings = record.get("settings", {})
    if not isinstance(settings, dict):
        raise LLMReplayError(f"{path}: settings: expected an object (the run's replay settings), got {settings!r:.60}")
    load = {name: settings[name] for name in LOAD_SETTINGS if name in settings}
    return rows, {**load, **_capacity_point_load(path, record)}, {}


def _capacity_point_load(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """A capacity search's result (``llmreplay sweep --out``, a capacity test's): its samples are
    its point at capacity's, and its ``settings`` the search's (no mode, rate or concurrency of
    that point: a calibration replayed the workload at its own timestamps, 5 req/s where the
    point ran at 12.7, and fitted a profile 40% off); that point's load settings, from the stored
    search (its point run at ``offered.low``). Nothing for any other result; an error for a
    search in which no load met the SLOs (its result is a failing point's)."""
    capacity = record.get("capacity")
    if not isinstance(capacity, dict):
        return {}
    offered = (capacity.get("offered") or {}).get("low")
    points = [p for p in capacity.get("points") or () if isinstance(p, dict) and p.get("load") == offered]
    if not offered or not points or not isinstance(points[0].get("settings"), dict):
        raise LLMReplayError(
            f"{path}: a capacity search's result with no point at capacity (no load met its SLOs): calibrate "
            "from a run at a load (llmreplay run --out DIR, its result.json)"
        )
    return {name: value for name, value in points[0]["settings"].items() if name in LOAD_SETTINGS}


def _vllm_bench(path: Path, record: dict[str, Any]) -> Read:
    from ..workloads.formats._fields import Fields, is_finite_number
    from ..workloads.formats.vllm_bench import bench_load, completed

    result = Fields(record, path, None)
    kept = completed(result)
    ttfts = result.number_list("ttfts")
    itls = result.list("itls")
    for name, values in (("ttfts", ttfts), ("itls", itls)):
        if len(values) != len(record["input_lens"]):
            raise result.error(name, f"has {len(values)} entries for {len(record['input_lens'])} requests")
    outputs = record["output_lens"]
    rows: list[Row] = []
    for index in kept:
        gaps = itls[index]
        if not isinstance(gaps, list) or not all(is_finite_number(gap, 0) for gap in gaps):
            raise result.error(f"itls[{index}]", f"must be a list of finite numbers >= 0, got {gaps!r:.80}")
        decode = math.fsum(gaps)
        tpot = decode / (outputs[index] - 1) if outputs[index] > 1 else math.nan
        rows.append((len(rows) * KEY_TURNS, ttfts[index], tpot, ttfts[index] + decode))
    return rows, bench_load(result, len(kept)), {}


def check_pairing(run: MeasuredRun, workload: Workload) -> None:
    """Every request of ``run`` is one of ``workload``'s (same session and turn), else one line."""
    known = {
        session_index * KEY_TURNS + turn
        for session_index, session in enumerate(workload.sessions)
        for turn in range(len(session.turns))
    }
    strangers = [int(key) for key in run.keys if int(key) not in known]
    if strangers:
        key = strangers[0]
        raise LLMReplayError(
            f"{run.path}: request (session {key // KEY_TURNS}, turn {key % KEY_TURNS}) is not in the workload "
            f"({len(workload.sessions)} sessions): {len(strangers)} of {len(run.keys)} requests do not pair; is it a run of this workload?"
        )


PACE_TOLERANCE = 0.05  # how far a run's pace may stray from its workload's timestamps (clock, scheduling lag)


def check_pace(run: MeasuredRun, workload: Workload) -> None:
    """A run with no recorded load (``run.load`` empty) is replayed at its workload's own
    timestamps: where it records its sessions' starts (a ``requests.csv``) and the workload is
    timed, the span of those starts must be the span of the same sessions' arrivals within
    :data:`PACE_TOLERANCE`, else one line says at what pace the run was sent (a ``--speedup``,
    concurrency or rate run) and to calibrate from its ``result.json``, which records how."""
    if run.load or not run.session_starts or not workload.timed:
        return
    sessions = workload.sessions
    pairs = [(sessions[index].arrival_s, start) for index, start in run.session_starts.items() if index < len(sessions)]
    planned = max(a for a, _ in pairs) - min(a for a, _ in pairs) if pairs else 0.0
    sent = max(s for _, s in pairs) - min(s for _, s in pairs) if pairs else 0.0
    if planned <= 0 or abs(sent / planned - 1) <= PACE_TOLERANCE:
        return
    pace = (
        f"were sent at {planned / sent:.3g}x the pace of the workload's timestamps ({len(pairs)} sessions started over {sent:.3g} s"
        if sent > 0
        else f"were all sent at once ({len(pairs)} sessions"
    )
    raise LLMReplayError(
        f"{run.path}: its sessions {pace}, their arrivals span {planned:.3g} s); a requests.csv does not record how "
        "its run was sent (speedup, concurrency, rate): calibrate from the run's result.json, written beside it, which does"
    )


__all__ = ["MeasuredRun", "read_run", "MIN_REQUESTS", "METRICS", "LOAD_SETTINGS", "check_pairing", "check_pace"]
