"""The trial's all-reduce and the trainable between real host namespaces through the
embedded switch, with a real controller (root only)."""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bmv2_topos import netns
from bmv2_topos.agent import beamer_option, local_coflow_id
from bmv2_topos.launcher import EmulatedNetwork
from control.events import EventClient, EventRejected
from control.model import Experiment, Stage, TrialStage
from control.topology import Topology, load_topology
from tuner.allreduce import GroupHost, WorkerGroup, sync_model_bytes
from tuner.contract import HostEndpoint, TrialAssignment, TuneNetwork, write_assignment
from tuner.trainable import model_bytes, run_trial
from tuner.training import DataParallelTraining, TrainingConfig
from workloads.hp_tuning import sync_flows

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)"),
]

REPO = Path(__file__).resolve().parents[1]
ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33


@pytest.fixture(scope="module")
def topology() -> Topology:
    return load_topology(REPO / "bmv2_topos" / "single_switch.json")


@pytest.fixture(scope="module")
def network(topology: Topology) -> Iterator[EmulatedNetwork]:
    with EmulatedNetwork(topology, policy="beamer") as emulated:
        yield emulated


def _endpoints(network: EmulatedNetwork, topology: Topology) -> dict[str, HostEndpoint]:
    return {
        host.name: HostEndpoint(network.host_namespace(host.name), str(host.ip))
        for host in topology.hosts
    }


def _index(topology: Topology, name: str) -> int:
    return [host.name for host in topology.hosts].index(name)


class Capture:
    """Every frame on one interface of a namespace (both directions), read by a thread."""

    def __init__(self, namespace: str, interface: str) -> None:
        executor = netns.namespace_executor(namespace)
        try:
            self.sock = executor.submit(
                socket.socket, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)
            ).result()
        finally:
            executor.shutdown()
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 * 1024 * 1024)
        self.sock.bind((interface, ETH_P_ALL))
        self.sock.settimeout(0.1)
        self.frames: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="capture")
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self.frames.append(self.sock.recv(65536))
            except TimeoutError:
                continue

    def stop(self) -> list[bytes]:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.frames


def _tcp_segments(frames: list[bytes], src_ip: str, dst_ip: str) -> list[tuple[bytes, int, int]]:
    """(IP options, sequence number, payload bytes) of each TCP segment src → dst."""
    segments = []
    for frame in frames:
        if len(frame) < 34 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        header = (ip[0] & 0x0F) * 4
        total = struct.unpack_from("!H", ip, 2)[0]
        if ip[9] != socket.IPPROTO_TCP:
            continue
        if (socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])) != (src_ip, dst_ip):
            continue
        tcp = ip[header:]
        payload = total - header - (tcp[12] >> 4) * 4
        segments.append((bytes(ip[20:header]), struct.unpack_from("!I", tcp, 4)[0], payload))
    return segments


