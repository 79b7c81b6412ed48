"""Synthetic workloads: seeded generation, counts, distributions, arrivals, prefix groups and
every bad parameter, both through ``generate`` and through a spec file."""

from __future__ import annotations

import json
import math
import textwrap
from fnmatch import fnmatch
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from pytest_llmreplay import Synthetic, SyntheticSpec, WorkloadError, generate_synthetic, load_workload
from pytest_llmreplay.workloads.formats import synthetic as synthetic_module


def first_turns(workload):
    return [s.turns[0] for s in workload.sessions]


def write_spec(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _doc_spec() -> str:
    """The example spec of the synthetic module's docstring, read from the docstring itself
    (the indented block after ``::``), so that the test keeps the documentation honest."""
    block = synthetic_module.__doc__.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    return textwrap.dedent(block) + "\n"


DOC_SPEC = _doc_spec()


# --- generation --------------------------------------------------------------------------------


def test_defaults():
    workload = generate_synthetic(SyntheticSpec())
    assert (workload.format, workload.timed, len(workload), workload.num_requests) == ("synthetic", False, 100, 100)
    assert {(t.input_tokens, t.output_tokens, t.prompt) for t in first_turns(workload)} == {(512, 128, Synthetic())}
    assert all(s.arrival_s == 0.0 for s in workload)
    assert [s.id for s in workload.sessions][:3] == ["session0", "session1", "session2"]


def test_docstring_spec_file(tmp_path):
    path = write_spec(tmp_path, DOC_SPEC)
    workload = load_workload(path)
    assert (workload.format, workload.source, workload.timed, len(workload)) == ("synthetic", str(path), True, 200)
    assert {len(s.turns) for s in workload} == {1, 2, 3, 4}
    assert all(
        t.output_tokens == 128 + t.reasoning_tokens for _, _, t in workload.turns()
    )  # each answer after its reasoning
    assert len({t.reasoning_tokens for _, _, t in workload.turns()}) > 10  # drawn per turn
    assert all(0.5 <= t.delay_s <= 2.0 for s in workload for t in s.turns[1:])
    assert {t.prompt.prefix_group for t in first_turns(workload)} == {0, 1, 2, 3}


def test_json_spec_on_one_line(tmp_path):
    spec = {"synthetic": {"sessions": 5, "input_tokens": 10, "seed": 3}}
    workload = load_workload(write_spec(tmp_path, json.dumps(spec), "spec.json"))
    assert workload == generate_synthetic(
        SyntheticSpec(sessions=5, input_tokens=10, seed=3), source=tmp_path / "spec.json"
    )


def test_same_spec_same_workload_other_seed_other_workload(tmp_path):
    spec = dict(
        sessions=50,
        input_tokens={"dist": "lognormal", "mean": 800, "std": 400},
        rate=4.0,
        turns={"dist": "uniform", "min": 1, "max": 3},
        delay={"dist": "normal", "mean": 1, "std": 0.5},
    )
    one, two = generate_synthetic(SyntheticSpec(**spec, seed=11)), generate_synthetic(SyntheticSpec(**spec, seed=11))
    assert one == two
    other = generate_synthetic(SyntheticSpec(**spec, seed=12))
    assert [t.input_tokens for t in first_turns(other)] != [t.input_tokens for t in first_turns(one)]
    assert [s.arrival_s for s in other] != [s.arrival_s for s in one]
    from_file = load_workload(write_spec(tmp_path, json.dumps({"synthetic": {**spec, "seed": 11}}), "s.json"))
    assert from_file.sessions == one.sessions


def test_counts_with_fixed_turns():
    workload = generate_synthetic(SyntheticSpec(sessions=30, turns=3))
    assert (len(workload), workload.num_requests) == (30, 90)


def test_later_turns_extend_the_previous_prompt():
    spec = SyntheticSpec(
        sessions=4, input_tokens=100, output_tokens={"dist": "uniform", "min": 5, "max": 50}, turns=3, delay=1.5
    )
    for session in generate_synthetic(spec):
        first = session.turns[0]
        assert (first.input_tokens, first.delay_s, first.prompt) == (100, 0.0, Synthetic())
        for previous, turn in pairwise(session.turns):
            assert turn.input_tokens == previous.input_tokens + previous.output_tokens + 100
            assert (turn.prompt, turn.delay_s) == (Synthetic(extends_previous=True), 1.5)


def test_first_turn_can_have_its_own_length():
    # an agent: a long opening prompt (40% of it shared with the group), then 100 new tokens a turn
    spec = SyntheticSpec(
        sessions=3, first_input_tokens=5000, input_tokens=100, output_tokens=20, turns=3, shared_prefix_ratio=0.4
    )
    for session in generate_synthetic(spec):
        lengths = [t.input_tokens for t in session.turns]
        assert lengths == [5000, 5000 + 20 + 100, 5000 + 2 * (20 + 100)]
        assert session.turns[0].prompt.prefix_tokens == 2000  # floor(0.4 * 5000)


def test_first_input_tokens_is_checked_like_a_length():
    with pytest.raises(WorkloadError, match=r"synthetic.first_input_tokens.dist: 'dist' must be one of"):
        generate_synthetic(SyntheticSpec(first_input_tokens={"dist": "zipf"}))


# --- distributions -----------------------------------------------------------------------------


def sample_inputs(length, n: int = 4000) -> np.ndarray:
    return np.array(
        [t.input_tokens for t in first_turns(generate_synthetic(SyntheticSpec(sessions=n, input_tokens=length)))]
    )


def test_normal():
    values = sample_inputs({"dist": "normal", "mean": 1000, "std": 100})
    assert values.mean() == pytest.approx(1000, abs=10)
    assert values.std() == pytest.approx(100, rel=0.05)


def test_normal_with_clamps():
    values = sample_inputs({"dist": "normal", "mean": 1000, "std": 100, "min": 950, "max": 1020})
    assert values.min() == 950 and values.max() == 1020
    assert (values == 950).sum() > 100 and (values == 1020).sum() > 100


def test_lognormal_mean_and_std_are_of_the_lengths():
    values = sample_inputs({"dist": "lognormal", "mean": 500, "std": 250}, n=20_000)
    assert values.mean() == pytest.approx(500, rel=0.03)
    assert values.std() == pytest.approx(250, rel=0.08)
    assert values.min() >= 1


def test_uniform_is_inclusive():
    values = sample_inputs({"dist": "uniform", "min": 10, "max": 12}, n=300)
    assert set(values.tolist()) == {10, 11, 12}


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        (7, 7),
        ({"dist": "fixed", "value": 7}, 7),
        (7.6, 8),
        (0.6, 1),
        ({"dist": "fixed", "value": 50, "max": 20}, 20),
    ],
)
def test_fixed_lengths_are_rounded_and_at_least_one(length, expected):
    assert set(sample_inputs(length, n=5).tolist()) == {expected}


