from pathlib import Path

import pytest

from control.errors import UserError
from control.files import atomic_write, atomic_write_bytes, read_text


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
