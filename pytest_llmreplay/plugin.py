"""The pytest plugin: options with ini twins, fixtures, the ``llmreplay`` marker, spec files,
per-test verdicts, the terminal summary and report files.

Imports nothing heavy at load time (numpy, formats, the simulator and tokenizers are imported
when a test first needs them), so pytest runs that do not use the plugin pay nothing for it.

Options (group ``llmreplay``; each has an ini key of the same name with ``_`` for ``-``):
see :data:`~pytest_llmreplay.plugin_options.OPTIONS`. Where replays go (:mod:`~pytest_llmreplay.target`): ``--llm-endpoint``
(a live server; with ``--llm-server-cmd`` the plugin starts it once for the session, waits until
healthy (up to ``--llm-server-timeout``, saying so every 10 s), stops it at the end, and a
watchdog stops it if pytest dies first), else ``--llm-offline`` (the simulator in virtual time), else the
simulator served over HTTP on a free loopback port, one per process (xdist worker).

Fixtures: ``llm_endpoint`` (the session's :class:`~pytest_llmreplay.target.Target`),
``llm_replay`` (``llm_replay("workloads/x.jsonl", concurrency=8, slo={...}) -> Result``),
``llm_result`` (the replay of the test's ``llmreplay`` marker), ``llm_workload``,
``llm_tokenizer``, ``llm_prompts``. Every replay of a test goes through the gate
(:mod:`~pytest_llmreplay.gate`) when the test body ends: SLOs, baseline, reports, verdict.
Ctrl-C or SIGTERM during a replay stops it, keeps what it measured, then stops the session
(:mod:`~pytest_llmreplay.interrupt`).

Under pytest-xdist each worker has its own simulator; replays against a live endpoint take a
file lock so that only one runs at a time across workers (concurrent perf tests distort each
other); the controller starts ``--llm-server-cmd`` and writes the session's reports from the
workers' per-test files and report sections.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from .errors import LLMReplayError
from .plugin_options import add_options, option, seed_option, server_timeout_option, check_bool_options, workers_option
from .terminal_lines import line_writer

RUNS = pytest.StashKey[list]()
OUTCOMES = pytest.StashKey[list]()
SESSION = pytest.StashKey["LLMSession"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class LLMSession:
    """The options of one pytest process, and what it starts lazily: tokenizer, target, gate."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        check_bool_options(config)
        self.seed = seed_option(config)
        from .spec import check_repeat

        try:
            self.repeat = check_repeat("--llm-repeat / llm_repeat", option(config, "llm_repeat"))
        except LLMReplayError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.cache_reset_missing = False
        self.endpoint_url = option(config, "llm_endpoint") or None
        self.api = option(config, "llm_api")
        self.server_cmd = option(config, "llm_server_cmd") or None
        self.server_timeout_s = server_timeout_option(config)
        if config.getoption("llm_offline"):  # on the command line it beats an ini endpoint
            if config.getoption("llm_endpoint"):
                raise pytest.UsageError("--llm-offline and --llm-endpoint exclude each other: the offline simulator has no URL")
            self.endpoint_url = self.server_cmd = None
        self.offline = bool(option(config, "llm_offline")) and not self.endpoint_url
        from .endpoints import APIS, check_endpoint_url

        if self.api not in APIS:
            raise pytest.UsageError(f"--llm-api / llm_api: expected one of {', '.join(APIS)}, got {self.api!r}")
        try:
            if self.endpoint_url:
                check_endpoint_url(self.endpoint_url)
        except LLMReplayError as exc:
            raise pytest.UsageError(f"--llm-endpoint / llm_endpoint: {exc}") from None
        if self.server_cmd and not self.endpoint_url:
            raise pytest.UsageError("--llm-server-cmd needs --llm-endpoint: the URL the started server listens on")
        from .endpoints import extra_body

        try:
            self.extra_body = extra_body("--llm-extra-body / llm_extra_body", option(config, "llm_extra_body"), bool(option(config, "llm_ignore_eos")))
        except LLMReplayError as exc:
            raise pytest.UsageError(str(exc)) from None
        if self.kind != "live":  # a name typo fails once, at start-up (the file is read when first used)
            from .sim.profile_files import profile_path

            try:
                profile_path(option(config, "llm_sim_profile"))
            except LLMReplayError as exc:
                raise pytest.UsageError(f"--llm-sim-profile / llm_sim_profile: {exc}") from None
        self.workers_count, self._workers = workers_option(config, self.kind), None
        self.compare_ref = option(config, "llm_compare") or None
        self.history: tuple[str, list[str]] | None = None
        if self.compare_ref is not None:
            from .baseline import reference_history

            try:
                self.history = reference_history(config.rootpath, self.compare_ref)
            except LLMReplayError as exc:
                raise pytest.UsageError(str(exc)) from None
        report = option(config, "llm_report")
        self.report_dir = Path(config.rootpath, report) if report else None
        from .store import FolderStore, open_store

        save = bool(option(config, "llm_save"))
        try:  # a store that cannot be used fails here, before anything is measured
            self.store = open_store(option(config, "llm_baseline_dir"), config.rootpath)
            if save or self.history is not None or isinstance(self.store, FolderStore):
                self.store.check(writing=save and not is_worker(config))
        except LLMReplayError as exc:
            raise pytest.UsageError(f"--llm-baseline-dir / llm_baseline_dir: {exc}") from None
        self.server: Any = None
        self._prompts: Any = None
        self._target: Any = None
        self._gate: Any = None
        self.reports: list[tuple[str, str, dict[str, float], dict[str, str]]] = []
        self.notes: list[tuple[str, str]] = []
        from .interrupt import Interruption

        self.interruption = Interruption()

    @property
    def kind(self) -> str:
        return "live" if self.endpoint_url else "offline" if self.offline else "sim-server"

    def describe(self) -> str:
        if self.kind == "live":
            started = " (started by --llm-server-cmd)" if self.server_cmd else ""
            extra = f", every request adds {json.dumps(self.extra_body)}" if self.extra_body else ""
            return f"endpoint {self.endpoint_url}{started}{extra}"
        profile = option(self.config, "llm_sim_profile")
        return f"simulator {profile} ({'offline, virtual time' if self.offline else 'over HTTP, wall clock'})"

    @property
    def prompts(self) -> Any:
        if self._prompts is None:
            from .prompts import PromptFactory
            from .tokenizer import load_tokenizer

            try:
                tokenizer = load_tokenizer(option(self.config, "llm_tokenizer"))
            except LLMReplayError as exc:
                raise LLMReplayError(f"--llm-tokenizer: {exc}") from None
            self._prompts = PromptFactory(tokenizer, seed=self.seed, tokenizer_option="--llm-tokenizer")
        return self._prompts

    @property
    def target(self) -> Any:
        """The session's :class:`~pytest_llmreplay.target.Target`, made (and started) once."""
        if self._target is None:
            self._target = self._make_target()
        return self._target

    def _make_target(self) -> Any:
        from .target import Target, live_fingerprint, sim_fingerprint, start_sim_server

        if self.kind == "live":
            model = option(self.config, "llm_model") or None
            key_env = option(self.config, "llm_api_key_env") or None
            fingerprint = live_fingerprint(self.endpoint_url, model, key_env)
            target = Target("live", self.endpoint_url, model=fingerprint["model"], model_named=model is not None, api=self.api, api_key_env=key_env, prompts=self.prompts, fingerprint=fingerprint,
                            extra_body=self.extra_body)
        else:
            from .sim.profile import load_profile

            name = option(self.config, "llm_sim_profile")
            try:
                profile = load_profile(name)
            except LLMReplayError as exc:
                raise LLMReplayError(f"--llm-sim-profile: {exc}") from None
            target = Target(self.kind, profile=profile, api=self.api, prompts=self.prompts, fingerprint=sim_fingerprint(profile, self.kind),
                            extra_body=self.extra_body)
            if self.kind == "sim-server":
                target.server = start_sim_server(name, option(self.config, "llm_tokenizer"), self.seed)
                target.url = target.server.url
        if self.extra_body:  # what every request also asks changes what is measured
            target.fingerprint["extra_body"] = self.extra_body
        self.config.hook.pytest_llmreplay_fingerprint(config=self.config, fingerprint=target.fingerprint)
        return target

    @property
    def gate(self) -> Any:
        if self._gate is None:
            from .gate import Gate

            self._gate = Gate(
                rootdir=self.config.rootpath, fingerprint=self.target.fingerprint, store=self.store,
                save=bool(option(self.config, "llm_save")),
                fail_on_regression=bool(option(self.config, "llm_fail_on_regression")), report_dir=self.report_dir,
                history=self.history,
            )
        return self._gate

    def extra_metric_names(self) -> tuple[str, ...]:
        return tuple(name for found in self.config.hook.pytest_llmreplay_metrics() for name in found)

    def replay(self, spec: Any, salt: str, repeat: int = 0, repeats: int = 1) -> tuple[Any, dict[str, Any]]:
        """Replay a :class:`~pytest_llmreplay.spec.PerfSpec` on the target: run ``repeat`` of
        ``repeats``; (the Result, with plugins' metrics added to its summary; the run's seed and
        cache reset, see :mod:`~pytest_llmreplay.repeats`). Generated prompts are salted with
        ``salt`` (the workload's digest): see :meth:`~pytest_llmreplay.prompts.PromptFactory.salted`."""
        from .formats import load_workload
        from .metrics import Result
        from .driver import Replay
        from .slo import parse_slos, per_request_limits
        from .target import no_cache_reset_note

        workload = load_workload(spec.workload, format=spec.format, **spec.format_options)
        target = self.target
        with live_lock(target):
            reset = target.reset_cache() if repeats > 1 else None
            if repeats > 1 and reset is None and target.kind == "live" and not self.cache_reset_missing:
                self.cache_reset_missing = True
                self.notes.append(("llmreplay repeats", no_cache_reset_note(target.url)))
            if spec.capacity is not None:  # a search: the result is the point at capacity; a line per point as it ends
                from .search import find_capacity

                result = find_capacity(workload, target, self.prompts.salted(salt), spec.capacity, spec.settings, progress=line_writer(self.config)).result
            else:
                if self.workers_count is not None:
                    run = self.workers.replay(workload, target.endpoint(repeat), self.prompts.salted(salt), spec.settings, stop_on_signals=True)
                else:
                    run = Replay(workload, target.endpoint(repeat), self.prompts.salted(salt), spec.settings, clock=target.clock(), stop_on_signals=True).run()
                result = Result(run, gpus=target.gpus, goodput=per_request_limits(parse_slos(spec.slo, self.extra_metric_names())))
        for found in self.config.hook.pytest_llmreplay_metrics():
            for name, compute in found.items():
                if name in result.summary:
                    raise LLMReplayError(f"pytest_llmreplay_metrics: {name!r} is already a metric of the summary; name yours differently")
                result.summary[name] = dict(compute(result))
        return result, {"seed": target.run_seed(repeat), "cache_reset": reset}

    @property
    def workers(self) -> Any:
        """The session's Ray workers (``--llm-workers``), started once, when first used."""
        if self._workers is None:
            from .workers import RayWorkers

            self._workers = RayWorkers(self.workers_count, option(self.config, "llm_ray_address") or None)
        return self._workers

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()
        if self._target is not None:
            self._target.close()

    # hooks (this object is registered as a plugin): gather every test's figures and tables
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        from .interrupt import INTERRUPTED_PROPERTY

        figures = {name: value for name, value in report.user_properties if str(name).startswith("llmreplay.") and name != INTERRUPTED_PROPERTY}
        outcome = report.outcome + (" (interrupted)" if INTERRUPTED_PROPERTY in dict(report.user_properties) else "")
        texts: dict[str, str] = {}
        for name, text in report.sections:
            if name.startswith("llmreplay"):
                texts[name] = f"{texts[name]}\n\n{text}" if name in texts else text
        if figures or texts:
            self.reports.append((report.nodeid, outcome, figures, texts))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """An overview row per measured run (a test's second ``llm_replay`` call or a named one
        is a row of its own), then the baseline comparisons; with -v every table."""
        if not self.reports:
            return
        from .report import summary_table

        terminalreporter.write_sep("=", "llmreplay")
        terminalreporter.write_line(summary_table([(nodeid, outcome, figures) for nodeid, outcome, figures, _ in self.reports]))
        verbose = self.config.getoption("verbose") > 0
        for _, _, _, texts in self.reports:
            for name in ("llmreplay", "llmreplay baseline") if verbose else ("llmreplay baseline",):
                if texts.get(name):
                    terminalreporter.write_line("\n" + texts[name])
        for name, text in self.notes:
            terminalreporter.write_line(f"\n{name}: {text}")


