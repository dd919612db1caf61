"""Topology loading, validation messages and shortest-path forwarding."""

from __future__ import annotations

import copy
import ipaddress
import json
import random
import re
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

import control.topology
from control.errors import UserError
from control.topology import MAX_HOSTS, MAX_SWITCHES, load_topology, parse_topology


def _host(index: int) -> dict[str, Any]:
    return {
        "name": f"h{index}",
        "ip": f"10.0.0.{index}",
        "prefix_len": 24,
        "mac": f"02:00:00:00:00:{index:02x}",
    }


def _single_switch() -> dict[str, Any]:
    return {
        "name": "single_switch",
        "switches": [
            {"name": "s1", "device_id": 0, "grpc_addr": "127.0.0.1:9559", "thrift_port": 9090}
        ],
        "hosts": [_host(1), _host(2), _host(3)],
        "links": [
            {"node1": f"h{i}", "node2": "s1", "port2": i, "rate_mbps": 20} for i in (1, 2, 3)
        ],
    }


def _line() -> dict[str, Any]:
    """h1 - s1 - s2 - s3 - h3, with h2 on s2."""
    switch = [
        {"name": f"s{i}", "device_id": i - 1, "grpc_addr": f"127.0.0.1:{9558 + i}"}
        for i in (1, 2, 3)
    ]
    return {
        "name": "line",
        "switches": switch,
        "hosts": [_host(1), _host(2), _host(3)],
        "links": [
            {"node1": "h1", "node2": "s1", "port2": 1},
            {"node1": "s1", "port1": 9, "node2": "s2", "port2": 8},
            {"node1": "h2", "node2": "s2", "port2": 2},
            {"node1": "s2", "port1": 7, "node2": "s3", "port2": 6},
            {"node1": "s3", "port1": 3, "node2": "h3"},
        ],
    }


def _diamond() -> dict[str, Any]:
    """s1 reaches s4 through s2 (port 5) or s3 (port 4): equal cost."""
    switch = [
        {"name": f"s{i}", "device_id": i, "grpc_addr": f"127.0.0.1:{9600 + i}"}
        for i in (1, 2, 3, 4)
    ]
    return {
        "name": "diamond",
        "switches": switch,
        "hosts": [_host(1), _host(4)],
        "links": [
            {"node1": "h1", "node2": "s1", "port2": 1},
            {"node1": "s1", "port1": 5, "node2": "s2", "port2": 1},
            {"node1": "s1", "port1": 4, "node2": "s3", "port2": 1},
            {"node1": "s2", "port1": 2, "node2": "s4", "port2": 2},
            {"node1": "s3", "port1": 2, "node2": "s4", "port2": 3},
            {"node1": "h4", "node2": "s4", "port2": 1},
        ],
    }


def _routes(raw: dict[str, Any]) -> dict[str, dict[str, tuple[int, str]]]:
    topology = parse_topology(raw)
    return {
        switch: {str(route.dst): (route.egress_port, route.dst_mac) for route in routes}
        for switch, routes in topology.routes().items()
    }


def test_single_switch_routes_every_host_to_its_port() -> None:
    routes = _routes(_single_switch())
    assert routes == {
        "s1": {
            "10.0.0.1/32": (1, "02:00:00:00:00:01"),
            "10.0.0.2/32": (2, "02:00:00:00:00:02"),
            "10.0.0.3/32": (3, "02:00:00:00:00:03"),
        }
    }


def test_line_routes_follow_the_path_in_both_directions() -> None:
    routes = _routes(_line())
    assert routes["s1"] == {
        "10.0.0.1/32": (1, "02:00:00:00:00:01"),
        "10.0.0.2/32": (9, "02:00:00:00:00:02"),
        "10.0.0.3/32": (9, "02:00:00:00:00:03"),
    }
    assert routes["s2"] == {
        "10.0.0.1/32": (8, "02:00:00:00:00:01"),
        "10.0.0.2/32": (2, "02:00:00:00:00:02"),
        "10.0.0.3/32": (7, "02:00:00:00:00:03"),
    }
    assert routes["s3"]["10.0.0.1/32"] == (6, "02:00:00:00:00:01")
    assert routes["s3"]["10.0.0.3/32"] == (3, "02:00:00:00:00:03")


