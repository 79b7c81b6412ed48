"""Client CPU per request: what scraping the server's /metrics costs (``--compare scrape``, the
default), and what each API's parser costs (``--compare apis``).

One simulated server (``llmreplay sim``, a subprocess on a loopback port, the bundled
llama-3.1-8b-h100 profile) serves the whole session. Each round replays the same workload
(REQUESTS single-turn requests, 128 input and 64 output tokens, closed loop at concurrency 16)
once per variant, in a rotating order, and measures the client's CPU over the replay with
``time.process_time()`` (this process, every thread: the replay's event loop and the scraper's
thread). The variants: ``scrape``, the completions API with /metrics scraped at each interval
(off, 1 s: the default, 0.1 s); ``apis``, each of the four APIs (chat, completions, responses,
messages), not scraped. Figures: median over ROUNDS of CPU ms per request, the median over rounds
of its difference from the same round's first variant (unscraped; chat) (the runs of a round are
seconds apart, so a shared machine's slow spells cancel better than in the medians alone), the
run's wall time, and how many scrapes the run stored (``scrape``) or the run's TTFT and TPOT
medians (``apis``: the same server timing, so they should agree within their noise). Then, for
``scrape``, the CPU of one scrape alone (request and parse, SCRAPES in a row against the idle
server, median of their means over ROUNDS), the cost that the per-request figures hide in the
run-to-run spread.

    .venv/bin/python bench/scrape_cost.py [--compare scrape|apis] [--rounds 5] [--requests 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_llmreplay.metrics.result import Result  # noqa: E402
from pytest_llmreplay.replayer.apis import APIS  # noqa: E402
from pytest_llmreplay.replayer.driver import replay  # noqa: E402
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint  # noqa: E402
from pytest_llmreplay.replayer.plan import ReplaySettings
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


def one_run(url: str, prompts: PromptFactory, workload: Workload, interval: float, api: str) -> dict[str, float]:
    """Client CPU s, wall s, scrapes stored, TTFT and TPOT medians of one replay over ``api``
    with /metrics scraped every ``interval`` (0: not scraped)."""
    endpoint = HTTPEndpoint(url, api=api, metrics_interval_s=interval, extra_body={"ignore_eos": True})
    settings = ReplaySettings(concurrency=16, check_idle=False)
    cpu, wall = time.process_time(), time.perf_counter()
    run = replay(workload, endpoint, prompts, settings)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert all(r.status == "ok" for r in run.records), [r.error for r in run.records if r.error][:3]
    summary = Result(run).summary
    return {
        "cpu": cpu,
        "wall": wall,
        "scrapes": len(run.server_metrics.get("running", ())),
        "ttft": summary["ttft"]["p50"],
        "tpot": summary["tpot"]["p50"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", choices=("scrape", "apis"), default="scrape")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    prompts = PromptFactory(load_tokenizer(None))
    workload = Workload(
        tuple(Session(f"r{i}", 0.0, (Turn(128, 64, Synthetic()),)) for i in range(args.requests)), "bench"
    )
    # (name, scrape interval, api) per variant; the first is the one the others are paired with
    variants = (
        [(f"{i:g} s" if i else "off (0)", i, "completions") for i in INTERVALS]
        if args.compare == "scrape"
        else [(api, 0.0, api) for api in APIS]
    )
    server = start_sim_server(DEFAULT_PROFILE, None)
    assert server.url is not None
    figures: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    try:
        one_run(server.url, prompts, workload, 0.0, variants[0][2])  # warm-up: imports, the server's first requests
        for round_index in range(args.rounds):
            shift = round_index % len(variants)
            for name, interval, api in variants[shift:] + variants[:shift]:
                figures[name].append(one_run(server.url, prompts, workload, interval, api))
        per_scrape = (
            statistics.median(scrape_cpu(server.url) for _ in range(args.rounds)) if args.compare == "scrape" else 0.0
        )
    finally:
        server.stop()
    first = figures[variants[0][0]]
    print(f"{args.requests} requests per run, concurrency 16, median of {args.rounds} runs each")
    last = "scrapes stored" if args.compare == "scrape" else "TTFT p50 | TPOT p50"
    print(
        f"| {args.compare} | client CPU per request | minus the round's {variants[0][0]} run | wall time of the run | {last} |"
    )
    print("|---|---|---|---|---|" + ("---|" if args.compare == "apis" else ""))
    for name, runs in figures.items():
        cpu = statistics.median(r["cpu"] for r in runs) / args.requests * 1e3
        paired = statistics.median(r["cpu"] - p["cpu"] for r, p in zip(runs, first, strict=True))
        wall = statistics.median(r["wall"] for r in runs)
        if args.compare == "scrape":
            tail = f"{statistics.median(r['scrapes'] for r in runs):g}"
        else:
            ttft, tpot = (statistics.median(r[k] for r in runs) * 1e3 for k in ("ttft", "tpot"))
            tail = f"{ttft:.2f} ms | {tpot:.3f} ms"
        print(f"| {name} | {cpu:.3f} ms | {paired / args.requests * 1e3:+.3f} ms | {wall:.2f} s | {tail} |")
    if args.compare == "scrape":
        print(f"one scrape alone (GET /metrics and parse): {per_scrape * 1e3:.3f} ms of CPU")
    print(
        "every run's CPU ms/request:",
        {k: [round(r["cpu"] / args.requests * 1e3, 3) for r in v] for k, v in figures.items()},
    )


if __name__ == "__main__":
    main()
