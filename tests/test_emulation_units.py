"""Emulation pieces that need no root: tag bytes, HTB lines, names, metrics, state files."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP

from bmv2_topos import bmv2, state
from bmv2_topos.agent import ControllerOptional, NoController, beamer_option, local_coflow_id
from bmv2_topos.emulate import alone_sct_s, percentile, predicted_scts_s, topology_link_bps
from bmv2_topos.launcher import switch_interface
from control.errors import UserError
from control.events import ControllerUnreachable
from control.model import Experiment, Flow, Stage, TrialStage, Workload
from control.topology import load_topology

REPO = Path(__file__).resolve().parents[1]


def test_beamer_option_bytes_follow_the_contract() -> None:
    option = beamer_option(experiment_id=0x0102, stage_id=0x0304, coflow_id=0x05060708)
    assert option == bytes.fromhex("9e0c10000102030405060708")
    # As the first option of an IPv4 header it makes IHL 8 and scapy parses it back.
    packet = IP(bytes(IP(dst="10.0.0.2", options=option) / TCP()))
    assert packet.ihl == 8
    raw_options = bytes(packet)[20:32]
    assert raw_options == option


def test_local_coflow_id_is_trial_then_iteration() -> None:
    assert local_coflow_id(3, 7) == (3 << 16) | 7
    assert local_coflow_id(0xFFFF, 0x1_0001) == 0xFFFF_0001


def test_htb_lines_give_higher_classes_lower_htb_prio_and_match_dscp() -> None:
    lines = bmv2.htb_commands("s1-eth3", 20)
    assert lines[0] == "qdisc replace dev s1-eth3 root handle 1: htb default 10"
    assert "classid 1:1 htb rate 20mbit ceil 20mbit" in lines[1]
    class_lines = [line for line in lines if "parent 1:1 " in line]
    filters = [line for line in lines if line.startswith("filter")]
    assert len(class_lines) == len(filters) == 8
    # class 7 (most urgent) → HTB prio 0, served first; class 0 → prio 7.
    assert class_lines[7].endswith("prio 0") and "classid 1:17" in class_lines[7]
    assert class_lines[0].endswith("prio 7") and "classid 1:10" in class_lines[0]
    # DSCP = 8 × class: TOS byte = class << 5.
    assert "match ip tos 0xe0 0xfc flowid 1:17" in filters[7]
    assert "match ip tos 0x20 0xfc flowid 1:11" in filters[1]


def test_simple_switch_grpc_command_puts_target_options_after_double_dash() -> None:
    argv = bmv2.switch_command("ssg", 0, [(1, "s1-eth1"), (2, "s1-eth2")], "127.0.0.1:9559", 9090)
    separator = argv.index("--")
    assert argv[:separator] == [
        "ssg", "--device-id", "0", "-i", "1@s1-eth1", "-i", "2@s1-eth2",
        "--thrift-port", "9090", "--no-p4",
    ]  # fmt: skip
    assert argv[separator + 1 :] == [
        "--grpc-server-addr", "127.0.0.1:9559", "--priority-queues", "8",
    ]  # fmt: skip


def test_interface_names_fit_in_fifteen_characters() -> None:
    assert switch_interface("s1", 3) == "s1-eth3"
    assert len(switch_interface("spine_switch_01", 510)) <= 15


def test_percentile_is_nearest_rank() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0


def test_alone_sct_counts_compute_and_busiest_port() -> None:
    # Two flows into host 2: its downlink carries 2 MB → 0.8 s at 20 Mbit/s, plus 0.1 s compute.
    trial = TrialStage(1, 3, 0.1, (Flow(0, 2, 1_000_000), Flow(1, 2, 1_000_000)))
    assert alone_sct_s(Stage(0, (trial,)), 20e6) == pytest.approx(3 * (0.1 + 0.8))


def test_alone_sct_is_bounded_by_the_busiest_port_of_the_whole_stage() -> None:
    # Four one-iteration trials all sending 1 MB into host 3: each alone needs 0.4 s,
    # together the downlink of host 3 carries 4 MB: 1.6 s at 20 Mbit/s.
    trials = tuple(TrialStage(t, 1, 0.0, (Flow(t, 3, 1_000_000),)) for t in range(3))
    trials += (TrialStage(3, 1, 0.0, (Flow(4, 3, 1_000_000),)),)
    assert alone_sct_s(Stage(0, trials), 20e6) == pytest.approx(1.6)


def test_the_prediction_is_of_the_switch_s_strict_priority_not_of_madd() -> None:
    """The switch enforces a policy's order in strict-priority classes; MADD's rates are
    the simulator's alone. Coflow 1 waits 1 s behind the head's short flow under strict
    priority (ends at 2 s); MADD would have let it by at once (1/0.9 s)."""
    unit = 125_000_000  # 1 s at 1 Gbit/s
    head = TrialStage(0, 1, 0.0, (Flow(0, 2, 10 * unit), Flow(1, 3, unit)))
    behind = TrialStage(0, 1, 0.0, (Flow(1, 4, unit),))
    workload = Workload(
        5,
        1e9,
        (Experiment(0, 0.0, (Stage(0, (head,)),)), Experiment(1, 0.0, (Stage(0, (behind,)),))),
    )
    predicted = predicted_scts_s(workload, "fifo-madd", 8)
    assert predicted is not None
    assert predicted == predicted_scts_s(workload, "fifo", 8)
    assert predicted[(1, 0)] == pytest.approx(2.0, rel=1e-9)


def test_cli_default_time_scale_matches_the_emulation_default() -> None:
    from bmv2_topos import cli, emulate

    assert cli.DEFAULT_TIME_SCALE == emulate.DEFAULT_TIME_SCALE


def test_cli_default_rto_min_matches_the_launcher_and_reaches_the_network() -> None:
    from bmv2_topos import cli, launcher
    from bmv2_topos.emulate import EmulationOptions

    assert cli.DEFAULT_RTO_MIN_MS == launcher.DEFAULT_RTO_MIN_MS
    topology = load_topology(REPO / "bmv2_topos" / "single_switch.json")
    options = EmulationOptions(topology, ("fair",), (1,), rto_min_ms=200)
    assert launcher.EmulatedNetwork.for_run(options, "fair").rto_min_ms == 200


def test_cli_default_congestion_control_matches_the_launcher_and_reaches_the_network() -> None:
    from bmv2_topos import cli, launcher
    from bmv2_topos.emulate import EmulationOptions

    assert cli.DEFAULT_CONGESTION_CONTROL == launcher.DEFAULT_CONGESTION_CONTROL
    topology = load_topology(REPO / "bmv2_topos" / "single_switch.json")
    assert (
        launcher.EmulatedNetwork.for_run(
            EmulationOptions(topology, ("fair",), (1,)), "fair"
        ).congestion_control
        == launcher.DEFAULT_CONGESTION_CONTROL
    )
    options = EmulationOptions(topology, ("fair",), (1,), congestion_control="reno")
    assert launcher.EmulatedNetwork.for_run(options, "fair").congestion_control == "reno"


def test_congestion_control_must_be_a_loaded_module_with_a_plain_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from bmv2_topos import netns

    loaded = tmp_path / "tcp_available_congestion_control"
    loaded.write_text("reno cubic\n")
    monkeypatch.setattr(netns, "CONGESTION_CONTROLS_FILE", loaded)
    netns.require_congestion_control("cubic")
    with pytest.raises(UserError, match=r"'bbr' is not loaded .*available: reno cubic"):
        netns.require_congestion_control("bbr")
    # The name goes into ip batch lines: nothing but a module name gets that far.
    for hostile in ("cubic\nroute del default", "cubic lock", "", "c" * 16, "CUBIC"):
        with pytest.raises(UserError, match="is not a congestion-control name"):
            netns.require_congestion_control(hostile)
    loaded.unlink()
    with pytest.raises(UserError, match="cannot read"):
        netns.require_congestion_control("cubic")


def test_shipped_topologies_load_and_have_one_link_rate() -> None:
    single = load_topology(REPO / "bmv2_topos" / "single_switch.json")
    assert len(single.hosts) == 8 and len(single.switches) == 1
    assert topology_link_bps(single) == 20e6
    spine = load_topology(REPO / "bmv2_topos" / "leaf_spine.json")
    assert len(spine.hosts) == 16 and len(spine.switches) == 6
    for leaf in ("l1", "l2", "l3", "l4"):
        ports = spine.switch_ports(leaf)
        hosts = [p for p, link in ports.items() if link.other(leaf).port is None]
        uplinks = [p for p, link in ports.items() if link.other(leaf).port is not None]
        assert len(hosts) == 2 * len(uplinks) == 4  # 2:1 oversubscribed


class _Gone:
    def __init__(self) -> None:
        self.calls = 0

    def coflow_started(self, *_: int) -> int:
        self.calls += 1
        raise ControllerUnreachable("controller at x: gone")


def test_controller_optional_falls_back_once_the_controller_is_gone() -> None:
    gone = _Gone()
    warnings: list[str] = []
    sink = ControllerOptional(gone, on_lost=warnings.append)  # type: ignore[arg-type]
    assert sink.coflow_started(1, 0, 4, 2) == local_coflow_id(4, 2)
    assert sink.coflow_started(1, 0, 4, 3) == local_coflow_id(4, 3)
    assert gone.calls == 1 and sink.lost is not None and len(warnings) == 1
    assert NoController().coflow_started(0, 0, 1, 0) == 1 << 16


def test_state_file_round_trip_and_dead_owner(tmp_path: Path) -> None:
    run = state.RunState.create(tmp_path)
    run.add_namespace(f"{run.prefix}h1")
    loaded = state.RunState.load(run.directory)
    assert loaded.namespaces == [f"{run.prefix}h1"] and loaded.owner_alive()
    assert state.RUN_ID_RE.match(run.run_id) and state.OUR_NAME_RE.match(run.prefix)
    document = json.loads((run.directory / state.STATE_FILE).read_text())
    document["owner_start_ticks"] += 1  # same pid, different start: not the owner any more
    (run.directory / state.STATE_FILE).write_text(json.dumps(document))
    assert not state.RunState.load(run.directory).owner_alive()


def test_process_identity_refuses_a_recycled_pid() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ticks = state.process_start_ticks(child.pid)
        assert ticks is not None
        stranger = state.ProcessRecord(child.pid, ticks + 1, "switch-s1")
        assert not stranger.alive()
        assert not state.terminate(stranger)  # never signals a process that is not ours
        assert child.poll() is None
        assert state.terminate(state.ProcessRecord(child.pid, ticks, "switch-s1"))
        assert state.process_start_ticks(child.pid) is None  # gone (and reaped)
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], int]:
    """``beamer`` with the emulation commands registered."""
    from control import cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", ("bmv2_topos.cli",))
    return cli.main


def test_emulate_without_root_is_one_line_and_status_2(
    monkeypatch: pytest.MonkeyPatch,
    main: Callable[[list[str]], int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="needs root"):
        from bmv2_topos.netns import require_root

        require_root()
    status = main(["emulate", "--topo", str(REPO / "bmv2_topos" / "single_switch.json")])
    assert status == 2
    error_lines = capsys.readouterr().err.strip().splitlines()
    assert len(error_lines) == 1 and "needs root" in error_lines[0]


def test_emulate_rejects_bad_flags_before_touching_the_network(
    main: Callable[[list[str]], int],
) -> None:
    assert main(["emulate", "--seeds", "1,x"]) == 2
    assert main(["emulate", "--queues", "9"]) == 2
    assert main(["emulate", "--rto-min-ms", "0"]) == 2
    assert main(["emulate", "--target", "bmv2"]) == 2  # needs --bmv2-json and --p4info


def test_an_empty_seed_list_is_refused_not_taken_for_seed_1() -> None:
    from bmv2_topos import cli

    args = argparse.Namespace(
        seed=None, seeds="", queues=8, rto_min_ms=10, target="embedded", bmv2_json=None, p4info=None
    )
    with pytest.raises(UserError, match="--seeds: no seed given"):
        cli.network_seeds(args)
    args.seeds = "2,3,2"
    with pytest.raises(UserError, match="--seeds: seed 2 given more than once"):
        cli.network_seeds(args)
    args.seeds = None
    assert cli.network_seeds(args) == (1,)


def test_emulate_refuses_an_unknown_congestion_control_in_one_line(
    main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["emulate", "--congestion-control", "nosuch"]) == 2
    error_lines = capsys.readouterr().err.strip().splitlines()
    assert len(error_lines) == 1, error_lines
    assert "--congestion-control: 'nosuch' is not loaded" in error_lines[0]


def test_workload_file_larger_than_topology_is_refused(tmp_path: Path) -> None:
    from bmv2_topos.emulate import emulation_workload
    from control.model import Workload
    from workloads import json_format

    flows = (Flow(0, 9, 1000),)
    experiment = Experiment(0, 0.0, (Stage(0, (TrialStage(1, 1, 0.0, flows),)),))
    path = tmp_path / "w.json"
    json_format.write(Workload(10, 20e6, (experiment,)), path)
    topology = load_topology(REPO / "bmv2_topos" / "single_switch.json")
    with pytest.raises(UserError, match="uses 10 hosts"):
        emulation_workload(str(path), topology, seed=1)


def test_stages_csv_sets_each_stage_against_the_simulators_sct(tmp_path: Path) -> None:
    from bmv2_topos.agent import StageRecord
    from bmv2_topos.emulate import EmulationReport, RunKey, RunResult
    from bmv2_topos.report import write_outputs

    run = RunResult(
        key=RunKey("beamer", 1),
        stages=[StageRecord(0, 0, 0.0, 3.0), StageRecord(0, 1, 3.0, 4.0)],
        alone_s={(0, 0): 1.0, (0, 1): 1.0},
        wall_s=5.0,
        predicted_sct_s={(0, 0): 2.0, (0, 1): 2.0},
    )
    write_outputs(EmulationReport([run]), tmp_path)
    rows = (tmp_path / "stages.csv").read_text().splitlines()
    header = rows[0].split(",")
    first = dict(zip(header, rows[1].split(","), strict=True))
    second = dict(zip(header, rows[2].split(","), strict=True))
    assert (first["sim_sct_s"], first["emu_over_sim"]) == ("2.0000", "1.5000")
    assert (second["sim_sct_s"], second["emu_over_sim"]) == ("2.0000", "0.5000")
    assert run.predicted_avg_sct_s == 2.0
    assert run.emu_over_sim == 1.0


def test_the_data_path_probe_counts_a_refusal_as_an_answer() -> None:
    from bmv2_topos.launcher import _reaches

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert _reaches("127.0.0.1", port)  # accepted
    assert _reaches("127.0.0.1", port)  # refused: nothing listens any more


def test_the_table_widens_its_policy_column_for_a_long_name() -> None:
    from bmv2_topos.agent import StageRecord
    from bmv2_topos.emulate import EmulationReport, RunKey, RunResult
    from bmv2_topos.report import table

    runs = [
        RunResult(
            key=RunKey(policy, 1),
            stages=[StageRecord(0, 0, 0.0, 3.0)],
            alone_s={(0, 0): 1.0},
            wall_s=5.0,
        )
        for policy in ("beamer-lookahead", "fair")
    ]
    lines = table(EmulationReport(runs)).splitlines()
    rows = [line for line in lines if not line.startswith("-")]
    # Every row's seed column ends where the header's does.
    end = rows[0].index("seed") + len("seed")
    for row in rows[1:]:
        assert row[: end + 1].rstrip().endswith(("1", "mean")), row
        assert row[end] == " ", row
