"""A page opened in headless Chromium over the DevTools protocol (a websocket on 127.0.0.1, spoken
with aiohttp): what it logged as errors, facts read from its DOM, and a screenshot.

``scripts/setup_chromium.py`` finds Chromium, installing the distribution's package on first use.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
SETUP_TIMEOUT_S, START_TIMEOUT_S, STEP_TIMEOUT_S = 900, 60, 60


def chromium() -> str:
    """The browser's path from the setup script; AssertionError with its message when it fails."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "setup_chromium.py")],
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT_S,
    )
    assert done.returncode == 0, f"scripts/setup_chromium.py failed: {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout.strip().splitlines()[-1]


@dataclass
class PageVisit:
    """``errors``: uncaught exceptions, console.error/assert calls and error log entries, as text;
    ``facts``: what the expression given to :func:`visit` returned; ``png``: the full page."""

    errors: list[str] = field(default_factory=list)
    facts: Any = None
    png: bytes = b""


def visit(browser: str, url: str, expression: str, width: int = 1280, hover: str | None = None) -> PageVisit:
    """Load ``url`` in a fresh headless ``browser``, evaluate ``expression`` (JavaScript whose
    value, or a promise's, is JSON-serialisable) once loaded, and screenshot the whole page
    ``width`` px wide. ``hover``: JavaScript giving ``{x, y}`` (or a promise of them) in the
    viewport, where the mouse is moved (a real input event) before ``expression`` runs."""
    # Chromium's helper processes (crashpad, zygote) may still write to the profile for a moment
    # after the browser process is gone: a file they add during the removal is left behind
    with tempfile.TemporaryDirectory(prefix="llmreplay-chromium-", ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(
            [browser, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port = _devtools_port(Path(profile), process)
            return asyncio.run(_visit(port, url, expression, width, hover))
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _devtools_port(profile: Path, process: subprocess.Popen) -> int:
    """The port Chromium wrote to ``DevToolsActivePort`` in its profile once listening."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"chromium exited with status {process.returncode} before listening"
        if marker.is_file():
            lines = marker.read_text().split()
            if lines:
                return int(lines[0])
        time.sleep(0.05)
    raise AssertionError(f"chromium did not open its DevTools port within {START_TIMEOUT_S} s")


async def _visit(port: int, url: str, expression: str, width: int, hover: str | None) -> PageVisit:
    import aiohttp

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=STEP_TIMEOUT_S) as answer:
        page = next(t for t in json.load(answer) if t["type"] == "page")
    found = PageVisit()
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as socket,
    ):
        session_state = _Session(socket, found)
        listener = asyncio.create_task(session_state.listen())
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            await session_state.call(method)
        await session_state.call(
            "Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False
        )
        loaded = session_state.expect("Page.loadEventFired")
        await session_state.call("Page.navigate", url=url)
        await asyncio.wait_for(loaded, STEP_TIMEOUT_S)
        if hover is not None:
            where = await session_state.evaluate(hover)
            await session_state.call("Input.dispatchMouseEvent", type="mouseMoved", x=where["x"], y=where["y"])
        found.facts = await session_state.evaluate(expression)
        shot = await session_state.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        found.png = base64.b64decode(shot["data"])
        listener.cancel()
    return found


class _Session:
    """Calls (id -> future) and events on one DevTools websocket; errors collected on the way."""

    def __init__(self, socket: Any, found: PageVisit) -> None:
        self.socket, self.found = socket, found
        self.pending: dict[int, asyncio.Future] = {}
        self.waiting: dict[str, asyncio.Future] = {}
        self.next_id = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        answer = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = answer
        await self.socket.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(answer, STEP_TIMEOUT_S)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` (awaited when it is a promise); AssertionError when it throws."""
        evaluated = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in evaluated, f"the check expression failed: {evaluated['exceptionDetails']}"
        return evaluated["result"].get("value")

    def expect(self, event: str) -> asyncio.Future:
        self.waiting[event] = asyncio.get_running_loop().create_future()
        return self.waiting[event]

    async def listen(self) -> None:
        async for message in self.socket:
            data = json.loads(message.data)
            if "id" in data:
                self.pending.pop(data["id"]).set_result(data)
                continue
            method, params = data.get("method"), data.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                self.found.errors.append(
                    f"uncaught: {details.get('exception', {}).get('description') or details.get('text')}"
                )
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                self.found.errors.append(
                    "console."
                    + params["type"]
                    + ": "
                    + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                )
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                self.found.errors.append(f"log: {params['entry']['text']} ({params['entry'].get('url', '')})")
            if method in self.waiting and not self.waiting[method].done():
                self.waiting[method].set_result(params)
