"""Requests to stop a run, for `JsonlStore` (a mixin; see polyloop/_log/cancel_port.py).

A request is the file `<directory>/.<run_id>.cancel` beside the run's lock
file: one JSON object `{"by", "why", "at"}`, written to a temporary file,
fsync'd, renamed into place and the directory fsync'd, so it is whole or
absent after any crash. The holder looks for it with one `open(2)` per safe
point (no disk thread, no hand-off: a missing file costs a failed system
call). A file that does not hold a request (foreign, or a link) is ignored.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import orjson

from .._log.cancel_port import CancelRequest
from .._log.errors import StoreError
from .._log.ids import check_run_id
from ._disk import Disk, why
from ._lockfile import SAFE

_MAX = 64 * 1024  # a request is a few hundred bytes; anything larger is not one


class Cancels:
    """The cancel requests of `JsonlStore` (a mixin: the store owns the state and the disk threads)."""

    _dir: str
    _prefix: str
    _disk: Disk
    _hand_off: Callable[[Callable[[], Any]], Any]

    def cancel_path(self, run_id: str) -> str:
        """Where a request to stop the run is left: `<directory>/.<run_id>.cancel`."""
        return f"{self._prefix}.{check_run_id(run_id)}.cancel"

    async def request_cancel(self, run_id: str, request: CancelRequest) -> None:
        """Leave a request to stop the run, durably (temp file, fsync, rename, fsync of the directory).

        Raises:
            InvalidRunIdError: an unsafe run id.
            StoreError: it cannot be written.
        """
        path = self.cancel_path(run_id)
        data = orjson.dumps(request.to_json(), option=orjson.OPT_APPEND_NEWLINE)
        await self._hand_off(lambda: self._put_request(run_id, path, data))

    def _put_request(self, run_id: str, path: str, data: bytes) -> None:
        disk = self._disk
        tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            disk.mkdir(self._dir)
            fd = disk.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | SAFE, 0o644)
            try:
                disk.write(fd, data)
                disk.fsync(fd)
            finally:
                disk.close(fd)
            disk.rename(tmp, path)
            disk.fsync_dir(self._dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                disk.unlink(tmp)
            raise StoreError(f"cannot write the request to stop {path}: {why(path, exc)}", run_id=run_id) from exc

    async def cancel_request(self, run_id: str) -> CancelRequest | None:
        """The run's pending request to stop, or None (read inline: it is one small file, usually absent)."""
        path = self.cancel_path(run_id)
        try:
            os.lstat(path)  # the usual answer, "none", for one failed system call
            data = self._disk.read(path)
        except FileNotFoundError:
            return None
        except OSError:
            return None  # a link, a FIFO, a directory: not a request this store wrote
        if len(data) > _MAX:
            return None
        try:
            return CancelRequest.from_json(orjson.loads(data))
        except orjson.JSONDecodeError:
            return None

    async def clear_cancel(self, run_id: str) -> None:
        """Remove the run's request to stop, if any (a missing one is fine).

        Raises:
            StoreError: it exists but cannot be removed.
        """
        path = self.cancel_path(run_id)
        try:
            self._disk.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot remove the request to stop {path}: {why(path, exc)}", run_id=run_id) from exc
