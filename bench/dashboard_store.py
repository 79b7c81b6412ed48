"""A synthetic store for ``llmreplay dashboard``: COMMITS commits x TESTS tests, made from real
stored results.

**Base results** (``--base perf``, the default): the project's example perf tests
(``tests/perf``, six tests) replayed once on the offline simulator as Llama-3.1-8B on an H100
and once on an H200 (``--llm-save``: real stored results, 6-21 KB each, with samples and SLOs).
``--base chat``: a 16-session chat (:data:`CHAT`) run once on each profile by ``llmreplay run``,
with three SLOs (:data:`CHAT_SLOS`): seconds instead of a minute (the dashboard's tests use it). **Tests**: test i is base result i mod 6
renamed ``tests/perf/test_bench_NN.py::test_NN``; every seventh test also has the H200's
results (two lines side by side), and every fifth stores three runs per result
(``--llm-repeat 3``: an interval per figure). **Commits**: a git repository of COMMITS empty
commits on main, an hour apart (``git fast-import``). **Figures over commits**: each test's
times are scaled by a level times noise (times x f, throughputs / f, samples and summaries
alike, its SLO checks redone): the level starts at 1 and takes two steps of 5-25% either way at
random commits, and one test in six a 15% step in the newest ten commits, so the index has
tests that moved; or only the steps ``--steps`` names (``0@22:+0.2``: test 0 20% slower from
commit 22 on). The noise is 1.5% (a normal draw per result). Seeded: the same arguments make the
same store.

The store is a folder (``--store folder``, ``REPO/../store``) or a git ref of the repository
itself (``--store git``, ``git:REPO#refs/llmreplay/results``, one commit made by fast-import).

    .venv/bin/python bench/dashboard_store.py /tmp/dash --commits 1000 --tests 30 --store folder
    .venv/bin/python bench/dashboard_store.py /tmp/dash --tests 30 --store folder --add-commit

``--add-commit`` adds one commit to the store's repository, with a result of every test at it
(the update). bench/dashboard_speed.py times the dashboard on it; the dashboard's tests build
from a small one (tests/dashboard_site.py).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import random
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_llmreplay.gate.store import encode, result_folder
from pytest_llmreplay.metrics.slo import parse_slo

ROOT = Path(__file__).resolve().parents[1]
TIMES = ("ttft", "tpot", "itl", "latency", "ttfat", "session_latency", "queue")
RATES = ("output_throughput", "request_throughput", "input_throughput", "decode_tps")
PROFILES = ("llama-3.1-8b-h100", "llama-3.1-8b-h200")
GIT = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost"}
START = 1_760_000_000  # the first commit's time (UNIX seconds)
CHAT = (
    "synthetic:\n  sessions: 16\n  input_tokens: {dist: uniform, min: 64, max: 1024}\n"
    "  output_tokens: {dist: uniform, min: 8, max: 128}\n  rate: 4\n  seed: 7\n"
)
CHAT_SLOS = (("ttft.p99", "< 500ms"), ("tpot.p50", "< 30ms"), ("error_rate", "== 0"))
Steps = dict[int, list[tuple[int, float]]]  # test -> its steps: (commit, relative change)


def make_base(folder: Path, kind: str = "perf") -> dict[str, list[dict[str, Any]]]:
    """The base results (module docstring), made under ``folder/<profile>`` once; profile -> its
    records, by test id."""
    found = {}
    for profile in PROFILES:
        store = folder / profile
        if not store.is_dir():
            (replay_perf if kind == "perf" else run_chat)(store, profile)
        records = [json.loads(path.read_text()) for path in sorted(store.glob("*/*.json"))]
        found[profile] = sorted(records, key=lambda record: record["test"])
    return found


def replay_perf(store: Path, profile: str) -> None:
    """``tests/perf`` replayed on ``profile``, saved in ``store``."""
    subprocess.run(
        [sys.executable, "-m", "pytest", "tests/perf", "-q", "-p", "no:cacheprovider", "--llm-offline"]
        + ["--llm-save", f"--llm-baseline-dir={store}", f"--llm-sim-profile={profile}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )


def run_chat(store: Path, profile: str) -> None:
    """:data:`CHAT` (one file for both profiles: the same workload) run once on ``profile``
    with :data:`CHAT_SLOS`, kept as ``store/chat/<profile>.json``."""
    from pytest_llmreplay.cli.main import main

    workload, run = store.parent / "chat.yaml", store.parent / "runs" / profile
    workload.parent.mkdir(parents=True, exist_ok=True)
    workload.write_text(CHAT)
    with contextlib.redirect_stdout(io.StringIO()):  # its tables: this script prints what it made
        status = main(["run", str(workload), "--sim", profile, "--out", str(run)])
    if status != 0:
        raise SystemExit(f"llmreplay run on {profile} failed")
    record = json.loads((run / "result.json").read_text())
    record["slo"] = [{"key": key, "threshold": text, "measured": None, "passed": True} for key, text in CHAT_SLOS]
    (store / "chat").mkdir(parents=True)
    (store / "chat" / f"{profile}.json").write_text(json.dumps(record))


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    import os

    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=data,
        capture_output=True,
        check=True,
        env={**os.environ, **GIT, "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"},
    )
    return done.stdout.decode().strip()


def make_repo(repo: Path, commits: int) -> list[str]:
    """A repository of ``commits`` empty commits on main, an hour apart; their ids, oldest first."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    script = []
    for index in range(commits):
        message = f"change {index}".encode()
        script.append(
            f"commit refs/heads/main\nmark :{index + 1}\ncommitter bench <bench@localhost> {START + 3600 * index} +0000\n"
            f"data {len(message)}\n".encode()
            + message
            + (f"\nfrom :{index}\n" if index else "\n").encode()
        )
    git(repo, "fast-import", "--quiet", data=b"".join(script))
    git(repo, "reset", "-q", "--hard", "main")
    return git(repo, "rev-list", "--reverse", "main").split()


