"""Policy knobs: every value a spec gives is checked against its knob's declaration
before any run, and every spec the project names still parses."""

from __future__ import annotations

import inspect
import math
import re
from pathlib import Path

import pytest

from bench.bench_headroom import instance
from control.cli import main
from control.errors import UserError
from control.policies import POLICIES
from control.policies.beamer import BeamerPolicy
from control.policies.knobs import Knob
from control.policies.lookahead import LookaheadPolicy
from control.policies.spec import TUNABLE, policy_from_spec
from sim.engine import SimConfig, simulate

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"


def refused(spec: str, allowed: str) -> None:
    """``spec`` (one ``knob=value``) is a UserError naming the spec, ``knob=value`` and
    what it may be."""
    with pytest.raises(UserError) as error:
        policy_from_spec(spec)
    message = str(error.value)
    assert message.startswith(f"policy {spec!r}: ")
    knob_value = spec.split(":", 1)[1]
    assert f"{knob_value} is not {allowed}" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ("beamer:max_groups=1.5", "a whole number from 1 to"),
        ("beamer:coflow_tail=1.5", "a whole number from 0 to"),
        ("beamer:coflow_tail=2.0", "a whole number"),
        ("beamer-lookahead:window=1.5", "a whole number from 1 to"),
        ("beamer-lookahead:evals=1.5", "a whole number from 0 to"),
        ("beamer-lookahead:seed=0.5", "a whole number from 0 to"),
        ("beamer-lookahead:run_tail_stages=2.5", "a whole number"),
    ],
)
def test_a_fraction_is_refused_where_a_whole_number_counts(spec: str, allowed: str) -> None:
    # A count used as a slice index or a loop bound would fail (or round) mid-run.
    refused(spec, allowed)


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ("beamer:aging_s=0", "a number from 1e-06 to"),
        ("beamer:aging_s=1e-300", "a number from 1e-06 to"),
        ("beamer:merge_ratio=0", "a number from 1 to"),
        ("beamer-lookahead:run_tail_stages=0", "a whole number from 1"),
    ],
)
def test_a_divisor_that_is_zero_or_tiny_is_refused(spec: str, allowed: str) -> None:
    refused(spec, allowed)


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ("beamer:stage_exponent=1e6", "a number from 0 to 10"),
        ("beamer:stage_exponent=11", "a number from 0 to 10"),
        ("beamer-lookahead:tail_power=1000", "a number from 1 to 10"),
    ],
)
def test_an_exponent_that_would_overflow_is_refused(spec: str, allowed: str) -> None:
    refused(spec, allowed)


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ("beamer-lookahead:evals=-1", "a whole number from 0 to"),
        ("beamer-lookahead:window=-5", "a whole number from 1 to"),
        ("beamer-lookahead:window=0", "a whole number from 1 to"),
        ("beamer-lookahead:max_simulations=-1", "a whole number from 0"),
        ("beamer-lookahead:max_present=-1", "a whole number from 0 to"),
        ("beamer-lookahead:seed=-1", "a whole number from 0 to"),
        ("beamer:max_groups=0", "a whole number from 1 to"),
        ("beamer:max_groups=-1", "a whole number from 1 to"),
        ("beamer:coflow_tail=-1", "a whole number from 0 to"),
        ("beamer:aging_s=-30", "a number from 1e-06 to"),
        ("beamer:merge_ratio=-2", "a number from 1 to"),
        ("beamer:merge_ratio=0.5", "a number from 1 to"),
        ("beamer:future_weight=-1", "a number from 0 to"),
        ("beamer:compute_weight=-1", "a number from 0 to"),
    ],
)
def test_a_negative_count_budget_or_weight_is_refused(spec: str, allowed: str) -> None:
    refused(spec, allowed)


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ("beamer-lookahead:evals=true", "a whole number"),
        ("beamer-lookahead:tail_weight=false", "a number from 0 to"),
        ("beamer:coflow_tail=true", "a whole number"),
        ("beamer:split_trials=1", "true or false"),
        ("beamer-lookahead:sincronia_rival=yes", "true or false"),
        ("beamer:ordering=random", "'bssi' or 'bottleneck'"),
        ("beamer:future_weight=fast", "a number from 0 to"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused(spec: str, allowed: str) -> None:
    # true/false is no number (bool is an int in Python) and a number is no true/false.
    refused(spec, allowed)


@pytest.mark.parametrize(
    "spec",
    [
        "beamer:future_weight=nan",
        "beamer:starvation_guard=inf",
        "beamer:compute_weight=1e300",
        "beamer-lookahead:guard_weight=-inf",
    ],
)
def test_a_number_that_is_not_finite_or_too_large_is_refused(spec: str) -> None:
    refused(spec, "a number")


def test_a_bad_knob_is_one_line_and_exit_2_before_any_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    workload = str(DATA / "tiny_workload.json")
    argv = ["simulate", "--workload", workload, "--policies", "beamer,beamer:aging_s=0"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # not even the valid policy ran
    err = captured.err.strip()
    assert "policy 'beamer:aging_s=0': aging_s=0 is not a number from 1e-06" in err
    assert len(err.splitlines()) == 1


def test_policies_built_in_python_are_checked_by_the_same_declarations() -> None:
    with pytest.raises(UserError, match=r"max_groups=1\.5 is not a whole number"):
        BeamerPolicy(max_groups=1.5)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="split_trials=1 is not true or false"):
        BeamerPolicy(split_trials=1)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="evals=True is not a whole number"):
        LookaheadPolicy(evals=True)
    with pytest.raises(UserError, match="tail_power=inf is not a number from 1 to 10"):
        LookaheadPolicy(tail_power=math.inf)
    # Ints are numbers; None turns an optional knob off.
    assert BeamerPolicy(merge_ratio=2, aging_s=None).merge_ratio == 2
    assert LookaheadPolicy(tail_weight=3).settings.tail_weight == 3


