"""The controller's election id: its form on the command line and its default."""

from __future__ import annotations

import pytest

from control.p4runtime_client import (
    DEFAULT_ELECTION_ID,
    format_election_id,
    parse_election_id,
)


def test_both_forms_give_the_same_128_bit_id() -> None:
    assert parse_election_id("1,0") == 2**64 == parse_election_id(str(2**64))
    assert parse_election_id("0,7") == 7
    assert parse_election_id(" 3 , 5 ") == (3 << 64) | 5
    assert parse_election_id(format_election_id(DEFAULT_ELECTION_ID)) == DEFAULT_ELECTION_ID
    assert format_election_id(DEFAULT_ELECTION_ID) == "2,0"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0", "reserved"),
        ("0,0", "reserved"),
        ("-1", "not an integer"),
        ("1.5", "not an integer"),
        ("1,2,3", "not an integer"),
        ("x", "not an integer"),
        (str(2**128), "128-bit"),
        ("9" * 5000, "128-bit"),
        (f"{2**64},0", "64 bits"),
    ],
)
def test_bad_ids_are_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_election_id(text)


def test_the_default_is_above_the_usual_tools_defaults() -> None:
    shell_default = 1 << 64  # p4runtime-shell --election-id default (1, 0)
    tutorial_default = 1  # the P4 tutorials' p4runtime_lib
    assert DEFAULT_ELECTION_ID > shell_default > tutorial_default
