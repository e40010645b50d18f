"""How `polyloop serve` is asked to run (standard library only: the command line reads it without the extra)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Options:
    """How `polyloop serve` was asked to run."""

    where: str
    host: str = "127.0.0.1"
    port: int = 8765
    allow_remote: bool = False
    users: str | None = None
    read_only: bool = False


def is_loopback(host: str) -> bool:
    """Whether `host` binds only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