@pytest.mark.parametrize("base", sorted(TUNABLE))
def test_each_constructor_argument_is_declared_once_and_its_default_admitted(base: str) -> None:
    factory = TUNABLE[base]
    parameters = inspect.signature(factory).parameters
    assert list(factory.knobs) == list(parameters)
    for name, parameter in parameters.items():
        assert factory.knobs[name].admits(parameter.default), name


def test_knob_kinds_keep_bools_and_numbers_apart() -> None:
    count = Knob("int", 1, 5)
    assert count.admits(3) and not count.admits(3.0) and not count.admits(True)
    assert not count.admits(0) and not count.admits(6) and not count.admits(None)
    weight = Knob("float", 0.0, 2.0, above_minimum=True, optional=True)
    assert weight.admits(1) and weight.admits(2.0) and weight.admits(None)
    assert not weight.admits(0.0) and not weight.admits(False) and not weight.admits(math.nan)
    assert weight.parse("1") == 1.0 and isinstance(weight.parse("1"), float)
    with pytest.raises(ValueError):
        Knob("bool").parse("True")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_registered_policy_parses_as_a_spec(name: str) -> None:
    assert policy_from_spec(name).name == name


PLACEHOLDERS = ("knob=value", "key=value", "=A")
"""Spellings of the form in prose, not specs."""


def named_specs() -> list[str]:
    """Every ``beamer[-lookahead]:knob=value;...`` that the docs, the recorded results,
    the benchmarks and the registered policies name."""
    sources = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs" / "data").glob("*.json")),
        *sorted((ROOT / "bench").glob("*.py")),
        ROOT / "control" / "policies" / "__init__.py",
    ]
    pattern = re.compile(r"\bbeamer(?:-lookahead)?:[a-z_]+=[A-Za-z0-9_.+\-;=]*")
    found: set[str] = set()
    for path in sources:
        for match in pattern.findall(path.read_text()):
            spec = match.rstrip(";.")
            if not any(p in spec for p in PLACEHOLDERS):
                found.add(spec)
    return sorted(found)


IN_TESTS = [
    "beamer:coflow_tail=0",
    "beamer:split_trials=true;future_weight=0.5;ordering=bottleneck",
    "beamer-lookahead:tail_power=2;evals=3",
]
"""Valid specs the other tests use."""


def test_the_scan_finds_the_documented_specs() -> None:
    found = named_specs()
    assert len(found) >= 40
    assert {
        "beamer-lookahead:evals=20;run_tail_weight=2;run_tail_stages=3;sincronia_rival=true",
        "beamer-lookahead:tail_weight=2",
        "beamer-lookahead:guard_weight=1",
        "beamer:coflow_tail=2;tail_fits=true;tail_order=global",
        "beamer:merge_ratio=1.3",
    } <= set(found)


@pytest.mark.parametrize("spec", [*named_specs(), *IN_TESTS])
def test_every_named_spec_parses(spec: str) -> None:
    assert policy_from_spec(spec).name in ("beamer", "beamer-lookahead")


@pytest.mark.parametrize(
    "spec",
    [
        "beamer:max_groups=1;aging_s=1e-6;merge_ratio=1e6;stage_exponent=10;compute_weight=1e6",
        "beamer:coflow_tail=0;future_weight=1e6;starvation_guard=1e-9;duty_exponent=1e6",
        "beamer-lookahead:evals=0;window=1;max_simulations=0;tail_power=10;tail_weight=1e6",
        "beamer-lookahead:max_present=0;run_tail_weight=1e6;run_tail_stages=1000",
        "beamer-lookahead:evals=3;window=1000000;guard_weight=1e6;guard_slack=1e6;seed=4294967295",
    ],
)
def test_the_extremes_of_every_range_run_to_finite_times(spec: str) -> None:
    result = simulate(instance(2), policy_from_spec(spec), SimConfig(num_classes=8))
    assert result.sct_s and all(math.isfinite(s) for s in result.sct_s.values())
