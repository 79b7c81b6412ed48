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
    result.stdout.fnmatch_lines(["llmreplay: simulator llama-3.1-8b-h100 (over HTTP, wall clock); baselines *; tokenizer bundled (llmreplay-bpe-4k), seed 5"])


def test_ini_twin_sets_the_seed(project):
    project.makeini("[pytest]\nllm_seed = 9\n")
    project.makepyfile("def test_x(llm_prompts): assert llm_prompts.seed == 9")
    project.runpytest().assert_outcomes(passed=1)


def test_bad_seed_is_a_usage_error(project):
    project.makepyfile("def test_x(): pass")
    result = project.runpytest("--llm-seed", "many")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llm-seed / llm_seed: expected an integer, got 'many'*"])


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
