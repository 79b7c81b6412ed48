"""What scraping the server's /metrics during a run costs the client: CPU per request.

One simulated server (``llmreplay sim``, a subprocess on a loopback port, the bundled
llama-3.1-8b-h100 profile) serves the whole session. Each round replays the same workload
(REQUESTS single-turn requests, 128 input and 64 output tokens, closed loop at concurrency 16)
once per scrape interval (off, 1 s: the default, 0.1 s), in a rotating order, and measures the
client's CPU over the replay with ``time.process_time()`` (this process, every thread: the
replay's event loop and the scraper's thread). Figures: median over ROUNDS of CPU ms per request,
the median over rounds of its difference from the same round's run without scraping (the runs of
a round are seconds apart, so a shared machine's slow spells cancel better than in the medians
alone), the run's wall time, and how many scrapes the run stored. Then the CPU of one scrape
alone (request and parse, SCRAPES in a row against the idle server, median of their means over
ROUNDS), the cost that the per-request figures hide in the run-to-run spread.

    .venv/bin/python bench/scrape_cost.py [--rounds 5] [--requests 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_llmreplay.replayer.driver import ReplaySettings, replay  # noqa: E402
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint  # noqa: E402
from pytest_llmreplay.replayer.server_metrics import Scraper  # noqa: E402
from pytest_llmreplay.target import DEFAULT_PROFILE, start_sim_server  # noqa: E402
from pytest_llmreplay.workloads.prompts import PromptFactory  # noqa: E402
from pytest_llmreplay.workloads.tokenizer import load_tokenizer  # noqa: E402
from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload  # noqa: E402

INTERVALS = (0.0, 1.0, 0.1)
SCRAPES = 200


def scrape_cpu(url: str) -> float:
    """CPU seconds of one scrape (GET /metrics and parse), the mean of :data:`SCRAPES` in a row."""
    import httpx

    scraper = Scraper(url, 1.0)
    with httpx.Client(verify=False) as client:
        cpu = time.process_time()
        for _ in range(SCRAPES):
            scraper._scrape(client)
        return (time.process_time() - cpu) / SCRAPES


def one_run(url: str, prompts: PromptFactory, workload: Workload, interval: float) -> tuple[float, float, int]:
    """(client CPU s, wall s, scrapes stored) of one replay at ``interval`` (0: not scraped)."""
    endpoint = HTTPEndpoint(url, api="completions", metrics_interval_s=interval, extra_body={"ignore_eos": True})
    settings = ReplaySettings(concurrency=16, check_idle=False)
    cpu, wall = time.process_time(), time.perf_counter()
    run = replay(workload, endpoint, prompts, settings)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert all(r.status == "ok" for r in run.records), [r.error for r in run.records if r.error][:3]
    return cpu, wall, len(run.server_metrics.get("running", ()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    prompts = PromptFactory(load_tokenizer(None))
    workload = Workload(
        tuple(Session(f"r{i}", 0.0, (Turn(128, 64, Synthetic()),)) for i in range(args.requests)), "bench"
    )
    server = start_sim_server(DEFAULT_PROFILE, None)
    assert server.url is not None
    figures: dict[float, list[tuple[float, float, int]]] = {interval: [] for interval in INTERVALS}
    try:
        one_run(server.url, prompts, workload, 0.0)  # warm-up: imports, the server's first requests
        for round_index in range(args.rounds):
            order = INTERVALS[round_index % len(INTERVALS) :] + INTERVALS[: round_index % len(INTERVALS)]
            for interval in order:
                figures[interval].append(one_run(server.url, prompts, workload, interval))
        per_scrape = statistics.median(scrape_cpu(server.url) for _ in range(args.rounds))
    finally:
        server.stop()
    print(f"{args.requests} requests per run, concurrency 16, median of {args.rounds} runs each")
    print(
        "| scrape interval | client CPU per request | minus the round's unscraped run | wall time of the run | scrapes stored |"
    )
    print("|---|---|---|---|---|")
    for interval, runs in figures.items():
        cpu = statistics.median(c for c, _, _ in runs) / args.requests * 1e3
        paired = statistics.median(c - off for (c, _, _), (off, _, _) in zip(runs, figures[0.0], strict=True))
        wall = statistics.median(w for _, w, _ in runs)
        scrapes = statistics.median(s for _, _, s in runs)
        name = "off (0)" if interval == 0 else f"{interval:g} s"
        print(f"| {name} | {cpu:.3f} ms | {paired / args.requests * 1e3:+.3f} ms | {wall:.2f} s | {scrapes:g} |")
    print(f"one scrape alone (GET /metrics and parse): {per_scrape * 1e3:.3f} ms of CPU")
    print(
        "every run's CPU ms/request:",
        {k: [round(c / args.requests * 1e3, 3) for c, _, _ in v] for k, v in figures.items()},
    )


if __name__ == "__main__":
    main()
