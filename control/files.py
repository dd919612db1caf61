"""Reading user files and writing outputs so that nothing is ever half-written.

One implementation for every component: workload files, compiler outputs,
simulator reports, run state and the controller's journal. Every JSON document
a user hands in (topology, workload) is read by :func:`read_json` /
:func:`parse_json`, which turn anything wrong (encoding, syntax, nesting, numbers)
into one :class:`UserError` line naming the file and line.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import functools
import io
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from control import json_positions
from control.errors import UserError

# Deepest nesting of arrays and objects a user's JSON may have. Our formats need fewer
# than ten levels; the limit keeps the decoder and every reader that walks a document
# far from Python's recursion limit.
MAX_JSON_DEPTH = 100


MAX_JSON_VALUES = 1 << 26
"""Most values (counted by their separating commas) a user's JSON may hold: decoded, a
value costs tens of bytes, so a gigabyte of ``[0,0,...]`` would take gigabytes more.
The largest workload the limits allow holds about 35 million."""

MAX_JSON_CONTAINERS = 1 << 24
"""Most arrays and objects (counted by their opening brackets) a user's JSON may hold:
decoded, each costs a hundred bytes or more, and they need no commas (``[[][][]...]``),
so the bound on values does not bound them. The largest workload the limits allow holds
about 10 million (a million trial stages of five flows, with their lists)."""


MAX_FILE_BYTES = 1 << 30
"""The largest user file read (a workload's limit too): ``/dev/zero`` or a runaway
file is refused rather than read until memory runs out."""

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_path(text: str) -> Path:
    """The path of a file a user names. A name that ends in ``/`` names a directory (the
    system refuses it as a file), but :class:`~pathlib.Path` drops the ``/`` and would
    read or write the file without it: such a name is refused."""
    if text.endswith("/"):
        raise UserError(f"{text}: not a file name (it ends in '/', which names a directory)")
    return Path(text)


def read_bytes(
    path: Path,
    *,
    what: str = "file",
    missing: str = "no such file",
    max_bytes: int = MAX_FILE_BYTES,
    text: bool = False,
) -> bytes:
    """The bytes of a user's file, which must be a regular file of at most ``max_bytes``.

    Anything else is one :class:`UserError` line, before anything is read: a missing
    file (``missing``), a directory, FIFO, socket or device ("is a FIFO (named pipe),
    not a ``what``"; a FIFO without a writer would block for ever), a file too large
    or unreadable. The size is checked on ``stat`` and again while reading. A ``text``
    file is refused at its first NUL byte, which no text format of the project holds,
    before the rest is read (a gigabyte of zeros took 18 s and 2 GB to refuse).
    """
    if "\0" in str(path):  # os.stat would raise ValueError: no file has such a name
        raise UserError(f"{str(path)!r}: not a file name (it holds a NUL character)")
    try:
        os.fsencode(path)
    except UnicodeEncodeError as error:  # a lone surrogate that stands for no byte
        bad = str(path)[error.start]
        raise UserError(f"{str(path)!r}: not a file name (U+{ord(bad):04X} is no text)") from None
    try:
        # stat first: a FIFO or a device is refused without being opened.
        _check_regular(path, os.stat(path), what, max_bytes)
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise UserError(f"{path}: {missing}") from None
    except OSError as error:
        raise UserError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, "rb") as handle:
            _check_regular(path, os.fstat(handle.fileno()), what, max_bytes)  # the same file
            data = _read_at_most(handle, max_bytes + 1, path if text else None)
    except OSError as error:
        raise UserError(f"{path}: cannot read: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise _too_large(path, f"more than {max_bytes:,} bytes", what, max_bytes)
    return data


READ_CHUNK_BYTES = 16 << 20
"""What a text file is read in, each piece searched for a NUL byte."""


def _read_at_most(handle: io.BufferedReader, limit: int, text_path: Path | None) -> bytes:
    """At most ``limit`` bytes of ``handle`` (bounded even if the file grows); with
    ``text_path``, a :class:`UserError` naming the line of the first NUL byte."""
    if text_path is None:
        return handle.read(limit)
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = handle.read(min(READ_CHUNK_BYTES, limit - size))
        if not chunk:
            break
        nul = chunk.find(b"\0")
        if nul >= 0:
            line = sum(part.count(b"\n") for part in chunks) + chunk.count(b"\n", 0, nul) + 1
            raise UserError(f"{text_path}:{line}: not text (a NUL byte at offset {size + nul:,})")
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _check_regular(path: Path, info: os.stat_result, what: str, max_bytes: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _NOT_REGULAR if test(info.st_mode)), None)
        raise UserError(f"{path}: is {kind or 'not a regular file'}, not a {what}")
    if info.st_size > max_bytes:
        raise _too_large(path, f"{info.st_size:,} bytes", what, max_bytes)


def _too_large(path: Path, size: str, what: str, max_bytes: int) -> UserError:
    return UserError(f"{path}: {size}, above the limit of {max_bytes:,} bytes for a {what}")


def read_text(
    path: Path,
    *,
    what: str = "file",
    missing: str = "no such file",
    max_bytes: int = MAX_FILE_BYTES,
) -> str:
    """The UTF-8 text of a user's file (:func:`read_bytes`), without a leading byte order
    mark, which some editors write; text that is not UTF-8, or holds a NUL byte, is a
    :class:`UserError` naming its line."""
    data = read_bytes(path, what=what, missing=missing, max_bytes=max_bytes, text=True)
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return str(memoryview(data)[start:], "utf-8")
    except UnicodeDecodeError as error:
        offset = start + error.start
        line = data.count(b"\n", 0, offset) + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[offset]:02x} at offset "
            f"{offset}: {error.reason})"
        ) from None


def read_json(path: Path, *, what: str = "file", missing: str = "no such file") -> Any:
    """The JSON document in a user's file (:func:`read_text`, then :func:`parse_json`)."""
    return parse_json(read_text(path, what=what, missing=missing), str(path))


_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in b'"[]{}')
_DEPTH_STEPS = np.zeros(256, dtype=np.int8)
_DEPTH_STEPS[[ord("["), ord("{")]] = 1
_DEPTH_STEPS[[ord("]"), ord("}")]] = -1


class _NotANumber(ValueError):
    pass


def _reject_constant(name: str) -> NoReturn:
    raise _NotANumber(f"{name} is not a number in JSON")


def parse_json(text: str, source: str = "<string>") -> Any:
    """Decode a user's JSON ``text``; ``source`` names it in the one-line errors.

    Refused, each with the line: syntax errors, nesting deeper than
    :data:`MAX_JSON_DEPTH`, ``NaN`` and ``Infinity`` (not JSON), and integers longer than
    Python converts (``sys.get_int_max_str_digits``).
    """
    # Brackets and commas in strings count too: upper bounds, counted at C speed.
    if text.count(",") > MAX_JSON_VALUES:
        raise UserError(
            f"{source}: more than {MAX_JSON_VALUES:,} values, above the limit for a JSON document"
        )
    if text.count("[") + text.count("{") > MAX_JSON_CONTAINERS:
        raise UserError(
            f"{source}: more than {MAX_JSON_CONTAINERS:,} arrays and objects, above the limit "
            "for a JSON document"
        )
    _check_depth(text, source)
    closed = 0  # objects decoded so far: the decoder hands each over at its closing brace

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal closed
        result = unique_keys(pairs)
        closed += 1
        return result

    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=pairs_hook)
    except DuplicateKey as error:
        key = json.dumps(error.key)
        line = json_positions.line_of_duplicate_key(text, closed, error.key)
        raise UserError(
            f"{source}:{line}: invalid JSON: the key {key} appears twice in one object"
        ) from None
    except MemoryError:
        raise UserError(
            f"{source}: invalid JSON: too large to decode in the memory this machine has"
        ) from None
    except json.JSONDecodeError as error:
        raise UserError(
            f"{source}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}"
        ) from None
    except _NotANumber as error:
        raise UserError(
            f"{source}:{json_positions.line_of_constant(text)}: invalid JSON: {error}"
        ) from None
    except ValueError:  # only an integer over the digit limit gets here
        limit = sys.get_int_max_str_digits()
        line = json_positions.line_of_long_integer(text, limit)
        raise UserError(
            f"{source}:{line}: invalid JSON: a number with more than {limit} digits"
        ) from None
    except RecursionError:  # not reached after _check_depth; kept as a last guard
        raise UserError(f"{source}: invalid JSON: nested too deeply") from None


