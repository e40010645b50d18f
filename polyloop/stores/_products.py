"""Reading a product file of a run's product folder: storage, so it lives with the stores.

`read_product_file` is the one way a product file is read (by `JsonlStore.get_product`,
`ls`, `verify`): it never follows a symbolic link and never opens a FIFO or a
device. `NotRegularProductError` says what stands where the product was written.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from .._files import kind_of
from .._log.errors import StoreError


class NotRegularProductError(StoreError):
    """`get_product` found something other than the regular file a product was written as.

    A `StoreError` for callers of `get_product`; the product checks read it
    as a `missing` product (`ProductCheck.instead` says what is there).
    """

    def __init__(self, message: str, *, instead: str, run_id: str | None = None) -> None:
        self.instead = instead
        super().__init__(message, run_id=run_id)


def read_product_file(folder: str, name: str, read: Callable[[str], bytes], *, run_id: str = "") -> bytes | None:
    """The bytes of product `name` in the run's product folder; None when it does not exist.

    The one check of what stands where a product was written. Never follows
    a symbolic link (neither the folder nor the product) and never opens a
    FIFO or a device: both are looked at with `lstat` first, and `read`
    (the store's `Disk.read`: `O_NOFOLLOW | O_NONBLOCK`, then `fstat`)
    refuses whatever takes their place in between.

    Raises:
        NotRegularProductError: the folder is not a directory, or the
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


def _not_regular(path: str, mode: int, *, folder: bool, run_id: str) -> NotRegularProductError:
    instead = (
        f"its folder is {kind_of(mode)}, not a directory" if folder
        else f"{kind_of(mode)} is in its place, not the regular file written"
    )
    return NotRegularProductError(f"cannot read product {path}: {instead}", instead=instead, run_id=run_id)
