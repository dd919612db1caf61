"""Numbers and ``HOST:PORT`` as the project's command lines and files spell them: ASCII
digits only."""

from __future__ import annotations

import ipaddress
import re

from control.errors import UserError

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
    not one; port 0 (any free port, for a listener) only with ``allow_zero``. Brackets
    hold an IPv6 address and nothing else, and a host with ':' needs them: ``[]:80``,
    ``[[:80`` or ``::1:80`` name no host, or not the one meant."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not is_decimal(port) or len(port) > 5:
        return None
    number = int(port)
    if number > 65535 or (number == 0 and not allow_zero):
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    elif "[" in host or "]" in host or ":" in host:
        return None
    return host, number


def checked_hostport(text: str, *, allow_zero: bool = False) -> tuple[str, int]:
    """(host, port) of a ``HOST:PORT`` that can ever be connected to or listened on, or a
    UserError saying why not: a host with a space or a control character, or that the
    name codec refuses (a label over 63 characters), would be retried for ever, or end
    in a traceback of ``http.client`` or the lookup (and a newline splits log lines)."""
    hostport = split_hostport(text, allow_zero=allow_zero)
    if hostport is None or "/" in text:
        raise UserError(f"{text!r} is not HOST:PORT")
    host = hostport[0]
    if any(char <= " " or char == "\x7f" for char in host):
        raise UserError(f"{text!r}: the host {host!r} holds a space or a control character")
    invisible = next((char for char in host if not char.isprintable()), None)
    if invisible is not None:
        # The name codec drops some (U+200B, U+00AD), so 'a\u200bb' would be a second
        # spelling of 'ab' that no comparison of addresses sees.
        raise UserError(
            f"{text!r}: the host {host!r} holds an invisible character U+{ord(invisible):04X}"
        )
    try:
        host.encode("idna")
    except UnicodeError as error:
        reason = error.__cause__ or error  # the codec's own reason, not its wrapper
        raise UserError(f"{text!r}: the host {host!r} is not a host name ({reason})") from None
    return hostport


def endpoint_keys(host: str, port: int) -> frozenset[tuple[str, int]]:
    """The listening sockets ``host:port`` may reach, spelled one way, so that two
    spellings of one server compare equal without a DNS lookup: names in lower case and
    without a final dot, IP addresses in their short form (an IPv4-mapped IPv6 address as
    IPv4), and ``localhost`` as both loopback addresses it resolves to."""
    name = host.lower().rstrip(".")
    if name == "localhost":
        return frozenset({("127.0.0.1", port), ("::1", port)})
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return frozenset({(name, port)})
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return frozenset({(address.compressed, port)})