class DuplicateKey(Exception):
    """A JSON object names a key twice (see :func:`unique_keys`)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: with a key twice, Python's decoder keeps
    the last value and a user's typo goes unseen (RFC 8259 leaves the meaning open)."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return result


_DEPTH_BLOCK = 1 << 22
"""Quotes and brackets scanned at a time: the scan's temporaries stay a few tens of
megabytes however many a document holds (a gigabyte of brackets took 8 GB at once)."""


def _deepest(chars: np.ndarray) -> int:
    """The deepest nesting of the brackets in ``chars`` (only quotes and brackets) that
    are outside strings, block by block, carrying the depth and the quote parity."""
    depth = deepest = 0
    in_string = 0
    for start in range(0, len(chars), _DEPTH_BLOCK):
        block = chars[start : start + _DEPTH_BLOCK]
        quotes = np.cumsum(block == ord('"'), dtype=np.uint8)  # parity survives wrapping
        outside = ((quotes + in_string) & 1) == 0
        in_string = int(quotes[-1] + in_string) & 1
        steps = _DEPTH_STEPS[block][outside]
        if len(steps):
            levels = np.cumsum(steps, dtype=np.int64) + depth
            deepest = max(deepest, int(levels.max()))
            depth = int(levels[-1])
    return deepest


def _check_depth(text: str, source: str) -> None:
    """Refuse nesting deeper than :data:`MAX_JSON_DEPTH` before decoding, in linear time
    and at C speed (a fraction of what decoding costs)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    # Drop escaped backslashes, then escaped quotes: every quote left opens or closes a
    # string, and a bracket is structure when an even number of quotes precede it.
    # Only quotes and brackets matter then: keep those (bytes.translate, one C pass).
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    structure = unescaped.encode("utf-8", "replace").translate(None, _NOT_STRUCTURE)
    del unescaped
    if _deepest(np.frombuffer(structure, dtype=np.uint8)) <= MAX_JSON_DEPTH:
        return
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group(0)
        if token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                line = text.count("\n", 0, match.start()) + 1
                raise UserError(
                    f"{source}:{line}: invalid JSON: nested deeper than {MAX_JSON_DEPTH} "
                    "levels of arrays and objects"
                )
        elif token in "]}":
            depth -= 1


