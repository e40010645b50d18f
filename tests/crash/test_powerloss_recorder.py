"""The recording disk: it does each call for real and records what it did, with paths and offsets."""

from __future__ import annotations

import os

import pytest

from powerloss.model import frontiers
from powerloss.recorder import RecordingDisk
from powerloss.trace import Op


def test_each_call_is_done_and_recorded_with_its_file_and_offset(tmp_path):
    (tmp_path / "old").write_bytes(b"kept\n")
    disk = RecordingDisk(tmp_path)
    disk.mkdir(str(tmp_path / "a" / "b"))
    tmp = str(tmp_path / "a" / "b" / "x.tmp")
    fd = disk.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    disk.write(fd, b"one\n")
    disk.write(fd, b"two\n")
    disk.fsync(fd)
    disk.close(fd)
    disk.rename(tmp, str(tmp_path / "a" / "b" / "x"))
    disk.link(str(tmp_path / "a" / "b" / "x"), str(tmp_path / "a" / "b" / "y"))
    disk.fsync_dir(str(tmp_path / "a" / "b"))
    fd = disk.open(str(tmp_path / "old"), os.O_WRONLY | os.O_APPEND)
    disk.write(fd, b"more\n")
    disk.ftruncate(fd, 7)
    disk.close(fd)
    disk.unlink(str(tmp_path / "a" / "b" / "y"))
    disk.mark("ack", n=1)

    assert (tmp_path / "a" / "b" / "x").read_bytes() == b"one\ntwo\n"
    assert (tmp_path / "old").read_bytes() == b"kept\nmo"
    trace = disk.trace
    assert trace.files == {"old": b"kept\n"}
    assert trace.ops == [
        Op("mkdir", "a"),
        Op("mkdir", "a/b"),
        Op("create", "a/b/x.tmp", 1),
        Op("write", ino=1, offset=0, data=b"one\n"),
        Op("write", ino=1, offset=4, data=b"two\n"),
        Op("fsync", ino=1),
        Op("rename", "a/b/x.tmp", 1, dst="a/b/x"),
        Op("link", "a/b/y", 1),
        Op("fsync_dir", "a/b"),
        Op("write", ino=trace.initial_inode("old"), offset=5, data=b"more\n"),  # O_APPEND: at the end
        Op("truncate", ino=trace.initial_inode("old"), size=7),
        Op("unlink", "a/b/y", 1),
        Op("mark", mark={"kind": "ack", "n": 1}),
    ]
    *_, last = frontiers(trace)
    assert last.names["a/b/x"] == 1 and "a/b/x.tmp" not in last.names
    assert last.dirs == frozenset()  # a and a/b need their parents synced


def test_a_file_made_around_the_seam_is_refused(tmp_path):
    disk = RecordingDisk(tmp_path)
    (tmp_path / "sneaky").write_bytes(b"")
    with pytest.raises(RuntimeError, match="never saw it created"):
        disk.open(str(tmp_path / "sneaky"), os.O_WRONLY)


def test_paths_outside_the_root_are_refused(tmp_path):
    disk = RecordingDisk(tmp_path / "inside")
    with pytest.raises(ValueError, match="outside"):
        disk.open(str(tmp_path / "elsewhere"), os.O_WRONLY | os.O_CREAT)
