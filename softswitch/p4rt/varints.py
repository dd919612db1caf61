"""Protobuf wire primitives for the messages the server writes as bytes (read replies,
batch statuses); a module of its own, as the writers import one another's errors."""

from __future__ import annotations

BYTE = [bytes((value,)) for value in range(256)]


def varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative values as their 64-bit two's complement."""
    if 0 <= value < 0x80:
        return BYTE[value]
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(key: int, payload: bytes) -> bytes:
    """One length-delimited field; ``key`` is (field number << 3) | 2, below 128."""
    return BYTE[key] + varint(len(payload)) + payload
