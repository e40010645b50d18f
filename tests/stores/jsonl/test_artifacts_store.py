"""The JSONL store's products: atomic and durable in a fixed order, through the disk seam."""

from __future__ import annotations

import errno
import os
import re

import pytest

from polyloop import JsonlStore, RunStarted, StoreError
from polyloop.stores._disk import Disk

from test_store_disk import Recorder


def _name(path: str) -> str:
    """The base name; a product's private file `.x.<pid>.<random>.tmp` reads `.x.tmp`."""
    return re.sub(r"^\.(.+)\.\d+\.[0-9a-f]{8}\.tmp$", r".\1.tmp", os.path.basename(path))


class ProductRecorder(Recorder):
    def open(self, path, flags, mode=0o644):
        fd = Disk.open(self, path, flags, mode)
        self.names[fd] = _name(path)
        self._note("open", self.names[fd])
        return fd

    def rename(self, src, dst):
        self._note("rename", f"{_name(src)}->{_name(dst)}")
        super().rename(src, dst)

    def unlink(self, path):
        self._note("unlink", _name(path))
        Disk.unlink(self, path)

    def mkdir(self, path):
        self._note("mkdir", _name(path))
        Disk.mkdir(self, path)

    def fsync_dir(self, path):
        self._note("fsync_dir", _name(path))
        Disk.fsync_dir(self, path)

    def read(self, path):
        self._note("read", _name(path))
        return Disk.read(self, path)


async def test_a_product_write_is_temp_write_fsync_rename_fsync_dir(tmp_path):
    disk = ProductRecorder()
    store = JsonlStore(tmp_path / "runs", _disk=disk)
    await store.write_run_started(RunStarted(run_id="r", goal="g"))
    disk.take()
    await store.put_product("r", "x.json", b"one")
    assert disk.take() == [
        "mkdir r.artifacts", "fsync_dir runs",  # the folder's name is durable before any product in it
        "open .x.json.tmp", "write .x.json.tmp", "fsync .x.json.tmp", "close .x.json.tmp",
        "rename .x.json.tmp->x.json", "fsync_dir r.artifacts",
    ]
    await store.put_product("r", "x.json", b"two")  # the folder exists and this store synced its name
    assert disk.take() == [
        "open .x.json.tmp", "write .x.json.tmp", "fsync .x.json.tmp", "close .x.json.tmp",
        "rename .x.json.tmp->x.json", "fsync_dir r.artifacts",
    ]
    assert await store.get_product("r", "x.json") == b"two"
    assert disk.take() == ["read x.json"]
    # A new store (a new process) syncs the folder's name again: an earlier one may have died before it.
    other = JsonlStore(tmp_path / "runs", _disk=disk)
    await other.put_product("r", "y", b"")
    assert disk.take()[:1] == ["fsync_dir runs"]
    await store.aclose()
    await other.aclose()


