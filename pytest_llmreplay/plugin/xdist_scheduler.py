"""The ``--dist loadgroup`` scheduler that keeps a declared server's tests on one worker; see
:mod:`~pytest_llmreplay.plugin.xdist_groups` for how it learns which server each test declares.
Imported only on an xdist controller (it imports pytest-xdist)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling

from .xdist_groups import read_groups


class ServerGroupScheduling(LoadGroupScheduling):
    """``loadgroup`` whose groups are the declared servers' (scope ``llmreplay-server-DIGEST``) and
    the ``xdist_group`` markers' that the workers wrote; any other test is grouped as
    ``loadgroup`` groups it."""

    def __init__(self, config: pytest.Config, log: Any, groups_folder: Path) -> None:
        super().__init__(config, log)
        self.groups_folder = groups_folder
        self.groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self.groups is None:  # first called once every worker has collected (and written its file)
            self.groups = read_groups(self.groups_folder)
        group = self.groups.get(nodeid)
        return group if group is not None else super()._split_scope(nodeid)
