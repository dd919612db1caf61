"""Mistakes argparse catches are one line too, like every other refusal of `beamer`."""

from __future__ import annotations

import pytest

from control.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--jobs", "abc"], "beamer simulate: error: argument --jobs: invalid int"),
        (["workload", "generate", "--seed", "1e5"], "argument --seed: invalid int value: '1e5'"),
        (["nonsense"], "beamer: error: argument COMMAND: invalid choice: 'nonsense'"),
        (["simulate", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_argument_errors_are_one_line_with_exit_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].endswith("--help)")
    assert captured.out == ""
