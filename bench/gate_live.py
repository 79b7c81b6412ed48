"""Does the regression gate hold on a live engine? A/A and A/B pairs of real runs on vLLM's CPU build.

Issue 20's live measure: the vLLM CPU server the engine tests build (``scripts/setup_vllm_cpu.py``:
vLLM 0.32.0 serving the tiny random-weight Llama), pairs of real runs with nothing changed
between them (A/A; the noise is the engine's and the machine's own, nothing injected): at most
one false alarm in at least 50 pairs; and a real slowdown caused on the engine (A/B), reported
as measured. Next to the gate: what pytest-benchmark's ``median:5%`` check and asv's
Mann-Whitney rule (``bench/gate_quality.py``'s :func:`plain_check` and :func:`asv_check`) say
on the same pairs.

**Server**: started once per variant, loopback only, bounded (``ServerProcess``: a start-up
timeout, stopped at the end or by its watchdog if this script dies), with
``VLLM_SERVER_DEV_MODE=1`` so that ``POST /reset_prefix_cache`` empties the prefix cache before
every run, as the plugin does between repeats. One warm-up run per server is thrown away.

**Workload**: a generated chat (``SyntheticSpec``): 20 sessions of 2 turns (40 requests), first
prompts ~N(512, 128) tokens of which half is one of 4 shared prefixes, the second turn extending
the first by ~N(512, 128) new tokens, 64 output tokens each (``ignore_eos``, so the count is
exact), token-id prompts on the completions API, 4 sessions in flight.

**A side** is what ``--llm-repeat R`` stores (the gate's default R = 3): R runs, each after a cache
reset, each made into a record (``baseline.make_record``) and pooled into one
(``repeats.pool_records``, with the reset named in ``runs``).

**Procedure**: step i = 0..N: one baseline side A_i, then, for i >= 1, each slowdown's side
B_i (interleaved, so the machine's slow drift hits both alike). A/A pairs are consecutive sides
(A_{i-1}, A_i): a CI job comparing with the previous commit's stored result; they share a side,
so neighbouring pairs are not independent (the Wilson intervals assume they are). A/B pairs are
(A_i, B_i). Each pair is judged with r = 1, r = 3 (``--llm-repeat``'s default until 2026-11-26,
which the earlier runs in bench/README.md report), r = ``--llm-repeat``'s default now and r = R
runs per side (the first r of each side; r <= R).

**Slowdowns** (``--slowdown``, any of):

- ``busy-core``: a busy loop (``while True: pass``) pinned to the core vLLM's worker is bound to
  (``--busy-core``; vLLM's CPU build binds its worker to core 0 of a 2-core machine and reserves
  core 1, its log says ``core ids=[0]``), running for the whole B side and stopped after it;
- ``batched-tokens=N``: a second vLLM server, identical but for ``--max-num-batched-tokens N``
  (chunked prefill in chunks of N tokens), started beside the first. Each side runs alone: the
  other server is stopped (SIGSTOP) meanwhile, since an idle vLLM CPU worker polls its queue on
  the core every worker here is bound to.

**Methods** on each pair: ``gate`` is ``baseline.compare`` at its defaults (tolerances, 95%
confidence, the two-level bootstrap over runs then requests when r > 1); a false alarm is any
metric called a regression, detection is ``ttft.p50`` (and, separately, any metric) called a
regression. pytest-benchmark's ``median:5%`` and asv's rule (Mann-Whitney U at p < 0.002 and a
median change beyond 5%) on the pooled request samples of TTFT, and on "any of ttft, tpot,
latency" (one benchmark per metric, any of them failing). ``history``: the gate once the store
holds K >= 5 earlier results (``history.gate_with_history``'s Student's t prediction rule, as
``bench/gate_quality.py`` applies it), where the K results are the baseline sides measured
before: the A/A pair (A_{i-1}, A_i) over A_{i-K}..A_{i-1}, the A/B pair (A_i, B_i) over
A_{i-K+1}..A_i, what a CI job's store would hold had it saved every earlier side (K = 5, 10:
:data:`HISTORY_DEPTHS`). Rates with Wilson 95% intervals.

``--budget S`` stops starting new steps after S seconds (the pairs done so far are reported);
every side is written to ``--out`` (JSON lines) as it is measured, and ``--from FILE`` reports
on such a file without a server.

    .venv/bin/python bench/gate_live.py [--pairs 100] [--repeat 3] [--slowdown busy-core batched-tokens=64] [--budget 2200] [--out FILE]

Needs the vLLM CPU install (``scripts/setup_vllm_cpu.py``, run by this script) and scipy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

from gate_quality import any_regression, asv_check, history_flags, judge, plain_check, rate, table

from pytest_llmreplay import PromptFactory, ReplaySettings, Result, load_tokenizer
from pytest_llmreplay.gate import baseline, history
from pytest_llmreplay.gate.repeats import pool_records
from pytest_llmreplay.plugin.options import OPTIONS
from pytest_llmreplay.plugin.servers import free_port
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.server_process import ServerProcess
from pytest_llmreplay.target import Target, live_fingerprint
from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate

ROOT = Path(__file__).resolve().parent.parent
SPEC = SyntheticSpec(
    sessions=20,
    input_tokens={"dist": "normal", "mean": 512, "std": 128, "min": 64},
    output_tokens=64,
    turns=2,
    shared_prefix_ratio=0.5,
    prefix_groups=4,
    seed=11,
)
SETTINGS = ReplaySettings(concurrency=4, prompt_format="ids")
EXTRA_BODY = {"ignore_eos": True}
REQUEST_METRICS = ("ttft", "tpot", "latency")
STARTUP_TIMEOUT_S = 900.0
HISTORY_DEPTHS = (5, 10)  # earlier results the history gate reads (it needs at least 5)
EARLIER_REPEAT = 3  # --llm-repeat's default until 2026-11-26, among the rows when --repeat allows
PLUGIN_REPEAT = int(next(default for flag, _, _, default, _ in OPTIONS if flag == "--llm-repeat"))  # its default now


def server_command(port: int, scratch: Path, extra: list[str]) -> str:
    """The engine tests' vLLM command (``setup_vllm_cpu.py --json``, installing on first use) plus ``extra``."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "setup_vllm_cpu.py"),
            "--json",
            "--port",
            str(port),
            "--scratch",
            str(scratch),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"gate_live: scripts/setup_vllm_cpu.py failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])["command"] + "".join(f" {arg}" for arg in extra)


