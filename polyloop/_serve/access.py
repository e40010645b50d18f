"""Who may use the console: tokens, the users file, sessions, CSRF tokens.

Access needs a token, either the one generated at start (printed once, in a
URL, as Jupyter does) or one of a users file's named operators, whose
tokens are stored hashed (scrypt, from the standard library). The token
URL opens a session held in a cookie (`HttpOnly`, `SameSite=Strict`); the
session carries who decides (the operator's name, recorded as `by`), their
role (`decide` or `read-only`) and the CSRF token every form echoes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

ROLES = ("decide", "read-only")
COOKIE = "polyloop_session"
SESSION_SECONDS = 12 * 3600
_N, _R, _P = 2**14, 8, 1  # scrypt's cost: ~50 ms a check; tokens are 256 random bits anyway


class UsersFileError(ValueError):
    """The users file cannot be read or a line of it is not `NAME ROLE HASH`."""


def hash_token(token: str, *, salt: bytes | None = None) -> str:
    """`scrypt$N$r$p$SALT$HASH` (hex) of `token`: what a users file holds instead of the token."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(token.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def token_matches(token: str, stored: str) -> bool:
    """Whether `token` hashes to `stored` (a `hash_token` string); False for a malformed one."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        got = hashlib.scrypt(token.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p),
                             dklen=len(digest) // 2)
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(got.hex(), digest)


@dataclass(frozen=True, slots=True)
class Operator:
    """A person the console knows: their name (recorded as `by`) and role."""

    name: str | None  # None: the generated token's holder; decisions default to the OS user@host
    role: str
    token_hash: str = ""


def read_users(path: str | Path) -> list[Operator]:
    """The operators of a users file: one `NAME ROLE HASH` a line; `#` starts a comment."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsersFileError(f"cannot read the users file {path}: {exc}") from None
    users: list[Operator] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or parts[1] not in ROLES or not parts[2].startswith("scrypt$"):
            raise UsersFileError(f"{path}:{number}: expected `NAME ROLE HASH` with ROLE one of "
                                 f"{', '.join(ROLES)} and a hash from `polyloop serve --add-user`")
        if any(u.name == parts[0] for u in users):
            raise UsersFileError(f"{path}:{number}: the name {parts[0]!r} is there twice")
        users.append(Operator(parts[0], parts[1], parts[2]))
    if not users:
        raise UsersFileError(f"the users file {path} names nobody")
    return users


def add_user(path: str | Path, name: str, role: str) -> str:
    """Append a new operator to the users file; return their token (shown once, stored only hashed)."""
    if not name or any(c.isspace() for c in name) or "#" in name:
        raise UsersFileError(f"an operator's name is one word without '#', not {name!r}")
    existing = read_users(path) if Path(path).exists() and Path(path).read_text().strip() else []
    if any(u.name == name for u in existing):
        raise UsersFileError(f"{path} already names {name!r}")
    token = secrets.token_urlsafe(32)
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{name} {role} {hash_token(token)}\n")
    return token


@dataclass(slots=True)
class Session:
    """A signed-in browser: who, what they may do, the CSRF token its forms carry."""

    who: Operator
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    until: float = field(default_factory=lambda: time.monotonic() + SESSION_SECONDS)

    @property
    def can_decide(self) -> bool:
        return self.who.role == "decide"


class Gate:
    """The tokens that open a session, and the sessions open now (in memory: a restart signs everyone out)."""

    def __init__(self, *, token: str | None, users: list[Operator] | None, read_only: bool) -> None:
        self._token = token
        self._users = users or []
        self._read_only = read_only
        self._sessions: dict[str, Session] = {}

    def sign_in(self, token: str) -> str | None:
        """A new session id for `token`, or None when it opens nothing."""
        who = self._operator(token)
        if who is None:
            return None
        if self._read_only:
            who = Operator(who.name, "read-only", who.token_hash)
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = Session(who)
        return sid

    def _operator(self, token: str) -> Operator | None:
        if self._token is not None:
            if hmac.compare_digest(token.encode(), self._token.encode()):
                return Operator(None, "decide")
            return None
        for user in self._users:
            if token_matches(token, user.token_hash):
                return user
        return None

    def session(self, sid: str | None) -> Session | None:
        """The live session of cookie value `sid`, or None."""
        if not sid:
            return None
        found = self._sessions.get(sid)
        if found is None or found.until < time.monotonic():
            self._sessions.pop(sid, None)
            return None
        return found