def add_commit(repo: Path) -> str:
    """One more commit on main (the update's); its id."""
    index = len(git(repo, "rev-list", "main").split())
    git(repo, "-c", f"user.name={GIT['GIT_AUTHOR_NAME']}", "commit", "-q", "--allow-empty", "-m", f"change {index}")
    return git(repo, "rev-parse", "HEAD")


def scaled(base: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """``base`` with its times x ``factor`` and throughputs / ``factor`` (summary and samples),
    its SLO checks redone on the new summary."""
    record = copy.deepcopy(dict(base))
    for metric, stats in record["summary"].items():
        scale = factor if metric in TIMES else 1 / factor if metric in RATES else None
        if scale is not None and isinstance(stats, dict):
            for stat, value in stats.items():
                if stat != "count" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    stats[stat] = value * scale
    for metric, values in record["samples"].items():
        scale = factor if metric in TIMES else 1 / factor if metric in RATES else 1.0
        record["samples"][metric] = [float(f"{v * scale:.6g}") for v in values]
    for entry in record.get("slo") or []:
        check = parse_slo(entry["key"], entry["threshold"]).check(record["summary"])
        entry["measured"], entry["passed"] = check.measured, check.passed
    return record


def repeated(base: Mapping[str, Any], factors: list[float]) -> dict[str, Any]:
    """One record of ``len(factors)`` runs (:mod:`~pytest_llmreplay.gate.repeats`' form): each run
    ``base`` scaled by its factor, the summary the median run's."""
    runs = [scaled(base, f) for f in factors]
    middle = sorted(range(len(factors)), key=lambda i: factors[i])[len(factors) // 2]
    record = copy.deepcopy(runs[middle])
    names = list(base["samples"])
    record["samples"] = {name: [v for run in runs for v in run["samples"][name]] for name in names}
    record["sample_keys"] = {name: [k for run in runs for k in run["sample_keys"][name]] for name in names}
    record["runs"] = [
        {
            "sizes": {n: len(run["samples"][n]) for n in names},
            "summary": run["summary"],
            "seed": None,
            "cache_reset": None,
        }
        for run in runs
    ]
    return record


def level(test: int, commits: int, steps: Steps | None = None) -> Callable[[int], float]:
    """Test ``test``'s level at each commit: its ``steps`` when given, else two random steps and
    a recent one for every sixth test (module docstring)."""
    if steps is not None:
        chosen = steps.get(test, [])
    else:
        rng = random.Random(1000 + test)
        chosen = [
            (rng.randrange(commits // 10, commits), rng.choice((-1, 1)) * rng.uniform(0.05, 0.25)) for _ in range(2)
        ]
        if test % 6 == 3:
            chosen.append((commits - 1 - rng.randrange(2, 9), 0.15))
    return lambda commit: math.prod(1 + size for at, size in chosen if commit >= at)


def results(
    base: Mapping[str, list[dict[str, Any]]],
    tests: int,
    commits: list[str],
    first: int = 0,
    steps: Steps | None = None,
) -> Iterator[tuple[str, bytes]]:
    """(store key, bytes) of every test's result at ``commits[first:]`` (module docstring);
    ``steps``: each test's steps (default: :func:`level`'s random ones)."""
    for test in range(tests):
        levels = level(test, len(commits), steps)
        for index in range(first, len(commits)):
            noise = random.Random(test * 1_000_003 + index)
            profiles = PROFILES if test % 7 == 0 else PROFILES[:1]
            for order, profile in enumerate(profiles):
                source = base[profile][test % len(base[profile])]
                name = f"tests/perf/test_bench_{test:02d}.py::test_{test:02d}"
                ratio = 1.0 if order == 0 else 0.8  # the H200 a fifth faster
                draws = [noise.gauss(0, 0.015) for _ in range(3 if test % 5 == 4 else 1)]
                factors = [ratio * levels(index) * (1 + draw) for draw in draws]
                record = repeated(source, factors) if len(factors) > 1 else scaled(source, factors[0])
                stamp = START + 3600 * index + 600 + order
                record.update(test=name, commit=commits[index], dirty=False, branch="main", time=_iso(stamp))
                key = f"{result_folder(name)}/{commits[index][:12]}-{_stamp(stamp)}-1-{test:02d}{order:04d}.json"
                yield key, encode(record)


def _iso(stamp: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")


def _stamp(stamp: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y%m%dT%H%M%S000000Z")


def write_folder(store: Path, files: Iterator[tuple[str, bytes]]) -> int:
    count = 0
    for key, data in files:
        (store / key).parent.mkdir(parents=True, exist_ok=True)
        (store / key).write_bytes(data)
        count += 1
    return count


def write_git(repo: Path, files: Iterator[tuple[str, bytes]], ref: str = "refs/llmreplay/results") -> int:
    """One commit on ``ref`` adding ``files`` on top of its tip (fast-import)."""
    try:
        tip = git(repo, "rev-parse", "--verify", "--quiet", ref)
    except subprocess.CalledProcessError:
        tip = ""
    parts = [f"commit {ref}\ncommitter bench <bench@localhost> {START} +0000\ndata 14\nbench results\n".encode()]
    if tip:
        parts.append(f"from {tip}\n".encode())
    count = 0
    for key, data in files:
        parts.append(f"M 100644 inline {key}\ndata {len(data)}\n".encode() + data + b"\n")
        count += 1
    git(repo, "fast-import", "--quiet", data=b"".join(parts))
    return count


def store_spec(out: Path, kind: str) -> str:
    """The ``--baseline-dir`` of the store made in ``out``."""
    return str(out / "store") if kind == "folder" else f"git:{out / 'repo'}#refs/llmreplay/results"


def make_store(out: Path, commits: int, tests: int, kind: str, base: str = "perf", steps: Steps | None = None) -> None:
    """The repository ``out/repo`` and the store (module docstring)."""
    records = make_base(out / "base", base)
    ids = make_repo(out / "repo", commits)
    files = results(records, tests, ids, steps=steps)
    count = write_folder(out / "store", files) if kind == "folder" else write_git(out / "repo", files)
    print(f"{count:,} results of {tests} tests at {commits:,} commits in {store_spec(out, kind)}")


def add_results(out: Path, tests: int, kind: str, base: str = "perf", steps: Steps | None = None) -> str:
    """One more commit with a result of every test (the update); the commit's id."""
    records = make_base(out / "base", base)
    add_commit(out / "repo")
    ids = git(out / "repo", "rev-list", "--reverse", "main").split()
    files = results(records, tests, ids, first=len(ids) - 1, steps=steps)
    (write_folder(out / "store", files) if kind == "folder" else write_git(out / "repo", files))
    return ids[-1]


def step(text: str) -> tuple[int, int, float]:
    """``TEST@COMMIT:CHANGE`` (``0@22:+0.2``) -> (test, commit, change)."""
    try:
        test, rest = text.split("@")
        commit, change = rest.split(":")
        return int(test), int(commit), float(change)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TEST@COMMIT:CHANGE, e.g. 0@22:+0.2") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="a new folder: repo/, store/ (folder kind) and base/ go there")
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--tests", type=int, default=30)
    parser.add_argument("--store", choices=("folder", "git"), default="folder")
    parser.add_argument("--base", choices=("perf", "chat"), default="perf", help="the base results (module docstring)")
    parser.add_argument(
        "--steps", nargs="+", type=step, metavar="TEST@COMMIT:CHANGE", help="the only steps (default: random ones)"
    )
    parser.add_argument(
        "--add-commit", action="store_true", help="add one commit with a result of every test to the store in OUT"
    )
    args = parser.parse_args()
    steps: Steps | None = None
    if args.steps is not None:
        steps = {}
        for test, commit, change in args.steps:
            steps.setdefault(test, []).append((commit, change))
    if args.add_commit:
        print(add_results(args.out, args.tests, args.store, args.base, steps))
    else:
        make_store(args.out, args.commits, args.tests, args.store, args.base, steps)


if __name__ == "__main__":
    main()
