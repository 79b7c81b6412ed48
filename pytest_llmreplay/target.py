"""Where a test's replays go, and what identifies it: the endpoint a pytest session measures.

Three kinds, chosen by the plugin's options:

- ``offline``: the simulator in process, on the virtual clock (``--llm-offline``): no sockets,
  deterministic, an hour of trace in seconds;
- ``sim-server``: ``llmreplay sim`` started as a subprocess on a free loopback port (the default
  when no endpoint is given): the HTTP path, streaming and wall-clock timing of a live run;
- ``live``: a server at ``--llm-endpoint`` (started by ``--llm-server-cmd`` or already running).

:meth:`Target.endpoint` makes a fresh endpoint for each replay; :attr:`Target.fingerprint` is
what baselines are keyed on (kind, model, server version, sim profile, hardware), read once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import LLMReplayError
from .gate.stored_record import NOT_RESET
from .replayer.clock import Clock, VirtualClock, WallClock
from .replayer.endpoint_types import SIM_ENGINE
from .replayer.endpoints import HTTPEndpoint, describe_error
from .replayer.server_process import ServerProcess

KINDS = ("offline", "sim-server", "live")
DEFAULT_PROFILE = "llama-3.1-8b-h100"
CACHE_RESETS = ("/reset_prefix_cache", "/flush_cache")  # vLLM (dev mode), SGLang
BUSY_WAIT_S = 30.0  # how long a cache reset refused while requests run is asked again
SLOT_ERASE = "POST /slots/{id}?action=erase"  # llama.cpp (--slot-save-path), once per slot of GET /slots


def cache_reset_env(environ: Mapping[str, str], resets: bool = True) -> dict[str, str]:
    """What a server the plugin starts (``--llm-server-cmd``, a declared server) adds to its
    environment so that :meth:`Target.reset_cache` can empty its prefix cache between repeats:
    vLLM's ``VLLM_SERVER_DEV_MODE=1`` (without it vLLM has no ``POST /reset_prefix_cache``; the
    other servers ignore it), unless ``environ`` already sets it either way. Nothing when the
    session resets no cache (``resets`` False: ``--llm-cache-reset=off``): dev mode also opens
    vLLM's other development endpoints, which nothing then needs."""
    return {} if not resets or "VLLM_SERVER_DEV_MODE" in environ else {"VLLM_SERVER_DEV_MODE": "1"}


def no_cache_reset_note(url: str, run: str = "repeat") -> str:
    """What is said once when a server offers no cache reset between runs: ``run`` names them
    (``repeat``: the session summary; ``point``: a capacity search's progress)."""
    return (
        f"{url} answers neither POST /reset_prefix_cache (vLLM: VLLM_SERVER_DEV_MODE=1), POST /flush_cache (SGLang) "
        f"nor {SLOT_ERASE} (llama.cpp: --slot-save-path): each {run} may measure a prefix cache the previous one warmed"
    )


