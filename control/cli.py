"""The ``beamer`` command: one sub-command per component, each registered by its module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from control.errors import UserError

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
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="beamer", description="Stage-aware coflow scheduling for hyper-parameter tuning."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except UserError as error:
        print(f"beamer: error: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("beamer: interrupted", file=sys.stderr)
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