@contextlib.contextmanager
def vllm_server(extra: list[str], log_dir: Path) -> Iterator[ServerProcess]:
    """A vLLM CPU server on a free loopback port, in dev mode (cache reset), for a ``with`` block."""
    port = free_port()
    scratch = Path(tempfile.mkdtemp(prefix="gate-live-vllm-"))
    server = ServerProcess(
        server_command(port, scratch, extra),
        f"http://127.0.0.1:{port}",
        env={"VLLM_SERVER_DEV_MODE": "1"},
        startup_timeout_s=STARTUP_TIMEOUT_S,
        log_path=log_dir / f"vllm-{port}.log",
    )
    with server:
        yield server


@contextlib.contextmanager
def busy_core(core: int) -> Iterator[None]:
    """A Python busy loop pinned to ``core`` for the length of the block."""
    loop = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {core})
    )
    try:
        yield
    finally:
        loop.terminate()
        loop.wait(timeout=10)


@contextlib.contextmanager
def alone(servers: dict[str, ServerProcess], active: str) -> Iterator[None]:
    """Every server but ``active`` stopped (SIGSTOP to its process group) for the block, then
    continued: an idle vLLM CPU server's worker keeps polling its queue, a third of the core that
    every vLLM worker here is bound to (core 0), so the idle second server slowed the measured one."""
    others = [server for name, server in servers.items() if name != active]
    for server in others:
        os.killpg(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for server in others:
            os.killpg(server.process.pid, signal.SIGCONT)


class Engine:
    """One server to replay the workload against, with what a stored side needs."""

    def __init__(self, url: str, prompts: PromptFactory) -> None:
        self.target = Target("live", url=url, api="completions", prompts=prompts, extra_body=EXTRA_BODY)
        self.prompts = prompts
        self.workload = generate(SPEC)
        self.fingerprint = live_fingerprint(url, None, "gate_live")

    def run(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """One run after a cache reset: its record and its facts (as the plugin keeps them)."""
        reset = self.target.reset_cache()
        if reset is None:
            raise SystemExit(
                f"gate_live: {self.target.url} did not accept POST /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1 missing?)"
            )
        run = replay(self.workload, self.target.endpoint(), self.prompts, SETTINGS, clock=self.target.clock())
        record = baseline.make_record(
            Result(run),
            test="bench/gate_live",
            fingerprint=self.fingerprint,
            workload={"spec": repr(SPEC)},
            git={"commit": None},
        )
        return record, {"seed": None, "cache_reset": reset}

    def side(self, repeat: int) -> dict[str, Any]:
        """``repeat`` runs, each stored; the list of their records (pooled later, per r)."""
        runs = [self.run() for _ in range(repeat)]
        return {"records": [record for record, _ in runs], "facts": [facts for _, facts in runs]}


def stored(side: dict[str, Any], r: int) -> dict[str, Any]:
    """The side's first ``r`` runs as ``--llm-repeat r`` stores them."""
    return pool_records(side["records"][:r], side["facts"][:r])


def failed_requests(side: dict[str, Any]) -> int:
    return sum(
        record["summary"]["requests"]["failed"] + record["summary"]["requests"]["cancelled"]
        for record in side["records"]
    )


def judged(base: dict[str, Any], current: dict[str, Any], r: int) -> dict[str, Any]:
    """The gate's verdicts (``gate_quality.judge``) and the two other tools', on TTFT and on any request metric."""
    b, c = stored(base, r), stored(current, r)
    out = judge(b, c)
    out["plain_any"] = any(plain_check(b, c, metric) for metric in REQUEST_METRICS)
    out["asv_any"] = any(asv_check(b, c, metric) for metric in REQUEST_METRICS)
    return out


# ------------------------------------------------------------------------ reporting


def changes(pairs: list[dict[str, Any]], key: str) -> str:
    """Median and range over pairs of the gate's measured change of ``key``."""
    values = [p["rows"][key]["change"] for p in pairs if p["rows"][key]["change"] is not None]
    return f"{statistics.median(values):+.1%} ({min(values):+.1%} to {max(values):+.1%})" if values else "-"


def method_rows(pairs: list[dict[str, Any]], r: int) -> list[list[str]]:
    n = len(pairs)
    gate_ttft = sum(p["rows"]["ttft.p50"]["verdict"] == "regression" for p in pairs)
    gate_any = sum(any_regression(p) for p in pairs)
    return [
        [f"gate, {r} run(s) per side", rate(gate_ttft, n), rate(gate_any, n)],
        [
            f"gate: comparisons called unstable (no verdict), {r} run(s)",
            rate(sum(p["unstable"] for p in pairs), n),
            rate(sum(p["unstable"] for p in pairs), n),
        ],
        [
            f"pytest-benchmark median:5%, {r} run(s)",
            rate(sum(p["plain"] for p in pairs), n),
            rate(sum(p["plain_any"] for p in pairs), n),
        ],
        [
            f"asv (Mann-Whitney p < 0.002, > 5%), {r} run(s)",
            rate(sum(p["asv"] for p in pairs), n),
            rate(sum(p["asv_any"] for p in pairs), n),
        ],
    ]


def history_rows(
    baseline_sides: list[dict[str, Any]],
    slow: dict[str, list[dict[str, Any]]],
    r: int,
    depths: tuple[int, ...] = HISTORY_DEPTHS,
) -> list[list[str]]:
    """The history gate (``history.gate_with_history``'s rule, ``gate_quality.history_flags``) on the
    same pairs: an A/A pair (A_{i-1}, A_i) judged over the K sides A_{i-K}..A_{i-1} (its baseline the
    newest), an A/B pair (A_i, B_i) over A_{i-K+1}..A_i: what the store of a CI job that saved
    every earlier side would hold. Pairs with fewer than K sides before them are left out."""
    figures = [
        {key: history.figure(stored(side, r), key) for key in baseline.DEFAULT_TOLERANCES} for side in baseline_sides
    ]
    rows = []
    for depth in depths:
        aa = [
            history_flags(judged(baseline_sides[i - 1], baseline_sides[i], r), figures[i - depth : i], "t", None)
            for i in range(depth, len(baseline_sides))
        ]
        row = [f"K = {depth}", rate(sum(aa), len(aa))]
        for sides in slow.values():
            pairs = [
                (judged(baseline_sides[s["step"]], s, r), figures[s["step"] - depth + 1 : s["step"] + 1])
                for s in sides
                if s["step"] >= depth - 1
            ]
            row += [
                rate(sum(history_flags(j, past, "t", ("ttft.p50",)) for j, past in pairs), len(pairs)),
                rate(sum(history_flags(j, past, "t", None) for j, past in pairs), len(pairs)),
            ]
        rows.append(row)
    return rows


def report(sides: list[dict[str, Any]], repeat: int) -> str:
    baseline_sides = [s for s in sides if s["kind"] == "A"]
    slow_kinds = list(dict.fromkeys(s["kind"] for s in sides if s["kind"] != "A"))
    by_step = {(s["kind"], s["step"]): s for s in sides}
    out = []
    for r in sorted({r for r in (1, EARLIER_REPEAT, PLUGIN_REPEAT, repeat) if r <= repeat}):
        aa = [judged(prev, cur, r) for prev, cur in pairwise(baseline_sides)]
        out += [
            f"#### A/A: consecutive baseline sides, {r} run(s) per side, {len(aa)} pairs",
            "",
            table(
                ["method", "false alarms, ttft.p50 / TTFT median", "false alarms, any metric (target: <= 1 in 50)"],
                method_rows(aa, r),
            ),
            "",
            "Per metric, gate regressions: "
            + ", ".join(
                f"{key} {sum(p['rows'][key]['verdict'] == 'regression' for p in aa)}"
                for key in baseline.DEFAULT_TOLERANCES
            )
            + "; median change (range): "
            + ", ".join(f"{key} {changes(aa, key)}" for key in ("ttft.p50", "tpot.p50", "latency.p50")),
            "",
        ]
        for kind in slow_kinds:
            ab = [judged(by_step["A", s["step"]], s, r) for s in sides if s["kind"] == kind]
            out += [
                f"#### A/B: {kind}, {r} run(s) per side, {len(ab)} pairs",
                "",
                table(["method", "detection, ttft.p50 / TTFT median", "detection, any metric"], method_rows(ab, r)),
                "",
                "Measured change (gate's estimate, median over pairs and range): "
                + ", ".join(f"{key} {changes(ab, key)}" for key in ("ttft.p50", "tpot.p50", "latency.p50")),
                "",
            ]
        out += [
            f"#### History: the gate over the K baseline sides before the current one, {r} run(s) per side",
            "",
            table(
                [
                    "history",
                    "A/A false alarms, any metric",
                    *(f"{kind} detected, {what}" for kind in slow_kinds for what in ("ttft.p50", "any metric")),
                ],
                history_rows(baseline_sides, {kind: [s for s in sides if s["kind"] == kind] for kind in slow_kinds}, r),
            ),
            "",
        ]
    spread = {
        key: [
            float(statistics.pstdev(v) / statistics.mean(v))
            for s in baseline_sides
            if len(v := [rec["summary"][key.split(".")[0]][key.split(".")[1]] for rec in s["records"]]) > 1
        ]
        for key in ("ttft.p50", "tpot.p50")
    }
    out.append(
        "Run-to-run spread within a baseline side (CV of the R runs' figure, median over sides): "
        + ", ".join(f"{key} {statistics.median(v):.1%}" for key, v in spread.items() if v)
    )
    out.append(f"Failed requests: {sum(s['failed'] for s in sides)} in {sum(len(s['records']) for s in sides)} runs.")
    return "\n".join(out)


# ------------------------------------------------------------------------ measuring


def measure(args: argparse.Namespace, log_dir: Path) -> list[dict[str, Any]]:
    """Steps of one A side and each slowdown's B side, until ``--pairs`` or ``--budget``."""
    prompts = PromptFactory(load_tokenizer(None), seed=0)
    started = time.perf_counter()
    sides: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        servers = {"A": stack.enter_context(vllm_server([], log_dir))}
        for kind in args.slowdown:
            if kind.startswith("batched-tokens="):
                servers[kind] = stack.enter_context(
                    vllm_server(["--max-num-batched-tokens", kind.partition("=")[2]], log_dir)
                )
        engines = {name: Engine(server.url, prompts) for name, server in servers.items()}
        for name, engine in engines.items():
            with alone(servers, name):
                engine.run()  # warm-up, thrown away
        print(f"servers up and warm after {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        for step in range(args.pairs + 1):
            if time.perf_counter() - started > args.budget:
                print(f"budget of {args.budget:.0f} s spent after {step - 1} pairs", file=sys.stderr, flush=True)
                break
            for kind in ["A", *(args.slowdown if step else [])]:
                t0 = time.perf_counter()
                server = "A" if kind == "busy-core" else kind
                with (
                    alone(servers, server),
                    busy_core(args.busy_core) if kind == "busy-core" else contextlib.nullcontext(),
                ):
                    side = engines[server].side(args.repeat)
                side.update(kind=kind, step=step, wall_s=time.perf_counter() - t0, failed=failed_requests(side))
                sides.append(side)
                with open(args.out, "a") as out:
                    out.write(json.dumps(side) + "\n")
                print(
                    f"step {step} {kind}: {side['wall_s']:.1f} s, ttft.p50 "
                    + ", ".join(f"{rec['summary']['ttft']['p50'] * 1e3:.0f}" for rec in side["records"])
                    + " ms",
                    file=sys.stderr,
                    flush=True,
                )
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100, help="A/A pairs (and A/B pairs of each slowdown) to aim for")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side (the gate's default --llm-repeat)")
    parser.add_argument(
        "--slowdown", nargs="*", default=["busy-core", "batched-tokens=64"], help="busy-core and/or batched-tokens=N"
    )
    parser.add_argument(
        "--busy-core", type=int, default=0, help="the core the busy loop is pinned to (vLLM's worker core)"
    )
    parser.add_argument("--budget", type=float, default=2200.0, help="seconds after which no new step starts")
    parser.add_argument("--out", help="JSON lines, one measured side each (default: a new file in a temp folder)")
    parser.add_argument("--from", dest="source", help="report on a --out file instead of measuring")
    args = parser.parse_args()
    for kind in args.slowdown:
        if kind != "busy-core" and not (kind.startswith("batched-tokens=") and kind.partition("=")[2].isdigit()):
            parser.error(f"--slowdown: expected busy-core or batched-tokens=N, got {kind!r}")

    started = time.perf_counter()
    if args.source:
        sides = [json.loads(line) for line in Path(args.source).read_text().splitlines() if line.strip()]
    else:
        log_dir = Path(tempfile.mkdtemp(prefix="gate-live-"))
        args.out = args.out or str(log_dir / "sides.jsonl")
        Path(args.out).write_text("")
        print(f"sides to {args.out}, server logs in {log_dir}", file=sys.stderr, flush=True)
        sides = measure(args, log_dir)
    load = os.getloadavg()
    print(
        f"Workload: {SPEC}; {sum(len(s.turns) for s in generate(SPEC).sessions)} requests; settings {SETTINGS}; extra body {EXTRA_BODY}"
    )
    print(
        f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}; load average at the end {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}"
    )
    walls = {
        kind: [s["wall_s"] for s in sides if s["kind"] == kind] for kind in dict.fromkeys(s["kind"] for s in sides)
    }
    print("Side wall time (median): " + ", ".join(f"{kind} {statistics.median(w):.1f} s" for kind, w in walls.items()))
    print()
    print(report(sides, args.repeat))
    print(f"\nTotal wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