def test_equal_cost_choice_takes_lowest_port_whatever_the_file_order() -> None:
    raw = _diamond()
    expected = _routes(raw)
    assert expected["s1"]["10.0.0.4/32"][0] == 4  # via s3, the lower port
    assert expected["s4"]["10.0.0.1/32"][0] == 2  # via s2, the lower port
    rng = random.Random(7)
    for _ in range(5):
        shuffled = copy.deepcopy(raw)
        rng.shuffle(shuffled["links"])
        rng.shuffle(shuffled["switches"])
        rng.shuffle(shuffled["hosts"])
        assert _routes(shuffled) == expected


def _walk(raw: dict[str, Any], start_switch: str, dst: str) -> list[str]:
    """Follow the routes hop by hop; returns the nodes visited."""
    topology = parse_topology(raw)
    routes = topology.routes()
    node, visited = start_switch, [start_switch]
    while node in routes:
        route = next(r for r in routes[node] if r.dst.network_address == ipaddress.ip_address(dst))
        link = topology.switch_ports(node)[route.egress_port]
        node = link.other(node).node
        visited.append(node)
        assert len(visited) < 10, f"forwarding loop {visited}"
    return visited


def test_routes_reach_the_host_on_a_shortest_path() -> None:
    assert _walk(_line(), "s1", "10.0.0.3") == ["s1", "s2", "s3", "h3"]
    assert _walk(_diamond(), "s4", "10.0.0.1") == ["s4", "s2", "s1", "h1"]
    assert _walk(_diamond(), "s1", "10.0.0.4") == ["s1", "s3", "s4", "h4"]


def test_graph_and_lookups() -> None:
    topology = parse_topology(_line())
    graph = topology.graph()
    assert graph.nodes["s1"]["kind"] == "switch"
    assert graph.nodes["h2"]["kind"] == "host"
    assert graph.number_of_edges() == 5
    assert topology.host_index("h3") == 2
    assert topology.host_by_ip("10.0.0.2").name == "h2"
    assert topology.host("h1").interface == ipaddress.IPv4Interface("10.0.0.1/24")
    assert sorted(topology.switch_ports("s2")) == [2, 7, 8]
    assert topology.host_link("h3").end_of("s3").port == 3


def test_load_topology_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_single_switch()))
    topology = load_topology(path)
    assert topology.name == "single_switch"
    assert topology.switch("s1").thrift_port == 9090
    assert topology.links[0].rate_mbps == 20.0


def test_bad_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{\n  "name": "x",\n  "switches": [,]\n}')
    with pytest.raises(UserError, match=r"t\.json:3:\d+: invalid JSON"):
        load_topology(path)


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"absent\.json: no such topology file"):
        load_topology(tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'{"name": "t",\n "switches": ' + b"[" * 100_000,
            r"t\.json:2: invalid JSON: nested deeper",
        ),
        (b'{"name": "t", "links": [' + b'{"a": ' * 5000, r"t\.json:1: invalid JSON: nested deeper"),
        (b'{"name": "t\xff"}', r"t\.json:1: not UTF-8 text \(byte 0xff at offset 11"),
        (b'{"name": "t",\n"x": 1' + b"0" * 5000 + b"}", r"t\.json:2: .*more than \d+ digits"),
        (b'{"name": "t",\n\n"x": NaN}', r"t\.json:3: invalid JSON: NaN is not a number"),
    ],
)
def test_hostile_files_are_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message) as refused:
        load_topology(path)
    assert len(str(refused.value).splitlines()) == 1


