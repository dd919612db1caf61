"""The ``beamer`` command: one sub-command per component, each registered by its module."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn, TextIO, cast

from control.errors import UserError
from control.interrupts import Interrupted

# Each module defines ``register(subparsers)``, which adds its sub-commands and
# sets ``func`` (args -> exit status) on them.
COMMAND_MODULES: tuple[str, ...] = (
    "sim.cli",
    "sim.sweep",
    "workloads.cli",
    "softswitch.compile_cli",
    "softswitch.switch_cli",
    "control.controller_cli",
    "bmv2_topos.cli",
    "tuner.cli",
)


class OneLineErrors(argparse.ArgumentParser):
    """An argument parser whose errors are one line, like every other refusal of the
    command (argparse prints the whole usage first, five to ten lines)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {shortened(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="beamer", description="Stage-aware coflow scheduling for hyper-parameter tuning."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


MAX_ERROR_CHARS = 2000
"""The longest error line printed: a refusal may quote the input (a line of a file, a
literal), and a 2 MB line is no message."""


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with each character that is not printable written as its escape
    (``\\x1b``): controls, line and paragraph separators, the marks that reorder text and
    the format characters that show nothing (zero-width spaces, the soft hyphen, tags).
    In a message they would break its one line, forge log lines, drive a terminal (clear
    it, retitle it), or hide what the message quotes."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def shortened(message: str) -> str:
    """``message`` on one visible line (:func:`visible`), its middle left out when it is
    longer than MAX_ERROR_CHARS. Messages quote input and what switches say."""
    if len(message) > MAX_ERROR_CHARS:
        # Cut first: escapes lengthen the text, and it may be megabytes.
        head, tail = visible(message[:1500])[:1500], visible(message[-300:])[-300:]
        return f"{head} [... {len(message) - 1800:,} characters left out ...] {tail}"
    message = visible(message)
    if len(message) <= MAX_ERROR_CHARS:
        return message
    return (
        f"{message[:1500]} [... {len(message) - 1800:,} characters left out ...] {message[-300:]}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    stdout = sys.stdout
    sys.stdout = cast(TextIO, CheckedOutput(stdout))
    try:
        # The parser imports every command's module (a second or so): a Ctrl-C then is
        # handled as one during the command.
        args = build_parser().parse_args(argv)
        status: int = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe or a full disk is caught, not at exit
    except UserError as error:
        print(f"beamer: error: {shortened(str(error))}", file=sys.stderr)
        return error.exit_status
    except Interrupted as interrupted:  # SIGTERM, SIGHUP: the status a shell shows for them
        print("beamer: interrupted", file=sys.stderr)
        return 128 + _signal_number(interrupted, signal.SIGTERM)
    except KeyboardInterrupt:
        print("beamer: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except OutputFailed as failed:
        if not isinstance(failed.error, BrokenPipeError):
            reason = failed.error.strerror or str(failed.error)
            print(f"beamer: error: standard output: {reason}", file=sys.stderr)
        closed = _output_closed()
        return closed if isinstance(failed.error, BrokenPipeError) else 1
    except BrokenPipeError:
        return _output_closed()
    finally:
        sys.stdout = stdout
    return status


class OutputFailed(Exception):
    """Writing standard output failed with ``error`` (a full disk, a closed pipe), told
    apart from the same error anywhere else, which is a bug and keeps its traceback."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class CheckedOutput:
    """Standard output while a command runs: the stream, but a write or flush that fails
    raises :class:`OutputFailed` (the error alone does not say which file failed)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError:
                # Text the stream's encoding cannot hold (a file name's undecodable bytes,
                # a lone surrogate): written with those characters escaped.
                encoding = getattr(self._stream, "encoding", None) or "utf-8"
                return self._stream.write(
                    text.encode(encoding, "backslashreplace").decode(encoding)
                )
        except OSError as error:
            raise OutputFailed(error) from error

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise OutputFailed(error) from error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _signal_number(interrupted: Interrupted, default: int) -> int:
    """The signal that raised ``interrupted`` (its message is the signal's name)."""
    name = str(interrupted)
    return int(signal.Signals[name]) if name in signal.Signals.__members__ else default


def _output_closed() -> int:
    """Standard output was closed by its reader (``beamer ... | head``): stop quietly, as
    a command killed by SIGPIPE does, rather than with a traceback; the interpreter's
    last flush of what is left would fail again, so what is left goes nowhere."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: no file descriptor
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
