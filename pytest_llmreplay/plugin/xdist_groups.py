"""Under ``pytest -n N --dist loadgroup``, the tests of one declared server run on one worker,
and so do the tests of one ``xdist_group`` marker.

pytest-xdist's ``loadgroup`` sends each group of tests to one worker, a group being the tests
whose node id ends in ``@NAME``; under pytest 9 the ``xdist_group`` marker no longer makes that
suffix (xdist 3.8 writes ``item._nodeid``, which pytest 9's ``nodeid`` does not read), and the
controller, which collects nothing, cannot see which server a test declares. So:

1. the controller makes a folder (:func:`groups_folder`) and passes it to each worker
   (``pytest_configure_node``, key :data:`GROUPS_DIR_KEY`);
2. each worker, once it has collected, writes ``WORKERID.json`` there: node id -> its group
   (:func:`write_groups`): ``llmreplay-server-DIGEST`` for a test that declares a server (the
   config's digest), else the name of its ``xdist_group`` marker (the sorted names joined by
   ``_``, as xdist joins them); tests with neither are left out;
3. the controller's scheduler (:class:`~pytest_llmreplay.plugin.xdist_scheduler.ServerGroupScheduling`)
   reads them when it first splits the collection into groups: a group's tests go to one
   worker, every other test is a group of its own (as ``loadgroup`` does for tests without a
   group). Every worker has written its file by then: it writes before it reports its collection.

Other ``--dist`` modes are left alone: ``load`` spreads tests one by one, and each worker starts
the servers its tests declare; the first worker says so in a warning (:func:`warn_servers_per_worker`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

GROUPS_DIR_KEY = "llmreplay_server_groups_dir"  # the xdist workerinput key of the groups folder
DIST_KEY = "llmreplay_dist"  # ... and of the controller's --dist mode
GROUPS_FOLDER = pytest.StashKey[Path]()


def groups_folder(config: pytest.Config) -> Path | None:
    """On an xdist controller running ``--dist loadgroup``, its groups folder (made once, on first
    use; :func:`remove_groups_folder` removes it); else None."""
    if not config.pluginmanager.hasplugin("dsession") or config.getvalue("dist") != "loadgroup":
        return None
    if GROUPS_FOLDER not in config.stash:
        config.stash[GROUPS_FOLDER] = Path(tempfile.mkdtemp(prefix="llmreplay-groups-"))
    return config.stash[GROUPS_FOLDER]


def remove_groups_folder(config: pytest.Config) -> None:
    folder = config.stash.get(GROUPS_FOLDER, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def group_of(item: pytest.Item, server_digest: str | None) -> str | None:
    """The item's group: its declared server's (``server_digest``), else its ``xdist_group``
    markers' names, else None."""
    if server_digest is not None:
        return f"llmreplay-server-{server_digest}"
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "_".join(sorted(names)) or None


def write_groups(
    config: pytest.Config, items: Iterable[pytest.Item], server_digest_of: Callable[[Any], str | None]
) -> None:
    """On a worker given a groups folder: write ``WORKERID.json``, node id -> :func:`group_of`
    for the items that have a group (``server_digest_of(item)``: the digest of the server the
    item declares, or None)."""
    workerinput = getattr(config, "workerinput", {})
    folder = workerinput.get(GROUPS_DIR_KEY)
    if folder is None:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item, server_digest_of(item))) is not None}
    target = Path(folder) / f"{workerinput['workerid']}.json"
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(groups))
    partial.replace(target)  # whole or absent: the controller never reads half a file


def warn_servers_per_worker(
    config: pytest.Config, items: Iterable[pytest.Item], server_digest_of: Callable[[Any], str | None]
) -> None:
    """On xdist's first worker (gw0; every worker collects every test) under a ``--dist`` mode
    other than ``loadgroup``, when tests declare servers: a warning, relayed to the
    controller's summary, that each worker may start every config its tests use, so that up to
    workers x ``--llm-max-servers`` run at once (on one GPU, more models than it holds)."""
    from .options import max_servers_option

    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or workerinput.get("workerid") != "gw0" or workerinput.get(DIST_KEY) == "loadgroup":
        return
    dist = workerinput.get(DIST_KEY, "load")
    digests = [digest for item in items if (digest := server_digest_of(item)) is not None]
    if not digests:
        return
    workers, configs = int(workerinput["workercount"]), len(set(digests))
    warnings.warn(
        pytest.PytestWarning(
            f"llmreplay: {len(digests)} test{'s' if len(digests) > 1 else ''} declare a server "
            f"({configs} config{'s' if configs > 1 else ''}); under --dist {dist} each of the {workers} workers may "
            f"start every config its tests use, up to {workers * max_servers_option(config)} servers at once "
            "(--llm-max-servers counts per worker); run with --dist loadgroup to start each config once, on one worker"
        ),
        stacklevel=1,
    )


def read_groups(folder: Path) -> dict[str, str]:
    """Node id -> group, from every worker's file in ``folder``."""
    groups: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")):
        groups.update(json.loads(path.read_text()))
    return groups