def _mutated(mutate: Any) -> dict[str, Any]:
    raw = _line()
    mutate(raw)
    return raw


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("switches"), r"switches: missing required field"),
        (lambda r: r.update(colour=1), r"colour: unknown field"),
        (lambda r: r.update(description=[[[]]]), r"description: expected a string, got"),
        (lambda r: r["switches"][1].update(device_id=-1), r"switches\[1\]\.device_id: -1 is out"),
        (
            lambda r: r["switches"][1].update(device_id="0"),
            r"switches\[1\]\.device_id: expected an integer",
        ),
        (
            lambda r: r["switches"][2].update(grpc_addr="127.0.0.1:9559"),
            r"switches\[2\]\.grpc_addr: 127.0.0.1:9559 is already used by switches\[0\]",
        ),
        (
            lambda r: r["switches"][0].update(grpc_addr="localhost"),
            r"switches\[0\]\.grpc_addr: 'localhost' is not HOST:PORT",
        ),
        (lambda r: r["switches"][0].update(target="tofino"), r"switches\[0\]\.target"),
        (lambda r: r["switches"][1].update(name="s1"), r"switches\[1\]\.name: duplicate name"),
        (lambda r: r["hosts"][0].update(name="s2"), r"hosts\[0\]\.name: 's2' is already"),
        (lambda r: r["hosts"][1].update(ip="10.0.0.256"), r"hosts\[1\]\.ip: .* not an IPv4"),
        (lambda r: r["hosts"][1].update(ip="10.0.0.1"), r"hosts\[1\]\.ip: 10.0.0.1 is already"),
        (lambda r: r["hosts"][2].update(mac="02:00:00:00:00"), r"hosts\[2\]\.mac: .* not a MAC"),
        (
            lambda r: r["hosts"][2].update(mac="01:00:00:00:00:09"),
            r"hosts\[2\]\.mac: 01:00:00:00:00:09 is a multicast",
        ),
        (lambda r: r["hosts"][2].update(prefix_len=33), r"hosts\[2\]\.prefix_len: 33 is out"),
        (
            lambda r: r["hosts"][2].update(name="h 3"),
            r"hosts\[2\]\.name: 'h 3' is not a valid node name",
        ),
        (lambda r: r["links"][0].update(node2="s9"), r"links\[0\]\.node2: unknown node 's9'"),
        (lambda r: r["links"][0].pop("port2"), r"links\[0\]\.port2: missing required field"),
        (lambda r: r["links"][0].update(port2=511), r"links\[0\]\.port2: 511 is out of range"),
        (
            lambda r: r["links"][2].update(port2=8),
            r"links\[2\]\.port2: port 8 of s2 is already used by links\[1\]",
        ),
        (lambda r: r["links"][0].update(port1=3), r"links\[0\]\.port1: h1 is a host"),
        (lambda r: r["links"][1].update(rate_mbps=0), r"links\[1\]\.rate_mbps: expected a pos"),
        (
            lambda r: r["links"][1].update(rate_mbps=1e-300),
            r"links\[1\]\.rate_mbps: 1e-300 is out of range 0\.001\.\.1e\+09 \(Mbit/s\)",
        ),
        (
            lambda r: r["links"][1].update(rate_mbps=1e300),
            r"links\[1\]\.rate_mbps: 1e\+300 is out of range",
        ),
        (  # an integer too large for a float: no OverflowError
            lambda r: r["links"][1].update(rate_mbps=10**400),
            r"links\[1\]\.rate_mbps: 1000+ is out of range",
        ),
        (  # '²' passes str.isdigit but is no port
            lambda r: r["switches"][1].update(grpc_addr="127.0.0.1:\u00b2"),
            r"switches\[1\]\.grpc_addr: '127\.0\.0\.1:²' is not HOST:PORT",
        ),
        (
            lambda r: r["switches"][1].update(grpc_addr="127.0.0.1:\u0669\u0661\u0660\u0660"),
            r"switches\[1\]\.grpc_addr: '127\.0\.0\.1:٩١٠٠' is not HOST:PORT",
        ),
        (  # '$' of re.match also matches before a final newline
            lambda r: r["hosts"][1].update(name="h2\n"),
            r"hosts\[1\]\.name: 'h2\\n' is not a valid node name",
        ),
        (
            lambda r: r["switches"][1].update(name="s2\n"),
            r"switches\[1\]\.name: 's2\\n' is not a valid node name",
        ),
        (
            lambda r: r["hosts"][2].update(mac="02:00:00:00:00:09\n"),
            r"hosts\[2\]\.mac: '02:00:00:00:00:09\\n' is not a MAC address",
        ),
        (
            lambda r: r["switches"][1].update(grpc_addr="127.0.0.1\n:19559"),
            r"switches\[1\]\.grpc_addr: '127\.0\.0\.1\\n:19559': the host .* holds a space or a "
            "control character",
        ),
        (
            lambda r: r["switches"][1].update(grpc_addr="127.0.0.1 :19559"),
            r"switches\[1\]\.grpc_addr: '127\.0\.0\.1 :19559': the host .* holds a space",
        ),
        (
            lambda r: r["switches"][1].update(grpc_addr="[[:19559"),
            r"switches\[1\]\.grpc_addr: '\[\[:19559' is not HOST:PORT",
        ),
        (
            lambda r: r["switches"][1].update(grpc_addr="[]:19559"),
            r"switches\[1\]\.grpc_addr: '\[\]:19559' is not HOST:PORT",
        ),
        (
            lambda r: r["switches"][1].update(grpc_addr="::1:9559"),
            r"switches\[1\]\.grpc_addr: '::1:9559' is not HOST:PORT",
        ),
        (
            lambda r: r["switches"][1].update(grpc_addr="a" * 64 + ".lab:9559"),
            r"switches\[1\]\.grpc_addr: 'a+\.lab:9559': the host .* is not a host name",
        ),
        (  # one socket, two spellings: the second switch would stay a backup for ever
            lambda r: r["switches"][2].update(grpc_addr="localhost:9559"),
            r"switches\[2\]\.grpc_addr: localhost:9559 is already used by switches\[0\] "
            r"\(127\.0\.0\.1:9559\)",
        ),
        (
            lambda r: (
                r["switches"][0].update(grpc_addr="Switch-1.Lab:9559"),
                r["switches"][2].update(grpc_addr="switch-1.lab.:9559"),
            ),
            r"switches\[2\]\.grpc_addr: switch-1\.lab\.:9559 is already used by switches\[0\]",
        ),
        (
            lambda r: (
                r["switches"][0].update(grpc_addr="[::1]:9559"),
                r["switches"][2].update(grpc_addr="LOCALHOST:9559"),
            ),
            r"switches\[2\]\.grpc_addr: LOCALHOST:9559 is already used by switches\[0\]",
        ),
        (
            lambda r: r.update(switches=[{}] * (MAX_SWITCHES + 1)),
            r"switches: 257 switches, more than the limit of 256$",
        ),
        (
            lambda r: r.update(hosts=[{}] * (MAX_HOSTS + 1)),
            r"hosts: 4,097 hosts, more than the limit of 4,096$",
        ),
        (lambda r: r["links"][1].update(node2="s1", port2=2), r"links\[1\]: links s1 to itself"),
        (
            lambda r: r["links"].append({"node1": "h1", "node2": "s3", "port2": 9}),
            r"links\[5\]\.node1: host h1 already has a link",
        ),
        (lambda r: r["links"].pop(2), r"links: host h2 has no link"),
        (lambda r: r["links"].pop(3), r"links: the network is not connected"),
        (lambda r: r.update(links=[]), r"links: must not be empty"),
    ],
)
def test_validation_names_the_field(mutate: Any, message: str) -> None:
    with pytest.raises(UserError, match=r"^<topology>: " + message):
        parse_topology(_mutated(mutate))