def test_delay_is_not_rounded():
    spec = SyntheticSpec(sessions=200, turns=2, delay={"dist": "uniform", "min": 0.5, "max": 2.0})
    delays = np.array([s.turns[1].delay_s for s in generate_synthetic(spec)])
    assert delays.min() >= 0.5 and delays.max() <= 2.0
    assert not np.allclose(delays, np.round(delays))
    assert delays.mean() == pytest.approx(1.25, abs=0.1)


def test_negative_delays_are_clipped_to_zero():
    spec = SyntheticSpec(sessions=200, turns=2, delay={"dist": "normal", "mean": 0, "std": 1})
    delays = [s.turns[1].delay_s for s in generate_synthetic(spec)]
    assert min(delays) == 0.0 and max(delays) > 0.0


def test_turns_distribution():
    spec = SyntheticSpec(sessions=300, turns={"dist": "uniform", "min": 2, "max": 4})
    workload = generate_synthetic(spec)
    assert {len(s.turns) for s in workload} == {2, 3, 4}
    assert workload.num_requests == sum(len(s.turns) for s in workload)


# --- arrivals ----------------------------------------------------------------------------------


def test_rate_gives_poisson_arrivals():
    workload = generate_synthetic(SyntheticSpec(sessions=4000, rate=8.0))
    arrivals = np.array([s.arrival_s for s in workload])
    gaps = np.diff(arrivals)
    assert workload.timed and arrivals[0] == 0.0 and (gaps >= 0).all()
    assert gaps.mean() == pytest.approx(1 / 8, rel=0.05)
    assert gaps.std() == pytest.approx(1 / 8, rel=0.1)  # exponential: std = mean


