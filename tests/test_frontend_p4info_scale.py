"""P4Info for programs of tens of thousands of tables or actions: aliases and the order
of actions as before, without comparing every name with every other (that took
minutes). Comparisons are counted, never timed."""

from __future__ import annotations

import random

from softswitch.frontend import ast
from softswitch.frontend.errors import SourceLocation
from softswitch.frontend.lowered import ActionInfo, LoweredProgram, TableInfo
from softswitch.frontend.p4info import aliases, p4c_action_order


def pairwise_aliases(names: list[str]) -> dict[str, str]:
    """The former algorithm, kept as the reference: every suffix of every name
    against every other name."""
    all_names = sorted(set(names))
    result: dict[str, str] = {}
    for name in all_names:
        parts = name.split(".")
        for count in range(1, len(parts) + 1):
            suffix = ".".join(parts[-count:])
            clash = any(
                other != name and (other == suffix or other.endswith("." + suffix))
                for other in all_names
            )
            if not clash:
                result[name] = suffix
                break
        else:
            result[name] = name
    return result


def test_aliases_match_the_pairwise_algorithm_on_random_names() -> None:
    rng = random.Random(20240607)
    # Few distinct parts, so that suffixes are often shared; "" makes empty parts
    # (a name ending or starting with a dot, two dots in a row).
    parts = ["MyIngress", "MyEgress", "a", "b", "ab", "a.b", "", "count"]
    for _ in range(2000):
        names = [
            ".".join(rng.choice(parts) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(1, 12))
        ]
        assert aliases(names) == pairwise_aliases(names), names


def test_aliases_of_edge_cases() -> None:
    names = ["a.b", "x.a.b", "b", "c.", ".", "", "MyIngress.t", "MyEgress.t", "t2"]
    assert aliases(names) == pairwise_aliases(names)
    assert aliases(names)["a.b"] == "a.b"  # every suffix shared: the whole name
    assert aliases(iter(["z.y", "z.y"])) == {"z.y": "y"}  # duplicates count once


class CountingStr(str):
    """A name that counts the comparisons made with it."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        CountingStr.comparisons += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        CountingStr.comparisons += 1
        return str.__ne__(self, other)

    def endswith(self, *args: object) -> bool:
        CountingStr.comparisons += 1
        return str.endswith(self, *args)  # type: ignore[arg-type]

    __hash__ = str.__hash__


def test_aliases_do_not_compare_every_name_with_every_other() -> None:
    """Counted, not timed: the pairwise algorithm makes millions of comparisons here."""
    names = [CountingStr(f"MyIngress.t{i}") for i in range(2000)]
    CountingStr.comparisons = 0
    result = aliases(names)
    assert CountingStr.comparisons <= 10 * len(names)
    assert result["MyIngress.t7"] == "t7"


def test_the_order_of_actions_does_not_search_a_list_per_action() -> None:
    """80,000 actions in one table took over a minute: each was looked for in a list."""
    loc = SourceLocation("many.p4", 1, 1)
    lowered = LoweredProgram("")
    names = [CountingStr(f"MyIngress.a{i}") for i in range(2000)]
    for name in names:
        decl = ast.ActionDecl(loc, name.split(".")[1], [], ast.Block(loc, []))
        lowered.actions[name] = ActionInfo(name, decl, [], "MyIngress")
    actions = [(str(n), "") for n in names]
    table = TableInfo(
        "MyIngress.t", "MyIngress", [], actions, names[0], [], False, 1024, None, None
    )
    lowered.tables.append(table)
    CountingStr.comparisons = 0
    assert p4c_action_order(lowered) == names
    assert CountingStr.comparisons <= 10 * len(names)