STANDARD_OUTPUT = "-"
"""The output name that means standard output, where a command can write there."""

_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")


def output_name_problem(text: str) -> str | None:
    """What makes ``text`` no name for a file a command makes, or None. A name of only
    spaces or holding a control character (a newline, an escape) is legal but is a
    quoting slip far more often than a wish, and such a file is hard to name again
    (a newline in it also splits every log line that names it)."""
    if not text.strip():
        return "an empty name" if not text else "a name of only spaces"
    control = _CONTROL_CHARACTER.search(text)
    if control is not None:
        return f"{text!r} holds a control character ({control.group()!r})"
    return None


def output_directory(text: str, option: str = "--out") -> Path:
    """An output directory named on a command line: an empty name would quietly mean the
    current directory, ``-`` standard output (which holds no files), and an existing
    file cannot hold the outputs."""
    if not text.strip():
        raise UserError(f"{option}: an empty directory name (write {option} . for this directory)")
    problem = output_name_problem(text)
    if problem is not None:
        raise UserError(f"{option}: {problem}")
    if text == STANDARD_OUTPUT:
        raise UserError(
            f"{option} -: standard output cannot hold these files; name a directory "
            f"(./- for one called '-')"
        )
    path = Path(text)
    if os.path.lexists(path) and not path.is_dir():
        raise UserError(f"{option} {path}: exists and is not a directory")
    return path


