"""A run's life and end: names that never collide, input refused before anything is
built, teardown that finishes whatever interrupts it, and ``beamer clean`` that
removes only what dead runs left."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bmv2_topos import launcher, netns, state
from bmv2_topos.launcher import EmulatedNetwork
from control.errors import UserError
from control.topology import Topology, load_topology

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def _topology(
    tmp_path: Path,
    hosts: tuple[str, ...] = ("h1", "h2", "h3"),
    switches: tuple[str, ...] = ("s1",),
    grpc_addr: str = "127.0.0.1:9559",
    rates: tuple[int, ...] | None = None,
) -> Topology:
    """Hosts h_i on port i of the first switch, the switches in a chain behind it."""
    rates = rates or (20,) * len(hosts)
    first_free = len(hosts) + 1
    links: list[dict[str, Any]] = [
        {"node1": host, "node2": switches[0], "port2": index + 1, "rate_mbps": rate}
        for index, (host, rate) in enumerate(zip(hosts, rates, strict=True))
    ]
    links += [
        {"node1": left, "port1": first_free, "node2": right, "port2": 1, "rate_mbps": rates[0]}
        for left, right in itertools.pairwise(switches)
    ]
    host, port = grpc_addr.rsplit(":", 1)
    document = {
        "name": "lifecycle",
        "switches": [
            {"name": name, "device_id": index, "grpc_addr": f"{host}:{int(port) + index}"}
            for index, name in enumerate(switches)
        ],
        "hosts": [
            {
                "name": name,
                "ip": f"10.0.0.{index + 1}",
                "prefix_len": 24,
                "mac": f"02:00:00:00:00:{index + 1:02x}",
            }
            for index, name in enumerate(hosts)
        ],
        "links": links,
    }
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(document))
    return load_topology(path)


@pytest.fixture
def nothing_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entering a network fails the test if it gets as far as creating a run."""

    def create(cls: type[state.RunState], base: Path) -> state.RunState:
        raise AssertionError("the run was created before its input was checked")

    monkeypatch.setattr(netns, "require_root", lambda: None)
    monkeypatch.setattr(state.RunState, "create", classmethod(create))


# --- names ---------------------------------------------------------------------------


def test_long_switch_names_get_distinct_interfaces_within_fifteen_characters(
    tmp_path: Path,
) -> None:
    topology = _topology(tmp_path, switches=("spine_ab_00001", "spine_ab_00002", "s1"))
    network = EmulatedNetwork(topology)
    network.state = state.RunState("abcde", 0, 0)  # names only: nothing is created
    ends = [
        network._link_end(endpoint)
        for link in topology.links
        for endpoint in (link.end1, link.end2)
        if endpoint.port is not None
    ]
    names = [end.interface for end in ends]
    assert len(set(names)) == len(names), names
    assert all(len(name) <= 15 for name in names), names
    assert launcher.switch_interface("s1", 3, 2) == "s1-eth3"


def test_a_host_named_like_the_fabric_is_refused_in_one_line(
    tmp_path: Path, nothing_built: None
) -> None:
    topology = _topology(tmp_path, hosts=("h1", "sw"))
    with pytest.raises(UserError, match=r"hosts\[1\]\.name: 'sw' is reserved"):
        EmulatedNetwork(topology, policy=None).__enter__()


# --- addresses and rates, checked before anything is built ----------------------------


def test_a_bracketed_ipv6_switch_address_is_split_into_host_and_port() -> None:
    assert launcher.switch_listen_address("[::1]:9559", "grpc_addr") == ("::1", 9559)
    assert launcher.switch_listen_address("127.0.0.1:9559", "grpc_addr") == ("127.0.0.1", 9559)


