"""Which server a collected test declares (:mod:`~pytest_llmreplay.plugin.servers`' config), as
collection sees it: the ordering by server, the xdist groups and the header line each ask, and the
config is parsed once per item (kept in its stash)."""

from __future__ import annotations

from typing import Any

import pytest

from ..errors import LLMReplayError

# an item's declared server as collection parsed it (declared_server), parsed once
DECLARED_SERVER = pytest.StashKey[Any]()


def declared_server(item: pytest.Item) -> Any:
    """The :class:`~pytest_llmreplay.plugin.servers.ServerConfig` an item declares where
    collection sees it (:func:`parsed_server`), or None: none, or a bad one (the test fails
    with the error when it runs); parsed once per item, as the ordering, the xdist groups and
    the header line each ask."""
    if DECLARED_SERVER not in item.stash:
        callspec = getattr(item, "callspec", None)
        try:
            parsed = parsed_server(item, callspec.params.get("llm_server") if callspec is not None else None)
        except LLMReplayError:
            parsed = None
        item.stash[DECLARED_SERVER] = parsed
    return item.stash[DECLARED_SERVER]


def parsed_server(item: pytest.Item, parameter: Any) -> Any:
    """The server config an item declares (its spec file's ``server``, its marker's, else
    ``parameter``, its ``llm_server``), or None; raises LLMReplayError for a bad one."""
    from .spec import PerfSpec

    spec = getattr(item, "spec", None)
    if isinstance(spec, PerfSpec):  # a spec file's item (hooks.SpecItem)
        return spec.server
    from .spec import marker_arguments

    marked = marker_arguments(item)
    value = marked[1].get("server") if marked is not None else None
    if value is None:
        value = parameter
    if value is None:
        return None
    from .servers import parse_server

    return parse_server(value)