_MADE: list[list[Path]] = []
"""Per :func:`removed_if_left_empty` block (innermost last): the directories
:func:`writable_directory` made in it, outermost first."""


@contextlib.contextmanager
def removed_if_left_empty() -> Iterator[None]:
    """Remove again, at the end of the block, each directory :func:`writable_directory`
    made in it that is still empty: a command stopped before its first output (Ctrl-C, a
    failed run) leaves no empty ``--out``, nor the parents made for it. A directory that
    was there before is never removed."""
    made: list[Path] = []
    _MADE.append(made)
    try:
        yield
    finally:
        _MADE.remove(made)
        for directory in reversed(made):  # innermost first
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                break  # not empty (or not ours to remove): nor are its parents


def _make_directory(path: Path) -> None:
    """``mkdir -p path``, noting in the innermost :func:`removed_if_left_empty` block
    each directory it made."""
    missing = []
    for directory in (path, *path.parents):
        if os.path.lexists(directory):
            break
        missing.append(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    finally:  # a failure part of the way made the outer ones
        if _MADE:
            _MADE[-1].extend(d for d in reversed(missing) if d not in _MADE[-1] and d.is_dir())


def writable_directory(path: Path, option: str = "--out") -> Path:
    """``path`` made if need be, and shown to take a new file, before a run whose results
    go there starts: a directory that cannot be written (``/proc``, another user's)
    must not cost the run."""
    try:
        _make_directory(path)
        fd, name = tempfile.mkstemp(dir=path, prefix=".probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(name)
    except OSError as error:
        raise UserError(f"{option} {path}: cannot write there: {error.strerror or error}") from None
    return path


def atomic_write(target: Path, write: Callable[[Path], object]) -> None:
    """Let ``write`` fill a temporary file beside ``target``, then rename it over.

    Readers see the old content or the new, never a part; on any failure the
    temporary file is removed and ``target`` is untouched. The file gets the
    usual permissions (``0666`` less the umask), not ``mkstemp``'s ``0600``.
    """
    atomic_write_all({target: write})


def atomic_write_all(writes: Mapping[Path, Callable[[Path], object]]) -> None:
    """:func:`atomic_write` of several files that appear together or not at all.

    Every file is written to a temporary name beside its target first; only once all
    were written are they renamed over their targets. On any failure the temporary
    files are removed, and a target renamed before a later rename failed gets its
    old content back (or is removed when it did not exist), so every target is left
    as it was. A target that is a directory is refused before anything is written.
    """
    writes = {output_file(target): write for target, write in writes.items()}
    staged: list[tuple[Path, Path]] = []  # (temporary, target)
    backups: list[Path | None] = []  # old content of staged[i]'s target, None if none
    renamed = 0
    try:
        for target, write in writes.items():
            staged.append((_staged(target, write), target))
        # Only a rename after the first can fail with another already done: keep the
        # old content of every target but the last, to put it back then.
        for _, target in staged[:-1]:
            backups.append(_backup(target))
        for temporary, target in staged:
            try:
                os.replace(temporary, target)
            except OSError as error:
                raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
            renamed += 1
    except BaseException:
        if renamed < len(staged):
            for index in reversed(range(renamed)):
                target, backup = staged[index][1], backups[index]
                with contextlib.suppress(OSError):
                    if backup is None:
                        target.unlink()
                    else:
                        os.replace(backup, target)
        raise
    finally:
        for temporary, _ in staged[renamed:]:
            temporary.unlink(missing_ok=True)
        for backup in backups:
            if backup is not None:
                backup.unlink(missing_ok=True)


def outputs_ready(directory: Path, names: Iterable[str], option: str = "--out") -> Path:
    """``directory`` made and shown to take each of ``names`` before the runs whose
    results they hold: a directory or a device in the way found after them would cost
    every run."""
    writable_directory(directory, option)
    for name in names:
        output_file(directory / name)
    return directory


def output_file(target: Path) -> Path:
    """The file to write for ``target``: what a symbolic link points to (the link stays),
    which must be a regular file or nothing yet, in a directory that takes a new file
    (the file is written beside it and renamed over it). Renaming over a device, a FIFO
    or a socket would replace it with a file: as root, ``--out /dev/null`` would take the
    machine's ``/dev/null`` away. A link into a directory that does not exist would only be
    found when the file is written, after the work whose result it holds."""
    resolved = Path(os.path.realpath(target)) if os.path.islink(target) else target
    try:
        info = os.stat(resolved)
    except FileNotFoundError:
        info = None
    except OSError as error:
        raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _NOT_REGULAR if test(info.st_mode)), None)
        raise UserError(f"{target}: cannot write: is {kind or 'not a regular file'}")
    if resolved is not target:
        _check_link_directory(target, resolved.parent)
    return resolved