@dataclass
class Target:
    """An endpoint to replay against. ``profile``: the simulator's (offline and sim-server);
    ``url``: the HTTP address (sim-server and live); ``extra_body``: fields merged into every
    request body (offline too: the in-process simulator checks them as its server does).
    ``model``: the served model; ``model_named``: the user named it (``--llm-model``), so it
    replaces a verbatim payload's own, which is sent otherwise. ``metrics_interval_s``: how often
    an HTTP replay scrapes the server's ``/metrics`` (0: never; :mod:`~pytest_llmreplay.replayer.server_metrics`).
    ``cache_reset``: whether each repeat or capacity point starts on an emptied prefix cache
    (:meth:`reset_for_run`; :meth:`without_cache_reset` turns it off). ``headers``: sent with
    every HTTP request; ``timeout_s``: the longest wait for a byte of a reply before a request
    fails (both ``llmreplay sweep``'s options). A non-empty ``extra_body`` joins the fingerprint."""

    kind: str
    url: str | None = None
    profile: Any = None
    model: str | None = None
    model_named: bool = False
    api: str = "chat"
    api_key_env: str | None = None
    prompts: Any = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    server: ServerProcess | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    metrics_interval_s: float = 1.0
    cache_reset: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.extra_body:  # what every request also asks changes what is measured
            self.fingerprint["extra_body"] = self.extra_body

    @property
    def name(self) -> str:
        if self.kind == "offline":
            return f"sim:{self.profile.name} (offline, virtual time)"
        if self.kind == "sim-server":
            return f"sim:{self.profile.name} at {self.url}"
        return self.http_url

    @property
    def http_url(self) -> str:
        """``url``, which every kind but offline has (a live one from the start, a sim-server one
        from when its server announced it)."""
        assert self.url is not None, f"a {self.kind} target without a url"
        return self.url

    @property
    def gpus(self) -> int:
        return self.profile.gpus if self.profile is not None else 1

    @property
    def deterministic(self) -> bool:
        """Whether every run of a workload gives the same figures, so that repeating one measures
        nothing: the in-process simulator on the virtual clock without timing jitter (its seed
        changes only the output tokens' text, never a time or a count)."""
        return self.kind == "offline" and not self.profile.jitter

    def endpoint(self, repeat: int = 0) -> Any:
        """A new endpoint object for one replay; offline, a fresh engine seeded by :meth:`run_seed`."""
        if self.kind == "offline":
            from .sim.endpoint import SimEndpoint

            seed = self.run_seed(repeat)
            assert seed is not None  # offline, there is one
            return SimEndpoint(self.profile, self.prompts, seed=seed, extra_body=self.extra_body)
        return HTTPEndpoint(
            self.http_url,
            model=self.model if self.model_named else None,
            api=self.api,
            api_key_env=self.api_key_env,
            extra_body=self.extra_body,
            headers=self.headers,
            timeout_s=self.timeout_s,
            metrics_interval_s=self.metrics_interval_s,
            reasoning_hint=True if self.kind == "sim-server" else None,  # a live server: asked when opened
        )

    def run_seed(self, repeat: int) -> int | None:
        """The in-process simulator's seed (outputs, timing jitter) for run ``repeat`` (0-based) of
        a test: the session's seed plus ``repeat``; None over HTTP (the server seeds itself)."""
        return self.prompts.seed + repeat if self.kind == "offline" else None

    def without_cache_reset(self) -> None:
        """Never empty the server's prefix cache before a run (``--llm-cache-reset=off``,
        ``llmreplay sweep --no-cache-reset``). Runs on a warm cache measure something else than
        runs on an emptied one, so it joins the fingerprint (results of the two are not compared).
        Offline it changes nothing: every run there has a fresh engine."""
        if self.kind != "offline":
            self.cache_reset = False
            self.fingerprint["cache_reset"] = NOT_RESET

    def reset_for_run(self) -> str | None:
        """Before a repeat or a capacity point: the prefix cache emptied unless resets are off. What
        the run's record keeps as its ``cache_reset``: the request that emptied it
        (:meth:`reset_cache`), :data:`NOT_RESET` when resets are off, None offline or when the
        server has no reset."""
        if self.kind == "offline":
            return None
        return self.reset_cache() if self.cache_reset else NOT_RESET

    def unreset_note(self, reset: str | None, run: str = "repeat") -> str | None:
        """What is said once when a run started on a cache not emptied (``reset``, from
        :meth:`reset_for_run`), ``run`` naming the runs (``repeat``, ``point``); None when it
        was emptied or offline."""
        if self.kind == "offline" or reset not in (None, NOT_RESET):
            return None
        if reset == NOT_RESET:
            return (
                f"{self.http_url}: cache not reset between runs (resets turned off): "
                f"each {run} may measure a prefix cache the previous one warmed"
            )
        return no_cache_reset_note(self.http_url, run)

    def reset_cache(self, busy_wait_s: float | None = None) -> str | None:
        """Empty the server's prefix cache before a repeat (or a capacity search's point), so that
        it does not measure a cache the previous run warmed: ``POST /reset_prefix_cache`` (vLLM with
        ``VLLM_SERVER_DEV_MODE=1``, and our simulated server, which also starts a fresh engine
        with a new jitter seed), else ``POST /flush_cache`` (SGLang), else every slot of
        ``GET /slots`` erased (llama.cpp, :func:`_erase_slots`). The request that answered 2xx
        (for llama.cpp ``POST /slots/{id}?action=erase (N slots)``), or None when none did (or
        offline, where every run has a fresh engine anyway).
        A refusal while requests are in flight (:func:`_refused_while_busy`) is asked again every
        0.1 s for up to ``busy_wait_s`` (None: :data:`BUSY_WAIT_S`, read at the call); one still refused then is an
        LLMReplayError naming the request's URL and its last answer: the server has a reset, so
        going on would measure a cache it did not empty. A 4xx (404: the server has no such
        route) or 501 is no reset; a request that gets no answer (the server died, or hangs past
        30 s) or a server error (5xx) is an LLMReplayError naming the request's URL and what came
        back, not a server said to have no reset."""
        if self.kind == "offline":
            return None
        import httpx

        base = self.http_url.rstrip("/").removesuffix("/v1")
        wait_s = BUSY_WAIT_S if busy_wait_s is None else busy_wait_s
        wall = WallClock()
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with httpx.Client(
            base_url=base, timeout=30.0, headers=headers, event_hooks={"response": [_server_error]}
        ) as client:
            try:
                for path in CACHE_RESETS:
                    deadline = wall.now() + wait_s
                    answer = client.post(path)
                    while _refused_while_busy(answer) and wall.now() < deadline:
                        wall.pause(0.1)
                        answer = client.post(path)
                    if _refused_while_busy(answer):
                        raise LLMReplayError(
                            f"prefix-cache reset: POST {answer.request.url} still refused after {wait_s:g} s "
                            f"(requests still running?); its last answer: {_answer_words(answer)}"
                        )
                    if answer.is_success:
                        return f"POST {path}"
                return _erase_slots(client)
            except httpx.HTTPError as exc:
                request = exc.request if isinstance(exc, httpx.RequestError) else None
                where = f"{request.method} {request.url}" if request is not None else base
                raise LLMReplayError(
                    f"prefix-cache reset: {where}: no answer ({describe_error(exc)}); is the server running?"
                ) from None

    def clock(self) -> Clock:
        return VirtualClock() if self.kind == "offline" else WallClock()

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def _server_error(answer: Any) -> None:
    """A cache reset's ``answer`` (an ``httpx.Response``) that is a server error (a 5xx but 501,
    Not Implemented: llama.cpp's slot actions without ``--slot-save-path``) raises
    LLMReplayError naming the request and what came back (status, the body's first 200 characters)."""
    if answer.status_code < 500 or answer.status_code == 501:
        return
    answer.read()
    raise LLMReplayError(
        f"prefix-cache reset: {answer.request.method} {answer.request.url} answered {_answer_words(answer)}"
    )


