"""Numbers and ``HOST:PORT`` as the project's command lines and files spell them: ASCII
digits only."""

from __future__ import annotations

import re

_DIGITS = re.compile(r"[0-9]+")
"""ASCII digits only: ``str.isdigit`` also takes '²' or '٩١٠٠', which ``int`` refuses or
reads as another number."""


def is_decimal(text: str) -> bool:
    """Whether ``text`` is a non-empty run of ASCII digits."""
    return _DIGITS.fullmatch(text) is not None


def written_plainly(number: str) -> bool:
    """Whether ``number`` is spelled as every reader of our formats reads it: int() and
    float() also take '1_0' and digits of other scripts ('١٠', '１０')."""
    return number.isascii() and "_" not in number


def split_hostport(text: str, *, allow_zero: bool = False) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT`` (an IPv6 host in brackets), or None when ``text`` is
    not one; port 0 (any free port, for a listener) only with ``allow_zero``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not is_decimal(port) or len(port) > 5:
        return None
    number = int(port)
    if number > 65535 or (number == 0 and not allow_zero):
        return None
    return host.strip("[]"), number
