"""End to end in one process: beamer.p4 on the embedded switch, its P4Runtime server,
and the controller. Events go in; the entries are read back over P4Runtime; scapy
packets carrying the Beamer tag leave through the queues the schedule says; a policy
change reorders the classes while packets flow, and none meets a missing entry."""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from controller_helpers import SmallestFirst, one_class_per_rank
from scapy.layers.inet import IP, TCP, UDP, IPOption
from scapy.layers.l2 import Ether

from control.controller import Controller, ControllerConfig, PipelineArtifacts
from control.controller_cli import embedded_artifacts, load_policy
from control.entries import from_table_entry
from control.p4runtime_client import P4Names, P4RuntimeClient
from control.policies.base import Ranking, Snapshot
from control.policies.lookahead import LookaheadPolicy
from control.policies.static_order import StaticOrderPolicy
from control.topology import parse_topology
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch, VirtualClock

P4_SOURCE = Path(__file__).resolve().parents[1] / "p4src" / "beamer.p4"
HOSTS = (1, 2, 3)


@pytest.fixture(scope="module")
def artifacts() -> PipelineArtifacts:
    return embedded_artifacts(P4_SOURCE)


@dataclass
class Network:
    switch: Switch
    server: P4RuntimeServer
    controller: Controller

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return self.controller.handle_event({"type": kind, **fields})


@contextlib.contextmanager
def network(artifacts: PipelineArtifacts, queues: int = 8) -> Iterator[Network]:
    """beamer.p4 on an embedded switch of ``queues`` priority queues, its P4Runtime server,
    and a controller mapping onto that many classes; all stopped on the way out."""
    switch = Switch(clock=VirtualClock(), priority_queues=queues)
    for port in HOSTS:
        switch.add_memory_port(port)
    server = P4RuntimeServer(switch, 0, "127.0.0.1:0")
    server.start()
    topology = parse_topology(
        {
            "name": "e2e",
            "switches": [{"name": "s1", "device_id": 0, "grpc_addr": server.addr}],
            "hosts": [
                {"name": f"h{i}", "ip": f"10.0.0.{i}", "mac": f"02:00:00:00:00:0{i}"} for i in HOSTS
            ],
            "links": [{"node1": f"h{i}", "node2": "s1", "port2": i} for i in HOSTS],
        }
    )
    config = ControllerConfig(
        topology=topology,
        artifacts={"embedded": artifacts},
        policy_name="smallest-first",
        queues=queues,
        supervise_interval_s=0.05,
        counter_interval_s=0.1,
    )
    controller = Controller(config, SmallestFirst(), one_class_per_rank)
    try:
        controller.start()
        yield Network(switch, server, controller)
    finally:
        controller.stop()
        server.stop(0)
        switch.close()


@pytest.fixture
def net(artifacts: PipelineArtifacts) -> Iterator[Network]:
    with network(artifacts) as built:
        yield built


def _plan(experiment_id: int, sizes: list[int]) -> dict[str, Any]:
    return {
        "experiment_id": experiment_id,
        "stages": [
            {
                "stage_id": 0,
                "trials": [
                    {
                        "trial_id": t,
                        "iterations": 4,
                        "flows": [{"src": "h1", "dst": "h2", "size_bytes": size}],
                    }
                    for t, size in enumerate(sizes)
                ],
            }
        ],
    }


def _start(net: Network | Controller, experiment_id: int, sizes: list[int]) -> list[int]:
    """Release an experiment, start all its trials' first coflows; returns coflow ids."""
    controller = net.controller if isinstance(net, Network) else net

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return controller.handle_event({"type": kind, **fields})

    event("experiment_released", experiment=_plan(experiment_id, sizes))
    event("stage_released", experiment_id=experiment_id, stage_id=0)
    ids = []
    for trial in range(len(sizes)):
        key = {"experiment_id": experiment_id, "stage_id": 0, "trial_id": trial}
        event("trial_started", **key)
        ids.append(event("coflow_started", **key, iteration=0)["coflow_id"])
    return ids


