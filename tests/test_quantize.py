"""Quantisation of rankings onto K strict-priority classes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from control.model import CoflowKey
from control.policies.base import Ranking
from control.quantize import STRATEGIES, group_classes, quantize


def test_ideal_gives_every_group_its_own_class_highest_first() -> None:
    assert group_classes(4, None) == [3, 2, 1, 0]


def test_groups_that_fit_get_one_class_each_whatever_the_strategy() -> None:
    for strategy in STRATEGIES:
        assert group_classes(3, 8, strategy, [5.0, 1.0, 1.0]) == [7, 6, 5]


def test_rank_strategy_shares_the_lowest_class() -> None:
    assert group_classes(6, 4, "rank") == [3, 2, 1, 0, 0, 0]


def test_exponential_strategy_doubles_each_class() -> None:
    assert group_classes(10, 4, "exponential") == [3, 2, 2, 1, 1, 1, 1, 0, 0, 0]


def test_equal_demand_cuts_at_equal_byte_shares() -> None:
    # Total 8: cuts at 2, 4, 6 bytes of cumulative demand before each group.
    assert group_classes(5, 4, "equal-demand", [2.0, 1.0, 1.0, 3.0, 1.0]) == [3, 2, 2, 1, 0]
    with pytest.raises(ValueError):
        group_classes(5, 4, "equal-demand")


def test_quantize_maps_each_coflow_to_its_groups_class() -> None:
    keys = [CoflowKey(e, 0, 0, 0) for e in range(4)]
    ranking = Ranking(((keys[0], keys[1]), (keys[2],), (keys[3],)))
    assert quantize(ranking, 2) == {keys[0]: 1, keys[1]: 1, keys[2]: 0, keys[3]: 0}


@given(
    st.integers(1, 60),
    st.integers(1, 9),
    st.sampled_from(STRATEGIES),
    st.lists(st.floats(0.0, 1e9), min_size=60, max_size=60),
)
def test_classes_are_in_range_and_never_invert_the_ranking(
    groups: int, k: int, strategy: str, sizes: list[float]
) -> None:
    classes = group_classes(groups, k, strategy, sizes[:groups])  # type: ignore[arg-type]
    assert all(0 <= c < k for c in classes)
    assert all(a >= b for a, b in itertools.pairwise(classes))
    assert classes[0] == k - 1