def _answer_words(answer: Any) -> str:
    """A cache reset's ``answer`` (a read ``httpx.Response``) for an error: its status, reason and
    body's first 200 characters on one line (``400 Bad Request: Cache flushed. ...``)."""
    body = " ".join(answer.text.split())[:200] or "(empty body)"
    return f"{answer.status_code} {answer.reason_phrase}: {body}"


def _erase_slots(client: Any) -> str | None:
    """llama.cpp's cache reset: ``POST /slots/{id}?action=erase`` for each slot ``GET /slots``
    lists (the server runs it once that slot is idle, so it also waits out a request still
    running). It empties the slots' KV cache, not the host-memory prompt cache (``--cache-ram``,
    on by default), which a server measured across repeats runs without (``--cache-ram 0``).
    :data:`SLOT_ERASE` with the slot count, or None when the server has no slots endpoint
    (``--no-slots``), no slot actions (no ``--slot-save-path``: 501) or is not llama.cpp."""
    listing = client.get("/slots")
    try:
        ids = [int(slot["id"]) for slot in listing.json()] if listing.status_code == 200 else []
    except (ValueError, RecursionError, TypeError, KeyError):
        return None
    if not ids:
        return None
    for slot in ids:
        if not client.post(f"/slots/{slot}", params={"action": "erase"}).is_success:
            return None
    return f"{SLOT_ERASE} ({len(ids)} slot{'s' if len(ids) > 1 else ''})"


def _llamacpp_build(client: Any) -> str | None:
    """``llama.cpp <build_info>`` from ``GET /props``, or None when it has no such field."""
    reply = client.get("/props")
    try:
        body = reply.json() if reply.status_code == 200 else None
    except (ValueError, RecursionError):  # another server's page at /props: no version from it
        return None
    build = body.get("build_info") if isinstance(body, dict) else None
    return f"llama.cpp {build}" if isinstance(build, str) and build else None


def _refused_while_busy(answer: Any) -> bool:
    """Whether a cache reset's ``answer`` (an ``httpx.Response``) says "not now, requests are
    running": a 409 (our simulated server), a 400 from ``/flush_cache`` (SGLang refuses a flush
    while requests run or wait), or a 2xx whose JSON body is ``{"success": false, ...}`` (vLLM's
    dev router, 0.32 as the engine tests install it)."""
    if answer.status_code == 409 or (answer.status_code == 400 and answer.request.url.path.endswith("/flush_cache")):
        return True
    if not answer.is_success or not answer.content:
        return False
    try:
        body = answer.json()
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and body.get("success") is False


def sim_fingerprint(profile: Any, kind: str) -> dict[str, Any]:
    from importlib.metadata import version

    hardware = profile.hardware
    return {
        "kind": kind,
        "model": profile.model.name if profile.model is not None else profile.name,
        "server_version": f"pytest-llmreplay {version('pytest-llmreplay')}",
        "sim_profile": profile.name,
        "hardware": f"{hardware.gpus} x {hardware.name}" if hardware is not None else None,
    }


def offline_target(profile_name: str, prompts: Any, extra_body: dict[str, Any] | None = None) -> Target:
    """The simulator of ``profile_name`` (a bundled name or a profile file) in process, on the
    virtual clock, as ``--llm-offline`` runs it; ``extra_body`` joins the fingerprint, since what
    every request also asks changes what is measured. A bad profile raises its own error; the
    caller names its option."""
    from .sim.profile import load_profile

    profile = load_profile(profile_name)
    fingerprint = sim_fingerprint(profile, "offline")
    return Target("offline", profile=profile, prompts=prompts, fingerprint=fingerprint, extra_body=extra_body or {})