def test_interval_gives_even_arrivals():
    workload = generate_synthetic(SyntheticSpec(sessions=5, interval=0.5))
    assert workload.timed
    assert [s.arrival_s for s in workload] == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_without_rate_or_interval_untimed():
    workload = generate_synthetic(SyntheticSpec(sessions=5))
    assert not workload.timed and {s.arrival_s for s in workload} == {0.0}


# --- shared prefixes ---------------------------------------------------------------------------


def test_prefix_ratio_and_groups():
    spec = SyntheticSpec(
        sessions=400,
        input_tokens={"dist": "uniform", "min": 100, "max": 200},
        turns=2,
        shared_prefix_ratio=0.3,
        prefix_groups=3,
    )
    workload = generate_synthetic(spec)
    groups = []
    for session in workload:
        first, second = session.turns
        assert first.prompt.prefix_tokens == math.floor(0.3 * first.input_tokens)
        assert second.prompt == Synthetic(extends_previous=True)
        groups.append(first.prompt.prefix_group)
    counts = np.bincount(groups)
    assert len(counts) == 3 and counts.min() > 100  # drawn uniformly


def test_no_ratio_no_prefix_group():
    assert {t.prompt for t in first_turns(generate_synthetic(SyntheticSpec(sessions=20, prefix_groups=4)))} == {
        Synthetic()
    }


def test_full_ratio():
    (turn,) = first_turns(generate_synthetic(SyntheticSpec(sessions=1, input_tokens=64, shared_prefix_ratio=1.0)))
    assert turn.prompt == Synthetic(prefix_group=0, prefix_tokens=64)


# --- bad parameters ----------------------------------------------------------------------------

