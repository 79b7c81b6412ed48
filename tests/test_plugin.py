"""The pytest plugin as a user meets it: options, ini twins, header, fixtures (pytester)."""

import pytest

TRACE = '{"input_toks": 4, "output_toks": 2, "arrival_time_ns": 0}\n'


@pytest.fixture
def project(pytester):
    pytester.makefile(".jsonl", trace=TRACE)
    return pytester


def test_options_are_in_the_help(project):
    result = project.runpytest("--help")
    result.stdout.fnmatch_lines(["*llmreplay*", "*--llm-tokenizer*", "*--llm-seed*"])


def test_report_header_shows_tokenizer_and_seed(project):
    project.makepyfile("def test_nothing_to_do(): assert 1 + 1 == 2")
    result = project.runpytest("--llm-seed", "5")
    result.stdout.fnmatch_lines(
        [
            "llmreplay: simulator llama-3.1-8b-h100 (offline, virtual time); baselines *; tokenizer bundled (llmreplay-bpe-4k), seed 5"
        ]
    )


def test_ini_twin_sets_the_seed(project):
    project.makeini("[pytest]\nllm_seed = 9\n")
    project.makepyfile("def test_x(llm_prompts): assert llm_prompts.seed == 9")
    project.runpytest().assert_outcomes(passed=1)


@pytest.mark.parametrize("seed", ["many", "-1"])
def test_bad_seed_is_a_usage_error(project, seed):
    # >= 0, as llmreplay run --seed and a test's seed key take it
    project.makepyfile("def test_x(): pass")
    result = project.runpytest(f"--llm-seed={seed}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--llm-seed / llm_seed: expected an integer >= 0, got '{seed}'*"])


def test_llm_workload_loads_relative_to_rootdir(project):
    project.makepyfile("""
        def test_load(llm_workload, llm_prompts):
            workload = llm_workload("trace.jsonl")
            assert workload.format == "llmservingsim" and workload.num_requests == 1
            assert llm_workload("trace.jsonl") is workload  # cached per session
            assert len(llm_prompts.session_ids(workload.sessions[0])[0]) == 4
    """)
    project.runpytest().assert_outcomes(passed=1)


def test_bad_workload_fails_with_one_line_not_a_traceback(project):
    project.makefile(".jsonl", bad='{"input_toks": "4", "output_toks": 2, "arrival_time_ns": 0}\n')
    project.makepyfile("def test_load(llm_workload): llm_workload('bad.jsonl')")
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*bad.jsonl:1: input_toks: must be an integer, got a string '4'*"])
    assert "Traceback" not in result.stdout.str()
    assert "def test_load" not in result.stdout.str()


def test_unloadable_tokenizer_fails_clearly(project, tmp_path):
    broken = tmp_path / "tok.json"
    broken.write_text("{not json")
    project.makepyfile("def test_x(llm_tokenizer): pass")
    result = project.runpytest(f"--llm-tokenizer={broken}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*--llm-tokenizer: cannot load tokenizer file {broken}*"])


# ------------------------------------------------------------------------ folders and ini values checked at start


def test_report_dir_holding_other_files_is_refused_and_left_alone(project):
    project.makepyfile("def test_x(): pass")
    project.path.joinpath("index.html").write_text("<h1>site</h1>")
    project.path.joinpath("summary.md").write_text("notes")
    result = project.runpytest("--llm-report", ".")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--llm-report / llm_report: * already holds files that pytest-llmreplay did not write; name a new or empty folder*"
        ]
    )
    assert project.path.joinpath("index.html").read_text() == "<h1>site</h1>"
    assert project.path.joinpath("summary.md").read_text() == "notes"
    assert project.path.joinpath("test_report_dir_holding_other_files_is_refused_and_left_alone.py").exists()


def test_report_dir_made_by_the_plugin_is_emptied_of_its_own_files_only(project):
    project.makepyfile("def test_x(): pass")
    project.runpytest("--llm-report", "rep").assert_outcomes(passed=1)
    folder = project.path / "rep"
    (folder / "tests" / "old.json").write_text("{}")
    (folder / "summary.md").write_text("old")
    (folder / "mine.txt").write_text("kept")
    project.runpytest("--llm-report", "rep").assert_outcomes(passed=1)
    assert sorted(p.name for p in folder.rglob("*")) == [".llmreplay-report", "mine.txt", "tests"]


@pytest.mark.parametrize("option", ["--llm-report", "--llm-baseline-dir"])
def test_a_file_where_a_folder_is_expected_is_a_usage_error(project, option):
    project.makepyfile("def test_x(): pass")
    project.path.joinpath("afile").write_text("x")
    result = project.runpytest(option, "afile", "--llm-save")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option} / {option[2:].replace('-', '_')}: *afile is a file; expected a folder*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (
            "--llm-baseline-dir",
            "a folder, git:REMOTE#REF, or a URL such as s3://BUCKET/PREFIX",
        ),  # once: results written into the rootdir
        ("--llm-report", "a folder for the reports"),  # once: no report, silently
    ],
)
def test_an_empty_folder_option_is_a_usage_error(project, option, expected):
    project.makepyfile("def test_x(): raise AssertionError('must not run')")
    result = project.runpytest(f"{option}=", "--llm-save")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option} / {option[2:].replace('-', '_')}: empty; expected {expected}"])
    assert "must not run" not in result.stdout.str()
    assert sorted(p.name for p in project.path.iterdir() if p.is_dir()) == []  # no result folder in the rootdir


@pytest.mark.parametrize("key", ["llm_save", "llm_offline", "llm_fail_on_regression", "llm_ignore_eos"])
def test_a_bad_true_false_ini_value_names_its_key_before_anything_runs(project, key):
    project.makepyfile("def test_x(): raise AssertionError('must not run')")
    result = project.runpytest("-o", f"{key}=perhaps")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    flag = "--" + key.replace("_", "-")
    result.stderr.fnmatch_lines([f"*{flag} / {key}: expected true or false*perhaps*"])
    assert "must not run" not in result.stdout.str()
