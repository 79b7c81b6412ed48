"""``llmreplay sim --profile P --port N``: the simulated engine served over HTTP (OpenAI API),
with the profile's engine settings, a cluster of engines and seeded fault injection."""

from __future__ import annotations

import argparse
import re
from typing import Any

from ..errors import LLMReplayError
from .options import add_engine_options, engine_overrides, number, share


def cmd_sim(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses
    import socket

    from ..sim.cluster import ClusterConfig
    from ..sim.faults import FaultConfig
    from ..sim.profile import MAX_JITTER, load_profile
    from ..sim.server import SimServer, ready_line, serve
    from ..workloads.prompts import PromptFactory
    from ..workloads.tokenizer import load_tokenizer

    cluster = ClusterConfig(
        engines=args.engines,
        router=args.router or ClusterConfig.router,
        prefill_engines=args.prefill_engines,
        kv_transfer_gbps=ClusterConfig.kv_transfer_gbps if args.kv_transfer_gbps is None else args.kv_transfer_gbps,
        kv_bytes_per_token=args.kv_bytes_per_token,
    )
    faults = FaultConfig(
        error_rate=args.fault_error_rate,
        stall_rate=args.fault_stall_rate,
        stall_s=FaultConfig.stall_s if args.fault_stall_s is None else args.fault_stall_s,
        disconnect_rate=args.fault_disconnect_rate,
        seed=args.seed,
    )
    try:
        profile = load_profile(args.profile)
    except LLMReplayError as exc:
        raise LLMReplayError(f"--profile: {exc}") from None
    refuse_idle_options(args, profile.hardware.data_parallel if profile.hardware is not None else 1)
    overrides: dict[str, Any] = dict(engine_overrides(args))  # integers, for an EngineConfig that has a flag too
    if overrides:
        profile = dataclasses.replace(profile, engine=dataclasses.replace(profile.engine, **overrides))
    if args.timing_jitter is not None:
        if not 0 <= args.timing_jitter <= MAX_JITTER:
            raise LLMReplayError(
                f"--timing-jitter: expected a coefficient of variation from 0 to {MAX_JITTER:g}, got {args.timing_jitter:g}"
            )
        profile = dataclasses.replace(profile, jitter=args.timing_jitter)
    prompts = PromptFactory(load_tokenizer(args.tokenizer), seed=args.seed)
    try:
        server = SimServer(
            profile,
            prompts,
            model=args.model,
            cluster=cluster,
            faults=faults,
            eos_mean_tokens=args.eos_mean_tokens,
            seed=args.seed,
            command_line={**overrides, "jitter": args.timing_jitter},
        )
    except LLMReplayError as exc:  # "field: why" -> "--option: why"
        fields, sep, why = str(exc).partition(": ")
        raise LLMReplayError(
            re.sub(r"[a-z_]+", lambda m: _SIM_OPTIONS.get(m.group(0), m.group(0)), fields) + sep + why
        ) from None

    def ready(url: str) -> None:
        print(ready_line(profile.name, server.model, url), flush=True)

    if not 0 <= args.port <= 65535:
        raise LLMReplayError(f"--port: expected a port from 0 to 65535, got {args.port}")
    try:
        asyncio.run(serve(server, args.host, args.port, ready, args.parent_pid))
    except socket.gaierror as exc:
        raise LLMReplayError(f"--host {args.host}: not an address to listen on ({exc.strerror or exc})") from None
    except OSError as exc:
        raise LLMReplayError(f"--port {args.port}: cannot listen on {args.host}: {exc.strerror or exc}") from None
    return 0


def refuse_idle_options(args: argparse.Namespace, data_parallel: int) -> None:
    """An option given where it changes nothing is an error, not a silent no-op: ``--router``
    with one engine in each pool, or with a data-parallel profile (balanced as vLLM does,
    ``vllm_dp``), ``--kv-transfer-gbps`` / ``--kv-bytes-per-token`` without ``--prefill-engines``
    (no KV moves), ``--fault-stall-s`` without ``--fault-stall-rate``."""
    if args.router not in (None, "vllm_dp") and data_parallel > 1:
        raise LLMReplayError(
            f"--router {args.router}: --profile is one data-parallel server of {data_parallel} engines, "
            "balanced as vLLM balances them (vllm_dp); leave --router out"
        )
    if args.router is not None and data_parallel == 1 and args.engines <= 1 and args.prefill_engines <= 1:
        raise LLMReplayError(
            f"--router {args.router}: one engine serves every request (--engines {args.engines}, "
            f"--prefill-engines {args.prefill_engines}): give --engines N > 1 to route between engines"
        )
    for option, value in (
        ("--kv-transfer-gbps", args.kv_transfer_gbps),
        ("--kv-bytes-per-token", args.kv_bytes_per_token),
    ):
        if value is not None and args.prefill_engines == 0:
            raise LLMReplayError(
                f"{option}: no KV moves without --prefill-engines N (disaggregated serving); give both or neither"
            )
    if args.fault_stall_s is not None and args.fault_stall_rate == 0:
        raise LLMReplayError(
            "--fault-stall-s: no request stalls without --fault-stall-rate P > 0; give both or neither"
        )


_SIM_OPTIONS = {
    "engines": "--engines",
    "router": "--router",
    "prefill_engines": "--prefill-engines",
    "kv_transfer_gbps": "--kv-transfer-gbps",
    "kv_bytes_per_token": "--kv-bytes-per-token",
    "error_rate": "--fault-error-rate",
    "stall_rate": "--fault-stall-rate",
    "stall_s": "--fault-stall-s",
    "disconnect_rate": "--fault-disconnect-rate",
    "eos_mean_tokens": "--eos-mean-tokens",
    "model": "--model",
}


def add_sim_parser(commands: Any) -> None:
    from ..sim.cluster import ROUTERS

    sim = commands.add_parser(
        "sim",
        help="serve the simulated engine over HTTP",
        description="Serve the simulated engine as an OpenAI-compatible HTTP server.",
    )
    sim.add_argument(
        "--profile",
        default="llama-3.1-8b-h100",
        metavar="NAME|FILE",
        help="a bundled profile name or a profile JSON file (default llama-3.1-8b-h100)",
    )
    sim.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sim.add_argument(
        "--port", type=int, default=8000, metavar="N", help="port (default 8000; 0 picks a free one and prints it)"
    )
    sim.add_argument(
        "--parent-pid",
        type=int,
        metavar="PID",
        help="stop when process PID is no longer this one's parent (it died): the pytest plugin passes its own",
    )
    sim.add_argument("--model", metavar="NAME", help="served model name (default: the profile's name)")
    sim.add_argument(
        "--tokenizer", metavar="NAME|PATH", help="tokenizer for prompt text and output text (default: the bundled one)"
    )
    sim.add_argument(
        "--seed", type=int, default=0, help="seed of output tokens, natural lengths and faults (default 0)"
    )
    sim.add_argument(
        "--eos-mean-tokens",
        type=float,
        metavar="N",
        help="simulate EOS: requests without ignore_eos stop after a geometric number of tokens with mean N (default: always max_tokens)",
    )
    group = sim.add_argument_group("engine settings (override the profile's)")
    add_engine_options(group, *(["the profile's"] * 4))
    group.add_argument(
        "--timing-jitter",
        type=float,
        metavar="CV",
        help="coefficient of variation of iteration times, 0 to 1 (default: the profile's timing.jitter, else 0)",
    )
    group = sim.add_argument_group("cluster")
    group.add_argument(
        "--engines",
        type=int,
        default=1,
        metavar="N",
        help="engines (the decode pool with --prefill-engines; default 1)",
    )
    group.add_argument(
        "--router",
        choices=ROUTERS,
        help="how requests are spread over engines (default round_robin; needs --engines N > 1 or --prefill-engines N > 1)",
    )
    group.add_argument(
        "--prefill-engines",
        type=int,
        default=0,
        metavar="N",
        help="disaggregated serving: N prefill engines in front of the --engines decode pool",
    )
    group.add_argument(
        "--kv-transfer-gbps",
        type=float,
        metavar="GBPS",
        help="prefill-to-decode KV link bandwidth in GB/s (default 50; needs --prefill-engines)",
    )
    group.add_argument(
        "--kv-bytes-per-token",
        type=float,
        metavar="B",
        help="KV bytes per token (default: from the profile's model; needs --prefill-engines)",
    )
    group = sim.add_argument_group("fault injection (seeded)")
    group.add_argument(
        "--fault-error-rate",
        type=share,
        default=0.0,
        metavar="P",
        help="share of requests answered HTTP 500 before any token (default 0)",
    )
    group.add_argument(
        "--fault-stall-rate",
        type=share,
        default=0.0,
        metavar="P",
        help="share of requests whose response pauses --fault-stall-s after a random token but the last (default 0)",
    )
    group.add_argument(
        "--fault-stall-s",
        type=number(False),
        metavar="S",
        help="length of a stall in seconds (default 10; needs --fault-stall-rate)",
    )
    group.add_argument(
        "--fault-disconnect-rate",
        type=share,
        default=0.0,
        metavar="P",
        help="share of requests whose connection is closed after a random token but the last (default 0)",
    )
    sim.set_defaults(run=cmd_sim)
