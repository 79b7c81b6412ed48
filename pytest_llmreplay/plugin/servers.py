"""Servers declared by tests (``server:`` in the marker or a spec file), pooled for the session.

:func:`parse_server` checks a declared ``server`` mapping into a :class:`ServerConfig`: equal
configs are one server. :class:`ServerPool` starts a config's command on a free loopback port
with a :class:`~pytest_llmreplay.replayer.server_process.ServerProcess` (its watchdog included)
whose output goes to a log file of its own, keeps at most ``max_servers`` alive (the least
recently used one is stopped before a new config starts), restarts a config whose server died
in use (not one whose start failed), and stops them all on :meth:`ServerPool.close`.
:func:`order_by_server` is the collection order that starts each config once.
:func:`expand_variables` reads ``$VAR`` and ``${VAR}`` in ``cmd`` and ``env`` as a shell does.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import socket
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..errors import LLMReplayError
from ..replayer.server_process import ServerProcess

SERVER_FIELDS = ("cmd", "env", "health", "ready_timeout")
DEFAULT_READY_TIMEOUT_S = 600.0
PORT = "{port}"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
VARIABLE = re.compile(r"\$(?:\$|\{(?P<braced>[A-Za-z_]\w*)\}|(?P<name>[A-Za-z_]\w*))")


def expand_variables(text: str, field: str, environ: Mapping[str, str], command: bool = False) -> str:
    """``text`` with each ``$NAME`` and ``${NAME}`` replaced by ``environ``'s value, as a shell
    user expects (``$HOME/models/m.gguf``), and ``$$`` by one ``$``. ``command``: ``text`` is a
    command line, read as a shell reads one: nothing inside single quotes is replaced (``sh -c
    'echo $PATH'`` hands ``$PATH`` to the inner shell), nor a ``$`` after a backslash. A variable
    that is not set is one LLMReplayError naming ``field`` and the variable, never an empty string."""
    out: list[str] = []
    index, double = 0, False
    while index < len(text):
        char = text[index]
        if command and char == "'" and not double:
            end = text.find("'", index + 1)
            end = len(text) if end < 0 else end + 1
            out.append(text[index:end])
            index = end
            continue
        if command and char == "\\":
            out.append(text[index : index + 2])
            index += 2
            continue
        double ^= command and char == '"'
        found = VARIABLE.match(text, index) if char == "$" else None
        if found is None:
            out.append(char)
            index += 1
            continue
        name = found["braced"] or found["name"]
        if name is None:
            out.append("$")
        elif name in environ:
            out.append(environ[name])
        else:
            raise LLMReplayError(
                f"{field}: ${name} is not set in the environment pytest runs in (set it, or write $$ for a literal $)"
            )
        index = found.end()
    return "".join(out)


@dataclass(frozen=True)
class ServerConfig:
    """A checked declared server: ``cmd`` with ``{port}`` where the plugin's port goes, extra
    ``env`` (sorted pairs, so equal mappings are equal configs), the readiness ``health`` path
    (None: ``/health``, then ``/v1/models``) and ``ready_timeout`` in seconds."""

    cmd: str
    env: tuple[tuple[str, str], ...] = ()
    health: str | None = None
    ready_timeout: float = DEFAULT_READY_TIMEOUT_S

    @property
    def digest(self) -> str:
        """12 hex digits that name the config (log files, xdist groups)."""
        text = json.dumps([self.cmd, self.env, self.health, self.ready_timeout])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What joins the endpoint fingerprint: the command with ``{port}`` as written, and the
        env, the values of names that look secret (``*KEY*``, ``*TOKEN*``, ...) masked."""
        env = {name: "***" if SECRET_NAME.search(name) else value for name, value in self.env}
        return {"cmd": self.cmd, "env": env}

    def command(self, port: int, environ: Mapping[str, str]) -> str:
        """The command line to run: ``cmd`` with its variables expanded from ``environ``
        (:func:`expand_variables`) and ``{port}`` replaced by ``port``."""
        return expand_variables(self.cmd, "server.cmd", environ, command=True).replace(PORT, str(port))

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """``env`` with its values' variables expanded from ``environ``."""
        return {name: expand_variables(value, f"server.env.{name}", environ) for name, value in self.env}

    @property
    def label(self) -> str:
        """A readable name, for test ids: the command's words without the port and its option."""
        words = shlex.split(self.cmd)
        kept = [
            word
            for index, word in enumerate(words)
            if PORT not in word and not (index + 1 < len(words) and PORT in words[index + 1] and word.startswith("-"))
        ]
        return " ".join([Path(kept[0]).name, *kept[1:]] if kept else [])