def tag(experiment_id: int, stage_id: int, coflow_id: int) -> bytes:
    """The 12-byte Beamer tag option (team contract)."""
    return struct.pack("!BBBBHHI", 0x9E, 12, 0x10, 0, experiment_id, stage_id, coflow_id)


def packet(experiment_id: int, stage_id: int, coflow_id: int, seq: int = 0) -> bytes:
    frame = (
        Ether(dst="02:00:00:00:00:ff", src="02:00:00:00:00:01")
        / IP(
            src="10.0.0.1",
            dst="10.0.0.2",
            ttl=64,
            options=[IPOption(tag(experiment_id, stage_id, coflow_id))],
        )
        / UDP(sport=4000 + seq % 1000, dport=5000)
        / (seq.to_bytes(4, "big") + bytes(60))
    )
    return bytes(frame)


def untagged(seq: int = 0) -> bytes:
    frame = (
        Ether(dst="02:00:00:00:00:ff", src="02:00:00:00:00:01")
        / IP(src="10.0.0.1", dst="10.0.0.2", ttl=64)
        / UDP(sport=4000, dport=5000)
        / (seq.to_bytes(4, "big") + bytes(60))
    )
    return bytes(frame)


def departures(switch: Switch, port: int) -> list[Ether]:
    return [Ether(d.frame) for d in switch.ports[port].take()]  # type: ignore[attr-defined]


def class_of(frame: Ether) -> int:
    tos: int = frame[IP].tos
    return tos >> 5


def seq_of(frame: Ether) -> int:
    return int.from_bytes(bytes(frame[UDP].payload)[:4], "big")


def test_events_install_entries_read_back_over_p4runtime(
    net: Network, artifacts: PipelineArtifacts
) -> None:
    big = _start(net, 1, [5000])
    small = _start(net, 2, [100, 400])
    names = P4Names.build(artifacts.p4info)
    reader = P4RuntimeClient(net.server.addr, 0).read_only()
    try:
        entries = dict(
            from_table_entry(e, names) for e in reader.read_table(0) if not e.is_default_action
        )
    finally:
        reader.close()
    classes = {
        (key.table.rsplit(".", 1)[-1], tuple(v.value for _, v in key.match)): action.params
        for key, action in entries.items()
        if key.table != "MyIngress.ipv4_lpm"
    }
    # Order: (2,0,t0) 100 B → 7, (2,0,t1) 400 B → 6, (1,0,t0) 5000 B → 5.
    # Match fields come sorted by name: coflow_id, experiment_id, stage_id.
    assert classes == {
        ("stage_class", (1, 0)): (("class_id", 5),),
        ("stage_class", (2, 0)): (("class_id", 7),),
        ("coflow_class", (small[1], 2, 0)): (("class_id", 6),),
    }
    assert big == [0]
    lpm = [k for k in entries if k.table == "MyIngress.ipv4_lpm"]
    assert len(lpm) == 3


def pure_ack(seq: int = 0) -> bytes:
    """A TCP segment without payload, as a receiver's ACK."""
    frame = (
        Ether(dst="02:00:00:00:00:ff", src="02:00:00:00:00:01")
        / IP(src="10.0.0.1", dst="10.0.0.2", ttl=64)
        / TCP(sport=5001, dport=40000 + seq, flags="A", seq=1, ack=1000 + seq)
    )
    return bytes(frame)


@pytest.mark.parametrize("queues", [4, 8])
def test_acks_take_the_top_class_of_the_switchs_queues(
    artifacts: PipelineArtifacts, queues: int
) -> None:
    # The program's ACK class is 7; on a switch of 4 queues that queue does not exist,
    # and every handshake and ACK was dropped. The controller points it at queues - 1.
    with network(artifacts, queues) as built:
        switch = built.switch
        small = _start(built, 2, [100, 400])
        switch.set_queue_rate(rate_pps=1000, port=2)
        switch.send(1, packet(2, 0, small[1], seq=0))
        for seq in range(3):
            switch.send(1, pure_ack(seq))
        switch.run_until_idle()
        frames = departures(switch, 2)
        acks = [f for f in frames if f.haslayer(TCP)]
        assert [f[TCP].ack for f in acks] == [1000, 1001, 1002]
        assert {class_of(f) for f in acks} == {queues - 1}
        assert switch.queue_counters(2, queues - 1).enqueued_packets >= 3