# (parameters, field, what the message must say)
BAD = {
    "sessions zero": ({"sessions": 0}, "synthetic.sessions", "must be an integer >= 1, got 0"),
    "sessions float": ({"sessions": 1.5}, "synthetic.sessions", "must be an integer >= 1, got 1.5"),
    "sessions bool": ({"sessions": True}, "synthetic.sessions", "must be an integer >= 1, got True"),
    "sessions string": ({"sessions": "10"}, "synthetic.sessions", "must be an integer >= 1, got '10'"),
    "prefix groups zero": ({"prefix_groups": 0}, "synthetic.prefix_groups", "must be an integer >= 1, got 0"),
    "prefix groups bool": ({"prefix_groups": True}, "synthetic.prefix_groups", "must be an integer >= 1, got True"),
    "seed negative": ({"seed": -1}, "synthetic.seed", "must be an integer >= 0, got -1"),
    "seed float": ({"seed": 1.0}, "synthetic.seed", "must be an integer >= 0, got 1.0"),
    "ratio above one": (
        {"shared_prefix_ratio": 1.5},
        "synthetic.shared_prefix_ratio",
        "must be a number >= 0 and <= 1, got 1.5",
    ),
    "ratio negative": (
        {"shared_prefix_ratio": -0.1},
        "synthetic.shared_prefix_ratio",
        "must be a number >= 0 and <= 1",
    ),
    "ratio string": ({"shared_prefix_ratio": "half"}, "synthetic.shared_prefix_ratio", "got 'half'"),
    "rate zero": ({"rate": 0}, "synthetic.rate", "must be a number > 0, got 0"),
    "rate negative": ({"rate": -2}, "synthetic.rate", "must be a number > 0, got -2"),
    "rate bool": ({"rate": True}, "synthetic.rate", "must be a number > 0, got True"),
    "rate infinite": ({"rate": math.inf}, "synthetic.rate", "must be a number > 0, got inf"),
    "interval negative": ({"interval": -1}, "synthetic.interval", "must be a number >= 0, got -1"),
    "interval string": ({"interval": "1s"}, "synthetic.interval", "must be a number >= 0, got '1s'"),
    "rate and interval": ({"rate": 2, "interval": 0.5}, "synthetic.rate", "give rate or interval, not both"),
    "length negative": ({"input_tokens": -5}, "synthetic.input_tokens", "must be a finite number >= 0, got -5"),
    "length nan": ({"output_tokens": math.nan}, "synthetic.output_tokens", "must be a finite number >= 0, got nan"),
    "length string": (
        {"input_tokens": "1024"},
        "synthetic.input_tokens",
        "expected a number or a mapping with 'dist', got a string",
    ),
    "length bool": ({"turns": True}, "synthetic.turns", "expected a number or a mapping with 'dist', got a boolean"),
    "unknown dist": (
        {"input_tokens": {"dist": "poisson", "mean": 3}},
        "synthetic.input_tokens.dist",
        "'dist' must be one of fixed, uniform, normal, lognormal, got 'poisson'",
    ),
    "dist missing": ({"input_tokens": {"mean": 3}}, "synthetic.input_tokens.dist", "got None"),
    "parameter missing": (
        {"input_tokens": {"dist": "normal", "mean": 5}},
        "synthetic.input_tokens.std",
        "required for dist normal",
    ),
    "value missing": ({"delay": {"dist": "fixed"}}, "synthetic.delay.value", "required for dist fixed"),
    "key of another dist": (
        {"input_tokens": {"dist": "fixed", "value": 1, "std": 2}},
        "synthetic.input_tokens.std",
        "unknown key for dist fixed; expected dist, max, min, value",
    ),
    "lognormal mean zero": (
        {"input_tokens": {"dist": "lognormal", "mean": 0, "std": 1}},
        "synthetic.input_tokens.mean",
        "must be > 0 for a lognormal",
    ),
    "min above max": (
        {"turns": {"dist": "uniform", "min": 5, "max": 2}},
        "synthetic.turns.min",
        "min 5 is greater than max 2",
    ),
    "clamp min above max": (
        {"input_tokens": {"dist": "normal", "mean": 5, "std": 1, "min": 9, "max": 3}},
        "synthetic.input_tokens.min",
        "min 9 is greater than max 3",
    ),
    "negative std": (
        {"input_tokens": {"dist": "normal", "mean": 5, "std": -1}},
        "synthetic.input_tokens.std",
        "must be a number >= 0, got -1",
    ),
    "no turn": (
        {"turns": {"dist": "uniform", "min": 0, "max": 0}},
        "synthetic.turns",
        "gives at most 0; expected at least 1 turn per session",
    ),
    "no output token": (
        {"output_tokens": 0},
        "synthetic.output_tokens",
        "expected at least 1 output token per request",
    ),
    "clamped below one": (
        {"input_tokens": {"dist": "normal", "mean": 5, "std": 1, "max": 0.4}},
        "synthetic.input_tokens",
        "gives at most 0.4; expected at least 1 prompt token per request",
    ),
    "no first prompt token": (  # it became a 1-token prompt, where input_tokens: 0 was refused
        {"first_input_tokens": 0},
        "synthetic.first_input_tokens",
        "gives at most 0; expected at least 1 prompt token per session",
    ),
    "uniform max past int64": (  # numpy's "high is out of bounds for int64" traceback
        {"input_tokens": {"dist": "uniform", "min": 1, "max": 1e300}},
        "synthetic.input_tokens",
        "draws ",
    ),
    "param string": (
        {"delay": {"dist": "uniform", "min": "0", "max": 1}},
        "synthetic.delay.min",
        "must be a number >= 0, got '0'",
    ),
}


@pytest.mark.parametrize(("params", "field", "expected"), BAD.values(), ids=BAD.keys())
def test_bad_parameter_in_code(params, field, expected):
    with pytest.raises(WorkloadError) as info:
        generate_synthetic(SyntheticSpec(**params))
    error = info.value
    assert (error.path, error.field) == (None, field)
    assert str(error).startswith(f"{field}: ")
    assert expected in error.reason, error.reason


