"""Stores through the plugin (pytester): two CI jobs, each a fresh clone of one bare repository,
share results on a git ref, or in an S3 bucket of a real S3 server (job 1 saves, job 2 compares a
newer commit against it); a store
that cannot be used fails at start-up, before anything is measured, in one line naming the
option; a corrupt stored result is one line naming it."""

from __future__ import annotations

import pytest
from test_plugin_baselines import TEST_ID, git, no_traceback

from pytest_llmreplay.gate.store_url import open_store

STORE = "git:origin#refs/llmreplay/results"


def share_results_between_two_ci_jobs(ci, store: str) -> list:
    """Job 1 saves to ``store``; job 2, a fresh checkout with one more commit, compares against
    job 1's result and passes the gate. The two checkouts, for the caller to inspect."""
    job, run = ci
    first = job("job1")
    result = run(first, "--llm-save", f"--llm-baseline-dir={store}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"saved baseline {store}[/ ]test_perf.py_test_chat-*/*.json"])
    saved_by_job1 = git(first, "rev-parse", "HEAD")[:12]

    second = job("job2")  # a fresh checkout: nothing on disk from job 1
    assert not (second / ".llmreplay").exists()
    (second / "notes.txt").write_text("a change under test\n")
    git(second, "add", "notes.txt")
    git(second, "commit", "-q", "-m", "change")
    result = run(second, "--llm-compare", "--llm-fail-on-regression", f"--llm-baseline-dir={store}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"Compared with merge-base with origin/HEAD ({saved_by_job1}), stored {saved_by_job1} *: 0 regressions"]
    )
    no_traceback(result)
    return [first, second]


def test_two_ci_jobs_share_results_on_a_git_ref(ci):
    # neither job's checkout was touched beyond its own .llmreplay folder
    for checkout in share_results_between_two_ci_jobs(ci, STORE):
        assert git(checkout, "status", "--porcelain") == "?? .llmreplay/"


def test_two_ci_jobs_share_results_in_an_s3_bucket(ci, s3_env):
    """moto's S3 server stands for the bucket; the credentials come from the environment only."""
    import boto3

    checkouts = share_results_between_two_ci_jobs(ci, "s3://results/ci/perf")
    for checkout in checkouts:
        assert git(checkout, "status", "--porcelain") == ""  # nothing written beside the checkout's files
    stored = boto3.client("s3").list_objects_v2(Bucket="results", Prefix="ci/perf/")["Contents"]
    assert [item["Key"].rsplit("/", 2)[-2].split("-")[0] for item in stored] == [
        "test_perf.py_test_chat"
    ]  # job 1's result, and only it
    body = boto3.client("s3").get_object(Bucket="results", Key=stored[0]["Key"])["Body"].read()
    assert s3_env["AWS_SECRET_ACCESS_KEY"].encode() not in body and s3_env["AWS_ACCESS_KEY_ID"].encode() not in body


@pytest.mark.parametrize(
    ("store", "typo", "words"),
    [
        (STORE, "git:origin#refs/llmreplay/resluts", "no ref refs/llmreplay/resluts there"),
        ("s3://results/ci/perf", "s3://results/ci/prf", "holds no stored result"),
    ],
)
def test_comparing_against_a_mistyped_git_ref_or_prefix_says_so_naming_the_one_meant(ci, request, store, typo, words):
    """Only a mistyped folder was refused: a mistyped git ref or object prefix said "no stored
    result" for every test, and --llm-fail-on-regression passed them all, silently (a stores
    review). A warning names the store much like it; not an error, since a name much like
    another's may be a new store's (results-h100 beside results-a100: a review of the change)."""
    if store.startswith("s3:"):
        request.getfixturevalue("s3_env")
    job, run = ci
    run(job("job1"), "--llm-save", f"--llm-baseline-dir={store}").assert_outcomes(passed=1)
    result = run(job("job2"), "--llm-compare", "--llm-fail-on-regression", f"--llm-baseline-dir={typo}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"*PytestConfigWarning: --llm-baseline-dir / llm_baseline_dir: {typo}: {words} (did you mean {store}?): "
            "nothing is compared until a job saves there (--llm-save); if it should hold results, check the name"
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_pull_request_before_the_first_save_compares_with_nothing_and_says_so(ci):
    """The shipped workflow's first pull request runs before main's first save: its ref is not
    there yet, and nothing like it is, so the job passes, warned once (an empty store's refusal
    failed it; a review of the change)."""
    job, run = ci
    result = run(job("job1"), "--llm-compare", "--llm-fail-on-regression", f"--llm-baseline-dir={STORE}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"*PytestConfigWarning: --llm-baseline-dir / llm_baseline_dir: {STORE}: no ref refs/llmreplay/results "
            "there: nothing is compared until a job saves there (--llm-save); if it should hold results, check the name",
            "Compared with *: no stored result of this test there*",
        ]
    )


def test_a_corrupt_stored_result_is_skipped_in_one_line_naming_it(ci):
    job, run = ci
    first = job("job1")
    run(first, "--llm-save", f"--llm-baseline-dir={STORE}").assert_outcomes(passed=1)
    store = open_store(STORE, first)
    store.check(writing=True)
    (saved,) = store.stored(TEST_ID, git(first, "rev-parse", "HEAD"))
    corrupt = saved.rsplit("-", 3)[0] + "-99991231T000000000000Z-1-000000.json"  # sorts after it: the newest
    store.add(corrupt, b'{"schema": 1, "half a result')
    result = run(job("job2"), "--llm-compare", f"--llm-baseline-dir={STORE}")
    result.assert_outcomes(passed=1)
    # skipped, named, and the result under it is the baseline (issue 31 A1: the gate went off)
    result.stdout.fnmatch_lines(
        [
            "Compared with *, stored *",
            f"skipped 1 unreadable stored result: {STORE}/{corrupt}: not a stored llmreplay result (*)",
        ]
    )
    no_traceback(result)


@pytest.mark.parametrize(
    ("store", "needle"),
    [
        (
            "nosuch://results/x",
            "nosuch://results/x: unknown scheme 'nosuch'; expected a folder, git:REMOTE#REF, or a URL such as s3://*",
        ),
        ("git:upstream#refs/x", "git:upstream#refs/x: 'upstream' is not a git remote of *"),
        (
            "s3://KEY:SECRET@results/x",
            "s3://***@results/x: a password in the URL; give credentials in the environment*",
        ),
        (
            "file://tmp/q12/rel",
            "file://tmp/q12/rel: file:// URL with host 'tmp'; expected file:///ABSOLUTE/PATH (three slashes)*",
        ),
        ("file:relative/x", "file:relative/x: a file: URL must name an absolute path, file:///ABSOLUTE/PATH*"),
        # the first result became the object 'perf', the next test errored (a stores review)
        (
            "s3://results/perf?versionId=1",
            "s3://results/perf?***: a query in the URL; expected s3://BUCKET/PREFIX without one",
        ),
    ],
)
def test_a_bad_store_fails_at_start_up(project, store, needle):
    before = set(project.path.iterdir())
    result = project.runpytest("--llm-offline", "--llm-save", f"--llm-baseline-dir={store}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --llm-baseline-dir / llm_baseline_dir: {needle}"])
    assert "SECRET" not in result.stdout.str() + result.stderr.str()
    assert set(project.path.iterdir()) == before  # nothing saved in the checkout
    no_traceback(result)


def test_an_unreachable_store_fails_before_the_replay(project, refused_url):
    store = f"git:{refused_url}/perf.git#refs/llmreplay/results"
    project.makeini(f"[pytest]\nllm_baseline_dir = {store}\n")
    result = project.runpytest("--llm-offline", "--llm-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --llm-baseline-dir / llm_baseline_dir: {store}: cannot fetch refs/llmreplay/results (*"]
    )
    assert "llmreplay: test_perf.py::test_chat" not in result.stdout.str()  # nothing was replayed
    no_traceback(result)


def test_a_bare_compare_on_a_ci_checkout_with_only_remote_tracking_refs_uses_origin_main(ci):
    # GitHub Actions' checkout of a feature branch: init, fetch into refs/remotes/origin/*, checkout
    # -B; no local main and no origin/HEAD, so the default reference is the remote-tracking main
    job, run = ci
    first = job("job1")
    run(first, "--llm-save", f"--llm-baseline-dir={STORE}").assert_outcomes(passed=1)
    saved = git(first, "rev-parse", "HEAD")[:12]
    forge = git(first, "remote", "get-url", "origin")
    checkout = first.parent / "actions"
    checkout.mkdir()
    git(checkout, "init", "-q")
    git(checkout, "remote", "add", "origin", forge)
    git(checkout, "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*")
    git(checkout, "checkout", "-q", "-B", "feature", "refs/remotes/origin/main")
    assert git(checkout, "for-each-ref", "--format=%(refname)") == "refs/heads/feature\nrefs/remotes/origin/main"
    (checkout / "notes.txt").write_text("a change under test\n")
    git(checkout, "add", "notes.txt")
    git(checkout, "commit", "-q", "-m", "change")
    result = run(checkout, "--llm-compare", f"--llm-baseline-dir={STORE}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"llmreplay: * (no save, compare with merge-base with origin/main ({saved})); *",
            f"Compared with merge-base with origin/main ({saved}), stored {saved} *: 0 regressions",
        ]
    )
    no_traceback(result)
