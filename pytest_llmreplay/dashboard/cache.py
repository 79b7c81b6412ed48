"""The store's results, each read once: the figures of every result read so far
(:func:`~.extract.extract`) are kept in the output folder, so that a rebuild reads only the
results saved since.

**Keyed by the result's key** (``<test folder>/<name>``): every store kind gives each result a
name no other result gets and never replaces or removes a file (:mod:`~pytest_llmreplay.gate.store`),
so a key always names the same bytes. The cache is a file per test folder
(:class:`FolderCache`), to which a build appends the results it read: written for another store
or by another version, it is read again from the store.

Only results at commits of the drawn history are read (a name starts with its commit's first 12
hex digits). Results that cannot be read are cached as such, named in the build's summary, and
never fatal; so are interrupted ones (left out of every series, as the history leaves them out).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from ..gate.store import Store
from .extract import VERSION, extract

STATE = ".llmreplay-dashboard"  # the output folder's state: caches, not pages
PARALLEL_FROM = 2000  # results to read from which a build reads them in several processes


@dataclass
class Gathered:
    """What :func:`gather` found: ``tests``: test folder -> its results on the history, each
    ``(name, figures)``, in name order (oldest first within a commit); ``facts``: test folder ->
    each line's facts (:func:`~.extract.extract`); counts of the results
    ``read`` from the store this time and taken from the cache (``cached``), the ``unreadable``
    ones (why, for each) and the ``interrupted`` ones."""

    tests: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    facts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # folder -> line -> its facts
    read: int = 0
    cached: int = 0
    unreadable: list[str] = field(default_factory=list)
    interrupted: int = 0


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, replaced atomically (a killed build leaves the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
    os.replace(temporary, path)


def read_json(path: Path) -> Any:
    """The JSON at ``path``, or None when it is missing or not JSON (a cache is then rebuilt)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class FolderCache:
    """The figures of one test folder's results read so far: ``OUT/.llmreplay-dashboard/results/
    <folder>.jsonl``, a first line naming the store and :data:`~.extract.VERSION`, then a line
    per result (``name`` and its figures) and, before a line's first result, its ``facts``
    (``{"line": id, "facts": ...}``). A build appends what it read; a file of another store or
    version is written anew."""

    def __init__(self, out: Path, folder: str, label: str) -> None:
        self.path = out / STATE / "results" / f"{folder}.jsonl"
        self.header = {"store": label, "version": VERSION}
        self.results: dict[str, dict[str, Any]] = {}
        self.facts: dict[str, dict[str, Any]] = {}
        self.fresh = True  # nothing usable on disk: the next save writes the file whole
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return
        try:
            if not lines or json.loads(lines[0]) != self.header:
                return
            for line in lines[1:]:
                entry = json.loads(line)
                if "facts" in entry:
                    self.facts[entry["line"]] = entry["facts"]
                else:
                    self.results[entry.pop("name")] = entry
        except (ValueError, KeyError, TypeError):  # a torn or foreign file: read the store again
            self.results, self.facts = {}, {}
            return
        self.fresh = False

    def add(self, found: dict[str, dict[str, Any]]) -> None:
        """Keep ``found`` (name -> :func:`~.extract.extract`'s figures) here and on disk."""
        lines = []
        for name, figures in found.items():
            facts = figures.pop("facts", None)
            if facts is not None and figures["line"] not in self.facts:
                self.facts[figures["line"]] = facts
                lines.append({"line": figures["line"], "facts": facts})
            self.results[name] = figures
            lines.append({"name": name, **figures})
        if self.fresh:
            lines = [self.header] + [{"line": k, "facts": v} for k, v in self.facts.items()]
            lines += [{"name": name, **figures} for name, figures in self.results.items()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w" if self.fresh else "a", encoding="utf-8") as file:
            file.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
        self.fresh = False


def read_results(store: Store, folder: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """The figures of each of ``names`` in ``folder`` (:func:`~.extract.extract`), or why it
    cannot be read (``{"unreadable": why}``)."""
    found: dict[str, dict[str, Any]] = {}
    for key, record in store.read_many([f"{folder}/{name}" for name in names]):
        name = key.rsplit("/", 1)[1]
        if isinstance(record, LLMReplayError):
            found[name] = {"unreadable": str(record)}
            continue
        try:
            found[name] = extract(record)
        except (LLMReplayError, AttributeError, TypeError, ValueError) as exc:
            found[name] = {"unreadable": f"{store.label}/{key}: cannot draw its figures ({exc})"}
    return found


def read_all(
    store: Store, missing: dict[str, list[str]], workers: int
) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    """:func:`read_results` of each folder of ``missing``; in ``workers`` processes (a folder at
    a time each) when there are :data:`PARALLEL_FROM` results or more to read (a first build:
    reading and parsing is most of its time), else in this one."""
    if workers < 2 or sum(len(names) for names in missing.values()) < PARALLEL_FROM:
        for folder, names in missing.items():
            yield folder, read_results(store, folder, names)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    folders = list(missing)
    # spawned, not forked: a store's client (an object store's event loop thread) does not survive a fork
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        found = pool.map(read_results, [store] * len(folders), folders, [missing[f] for f in folders])
        yield from zip(folders, found, strict=True)


def default_workers() -> int:
    """The cores this process may use, at most 8: how many processes read a first build's results."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return min(cores, 8)


def gather(store: Store, out: Path, commits: Container[str], workers: int = 1) -> Gathered:
    """Every result of ``store`` at one of ``commits`` (ids of 12 hex digits), its figures from
    the cache in ``out`` or read now, by ``workers`` processes when many (:func:`read_all`)."""
    gathered = Gathered()
    names: dict[str, list[str]] = {}
    caches: dict[str, FolderCache] = {}
    for folder in sorted(store.names("")):
        names[folder] = sorted(n for n in store.names(folder) if n.endswith(".json") and n[:12] in commits)
        caches[folder] = FolderCache(out, folder, store.label)
    missing = {folder: [n for n in listed if n not in caches[folder].results] for folder, listed in names.items()}
    for folder, found in read_all(store, {folder: listed for folder, listed in missing.items() if listed}, workers):
        caches[folder].add(found)
    for folder, listed in names.items():
        gathered.read += len(missing[folder])
        gathered.cached += len(listed) - len(missing[folder])
        kept = []
        for name in listed:
            figures = caches[folder].results[name]
            if "unreadable" in figures:
                gathered.unreadable.append(figures["unreadable"])
            elif "interrupted" in figures:
                gathered.interrupted += 1
            else:
                kept.append((name, figures))
        if kept:
            gathered.tests[folder] = kept
            gathered.facts[folder] = caches[folder].facts
    return gathered


class DigestCache:
    """Values made from inputs that a digest names (a series' values, the keys of the results
    behind a verdict), kept in ``OUT/.llmreplay-dashboard/<name>.json``: :meth:`get` makes a
    value only for a digest it does not know; :meth:`save` keeps those asked for in this build."""

    def __init__(self, out: Path, name: str) -> None:
        self.path = out / STATE / f"{name}.json"
        found = read_json(self.path)
        self.known: dict[str, Any] = found if isinstance(found, dict) and found.get("version") == VERSION else {}
        self.used: dict[str, Any] = {"version": VERSION}
        self.made = 0

    def get(self, inputs: str, make: Callable[[], Any]) -> Any:
        digest = hashlib.sha256(inputs.encode()).hexdigest()[:24]
        if digest not in self.known:
            self.known[digest] = make()
            self.made += 1
        self.used[digest] = self.known[digest]
        return self.used[digest]

    def save(self) -> None:
        if self.made or len(self.used) != len(self.known):
            write_json(self.path, self.used)