def output_file_ready(target: Path) -> Path:
    """:func:`output_file`, with its directory shown to take a new file: for a command whose
    one output comes after seconds of work, so that a path that cannot be written is
    refused before the work rather than after it."""
    resolved = output_file(target)
    if resolved is target:
        problem = _directory_problem(target.parent)
        if problem is not None:
            raise UserError(f"{target}: cannot write: its directory {target.parent}{problem}")
    return resolved


def _check_link_directory(link: Path, directory: Path) -> None:
    """Refuse ``link`` unless ``directory``, where its file is, takes a new file."""
    problem = _directory_problem(directory)
    if problem is not None:
        raise UserError(f"{link}: cannot write: it links into {directory}{problem}")


def _directory_problem(directory: Path) -> str | None:
    """Why ``directory`` takes no new file (tried with one made and removed), if it does not:
    the end of a sentence that names it."""
    if not os.path.isdir(directory):
        if os.path.lexists(directory):
            return ", which is not a directory"
        return ", which does not exist"
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(name)
    except OSError as error:
        return f", where no file can be made ({error.strerror or error})"
    return None


def _staged(target: Path, write: Callable[[Path], object]) -> Path:
    """A temporary file beside ``target``, filled by ``write``, synced, with the usual
    permissions; removed again (and a :class:`UserError` naming ``target``) on failure."""
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
    os.close(fd)
    temporary = Path(name)
    try:
        write(temporary)
        with temporary.open("rb") as written:
            os.fsync(written.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
        raise
    return temporary


def _backup(target: Path) -> Path | None:
    """A second name beside ``target`` for its current content (a hard link, or a copy
    where links are refused); None when there is no ``target``."""
    if not os.path.lexists(target):
        return None
    backup: Path | None = None
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old")
        os.close(fd)
        backup = Path(name)
        backup.unlink()
        try:
            os.link(target, backup, follow_symlinks=False)
        except OSError:
            shutil.copy2(target, backup, follow_symlinks=False)
    except BaseException as error:
        if backup is not None:
            backup.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise UserError(f"{target}: cannot write: {error.strerror or error}") from None
        raise
    return backup


def text_bytes(text: str) -> bytes:
    """``text`` in UTF-8, what UTF-8 cannot hold escaped (``\\udcff``): a file name's
    undecodable bytes, which Python keeps as lone surrogates, end up in reports."""
    return text.encode("utf-8", "backslashreplace")


def atomic_write_text(target: Path, text: str) -> None:
    """:func:`atomic_write` of UTF-8 text (:func:`text_bytes`)."""
    atomic_write_bytes(target, text_bytes(text))


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """:func:`atomic_write` of bytes."""
    atomic_write(target, lambda path: path.write_bytes(data))


def atomic_write_all_bytes(contents: Mapping[Path, bytes]) -> None:
    """:func:`atomic_write_all` of bytes: every file is written, or none is."""
    writes = {
        target: functools.partial(Path.write_bytes, data=data) for target, data in contents.items()
    }
    atomic_write_all(writes)


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[object]]) -> bytes:
    """A CSV document (UTF-8), to be written with the files that go with it. Text UTF-8
    cannot hold (a file name's undecodable bytes, kept as lone surrogates) is escaped."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return text_bytes(buffer.getvalue())


def write_csv(target: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A CSV file written whole or not at all (:func:`atomic_write`)."""
    atomic_write_bytes(target, csv_bytes(header, rows))
