"""Parsers of thousands of select cases or states load and run: their generated code does
not nest one level per case or state (an ``elif`` chain took Python's compiler past its
recursion limit from about 3,000, after the program had compiled)."""

from __future__ import annotations

from test_frontend_errors import VALID

from softswitch.frontend import compile_source
from softswitch.pipeline import Pipeline

IPV4_STATE = "        packet.extract(hdr.ipv4);\n        transition accept;\n    }\n"


def frame(ether_type: int, length: int = 64) -> bytes:
    ethernet = bytes.fromhex("020000000001000000000001") + ether_type.to_bytes(2, "big")
    ipv4 = bytes.fromhex("45000020000000001e0600000a0000010a000202")
    return (ethernet + ipv4).ljust(length, b"\0")


def deepest_indentation(source: str) -> int:
    return max((len(line) - len(line.lstrip(" "))) // 4 for line in source.splitlines())


def forward_everything(source: str) -> str:
    """Ingress forwards to port 2 and writes meta.scratch into the IPv4 diffserv byte."""
    return source.replace(
        "            ipv4_lpm.apply();",
        "            hdr.ipv4.diffserv = meta.scratch; ipv4_forward(1, 2);",
    )


def test_a_select_of_thousands_of_cases_loads_and_takes_the_first_match() -> None:
    cases = "\n".join(f"            {i}: accept;" for i in range(10_000, 13_000))
    source = forward_everything(
        VALID.replace(
            "            0x0800: parse_ipv4;",
            f"{cases}\n            12999: parse_ipv4;\n            0x0800: parse_ipv4;",
        )
    )
    program = compile_source(source, "cases.p4")
    assert deepest_indentation(program.lowered.source) < 10
    pipeline = Pipeline(program)
    [(port, _priority, data)] = pipeline.process(1, frame(0x0800))
    assert port == 2 and data[15] == 0  # the last case: IPv4 parsed, forwarded by ingress
    # 12999 is accepted by its first case: no IPv4, so ingress leaves it on port 0.
    assert pipeline.process(1, frame(12999)) == [(0, 0, frame(12999))]
    assert pipeline.internal_errors == 0


def test_a_chain_of_thousands_of_states_loads_and_runs_each_state_once_in_order() -> None:
    states = 3000
    chain = "".join(
        f"    state s{i} {{ meta.scratch = meta.scratch + 1; transition s{i + 1}; }}\n"
        for i in range(states)
    )
    source = forward_everything(
        VALID.replace(
            IPV4_STATE,
            IPV4_STATE.replace("transition accept;", "transition s0;")
            + chain
            + f"    state s{states} {{ transition accept; }}\n",
        )
    )
    program = compile_source(source, "states.p4")
    assert deepest_indentation(program.lowered.source) < 24
    pipeline = Pipeline(program)
    # 3,003 transitions: within the allowance of a 600-byte packet (1,024 + 4 per byte).
    [(port, _priority, data)] = pipeline.process(1, frame(0x0800, length=600))
    assert port == 2 and data[15] == states % 256
    assert pipeline.internal_errors == 0
