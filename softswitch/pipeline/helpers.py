"""Functions and exceptions the generated pipeline code calls at packet time."""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable
from typing import Any

from softswitch.runtime import CounterData


class _Reject(Exception):
    """The parser rejects the packet with an error code (v1model: parser_error)."""

    def __init__(self, code: int) -> None:
        self.code = code


class _Exit(Exception):
    """P4 ``exit``: leave the current control block at once."""


class _Locals:
    """Control-level variables of one control invocation."""


def _to_bytes(value: int, nbits: int) -> bytes:
    """Bits left-aligned in whole bytes, the last byte zero-padded (BMv2's field lists)."""
    pad = -nbits % 8
    return (value << pad).to_bytes((nbits + pad) // 8, "big")


def _hash_csum16(value: int, nbits: int) -> int:
    """Internet checksum (RFC 1071) of the bits, zero-padded to whole 16-bit words.

    The one's-complement sum of the 16-bit words of V equals V mod 0xFFFF
    (2**16 = 1 mod 0xFFFF), except that a non-zero V whose sum folds to
    0xFFFF gives 0 here; one big-int modulo replaces a loop over words.
    """
    padded = value << (-nbits % 16)
    remainder = padded % 0xFFFF
    if remainder == 0:
        return 0 if padded else 0xFFFF
    return 0xFFFF - remainder


def _csum16_finish(congruent: int, nbits: int) -> int:
    """Internet checksum from a number congruent to the data mod 0xFFFF (see csum16_data).

    ``congruent`` is zero exactly when every data bit is zero.
    """
    remainder = (congruent << (-nbits % 16)) % 0xFFFF
    if remainder == 0:
        return 0 if congruent else 0xFFFF
    return 0xFFFF - remainder


def _hash_crc32(value: int, nbits: int) -> int:
    return zlib.crc32(_to_bytes(value, nbits))


def _crc16_table() -> list[int]:
    """CRC-16/ARC (polynomial 0x8005 reflected, init 0), BMv2's ``crc16``."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC16_TABLE = _crc16_table()


def _hash_crc16(value: int, nbits: int) -> int:
    crc = 0
    for byte in _to_bytes(value, nbits):
        crc = (crc >> 8) ^ _CRC16_TABLE[(crc ^ byte) & 0xFF]
    return crc


def _hash_identity(value: int, nbits: int) -> int:
    """BMv2's ``identity``: the first (at most) eight bytes of the data."""
    data = _to_bytes(value, nbits)[:8]
    return int.from_bytes(data, "big")


def _hash_xor16(value: int, nbits: int) -> int:
    data = _to_bytes(value, nbits)
    if len(data) & 1:
        data += b"\0"
    result = 0
    for index in range(0, len(data), 2):
        result ^= (data[index] << 8) | data[index + 1]
    return result


def _hash_result(hashed: int, base: int, max_value: int) -> int:
    """v1model ``hash``: base + hash mod max; with max 0 the result is always base
    (v1model.p4 says so, and BMv2 does it)."""
    return base + hashed % max_value if max_value else base


def _lookahead(pkt: bytes, off: int, plen: int, nbits: int) -> int:
    nbytes = (nbits + 7) // 8
    if off + nbytes > plen:
        raise _Reject(_PACKET_TOO_SHORT)
    return int.from_bytes(pkt[off : off + nbytes], "big") >> (nbytes * 8 - nbits)


def _peek(
    extract: Callable[[Any, bytes, int, int], int], header: Any, pkt: bytes, off: int, plen: int
) -> Any:
    """``lookahead<header_t>()``: the header the next bytes would give, cursor unmoved."""
    extract(header, pkt, off, plen)
    return header


def _advance(off: int, plen: int, nbits: int) -> int:
    if nbits % 8:
        raise _Reject(_PARSER_INVALID_ARGUMENT)
    end = off + nbits // 8
    if end > plen:
        raise _Reject(_PACKET_TOO_SHORT)
    return end


def _count(cells: list[CounterData], index: int, length_bytes: int) -> None:
    """Indirect counter: an index out of range is ignored, as BMv2 logs and goes on."""
    if index < len(cells):
        cells[index].add(length_bytes)


def _reg_read(cells: list[int], index: int) -> int:
    return cells[index] if index < len(cells) else 0


def _reg_write(cells: list[int], index: int, value: int) -> None:
    if index < len(cells):
        cells[index] = value


def _random(low: int, high: int) -> int:
    return random.randint(low, high) if low <= high else low


# Error codes from core.p4's declaration order (checked when a program loads).
_PACKET_TOO_SHORT = 1
_PARSER_INVALID_ARGUMENT = 6

HELPERS = {
    "_Struct": struct.Struct,
    "_Reject": _Reject,
    "_Exit": _Exit,
    "_Locals": _Locals,
    "_hash_csum16": _hash_csum16,
    "_csum16_finish": _csum16_finish,
    "_hash_crc32": _hash_crc32,
    "_hash_identity": _hash_identity,
    "_hash_crc16": _hash_crc16,
    "_hash_xor16": _hash_xor16,
    "_hash_result": _hash_result,
    "_lookahead": _lookahead,
    "_peek": _peek,
    "_advance": _advance,
    "_count": _count,
    "_reg_read": _reg_read,
    "_reg_write": _reg_write,
    "_random": _random,
}
