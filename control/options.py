"""Option values that several commands take alike, parsed one way for all of them."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from control.addresses import is_decimal, written_plainly
from control.errors import UserError
from control.files import STANDARD_OUTPUT, file_path, output_name_problem

T = TypeVar("T", bound=Hashable)

PLAINLY = "digits 0-9 only, no '_', '+' or spaces"
"""What :func:`integer` and :func:`number` ask of a value they refuse for its spelling."""

_INTEGER = re.compile(r"-?[0-9]+")
"""An integer as the README writes it, ASCII digits (``int`` also takes '١٠', '1_0', '+1'
and ' 1'); a '-' is let through for the option's range check to name the value."""


def integer(text: str) -> int:
    """An integer option (argparse ``type``): like ``int``, but ASCII digits (no '_', '+'
    or spaces), as every other number the project reads."""
    if _INTEGER.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r} ({PLAINLY})")
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def number(text: str) -> float:
    """A number option (argparse ``type``): like ``float``, spelled as :func:`integer`
    asks; the command checks the range (NaN and infinities included)."""
    if not written_plainly(text) or text != text.strip() or text.startswith("+"):
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r} ({PLAINLY})")
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None


def seed(text: str) -> int:
    """A seed option (argparse ``type``): a whole number of ASCII digits. A negative seed
    draws the same workload as its absolute value (``random.Random`` takes ``abs``)."""
    if not is_decimal(text):
        raise argparse.ArgumentTypeError(
            f"invalid int value: {text!r} (a seed is a whole number >= 0)"
        )
    try:
        return int(text)
    except ValueError:  # more digits than int() converts
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def parse_seeds(text: str, option: str = "--seeds") -> tuple[int, ...]:
    """Comma-separated seeds (whole numbers >= 0), each once: a seed given twice would run
    twice and weigh twice in every mean."""
    parts = comma_items(text, option, "seed")
    if not all(is_decimal(part) for part in parts):
        raise UserError(f"{option}: {text!r} is not a comma-separated list of whole numbers >= 0")
    try:
        seeds = tuple(int(part) for part in parts)
    except ValueError:  # more digits than int() converts
        raise UserError(f"{option}: {text!r} is not a comma-separated list of seeds") from None
    refuse_repeats(seeds, option, lambda value: f"seed {value}")
    return seeds


def comma_items(text: str, option: str, what: str = "value") -> list[str]:
    """The items of a comma-separated option, without the spaces around them (``what``
    names one where there is none). An empty item (``1,,2``, a comma at an end) is
    refused: it is a slip, and passing over it would run other than what was typed."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise UserError(f"{option}: no {what} given")
    if not all(items):
        raise UserError(f"{option}: {text!r} has an empty item (two commas, or one at an end)")
    return items


def refuse_repeats(values: Iterable[T], what: str, show: Callable[[T], str] = repr) -> None:
    """Refuse a value given twice in one list (of seeds, policies, queue modes, models...):
    it would run, or be drawn, twice, and weigh twice in every mean or comparison."""
    seen: set[T] = set()
    for value in values:
        if value in seen:
            raise UserError(f"{what}: {show(value)} given more than once")
        seen.add(value)


def path_option(text: str) -> Path:
    """A file option (argparse ``type``): an empty path would be read as ``.``, the
    current directory, and refused as a directory without naming the option; a path
    ending in ``/`` is no file's (:func:`control.files.file_path`)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    try:
        return file_path(text)
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


@dataclass(frozen=True)
class StandardOutput:
    """``-`` given where a command can write its output to standard output. Kept apart
    from every :class:`~pathlib.Path`: ``Path("./-")``, a file called ``-``, prints as
    ``-`` too."""

    def __str__(self) -> str:
        return "standard output"


def _output_file(text: str) -> Path:
    """A file a command makes, named as :func:`path_option` asks and as
    :func:`control.files.output_name_problem` accepts."""
    path = path_option(text)
    problem = output_name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return path


def output_or_stdout_option(text: str) -> Path | StandardOutput:
    """A file option for an output that may go to standard output (argparse ``type``):
    ``-``, or a file's name (``./-`` for one called ``-``)."""
    if text == STANDARD_OUTPUT:
        return StandardOutput()
    return _output_file(text)


def output_path_option(text: str) -> Path:
    """A file option for an output that must be a file (argparse ``type``): as
    :func:`output_or_stdout_option`, but ``-`` is refused, not taken as a file called
    ``-``."""
    if text == STANDARD_OUTPUT:
        raise argparse.ArgumentTypeError(
            "'-' (standard output) cannot be this file; ./- names a file called '-'"
        )
    return _output_file(text)
