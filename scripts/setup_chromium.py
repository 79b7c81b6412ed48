"""Make a headless Chromium available for the report's browser test, installing it once.

Run: ``python3 scripts/setup_chromium.py``. Standard library only. Idempotent: when a Chromium is
already on ``PATH`` (``chromium``, ``chromium-browser``, ``google-chrome``) it is used as is;
otherwise the distribution's package is installed with ``apt-get update`` and
``apt-get install -y --no-install-recommends chromium`` (Debian; about 300 MB, a minute or two),
which needs root and apt-get. A file lock makes concurrent runs wait for one another (Unix only).

The last line printed is the browser's path. Failure is one line on stderr naming the step, and
exit status 1.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome")
PACKAGE = "chromium"
LOCK = Path(tempfile.gettempdir()) / "llmreplay-setup-chromium.lock"


def find_browser() -> str | None:
    """The first Chromium on ``PATH``, or None."""
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def run(command: list[str], what: str) -> None:
    """Run ``command`` (its output to stderr); on failure exit with one line naming the step."""
    print(f"setup_chromium: {what}", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(command, stdout=sys.stderr, env=env).returncode != 0:
        sys.exit(f"setup_chromium: {what} failed (command: {' '.join(command)})")


def ensure_browser() -> str:
    """The browser's path, installing the distribution's package when none is found."""
    found = find_browser()
    if found:
        return found
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be installing it right now
        found = find_browser()
        if found:
            return found
        if shutil.which("apt-get") is None:
            sys.exit(
                f"setup_chromium: no Chromium on PATH ({', '.join(NAMES)}) and no apt-get to install one; install Chromium with your package manager"
            )
        if os.geteuid() != 0:
            sys.exit(
                "setup_chromium: no Chromium on PATH and installing one with apt-get needs root; run `sudo apt-get install chromium` once"
            )
        run(["apt-get", "update", "-q"], "apt-get update")
        run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE],
            f"apt-get install {PACKAGE} (a minute or two)",
        )
    found = find_browser()
    if not found:
        sys.exit(f"setup_chromium: apt-get installed {PACKAGE} but no {' or '.join(NAMES)} is on PATH")
    return found


def main() -> None:
    print(ensure_browser())


if __name__ == "__main__":
    main()
