"""Warnings at configure time (``PytestConfigWarning``) about options that will not do what their
user meant: a value pytest took for a test path, and an option the session's mode ignores.

Ignored options (:func:`warn_of_ignored_options`), each warned about once, naming it:

- ``--llm-server-timeout`` without ``--llm-server-cmd``: no server is started, so none is waited for;
- ``--llm-sim-profile`` with ``--llm-endpoint``: the live server is measured, not the simulator;
- ``--llm-model`` with the simulator (offline or served): it serves its profile's model whatever
  the request names (``llmreplay sim --model`` would refuse another name with a 404);
- ``--llm-metrics-interval`` offline: the in-process simulator has no ``/metrics`` to scrape;
- ``--llm-api`` offline: the in-process simulator takes every request in one form (its figures
  are the same over the four APIs: ``tests/test_sim_apis.py``);
- ``--llm-cache-reset`` offline: every run of the in-process simulator has a fresh engine, so
  there is no cache to keep or empty;
- ``--llm-fail-on-regression``, ``--llm-fail-on-unstable`` without ``--llm-compare``: nothing
  is compared, so nothing can fail a test (a CI job that left ``--llm-compare`` out gated nothing,
  and said nothing).

The offline ones say that a test declaring its own server (``server=``) does use the option: only
the session's in-process simulator ignores it. An option counts as given when it is on the command
line, or in the ini file with a value other than its default. One set only in the ini file is not
warned about when the command line picked the mode (``--llm-offline`` or ``--llm-endpoint``; for
the two ``fail`` options, ``--llm-compare``): the ini file may configure the other mode.
"""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import pytest

from .options import DEFAULTS, OPTIONS

DECLARED = (
    "; tests that declare a server (server=) use it"  # the offline ones: only the session's simulator ignores them
)
IGNORED = {  # option (ini key) -> why it does nothing, for the modes where it does nothing
    "llm_server_timeout": "ignored without --llm-server-cmd: no server is started here, so none is waited for",
    "llm_sim_profile": "ignored with --llm-endpoint: the live server is measured, not the simulator",
    "llm_model": "ignored by the simulator, which serves its profile's model whatever the request names; it applies to --llm-endpoint"
    + " and to declared servers",
    "llm_metrics_interval": "ignored offline: the in-process simulator has no /metrics to scrape (-o llm_offline=false serves it over HTTP)"
    + DECLARED,
    "llm_api": "ignored offline: the in-process simulator takes every request in one form, and measures the same over any API (-o llm_offline=false serves it over HTTP, on each API's route)"
    + DECLARED,
    "llm_cache_reset": "ignored offline: every run of the in-process simulator starts on a fresh engine, its cache empty (-o llm_offline=false serves it over HTTP)"
    + DECLARED,
    "llm_fail_on_regression": "ignored without --llm-compare: nothing is compared, so no regression can fail a test",
    "llm_fail_on_unstable": "ignored without --llm-compare: nothing is compared, so no comparison can be unstable",
}
FAIL_OPTIONS = ("llm_fail_on_regression", "llm_fail_on_unstable")  # what --llm-compare turns on


def warn_of_ignored_options(config: pytest.Config, kind: str, server_cmd: str | None) -> None:
    """Warn once per option the session ignores (module docstring); ``kind``: the session's
    target kind (offline, sim-server, live); ``server_cmd``: the server command it starts, if
    any."""
    compare_on_command_line = config.getoption("llm_compare") is not None
    comparing = compare_on_command_line or config.getini("llm_compare") not in (None, "", DEFAULTS["llm_compare"])
    ignored = {
        "llm_server_timeout": server_cmd is None,
        "llm_sim_profile": kind == "live",
        "llm_model": kind != "live",
        "llm_metrics_interval": kind == "offline",
        "llm_api": kind == "offline",
        "llm_cache_reset": kind == "offline",
        **{ini: not comparing for ini in FAIL_OPTIONS},
    }
    mode_on_command_line = bool(config.getoption("llm_offline") or config.getoption("llm_endpoint"))
    for ini, why in IGNORED.items():
        on_command_line = config.getoption(ini) is not None
        in_ini = config.getini(ini) not in (None, "", DEFAULTS.get(ini))
        picked = compare_on_command_line if ini in FAIL_OPTIONS else mode_on_command_line
        if ignored[ini] and (on_command_line or (in_ini and not picked)):
            flag = "--" + ini.replace("_", "-")
            config.issue_config_time_warning(pytest.PytestConfigWarning(f"{flag} / {ini}: {why}"), stacklevel=2)


def warn_if_a_value_moved_the_rootdir(config: pytest.Config) -> None:
    """pytest chooses the rootdir and configfile before it knows this plugin's options, so the
    value of ``--llm-report /abs/dir`` (space form, not ``=``) is taken for a test path there: when
    that path lies outside the common folder of the invocation dir and the test paths, the rootdir
    moves up to a common ancestor and the project's ini file may be lost. Warn, naming the
    option and its ``=`` form."""
    flags = {flag for flag, _, kind, _, _ in OPTIONS if kind != "bool"}
    invocation = config.invocation_params.dir
    places = [invocation] + [_existing_dir(invocation, arg.split("::")[0]) for arg in config.args]
    base = Path(os.path.commonpath([str(p) for p in places if p is not None]))
    args = [str(arg) for arg in config.invocation_params.args]
    for flag, value in pairwise(args):
        folder = _existing_dir(invocation, value) if flag in flags else None
        if folder is not None and not folder.is_relative_to(base):
            found = f"configfile {config.inipath}" if config.inipath else "no configfile"
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(
                    f"{flag} {value}: pytest took {value} for a test path when it chose the rootdir, which is now {config.rootpath} "
                    f"({found}); write {flag}={value}"
                ),
                stacklevel=2,
            )


def _existing_dir(base: Path, arg: str) -> Path | None:
    """The folder pytest's rootdir search takes from ``arg``: itself, or a file's parent; None
    when there is no such path."""
    path = Path(base, arg).resolve()
    if not path.exists():
        return None
    return path if path.is_dir() else path.parent
