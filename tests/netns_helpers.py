"""A network namespace holding two veth pairs, for tests that drive real interfaces."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def ip_command(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@contextmanager
def two_veth_pairs(prefix: str) -> Iterator[str]:
    """A new namespace (its name starts with ``prefix``) with veth pairs sw0–h0 and
    sw1–h1, up, with IPv6 off (no autoconfiguration chatter) and, where ethtool is
    installed, segmentation offloads off (the switch reads frames as sent); deleted
    on the way out, also on failure."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    ip_command("netns", "add", name)
    try:
        subprocess.run(
            ["ip", "netns", "exec", name, "sysctl", "-qw",
             "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        for index in (0, 1):
            ip_command("-n", name, "link", "add", f"sw{index}", "type", "veth",
                       "peer", "name", f"h{index}")  # fmt: skip
            for interface in (f"sw{index}", f"h{index}"):
                if shutil.which("ethtool"):
                    subprocess.run(
                        ["ip", "netns", "exec", name, "ethtool", "-K", interface,
                         "tso", "off", "gso", "off", "gro", "off"],
                        capture_output=True, timeout=30, check=False,
                    )  # fmt: skip
                ip_command("-n", name, "link", "set", interface, "up")
        yield name
    finally:
        ip_command("netns", "del", name)
