"""Command lines that run a workload with a policy list naming one policy twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.cli import main
from control.errors import UserError
from control.policies.spec import parse_policy_list

TINY = str(Path(__file__).parent / "data" / "tiny_workload.json")


@pytest.mark.parametrize(
    "text",
    [
        "beamer:max_groups=1;coflow_tail=0,beamer:coflow_tail=0;max_groups=1",
        "beamer:max_groups=1,beamer:max_groups=01",
        "beamer:future_weight=2,beamer:future_weight=2.0",
        # A knob at its constructor's default changes nothing.
        "beamer:max_groups=1,beamer:max_groups=1;tail_fits=false",
        "beamer-lookahead:evals=3,beamer-lookahead:evals=03;seed=0",
    ],
)
def test_one_policy_in_two_spellings_is_refused(text: str) -> None:
    """Each spelling ran as a row of its own: the same policy twice."""
    first, second = text.split(",")
    with pytest.raises(UserError) as refused:
        parse_policy_list(text)
    assert str(refused.value) == f"--policies: {first!r} and {second!r} are the same policy"


def test_different_knobs_are_different_policies() -> None:
    text = "beamer,beamer:max_groups=1,beamer:max_groups=2,beamer:coflow_tail=0,beamer-lookahead"
    assert parse_policy_list(text) == tuple(text.split(","))


def test_simulate_refuses_the_same_policy_spelt_three_ways(
    capsys: pytest.CaptureFixture[str],
) -> None:
    policies = (
        "beamer:max_groups=1;coflow_tail=0,beamer:coflow_tail=0;max_groups=1,"
        "beamer:coflow_tail=00;max_groups=01"
    )
    try:
        status = main(["simulate", "--policies", policies, "--workload", TINY, "--jobs", "1"])
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    assert status == 2
    assert capsys.readouterr().err == (
        "beamer: error: --policies: 'beamer:max_groups=1;coflow_tail=0' and "
        "'beamer:coflow_tail=0;max_groups=1' are the same policy\n"
    )
