"""vLLM's benchmark result: the JSON ``vllm bench serve --save-result --save-detailed`` writes.

One JSON document (vLLM writes it on one line); the fields read::

    {"num_prompts": 200, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 16, ...,
     "input_lens": [1024, ...], "output_lens": [128, ...], "ttfts": [0.071, ...],
     "itls": [[0.012, ...], ...], "errors": ["", ...]}

``input_lens`` and ``output_lens`` are per request, in the order the benchmark sent them, and of
the same length; ``errors`` (optional) holds ``""`` for each request that completed. Each
completed request becomes a one-turn session (``request<N>``, N its index in the file) of
``input_lens[N]`` synthetic prompt tokens generating ``output_lens[N]`` tokens, the length it
generated (with ``--ignore-eos``, the one asked for). A request that failed (an error, or no
output token) is left out, with a warning: the length it was to generate is not recorded.

The file keeps no send times, so the workload is untimed; its warning names the load to replay it
at, from the run's own settings: ``--concurrency C`` for ``max_concurrency`` C, every request at
once (``--concurrency`` = the requests) for ``request_rate`` ``"inf"`` without one, and
``--rate R`` for a finite rate (with ``--concurrency C`` too when it had a limit; Poisson when
``burstiness`` is 1; the run's own draws are not recorded, so arrivals differ, not their rate). A
run whose rate ramped up (``ramp_up_strategy``) is refused: no one load replays it. The run's per-request times (``ttfts``, ``itls``)
are what ``calibrate --from-run`` fits (:mod:`~pytest_llmreplay.sim.measured_run`); request N of the
run pairs with session N of this workload.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...errors import WorkloadError
from ..workload import Session, Synthetic, Turn, Workload
from ._fields import Fields, read_json_document, try_json, type_name

NAME = "vllm-bench"
LENGTHS = ("input_lens", "output_lens")


def detect(first_line: str) -> bool:
    """A JSON object with ``input_lens``, ``output_lens`` and ``ttfts`` (vLLM writes the whole
    result on one line)."""
    first = try_json(first_line)
    return isinstance(first, dict) and {*LENGTHS, "ttfts"} <= first.keys()


def read_result(path: Path) -> Fields:
    """The result document of ``path``, as checked fields; one :class:`WorkloadError` naming the
    file when it is not a JSON object."""
    document = read_json_document(path)  # a key given twice refused, as in every JSON format (docs/workloads.md)
    if not isinstance(document, dict):
        raise WorkloadError(f"expected a JSON object (vllm bench serve's result), got {type_name(document)}", path=path)
    return Fields(document, path, None)


def completed(result: Fields) -> list[int]:
    """The indices of the requests that completed: no error, at least one output token. The run
    reader keeps the same ones, so that request N pairs with session N."""
    inputs = result.int_list("input_lens", minimum=0)
    outputs = result.int_list("output_lens", minimum=0)
    if len(inputs) != len(outputs):
        raise result.error("output_lens", f"has {len(outputs)} entries, input_lens {len(inputs)}; they must be equal")
    errors = result.obj.get("errors")
    if errors is not None and (
        not isinstance(errors, list) or len(errors) != len(inputs) or not all(isinstance(e, str) for e in errors)
    ):
        raise result.error("errors", f"must be a list of {len(inputs)} strings, one per request")
    return [
        index
        for index in range(len(inputs))
        if outputs[index] >= 1 and inputs[index] >= 1 and not (errors and errors[index])
    ]


def load(path: str | Path) -> Workload:
    """Load a vLLM benchmark result (module doc)."""
    path = Path(path)
    result = read_result(path)
    kept = completed(result)
    inputs, outputs = result.obj["input_lens"], result.obj["output_lens"]
    sessions = tuple(
        Session(f"request{index}", 0.0, (Turn(inputs[index], outputs[index], Synthetic()),)) for index in kept
    )
    warnings = [f"{path}: {replay_hint(result, len(inputs))}"]
    failed = len(inputs) - len(kept)
    if failed:
        warnings.append(
            f"{path}: {failed} of {len(inputs)} requests failed in the run and are left out "
            "(the length each was to generate is not recorded)"
        )
    return Workload(sessions, format=NAME, source=str(path), timed=False, warnings=tuple(warnings))


def bench_load(result: Fields, requests: int) -> dict[str, Any]:
    """The replay settings that send ``requests`` requests as the run sent its own (module doc):
    ``{"rate": R}`` (Poisson) for a finite ``request_rate`` R, with ``"concurrency": C`` too for a
    ``max_concurrency`` C (vLLM applies both); ``{"concurrency": C}`` for ``request_rate`` ``"inf"``
    with a limit C, else C = ``requests`` (all at once). A field of another type, or a ramp-up
    (``ramp_up_strategy``: a rate that changes, not recorded request by request), is one error
    naming it."""
    obj = result.obj
    if obj.get("ramp_up_strategy") is not None:
        raise result.error("ramp_up_strategy", "a run whose rate ramps up cannot be replayed at one load")
    rate, limit = obj.get("request_rate", "inf"), obj.get("max_concurrency")
    if rate != "inf" and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < math.inf):
        raise result.error("request_rate", f'must be "inf" or a number of requests/s > 0, got {rate!r}')
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise result.error("max_concurrency", f"must be null or an integer >= 1, got {limit!r}")
    if rate != "inf":
        return {"rate": float(rate), **({"concurrency": limit} if limit is not None else {})}
    return {"concurrency": limit if limit is not None else max(requests, 1)}


def replay_hint(result: Fields, requests: int) -> str:
    """How the run sent its requests, as the replay settings that send them so (module doc)."""
    load = bench_load(result, requests)
    if "rate" in load:
        burstiness = result.obj.get("burstiness", 1.0)
        shape = "Poisson" if burstiness == 1.0 else f"gamma of burstiness {burstiness}; the replay's is Poisson"
        cap = f", at most {load['concurrency']} in flight" if "concurrency" in load else ""
        cap_option = f" and concurrency {load['concurrency']}" if "concurrency" in load else ""
        return (
            f"the run sent {load['rate']:g} requests/s ({shape}{cap}); its send times are not recorded: replay it with "
            f"rate {load['rate']:g}{cap_option} (arrivals drawn again, at the same rate)"
        )
    if load["concurrency"] == result.obj.get("max_concurrency"):
        return f"the run kept at most {load['concurrency']} requests in flight: replay it with concurrency {load['concurrency']}"
    return f"the run sent all {requests} requests at once: replay it with concurrency {requests}"