def test_tagged_packets_leave_through_the_scheduled_queues(net: Network) -> None:
    big = _start(net, 1, [5000])
    small = _start(net, 2, [100, 400])
    switch = net.switch
    # Port 2 is slow: everything queues, then drains strictly by class.
    switch.set_queue_rate(rate_pps=1000, port=2)
    sent = []
    for _ in range(4):
        for experiment_id, coflow_id in ((1, big[0]), (2, small[1]), (2, small[0])):
            switch.send(1, packet(experiment_id, 0, coflow_id, seq=len(sent)))
            sent.append((experiment_id, coflow_id))
        switch.send(1, untagged(seq=len(sent)))
        sent.append((0, 0))
    switch.run_until_idle()
    frames = departures(switch, 2)
    assert len(frames) == len(sent)
    expected_class = {(1, big[0]): 5, (2, small[1]): 6, (2, small[0]): 7, (0, 0): 0}
    for frame in frames:
        assert class_of(frame) == expected_class[sent[seq_of(frame)]]
        assert frame[Ether].dst == "02:00:00:00:00:02"  # MAC rewritten by ipv4_lpm
        assert frame[IP].ttl == 63
        # The switch's checksum over the header with the tag is right: scapy agrees.
        recomputed = IP(bytes(frame[IP]))
        del recomputed.chksum
        assert IP(bytes(recomputed)).chksum == frame[IP].chksum
    # The first packet found the port idle; after it, strictly by class, FIFO inside.
    classes = [class_of(f) for f in frames[1:]]
    assert classes == sorted(classes, reverse=True)
    for klass in set(classes):
        seqs = [seq_of(f) for f in frames[1:] if class_of(f) == klass]
        assert seqs == sorted(seqs)
    for klass, count in ((7, 4), (6, 4), (5, 4), (0, 4)):
        assert switch.queue_counters(2, klass).enqueued_packets == count