class live_lock:
    """Hold an exclusive file lock per live URL while replaying, across xdist workers (and any
    other pytest process on this machine); a no-op for the simulator."""

    def __init__(self, target: Any) -> None:
        self.path = None
        if target.kind == "live":
            import hashlib
            import tempfile

            self.path = Path(tempfile.gettempdir()) / f"llmreplay-{hashlib.sha256(target.url.encode()).hexdigest()[:16]}.lock"

    def __enter__(self) -> None:
        if self.path is not None:
            import fcntl

            self.file = open(self.path, "a")
            fcntl.flock(self.file, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            self.file.close()  # closing releases the lock


def session_of(config: pytest.Config) -> LLMSession:
    return config.stash[SESSION]


def pytest_configure(config: pytest.Config) -> None:
    from .config_warnings import warn_if_a_value_moved_the_rootdir, warn_of_ignored_options

    warn_if_a_value_moved_the_rootdir(config)
    config.addinivalue_line("markers", "llmreplay(workload, slo=None, regression=None, capacity=None, format=None, format_options=None, **replay_settings): replay a workload and check SLOs (see pytest_llmreplay.spec)")
    session = LLMSession(config)
    config.stash[SESSION] = session
    warn_of_ignored_options(config, session.kind, session.server_cmd)
    config.pluginmanager.register(session, "llmreplay-session")
    config.pluginmanager.register(session.interruption, "llmreplay-interruption")
    for found in config.hook.pytest_llmreplay_formats():
        from .formats import register_format

        for module in found:
            try:
                register_format(module)
            except LLMReplayError as exc:
                raise pytest.UsageError(f"pytest_llmreplay_formats: {exc}") from None
    if session.report_dir is not None and not is_worker(config):
        from .report_files import claim_report_dir

        try:
            claim_report_dir(session.report_dir)
        except LLMReplayError as exc:
            raise pytest.UsageError(f"--llm-report / llm_report: {exc}") from None


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session):
    yield  # the terminal's header first, so that the waiting lines follow it
    state = session_of(session.config)
    if state.server_cmd and not is_worker(session.config):
        from .server_process import ServerProcess

        state.server = ServerProcess(state.server_cmd, state.endpoint_url, startup_timeout_s=state.server_timeout_s, timeout_option="--llm-server-timeout",
                                     progress=line_writer(session.config))
        try:
            state.server.start()
        except LLMReplayError as exc:
            state.server = None
            raise pytest.UsageError(f"--llm-server-cmd: {exc}") from None


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session_of(session.config)
    state.close()
    if state.server is not None:
        died = state.server.exit_message()
        state.server.stop()
        if died:
            state.notes.append(("llmreplay server", f"warning: {died}"))
    if state.report_dir is not None and not is_worker(session.config):
        from .report_files import write_session_reports

        written = write_session_reports(state.report_dir)
        if written:
            state.notes.append(("llmreplay reports", "wrote " + ", ".join(str(p) for p in written)))


