"""How fast our client drives a zero-latency server, against AIPerf on the same mock.

One mock server (``tests/mockserver.py --envelope``: zero latency, one token per SSE chunk, each
chunk with the id/object/created/model fields of real servers, which AIPerf needs) serves the
whole session. Each of RUNS rounds runs, in this order:

1. ``llmreplay run`` closed loop: concurrency 64, 1000 single-turn requests, 128 input and
   exactly 64 output tokens (a synthetic spec written to a temp dir);
2. ``aiperf profile`` with the same load (its own synthetic prompts, same lengths);
3. ``llmreplay run`` open loop: constant arrivals at 200 requests/s, 1000 requests.

Both clients run as CLI subprocesses and the whole command is timed too. Figures: request and
output-token throughput (each tool's own report), effective concurrency (ours), wall time of the
command, time from launching the command to the mock receiving its first completion request
(``GET /mock/stats``), schedule lag p50/p99 of the open loop. The medians go in a Markdown table
with ratio ours/AIPerf, then every run's figures, the machine and the exact commands.

The machine may be shared (2 cores: the mock and a client already fill them). Before each run the
script waits (``--wait-idle``) for a quiet second, counts the CPU the machine spent on processes
other than the client (and its children) and the mock during the run (/proc/stat), and redoes a
run where that exceeded ``--max-other-load`` cores (``--retries`` times at most); the table shows it.

    .venv/bin/python bench/client_throughput.py [--runs 5] [--write FILE] [--aiperf-venv V]

AIPerf: ``python -m venv V && V/bin/pip install aiperf==0.13.0``; V from ``--aiperf-venv``, else
``$AIPERF_VENV``, else /tmp/aiperf-work/venv. ``--no-aiperf`` measures ours only. AIPerf runs
without HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE (with them it takes the local tokenizer folder for a
hub id) on a folder holding our bundled tokenizer.json and a PreTrainedTokenizerFast config.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib import metadata
from pathlib import Path

from machine import cpu_model

from pytest_llmreplay.plugin.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
MOCK = ROOT / "tests" / "mockserver.py"
TOKENIZER = ROOT / "pytest_llmreplay" / "workloads" / "assets" / "tokenizer.json"
LLMREPLAY = Path(sys.executable).with_name("llmreplay")
DEFAULT_AIPERF_VENV = "/tmp/aiperf-work/venv"
TARGETS = {"first_request_s": 1.0, "lag_p99_ms": 2.0}


# --- set-up ----------------------------------------------------------------------------------


def write_workload(folder: Path, requests: int, isl: int, osl: int) -> Path:
    path = folder / "flat_chat.yaml"
    path.write_text(
        "# flat single-turn chat: fixed lengths, untimed (the replay mode sets the pacing)\n"
        f"synthetic:\n  sessions: {requests}\n  input_tokens: {isl}\n  output_tokens: {osl}\n  turns: 1\n  seed: 42\n"
    )
    return path


def write_tokenizer_folder(folder: Path) -> Path:
    """Our bundled tokenizer as a transformers folder AIPerf can load."""
    folder.mkdir()
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    special = "<|endoftext|>"
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": special,
        "eos_token": special,
        "unk_token": special,
        "pad_token": special,
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return folder


def http(method: str, url: str, body: dict | None = None, timeout: float = 5.0) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"} if data else {}
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return reply.read()


class Mock:
    """``tests/mockserver.py`` as a subprocess for the whole session."""

    def __init__(self, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(log, "wb")
        self.process = subprocess.Popen(
            [sys.executable, str(MOCK), "--port", str(port), "--envelope"],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if http("GET", self.url + "/health", timeout=1) == b"ok":
                    break
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"mock server did not start; see {log}")
            time.sleep(0.05)
        if b"requests" not in http("GET", self.url + "/mock/stats"):
            raise SystemExit("tests/mockserver.py has no GET /mock/stats route")

    def reset(self) -> None:
        http("DELETE", self.url + "/mock/stats")

    def stats(self) -> dict:
        return json.loads(http("GET", self.url + "/mock/stats"))

    def streamed_tokens(self, body: dict) -> int:
        """Content chunks the mock streams for a chat request with ``body``'s length fields."""
        raw = http(
            "POST",
            self.url + "/v1/chat/completions",
            {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}], **body},
        )
        return sum(
            1
            for line in raw.split(b"\n")
            if line.startswith(b"data: {") and b'"content": "' in line and b'"content": ""' not in line
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


# --- CPU accounting: the machine may be shared --------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat)."""
    user, nice, system, idle, iowait, irq, softirq, steal = (
        int(x) for x in Path("/proc/stat").read_text().split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / TICK


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_idle(limit_s: float, threshold: float = 0.15) -> float:
    """Wait (up to ``limit_s``) for a 1 s window in which the machine is busy less than
    ``threshold`` cores; the busy cores of the last window."""
    deadline = time.monotonic() + limit_s
    while True:
        before, start = busy_cpu_s(), time.monotonic()
        time.sleep(1.0)
        load = (busy_cpu_s() - before) / (time.monotonic() - start)
        if load < threshold or time.monotonic() >= deadline:
            return load


# --- one run ---------------------------------------------------------------------------------


def timed(command: list[str], mock: Mock, log: Path, env: dict | None = None) -> tuple[float, float | None, float]:
    """(wall seconds of the command, seconds from launch to the mock's first completion request,
    cores used by other processes than the command and the mock while it ran)."""
    wait_idle(ARGS.wait_idle)
    mock.reset()
    machine, children, server = busy_cpu_s(), children_cpu_s(), process_cpu_s(mock.process.pid)
    with open(log, "wb") as out:
        launched = time.time()
        start = time.perf_counter()
        code = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        wall = time.perf_counter() - start
    ours_cpu = (children_cpu_s() - children) + (process_cpu_s(mock.process.pid) - server)
    other = max(busy_cpu_s() - machine - ours_cpu, 0.0) / wall
    if code != 0:
        raise SystemExit(
            f"exit status {code}: {shlex.join(command)}\n--- {log} ---\n{log.read_text(errors='replace')[-3000:]}"
        )
    first = mock.stats()["first_request_time"]
    return wall, (first - launched if first is not None else None), other


def ours(workload: Path, mock: Mock, out: Path, log: Path, extra: list[str]) -> tuple[list[str], dict]:
    command = [
        str(LLMREPLAY),
        "run",
        str(workload),
        "--endpoint",
        mock.url,
        "--api",
        "chat",
        "--max-requests",
        str(ARGS.requests),
        *extra,
        "--out",
        str(out),
    ]
    wall, first, other = timed(command, mock, log)
    result = json.loads((out / "result.json").read_text())
    s = result["summary"]
    requests = s["requests"]
    problems = []
    if requests["ok"] != ARGS.requests:
        problems.append(f"{requests['ok']} ok of {ARGS.requests} ({requests})")
    if s["output_tokens"]["min"] != ARGS.osl or s["output_tokens"]["max"] != ARGS.osl:
        problems.append(f"output tokens {s['output_tokens']['min']}..{s['output_tokens']['max']}, expected {ARGS.osl}")
    if problems:
        raise SystemExit(f"llmreplay run {out}: " + "; ".join(problems))
    return command, {
        "req_s": s["request_throughput"]["overall"],
        "tok_s": s["output_throughput"]["overall"],
        "eff_conc": s["effective_concurrency"]["value"],
        "wall_s": wall,
        "first_request_s": first,
        "duration_s": result["duration_s"],
        "lag_p50_ms": s["schedule_lag"]["p50"] * 1000,
        "lag_p99_ms": s["schedule_lag"]["p99"] * 1000,
        "lag_max_ms": s["schedule_lag"]["max"] * 1000,
        "warnings": result["warnings"],
        "other_load": other,
    }


def aiperf(
    venv: Path, tokenizer: Path, mock: Mock, out: Path, log: Path, legacy_max_tokens: bool
) -> tuple[list[str], dict]:
    command = [
        str(venv / "bin" / "aiperf"),
        "profile",
        "--url",
        mock.url,
        "-m",
        "mock",
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(ARGS.concurrency),
        "--request-count",
        str(ARGS.requests),
        "--output-tokens-mean",
        str(ARGS.osl),
        "--output-tokens-stddev",
        "0",
        "--isl",
        str(ARGS.isl),
        "--isl-stddev",
        "0",
        "--tokenizer",
        str(tokenizer),
        "--random-seed",
        "42",
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--ui",
        "none",
        *(["--use-legacy-max-tokens"] if legacy_max_tokens else []),
        "--artifact-dir",
        str(out),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    wall, first, other = timed(command, mock, log, env)
    d = json.loads((out / "profile_export_aiperf.json").read_text())
    count, osl = d["request_count"]["avg"], d["output_sequence_length"]["avg"]
    if count != ARGS.requests or abs(osl - ARGS.osl) > 1e-9 or d.get("error_summary"):
        raise SystemExit(f"aiperf {out}: {count} requests, mean output {osl} tokens, errors {d.get('error_summary')}")
    return command, {
        "req_s": d["request_throughput"]["avg"],
        "tok_s": d["output_token_throughput"]["avg"],
        # Little's law from AIPerf's own figures (it reports no measured concurrency)
        "eff_conc": d["request_throughput"]["avg"] * d["request_latency"]["avg"] / 1000,
        "wall_s": wall,
        "first_request_s": first,
        "duration_s": d["benchmark_duration"]["avg"],
        "other_load": other,
    }


def quiet(measure):
    """``measure()``, redone (up to --retries times) while other processes kept the machine busy."""
    for attempt in range(ARGS.retries + 1):
        command, figures = measure()
        figures["redone"] = attempt
        if figures["other_load"] <= ARGS.max_other_load:
            break
        print(
            f"  (other processes used {figures['other_load']:.2f} cores during that run; {'redoing' if attempt < ARGS.retries else 'kept'})",
            file=sys.stderr,
        )
    return command, figures


# --- report ----------------------------------------------------------------------------------


def median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def versions(aiperf_venv: Path | None) -> str:
    ours_v = ", ".join(f"{name} {metadata.version(name)}" for name in ("httpx", "httpx-aiohttp", "aiohttp"))
    line = f"ours: Python {platform.python_version()}, {ours_v}"
    if aiperf_venv is not None:
        script = "import importlib.metadata as m, platform; print(f\"Python {platform.python_version()}, aiperf {m.version('aiperf')}, aiohttp {m.version('aiohttp')}\")"
        line += (
            "; AIPerf venv: "
            + subprocess.run(
                [str(aiperf_venv / "bin" / "python"), "-c", script], capture_output=True, text=True
            ).stdout.strip()
        )
    return line


def display(command: list[str], tmp: Path) -> str:
    text = shlex.join(command).replace(str(tmp), "$TMP").replace(str(ROOT) + "/", "")
    return re.sub(r"http://127\.0\.0\.1:\d+", "http://127.0.0.1:PORT", text)


def report(
    closed: list[dict],
    theirs: list[dict],
    opened: list[dict],
    commands: dict[str, list[str]],
    tmp: Path,
    aiperf_venv: Path | None,
    legacy: bool,
) -> str:
    r, c, o = ARGS.requests, ARGS.concurrency, ARGS.rate
    lines = [
        f"## Client throughput against a zero-latency mock: llmreplay vs AIPerf ({time.strftime('%Y-%m-%d')})",
        "",
        f"Machine: {os.cpu_count()} CPUs (nproc {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()}), {cpu_model()}, "
        f"{platform.system()} {platform.release()}; mock server (tests/mockserver.py, one process) on the same machine, loopback.",
        f"Versions: {versions(aiperf_venv)}.",
        f"Load: {r} single-turn chat requests, {ARGS.isl} input tokens, exactly {ARGS.osl} output tokens (one per SSE chunk), streaming. "
        f"Median of {len(closed)} runs, ours and AIPerf alternating in one session.",
        "",
        "| metric | llmreplay | AIPerf | ours/AIPerf | target |",
        "|---|---:|---:|---:|---|",
    ]

    def row(
        label: str,
        key: str,
        digits: int = 1,
        target: str = "",
        runs: list[dict] = closed,
        peer: list[dict] | None = theirs,
    ) -> None:
        mine = median(runs, key)
        other = median(peer, key) if peer else None
        ratio = f"{mine / other:.2f}x" if mine is not None and other else ""
        lines.append(f"| {label} | {fmt(mine, digits)} | {fmt(other, digits) if peer else ''} | {ratio} | {target} |")

    row(f"closed loop c={c}: requests/s", "req_s")
    row(f"closed loop c={c}: output tokens/s", "tok_s", 0)
    row(f"closed loop c={c}: effective concurrency (AIPerf: Little's law)", "eff_conc", 1)
    row(f"closed loop c={c}: benchmark duration (s, tool's own)", "duration_s", 2)
    row(f"closed loop c={c}: whole-command wall time (s)", "wall_s", 2)
    first_target = f"< {TARGETS['first_request_s']:g} s: " + (
        "met" if (median(closed, "first_request_s") or 99) < TARGETS["first_request_s"] else "**missed**"
    )
    row("launch to first request at the mock (s)", "first_request_s", 3, first_target)
    row(f"open loop {o:g} req/s constant: requests/s", "req_s", 1, runs=opened, peer=None)
    row(f"open loop {o:g} req/s constant: schedule lag p50 (ms)", "lag_p50_ms", 3, runs=opened, peer=None)
    lag_target = f"< {TARGETS['lag_p99_ms']:g} ms: " + (
        "met" if (median(opened, "lag_p99_ms") or 99) < TARGETS["lag_p99_ms"] else "**missed**"
    )
    row(f"open loop {o:g} req/s constant: schedule lag p99 (ms)", "lag_p99_ms", 3, lag_target, runs=opened, peer=None)
    row(f"open loop {o:g} req/s constant: launch to first request (s)", "first_request_s", 3, runs=opened, peer=None)

    lines += [
        "",
        "Every run (closed: req/s, output tok/s, wall s, launch-to-first-request s; open loop: lag p50/p99/max ms; "
        "other load: cores busy with processes other than the client and the mock during each run):",
        "",
        "| run | llmreplay closed | AIPerf closed | llmreplay open loop | other load (ours / AIPerf / open) |",
        "|---:|---|---|---|---|",
    ]
    for i, (a, b, d) in enumerate(zip(closed, theirs or [{}] * len(closed), opened, strict=True), 1):

        def cell(x):
            return (
                f"{x['req_s']:.1f} / {x['tok_s']:,.0f} / {x['wall_s']:.2f} / {fmt(x['first_request_s'], 3)}"
                if x
                else ""
            )

        load = " / ".join(
            (f"{x['other_load']:.2f}" + ("!" if x["other_load"] > ARGS.max_other_load else "")) if x else "-"
            for x in (a, b, d)
        )
        lines.append(
            f"| {i} | {cell(a)} | {cell(b)} | {d['req_s']:.1f} req/s, lag {d['lag_p50_ms']:.3f} / {d['lag_p99_ms']:.3f} / {d['lag_max_ms']:.3f}, first {fmt(d['first_request_s'], 3)} | {load} |"
        )

    redone = sum(x.get("redone", 0) for x in closed + theirs + opened)
    lines += [
        "",
        f"Runs redone because other processes kept more than {ARGS.max_other_load:g} cores busy: {redone}; "
        "'!' marks a kept run still above that (after --retries redos).",
    ]
    warnings = sorted({w for run in closed + opened for w in run["warnings"]})
    lines += [
        "",
        "Commands ($TMP: the bench's temp dir, written by the script; PORT: a free port for the mock):",
        "",
        f"    {display([sys.executable, str(MOCK), '--port', 'PORT', '--envelope'], tmp)}",
    ]
    lines += [f"    {display(cmd, tmp)}" for cmd in commands.values()]
    lines += ["", f"Reproduce: `.venv/bin/python bench/client_throughput.py --runs {len(closed)}`."]
    if legacy and aiperf_venv is not None:
        lines.append(
            "The mock reads only max_tokens, so AIPerf runs with --use-legacy-max-tokens (else it would get 16-token answers)."
        )
    if warnings:
        lines += ["", "Warnings in our result.json (expected with the mock's default of not counting prompts):"]
        lines += [f"- {w[:150]}..." if len(w) > 150 else f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"


# --- main ------------------------------------------------------------------------------------


def main() -> None:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write", metavar="FILE", help="also write the Markdown table to FILE")
    parser.add_argument("--aiperf-venv", default=os.environ.get("AIPERF_VENV", DEFAULT_AIPERF_VENV))
    parser.add_argument("--no-aiperf", action="store_true", help="measure llmreplay only")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--isl", type=int, default=128)
    parser.add_argument("--osl", type=int, default=64)
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=60.0,
        metavar="S",
        help="before each run, wait up to S seconds for a 1 s window with the machine under 0.15 cores busy (default 60)",
    )
    parser.add_argument(
        "--max-other-load",
        type=float,
        default=0.2,
        metavar="CORES",
        help="redo a run when other processes kept more than CORES cores busy during it (default 0.2)",
    )
    parser.add_argument("--retries", type=int, default=3, help="redos per run at most (default 3); the last is kept")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, result.json files)")
    ARGS = parser.parse_args()

    venv = None if ARGS.no_aiperf else Path(ARGS.aiperf_venv)
    if venv is not None and not (venv / "bin" / "aiperf").exists():
        raise SystemExit(
            f"no AIPerf at {venv}/bin/aiperf: install it with\n  python -m venv {venv} && {venv}/bin/pip install aiperf==0.13.0\n"
            "or pass --aiperf-venv V / set AIPERF_VENV (or --no-aiperf)"
        )
    if not LLMREPLAY.exists():
        raise SystemExit(f"no {LLMREPLAY}: run with the project's venv python (.venv/bin/python)")
    tmp = Path(tempfile.mkdtemp(prefix="llmreplay-bench-"))
    workload = write_workload(tmp, ARGS.requests, ARGS.isl, ARGS.osl)
    tokenizer = write_tokenizer_folder(tmp / "tokenizer")
    mock = Mock(free_port(), tmp / "mock.log")
    try:
        # the mock honours max_tokens only? then AIPerf must send the legacy field
        legacy = mock.streamed_tokens({"max_completion_tokens": 5}) != 5
        closed_args = ["--concurrency", str(ARGS.concurrency)]
        open_args = ["--mode", "rate", "--rate", f"{ARGS.rate:g}", "--arrival", "constant"]
        closed, theirs, opened, commands = [], [], [], {}
        for i in range(1, ARGS.runs + 1):
            commands["ours closed"], a = quiet(
                lambda i=i: ours(workload, mock, tmp / f"ours_c{i}", tmp / f"ours_c{i}.log", closed_args)
            )
            closed.append(a)
            print(
                f"run {i}: llmreplay closed {a['req_s']:.1f} req/s, {a['tok_s']:,.0f} tok/s, wall {a['wall_s']:.2f} s, first request {fmt(a['first_request_s'], 3)} s, other load {a['other_load']:.2f}",
                file=sys.stderr,
            )
            if venv is not None:
                commands["aiperf closed"], b = quiet(
                    lambda i=i: aiperf(venv, tokenizer, mock, tmp / f"aiperf_c{i}", tmp / f"aiperf_c{i}.log", legacy)
                )
                theirs.append(b)
                print(
                    f"run {i}: AIPerf    closed {b['req_s']:.1f} req/s, {b['tok_s']:,.0f} tok/s, wall {b['wall_s']:.2f} s, first request {fmt(b['first_request_s'], 3)} s, other load {b['other_load']:.2f}",
                    file=sys.stderr,
                )
            commands["ours open"], d = quiet(
                lambda i=i: ours(workload, mock, tmp / f"ours_r{i}", tmp / f"ours_r{i}.log", open_args)
            )
            opened.append(d)
            print(
                f"run {i}: llmreplay open   {d['req_s']:.1f} req/s, lag p50 {d['lag_p50_ms']:.3f} ms p99 {d['lag_p99_ms']:.3f} ms, other load {d['other_load']:.2f}",
                file=sys.stderr,
            )
    finally:
        mock.stop()
    table = report(closed, theirs, opened, commands, tmp, venv, legacy)
    print(table)
    if ARGS.write:
        Path(ARGS.write).write_text(table)
    if ARGS.keep:
        print(f"kept {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


ARGS: argparse.Namespace

if __name__ == "__main__":
    main()
