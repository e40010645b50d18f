"""`polyloop._files`: the one way a user's path is read, refusing what is not a regular file without waiting.

Every test runs under the watchdog of `test_store_special_files.py`: a
regression that opens a FIFO for reading fails with "hung" instead of
hanging the suite.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest
from support.watchdog import watchdog  # noqa: F401  (autouse: every test here runs under it)

from polyloop import InvalidInputError, ScriptedModel
from polyloop._files import NotRegularFileError, open_regular, read_regular
from polyloop._run.validity import fingerprint_input


def _socket_at(path: Path) -> socket.socket:
    short = Path(tempfile.mkdtemp(prefix="pl", dir="/tmp")) / "s"  # a unix socket path is short
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(short))
    os.rename(short, path)
    short.parent.rmdir()
    return sock


@pytest.fixture
def paths(tmp_path):
    """One path of each kind, by the words the refusal uses."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "to-zero").symlink_to("/dev/zero")
    sock = _socket_at(tmp_path / "sock")
    yield tmp_path
    sock.close()


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        pytest.param("fifo", "a FIFO", id="fifo"),
        pytest.param("to-fifo", "a FIFO", id="link-to-fifo"),
        pytest.param("sock", "a socket", id="socket"),
        pytest.param("to-zero", "a character device", id="device"),
        pytest.param("dir", "a directory", id="directory"),
    ],
)
def test_what_is_not_a_regular_file_is_refused_by_name(paths, name, kind):
    with pytest.raises(NotRegularFileError) as caught:
        read_regular(paths / name)
    assert caught.value.kind == kind
    assert str(caught.value) == f"{paths / name} is {kind}, not a regular file"
    assert caught.value.strerror == f"it is {kind}, not a regular file"


def test_a_link_is_refused_as_a_link_when_links_are_not_followed(paths, tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    with pytest.raises(NotRegularFileError, match="is a symbolic link"):
        read_regular(tmp_path / "to-file", follow_symlinks=False)
    assert read_regular(tmp_path / "to-file") == b"x"


def test_a_regular_file_is_read_whole_through_a_blocking_descriptor(tmp_path):
    (tmp_path / "file").write_bytes(b"a" * 200_000)
    assert read_regular(tmp_path / "file") == b"a" * 200_000
    fd = open_regular(tmp_path / "file")
    try:
        assert os.get_blocking(fd)  # O_NONBLOCK served the open only
    finally:
        os.close(fd)


def test_a_file_longer_than_the_limit_is_refused(tmp_path):
    (tmp_path / "file").write_bytes(b"abc")
    with pytest.raises(OSError, match="larger than 2 bytes"):
        read_regular(tmp_path / "file", limit=2)


def test_a_path_swapped_for_a_fifo_after_the_look_is_refused_without_waiting(tmp_path, monkeypatch):
    # The look (stat) saw nothing wrong; the open itself must not wait and the descriptor is checked.
    os.mkfifo(tmp_path / "fifo")
    monkeypatch.setattr("polyloop._files.check_regular", lambda path, follow_symlinks=True: None)
    with pytest.raises(NotRegularFileError, match="is a FIFO"):
        open_regular(tmp_path / "fifo")


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "nothing")


def test_a_scripted_model_file_that_is_a_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / "script.jsonl")
    with pytest.raises(OSError, match="is a FIFO, not a regular file"):
        ScriptedModel.from_file(tmp_path / "script.jsonl")


def test_an_input_that_is_a_fifo_is_refused_and_a_fifo_inside_a_directory_input_is_left_out(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InvalidInputError, match=r"input 'x': .*/fifo is a FIFO, not a regular file or a directory"):
        fingerprint_input("x", tmp_path / "fifo")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"a")
    before = fingerprint_input("x", tmp_path / "d")
    os.mkfifo(tmp_path / "d" / "pipe")  # a directory's hash covers its regular files only
    assert fingerprint_input("x", tmp_path / "d") == before
