"""The pytest plugin: options with ini twins, fixtures, the ``llmreplay`` marker, spec files,
per-test verdicts, the terminal summary and report files.

Imports nothing heavy at load time (numpy, formats, the simulator and tokenizers are imported
when a test first needs them), so pytest runs that do not use the plugin pay nothing for it.

Options (group ``llmreplay``; each has an ini key of the same name with ``_`` for ``-``):
see :data:`~pytest_llmreplay.plugin.options.OPTIONS`. Where replays go (:mod:`~pytest_llmreplay.target`): ``--llm-endpoint``
(a live server; with ``--llm-server-cmd`` the plugin starts it once for the session, waits until
healthy (up to ``--llm-server-timeout``, saying so every 10 s), stops it at the end, and a
watchdog stops it if pytest dies first), else the built-in simulator: in process in virtual time
(``llm_offline``, the default: seconds per test, deterministic), or with ``llm_offline = false``
(or ``--llm-workers``, which need a server) served over HTTP on a free loopback port, one per
process (xdist worker). A test may declare its own server instead (``server`` in its marker or
spec file, or an ``llm_server`` parameter): :mod:`~pytest_llmreplay.plugin.servers` pools them,
and collection groups the tests by the server they declare.

Fixtures: ``llm_endpoint`` (the test's :class:`~pytest_llmreplay.target.Target`: its declared
server's, else the session's),
``llm_server`` (the test's declared server config, None unless parametrized),
``llm_replay`` (``llm_replay("workloads/x.jsonl", concurrency=8, slo={...}) -> Result``),
``llm_result`` (the replay of the test's ``llmreplay`` marker), ``llm_workload``,
``llm_tokenizer``, ``llm_prompts``. Every replay of a test goes through the gate
(:mod:`~pytest_llmreplay.plugin.verdict`) when the test body ends: SLOs, baseline, reports, verdict.
Ctrl-C or SIGTERM during a replay stops it, keeps what it measured, then stops the session
(:mod:`~pytest_llmreplay.plugin.interrupt`).

The session's state (options checked once, what it starts lazily) and its replays are
:mod:`~pytest_llmreplay.plugin.session`'s; this module holds the hooks and fixtures that drive them.

Under pytest-xdist each worker has its own simulator; replays against a live endpoint take a
file lock so that only one runs at a time across workers (concurrent perf tests distort each
other); the controller starts ``--llm-server-cmd`` and writes the session's reports from the
workers' per-test files and report sections.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..errors import LLMReplayError
from .declared_servers import declared_server, parsed_server
from .options import add_options, option
from .session import RECORDS_DIR_KEY, LLMSession, is_worker, perf_run
from .session_summary import SummaryHooks, interrupted_report
from .terminal_lines import line_writer

RUNS = pytest.StashKey[list]()
OUTCOMES = pytest.StashKey[list]()
SESSION = pytest.StashKey["LLMSession"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def session_of(config: pytest.Config) -> LLMSession:
    return config.stash[SESSION]


def pytest_configure(config: pytest.Config) -> None:
    from .config_warnings import warn_if_a_value_moved_the_rootdir, warn_of_ignored_options

    warn_if_a_value_moved_the_rootdir(config)
    config.addinivalue_line(
        "markers",
        "llmreplay(workload, slo=None, regression=None, capacity=None, format=None, format_options=None, **replay_settings): replay a workload and check SLOs (see pytest_llmreplay.plugin.spec)",
    )
    session = LLMSession(config)
    config.stash[SESSION] = session
    warn_of_ignored_options(config, session.kind, session.server_cmd)
    config.pluginmanager.register(SummaryHooks(session), "llmreplay-session")
    config.pluginmanager.register(session.interruption, "llmreplay-interruption")
    config.pluginmanager.register(session.unfinished, "llmreplay-unfinished")
    for found in config.hook.pytest_llmreplay_formats():
        from ..workloads.formats import register_format

        for module in found:
            try:
                register_format(module)
            except LLMReplayError as exc:
                raise pytest.UsageError(f"pytest_llmreplay_formats: {exc}") from None
    if session.report_dir is not None and not is_worker(config):
        from ..report.files import claim_report_dir

        try:
            claim_report_dir(session.report_dir)
        except LLMReplayError as exc:
            raise pytest.UsageError(f"--llm-report / llm_report: {exc}") from None


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session):
    yield  # the terminal's header first, so that the waiting lines follow it
    state = session_of(session.config)
    if state.server_cmd and not is_worker(session.config):
        from ..replayer.server_process import ServerProcess
        from ..target import cache_reset_env

        state.server = ServerProcess(
            state.server_cmd,
            state.endpoint_url,
            startup_timeout_s=state.server_timeout_s,
            timeout_option="--llm-server-timeout",
            env=cache_reset_env(os.environ, state.cache_reset),
            progress=line_writer(session.config),
        )
        try:
            state.server.start()
        except LLMReplayError as exc:
            state.server = None
            raise pytest.UsageError(f"--llm-server-cmd: {exc}") from None


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session_of(session.config)
    state.close()
    if not session.config.option.collectonly:  # collecting runs no test: none is left unjudged
        state.not_judged = state.unfinished.found(session, {nodeid for nodeid, *_ in state.reports})
    if state.not_judged.any:
        state.notes.append(("llmreplay", state.not_judged.line()))
    if state.server is not None:
        died = state.server.exit_message()
        state.server.stop()
        if died:
            state.notes.append(("llmreplay server", f"warning: {died}"))
    if state.records_dir is not None and not is_worker(session.config):
        from ..report.files import write_session_reports

        outcomes = {nodeid: outcome.split(" ")[0] for nodeid, outcome, *_ in state.reports}  # pytest's
        written, failed = write_session_reports(
            state.records_dir, state.report_dir, state.summary_path, state.not_judged, outcomes
        )
        state.remove_private_records()
        if failed:
            state.notes.append(("llmreplay reports", f"warning: {failed}"))
        if written:
            state.notes.append(("llmreplay reports", "wrote " + ", ".join(str(p) for p in written)))
    from .xdist_groups import remove_groups_folder

    remove_groups_folder(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, on the controller: each worker writes its tests' records where the
    controller reads them (:func:`~pytest_llmreplay.plugin.session.records_folder`), and, under
    ``--dist loadgroup``, which server each test declares (:mod:`~pytest_llmreplay.plugin.xdist_groups`);
    the ``--dist`` mode goes to each worker (its own reads ``no``)."""
    from .xdist_groups import DIST_KEY, GROUPS_DIR_KEY, groups_folder

    records_dir = session_of(node.config).records_dir
    if records_dir is not None:
        node.workerinput[RECORDS_DIR_KEY] = str(records_dir)
    node.workerinput[DIST_KEY] = node.config.getvalue("dist")
    folder = groups_folder(node.config)
    if folder is not None:
        node.workerinput[GROUPS_DIR_KEY] = str(folder)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist, on the controller: under ``--dist loadgroup``, a scheduler that keeps each
    declared server's tests on one worker; otherwise xdist's own."""
    from .xdist_groups import groups_folder

    folder = groups_folder(config)
    if folder is None:
        return None
    from .xdist_scheduler import ServerGroupScheduling

    return ServerGroupScheduling(config, log, folder)


def pytest_report_header(config: pytest.Config) -> str:
    state = session_of(config)
    tokenizer = option(config, "llm_tokenizer") or "bundled (llmreplay-bpe-4k)"
    save = "save" if option(config, "llm_save") else "no save"
    compare = f"compare with {state.history[0]}" if state.history else "no compare"
    return f"llmreplay: {state.describe()}; baselines {state.store.label} ({save}, {compare}); tokenizer {tokenizer}, seed {state.seed}"


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """When tests declare their own servers, one line under the header (which names the
    session's endpoint) saying how many do, on how many configs, and where the others run."""
    declared = [server for item in items if (server := declared_server(item)) is not None]
    if not declared:
        return None
    state = session_of(config)
    configs = len({server.digest for server in declared})
    where = (
        f"{len(declared)} test{'s' if len(declared) != 1 else ''} declare{'s' if len(declared) == 1 else ''} "
        f"a server ({configs} config{'s' if configs != 1 else ''})"
    )
    if state.kind == "live":
        return f"llmreplay servers: {where}, not started: --llm-endpoint serves every test"
    from .not_judged import is_perf_test

    perf = [item for item in items if is_perf_test(item)]
    others = len(perf) - len(declared)
    rest = (
        "; the session's endpoint above serves none of them"
        if others <= 0
        else "; the other perf test runs on the session's endpoint above"
        if others == 1
        else f"; the other {others} perf tests run on the session's endpoint above"
    )
    return f"llmreplay servers: {where}, each started once when first needed{rest}"


# ------------------------------------------------------------------------ fixtures


def _fail_on_user_error(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except LLMReplayError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)  # outside the except: the error is printed once, not chained


@pytest.fixture(scope="session")
def llm_tokenizer(pytestconfig: pytest.Config):
    """The tokenizer of ``--llm-tokenizer`` (the bundled one by default), loaded once."""
    return _fail_on_user_error(lambda: session_of(pytestconfig).prompts.tokenizer)


@pytest.fixture(scope="session")
def llm_prompts(pytestconfig: pytest.Config):
    """A :class:`~pytest_llmreplay.workloads.prompts.PromptFactory` for the session's tokenizer and seed
    (each replay salts it with its workload's digest and its test's id: ``llm_prompts.salted(f"{digest} {test}")``)."""
    return _fail_on_user_error(lambda: session_of(pytestconfig).prompts)


@pytest.fixture
def llm_endpoint(request: pytest.FixtureRequest, pytestconfig: pytest.Config, llm_server: Any):
    """Where this test's replays go, a :class:`~pytest_llmreplay.target.Target`
    (``.name``, ``.kind``, ``.url``, ``.fingerprint``): the server the test declares (its
    marker's ``server`` or its ``llm_server`` parameter; started by the pool if it is not
    running), else the session's: the simulator (started once per process) or the live server.
    ``--llm-endpoint`` wins over a declared server, as it does for the replays."""
    state = session_of(pytestconfig)
    return _fail_on_user_error(lambda: state.target_for(parsed_server(request.node, llm_server), request.node.nodeid))


@pytest.fixture(scope="session")
def llm_workload(pytestconfig: pytest.Config) -> Callable[..., Any]:
    """``llm_workload(path, format=None, **options) -> Workload``; relative paths start at the
    rootdir; a bad file fails the test with one line naming file, line and field."""
    from ..workloads.formats import load_workload

    cache: dict[tuple, Any] = {}

    def load(path: str | Path, format: str | None = None, **options: Any):
        resolved = Path(path) if Path(path).is_absolute() else pytestconfig.rootpath / path
        key = (str(resolved), format, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = _fail_on_user_error(lambda: load_workload(resolved, format=format, **options))
        return cache[key]

    return load


@pytest.fixture
def llm_server() -> Any:
    """The test's declared server when no ``server=`` is given: None (the session's endpoint);
    ``@pytest.mark.parametrize("llm_server", [CONFIG, ...])`` runs a test on each config, with
    ids made of their commands (:func:`pytest_make_parametrize_id`)."""
    return None


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """A ``llm_server`` parameter's id: its command without the port (``llmreplay sim --profile P``)."""
    if argname != "llm_server":
        return None
    from .servers import parse_server

    try:
        return parse_server(val).label
    except LLMReplayError:
        return None  # pytest's own id; the test fails with the error when it runs


@pytest.fixture
def llm_replay(request: pytest.FixtureRequest, pytestconfig: pytest.Config, llm_server: Any) -> Callable[..., Any]:
    """``llm_replay(workload, *, name=None, format=None, format_options=None, slo=None,
    regression=None, repeat=None, server=llm_server, **replay_settings) -> Result`` (with
    repeats: the last run's). Each call is one measured run of the test:
    checked against ``slo``, compared and stored (baseline key: the test id, plus ``name`` or
    the call's number after the first) when the test body ends."""
    state = session_of(pytestconfig)
    runs = request.node.stash.setdefault(RUNS, [])

    def run(workload: str | Path, *, name: str | None = None, **spec: Any) -> Any:
        test = request.node.nodeid + (f"::{name}" if name else f"::{len(runs) + 1}" if runs else "")
        if any(r.test == test for r in runs):
            pytest.fail(f"llm_replay: name {name!r} is already used by another run of this test", pytrace=False)
        from .spec import parse_spec

        if llm_server is not None:
            spec.setdefault("server", llm_server)
        checked = _fail_on_user_error(
            lambda: parse_spec({"workload": workload, **spec}, pytestconfig.rootpath, state.extra_metric_names())
        )
        perf, result = _fail_on_user_error(lambda: perf_run(state, test, checked))
        runs.append(perf)
        keep_runs_if_server_died(request.node, perf)
        skip_body_if_interrupted(request.node, result)
        return result

    return run


@pytest.fixture
def llm_result(request: pytest.FixtureRequest, llm_replay: Callable[..., Any]) -> Any:
    """The :class:`~pytest_llmreplay.metrics.result.Result` of the test's ``llmreplay`` marker."""
    from .spec import marker_arguments, marker_settings

    marked = marker_arguments(request.node)
    if marked is None:
        pytest.fail("llm_result: the test has no @pytest.mark.llmreplay(workload=...) marker", pytrace=False)
    return llm_replay(**_fail_on_user_error(lambda: marker_settings(*marked)))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A malformed ``llmreplay`` marker is a collection error of its test's module, as a bad
    ``parametrize`` is (a marker added after collection is checked by ``llm_result``)."""
    if metafunc.definition.get_closest_marker("llmreplay") is None:  # no import for a test that is not a perf test
        return
    from .spec import marker_arguments, marker_settings

    try:
        marker_settings(*(marker_arguments(metafunc.definition) or ((), {})))
    except LLMReplayError as exc:
        pytest.fail(f"In {metafunc.definition.name}: {exc}", pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test carrying the marker replays its workload even if it does not ask for llm_result;
    tests are grouped by the server they declare (:func:`declared_server`), so that each
    declared server starts once (on one xdist worker under ``--dist loadgroup``:
    :mod:`~pytest_llmreplay.plugin.xdist_groups`)."""
    from .servers import order_by_server
    from .xdist_groups import warn_servers_per_worker, write_groups

    def digest_of(item: pytest.Item) -> str | None:
        server = declared_server(item)
        return server.digest if server is not None else None

    items[:] = order_by_server(items, declared_server)
    write_groups(config, items, digest_of)
    warn_servers_per_worker(config, items, digest_of)
    for item in items:
        if (
            item.get_closest_marker("llmreplay") is not None
            and isinstance(item, pytest.Function)
            and "llm_result" not in item.fixturenames
        ):
            item.fixturenames.append("llm_result")


# ------------------------------------------------------------------------ verdicts


def finish_runs(item: pytest.Item, body_failure: str | None = None) -> str | None:
    """Put the item's runs through the gate; the failure text, if any. ``body_failure``: why the
    test's body failed, for the reports (:meth:`~pytest_llmreplay.plugin.verdict.Gate.finish`)."""
    runs = item.stash.get(RUNS, [])
    if not runs:
        return None
    gate = session_of(item.config).gate
    outcomes = item.stash.setdefault(OUTCOMES, [])
    failures = []
    for run in runs:
        try:
            outcome = gate.finish(run, body_failure)
        except LLMReplayError as exc:
            failures.append(f"{run.test}: {exc}")
            continue
        outcomes.append(outcome)
        item.user_properties.extend(
            sorted(
                (f"{key}{'' if run.test == item.nodeid else ' ' + run.test.rsplit('::', 1)[1]}", value)
                for key, value in outcome.figures.items()
            )
        )
        if outcome.interrupted:
            from .interrupt import INTERRUPTED_PROPERTY

            item.user_properties.append((INTERRUPTED_PROPERTY, outcome.interrupted))
        if outcome.failure:
            failures.append(outcome.failure if len(runs) == 1 else f"{run.test}\n{outcome.failure}")
    runs.clear()
    return "\n\n".join(failures) or None


def keep_runs_if_server_died(item: pytest.Item, run: Any) -> None:
    """When the test's declared server died after its first run, gate the runs before it now
    (stored and reported, their count said) and fail the test with the server's error: what was
    measured is never lost, and no body judges fewer runs than it asked for."""
    if run.server_died is None:
        return
    failure = finish_runs(item, "its server died")
    pytest.fail(run.server_died + (f"\n\n{failure}" if failure else ""), pytrace=False)


def skip_body_if_interrupted(item: pytest.Item, result: Any) -> None:
    """When a signal stopped ``result``'s replay, gate what it measured now (stored and reported,
    marked interrupted) and skip the rest of the test: a body must not judge a partial result.
    pytest reports the test ``interrupted`` (:func:`pytest_report_teststatus`); a result that
    could not be saved fails it instead."""
    signal = result.run.interrupted
    if not signal:
        return
    failure = finish_runs(item)
    if failure:
        pytest.fail(failure, pytrace=False)
    pytest.skip(
        f"interrupted: {signal} stopped the replay; what it measured is kept, and the test body did not run on a partial result"
    )


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """An interrupted perf test is counted and shown as ``interrupted`` (``I``), not as skipped."""
    if report.when in ("setup", "call") and interrupted_report(report):
        return "interrupted", "I", ("INTERRUPTED", {"yellow": True})
    return None


def _finish_after(item: pytest.Item, exc: BaseException, what: str) -> None:
    """``what`` (the body, a fixture's setup) raised ``exc`` after a replay: the runs go through
    the gate all the same (measured data is kept), the exception stands, with the replay's own
    failure as a note (Python >= 3.11: pytest prints notes under the error)."""
    skipped = isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception))
    failure = finish_runs(item, None if skipped else f"{what} raised {type(exc).__name__}")
    if failure and not skipped and hasattr(exc, "add_note"):
        exc.add_note(f"llmreplay: the replay failed as well:\n{failure}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    try:
        return (yield)
    except BaseException as exc:  # a fixture after the replay's (llm_result) raised or skipped
        _finish_after(item, exc, "a fixture's setup")
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    try:
        value = yield
    except BaseException as exc:
        _finish_after(item, exc, "the test body")
        raise
    failure = finish_runs(item)
    if failure:
        pytest.fail(failure, pytrace=False)
    return value


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.when == "call" or (call.when == "setup" and not report.passed):  # a fixture's skip or error after a replay
        for outcome in item.stash.get(OUTCOMES, []):
            report.sections.append(("llmreplay", outcome.text))
            if outcome.baseline_text:
                report.sections.append(("llmreplay baseline", outcome.baseline_text))
    return report


# ------------------------------------------------------------------------ spec files


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    from .spec import SPEC_SUFFIXES

    if file_path.name.endswith(SPEC_SUFFIXES):
        return SpecFile.from_parent(parent, path=file_path)
    return None


class SpecFile(pytest.File):
    """A ``*.llmreplay.yaml|yml|toml`` file: one perf test (see :mod:`~pytest_llmreplay.plugin.spec`)."""

    def collect(self):
        from .spec import parse_spec, read_spec_file

        state = session_of(self.config)
        try:
            spec = parse_spec(read_spec_file(self.path), self.path.parent, state.extra_metric_names())
        except LLMReplayError as exc:
            raise self.CollectError(f"{self.path}: {exc}") from None
        yield SpecItem.from_parent(self, name=self.path.name.split(".llmreplay.")[0], spec=spec)


class SpecItem(pytest.Item):
    """A spec file's test: its :class:`~pytest_llmreplay.plugin.spec.PerfSpec`, checked at collection."""

    def __init__(self, *, spec: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec

    def runtest(self) -> None:
        state = session_of(self.config)
        run, result = perf_run(state, self.nodeid, self.spec)
        self.stash.setdefault(RUNS, []).append(run)
        keep_runs_if_server_died(self, run)
        skip_body_if_interrupted(self, result)
        failure = finish_runs(self)
        if failure:
            raise SpecFailure(failure)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, (SpecFailure, LLMReplayError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"llmreplay spec {self.name}"


class SpecFailure(AssertionError):
    """A spec test's breached SLOs or called regressions (the message is the tables)."""
