"""Moving one run of a run directory into an archive directory, so a crash leaves it whole in one place.

A run of a directory is its log `<run_id>.jsonl`, its products
`<run_id>.artifacts/`, its lock file `.<run_id>.lock` and, at times, a
request to stop `.<run_id>.cancel`. The log says where the run is: a
directory has the run exactly when it has its log. So the move is:

1. *stage*: the products are hard-linked into `.<run_id>.artifacts.staging/`
   in the archive, which is fsync'd and renamed to `<run_id>.artifacts/`;
   a request to stop is hard-linked beside it. The source is untouched:
   the run is whole there; the archive holds parts of a run but no log.
2. *commit*: the log is renamed into the archive (one `rename(2)`, atomic),
   and both directories are fsync'd. From here the run is whole in the
   archive; what is left in the source is no run (no log).
3. *clean*: the source's products, request and lock file are removed (the
   lock file is renamed into the archive: the hold taken for the move goes
   with it).

A crash at any point leaves the log in exactly one directory, with its
products whole beside it; `sweep` (run at the start of every archive into
that directory) removes what a crash left of the other steps. The rename
that commits needs both directories on one file system: archiving across
file systems is refused before anything moves.

Every call that changes the file system goes through a `MoveDisk` (the
fault-injection seam of the kill-point tests).
"""

from __future__ import annotations

import contextlib
import os
import stat

from .._log.errors import InvalidInputError
from ..stores._disk import Disk

_STAGING = ".artifacts.staging"


class MoveDisk(Disk):
    """The store's disk seam, and `rmdir`."""

    def rmdir(self, path: str) -> None:
        """`os.rmdir`: remove an empty directory."""
        os.rmdir(path)


class Paths:
    """The files of one run in one directory."""

    def __init__(self, directory: str, run_id: str) -> None:
        self.dir = directory
        self.log = os.path.join(directory, f"{run_id}.jsonl")
        self.products = os.path.join(directory, f"{run_id}.artifacts")
        self.staging = os.path.join(directory, f".{run_id}{_STAGING}")
        self.lock = os.path.join(directory, f".{run_id}.lock")
        self.cancel = os.path.join(directory, f".{run_id}.cancel")


def same_file_system(source: str, archive: str) -> None:
    """Refuse an archive on another file system than the runs (the commit is a rename).

    Raises:
        InvalidInputError: they are on different file systems, or are the same directory.
    """
    a, b = os.stat(source), os.stat(archive)
    if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
        raise InvalidInputError(f"{archive} is the run directory itself: archive to another directory")
    if a.st_dev != b.st_dev:
        raise InvalidInputError(
            f"{archive} is on another file system than {source}: a run moves with one atomic rename, which "
            "cannot cross file systems; archive to a directory on the same one, then copy that elsewhere"
        )


def move(disk: MoveDisk, source: str, archive: str, run_id: str) -> None:
    """Move run `run_id` from `source` to `archive` (stage, commit, clean); the caller holds the run.

    Raises:
        InvalidInputError: the archive already has a log of this run id.
        OSError: a file-system call failed (the run is then whole in one place).
    """
    src, dst = Paths(source, run_id), Paths(archive, run_id)
    if os.path.lexists(dst.log):
        raise InvalidInputError(f"the archive {archive} already has a run {run_id}: nothing was moved")
    if _is_dir(src.products):
        if os.path.lexists(dst.staging):
            remove_tree(disk, dst.staging)
        disk.mkdir(dst.staging)
        for name in sorted(os.listdir(src.products)):
            if not name.startswith(".") and _is_file(os.path.join(src.products, name)):  # not a temp file
                disk.link(os.path.join(src.products, name), os.path.join(dst.staging, name))
        disk.fsync_dir(dst.staging)
        if os.path.lexists(dst.products):
            remove_tree(disk, dst.products)  # what a crash before an earlier commit left
        disk.rename(dst.staging, dst.products)
    if _is_file(src.cancel):
        _unlink(disk, dst.cancel)
        disk.link(src.cancel, dst.cancel)
    disk.fsync_dir(archive)
    disk.rename(src.log, dst.log)  # the commit: the run is now the archive's
    disk.fsync_dir(archive)
    disk.fsync_dir(source)
    clean_source(disk, src, dst)


def clean_source(disk: MoveDisk, src: Paths, dst: Paths) -> None:
    """Remove what a committed move left in the source; the lock file goes to the archive."""
    if _is_dir(src.products):
        remove_tree(disk, src.products)
    _unlink(disk, src.cancel)
    if _is_file(src.lock):
        if os.path.lexists(dst.lock):
            _unlink(disk, src.lock)
        else:
            disk.rename(src.lock, dst.lock)
    disk.fsync_dir(src.dir)


def sweep(disk: MoveDisk, source: str, archive: str) -> list[str]:
    """Finish what a crash cut short in earlier archives from `source` into `archive`; return the run ids.

    A run whose log is in the archive has its leftovers removed from the
    source; a run whose log is still in the source has the parts staged in
    the archive removed (its next archive stages them again).
    """
    touched: list[str] = []
    for entry in sorted(os.listdir(archive)):
        run_id = _run_of(entry)
        if run_id is None:
            continue
        src, dst = Paths(source, run_id), Paths(archive, run_id)
        if os.path.lexists(dst.log):
            if not os.path.lexists(src.log) and _leftovers(src):
                clean_source(disk, src, dst)
                touched.append(run_id)
        elif os.path.lexists(src.log):
            for part in (dst.staging, dst.products):
                if os.path.lexists(part):
                    remove_tree(disk, part)
            _unlink(disk, dst.cancel)
            touched.append(run_id)
    return sorted(set(touched))


def _run_of(entry: str) -> str | None:
    """The run id an archive entry belongs to (None for anything else)."""
    for prefix, suffix in (("", ".jsonl"), ("", ".artifacts"), (".", _STAGING), (".", ".cancel")):
        if entry.startswith(prefix) and entry.endswith(suffix) and len(entry) > len(prefix) + len(suffix):
            return entry[len(prefix): -len(suffix)]
    return None


def _leftovers(src: Paths) -> bool:
    return any(os.path.lexists(p) for p in (src.products, src.cancel, src.lock))


def remove_tree(disk: MoveDisk, path: str) -> None:
    """Remove a products folder (regular files in one directory); a link is removed, never followed."""
    if not _is_dir(path):
        _unlink(disk, path)
        return
    for name in os.listdir(path):
        disk.unlink(os.path.join(path, name))
    disk.rmdir(path)


def _unlink(disk: MoveDisk, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        disk.unlink(path)


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
