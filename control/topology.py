"""Topology files: load, validate, and derive each switch's IPv4 forwarding.

A topology file (``bmv2_topos/*.json``) names the switches (P4Runtime address,
device id), the hosts (one interface each: IP, prefix length, MAC) and the
links between them, with switch ports numbered explicitly. Every mistake is
reported as one :class:`~control.errors.UserError` naming the file and the
field (``links[2].port1``), before anything is started.

Forwarding is destination-based shortest paths by hop count. Among equal-cost
next hops the one reached through the lowest egress port wins, so the choice
is deterministic (independent of the order of the file) and, because every
switch follows the same per-destination distance field, loop-free.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import networkx as nx

from control.addresses import checked_hostport, endpoint_keys
from control.errors import UserError
from control.files import parse_json, read_text
from control.json_positions import JsonPath, line_of_path, steps_name
from workloads.limits import MAX_LINK_BPS, MIN_LINK_BPS

MAX_PORT = 510
"""Highest usable v1model port: ports are 9 bits and 511 means drop."""

Target = Literal["embedded", "bmv2"]

MAX_SWITCHES = 256
MAX_HOSTS = 4096
"""Far above any emulated or lab network (one machine runs a process per switch), and
checked before anything is derived: every switch holds a route per host, computed and
written at start, and the controller runs threads per switch; a 3,000-switch chain
took minutes and gigabytes to route. Links need no limit of their own: each takes two
ports, so a file cannot list more than the switches' ports and the hosts can hold."""

# fullmatch, not match with ``$``: ``$`` also matches before a final newline ("h2\n").
_MAC_RE = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,14}")
"""Node names become interface names (``h1-eth0``), so keep them short and plain."""

_TOP_KEYS = {"name", "switches", "hosts", "links", "description"}
_SWITCH_KEYS = {"name", "device_id", "grpc_addr", "thrift_port", "target"}


def _not_a_host_address(ip: ipaddress.IPv4Address, prefix_len: int) -> str | None:
    """What makes ``ip`` unusable as a host's own address on its subnet, if anything: the
    kernel would refuse it, or keep its packets to itself, or send them to everyone."""
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_reserved or ip == ipaddress.IPv4Address("255.255.255.255"):
        return "a reserved address"
    subnet = ipaddress.IPv4Network(f"{ip}/{prefix_len}", strict=False)
    if prefix_len <= 30 and ip == subnet.network_address:
        return f"the network address of {subnet}"
    if prefix_len <= 30 and ip == subnet.broadcast_address:
        return f"the broadcast address of {subnet}"
    return None


_HOST_KEYS = {"name", "ip", "prefix_len", "mac"}
_LINK_KEYS = {"node1", "port1", "node2", "port2", "rate_mbps"}