def test_policy_change_reorders_classes_while_packets_flow_without_a_miss(
    net: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every tagged packet of a running stage gets a scheduled class (never the default
    class 0 of a missing entry) in every table state the controller passes through:
    packets are sent before and after each Write RPC it makes."""
    a = _start(net, 1, [3000])
    b = _start(net, 2, [2000, 2500])
    switch = net.switch
    flows = [(1, a[0]), (2, b[0]), (2, b[1])]
    observed: list[tuple[int, int, int]] = []

    def probe() -> None:
        for seq, (experiment_id, coflow_id) in enumerate(flows):
            switch.send(1, packet(experiment_id, 0, coflow_id, seq=seq))
        for frame in departures(switch, 2):
            experiment_id, coflow_id = flows[seq_of(frame)]
            observed.append((experiment_id, coflow_id, class_of(frame)))

    original = P4RuntimeClient.write
    rpcs: list[list[int]] = []

    def write_and_probe(client: P4RuntimeClient, updates: Any, *args: Any) -> None:
        probe()
        original(client, updates, *args)
        rpcs.append([u.type for u in updates])
        probe()

    monkeypatch.setattr(P4RuntimeClient, "write", write_and_probe)
    before = net.controller.status()["order"]
    # New small experiments push the others down; a trial stop turns coflow-level
    # entries into a stage-level one; a stage completes and its entry goes.
    for experiment_id in (3, 4, 5):
        _start(net, experiment_id, [10 * experiment_id])
    net.event("trial_stopped", experiment_id=2, stage_id=0, trial_id=1)
    net.event("trial_stopped", experiment_id=3, stage_id=0, trial_id=0)
    net.event("stage_completed", experiment_id=3, stage_id=0)
    net.event("coflow_finished", experiment_id=2, stage_id=0, trial_id=0, iteration=0)
    net.event("coflow_started", experiment_id=2, stage_id=0, trial_id=0, iteration=1)
    after = net.controller.status()["order"]
    assert before != after
    kinds = {kind for batch in rpcs for kind in batch}
    assert kinds == {1, 2, 3}  # inserts, modifies and deletes all happened
    assert len(observed) == 2 * len(rpcs) * len(flows)
    assert 0 not in {klass for _, _, klass in observed}, "a tagged packet met a missing entry"
    # Experiment 1 really moved down as smaller experiments arrived.
    first = [k for e, _, k in observed if e == 1]
    assert first[0] == 5 and min(first) < 5


def test_switch_restart_mid_run_restores_the_schedule(net: Network) -> None:
    ids = _start(net, 1, [100, 900])
    session = net.controller.sessions["s1"]
    # Simulate a cold reload: the switch drops its pipeline (and so every entry).
    net.switch.set_pipeline(None)
    deadline = threading.Event()
    for _ in range(500):
        if session.provisions == 2 and net.switch.pipeline is not None and session.state == "ready":
            break
        deadline.wait(0.02)
    assert session.provisions == 2
    for _ in range(500):
        net.switch.send(1, packet(1, 0, ids[1]))
        frames = departures(net.switch, 2)
        if frames and class_of(frames[0]) == 6:
            break
        deadline.wait(0.02)
    net.switch.send(1, packet(1, 0, ids[0]))
    net.switch.send(1, packet(1, 0, ids[1]))
    assert [class_of(f) for f in departures(net.switch, 2)] == [7, 6]


class LeastAttainedFirst:
    """Test policy without foresight: least bytes sent first (what aalo approximates)."""

    name: ClassVar[str] = "least-attained"
    clairvoyant: ClassVar[bool] = False
    allocator: ClassVar[str] = "priority"

    def rank(self, snapshot: Snapshot) -> Ranking:
        ordered = sorted(snapshot.coflows, key=lambda c: (c.sent_bytes, c.key))
        return Ranking(tuple((c.key,) for c in ordered))


def test_stage_counters_feed_progress_to_a_non_clairvoyant_policy(net: Network) -> None:
    net.controller.policy = LeastAttainedFirst()
    first = _start(net, 1, [10**6])
    _start(net, 2, [10**6])
    # Equal progress: experiment 1 ranks first by key.
    assert [tuple(o["coflow"][:2]) for o in net.controller.status()["order"]] == [(1, 0), (2, 0)]
    for seq in range(20):
        net.switch.send(1, packet(1, 0, first[0], seq=seq))
    departures(net.switch, 2)

    def sent(experiment_id: int) -> float:
        with net.controller._lock:
            coflows = net.controller.state.coflows
            return sum(c.sent_bytes for k, c in coflows.items() if k.experiment_id == experiment_id)

    whole = 20 * len(packet(1, 0, first[0]))
    for _ in range(250):
        # A poll may land while the switch is still counting: wait for the whole count.
        if sent(1) == whole and net.controller.status()["order"][0]["coflow"][0] == 2:
            break
        threading.Event().wait(0.02)
    # The counter read shows experiment 1 has sent; the policy now puts experiment 2 first.
    assert sent(1) == whole  # whole frames, as BMv2 counts
    assert sent(2) == 0
    assert [o["coflow"][0] for o in net.controller.status()["order"]] == [2, 1]


def test_the_beamer_policy_drives_the_switch(net: Network) -> None:
    """The shipped policy and quantiser, as ``beamer controller --policy beamer`` runs them:
    the experiment with less remaining demand gets the higher class, one per experiment."""
    policy, assign = load_policy("beamer", 8)
    net.controller.policy = policy
    net.controller.assign_classes = assign
    big = _start(net, 1, [4_000_000, 4_000_000])
    small = _start(net, 2, [100_000, 100_000])
    stages = {
        (s["experiment_id"], s["stage_id"]): s["class"] for s in net.controller.status()["stages"]
    }
    assert stages == {(2, 0): 7, (1, 0): 6}
    for experiment_id, coflow_id in ((1, big[0]), (2, small[1]), (1, big[1]), (2, small[0])):
        net.switch.send(1, packet(experiment_id, 0, coflow_id))
    assert [class_of(f) for f in departures(net.switch, 2)] == [6, 7, 6, 7]


def test_the_lookahead_searches_beside_the_controller_and_its_order_follows(
    net: Network,
) -> None:
    """``beamer-lookahead`` in the controller: an arrival is answered at once with the
    placement of its rule (here one that puts the big experiment first); the search runs
    in a worker process, and when it returns the controller re-ranks by itself and the
    switch forwards the small experiment in the top class."""
    policy, assign = load_policy("beamer-lookahead", 8)
    assert isinstance(policy, LookaheadPolicy)
    policy.rule = StaticOrderPolicy((1, 2))
    net.controller.policy = policy
    net.controller.assign_classes = assign
    big = _start(net, 1, [4_000_000, 4_000_000])
    small = _start(net, 2, [100_000, 100_000])

    def stage_classes() -> dict[tuple[int, int], int]:
        status = net.controller.status()["stages"]
        return {(s["experiment_id"], s["stage_id"]): s["class"] for s in status}

    assert stage_classes() == {(1, 0): 7, (2, 0): 6}
    reschedules = net.controller.reschedules
    deadline = time.monotonic() + 60
    while (classes := stage_classes())[(2, 0)] < classes[(1, 0)] and time.monotonic() < deadline:
        time.sleep(0.05)
    # The small experiment is above the big one (the numbers move as little as they can).
    assert classes[(2, 0)] > classes[(1, 0)]
    assert net.controller.reschedules > reschedules and policy.simulations >= 2
    for experiment_id, coflow_id in ((1, big[0]), (2, small[1])):
        net.switch.send(1, packet(experiment_id, 0, coflow_id))
    assert [class_of(f) for f in departures(net.switch, 2)] == [classes[(1, 0)], classes[(2, 0)]]
    assert policy._worker is not None
    process = policy._worker._process
    net.controller.stop()
    assert not process.is_alive()  # the controller's stop ended the search process


def test_a_reused_experiment_id_is_ranked_by_its_new_plan(net: Network) -> None:
    policy, assign = load_policy("beamer", 8)
    net.controller.policy = policy
    net.controller.assign_classes = assign
    net.controller.policy_factory = lambda: load_policy("beamer", 8)[0]
    _start(net, 1, [50_000_000])
    net.event("coflow_finished", experiment_id=1, stage_id=0, trial_id=0, iteration=0)
    net.event("experiment_finished", experiment_id=1)
    # Id 1 comes back with a far smaller plan: it, not experiment 2, is now the smaller.
    _start(net, 1, [100_000])
    _start(net, 2, [1_000_000])
    stages = {
        (s["experiment_id"], s["stage_id"]): s["class"] for s in net.controller.status()["stages"]
    }
    assert stages == {(1, 0): 7, (2, 0): 6}


def test_restarted_controller_with_another_build_of_the_pipeline_keeps_the_switch_state(
    net: Network, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same program compiled from another path spelling has another device config
    (and cookie): the new controller reconciles instead of wiping the tables."""
    net.controller.stop()
    journal = tmp_path / "events.jsonl"
    first = Controller(
        replace(net.controller.config, journal_path=journal), SmallestFirst(), one_class_per_rank
    )
    first.start()
    ids = _start(first, 1, [100, 900])
    first.stop()
    other_build = embedded_artifacts(Path(os.path.relpath(P4_SOURCE)))
    assert other_build.cookie != first.config.artifacts["embedded"].cookie
    writes: list[int] = []
    original = P4RuntimeClient.write

    def counting(client: P4RuntimeClient, updates: Any, *args: Any) -> None:
        writes.append(len(updates))
        original(client, updates, *args)

    monkeypatch.setattr(P4RuntimeClient, "write", counting)
    second = Controller(
        replace(first.config, artifacts={"embedded": other_build}),
        SmallestFirst(),
        one_class_per_rank,
    )
    try:
        second.start()
        assert second.sessions["s1"].state == "ready"
        assert second.sessions["s1"].provisions == 1  # reconciled, not replaced
        assert writes == []
        net.switch.send(1, packet(1, 0, ids[0]))
        net.switch.send(1, packet(1, 0, ids[1]))
        assert [class_of(f) for f in departures(net.switch, 2)] == [7, 6]
    finally:
        second.stop()