class FailAt(Disk):
    """The real disk, failing the `n`-th call (a write fails halfway: half its bytes land)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0

    def _tick(self) -> None:
        self.count += 1
        if self.count == self.n:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    def open(self, path, flags, mode=0o644):
        self._tick()
        return super().open(path, flags, mode)

    def write(self, fd, data):
        self.count += 1
        if self.count == self.n:
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write(fd, data)

    def fsync(self, fd):
        self._tick()
        super().fsync(fd)

    def close(self, fd):
        super().close(fd)  # on Linux a failed close has closed the descriptor all the same
        self._tick()

    def rename(self, src, dst):
        self._tick()
        super().rename(src, dst)

    def mkdir(self, path):
        self._tick()
        super().mkdir(path)

    def fsync_dir(self, path):
        self._tick()
        super().fsync_dir(path)


@pytest.mark.parametrize("n", range(1, 9))
async def test_a_failure_at_any_call_leaves_the_old_product_or_the_new_one_whole(tmp_path, n):
    runs = tmp_path / "runs"
    runs.mkdir()
    await JsonlStore(runs).put_product("r", "x", b"old product")
    disk = FailAt(n)
    store = JsonlStore(runs, _disk=disk)
    disk.count = 0
    # Calls: fsync_dir runs, open, write, fsync, close, rename, fsync_dir folder (7; the 8th does not fail).
    try:
        await store.put_product("r", "x", b"the new product")
        failed = False
    except StoreError:
        failed = True
    assert failed == (n <= 7)
    now = (runs / "r.artifacts" / "x").read_bytes()
    if n <= 6:
        assert now == b"old product"
    else:
        assert now == b"the new product"  # renamed; only the folder's sync failed (then reported)
    assert sorted(os.listdir(runs / "r.artifacts")) == ["x"]  # no temporary file left behind
    await store.aclose()


async def test_a_product_that_is_a_link_or_in_a_linked_folder_is_refused(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    store = JsonlStore(runs)
    await store.put_product("r", "x", b"x")
    os.symlink(outside / "secret", runs / "r.artifacts" / "link")
    with pytest.raises(StoreError, match="symbolic link"):
        await store.get_product("r", "link")
    os.symlink(outside, runs / "q.artifacts")
    with pytest.raises(StoreError, match="not a directory"):
        await store.put_product("q", "x", b"x")
    with pytest.raises(StoreError, match="not a directory"):
        await store.get_product("q", "x")
    assert sorted(os.listdir(outside)) == ["secret"]
    # Writing over a link replaces the link, never the file it points to.
    await store.put_product("r", "link", b"mine")
    assert (outside / "secret").read_bytes() == b"s"
    assert await store.get_product("r", "link") == b"mine"
    await store.aclose()


async def test_a_missing_product_or_folder_is_none(tmp_path):
    store = JsonlStore(tmp_path)
    assert await store.get_product("nobody", "x") is None
    await store.put_product("r", "x", b"x")
    assert await store.get_product("r", "y") is None
    await store.aclose()


async def test_a_dead_writers_temp_file_is_swept_by_the_next_write_of_its_name(tmp_path):
    store = JsonlStore(tmp_path)
    await store.put_product("r", "x", b"x")
    folder = tmp_path / "r.artifacts"
    dead = folder / ".x.999999999.0123abcd.tmp"
    live = folder / f".x.{os.getpid()}.0123abcd.tmp"
    dead.write_bytes(b"par")
    live.write_bytes(b"par")
    await store.put_product("r", "x", b"y")
    assert not dead.exists() and live.exists()
    await store.aclose()


async def test_what_stands_in_a_products_place_is_named_not_followed(tmp_path):
    from polyloop.stores._artifacts import NotRegularArtifactError

    store = JsonlStore(tmp_path)
    await store.put_product("r", "x", b"x")
    (tmp_path / "same").write_bytes(b"x")
    os.unlink(tmp_path / "r.artifacts" / "x")
    os.symlink(tmp_path / "same", tmp_path / "r.artifacts" / "x")  # even to the very bytes written
    (tmp_path / "r.artifacts" / "d").mkdir()
    with pytest.raises(NotRegularArtifactError) as link:
        await store.get_product("r", "x")
    with pytest.raises(StoreError) as folder:  # a StoreError, as before, for callers of get_product
        await store.get_product("r", "d")
    assert link.value.instead == "a symbolic link is in its place, not the regular file written"
    assert isinstance(folder.value, NotRegularArtifactError)
    assert folder.value.instead == "a directory is in its place, not the regular file written"
    await store.aclose()


def test_a_product_replaced_by_a_fifo_between_the_look_and_the_read_is_named_not_opened(tmp_path):
    from polyloop.stores._artifacts import NotRegularArtifactError, read_artifact_file
    from polyloop.stores._disk import Disk

    (tmp_path / "x").write_bytes(b"x")

    def swapped_then_read(path: str) -> bytes:
        os.unlink(path)
        os.mkfifo(path)  # a blocking open would wait for a writer forever
        return Disk().read(path)

    with pytest.raises(NotRegularArtifactError) as fifo:
        read_artifact_file(str(tmp_path), "x", swapped_then_read)
    assert fifo.value.instead == "a FIFO is in its place, not the regular file written"
    assert read_artifact_file(str(tmp_path), "gone", Disk().read) is None
    assert read_artifact_file(str(tmp_path / "no-folder"), "x", Disk().read) is None
