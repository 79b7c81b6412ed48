"""One pytest process's llmreplay session, apart from the pytest hooks that drive it (plugin/hooks.py).

:class:`LLMSession` reads and checks the plugin's options once (a bad one is a
``pytest.UsageError`` naming the option and its ini twin), and starts lazily what replays need:
the tokenizer and prompts, the :class:`~pytest_llmreplay.target.Target` (the simulator, or the
live server; a test's declared server is one of :mod:`~pytest_llmreplay.plugin.servers`' pool),
the :class:`~pytest_llmreplay.plugin.verdict.Gate`, the Ray workers. :func:`perf_run` replays
a test's checked :class:`~pytest_llmreplay.plugin.spec.PerfSpec` on it, repeats and Ctrl-C included;
:class:`~pytest_llmreplay.plugin.live_lock.live_lock` keeps replays against one live URL from overlapping across processes.
What the session gathers for the terminal summary (``reports``, ``notes``) is filled by the hooks
and by the replays.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import LLMReplayError
from ..wording import counted
from .options import (
    DEFAULTS,
    cache_reset_option,
    check_bool_options,
    max_servers_option,
    metrics_interval_option,
    option,
    seed_option,
    server_timeout_option,
    workers_option,
)

if TYPE_CHECKING:
    from ..replayer.workers import RayWorkers
    from .servers import ServerConfig, ServerPool


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


RECORDS_DIR_KEY = "llmreplay_records_dir"  # the xdist workerinput key of the controller's records folder


def refuse_or_warn_of_an_empty_store(config: pytest.Config, store: Any, empty: str) -> None:
    """A store named for comparing that holds no result (``empty``: why,
    :meth:`~pytest_llmreplay.gate.store.Store.nothing_stored`): a mistyped one gated nothing,
    every test "has no stored result" and passed. A folder that does not exist is refused; any
    other is warned of once, naming a store much like it where there is one (``did you mean``:
    ``results-h100`` beside ``results-a100`` may be a typo or a new store, and a pull request's
    job runs before its main branch's first save)."""
    from ..gate.store import FolderStore, refuse_empty

    if isinstance(store, FolderStore) and not store.root.exists():
        raise refuse_empty(empty, store.similar())
    if not is_worker(config):
        near = store.similar()
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"--llm-baseline-dir / llm_baseline_dir: {empty}{f' (did you mean {near}?)' if near else ''}: "
                "nothing is compared until a job saves there (--llm-save); if it should hold results, check the name"
            ),
            stacklevel=2,
        )


