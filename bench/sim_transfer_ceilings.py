"""Does the CPU calibration carry across widths when the roofline's ceilings are measured at a step's own shapes?

``bench/sim_transfer.py``'s profiles take ``peak_flops`` from one 512 x 512 x 1536 matmul and
``memory_bandwidth`` from a 256 MiB copy, and its calibrations fit mfu and mbu with the host
terms, which trade against each other. Here the ceilings are given (``--peak``, ``--bandwidth``:
what ``bench/cpu_linears.py`` measures, the bf16 linears at a prefill's M and at a decode step's
M = 8) with mfu = mbu = 1, and only the host terms are fitted (per step, per layer, per request
admitted; the front end from vLLM's own split, as the best calibration of sim_transfer does), on
run 1 of the light and chat runs of the shallow and deep models (width 512) of a stored
``sim_transfer.py --out`` folder. Every light and chat run is then predicted; small (4 layers,
width 512) is a depth no fit saw, tiny (width 64) a width::

    .venv/bin/python bench/sim_transfer_ceilings.py --from bench/results/sim_transfer_2026-11-27-deep-2-bf16 --peak 5.0e11 --bandwidth 2.29e10

Works on a copy of the folder (a temp folder); prints the fitted values and, per model and
workload, the TTFT p50 and TPOT mean errors of each measured run and how many are within 15%.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import sim_transfer
from sim_transfer_calibrations import SHALLOW_DEEP

from pytest_llmreplay import PromptFactory, load_tokenizer
from pytest_llmreplay.sim.calibrate_run import errors, simulate
from pytest_llmreplay.sim.profile import parse_profile
from pytest_llmreplay.workloads.formats.synthetic import generate

HOST_TERMS = ("overhead_ms", "layer_overhead_ms", "admission_overhead_ms")
MODELS = ("small", "shallow", "tiny", "deep")
LIMIT = 0.15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, required=True, help="a sim_transfer.py --out folder")
    parser.add_argument("--peak", type=float, required=True, help="peak_flops, FLOP/s (mfu 1)")
    parser.add_argument("--bandwidth", type=float, required=True, help="memory_bandwidth, B/s (mbu 1)")
    parser.add_argument("--max-evals", type=int, default=40, help="offline replays the fit may spend")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="sim-transfer-ceilings-")) / "runs"
    shutil.copytree(args.source, out)
    profiles = {}
    for model in MODELS:
        data = json.loads((out / f"{model}-base.json").read_text())
        data["hardware"].update(peak_flops=args.peak, memory_bandwidth=args.bandwidth)
        data["timing"].update(mfu=1.0, mbu=1.0)
        profiles[model] = data
        (out / f"{model}-machine.json").write_text(json.dumps(data, indent=2))
    tokenizer = load_tokenizer(None)

    def prompts() -> PromptFactory:
        return PromptFactory(tokenizer, seed=0)

    workloads = {"light": sim_transfer.light_workload(), "chat": generate(sim_transfer.WORKLOADS["chat"])}
    runs = {key: value for key, value in sim_transfer.read_runs(out).items() if key[1] in workloads}
    calibration = ("ceilings measured, host terms fitted", SHALLOW_DEEP, HOST_TERMS, True)
    fitted = sim_transfer.fitted_profile(out, calibration, runs, workloads, prompts, args.max_evals)
    print("| model workload | TTFT p50, runs 1.. | TPOT mean, runs 1.. | within 15%: TTFT p50, TPOT mean |")
    print("|---|---|---|---|")
    for (model, name), measured in runs.items():
        own = parse_profile({**profiles[model], "timing": fitted["timing"]})  # its front end too
        found = [errors(simulate(own, workloads[name], prompts), run) for run in measured]
        ttft = [f[("ttft", "p50")] for f in found]
        tpot = [f[("tpot", "mean")] for f in found]
        within = (sum(abs(e) <= LIMIT for e in ttft), sum(abs(e) <= LIMIT for e in tpot))
        print(
            f"| {model} {name} | {', '.join(f'{e:+.0%}' for e in ttft)} | {', '.join(f'{e:+.0%}' for e in tpot)} | "
            f"{within[0]} of {len(ttft)}, {within[1]} of {len(tpot)} |"
        )


if __name__ == "__main__":
    main()