def test_an_unknown_key_is_refused_at_its_own_line(tmp_path: Path) -> None:
    text = json.dumps(_line(), indent=2).replace(
        '"name": "line",', '"name": "line",\n  "bogus":\n\n    7,\n  "\u3164": 0,', 1
    )
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}:3: bogus: unknown field"):
        load_topology(path)
    path.write_text(text.replace('"bogus":\n\n    7,\n', "", 1))
    # An identifier blank to the eye (HANGUL FILLER) is quoted too.
    with pytest.raises(UserError, match=r':3: \["\\u3164"\]: unknown field'):
        load_topology(path)


def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


@pytest.mark.parametrize(
    ("mutate", "needle", "lines_before", "message"),
    [
        (
            lambda r: r["hosts"][1].update(mac="nope"),
            '"nope"',
            0,
            r"hosts\[1\]\.mac: 'nope' is not",
        ),
        (
            lambda r: r["links"][3].update(port1=8),
            '"port1": 8',
            0,
            r"links\[3\]\.port1: port 8 of s2 is already used by links\[1\]",
        ),
        (
            lambda r: r["switches"][2].update({"grpc.addr[0]": 1}),
            '"grpc.addr[0]"',
            0,
            r'switches\[2\]\["grpc\.addr\[0\]"\]: unknown field',
        ),
        (lambda r: r.update({"x\ny": 1}), '"x\\ny"', 0, r'\["x\\ny"\]: unknown field'),
        # A missing field: the line where its object opens, the one before its first key.
        (lambda r: r["hosts"][2].pop("ip"), '"name": "h3"', 1, r"hosts\[2\]\.ip: missing"),
        # A list's own problem: the line of the list.
        (lambda r: r["links"].pop(2), '"links"', 0, r"links: host h2 has no link"),
    ],
)
def test_validation_error_names_the_file_and_line(
    tmp_path: Path, mutate: Any, needle: str, lines_before: int, message: str
) -> None:
    text = json.dumps(_mutated(mutate), indent=2)
    line = _line_of(text, needle) - lines_before
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}:{line}: {message}") as refused:
        load_topology(path)
    assert len(str(refused.value).splitlines()) == 1