def records_folder(
    config: pytest.Config, report_dir: Path | None, summary_path: Path | None
) -> tuple[Path | None, bool]:
    """Where each perf test's report record (one JSON file per test) goes, for the session's
    reports, and whether that folder is this session's own temporary one: ``DIR/tests`` with
    ``--llm-report DIR``; else, when a Markdown summary is wanted (``--llm-summary-md``, or
    ``$GITHUB_STEP_SUMMARY`` set by GitHub Actions), a temporary folder that the controller makes
    and passes to its xdist workers (``pytest_configure_node``) and removes at the end; else None,
    and no record is written."""
    if report_dir is not None:
        return report_dir / "tests", False
    if is_worker(config):
        given = config.workerinput.get(RECORDS_DIR_KEY)  # type: ignore[attr-defined]  # xdist sets workerinput on a worker's config
        return (Path(given) if given else None), False
    if summary_path is None and not os.environ.get("GITHUB_STEP_SUMMARY"):
        return None, False
    import tempfile

    return Path(tempfile.mkdtemp(prefix="llmreplay-records-")), True


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
        self.cache_reset_missing = False  # a repeat on a prefix cache not emptied was named
        self.cache_reset = cache_reset_option(config)
        self.endpoint_url = option(config, "llm_endpoint") or None
        self.api = option(config, "llm_api")
        self.server_cmd = option(config, "llm_server_cmd") or None
        self.server_timeout_s = server_timeout_option(config)
        self.max_servers = max_servers_option(config)
        self._servers: ServerPool | None = None
        self.declared_ignored = False  # the note that --llm-endpoint overrides declared servers is given
        self.metrics_interval_s = metrics_interval_option(config)
        if config.getoption("llm_offline"):  # on the command line it beats an ini endpoint
            if config.getoption("llm_endpoint"):
                raise pytest.UsageError(
                    "--llm-offline and --llm-endpoint exclude each other: the offline simulator has no URL"
                )
            self.endpoint_url = self.server_cmd = None
        # offline by default; workers need a server, so --llm-workers serves the simulator over HTTP
        # unless --llm-offline itself is on the command line (then workers_option refuses the pair)
        workers_asked = option(config, "llm_workers") not in (None, "")
        self.offline = (
            bool(option(config, "llm_offline"))
            and not self.endpoint_url
            and (bool(config.getoption("llm_offline")) or not workers_asked)
        )
        from ..replayer.apis import APIS
        from ..replayer.endpoints import check_endpoint_url

        if self.api not in APIS:
            raise pytest.UsageError(f"--llm-api / llm_api: expected one of {', '.join(APIS)}, got {self.api!r}")
        try:
            if self.endpoint_url:
                check_endpoint_url(self.endpoint_url)
        except LLMReplayError as exc:
            raise pytest.UsageError(f"--llm-endpoint / llm_endpoint: {exc}") from None
        if self.server_cmd and not self.endpoint_url:
            raise pytest.UsageError("--llm-server-cmd needs --llm-endpoint: the URL the started server listens on")
        from ..replayer.endpoints import extra_body

        try:
            self.extra_body = extra_body(
                "--llm-extra-body / llm_extra_body",
                option(config, "llm_extra_body"),
                bool(option(config, "llm_ignore_eos")),
            )
        except LLMReplayError as exc:
            raise pytest.UsageError(str(exc)) from None
        if self.kind != "live":  # a name typo fails once, at start-up (the file is read when first used)
            from ..sim.profile_files import profile_path

            try:
                profile_path(option(config, "llm_sim_profile"))
            except LLMReplayError as exc:
                raise pytest.UsageError(f"--llm-sim-profile / llm_sim_profile: {exc}") from None
        self.workers_count = workers_option(config, self.kind)
        self._workers: RayWorkers | None = None
        self.compare_ref = option(config, "llm_compare")
        if self.compare_ref is not None and not self.compare_ref.strip():  # an unset CI variable: no silent gate-off
            raise pytest.UsageError(
                "--llm-compare / llm_compare: empty; expected a commit, tag or branch"
                " (bare --llm-compare: the merge-base with the default branch)"
            )
        self.history: tuple[str, list[str]] | None = None
        if self.compare_ref is not None:
            from ..gate.git import reference_history

            try:
                self.history = reference_history(config.rootpath, self.compare_ref)
            except LLMReplayError as exc:
                raise pytest.UsageError(str(exc)) from None
        report = option(config, "llm_report")
        if report is not None and not report.strip():
            raise pytest.UsageError("--llm-report / llm_report: empty; expected a folder for the reports")
        self.report_dir = Path(config.rootpath, report) if report is not None else None
        summary = option(config, "llm_summary_md")
        if summary is not None and not summary.strip():
            raise pytest.UsageError(
                "--llm-summary-md / llm_summary_md: empty; expected a file for the Markdown summary"
            )
        self.summary_path = Path(config.rootpath, summary) if summary is not None else None
        self.records_dir, self.private_records = records_folder(config, self.report_dir, self.summary_path)
        from ..gate.store import FolderStore
        from ..gate.store_url import open_store

        save = bool(option(config, "llm_save"))
        if save:  # a result stored as 'nogit' no comparison would find
            from ..gate.git import check_git_readable

            try:
                check_git_readable(config.rootpath, "--llm-save")
            except LLMReplayError as exc:
                raise pytest.UsageError(str(exc)) from None
        try:  # a store that cannot be used fails here, before anything is measured
            named = option(config, "llm_baseline_dir")
            self.store = open_store(named, config.rootpath)
            if save or self.history is not None or isinstance(self.store, FolderStore):
                self.store.check(writing=save and not is_worker(config))
            if (
                self.history is not None
                and not save
                and named != DEFAULTS["llm_baseline_dir"]  # before any --llm-save: "no stored result", said per test
                and (empty := self.store.nothing_stored())
            ):
                refuse_or_warn_of_an_empty_store(config, self.store, empty)
        except LLMReplayError as exc:
            raise pytest.UsageError(f"--llm-baseline-dir / llm_baseline_dir: {exc}") from None
        self.server: Any = None
        self._prompts: Any = None
        self._target: Any = None
        self._gate: Any = None
        self.reports: list[tuple[str, str, dict[str, float], dict[str, str]]] = []
        self.notes: list[tuple[str, str]] = []
        from ..report.rows import ALL_JUDGED
        from .interrupt import Interruption
        from .not_judged import Unfinished

        self.interruption = Interruption()
        self.unfinished = Unfinished()
        self.not_judged = ALL_JUDGED  # found when the session finishes (Unfinished.found)

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
            from ..workloads.prompts import PromptFactory
            from ..workloads.tokenizer import load_tokenizer

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
        from ..target import Target, live_target, sim_fingerprint, start_sim_server

        if self.kind == "live":
            assert self.endpoint_url is not None  # the kind is live when there is one
            model = option(self.config, "llm_model") or None
            key_env = option(self.config, "llm_api_key_env") or None
            target = live_target(
                self.endpoint_url, model, "--llm-endpoint", self.api, key_env, self.prompts, self.extra_body
            )
        else:
            from ..sim.profile import load_profile

            name = option(self.config, "llm_sim_profile")
            try:
                profile = load_profile(name)
            except LLMReplayError as exc:
                raise LLMReplayError(f"--llm-sim-profile: {exc}") from None
            target = Target(
                self.kind,
                profile=profile,
                api=self.api,
                prompts=self.prompts,
                fingerprint=sim_fingerprint(profile, self.kind),
                extra_body=self.extra_body,
            )
            if self.kind == "sim-server":
                target.server = start_sim_server(name, option(self.config, "llm_tokenizer"), self.seed)
                target.url = target.server.url
        return self._with_session_settings(target)

    def _with_session_settings(self, target: Any) -> Any:
        """``target`` with the session's settings: its /metrics scrape interval, cache resets
        (``--llm-cache-reset``), and its fingerprint's additions (plugins' fields; the extra body
        is the target's own)."""
        target.metrics_interval_s = self.metrics_interval_s
        if not self.cache_reset:
            target.without_cache_reset()
        self.config.hook.pytest_llmreplay_fingerprint(config=self.config, fingerprint=target.fingerprint)
        return target

    def target_for(self, server: ServerConfig | None, test: str) -> Any:
        """Where ``test`` runs: its declared ``server`` (started by the pool if it is not running),
        else the session's :attr:`target`; ``--llm-endpoint`` wins over a declared server, said
        once in the notes."""
        if server is None:
            return self.target
        if self.kind == "live":
            target = self.target  # an endpoint that cannot be reached raises here: it served no test
            if not self.declared_ignored:
                self.declared_ignored = True
                self.notes.append(
                    (
                        "llmreplay servers",
                        f"--llm-endpoint {self.endpoint_url} served every test: the declared servers were not started",
                    )
                )
            return target
        return self.servers.target(server, self._declared_target, test)

    def check_server(self, server: ServerConfig | None) -> None:
        """Raise LLMReplayError (exit status, the log's last lines) if ``server`` was started and died."""
        if server is not None and self._servers is not None:
            self._servers.check(server)

    def _declared_target(self, server: ServerConfig, url: str) -> Any:
        from ..target import live_target

        target = live_target(
            url,
            option(self.config, "llm_model") or None,
            f"server {server.cmd!r} at",
            self.api,
            option(self.config, "llm_api_key_env") or None,
            self.prompts,
            self.extra_body,
        )
        target.fingerprint["server"] = server.fingerprint
        return self._with_session_settings(target)

    @property
    def servers(self) -> ServerPool:
        """The pool of declared servers, made when a test first declares one; logs go to
        ``--llm-report``'s ``servers/`` folder, else to pytest's temporary folder."""
        if self._servers is None:
            from ..target import cache_reset_env
            from .servers import ServerPool
            from .terminal_lines import line_writer

            self._servers = ServerPool(
                self.max_servers,
                self._server_logs,
                line_writer(self.config),
                cache_reset_env(os.environ, self.cache_reset),
            )
        return self._servers

    def _server_logs(self) -> Path:
        """``--llm-report``'s ``servers/``, else pytest's basetemp's ``llmreplay-servers/``; an
        xdist worker's in a folder of its own (``gw0/``) there."""
        if self.report_dir is not None:
            folder = self.report_dir / "servers"
        else:
            factory = self.config._tmp_path_factory  # type: ignore[attr-defined]  # pytest's tmp_path_factory, set by its tmpdir plugin
            folder = factory.getbasetemp() / "llmreplay-servers"
        return folder / self.config.workerinput["workerid"] if is_worker(self.config) else folder  # type: ignore[attr-defined]  # xdist sets workerinput on a worker's config

    @property
    def gate(self) -> Any:
        if self._gate is None:
            from .verdict import Gate

            self._gate = Gate(
                rootdir=self.config.rootpath,
                store=self.store,
                save=bool(option(self.config, "llm_save")),
                fail_on_regression=bool(option(self.config, "llm_fail_on_regression")),
                fail_on_unstable=bool(option(self.config, "llm_fail_on_unstable")),
                report_dir=self.report_dir,
                records_dir=self.records_dir,
                history=self.history,
            )
        return self._gate

    def extra_metric_names(self) -> tuple[str, ...]:
        return tuple(name for found in self.config.hook.pytest_llmreplay_metrics() for name in found)

    def replay(
        self, target: Any, spec: Any, test: str, digest: str, repeat: int = 0, repeats: int = 1
    ) -> tuple[Any, dict[str, Any]]:
        """Replay a :class:`~pytest_llmreplay.plugin.spec.PerfSpec` of ``test`` on ``target``: run
        ``repeat`` of ``repeats``; (the Result, with plugins' metrics added to its summary; the run's seed and
        cache reset, see :mod:`~pytest_llmreplay.gate.repeats`). Generated prompts are salted with
        the workload's ``digest`` and the test's baseline key: see :meth:`~pytest_llmreplay.workloads.prompts.PromptFactory.salted`."""
        from ..metrics.result import Result
        from ..metrics.slo import parse_slos, per_request_limits
        from ..replayer.driver import Replay
        from ..workloads.formats import load_workload

        try:
            workload = load_workload(spec.workload, format=spec.format, **spec.format_options)
        except LLMReplayError as exc:
            if spec.format is None:
                raise
            raise LLMReplayError(f"format: {exc} (read as {spec.format!r}, as the test's format says)") from None
        from .live_lock import live_lock

        salt = f"{digest} {test}"
        with live_lock(target, self.interruption, test):
            # every run, the first included: a test's figures must not depend on what ran before it
            # on the server (its own earlier session warmed the cache: +15% hit rate, a later
            # run's SLOs checked on it); a capacity search resets before each of its points itself
            reset = target.reset_for_run() if spec.capacity is None else None
            note = target.unreset_note(reset, "repeat" if repeats > 1 else "run") if spec.capacity is None else None
            if note is not None and not self.cache_reset_missing:
                self.cache_reset_missing = True
                self.notes.append(("llmreplay repeats" if repeats > 1 else "llmreplay cache", note))
            if spec.capacity is not None:  # a search: the result is the point at capacity; a line per point as it ends
                from ..replayer.signal_stop import SignalStop
                from ..search.capacity import find_capacity
                from .terminal_lines import line_writer

                with SignalStop() as signals:  # a signal cuts the point running, and no other starts
                    result: Result = find_capacity(
                        workload,
                        target,
                        self.prompts.salted(salt),
                        spec.capacity,
                        spec.settings,
                        progress=line_writer(self.config),
                        signals=signals,
                        test_slos=parse_slos(spec.slo, self.extra_metric_names()),
                        check_server=lambda: self.check_server(spec.server),
                    ).result
            else:
                if self.workers_count is not None:
                    run = self.workers.replay(
                        workload,
                        target.endpoint(repeat),
                        self.prompts.salted(salt),
                        spec.settings,
                        stop_on_signals=True,
                    )
                else:
                    run = Replay(
                        workload,
                        target.endpoint(repeat),
                        self.prompts.salted(salt),
                        spec.settings,
                        clock=target.clock(),
                        stop_on_signals=True,
                    ).run()
                result = Result(
                    run, gpus=target.gpus, goodput=per_request_limits(parse_slos(spec.slo, self.extra_metric_names()))
                )
        for found in self.config.hook.pytest_llmreplay_metrics():
            for name, compute in found.items():
                if name in result.summary:
                    raise LLMReplayError(
                        f"pytest_llmreplay_metrics: {name!r} is already a metric of the summary; name yours differently"
                    )
                result.summary[name] = dict(compute(result))
        return result, {"seed": target.run_seed(repeat), "cache_reset": reset}

    @property
    def workers(self) -> Any:
        """The session's Ray workers (``--llm-workers``), started once, when first used."""
        if self._workers is None:
            from ..replayer.workers import RayWorkers

            assert self.workers_count is not None  # asked for only with --llm-workers
            self._workers = RayWorkers(self.workers_count, option(self.config, "llm_ray_address") or None)
        return self._workers

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()
        if self._servers is not None:
            self._servers.close()
        if self._target is not None:
            self._target.close()

    def remove_private_records(self) -> None:
        """Remove the temporary records folder of :func:`records_folder`, once the summary is written."""
        if self.private_records and self.records_dir is not None:
            import shutil

            shutil.rmtree(self.records_dir, ignore_errors=True)