@dataclass(frozen=True, slots=True)
class SwitchSpec:
    """One P4Runtime switch: where to reach it and which target it runs."""

    name: str
    device_id: int
    grpc_addr: str
    thrift_port: int | None = None
    target: Target | None = None
    """``None``: the controller's default (CLI flag) decides."""


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One host with its single interface ``eth0``."""

    name: str
    ip: ipaddress.IPv4Address
    prefix_len: int
    mac: str

    @property
    def interface(self) -> ipaddress.IPv4Interface:
        return ipaddress.IPv4Interface(f"{self.ip}/{self.prefix_len}")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One end of a link; ``port`` is set for switches, ``None`` for hosts (eth0)."""

    node: str
    port: int | None


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A full-duplex link; ``rate_mbps`` ``None`` means not shaped."""

    end1: Endpoint
    end2: Endpoint
    rate_mbps: float | None

    def other(self, node: str) -> Endpoint:
        return self.end2 if self.end1.node == node else self.end1

    def end_of(self, node: str) -> Endpoint:
        return self.end1 if self.end1.node == node else self.end2


@dataclass(frozen=True, slots=True)
class Route:
    """One ``ipv4_lpm`` entry: packets for ``dst`` leave on ``egress_port``
    with their destination MAC rewritten to ``dst_mac``.

    The MAC written is the destination host's at every hop: the switches are
    P4 programs that do not filter on MAC, and the last hop needs exactly it.
    """

    dst: ipaddress.IPv4Network
    egress_port: int
    dst_mac: str
    host: str


@dataclass(frozen=True, slots=True)
class Topology:
    """A validated topology; build it with :func:`load_topology` or :func:`parse_topology`."""

    name: str
    switches: tuple[SwitchSpec, ...]
    hosts: tuple[HostSpec, ...]
    links: tuple[LinkSpec, ...]
    source: str = "<topology>"

    # --- lookups -----------------------------------------------------------------

    def switch(self, name: str) -> SwitchSpec:
        for spec in self.switches:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def host(self, name: str) -> HostSpec:
        for spec in self.hosts:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def host_index(self, name: str) -> int:
        """Position of a host in the file: its number in the big-switch port model."""
        for index, spec in enumerate(self.hosts):
            if spec.name == name:
                return index
        raise KeyError(name)

    def host_by_ip(self, ip: str | ipaddress.IPv4Address) -> HostSpec:
        address = ipaddress.IPv4Address(ip)
        for spec in self.hosts:
            if spec.ip == address:
                return spec
        raise KeyError(str(ip))

    def host_link(self, host: str) -> LinkSpec:
        """The one link of a host (validation guarantees exactly one)."""
        for link in self.links:
            if host in (link.end1.node, link.end2.node):
                return link
        raise KeyError(host)

    def links_of(self, node: str) -> list[LinkSpec]:
        return [link for link in self.links if node in (link.end1.node, link.end2.node)]

    def switch_ports(self, switch: str) -> dict[int, LinkSpec]:
        """Port number → link, for one switch."""
        ports: dict[int, LinkSpec] = {}
        for link in self.links_of(switch):
            port = link.end_of(switch).port
            assert port is not None
            ports[port] = link
        return dict(sorted(ports.items()))

    # --- graph and forwarding ----------------------------------------------------

    def graph(self) -> nx.Graph:
        """Nodes carry ``kind`` (switch/host); edges carry the lowest-port link."""
        graph = nx.Graph()
        for switch in self.switches:
            graph.add_node(switch.name, kind="switch")
        for host in self.hosts:
            graph.add_node(host.name, kind="host")
        for link in self.links:
            a, b = link.end1.node, link.end2.node
            if graph.has_edge(a, b):
                kept: LinkSpec = graph.edges[a, b]["link"]
                if _link_sort_key(link) >= _link_sort_key(kept):
                    continue
            graph.add_edge(a, b, link=link)
        return graph

    def routes(self) -> dict[str, list[Route]]:
        """Per switch name, one /32 route per host, sorted by destination address.

        A host is a leaf on one switch, so its distance field is its switch's plus one:
        one search per switch that has hosts, not one per host, and each route's
        address and MAC objects are shared by every switch (the routes themselves are
        switches × hosts, which the size limits bound)."""
        graph = self.graph()
        switch_graph = graph.subgraph(s.name for s in self.switches).copy()
        attachment: dict[str, Endpoint] = {}
        for link in self.links:
            for end, other in ((link.end1, link.end2), (link.end2, link.end1)):
                if end.port is None:
                    attachment[end.node] = other
        next_port: dict[str, dict[str, int]] = {}  # switch with hosts → switch → port toward it
        routes: dict[str, list[Route]] = {s.name: [] for s in self.switches}
        for host in sorted(self.hosts, key=lambda h: int(h.ip)):
            attached = attachment[host.name]
            assert attached.port is not None
            if attached.node not in next_port:
                next_port[attached.node] = _ports_toward(switch_graph, attached.node)
            toward = next_port[attached.node]
            dst = ipaddress.IPv4Network(f"{host.ip}/32")
            mac = host.mac.lower()
            for switch in self.switches:
                port = attached.port if switch.name == attached.node else toward.get(switch.name)
                if port is not None:
                    routes[switch.name].append(Route(dst, port, mac, host.name))
        return routes


def _ports_toward(switch_graph: nx.Graph, target: str) -> dict[str, int]:
    """Every other switch's egress port on a shortest path to the switch ``target`` in
    the graph of switches alone (hosts are leaves, no path crosses one), the lowest port
    among equal costs."""
    distance: dict[str, int] = nx.single_source_shortest_path_length(switch_graph, target)
    ports: dict[str, int] = {}
    for switch, hops in distance.items():
        for neighbour in switch_graph.neighbors(switch):
            if distance.get(neighbour) == hops - 1:
                link: LinkSpec = switch_graph.edges[switch, neighbour]["link"]
                port = link.end_of(switch).port
                assert port is not None
                if switch not in ports or port < ports[switch]:
                    ports[switch] = port
    return ports


def _link_sort_key(link: LinkSpec) -> tuple[int, int]:
    return (link.end1.port or 0, link.end2.port or 0)


# --- loading and validation -----------------------------------------------------------


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology file; every error names the file, the line and the
    field."""
    path = Path(path)
    text = read_text(path, what="topology file", missing="no such topology file")
    raw = parse_json(text, str(path))
    try:
        return parse_topology(raw, source=str(path))
    except _FieldError as error:
        line = line_of_path(text, error.path, of_key=error.of_key)
        raise UserError(f"{path}:{line}: {_named(error.path, error.detail)}") from None


