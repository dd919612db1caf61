import errno
import os
import stat
from pathlib import Path

import pytest

from control import files
from control.errors import UserError
from control.files import (
    MAX_JSON_DEPTH,
    atomic_write,
    atomic_write_all_bytes,
    atomic_write_bytes,
    parse_json,
    read_json,
    read_text,
)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    atomic_write_bytes(target, b"old")

    def half_write(path: Path) -> None:
        path.write_bytes(b"ne")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        atomic_write(target, half_write)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


@pytest.mark.parametrize("hard_links", [True, False], ids=["linked", "copied"])
def test_files_written_together_appear_together_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    if not hard_links:  # old contents are kept by copies where links are refused

        def link(*args: object, **kwargs: object) -> None:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

        monkeypatch.setattr(os, "link", link)
    (tmp_path / "a").write_bytes(b"old a")
    (tmp_path / "c").write_bytes(b"old c")
    contents = {tmp_path / name: f"new {name}".encode() for name in ("a", "b", "c")}
    real_replace = os.replace

    def replace(source: str | Path, target: str | Path) -> None:
        if Path(target).name == "c":  # renamed last, after a and b
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(UserError, match=r"/c: cannot write: Operation not permitted"):
        atomic_write_all_bytes(contents)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {"a": b"old a", "c": b"old c"}
    monkeypatch.setattr(os, "replace", real_replace)
    atomic_write_all_bytes(contents)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        "a": b"new a",
        "b": b"new b",
        "c": b"new c",
    }


