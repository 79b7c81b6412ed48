"""Which measured vLLM run ``bench/sim_fidelity.py`` and ``bench/sim_band.py`` compare with: the visible
RTX PRO 6000 run in ../shared/data/llmservingsim (:data:`VISIBLE`), or another run in
LLMServingSim's layout (``--run DIR``: :func:`public_run`), replayed on a profile given that run's
own engine settings (:func:`with_run_engine`)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_llmreplay.sim.profile import load_profile

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "llmservingsim"
TRACE = DATA / "sharegpt-llama-3.1-8b-300-sps10.jsonl"
BENCH = DATA / "bench"
PREFIX = "RTXPRO6000_Llama-3.1-8B"
PROFILE = "llama-3.1-8b-rtx-pro-6000"


@dataclass(frozen=True)
class MeasuredRun:
    """The files of one measured vLLM run in LLMServingSim's layout: per-request timestamps
    (``requests``), engine arguments and resolved config (``meta``), the once-a-second
    ``timeseries``, that project's own ``summary`` (optional), and the ``trace`` replayed."""

    requests: Path
    meta: Path
    timeseries: Path
    summary: Path | None
    trace: Path


VISIBLE = MeasuredRun(
    requests=BENCH / f"{PREFIX}_vllm_requests.jsonl",
    meta=BENCH / f"{PREFIX}_vllm_meta.json",
    timeseries=BENCH / f"{PREFIX}_vllm_timeseries.csv",
    summary=BENCH / f"{PREFIX}_validation_summary.txt",
    trace=TRACE,
)


def public_run(folder: Path, scratch: Path, trace: Path | None = None) -> MeasuredRun:
    """A run copied from LLMServingSim's ``bench/examples/<GPU>/<model>/`` (``vllm/requests.jsonl``,
    ``vllm/meta.json``, ``vllm/timeseries.csv``, ``validation/summary.txt``; or the same names in one
    flat folder). Its replayed trace is written to ``scratch`` from the run's own requests, in
    LLMServingSim's flat format: each request's measured ``input_toks`` and ``output_toks`` at its
    ``arrival_time`` (relative to the first). Without token ids the simulator names prompts by keys,
    so no two share a prefix, where the visible run's trace, with its ids, hits 7.6% of its prompt
    tokens in the simulated cache: replayed so (a copy of the visible run's own files), its TTFT
    p50 error goes from +15.4% to +18.3% and its TPOT mean error from +7.8% to +9.8%, a bias
    towards too slow that a run replayed from its lengths alone carries too (bench/README.md).
    ``trace``: the run's own workload file instead (its meta's ``dataset_path``, with token ids),
    when it is at hand: the per-request check then requires its lengths to be the run's."""

    def find(*names: str) -> Path | None:
        return next((folder / name for name in names if (folder / name).is_file()), None)

    requests, meta = find("vllm/requests.jsonl", "requests.jsonl"), find("vllm/meta.json", "meta.json")
    timeseries = find("vllm/timeseries.csv", "timeseries.csv")
    if requests is None or meta is None or timeseries is None:
        sys.exit(
            f"{folder}: expected vllm/requests.jsonl, vllm/meta.json and vllm/timeseries.csv (or the same names in it)"
        )
    summary = find("validation/summary.txt", "summary.txt")
    if trace is not None:
        return MeasuredRun(requests=requests, meta=meta, timeseries=timeseries, summary=summary, trace=trace)
    rows = [json.loads(line) for line in requests.read_text().splitlines() if line.strip()]
    first = min(row["arrival_time"] for row in rows)
    trace = scratch / f"{folder.name}-trace.jsonl"
    trace.write_text(
        "".join(
            json.dumps(
                {
                    "input_toks": row["input_toks"],
                    "output_toks": row["output_toks"],
                    "arrival_time_ns": round((row["arrival_time"] - first) * 1e9),
                }
            )
            + "\n"
            for row in rows
        )
    )
    return MeasuredRun(
        requests=requests,
        meta=meta,
        timeseries=timeseries,
        summary=summary,
        trace=trace,
    )


def with_run_engine(profile_name: str, meta: dict[str, Any], scratch: Path) -> Path:
    """A copy of the profile (bundled name or file) with the run's own engine settings from its
    meta (``engine_kwargs``: max_num_seqs, max_num_batched_tokens; ``kv_cache``: block_size and
    num_gpu_blocks, the latter over all data-parallel engines, so divided by their number),
    written to ``scratch``: the profile's engine defaults are vLLM's, a run's are its own. A run
    whose meta gives no num_gpu_blocks keeps the derived cache, without the profile's CUDA graph
    reserve where its ``vllm_version`` is before 0.21 (``graph_reserve_applies``)."""
    profile = load_profile(profile_name)
    source = Path(profile_name) if Path(profile_name).is_file() else Path(str(profile.path))
    data = json.loads(source.read_text())
    kwargs, cache = meta.get("engine_kwargs", {}), meta.get("kv_cache", {})
    engine = data.setdefault("engine", {})
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if kwargs.get(key):
            engine[key] = kwargs[key]
    if cache.get("block_size"):
        engine["block_size"] = cache["block_size"]
    if cache.get("num_gpu_blocks"):
        engine["num_gpu_blocks"] = cache["num_gpu_blocks"] // max(1, int(kwargs.get("data_parallel_size") or 1))
        for derived in ("gpu_memory_utilization", "activation_reserve_gib"):
            engine.pop(derived, None)
        data.get("uncertainty", {}).pop("engine.activation_reserve_gib", None)  # the run's cache is known
    elif not graph_reserve_applies(meta.get("vllm_version")):
        engine.pop("cudagraph_reserve_gib", None)
    path = scratch / f"{profile.name}-run-engine.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def graph_reserve_applies(version: str | None) -> bool:
    """Whether vLLM ``version`` subtracts its CUDA graph estimate when it sizes the KV cache:
    by default since 0.21.0 (vllm/envs.py, ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``: "Enabled
    by default as of v0.21.0"). An unknown version is taken as a current one."""
    if not version:
        return True
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (0, 21)


def add_run_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run",
        metavar="DIR",
        type=Path,
        help="another measured run, a copy of LLMServingSim's bench/examples/<GPU>/<model>/ folder "
        "(public_run); its own requests are replayed with its engine settings (default: the visible run)",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        type=Path,
        help="with --run: the run's own workload file (its meta's dataset_path, token ids and all) "
        "instead of its requests' lengths",
    )


def chosen_run(folder: Path | None, profile: str, scratch: Path, trace: Path | None = None) -> tuple[MeasuredRun, str]:
    """The run to compare with (``--run``, else the visible one) and the profile to replay it on:
    for another run, ``profile`` with the run's engine settings (:func:`with_run_engine`)."""
    if folder is None:
        return VISIBLE, profile
    run = public_run(folder, scratch, trace)
    return run, str(with_run_engine(profile, json.loads(run.meta.read_text()), scratch))
