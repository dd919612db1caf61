"""Mistakes argparse catches are one line too, like every other refusal of `beamer`."""

from __future__ import annotations

from pathlib import Path

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


def test_an_error_that_quotes_a_huge_input_is_shortened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "long.txt"
    trace.write_text("4 1\n1 0 1 0 1 1:" + "x" * 500_000 + "\n")
    assert main(["simulate", "--workload", str(trace)]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and len(line) < 2100
    assert line.startswith(f"beamer: error: {trace}:2: reducer 1 size (MB) 'xxx")
    assert "characters left out" in line


def test_an_error_that_quotes_control_characters_stays_one_visible_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file name with a line break and a terminal escape in it: the refusal is still
    one line, and the escape is printed, not obeyed."""
    trace = tmp_path / "two\nlines\x1b[2J.txt"
    trace.write_text("4 1\n1 0 1 0 1 1:x\n")
    assert main(["simulate", "--workload", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err
    assert "two\\x0alines\\x1b[2J.txt" in err


def test_an_error_that_quotes_invisible_characters_shows_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Zero-width and format characters in a quoted name are escaped: the message shows
    what was refused, not a name that looks like another."""
    trace = tmp_path / "a\u200bb\xad\ufeff\U000e0041.txt"
    trace.write_text("4 1\n1 0 1 0 1 1:x\n")
    assert main(["simulate", "--workload", str(trace)]) == 2
    err = capsys.readouterr().err
    assert "a\\u200bb\\xad\\ufeff\\U000e0041.txt" in err
    assert not any(char in err for char in "\u200b\xad\ufeff\U000e0041")


def test_ctrl_c_while_the_commands_load_is_one_line_and_status_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parser imports every command's module, a second or so at start: a Ctrl-C
    then is the same one line as later, not a traceback from the import machinery."""
    import importlib

    load = importlib.import_module

    def interrupted(name: str, package: str | None = None) -> object:
        if name == "tuner.cli":
            raise KeyboardInterrupt
        return load(name, package)

    monkeypatch.setattr(importlib, "import_module", interrupted)
    try:
        status = main(["simulate", "--help"])
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C escaped the command")
    assert status == 130
    captured = capsys.readouterr()
    assert captured.err == "beamer: interrupted\n" and captured.out == ""
