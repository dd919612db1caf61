"""P4Runtime binary strings (spec §8.4): any length is accepted if the value fits the
bit width; replies always use the canonical (shortest) form for read-write symmetry."""

from __future__ import annotations

from softswitch.p4rt.status import out_of_range, shorten


def decode_unsigned(data: bytes, bitwidth: int, what: str) -> int:
    """The value of ``data`` as ``bit<bitwidth>``; OUT_OF_RANGE if empty or too wide."""
    if not data:
        raise out_of_range(f"{what}: empty byte string")
    value = int.from_bytes(data, "big")
    if value >> bitwidth:
        raise out_of_range(f"{what}: value 0x{shorten(data)} does not fit in {bitwidth} bits")
    return value


def encode_unsigned(value: int) -> bytes:
    """Canonical form: the shortest string holding ``value``; zero is one zero byte."""
    if value == 0:
        return b"\x00"
    return value.to_bytes((value.bit_length() + 7) // 8, "big")
