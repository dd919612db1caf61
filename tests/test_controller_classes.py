"""Stable class numbers: the controller renumbers only where the ranking's order needs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from control.controller import stable_classes
from control.model import CoflowKey


def _groups(*experiments: int) -> list[tuple[CoflowKey, ...]]:
    return [(CoflowKey(e, 0, 0, 0),) for e in experiments]


def _previous(classes: Mapping[int, int]) -> Callable[[Sequence[CoflowKey]], int | None]:
    def previous(group: Sequence[CoflowKey]) -> int | None:
        return classes.get(group[0].experiment_id)

    return previous


def test_without_history_the_first_group_takes_the_top_class() -> None:
    assert stable_classes(_groups(1, 2, 3), 8, lambda _: None) == [7, 6, 5]


def test_a_group_going_idle_leaves_the_others_where_they_are() -> None:
    # Experiment 1 computes between iterations: 2 and 3 keep 6 and 5 (the plain
    # mapping would promote both, reordering the packets they have queued).
    assert stable_classes(_groups(2, 3), 8, _previous({1: 7, 2: 6, 3: 5})) == [6, 5]


def test_a_returning_group_gets_its_class_back() -> None:
    assert stable_classes(_groups(1, 2, 3), 8, _previous({1: 7, 2: 6, 3: 5})) == [7, 6, 5]


def test_a_swap_demotes_the_overtaken_group_instead_of_promoting_the_other() -> None:
    # 3 now ranks above 2: 2 moves down (its queued packets still leave first).
    assert stable_classes(_groups(3, 2), 8, _previous({2: 6, 3: 5})) == [5, 4]


def test_a_new_top_group_pushes_the_others_down_only_as_far_as_needed() -> None:
    assert stable_classes(_groups(9, 1, 2), 8, _previous({1: 7, 2: 5})) == [7, 6, 5]


def test_classes_stay_distinct_and_in_range_when_history_is_crowded() -> None:
    classes = stable_classes(_groups(*range(8)), 8, _previous({i: 0 for i in range(8)}))
    assert classes == [7, 6, 5, 4, 3, 2, 1, 0]


def test_more_groups_than_classes_are_left_to_the_quantiser() -> None:
    assert stable_classes(_groups(*range(9)), 8, lambda _: None) is None
    assert stable_classes([], 8, lambda _: None) == []