def test_ring_allreduce_through_the_switch_sums_and_every_frame_carries_the_coflow_tag(
    network: EmulatedNetwork, topology: Topology
) -> None:
    endpoints = _endpoints(network, topology)
    names = ("h1", "h2", "h3")
    parameters = 300_001
    size = sync_model_bytes(parameters, "ring", 3)
    indices = tuple(_index(topology, name) for name in names)
    flows = sync_flows("ring", indices, size)
    experiment = Experiment(7, 0.0, (Stage(0, (TrialStage(0, 1, 0.0, flows, indices),)),))
    rng = np.random.default_rng(1)
    gradients = [rng.standard_normal(parameters).astype(np.float32) for _ in names]
    with EventClient(str(network.events_socket)) as client:
        client.experiment_released(experiment)
        client.stage_released(7, 0)
        client.trial_started(7, 0, 0)
        group = WorkerGroup(
            [GroupHost(name, endpoints[name]) for name in names],
            "ring",
            parameters,
            connect_option=beamer_option(7, 0, local_coflow_id(0, 0)),
        )
        with group:
            capture = Capture(network.host_namespace("h2"), "eth0")
            try:
                coflow_id = client.coflow_started(7, 0, 0, 0)
                option = beamer_option(7, 0, coflow_id)
                group.tag(option)
                results = group.allreduce(gradients)
                client.coflow_finished(7, 0, 0, 0)
            finally:
                frames = capture.stop()
        # the controller checks what it is told: a coflow beyond the plan is refused
        with pytest.raises(EventRejected, match="iteration"):
            client.coflow_started(7, 0, 0, 1)
        client.stage_completed(7, 0)

    # the sums: the ring's order, bit-equal on every worker
    reference = np.empty(parameters, np.float32)
    padded = [np.concatenate([g, np.zeros(size // 4 - parameters, np.float32)]) for g in gradients]
    chunk = size // 4 // 3
    for c in range(3):
        part = slice(c * chunk, (c + 1) * chunk)
        total = (padded[c][part] + padded[(c + 1) % 3][part]) + padded[(c + 2) % 3][part]
        reference[part] = total[: max(0, min(parameters, part.stop) - part.start)]
    assert all(result.tobytes() == reference.tobytes() for result in results)

    # the wire, on h2's side of the switch: h1's data and h2's ACKs, all tagged
    data = [s for s in _tcp_segments(frames, "10.0.0.1", "10.0.0.2") if s[2] > 0]
    acks = [s for s in _tcp_segments(frames, "10.0.0.2", "10.0.0.1") if s[2] == 0]
    assert data and acks
    assert {s[0] for s in data} == {option}
    assert {s[0] for s in acks} == {option}
    assert option[:2] == b"\x9e\x0c"
    assert struct.unpack("!HHI", option[4:]) == (7, 0, coflow_id)
    carried = sum(length for _, length in {(seq, length) for _, seq, length in data})
    assert carried == flows[0].size_bytes  # h1 → h2 is the ring's first flow


class Recording:
    """Forwards to the controller; keeps what it answered."""

    def __init__(self, client: EventClient) -> None:
        self.client = client
        self.answers: list[tuple[str, tuple[int, ...], Any]] = []

    def coflow_started(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> int:
        answer = self.client.coflow_started(experiment_id, stage_id, trial_id, iteration)
        self.answers.append(("started", (experiment_id, stage_id, trial_id, iteration), answer))
        return answer

    def coflow_finished(
        self, experiment_id: int, stage_id: int, trial_id: int, iteration: int
    ) -> object:
        answer = self.client.coflow_finished(experiment_id, stage_id, trial_id, iteration)
        self.answers.append(("finished", (experiment_id, stage_id, trial_id, iteration), answer))
        return answer


def test_the_trainable_runs_two_stages_on_different_hosts_and_the_controller_accepts_all(
    network: EmulatedNetwork, topology: Topology, tmp_path: Path
) -> None:
    config = {"learning_rate": 0.1, "batch_size": 64, "seed": 3}
    tune_network = TuneNetwork(
        _endpoints(network, topology), str(tmp_path), str(network.events_socket), "ring", 2
    )
    size = model_bytes(tune_network, config)
    placements = (("h4", "h5"), ("h6", "h7"))
    stages = []
    for stage_id, names in enumerate(placements):
        indices = tuple(_index(topology, name) for name in names)
        trial = TrialStage(0, 2, 0.0, sync_flows("ring", indices, size), indices)
        stages.append(Stage(stage_id, (trial,)))
    with EventClient(str(network.events_socket)) as driver:
        driver.experiment_released(Experiment(8, 0.0, tuple(stages)))

        def begin(stage_id: int) -> None:
            driver.stage_released(8, stage_id)
            driver.trial_started(8, stage_id, 0)
            write_assignment(
                tmp_path,
                "t1",
                TrialAssignment(8, stage_id, 0, placements[stage_id], 2 * stage_id, 2),
            )

        metrics: list[dict[str, Any]] = []
        checkpoints = []

        def report(values: dict[str, Any], checkpoint: Path | None) -> None:
            metrics.append(values)
            if checkpoint is not None:
                checkpoints.append(len(metrics))
                driver.stage_completed(8, values["stage_id"])
                if values["stage_id"] == 0:
                    begin(1)

        begin(0)
        with EventClient(str(network.events_socket)) as client:
            recording = Recording(client)
            training = run_trial(
                config, tune_network, "t1", report, max_iterations=4, events=recording
            )

    expected = [
        (kind, (8, stage, 0, i))
        for stage in (0, 1)
        for i in (0, 1)
        for kind in ("started", "finished")
    ]
    assert [(kind, key) for kind, key, _ in recording.answers] == expected
    coflow_ids = [answer for kind, _, answer in recording.answers if kind == "started"]
    assert all(isinstance(coflow_id, int) for coflow_id in coflow_ids)
    assert [m["stage_id"] for m in metrics] == [0, 0, 1, 1]
    assert checkpoints == [2, 4]
    assert all(m["sync_bytes"] == 2 * size for m in metrics)
    reference = DataParallelTraining(TrainingConfig.from_mapping(config), 2)
    assert training.iteration == 4
    assert metrics[-1]["validation_loss"] < reference.evaluate()["validation_loss"]