def test_a_switch_on_the_controllers_event_port_is_refused_before_building(
    tmp_path: Path, nothing_built: None
) -> None:
    topology = _topology(tmp_path, grpc_addr=f"127.0.0.1:{launcher.EVENTS_PORT}")
    with pytest.raises(UserError, match=r"switches\[0\]\.grpc_addr: port 9100 is the controller"):
        EmulatedNetwork(topology).__enter__()


def test_links_of_different_rates_on_an_embedded_switch_are_refused_before_building(
    tmp_path: Path, nothing_built: None
) -> None:
    topology = _topology(tmp_path, rates=(20, 20, 40))
    with pytest.raises(UserError, match="links of different rates"):
        EmulatedNetwork(topology, policy=None).__enter__()


# --- teardown ------------------------------------------------------------------------


class _FakeNamespaces:
    """Namespaces that exist only in this list, for teardown without root."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.deleted: list[str] = []

    def delete(self, name: str) -> bool:
        self.names.remove(name)
        self.deleted.append(name)
        return True


@pytest.fixture
def fake_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[state.RunState, _FakeNamespaces]]:
    run = state.RunState.create(tmp_path / "runs")
    names = [f"{run.prefix}sw", f"{run.prefix}h1"]
    fake = _FakeNamespaces(list(names))
    monkeypatch.setattr(state.netns, "list_namespaces", lambda: list(fake.names))
    monkeypatch.setattr(state, "delete_namespace", fake.delete)
    for name in names:
        run.add_namespace(name)
    yield run, fake
    if run.claim is not None:
        run.claim.close()


def test_teardown_deletes_the_namespaces_even_when_saving_fails(
    fake_run: tuple[state.RunState, _FakeNamespaces],
) -> None:
    run, namespaces = fake_run
    shutil.rmtree(run.directory)  # the next save cannot write its file
    with pytest.raises(UserError, match="cannot write"):
        run.teardown()
    assert namespaces.names == [], "teardown left namespaces"


def test_teardown_interrupted_in_one_step_still_runs_the_others(
    fake_run: tuple[state.RunState, _FakeNamespaces], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, namespaces = fake_run
    run.processes.append(state.ProcessRecord(os.getpid(), 0, "switch-s1"))

    def interrupted(record: state.ProcessRecord, grace_s: float = 3.0) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(state, "terminate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.teardown()
    assert namespaces.names == [], "teardown left namespaces"
    assert run.directory.exists()  # the process it could not stop stays recorded
    assert [record.role for record in state.RunState.load(run.directory).processes] == ["switch-s1"]


def _assert_nothing_left(run: state.RunState) -> None:
    assert [name for name in netns.list_namespaces() if name.startswith(run.prefix)] == []
    assert not run.directory.exists()
    for record in run.processes:
        assert not record.alive(), f"{record.role} (pid {record.pid}) is still running"


def _remove(run: state.RunState) -> None:
    """What a failed test left behind, so the next tests start clean."""
    for record in run.processes:
        state.terminate(record)
    for name in netns.list_namespaces():
        if name.startswith(run.prefix):
            state.delete_namespace(name)
    shutil.rmtree(run.directory, ignore_errors=True)


def _signal_during(
    step: Callable[..., Any], signum: int
) -> Callable[..., Any]:  # the step, after the signal arrived
    sent: list[int] = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not sent:
            sent.append(signum)
            os.kill(os.getpid(), signum)
            time.sleep(0.3)  # the handler runs here, in the middle of the teardown
        return step(*args, **kwargs)

    return wrapper


@needs_root
@pytest.mark.root
@pytest.mark.parametrize(
    ("step", "signum"), [("terminate", signal.SIGINT), ("delete_namespace", signal.SIGTERM)]
)
def test_a_second_interruption_during_teardown_does_not_cut_it_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, signum: int
) -> None:
    topology = _topology(tmp_path)
    captured: list[state.RunState] = []
    try:
        with (
            pytest.raises(KeyboardInterrupt),
            EmulatedNetwork(topology, policy=None, runs_base=tmp_path / "runs") as network,
        ):
            assert network.state is not None
            captured.append(state.RunState.load(network.run_dir))
            assert len(captured[0].namespaces) == 4 and captured[0].processes
            monkeypatch.setattr(state, step, _signal_during(getattr(state, step), signum))
            os.kill(os.getpid(), signal.SIGTERM)  # the first one: unwinds the run
            time.sleep(5)
        _assert_nothing_left(captured[0])
    finally:
        monkeypatch.undo()
        for run in captured:
            _remove(run)


@needs_root
@pytest.mark.root
def test_a_switch_on_a_bracketed_ipv6_address_starts(tmp_path: Path) -> None:
    topology = _topology(tmp_path, grpc_addr="[::1]:9559")
    with EmulatedNetwork(topology, policy=None, runs_base=tmp_path / "runs") as network:
        network.check_processes()
        run = state.RunState.load(network.run_dir)
    _assert_nothing_left(run)


# --- beamer clean --------------------------------------------------------------------


def test_an_empty_runs_dir_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAMER_RUNS_DIR", "")
    assert state.runs_dir() == state.DEFAULT_RUNS_DIR


def test_clean_leaves_directories_that_only_look_like_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state.netns, "list_namespaces", lambda: [])
    monkeypatch.setattr(state, "tagged_processes", lambda: [])
    (tmp_path / "20241" / "sub").mkdir(parents=True)
    (tmp_path / "20241" / "sub" / "file").write_text("mine")
    (tmp_path / "cafe1").mkdir()
    (tmp_path / "cafe1" / "file").write_text("mine")
    hour_ago = time.time() - 3600
    for path in (tmp_path / "20241", tmp_path / "cafe1"):
        os.utime(path, (hour_ago, hour_ago))
    report = state.clean_leftovers(tmp_path)
    assert (tmp_path / "20241" / "sub" / "file").read_text() == "mine"
    assert (tmp_path / "cafe1" / "file").read_text() == "mine"
    assert report.removed == []
    # Said, so that a person can tell a broken run's directory from their own.
    assert sorted(line.split(":")[0] for line in report.unreadable) == [
        str(tmp_path / "20241"),
        str(tmp_path / "cafe1"),
    ]


HOLDER = """
import sys, time
from bmv2_topos import state
claim = state.claim_run_id(sys.argv[1])
print("held" if claim is not None else "taken", flush=True)
time.sleep(120)
"""


@needs_root
@pytest.mark.root
def test_clean_leaves_a_live_run_without_a_state_file_and_removes_it_once_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's owner is alive, its state lives in another runs directory, and its
    namespace is older than the freshness threshold (lowered to 0 here)."""
    run_id, claim = state.new_run_id(tmp_path)
    claim.close()
    name = f"bm{run_id}-h1"
    real_list, real_tagged = state.netns.list_namespaces, state.tagged_processes
    # Only this test's namespace and processes are ours to judge.
    monkeypatch.setattr(
        state.netns, "list_namespaces", lambda: [n for n in real_list() if n == name]
    )
    monkeypatch.setattr(
        state, "tagged_processes", lambda: [p for p in real_tagged() if p.run_id == run_id]
    )
    environment = {**os.environ, state.RUN_ID_VARIABLE: run_id}
    owner = subprocess.Popen(
        [sys.executable, "-c", HOLDER, run_id],
        env=environment,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "held"
        netns.run(["ip", "netns", "add", name])
        report = state.clean_leftovers(tmp_path / "elsewhere", fresh_s=0.0)
        assert name in netns.list_namespaces(), report
        owner.kill()
        owner.wait(timeout=10)
        report = state.clean_leftovers(tmp_path / "elsewhere", fresh_s=0.0)
        assert name not in netns.list_namespaces()
        assert f"namespace {name}" in report.removed
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=10)
        if owner.stdout is not None:
            owner.stdout.close()
        if name in real_list():
            state.delete_namespace(name)