def parse_server(value: Any) -> ServerConfig:
    """``value`` (the ``server`` key) checked: a mapping of :data:`SERVER_FIELDS`, ``cmd`` a
    command line holding ``{port}``, ``env`` a mapping of strings, ``health`` a path, and
    ``ready_timeout`` seconds > 0. A problem is one LLMReplayError naming ``server.FIELD``."""
    if not isinstance(value, Mapping):
        raise LLMReplayError(f"server: expected a mapping with cmd (and env, health, ready_timeout), got {value!r}")
    unknown = [name for name in value if name not in SERVER_FIELDS]
    if unknown:
        raise LLMReplayError(f"server.{unknown[0]}: unknown field; expected one of {', '.join(SERVER_FIELDS)}")
    cmd = value.get("cmd")
    if not isinstance(cmd, str) or not cmd.strip():
        raise LLMReplayError(f"server.cmd: expected the command that starts the server, got {cmd!r}")
    if PORT not in cmd:
        raise LLMReplayError(
            f"server.cmd: {cmd!r} has no {PORT}: the plugin picks a free port and puts it there (... --port {PORT})"
        )
    try:
        shlex.split(cmd)
    except ValueError as exc:
        raise LLMReplayError(f"server.cmd: cannot split {cmd!r} into words: {exc}") from None
    env = value.get("env") or {}
    if not isinstance(env, Mapping):
        raise LLMReplayError(f"server.env: expected a mapping of variable names to strings, got {env!r}")
    for name, setting in env.items():
        if not isinstance(name, str) or not isinstance(setting, str):
            raise LLMReplayError(f"server.env.{name}: expected a string value (quote it), got {setting!r}")
    health = value.get("health")
    if health is not None and (not isinstance(health, str) or not health.startswith("/")):
        raise LLMReplayError(f"server.health: expected a path starting with /, e.g. /health, got {health!r}")
    timeout = value.get("ready_timeout", DEFAULT_READY_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise LLMReplayError(f"server.ready_timeout: expected a number of seconds > 0, got {timeout!r}")
    config = ServerConfig(cmd, tuple(sorted(env.items())), health, float(timeout))
    config.command(0, os.environ)
    config.environment(os.environ)
    return config


T = TypeVar("T")


def order_by_server(items: list[T], config_of: Callable[[T], ServerConfig | None]) -> list[T]:
    """``items`` grouped by server config, the groups in the order their first item came and
    each group in its own order (tests without a declared server form one group too)."""
    first: dict[ServerConfig | None, int] = {}
    configs = [config_of(item) for item in items]
    for index, config in enumerate(configs):
        first.setdefault(config, index)
    order = sorted(range(len(items)), key=lambda index: first[configs[index]])
    return [items[index] for index in order]


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
FREE_PORT_SPAN = 10_000  # ports below the ephemeral range that free_port draws from


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's ``ip_local_port_range``; 32768,
    the IANA and Linux default's start, where it cannot be read)."""
    try:
        return int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now (bound, read, closed), which the command binds a moment later:
    one of the :data:`FREE_PORT_SPAN` ports below the kernel's ephemeral range, at random. The
    kernel hands out ports of that range to every bind to port 0 and every outgoing connection,
    so another process could take one in the moment before the command binds it (a server
    that takes seconds to start leaves a long moment); a port below the range is taken only by
    a process that names it. Where the range starts too low to leave the span (or 50 draws
    are all taken), a port the kernel picks."""
    import random

    end = ephemeral_start()
    draw = random.Random()  # its own: a seeded global generator would give every process the same ports
    candidates = [draw.randrange(end - FREE_PORT_SPAN, end) for _ in range(50)] if end - FREE_PORT_SPAN >= 1024 else []
    for port in [*candidates, 0]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise LLMReplayError("no free loopback port to start a declared server on")


@dataclass
class _Running:
    server: ServerProcess
    target: Any


class ServerPool:
    """The declared servers of one pytest process. :meth:`target` gives a config's
    :class:`~pytest_llmreplay.target.Target` (``make_target(config, url)`` makes it once its
    server is healthy), starting the server if it is not running; :meth:`check` raises when a
    config's server has died (and forgets it, so the next use starts a fresh one). A config
    whose start failed (its command exited, never became healthy, or could not run) is not
    started again in the session: each later test of it fails at once with that error. Logs go to
    ``log_dir()/server-DIGEST-N.log`` (N: the config's Nth start); ``progress`` gets a line per
    start and the waiting lines."""

    def __init__(
        self,
        max_servers: int,
        log_dir: Callable[[], Path],
        progress: Callable[[str], None] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.max_servers = max_servers
        self.log_dir = log_dir
        self.progress = progress
        self.env = dict(env or {})
        self.starts: dict[ServerConfig, int] = {}
        self.failed: dict[ServerConfig, str] = {}  # why a config's start failed, naming its test
        self._running: OrderedDict[ServerConfig, _Running] = OrderedDict()  # least recently used first

    def target(self, config: ServerConfig, make_target: Callable[[ServerConfig, str], Any], test: str) -> Any:
        """``config``'s target for ``test``: its running server's, else (first use, or its server
        died) a new start's, after stopping the least recently used servers beyond
        ``max_servers - 1``. A start that fails raises LLMReplayError with the exit status and
        the log's last lines, and so does every later call for ``config`` at once, naming the
        test whose start failed (a server that does not start for one test, in minutes of
        ``ready_timeout``, does not for the next)."""
        if config in self.failed:
            raise LLMReplayError(self.failed[config])
        running = self._running.get(config)
        if running is not None and running.server.exit_message() is None:
            self._running.move_to_end(config)
            return running.target
        self._forget(config)
        while len(self._running) >= self.max_servers:
            self._running.popitem(last=False)[1].server.stop()
        self.starts[config] = self.starts.get(config, 0) + 1
        port = free_port()
        log = self.log_dir() / f"server-{config.digest}-{self.starts[config]}.log"
        server = ServerProcess(
            config.command(port, os.environ),
            f"http://127.0.0.1:{port}",
            startup_timeout_s=config.ready_timeout,
            timeout_option="server.ready_timeout",
            log_path=log,
            env={**self.env, **config.environment(os.environ)},
            progress=self.progress,
            health=config.health,
        )
        if self.progress is not None:
            self.progress(f"starting server {config.cmd!r} on port {port}, log {log}")
        try:
            server.start()  # a failure stops it and raises with the log's last lines
            assert server.url is not None  # given above
            try:
                target = make_target(config, server.url)
            except BaseException:
                server.stop()
                raise
        except LLMReplayError as exc:
            self.failed[config] = (
                f"{exc}\n(not started again for this session's later tests of this server: "
                f"its start for {test} failed as above)"
            )
            raise
        self._running[config] = _Running(server, target)
        return target

    def check(self, config: ServerConfig) -> None:
        """Raise LLMReplayError (exit status, the log's last lines) if ``config``'s server died."""
        running = self._running.get(config)
        died = running.server.exit_message() if running is not None else None
        if died:
            self._forget(config)
            raise LLMReplayError(died)

    def _forget(self, config: ServerConfig) -> None:
        running = self._running.pop(config, None)
        if running is not None:
            running.server.stop()  # its children may outlive it

    def close(self) -> None:
        """Stop every running server (the watchdogs stop them if this process dies first)."""
        while self._running:
            self._running.popitem()[1].server.stop()
