"""A digest of everything a seeded offline replay produces, to show that a speed change left the
results alone: every record's fields (``repr`` of each, so floats count bit for bit), the
engines' counters, the run's duration and the summary, hashed (SHA-256) per scenario.

Scenarios: ``sim_speed.py``'s (``synthetic``: 10,000 requests of 1,000 in / 100 out at
concurrency 100; ``synthetic256``: the same at concurrency 256; ``trace``: the Mooncake
conversation trace on 8 engines, block size 512), with the bundled ``dynamo-mocker-polynomial``
profile. Run it before and after a change and compare the lines:

    .venv/bin/python bench/sim_digest.py [--scenarios synthetic synthetic256 trace]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from sim_speed import scenario_inputs  # noqa: E402

from pytest_llmreplay import PromptFactory, Result, VirtualClock, load_tokenizer  # noqa: E402
from pytest_llmreplay.replayer.driver import replay  # noqa: E402
from pytest_llmreplay.sim.endpoint import SimEndpoint  # noqa: E402
from pytest_llmreplay.sim.profile import load_profile  # noqa: E402

SCENARIOS = ("synthetic", "synthetic256", "trace")


def digest(scenario: str) -> str:
    """The SHA-256 of one seeded replay of ``scenario`` (module docstring)."""
    prompts = PromptFactory(load_tokenizer(None))
    concurrency = 256 if scenario == "synthetic256" else 100
    profile, workload, cluster, settings = scenario_inputs(
        "synthetic" if scenario == "synthetic256" else scenario, load_profile("dynamo-mocker-polynomial"), concurrency
    )
    endpoint = SimEndpoint(profile, prompts, cluster=cluster)
    run = replay(workload, endpoint, prompts, settings, clock=VirtualClock())
    assert endpoint.cluster is not None
    hashed = hashlib.sha256()
    for record in run.records:
        hashed.update(repr(dataclasses.astuple(record)).encode())
    hashed.update(repr(sorted(endpoint.cluster.stats().items())).encode())
    hashed.update(repr((run.duration_s, run.warnings, Result(run).summary)).encode())
    return f"{hashed.hexdigest()} ({len(run.records)} records)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    for scenario in parser.parse_args().scenarios:
        print(f"{scenario}: {digest(scenario)}", flush=True)


if __name__ == "__main__":
    main()