def pytest_report_header(config: pytest.Config) -> str:
    state = session_of(config)
    tokenizer = option(config, "llm_tokenizer") or "bundled (llmreplay-bpe-4k)"
    save = "save" if option(config, "llm_save") else "no save"
    compare = f"compare with {state.history[0]}" if state.history else "no compare"
    return f"llmreplay: {state.describe()}; baselines {state.store.label} ({save}, {compare}); tokenizer {tokenizer}, seed {state.seed}"


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
    """A :class:`~pytest_llmreplay.prompts.PromptFactory` for the session's tokenizer and seed
    (each replay salts it with its workload's digest: ``llm_prompts.salted(digest)``)."""
    return _fail_on_user_error(lambda: session_of(pytestconfig).prompts)


@pytest.fixture(scope="session")
def llm_endpoint(pytestconfig: pytest.Config):
    """The session's :class:`~pytest_llmreplay.target.Target`: the simulator (started once per
    process) or the live server; ``.name``, ``.kind``, ``.url``, ``.fingerprint``."""
    return _fail_on_user_error(lambda: session_of(pytestconfig).target)


@pytest.fixture(scope="session")
def llm_workload(pytestconfig: pytest.Config) -> Callable[..., Any]:
    """``llm_workload(path, format=None, **options) -> Workload``; relative paths start at the
    rootdir; a bad file fails the test with one line naming file, line and field."""
    from .formats import load_workload

    cache: dict[tuple, Any] = {}

    def load(path: str | Path, format: str | None = None, **options: Any):
        resolved = Path(path) if Path(path).is_absolute() else pytestconfig.rootpath / path
        key = (str(resolved), format, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = _fail_on_user_error(lambda: load_workload(resolved, format=format, **options))
        return cache[key]

    return load


def _perf_run(state: LLMSession, test: str, spec: Any) -> Any:
    """Replay a checked :class:`~pytest_llmreplay.spec.PerfSpec`; return (PerfRun, Result)."""
    from .baseline import workload_digest
    from .gate import PerfRun

    state.interruption.check_not_interrupted()
    digest = workload_digest(spec.workload)
    repeats = 1 if spec.capacity is not None else spec.repeat or state.repeat  # a search runs once
    runs = []
    for index in range(repeats):
        runs.append(state.replay(spec, salt=digest, repeat=index, repeats=repeats))
        if state.interruption.observe(runs[-1][0], test):  # Ctrl-C: no more repeats (see interrupt.py)
            state.notes.append(("llmreplay interrupted", state.interruption.note()))
            break
    workload = {"path": os.path.relpath(spec.workload, state.config.rootpath), "format": spec.format, "digest": digest}
    results = [result for result, _ in runs]
    return PerfRun(test, results[-1], workload, spec.slo, spec.regression, earlier=results[:-1], facts=[facts for _, facts in runs]), results[-1]


@pytest.fixture
def llm_replay(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> Callable[..., Any]:
    """``llm_replay(workload, *, name=None, format=None, format_options=None, slo=None,
    regression=None, repeat=None, **replay_settings) -> Result`` (with repeats: the last run's).
    Each call is one measured run of the test:
    checked against ``slo``, compared and stored (baseline key: the test id, plus ``name`` or
    the call's number after the first) when the test body ends."""
    state = session_of(pytestconfig)
    runs = request.node.stash.setdefault(RUNS, [])

    def run(workload: str | Path, *, name: str | None = None, **spec: Any) -> Any:
        test = request.node.nodeid + (f"::{name}" if name else f"::{len(runs) + 1}" if runs else "")
        if any(r.test == test for r in runs):
            pytest.fail(f"llm_replay: name {name!r} is already used by another run of this test", pytrace=False)
        from .spec import parse_spec

        checked = _fail_on_user_error(lambda: parse_spec({"workload": workload, **spec}, pytestconfig.rootpath, state.extra_metric_names()))
        perf, result = _fail_on_user_error(lambda: _perf_run(state, test, checked))
        runs.append(perf)
        return result

    return run


@pytest.fixture
def llm_result(request: pytest.FixtureRequest, llm_replay: Callable[..., Any]) -> Any:
    """The :class:`~pytest_llmreplay.metrics.Result` of the test's ``llmreplay`` marker."""
    from .spec import marker_settings

    marker = request.node.get_closest_marker("llmreplay")
    if marker is None:
        pytest.fail("llm_result: the test has no @pytest.mark.llmreplay(workload=...) marker", pytrace=False)
    return llm_replay(**_fail_on_user_error(lambda: marker_settings(marker.args, marker.kwargs)))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A malformed ``llmreplay`` marker is a collection error of its test's module, as a bad
    ``parametrize`` is (a marker added after collection is checked by ``llm_result``)."""
    marker = metafunc.definition.get_closest_marker("llmreplay")
    if marker is not None:
        from .spec import marker_settings

        try:
            marker_settings(marker.args, marker.kwargs)
        except LLMReplayError as exc:
            message = str(exc)
        else:
            return
        pytest.fail(f"In {metafunc.definition.name}: {message}", pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test carrying the marker replays its workload even if it does not ask for llm_result."""
    for item in items:
        if item.get_closest_marker("llmreplay") is not None and isinstance(item, pytest.Function) and "llm_result" not in item.fixturenames:
            item.fixturenames.append("llm_result")


# ------------------------------------------------------------------------ verdicts


def finish_runs(item: pytest.Item) -> str | None:
    """Put the item's runs through the gate; the failure text, if any."""
    runs = item.stash.get(RUNS, [])
    if not runs:
        return None
    gate = session_of(item.config).gate
    outcomes = item.stash.setdefault(OUTCOMES, [])
    failures = []
    for run in runs:
        try:
            outcome = gate.finish(run)
        except LLMReplayError as exc:
            failures.append(f"{run.test}: {exc}")
            continue
        outcomes.append(outcome)
        item.user_properties.extend(sorted((f"{key}{'' if run.test == item.nodeid else ' ' + run.test.rsplit('::', 1)[1]}", value) for key, value in outcome.figures.items()))
        if outcome.interrupted:
            from .interrupt import INTERRUPTED_PROPERTY

            item.user_properties.append((INTERRUPTED_PROPERTY, outcome.interrupted))
        if outcome.failure:
            failures.append(outcome.failure if len(runs) == 1 else f"{run.test}\n{outcome.failure}")
    runs.clear()
    return "\n\n".join(failures) or None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    try:
        value = yield
    except BaseException:
        finish_runs(item)  # measured data is kept; the body's own failure stands
        raise
    failure = finish_runs(item)
    if failure:
        pytest.fail(failure, pytrace=False)
    return value


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.when == "call":
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
    """A ``*.llmreplay.yaml|yml|toml`` file: one perf test (see :mod:`~pytest_llmreplay.spec`)."""

    def collect(self):
        from .spec import parse_spec, read_spec_file

        state = session_of(self.config)
        try:
            spec = parse_spec(read_spec_file(self.path), self.path.parent, state.extra_metric_names())
        except LLMReplayError as exc:
            raise self.CollectError(f"{self.path}: {exc}") from None
        yield SpecItem.from_parent(self, name=self.path.name.split(".llmreplay.")[0], spec=spec)


class SpecItem(pytest.Item):
    """A spec file's test: its :class:`~pytest_llmreplay.spec.PerfSpec`, checked at collection."""

    def __init__(self, *, spec: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec

    def runtest(self) -> None:
        state = session_of(self.config)
        run, _ = _perf_run(state, self.nodeid, self.spec)
        self.stash.setdefault(RUNS, []).append(run)
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