def perf_run(state: LLMSession, test: str, spec: Any) -> Any:
    """Replay a checked :class:`~pytest_llmreplay.plugin.spec.PerfSpec`; return (PerfRun, Result).
    A server that dies (or stops answering) during the first run raises its error; during a
    later repeat, the runs before are returned, with ``server_died`` saying so (:func:`~pytest_llmreplay.plugin.hooks.keep_runs_if_server_died`),
    and so is a capacity search it failed after some points (the search's result, marked incomplete)."""
    from ..gate.baseline import workload_digest, workload_facts
    from .live_lock import NotReplayed
    from .verdict import PerfRun

    state.interruption.check_not_interrupted()
    digest = workload_digest(spec.workload)
    asked = spec.repeat or state.repeat
    target = state.target_for(spec.server, test)
    repeats = 1 if spec.capacity is not None or target.deterministic else asked  # a search runs once
    once = (
        f"ran once, not {asked} times: {target.name} without timing jitter gives the same figures on every run"
        if target.deterministic and asked > 1 and spec.capacity is None
        else None
    )
    runs = []
    died = None
    for index in range(repeats):
        try:
            runs.append(state.replay(target, spec, test, digest, repeat=index, repeats=repeats))
            search = getattr(runs[-1][0], "capacity", None)
            if search is not None and search.incomplete:  # its points are kept, as runs before a death are
                died = f"{search.incomplete}\n(the capacity search's {counted(len(search.points), 'run')} before it kept, stored marked incomplete: {search.ended})"
                break
            state.check_server(spec.server)  # a declared server that died during the run fails the test
        except NotReplayed as exc:  # a signal before this repeat: the test's result is the runs before, cut short
            if index == 0:
                raise
            runs[-1][0].run.interrupted = exc.signal  # stored marked interrupted: never a baseline
            runs[-1][0].run.warnings.append(f"interrupted by {exc.signal} before run {index + 1} of {repeats}")
            kept = f"its {counted(index, 'run')} before, whole, stored marked interrupted (never a baseline)"
            state.notes.append(
                ("llmreplay interrupted", f"{exc.signal} came before run {index + 1} of {repeats} of {test}: {kept}")
            )
            break
        except LLMReplayError as exc:  # a server that died or stopped answering
            if index == 0:
                raise
            del runs[index:]  # the run it failed in measured the failure; the runs before it are kept
            died = f"{exc}\n(the {index} run{'s' if index > 1 else ''} before it {'are' if index > 1 else 'is'} kept)"
            once = f"ran {index} of {repeats} times: run {index + 1} failed ({str(exc).splitlines()[0]})"
            break
        if state.interruption.observe(runs[-1][0], test):  # Ctrl-C: no more repeats (see plugin/interrupt.py)
            state.notes.append(("llmreplay interrupted", state.interruption.note()))
            break
    workload = workload_facts(
        os.path.relpath(spec.workload, state.config.rootpath), spec.format, digest, spec.format_options
    )
    results = [result for result, _ in runs]
    results[-1].earlier_runs = results[:-1]  # the body's assert_slo checks the runs' medians, as the test's SLOs
    if died is not None and once is not None:  # said in the stored result too, where the terminal's text is not kept
        results[-1].run.warnings.append(once)
    return PerfRun(
        test,
        results[-1],
        workload,
        target.fingerprint,
        spec.slo,
        spec.regression,
        earlier=results[:-1],
        facts=[facts for _, facts in runs],
        repeats_note=once,
        server_died=died,
    ), results[-1]
