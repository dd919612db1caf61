"""``beamer switch`` option and file errors: one line naming what is wrong, exit status 2."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from processes import end_process, unblocked_within

from control.cli import main
from softswitch.ports import parse_interface_spec
from softswitch.switch_cli import check_server_address


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        status = main(["switch", *argv])
    except SystemExit as exit_:  # argparse errors
        status = int(exit_.code or 0)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-i", "0", "--no-p4"], "-i 0: expected PORT@INTERFACE"),
        (["-i", "x@veth0", "--no-p4"], "port 'x' is not a number"),
        (["-i", "511@veth0", "--no-p4"], "port must be between 0 and 510"),
        (["-i", "1@a/b", "--no-p4"], "not a valid interface name"),
        (["-i", "1@veth0", "-i", "1@veth1", "--no-p4"], "port 1 is already veth0"),
        (["-i", "1@veth0", "-i", "2@veth0", "--no-p4"], "veth0 is already port 1"),
        (["-i", "1@no-such-if0", "--no-p4"], "interface 'no-such-if0' does not exist"),
        (["--priority-queues", "9", "--no-p4"], "9 is not between 1 and 8"),
        (["--queue-rate-pps", "0", "--no-p4"], "must be a number in 0.001..1e"),
        (["--queue-rate-bps", "1e-300", "--no-p4"], "must be a number in 1000..1e"),
        (["--queue-rate-bps", "nan", "--no-p4"], "must be a number in"),
        (["--queue-rate-pps", "1e300", "--no-p4"], "must be a number in"),
        (["--queue-rate-pps", "5", "--queue-rate-bps", "5000", "--no-p4"], "not allowed with"),
        (["--queue-depth", "0", "--no-p4"], "0 is not between 1 and"),
        ([], "one of the arguments --no-p4 CONFIG is required"),
        (["--no-p4"], "no port (-i PORT@IFACE) and no --grpc-server-addr: the switch would"),
    ],
)
def test_bad_options_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = run(argv, capsys)
    assert status == 2
    assert message in err
    assert "Traceback" not in err


def test_missing_and_malformed_configs_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = run([str(tmp_path / "absent.json")], capsys)
    assert (status, err.strip()) == (2, f"beamer: error: {tmp_path / 'absent.json'}: no such file")
    garbage = tmp_path / "garbage.softswitch.json"
    garbage.write_text("not json at all")
    status, err = run([str(garbage)], capsys)
    assert status == 2
    assert str(garbage) in err and len(err.strip().splitlines()) == 1


def test_a_p4_file_with_an_error_reports_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "broken.p4"
    source.write_text("#include <core.p4>\n#include <v1model.p4>\nheader h_t { bit<8> x }\n")
    status, err = run([str(source)], capsys)
    assert status == 2
    assert f"{source}:3:" in err


def test_interface_spec_parses_like_simple_switch() -> None:
    spec = parse_interface_spec("12@s1-eth12")
    assert (spec.port, spec.interface) == (12, "s1-eth12")


def test_an_address_in_use_is_one_line_with_the_reason(capfd: pytest.CaptureFixture[str]) -> None:
    """Probed before gRPC binds: gRPC logs a line of its own and says only "Failed to
    bind"."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        status = main(["switch", "--no-p4", "--grpc-server-addr", address])
    assert status == 2
    assert capfd.readouterr().err.splitlines() == [
        f"beamer: error: --grpc-server-addr: cannot serve P4Runtime on {address}: "
        "Address already in use"
    ]


@pytest.mark.parametrize(
    ("given", "served"),
    [
        (":9559", "[::]:9559"),  # no host: every interface, as documented (gRPC refuses it)
        ("*:0", "[::]:0"),
        ("127.0.0.1:9559", "127.0.0.1:9559"),
        ("[::1]:0", "[::1]:0"),
        ("unix:/run/p4rt.sock", "unix:/run/p4rt.sock"),
    ],
)
def test_an_address_without_host_serves_every_interface(given: str, served: str) -> None:
    assert check_server_address(given) == served


def test_the_ready_line_names_the_port_bound() -> None:
    """Asked for port 0, the switch says which port it serves, not ':0'."""
    command = [sys.executable, "-m", "control.cli", "switch", "--no-p4"]
    process = subprocess.Popen(
        [*command, "--grpc-server-addr", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    try:
        with unblocked_within(60, "the switch's ready line"):
            ready = next(line for line in process.stderr if " ready: " in line)
        found = re.search(r"P4Runtime 127\.0\.0\.1:(\d+)$", ready.strip())
        assert found is not None, ready
        with socket.create_connection(("127.0.0.1", int(found[1])), timeout=10):
            pass  # the port named is the one served
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        end_process(process)
        process.stderr.close()
