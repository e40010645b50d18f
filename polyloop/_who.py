"""Who a settlement is by when nobody says (SPEC: the OS user and host)."""

from __future__ import annotations

import getpass
import socket


def default_by() -> str:
    """`user@host` of this process; `unknown@host` where the user has no name (a bare container uid)."""
    try:
        user = getpass.getuser()
    except Exception:  # getpass raises OSError or KeyError, depending on the platform
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