@pytest.mark.parametrize(
    ("params", "field", "expected"), [BAD[k] for k in ("sessions zero", "rate and interval", "unknown dist")]
)
def test_bad_parameter_in_a_file_names_the_file(tmp_path, params, field, expected):
    path = write_spec(tmp_path, json.dumps({"synthetic": params}), "spec.json")
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format="synthetic")
    assert str(info.value).startswith(f"{path}: {field}: ")
    assert expected in info.value.reason


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        (
            "synthetic:\n  sesions: 10\n",
            "synthetic.sesions",
            "unknown parameter; expected one of delay, first_input_tokens, input_tokens",
        ),
        ("synthetic:\n  sessions: 10\nseed: 3\n", None, "expected one top-level key 'synthetic' holding a mapping"),
        ("synthetic: 10\n", None, "expected one top-level key 'synthetic' holding a mapping"),
        ("synthetic:\n", None, "expected one top-level key 'synthetic'"),
        ("- synthetic\n", None, "expected one top-level key 'synthetic'"),
    ],
)
def test_bad_spec_file(tmp_path, text, field, expected):
    path = write_spec(tmp_path, text)
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format="synthetic")
    assert str(info.value).startswith(f"{path}: " + (f"{field}: " if field else ""))
    assert expected in info.value.reason


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "synthetic:\n  sessions: 10\n  turns: [1, 2\n  seed: 3\n",
            "4:7: invalid YAML/JSON: expected ',' or ']', but got ':' (while parsing a flow sequence that starts at line 3, column 10)",
        ),
        (
            'synthetic:\n  sessions: 10\n  seed: "3\n',
            "4:1: invalid YAML/JSON: found unexpected end of stream (while scanning a quoted scalar that starts at line 3, column 9)",
        ),
        # PyYAML's message for a character it refuses spans two lines: one here, with line and column
        (
            "synthetic:\n  sessions: 10\a\n",
            "2:15: invalid YAML/JSON: character #x0007 is not allowed (expected printable characters, tabs and line breaks)",
        ),
        # nested past Python's recursion limit: PyYAML's RecursionError is an error at the reader's place
        (
            "synthetic:\n  sessions: 1\n  input_tokens: " + "[" * 100_000 + "]" * 100_000 + "\n",
            "3:*: invalid YAML/JSON: nested too deeply: lists or objects inside each other past what the parser reads *",
        ),
        (
            "synthetic:\n  input_tokens: " + "{a: " * 50_000 + "1" + "}" * 50_000 + "\n",
            "2:*: invalid YAML/JSON: nested too deeply: *",
        ),
    ],
    ids=["flow-sequence", "quoted-scalar", "control-character", "nested-lists", "nested-mappings"],
)
def test_invalid_yaml_is_one_line_naming_line_column_and_what_was_expected(tmp_path, text, message):
    path = write_spec(tmp_path, text)
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert "\n" not in str(info.value)
    assert fnmatch(str(info.value), f"{path}:{message}")


@pytest.mark.parametrize(
    ("name", "text", "line", "key"),
    [
        ("spec.json", '{"synthetic": {"sessions": 3, "sessions": 4, "input_tokens": 100}}\n', 1, "sessions"),
        ("spec.json", '{"synthetic": {"sessions": 3},\n "synthetic": {"sessions": 4}}\n', 2, "synthetic"),
        ("spec.yaml", "synthetic:\n  sessions: 3\n  sessions: 4\n", 3, "sessions"),
        ("spec.yaml", "synthetic:\n  sessions: 3\nsynthetic:\n  sessions: 4\n", 3, "synthetic"),
        ("spec.yaml", "synthetic:\n  input_tokens: {dist: fixed, value: 3, value: 4}\n", 2, "value"),
    ],
)
def test_a_key_given_twice_is_refused_with_its_line(tmp_path, name, text, line, key):
    path = write_spec(tmp_path, text, name)
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert str(info.value).startswith(f"{path}:{line}: duplicate key {key!r} (first on line ")