SHIPPED = sorted((Path(__file__).resolve().parents[1] / "bmv2_topos").glob("*.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_topologies_load_and_route_every_host_from_every_switch(path: Path) -> None:
    topology = load_topology(path)
    raw = json.loads(path.read_text())
    routes = topology.routes()
    for switch in topology.switches:
        assert {r.host for r in routes[switch.name]} == {h.name for h in topology.hosts}
        for host in topology.hosts:
            visited = _walk(raw, switch.name, str(host.ip))
            assert visited[-1] == host.name
            # Hop count equals the graph's shortest path: no detours.
            shortest = nx.shortest_path(topology.graph(), switch.name, host.name)
            assert len(visited) == len(shortest)


def test_a_topology_at_the_size_limits_loads() -> None:
    """The limits refuse what no emulated or lab network needs, nothing below them."""
    switches = [
        {"name": f"s{i}", "device_id": i, "grpc_addr": f"127.0.0.1:{20000 + i}"}
        for i in range(MAX_SWITCHES)
    ]
    hosts = [
        {
            "name": f"h{i}",
            "ip": f"10.0.{(i + 1) >> 8}.{(i + 1) & 255}",
            "prefix_len": 16,
            "mac": f"02:00:00:00:{i >> 8:02x}:{i & 255:02x}",
        }
        for i in range(MAX_HOSTS)
    ]
    links = [
        {"node1": f"s{i}", "port1": 1, "node2": f"s{i + 1}", "port2": 2}
        for i in range(MAX_SWITCHES - 1)
    ]
    links += [
        {"node1": f"h{i}", "node2": f"s{i % MAX_SWITCHES}", "port2": 3 + i // MAX_SWITCHES}
        for i in range(MAX_HOSTS)
    ]
    raw = {"name": "limits", "switches": switches, "hosts": hosts, "links": links}
    topology = parse_topology(raw)
    assert (len(topology.switches), len(topology.hosts)) == (MAX_SWITCHES, MAX_HOSTS)


def _reference_routes(topology: Any) -> dict[str, dict[str, int]]:
    """Per switch, host name → egress port: one search per destination host, the lowest
    port among the neighbours one hop closer (the definition, at its plainest)."""
    graph = topology.graph()
    switches = {s.name for s in topology.switches}
    ports: dict[str, dict[str, int]] = {name: {} for name in switches}
    for host in topology.hosts:
        distance = nx.single_source_shortest_path_length(graph, host.name)
        for switch in switches:
            closer = [
                graph.edges[switch, n]["link"].end_of(switch).port
                for n in graph.neighbors(switch)
                if distance[n] == distance[switch] - 1 and (n in switches or n == host.name)
            ]
            ports[switch][host.name] = min(closer)
    return ports


def _random_topology(rng: random.Random) -> dict[str, Any]:
    count = rng.randint(1, 10)
    free = {i: rng.sample(range(1, 60), 59) for i in range(count)}
    switches = [
        {"name": f"s{i}", "device_id": i, "grpc_addr": f"127.0.0.1:{9000 + i}"}
        for i in range(count)
    ]
    pairs = [(i, rng.randrange(i)) for i in range(1, count)]
    pairs += [(rng.randrange(count), rng.randrange(count)) for _ in range(count)]
    links = [
        {"node1": f"s{a}", "port1": free[a].pop(), "node2": f"s{b}", "port2": free[b].pop()}
        for a, b in pairs
        if a != b
    ]
    hosts = [_host(i) for i in range(1, rng.randint(2, 12))]
    for host in hosts:
        switch = rng.randrange(count)
        links.append({"node1": host["name"], "node2": f"s{switch}", "port2": free[switch].pop()})
    rng.shuffle(links)
    return {"name": "random", "switches": switches, "hosts": hosts, "links": links}


def test_routes_search_once_per_switch_with_hosts_and_share_what_routes_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search per host and new address objects per route made a 3,000-switch chain run
    for minutes and take gigabytes; the routes stay those of the definition."""
    raw = _line()  # hosts on s1, s2 and s3
    raw["hosts"].append(_host(4))
    raw["links"].append({"node1": "h4", "node2": "s2", "port2": 4})
    searches: list[str] = []
    search = nx.single_source_shortest_path_length

    def counted(graph: nx.Graph, source: str) -> dict[str, int]:
        searches.append(source)
        return search(graph, source)

    monkeypatch.setattr(control.topology.nx, "single_source_shortest_path_length", counted)
    routes = parse_topology(raw).routes()
    assert sorted(searches) == ["s1", "s2", "s3"]
    assert routes["s1"][3].dst is routes["s3"][3].dst
    assert routes["s1"][3].dst_mac is routes["s3"][3].dst_mac
    monkeypatch.undo()
    rng = random.Random(5)
    for _ in range(200):
        topology = parse_topology(_random_topology(rng))
        derived = {
            switch: {route.host: route.egress_port for route in switch_routes}
            for switch, switch_routes in topology.routes().items()
        }
        assert derived == _reference_routes(topology)


@pytest.mark.parametrize(
    ("ip", "prefix_len", "problem"),
    [
        ("0.0.0.0", 24, "the unspecified address"),
        ("127.0.0.5", 24, "a loopback address"),
        ("224.0.0.5", 24, "a multicast address"),
        ("255.255.255.255", 24, "a reserved address"),
        ("240.0.0.1", 24, "a reserved address"),
        ("10.0.0.255", 24, "the broadcast address of 10.0.0.0/24"),
        ("10.0.0.0", 24, "the network address of 10.0.0.0/24"),
        ("10.0.1.255", 16, None),
        ("10.0.0.9", 31, None),
    ],
)
def test_a_host_address_must_be_unicast_on_its_subnet(
    ip: str, prefix_len: int, problem: str | None
) -> None:
    """Such an address built a network and then failed in the middle of a run (the kernel
    refused it, kept the host's packets to itself, or sent them to every host)."""
    document = _single_switch()
    document["hosts"][1].update(ip=ip, prefix_len=prefix_len)
    if problem is None:
        assert parse_topology(document).hosts[1].ip == ipaddress.IPv4Address(ip)
        return
    with pytest.raises(UserError) as refused:
        parse_topology(document)
    assert f"hosts[1].ip: {ip} is {problem}; a host needs a unicast address" in str(refused.value)