def test_written_files_get_ordinary_permissions(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    atomic_write_bytes(target, b"x")
    assert target.stat().st_mode & 0o044 == 0o044  # readable by others, unlike mkstemp's 0600


def test_unwritable_directory_and_missing_file_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot write"):
        atomic_write_bytes(tmp_path / "missing-dir" / "out", b"x")
    with pytest.raises(UserError, match=r"nope\.txt: no such file"):
        read_text(tmp_path / "nope.txt")
    (tmp_path / "latin1.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="not UTF-8"):
        read_text(tmp_path / "latin1.txt")


def test_outputs_replace_only_regular_files_and_write_through_links(tmp_path: Path) -> None:
    """Renaming over a device, a FIFO or a socket would replace it with a file (as root,
    ``--out /dev/null`` took the machine's /dev/null away); a link keeps pointing at the
    file it names, which gets the new content."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    targets = [fifo, tmp_path / "dir"]
    device = tmp_path / "null"
    if os.geteuid() == 0:  # a character device like /dev/null, made only as root
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append(device)
    for target in targets:
        with pytest.raises(UserError, match=r"cannot write: is a (FIFO|directory|character)"):
            atomic_write_bytes(target, b"x")
        link = tmp_path / f"link-to-{target.name}"
        link.symlink_to(target)
        with pytest.raises(UserError, match="cannot write: is a"):
            atomic_write_all_bytes({tmp_path / "fine": b"y", link: b"x"})
        assert not (tmp_path / "fine").exists()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if device.exists():
        assert stat.S_ISCHR(os.lstat(device).st_mode)
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    atomic_write_bytes(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "made-by-the-write.txt")
    atomic_write_bytes(dangling, b"made")
    assert dangling.is_symlink() and (tmp_path / "made-by-the-write.txt").read_bytes() == b"made"


def test_a_key_twice_in_one_object_is_refused_with_its_line() -> None:
    """Python's decoder keeps the last value: a second "num_hosts" went unseen."""
    text = '{"format": "x",\n "num_hosts": 3,\n "num_hosts": 4}'
    with pytest.raises(UserError) as caught:
        parse_json(text, "w.json")
    assert (
        str(caught.value)
        == 'w.json:3: invalid JSON: the key "num_hosts" appears twice in one object'
    )
    same_key_apart = '{"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}]}'
    assert parse_json(same_key_apart) == {"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}]}


def test_json_nesting_is_limited_before_decoding() -> None:
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(nested, "ok.json") is not None
    deeper = "\n[" + nested + "]"
    with pytest.raises(UserError, match=r"^deep\.json:2: invalid JSON: nested deeper than"):
        parse_json(deeper, "deep.json")
    with pytest.raises(UserError, match="nested deeper"):
        parse_json("[" * 1_000_000, "deep.json")  # no RecursionError, no hang


def test_brackets_and_escapes_inside_strings_are_not_nesting() -> None:
    text = '["' + "[{" * 500 + '", "a\\\\", "\\"[[[[", {"k": "]]]"}]'
    assert parse_json(text, "s.json")[0] == "[{" * 500


def test_json_numbers_that_are_not_json_or_too_long_are_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^n\.json:2: invalid JSON: -Infinity is not a number"):
        parse_json("[1,\n-Infinity]", "n.json")
    with pytest.raises(UserError, match=r"^n\.json:1: invalid JSON: a number with more than"):
        parse_json("[" + "7" * 10_000 + "]", "n.json")
    path = tmp_path / "w.json"
    path.write_bytes(b'{"a": 1,\n "b": "\xc3"}')
    with pytest.raises(UserError, match=r"w\.json:2: not UTF-8 text"):
        read_json(path)


def test_a_text_file_is_refused_at_its_first_nul_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No text format of the project holds a NUL byte (it is valid UTF-8, so the decoder
    let it through): a gigabyte of zeros was read whole, 18 s and 2 GB, before the
    format's reader refused it. Now the first piece read refuses it."""
    zeros = tmp_path / "zeros.json"
    with zeros.open("wb") as handle:
        handle.truncate(files.MAX_FILE_BYTES)  # sparse: a gigabyte of zeros on no disk
    with pytest.raises(UserError, match=r"zeros\.json:1: not text \(a NUL byte at offset 0\)$"):
        read_json(zeros)
    # The line and offset count what came before, in earlier pieces too.
    monkeypatch.setattr(files, "READ_CHUNK_BYTES", 3)
    late = tmp_path / "late.txt"
    late.write_bytes(b"150 1\n\n1 0 1\x00 2")
    with pytest.raises(UserError, match=r"late\.txt:3: not text \(a NUL byte at offset 12\)$"):
        files.read_text(late)


def test_every_user_file_is_read_only_when_it_is_a_regular_file_within_the_limit(
    tmp_path: Path,
) -> None:
    """Topologies, grids and P4 programs go through the one reader that workloads use:
    a device or a FIFO is refused without being read (``/dev/zero`` never ends, a FIFO
    without a writer blocks), and so is a file above the limit."""
    from control.topology import load_topology
    from softswitch.frontend.preprocess import read_program

    with pytest.raises(UserError, match=r"^/dev/zero: is a character device, not a topology file$"):
        load_topology(Path("/dev/zero"))
    fifo = tmp_path / "topo.fifo"
    os.mkfifo(fifo)
    with pytest.raises(
        UserError, match=r"topo\.fifo: is a FIFO \(named pipe\), not a topology file$"
    ):
        load_topology(fifo)
    with pytest.raises(UserError, match=r"topo\.fifo: is a FIFO \(named pipe\), not a P4 program$"):
        read_program(fifo)
    big = tmp_path / "big.json"
    big.write_text("[" + " " * 100 + "]")
    with pytest.raises(
        UserError, match=r"big\.json: 102 bytes, above the limit of 50 bytes for a grid file$"
    ):
        read_text(big, what="grid file", max_bytes=50)
    assert read_text(big, max_bytes=102) == "[" + " " * 100 + "]"


def test_a_leading_byte_order_mark_is_dropped_and_bad_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"\xef\xbb\xbf[1,\n2]")
    assert read_json(path) == [1, 2]
    path.write_bytes(b"[1,\n\xff]")
    with pytest.raises(UserError, match=r"t\.json:2: not UTF-8 text \(byte 0xff at offset 4"):
        read_text(path)


def test_json_with_more_values_than_allowed_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gigabyte of [0,0,...] decodes into gigabytes more; the count of commas bounds it."""
    import control.files

    monkeypatch.setattr(control.files, "MAX_JSON_VALUES", 1000)
    assert len(parse_json("[" + ",".join(["0"] * 1001) + "]")) == 1001
    with pytest.raises(UserError, match=r"w\.json: more than 1,000 values, above the limit"):
        parse_json("[" + ",".join(["0"] * 1002) + "]", "w.json")


def test_json_refusals_name_the_line_of_the_refused_token() -> None:
    """The line was found by a search over the whole text: the same key or word in a
    string before it, or the same key in a later object, named the wrong line."""
    duplicate = (
        '{"note": "weight",\n "a": {"weight": 1,\n       "weight": 2},\n "b": {"weight": 1}}'
    )
    with pytest.raises(UserError, match=r'^d\.json:3: invalid JSON: the key "weight" appears'):
        parse_json(duplicate, "d.json")
    nested = '[{"k": {"x": 1}, "x": 2},\n {"y": 1,\n  "k": {"x": 1, "x": 2}}]'
    with pytest.raises(UserError, match=r'^d\.json:3: invalid JSON: the key "x"'):
        parse_json(nested, "d.json")
    constant = '{"note": "a NaN or Infinity is refused",\n "arrival_s": Infinity}'
    with pytest.raises(UserError, match=r"^c\.json:2: invalid JSON: Infinity is not a number"):
        parse_json(constant, "c.json")
    digits = '{"note": "' + "7" * 5000 + '",\n "also": 1.' + "7" * 5000 + ',\n "id": '
    with pytest.raises(UserError, match=r"^l\.json:3: invalid JSON: a number with more than"):
        parse_json(digits + "7" * 5000 + "}", "l.json")


def test_json_with_more_arrays_and_objects_than_allowed_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``[[][][]...]`` has no commas: the bound on values did not bound its lists."""
    import control.files

    monkeypatch.setattr(control.files, "MAX_JSON_CONTAINERS", 1000)
    assert len(parse_json("[" + ",".join(["[]"] * 999) + "]")) == 999
    with pytest.raises(UserError, match=r"b\.json: more than 1,000 arrays and objects"):
        parse_json("[" + "[]" * 1000 + "]", "b.json")
    with pytest.raises(UserError, match=r"o\.json: more than 1,000 arrays and objects"):
        parse_json("[" + ",".join(["{}"] * 1000) + "]", "o.json")


def test_the_nesting_scan_carries_depth_and_strings_across_its_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scan goes block by block (bounded memory); a string or a level open at the
    end of a block must carry into the next."""
    import control.files

    text = '["' + "[[[" + '", ' + "[" * MAX_JSON_DEPTH + '"]]]"' + "]" * MAX_JSON_DEPTH + "]"
    for block in (1, 2, 3, 7, 1 << 22):
        monkeypatch.setattr(control.files, "_DEPTH_BLOCK", block)
        with pytest.raises(UserError, match="nested deeper"):
            parse_json(text, "s.json")  # 101 levels: the outer list and the run of 100
        assert parse_json(text[1:-1].replace('"[[[", ', "", 1), "s.json") is not None
