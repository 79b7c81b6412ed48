"""Speed and size of ``llmreplay dashboard`` on a store of 1,000 commits x 30 tests.

The store is bench/dashboard_store.py's (35,000 real stored results scaled per commit: five
tests have two endpoints side by side, six store three runs per result), made once in
``OUT/<kind>/``. Each figure is the median of ``--runs`` runs of the command line as CI runs it
(``llmreplay dashboard --baseline-dir STORE --out SITE``, a new process, its start included):

- **full build**: into a new, empty folder, with ``--workers 1`` (one process) and with the
  default (one process per core this machine gives it);
- **update after one more commit**: one commit more on main with a result of every test (35
  results), then the command on the full build's folder, restored before each run.

The machine's load average (1 minute) is printed beside each run, and the CPU time the command's
processes used: the project's machine is shared with other jobs, whose load the wall-clock
figures carry and the CPU times much less.

    .venv/bin/python bench/dashboard_speed.py /tmp/dash-bench --runs 3 [--store folder git]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import dashboard_store  # bench/dashboard_store.py: run as a script, this one's folder is on the path

COMMITS, TESTS = 1000, 30


def run(store: str, site: Path, repo: Path, *more: str) -> tuple[float, float, float, str]:
    """(seconds, CPU seconds of its processes, load average before, the command's first line) of one build."""
    load = os.getloadavg()[0]
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_llmreplay.cli.main",
            "dashboard",
            "--baseline-dir",
            store,
            "--out",
            str(site),
            *more,
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - started
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime, load, done.stdout.splitlines()[0]


def size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def bench(out: Path, kind: str, runs: int) -> None:
    home = out / kind
    if not (home / "repo").is_dir():
        started = time.perf_counter()
        dashboard_store.make_store(home, COMMITS, TESTS, kind)
        print(f"{kind}: store made in {time.perf_counter() - started:.0f} s")
    store, repo, site = dashboard_store.store_spec(home, kind), home / "repo", home / "site"
    for label, more in (("full build, --workers 1", ("--workers", "1")), ("full build, default workers", ())):
        times, cpus = [], []
        for _ in range(runs):
            shutil.rmtree(site, ignore_errors=True)
            seconds, cpu, load, line = run(store, site, repo, *more)
            times.append(seconds)
            cpus.append(cpu)
            print(f"{kind}: {label}: {seconds:.1f} s, CPU {cpu:.1f} s (load {load:.1f}) {line}")
        print(
            f"{kind}: {label}: median {statistics.median(times):.1f} s, CPU {statistics.median(cpus):.1f} s, of {runs}"
        )
    print(
        f"{kind}: site {size(site) / 1e6:.1f} MB: assets {size(site / 'assets') / 1e6:.1f} MB, index "
        f"{(site / 'index.html').stat().st_size / 1e6:.2f} MB, {len(list((site / 'tests').iterdir()))} test pages "
        f"{size(site / 'tests') / 1e6:.1f} MB, cache {size(site / '.llmreplay-dashboard') / 1e6:.1f} MB"
    )
    before = home / "site-before"
    shutil.rmtree(before, ignore_errors=True)
    shutil.copytree(site, before, copy_function=shutil.copy2)
    dashboard_store.add_results(home, TESTS, kind)
    times, cpus = [], []
    for _ in range(runs):
        shutil.rmtree(site)
        shutil.copytree(before, site, copy_function=shutil.copy2)
        seconds, cpu, load, line = run(store, site, repo)
        times.append(seconds)
        cpus.append(cpu)
        print(f"{kind}: update after one more commit: {seconds:.2f} s, CPU {cpu:.2f} s (load {load:.1f}) {line}")
    print(
        f"{kind}: update after one more commit: median {statistics.median(times):.2f} s, CPU {statistics.median(cpus):.2f} s, of {runs}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where the stores and sites go (kept: a second run reuses the stores)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--store", nargs="+", choices=("folder", "git"), default=["folder"])
    args = parser.parse_args()
    for kind in args.store:
        bench(args.out, kind, args.runs)


if __name__ == "__main__":
    main()