def parse_topology(raw: Any, source: str = "<topology>") -> Topology:
    """Validate an already-decoded topology document."""
    return _Parser(source).parse(raw)


def _field_name(path: JsonPath) -> str:
    """How an error names the field at ``path``: ``links[2].port1`` (none for the document
    itself)."""
    return steps_name(path).removeprefix(".")


def _named(path: JsonPath, detail: str) -> str:
    """``detail`` behind the field it is about (none for the document itself)."""
    return f"{_field_name(path)}: {detail}" if path else detail


class _FieldError(UserError):
    """A refused field of a topology document: its place in the document (named in the
    message, and found in the text for the line) and what is wrong."""

    def __init__(self, source: str, path: JsonPath, detail: str, *, of_key: bool = False) -> None:
        super().__init__(f"{source}: {_named(path, detail)}")
        self.path = path
        self.detail = detail
        self.of_key = of_key
        """The key at ``path`` is refused (its line is the error's), not its value."""


class _Parser:
    """Reads the decoded document section by section; each reader takes the JSON path of
    the value it reads, so that a refusal names the field and its line."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: JsonPath, message: str, *, of_key: bool = False) -> UserError:
        """The error for the value at ``path`` (for its key, with ``of_key``)."""
        return _FieldError(self.source, path, message, of_key=of_key)

    # -- typed field readers --

    def obj(self, value: Any, path: JsonPath, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_kind(value)}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            # A key may hold any character: its name is quoted where it is no plain name.
            raise self.fail(
                (*path, unknown[0]),
                f"unknown field (allowed: {', '.join(sorted(allowed))})",
                of_key=True,
            )
        return value

    def required(self, obj: Mapping[str, Any], path: JsonPath, key: str) -> Any:
        """Member ``key`` of the object at ``path``."""
        if key not in obj:
            raise self.fail((*path, key), "missing required field")
        return obj[key]

    def string(self, value: Any, path: JsonPath) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def integer(self, value: Any, path: JsonPath, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if not low <= value <= high:
            raise self.fail(path, f"{value} is out of range {low}..{high}")
        return value

    def node_name(self, value: Any, path: JsonPath) -> str:
        name = self.string(value, path)
        if _NAME_RE.fullmatch(name) is None:
            raise self.fail(
                path,
                f"{name!r} is not a valid node name (a letter, then up to 14 letters, "
                "digits, '_' or '-')",
            )
        return name

    def listing(self, value: Any, path: JsonPath, non_empty: bool) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {_kind(value)}")
        if non_empty and not value:
            raise self.fail(path, "must not be empty")
        return value

    def sized(self, value: Any, path: JsonPath, limit: int) -> list[Any]:
        items = self.listing(value, path, non_empty=True)
        if len(items) > limit:
            noun = _field_name(path)
            raise self.fail(path, f"{len(items):,} {noun}, more than the limit of {limit:,}")
        return items

    # -- sections --

    def parse(self, raw: Any) -> Topology:
        top = self.obj(raw, (), _TOP_KEYS)
        name = self.string(self.required(top, (), "name"), ("name",))
        if "description" in top and not isinstance(top["description"], str):
            raise self.fail(("description",), f"expected a string, got {_kind(top['description'])}")
        switches = self.switches(self.required(top, (), "switches"))
        hosts = self.hosts(self.required(top, (), "hosts"), {s.name for s in switches})
        links = self.links(self.required(top, (), "links"), switches, hosts)
        topology = Topology(name, tuple(switches), tuple(hosts), tuple(links), self.source)
        self.check_connected(topology)
        return topology

    def switches(self, value: Any) -> list[SwitchSpec]:
        specs: list[SwitchSpec] = []
        names: dict[str, int] = {}
        addresses: dict[tuple[str, int], int] = {}
        for index, item in enumerate(self.sized(value, ("switches",), MAX_SWITCHES)):
            at: JsonPath = ("switches", index)
            obj = self.obj(item, at, _SWITCH_KEYS)
            name = self.node_name(self.required(obj, at, "name"), (*at, "name"))
            if name in names:
                raise self.fail((*at, "name"), f"duplicate name {name!r} (switches[{names[name]}])")
            names[name] = index
            device_id = self.integer(
                self.required(obj, at, "device_id"), (*at, "device_id"), 0, 2**64 - 1
            )
            addr_at = (*at, "grpc_addr")
            grpc_addr = self.string(self.required(obj, at, "grpc_addr"), addr_at)
            # Compared as the sockets they reach: 'localhost:9559' after '127.0.0.1:9559'
            # would leave the second switch a backup of the first for ever.
            keys = endpoint_keys(*self.address(grpc_addr, addr_at))
            clashes = [addresses[key] for key in keys if key in addresses]
            if clashes:
                other = specs[min(clashes)].grpc_addr
                shown = "" if other == grpc_addr else f" ({other})"
                raise self.fail(
                    addr_at, f"{grpc_addr} is already used by switches[{min(clashes)}]{shown}"
                )
            addresses.update(dict.fromkeys(keys, index))
            thrift_port = None
            if obj.get("thrift_port") is not None:
                thrift_port = self.integer(obj["thrift_port"], (*at, "thrift_port"), 1, 65535)
            target: Target | None = None
            if obj.get("target") is not None:
                if obj["target"] not in ("embedded", "bmv2"):
                    raise self.fail(
                        (*at, "target"), f"{obj['target']!r} is not one of 'embedded', 'bmv2'"
                    )
                target = obj["target"]
            specs.append(SwitchSpec(name, device_id, grpc_addr, thrift_port, target))
        return specs

    def address(self, text: str, path: JsonPath) -> tuple[str, int]:
        """Host and port of a ``HOST:PORT`` gRPC can ever connect to: otherwise the
        controller would retry it for ever, and a newline in it would split its log lines."""
        try:
            return checked_hostport(text)
        except UserError as error:
            raise self.fail(path, str(error)) from None

    def hosts(self, value: Any, switch_names: set[str]) -> list[HostSpec]:
        specs: list[HostSpec] = []
        names: dict[str, int] = {}
        ips: dict[ipaddress.IPv4Address, int] = {}
        macs: dict[str, int] = {}
        for index, item in enumerate(self.sized(value, ("hosts",), MAX_HOSTS)):
            at: JsonPath = ("hosts", index)
            obj = self.obj(item, at, _HOST_KEYS)
            name_at = (*at, "name")
            name = self.node_name(self.required(obj, at, "name"), name_at)
            if name in switch_names:
                raise self.fail(name_at, f"{name!r} is already the name of a switch")
            if name in names:
                raise self.fail(name_at, f"duplicate name {name!r} (hosts[{names[name]}])")
            names[name] = index
            ip_at = (*at, "ip")
            ip_text = self.string(self.required(obj, at, "ip"), ip_at)
            try:
                ip = ipaddress.IPv4Address(ip_text)
            except ValueError:
                raise self.fail(ip_at, f"{ip_text!r} is not an IPv4 address") from None
            if ip in ips:
                raise self.fail(ip_at, f"{ip} is already used by hosts[{ips[ip]}]")
            ips[ip] = index
            prefix_len = self.integer(obj.get("prefix_len", 24), (*at, "prefix_len"), 1, 32)
            problem = _not_a_host_address(ip, prefix_len)
            if problem is not None:
                raise self.fail(ip_at, f"{ip} is {problem}; a host needs a unicast address")
            mac_at = (*at, "mac")
            mac = self.string(self.required(obj, at, "mac"), mac_at).lower()
            if _MAC_RE.fullmatch(mac) is None:
                raise self.fail(mac_at, f"{mac!r} is not a MAC address aa:bb:cc:dd:ee:ff")
            if int(mac[:2], 16) & 1:
                raise self.fail(mac_at, f"{mac} is a multicast address")
            if mac in macs:
                raise self.fail(mac_at, f"{mac} is already used by hosts[{macs[mac]}]")
            macs[mac] = index
            specs.append(HostSpec(name, ip, prefix_len, mac))
        return specs

    def links(
        self, value: Any, switches: list[SwitchSpec], hosts: list[HostSpec]
    ) -> list[LinkSpec]:
        switch_names = {s.name for s in switches}
        host_names = {h.name for h in hosts}
        used_ports: dict[tuple[str, int], int] = {}
        host_links: dict[str, int] = {}
        specs: list[LinkSpec] = []
        for index, item in enumerate(self.listing(value, ("links",), non_empty=True)):
            at: JsonPath = ("links", index)
            obj = self.obj(item, at, _LINK_KEYS)
            ends: list[Endpoint] = []
            for side in ("1", "2"):
                node_at = (*at, f"node{side}")
                node = self.string(self.required(obj, at, f"node{side}"), node_at)
                port_at = (*at, f"port{side}")
                if node in switch_names:
                    port = self.integer(self.required(obj, at, f"port{side}"), port_at, 0, MAX_PORT)
                    if (node, port) in used_ports:
                        raise self.fail(
                            port_at,
                            f"port {port} of {node} is already used by "
                            f"links[{used_ports[node, port]}]",
                        )
                    used_ports[node, port] = index
                    ends.append(Endpoint(node, port))
                elif node in host_names:
                    if obj.get(f"port{side}") is not None:
                        raise self.fail(port_at, f"{node} is a host; hosts have one interface")
                    if node in host_links:
                        raise self.fail(
                            node_at,
                            f"host {node} already has a link (links[{host_links[node]}]); "
                            "hosts have one interface",
                        )
                    host_links[node] = index
                    ends.append(Endpoint(node, None))
                else:
                    raise self.fail(node_at, f"unknown node {node!r}")
            if ends[0].node == ends[1].node:
                raise self.fail(at, f"links {ends[0].node} to itself")
            if ends[0].port is None and ends[1].port is None:
                raise self.fail(at, "links two hosts; a host must connect to a switch")
            rate: float | None = None
            if obj.get("rate_mbps") is not None:
                rate_at = (*at, "rate_mbps")
                rate_value = obj["rate_mbps"]
                if (
                    isinstance(rate_value, bool)
                    or not isinstance(rate_value, int | float)
                    or not rate_value > 0
                ):
                    raise self.fail(rate_at, f"expected a positive number, got {rate_value!r}")
                # Compared as given: a huge integer does not convert to a float.
                if not MIN_LINK_BPS / 1e6 <= rate_value <= MAX_LINK_BPS / 1e6:
                    raise self.fail(
                        rate_at,
                        f"{rate_value!r} is out of range {MIN_LINK_BPS / 1e6:g}.."
                        f"{MAX_LINK_BPS / 1e6:g} (Mbit/s)",
                    )
                rate = float(rate_value)
            specs.append(LinkSpec(ends[0], ends[1], rate))
        for host in hosts:
            if host.name not in host_links:
                raise self.fail(("links",), f"host {host.name} has no link")
        return specs

    def check_connected(self, topology: Topology) -> None:
        graph = topology.graph()
        components = sorted(
            (sorted(component) for component in nx.connected_components(graph)),
            key=lambda names: names[0],
        )
        if len(components) > 1:
            raise self.fail(
                ("links",),
                "the network is not connected: "
                + " | ".join(", ".join(component) for component in components),
            )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
