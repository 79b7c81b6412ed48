"""The store's results, each read once: the figures of every result read so far
(:func:`~.extract.extract`) are kept in the output folder, so that a rebuild reads only the
results saved since.

**Keyed by the result's key** (``<test folder>/<name>``): every store kind gives each result a
name no other result gets and never replaces or removes a file (:mod:`~pytest_llmreplay.gate.store`),
so a key always names the same bytes. The cache is a file per test folder (:class:`FolderCache`):
its results as arrays (:class:`Results`: a row per result, a column per figure), which a build
loads in a few milliseconds however many results it holds, and writes anew when it read new
results of the folder; written for another store or by another version, it is read again from
the store.

Only results at commits of the drawn history are read (a name starts with its commit's first 12
hex digits). Results that cannot be read are cached as such, named in the build's summary, and
never fatal; so are partial ones (interrupted, or an incomplete capacity search: left out of
every series, as the history leaves them out).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import LLMReplayError
from ..gate.store import Store
from .extract import OUTCOME, VERSION, extract

STATE = ".llmreplay-dashboard"  # the output folder's state: caches, not pages
PARALLEL_FROM = 2000  # results to read from which a build reads them in several processes


@dataclass
class Gathered:
    """What :func:`gather` found: ``tests``: test folder -> its :class:`Results` and the names of
    those at commits of the history that a series draws (not unreadable, not partial), in
    name order (oldest first within a commit); counts of the results ``read`` from the store
    this time and taken from the cache (``cached``), the ``unreadable`` ones (why, for each) and
    the ``partial`` ones."""

    tests: dict[str, tuple[Results, list[str]]] = field(default_factory=dict)
    read: int = 0
    cached: int = 0
    unreadable: list[str] = field(default_factory=list)
    partial: int = 0


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


class Results:
    """One test folder's results read so far, as arrays: row ``i`` is the result ``names[i]``,
    of the line ``lines[i]`` (:func:`~.extract.line_of`); ``figures[i, j]`` its figure
    ``keys[j]`` (NaN where not measured); ``low``/``high`` the figure's interval (``low`` NaN:
    none; ``high`` NaN with a ``low``: open); its ``slo``, ``failed_by`` and ``plugin_metrics``
    as JSON, ``outcomes[ends[i - 1]:ends[i]]`` (UTF-8 bytes, decoded for the results a page
    shows the outcome of: :meth:`outcome`);
    ``dirty[i]``: whether it was saved from a dirty tree (drawn only where its commit has no
    clean result of its line, as the gate takes it: :func:`~.series.test_lines`);
    ``facts``: line -> its facts; ``skipped``: name -> ``{"unreadable": why}`` or
    ``{"partial": why}``, the results no series draws."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lines: list[str] = []
        self.dirty: list[bool] = []
        self.keys: list[str] = []
        self.figures = self.low = self.high = np.empty((0, 0))
        self.outcomes: npt.NDArray[np.uint8] = np.empty(0, dtype=np.uint8)
        self.ends: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self.facts: dict[str, dict[str, Any]] = {}
        self.skipped: dict[str, dict[str, str]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.skipped or name in self.rows

    @functools.cached_property
    def rows(self) -> dict[str, int]:
        """name -> its row."""
        return {name: row for row, name in enumerate(self.names)}

    def add(self, found: Mapping[str, Mapping[str, Any]]) -> None:
        """Append ``found`` (name -> :func:`~.extract.extract`'s figures) as rows."""
        drawn = {name: figures for name, figures in found.items() if "line" in figures}
        self.skipped.update({name: dict(figures) for name, figures in found.items() if "line" not in figures})
        for name in drawn:  # unreadable before, mended since
            self.skipped.pop(name, None)
        if not drawn:
            return
        self.keys += [
            key for key in dict.fromkeys(k for f in drawn.values() for k in f["figures"]) if key not in self.keys
        ]
        column = {key: index for index, key in enumerate(self.keys)}
        added = np.full((3, len(drawn), len(self.keys)), np.nan)
        for row, figures in enumerate(drawn.values()):
            for key, value in figures["figures"].items():
                added[0, row, column[key]] = value
            for key, (low, high) in figures["intervals"].items():
                added[1, row, column[key]] = low
                added[2, row, column[key]] = np.nan if high is None else high
            self.facts.setdefault(figures["line"], figures["facts"])
        width = len(self.keys)
        old = [
            np.pad(array, ((0, 0), (0, width - array.shape[1])), constant_values=np.nan)
            for array in (self.figures, self.low, self.high)
        ]
        self.figures, self.low, self.high = (
            np.concatenate([o.reshape(-1, width), a]) for o, a in zip(old, added, strict=True)
        )
        self.names += list(drawn)
        self.lines += [figures["line"] for figures in drawn.values()]
        self.dirty += [bool(figures.get("dirty")) for figures in drawn.values()]
        texts = [
            json.dumps({part: figures[part] for part in OUTCOME}, separators=(",", ":")).encode()
            for figures in drawn.values()
        ]
        start = int(self.ends[-1]) if len(self.ends) else 0
        self.outcomes = np.concatenate([self.outcomes, np.frombuffer(b"".join(texts), dtype=np.uint8)])
        self.ends = np.concatenate([self.ends, start + np.cumsum([len(text) for text in texts], dtype=np.int64)])
        self.__dict__.pop("rows", None)

    def outcome(self, row: int) -> dict[str, Any]:
        """What :func:`~.extract.outcome` and :func:`~.extract.point_slos` read of row ``row``:
        its figures and its :data:`OUTCOME` parts."""
        figures = {key: float(value) for key, value in zip(self.keys, self.figures[row], strict=True) if value == value}
        start = int(self.ends[row - 1]) if row else 0
        return {"figures": figures, **json.loads(self.outcomes[start : self.ends[row]].tobytes())}


class FolderCache:
    """The :class:`Results` of one test folder, kept in ``OUT/.llmreplay-dashboard/results/
    <folder>.npz``: its arrays, and the rest as JSON in a ``meta`` array, with the store and
    :data:`~.extract.VERSION` it was written for (a file of another store or version, or one
    that does not read back, is read again from the store). A build that read new results of
    the folder writes the file anew (atomically)."""

    def __init__(self, out: Path, folder: str, label: str) -> None:
        self.path = out / STATE / "results" / f"{folder}.npz"
        self.header = {"store": label, "version": VERSION}
        self.results = self.load() or Results()

    def load(self) -> Results | None:
        try:
            with np.load(self.path, allow_pickle=False) as stored:
                meta = json.loads(stored["meta"].tobytes())
                arrays = [stored[name] for name in ("figures", "low", "high")]
                outcomes, ends = stored["outcomes"], stored["ends"]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # missing, torn or foreign
            return None
        if not isinstance(meta, dict) or meta.get("header") != self.header:
            return None
        results = Results()
        try:
            results.names, results.lines, results.keys = meta["names"], meta["lines"], meta["keys"]
            results.dirty = meta["dirty"]
            results.facts, results.skipped = meta["facts"], meta["skipped"]
        except (KeyError, TypeError):
            return None
        shape = (len(results.names), len(results.keys))
        if (
            any(array.shape != shape for array in arrays)
            or len(results.lines) != shape[0]
            or len(results.dirty) != shape[0]
            or ends.shape != shape[:1]
        ):
            return None
        if shape[0] and (int(ends[-1]) != len(outcomes) or (np.diff(ends, prepend=0) < 0).any()):
            return None
        results.figures, results.low, results.high = arrays
        results.outcomes, results.ends = outcomes, ends
        return results

    def add(self, found: Mapping[str, Mapping[str, Any]]) -> None:
        """Keep ``found`` (name -> :func:`~.extract.extract`'s figures) here and on disk."""
        results = self.results
        results.add(found)
        meta = {
            "header": self.header,
            **{part: getattr(results, part) for part in ("names", "lines", "dirty", "keys", "facts", "skipped")},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.stem}.{os.getpid()}.tmp.npz")
        np.savez(
            temporary,
            figures=results.figures,
            low=results.low,
            high=results.high,
            outcomes=results.outcomes,
            ends=results.ends,
            meta=np.frombuffer(json.dumps(meta, separators=(",", ":")).encode(), dtype=np.uint8),
        )
        os.replace(temporary, self.path)


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
    """The cores this process may use, at most 8: how many processes read a first build's
    results, and threads compare latest verdicts."""
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
    # an unreadable result is read again at every build (a hand-mended file keeps its name); rare, so cheap
    missing = {
        folder: [
            n
            for n in listed
            if n not in caches[folder].results or "unreadable" in caches[folder].results.skipped.get(n, {})
        ]
        for folder, listed in names.items()
    }
    for folder, found in read_all(store, {folder: listed for folder, listed in missing.items() if listed}, workers):
        caches[folder].add(found)
    for folder, listed in names.items():
        gathered.read += len(missing[folder])
        gathered.cached += len(listed) - len(missing[folder])
        results = caches[folder].results
        kept = []
        for name in listed:
            skipped = results.skipped.get(name)
            if skipped is None:
                kept.append(name)
            elif "unreadable" in skipped:
                gathered.unreadable.append(skipped["unreadable"])
            else:
                gathered.partial += 1
        if kept:
            gathered.tests[folder] = (results, kept)
    return gathered


class DigestCache:
    """Values made from inputs that a digest names (a series' values, the keys of the results
    behind a verdict), kept in ``OUT/.llmreplay-dashboard/<name>.json``: :meth:`get` makes a
    value only for a digest it does not know (:meth:`find`, then :meth:`put` for a value made
    elsewhere); :meth:`save` keeps those asked for in this build."""

    def __init__(self, out: Path, name: str) -> None:
        self.path = out / STATE / f"{name}.json"
        found = read_json(self.path)
        self.known: dict[str, Any] = found if isinstance(found, dict) and found.get("version") == VERSION else {}
        self.used: dict[str, Any] = {"version": VERSION}
        self.made = 0

    def find(self, inputs: str | bytes) -> tuple[str, Any]:
        """The digest of ``inputs`` and its value, None when not known."""
        digest = hashlib.sha256(inputs.encode() if isinstance(inputs, str) else inputs).hexdigest()[:24]
        value = self.known.get(digest)
        if value is not None:
            self.used[digest] = value
        return digest, value

    def put(self, digest: str, value: Any) -> Any:
        """Keep ``value``, made for ``digest``; returns it."""
        self.known[digest] = self.used[digest] = value
        self.made += 1
        return value

    def get(self, inputs: str | bytes, make: Callable[[], Any]) -> Any:
        digest, value = self.find(inputs)
        return self.put(digest, make()) if value is None else value

    def save(self) -> None:
        if self.made or len(self.used) != len(self.known):
            write_json(self.path, self.used)