def start_sim_server(
    profile_name: str, tokenizer: str | None, seed: int = 0, startup_timeout_s: float = 60.0
) -> ServerProcess:
    """``llmreplay sim`` for ``profile_name`` with ``seed`` (outputs, timing jitter), started and
    healthy on a loopback port it binds itself (``--port 0``, then its ready line gives the URL):
    picking a free port here and passing it on would leave a window in which another server
    (another xdist worker's) could take it and answer our health check."""
    from .sim.server import READY

    command = [
        sys.executable,
        "-m",
        "pytest_llmreplay.cli.main",
        "sim",
        "--profile",
        profile_name,
        "--port",
        "0",
        "--seed",
        str(seed),
        "--parent-pid",
        str(os.getpid()),
    ]
    if tokenizer:
        command += ["--tokenizer", tokenizer]
    # no watchdog: the simulator stops by itself when its parent dies (--parent-pid)
    server = ServerProcess(command, None, announce=READY, startup_timeout_s=startup_timeout_s, die_with_parent=False)
    server.start()
    return server


def live_target(
    url: str,
    model: str | None,
    option: str,
    api: str = "chat",
    api_key_env: str | None = None,
    prompts: Any = None,
    extra_body: dict[str, Any] | None = None,
) -> Target:
    """The live server at ``url`` as a :class:`Target`, as every caller (the plugin's
    ``--llm-endpoint``, ``llmreplay sweep --endpoint``) makes it: its fingerprint read once
    (:func:`live_fingerprint`; an unreadable ``/v1/models`` names ``option``), and a ``model``
    given by the user sent in every request (``model_named``), else the first served one."""
    fingerprint = live_fingerprint(url, model, option, api_key_env)
    return Target(
        "live",
        url,
        model=fingerprint["model"],
        model_named=model is not None,
        api=api,
        api_key_env=api_key_env,
        prompts=prompts,
        fingerprint=fingerprint,
        extra_body=extra_body or {},
    )


def live_fingerprint(url: str, model: str | None, option: str, api_key_env: str | None = None) -> dict[str, Any]:
    """kind, model and server version of a live server: ``GET /version`` (vLLM, SGLang, our
    simulator), else ``GET /props``' ``build_info`` (llama.cpp, which has no ``/version``:
    ``llama.cpp b0-0c1e57098``), else the model list's ``owned_by``; the model is the first
    served one unless named; the engine, its ``owned_by`` (``vllm``, ``sglang``, ``llamacpp``:
    vLLM and SGLang give ``/version`` alike, and the version is no identity,
    :data:`~pytest_llmreplay.gate.stored_record.NOT_IDENTITY`); the hardware, for a server on
    this machine, its GPUs (else its CPU: :mod:`~pytest_llmreplay.replayer.host_hardware`).
    A server whose ``/v1/models`` cannot be read raises an error naming ``option`` (the option
    that gave ``url``) and the URL."""
    import os

    import httpx

    headers = (
        {"Authorization": f"Bearer {os.environ[api_key_env]}"} if api_key_env and os.environ.get(api_key_env) else {}
    )
    base = url.rstrip("/").removesuffix("/v1")
    version = None
    simulated: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=base, timeout=10.0, headers=headers) as client:
            reply = client.get("/version")
            if reply.status_code == 200:
                answer = reply.json()
                version = str(answer.get("version"))
                if answer.get("engine") == SIM_ENGINE:  # our simulator's server: which profile and settings
                    simulated = {"sim_profile": answer.get("profile"), "sim_settings": answer.get("settings")}
            else:
                version = _llamacpp_build(client)
            listing = client.get("/v1/models")
            listing.raise_for_status()
            served = listing.json()["data"]
    except (httpx.HTTPError, ValueError, RecursionError, KeyError, TypeError, AttributeError) as exc:
        raise LLMReplayError(f"{option} {url}: cannot read /v1/models ({describe_error(exc)})") from None
    if not served:
        raise LLMReplayError(f"{option} {url}: /v1/models lists no model")
    chosen = next((m for m in served if m.get("id") == model), served[0]) if model else served[0]
    if version is None:
        version = str(chosen.get("owned_by") or "unknown")
    from .replayer.host_hardware import host_hardware, on_this_host

    return {
        "kind": "live",
        "model": model or chosen.get("id"),
        "engine": str(chosen.get("owned_by")) if chosen.get("owned_by") else None,
        "server_version": version,
        "sim_profile": None,
        "hardware": host_hardware() if on_this_host(url) else None,  # another host's is the fingerprint hook's
        **simulated,
    }
