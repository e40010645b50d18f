"""Artifacts (log format 1.2) on disk: `JsonlStore`'s product methods and the reading of a product file.

`read_artifact_file` is the one way a product file is read (by
`JsonlStore.get_product`, `ls`, `verify`): it never follows a symbolic link
and never opens a FIFO or a device. `NotRegularArtifactError` says what stands
where the product was written. `ArtifactFiles` is a mixin of `JsonlStore`
(polyloop/stores/_jsonl.py), which owns the state it uses (declared below).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._files import kind_of
from .._log.errors import StoreError
from .._log.ids import check_artifact_name, check_run_id
from ._disk import SAFE, Disk, why
from ._lockfile import alive


class NotRegularArtifactError(StoreError):
    """`get_product` found something other than the regular file a product was written as.

    A `StoreError` for callers of `get_product`; the product checks read it
    as a `missing` product (`ArtifactCheck.instead` says what is there).
    """

    def __init__(self, message: str, *, instead: str, run_id: str | None = None) -> None:
        self.instead = instead
        super().__init__(message, run_id=run_id)


def read_artifact_file(folder: str, name: str, read: Callable[[str], bytes], *, run_id: str = "") -> bytes | None:
    """The bytes of product `name` in the run's product folder; None when it does not exist.

    The one check of what stands where a product was written. Never follows
    a symbolic link (neither the folder nor the product) and never opens a
    FIFO or a device: both are looked at with `lstat` first, and `read`
    (the store's `Disk.read`: `O_NOFOLLOW | O_NONBLOCK`, then `fstat`)
    refuses whatever takes their place in between.

    Raises:
        NotRegularArtifactError: the folder is not a directory, or the
            product is not a regular file (a directory, a FIFO, a link...).
        OSError: it cannot be read.
    """
    path = os.path.join(folder, name)
    for where, wanted in ((folder, stat.S_ISDIR), (path, stat.S_ISREG)):
        try:
            mode = os.lstat(where).st_mode
        except FileNotFoundError:
            return None
        if not wanted(mode):
            raise _not_regular(path, mode, folder=where == folder, run_id=run_id)
    try:
        return read(path)
    except FileNotFoundError:
        return None
    except OSError:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if stat.S_ISREG(mode):
            raise
        raise _not_regular(path, mode, folder=False, run_id=run_id) from None  # replaced since the lstat


def _not_regular(path: str, mode: int, *, folder: bool, run_id: str) -> NotRegularArtifactError:
    instead = (
        f"its folder is {kind_of(mode)}, not a directory" if folder
        else f"{kind_of(mode)} is in its place, not the regular file written"
    )
    return NotRegularArtifactError(f"cannot read product {path}: {instead}", instead=instead, run_id=run_id)


class ArtifactFiles:
    """The products of `JsonlStore` (a mixin: the store owns the state and the disk threads)."""

    directory: Path
    _dir: str
    _prefix: str
    _disk: Disk
    _folders_synced: set[str]
    _hand_off: Callable[[Callable[[], Any]], Any]

    def artifact_folder(self, run_id: str) -> Path:
        """Where the run's products live: `<directory>/<run_id>.artifacts/`."""
        return self.directory / f"{check_run_id(run_id)}.artifacts"

    async def put_product(self, run_id: str, name: str, data: bytes) -> None:
        """Store a product atomically and durably: temp file, write, fsync, rename, fsync of the folder.

        The temporary file (`.<name>.<pid>.<random>.tmp`, never a valid
        product name) is in the product's own folder, so the rename is
        atomic; a crash at any point leaves the old product (or none) or the
        whole new one. The first product of a run this store writes also
        makes the folder's own name durable.

        Raises:
            InvalidRunIdError, InvalidInputError: an unsafe run id or product name.
            StoreError: the product could not be written (it is then the old one or absent).
        """
        check_run_id(run_id)
        check_artifact_name(name)
        content = bytes(data)
        await self._hand_off(lambda: self._put(run_id, name, content))

    async def get_product(self, run_id: str, name: str) -> bytes | None:
        """The product's bytes, or None when it does not exist; never follows a symbolic link.

        Raises:
            NotRegularArtifactError: (a `StoreError`) it (or its folder) is not
                a regular file (directory) but, say, a symbolic link or a FIFO;
                the product checks count it as missing.
            StoreError: it cannot be read.
        """
        check_run_id(run_id)
        check_artifact_name(name)
        return await self._hand_off(lambda: self._get(run_id, name))

    def _put(self, run_id: str, name: str, data: bytes) -> None:
        disk = self._disk
        folder = f"{self._prefix}{run_id}.artifacts"
        final = os.path.join(folder, name)
        try:
            self._make_folder(folder)
            self._sweep_stale_artifacts(folder, name)
            tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
            fd = disk.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | SAFE, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot write product {name!r} in {folder}: {why(folder, exc)}", run_id=run_id) from exc
        try:
            try:
                disk.write(fd, data)
                disk.fsync(fd)
            finally:
                disk.close(fd)
            disk.rename(tmp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                disk.unlink(tmp)
            raise StoreError(f"cannot write product {final}: {exc.strerror or exc}", run_id=run_id) from exc
        try:
            disk.fsync_dir(folder)
        except OSError as exc:
            raise StoreError(f"cannot sync {folder}: {exc.strerror or exc}", run_id=run_id) from exc

    def _make_folder(self, folder: str) -> None:
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            self._disk.mkdir(folder)
            mode = stat.S_IFDIR
        if not stat.S_ISDIR(mode):
            raise OSError(errno.ENOTDIR, f"it is {kind_of(mode)}, not a directory", folder)
        if folder not in self._folders_synced:
            # The folder's name in the run directory must be durable before
            # any product in it is acknowledged (a crash may have come
            # between an earlier process's mkdir and its sync).
            self._disk.fsync_dir(self._dir)
            self._folders_synced.add(folder)

    def _sweep_stale_artifacts(self, folder: str, name: str) -> None:
        # A crash during a write leaves `.<name>.<pid>.<rand>.tmp`; remove
        # those whose writer is dead (a live one may be mid-write).
        pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
        for leftover in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.tmp")):
            match = pattern.fullmatch(os.path.basename(leftover))
            if match and not alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    self._disk.unlink(leftover)

    def _get(self, run_id: str, name: str) -> bytes | None:
        folder = f"{self._prefix}{run_id}.artifacts"
        try:
            return read_artifact_file(folder, name, self._disk.read, run_id=run_id)
        except OSError as exc:
            path = os.path.join(folder, name)
            raise StoreError(f"cannot read product {path}: {exc.strerror or exc}", run_id=run_id) from exc
