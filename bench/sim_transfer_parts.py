"""Each request's time split into parts, as vLLM's own metrics give them and as the simulator predicts them.

Measured (:func:`measured_parts`), per run, from what vLLM's ``/metrics`` histograms gained over
the run (``_sum`` / ``_count``, means over its requests; vllm/v1/metrics/stats.py defines them):

- ``queue``: ``request_queue_time`` = scheduled_ts - queued_ts, in the engine core;
- ``prefill``: ``request_prefill_time`` = first_token_ts - scheduled_ts, in the engine core;
- ``front end``: the client's TTFT - queue - prefill: everything before the engine core queues the
  request and after its first token leaves it (HTTP, the API server's request set-up, the hop to
  the engine core over ZMQ and back, the output processor's detokenizing, the stream to the
  client), and a request's wait for the engine core's step in progress before it is queued;
- ``of which HTTP``: the client's TTFT - vLLM's ``time_to_first_token`` (vLLM times that from the
  API server's ``arrival_time``, set as the request enters the engine client, to the output
  processor's handling of the first token): the part outside vLLM's own clock;
- ``TPOT``: the client's TPOT mean beside vLLM's ``request_time_per_output_token`` (decode time
  / (tokens - 1), in the engine core);
- ``steps``: ``iteration_tokens_total``'s count, the engine core's steps over the run.

Simulated (:func:`simulated_parts`): the front end is the profile's ``frontend_ms``; queue is a
request's admission - its arrival at the engine (after the front end); prefill = TTFT - front
end - queue; TPOT as the client sees it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pytest_llmreplay import ReplaySettings
from pytest_llmreplay.replayer.clock import VirtualClock
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.sim.endpoint import SimEndpoint
from pytest_llmreplay.sim.profile import Profile

PARTS = ("front end", "queue", "prefill", "TPOT")


def server_mean(server: dict[str, float], name: str) -> float:
    """The mean of vLLM histogram ``name`` over a run (its ``_sum`` / ``_count`` gained)."""
    count = server[f"vllm:{name}_count"]
    return server[f"vllm:{name}_sum"] / count if count else math.nan


def measured_parts(run: dict[str, Any]) -> dict[str, float]:
    """A stored run's parts in ms (module doc): front end, of which HTTP, queue, prefill, TPOT
    (client and vLLM's), steps."""
    server = run["server"]
    ttft = float(np.mean(run["ttft"]))
    queue = server_mean(server, "request_queue_time_seconds")
    prefill = server_mean(server, "request_prefill_time_seconds")
    return {
        "front end": (ttft - queue - prefill) * 1e3,
        "of which HTTP": (ttft - server_mean(server, "time_to_first_token_seconds")) * 1e3,
        "queue": queue * 1e3,
        "prefill": prefill * 1e3,
        "TPOT": float(np.nanmean(np.array(run["tpot"], dtype=float))) * 1e3,
        "TPOT (vLLM)": server_mean(server, "request_time_per_output_token_seconds") * 1e3,
        "steps": server["vllm:iteration_tokens_total_count"],
    }


def simulated_parts(profile: Profile, workload: Any, prompts: Any) -> dict[str, float]:
    """The parts of an offline replay of ``workload`` on ``profile``, in ms (module doc)."""
    factory = prompts()
    run = replay(workload, SimEndpoint(profile, factory), factory, ReplaySettings(), clock=VirtualClock())
    ok = [r for r in run.records if r.status == "ok"]
    front_end = profile.frontend_ms / 1e3
    queue = np.array([r.queue_s for r in ok])
    ttft = np.array([r.first_token_s - r.sent_s for r in ok])
    tpot = [(r.end_s - r.first_token_s) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {
        "front end": front_end * 1e3,
        "queue": float(queue.mean()) * 1e3,
        "prefill": float((ttft - front_end - queue).mean()) * 1e3,
        "TPOT": float(np.mean(tpot)) * 1e3,
    }


def parts_rows(label: str, measured: list[dict[str, float]], simulated: dict[str, float]) -> list[str]:
    """Table rows: each part measured (run 1 / run 2) and simulated, with the error against run 1."""
    rows = []
    for part in PARTS:
        real = [m[part] for m in measured]
        error = (simulated[part] - real[0]) / real[0] if real[0] else math.nan
        rows.append(
            f"| {label} | {part} | {' / '.join(f'{v:.2f}' for v in real)} | {simulated[part]:.2f} | {error:+.1%} |"
        )
    return rows


PARTS_HEADER = [
    "| run | part (mean, ms) | vLLM run 1 / run 2 | simulated | error vs run 1 |",
    "|---|---|---:|---:|---:|",
]
