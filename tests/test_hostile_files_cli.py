"""Hostile JSON files given to the commands: one line naming the file, exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.cli import main

HOSTILE = {
    "deep.json": b'{"name": "x",\n "a": ' + b"[" * 200_000,
    "deep-objects.json": b'{"a":' * 100_000,
    "latin1.json": b'{"name": "caf\xe9"}',
    "digits.json": b'{"name": 1' + b"0" * 10_000 + b"}",
}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    return status, capsys.readouterr().err


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize(
    "command",
    [
        ["controller", "--policy", "beamer", "--topo"],
        ["simulate", "--policies", "fair", "--workload"],
        ["workload", "show"],
    ],
    ids=["topology", "simulate-workload", "workload-show"],
)
def test_hostile_json_is_one_line_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, command: list[str]
) -> None:
    path = tmp_path / name
    path.write_bytes(HOSTILE[name])
    status, err = run([*command, str(path)], capsys)
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], err
    assert "Traceback" not in err and "RecursionError" not in err
