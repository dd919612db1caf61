"""bench/common.py: the helpers every bench shares."""

from __future__ import annotations

import pytest

from bench import common
from bench.common import parse_seed_ranges, pool_size
from control.errors import UserError


def test_seed_ranges_expand_and_refuse_nonsense() -> None:
    assert parse_seed_ranges("11-13,20") == [11, 12, 13, 20]
    with pytest.raises(UserError, match="'5-x' is not a seed or a range"):
        parse_seed_ranges("5-x")
    with pytest.raises(UserError, match="'9-3' ends below its start"):
        parse_seed_ranges("9-3")
    with pytest.raises(UserError, match="seed 2 given more than once"):  # it would weigh twice
        parse_seed_ranges("1-3,2")
    with pytest.raises(UserError, match="names more than 100,000 seeds"):  # not expanded
        parse_seed_ranges("1-1000000000000")
    for text in ("1-1e12", "١-3", "", "1-", "-3"):
        with pytest.raises(UserError, match="is not a seed or a range"):
            parse_seed_ranges(text)


def test_the_pool_has_one_to_as_many_workers_as_the_machine_has_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common.os, "cpu_count", lambda: 8)
    assert [pool_size(n) for n in (-3, 0, 1, 6, 64)] == [1, 1, 1, 6, 8]
    monkeypatch.setattr(common.os, "cpu_count", lambda: None)
    assert pool_size(4) == 1
