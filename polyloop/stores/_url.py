"""Store specs: the one place that tells a directory from a database URL, and hides a URL's secrets.

A store spec is a directory (of JSONL logs) or a libpq connection URI,
`postgresql://` or `postgres://` (the only two prefixes libpq reads). Any
other `scheme://` (`mysql://`, `sqlite:///x.db`, SQLAlchemy's
`postgresql+psycopg://`) is refused: taken as a directory it would quietly
become a folder named `mysql:`. A path with a `:` but no `://` (`C:\\runs`,
`runs:old`) stays a directory, and so does a one-letter "scheme" (`C://runs`,
a Windows drive).

Secrets are what libpq itself hides (`PQconndefaults` marks them with the
display character `*`): the password of the userinfo (`user:PASSWORD@`) and
the query parameters `password`, `sslpassword` and `oauth_client_secret`.
They are dropped from the URL shown to a person, never replaced by a
marker: a command printed with the shown URL still works when pasted,
libpq then taking the password from `PGPASSWORD` or `~/.pgpass` as usual
(a marker would be sent as the password). Paths (`passfile`, `sslkey`,
`sslcert`, `sslrootcert`) name files whose contents are secret, not
secrets, and are shown.

This module parses URLs the way libpq does, without libpq: the core
install has no psycopg, and the shown form must not depend on the driver.
"""

from __future__ import annotations

import os
import re
from typing import Literal
from urllib.parse import unquote

from .._log.errors import StoreUrlError

StoreKind = Literal["directory", "postgresql"]

SCHEMES = ("postgresql://", "postgres://")
SECRET_PARAMETERS = frozenset({"password", "sslpassword", "oauth_client_secret"})
HIDDEN = "***"  # what a secret becomes inside a driver's message (not in a URL: it is dropped there)

# RFC 3986's scheme, two characters or more: `C://x` is a Windows drive, not a URL.
_URL_LIKE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")


def store_kind(spec: str | os.PathLike[str]) -> StoreKind:
    """Whether a store spec names a directory or a PostgreSQL database.

    Args:
        spec: a directory, or a `postgresql://` (`postgres://`) URL.

    Returns:
        `"postgresql"` for a URL libpq reads, else `"directory"`.

    Raises:
        StoreUrlError: `spec` looks like a URL (`scheme://`) of a scheme
            PolyLoop does not serve; nothing was created.
    """
    text = os.fspath(spec)
    if not isinstance(text, str):
        return "directory"
    if text.startswith(SCHEMES):
        return "postgresql"
    found = _URL_LIKE.match(text)
    if found is not None:
        raise StoreUrlError(found.group(1))
    return "directory"


def directory(spec: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """`spec`, refused if it is any URL: a directory store never becomes a folder named `mysql:`."""
    if store_kind(spec) == "postgresql":
        scheme = os.fspath(spec).partition("://")[0]
        raise StoreUrlError(scheme, message=(
            f"{scheme}://... is a PostgreSQL URL, not a directory: open it with open_store(url) "
            "(or PostgresStore(url))"
        ))
    return spec


def redact_url(spec: str | os.PathLike[str]) -> str:
    """A store spec as it may be shown: a directory as given, a URL without its secrets.

    Args:
        spec: a directory or a store URL.

    Returns:
        `spec` with the userinfo's password and every secret query parameter
        (`password`, `sslpassword`, `oauth_client_secret`) dropped; the rest
        is kept as written, so the result still connects where libpq finds
        the password elsewhere (`PGPASSWORD`, `~/.pgpass`).
    """
    text = os.fspath(spec)
    if not isinstance(text, str) or _URL_LIKE.match(text) is None:
        return text if isinstance(text, str) else os.fsdecode(text)
    scheme, rest = text.split("://", 1)
    userinfo, at, rest = _split_userinfo(rest)
    netloc, sep, query = rest.partition("?")
    kept = [pair for pair in query.split("&") if _key(pair) not in SECRET_PARAMETERS] if sep else []
    user = userinfo.partition(":")[0] + at
    return f"{scheme}://{user}{netloc}" + (f"?{'&'.join(kept)}" if kept else "")


def describe_url(url: str) -> str:
    """`user@host:port/dbname` of a PostgreSQL URL, for messages: never a secret.

    The query's `host`, `port`, `user` and `dbname` win over the URL's, as
    in libpq; libpq's defaults (`localhost`, `5432`) fill what is missing.
    """
    userinfo, _, rest = _split_userinfo(url.split("://", 1)[-1])
    netloc, _, query = rest.partition("?")
    hostspec, _, dbname = netloc.partition("/")
    fields = {"user": _decode(userinfo.partition(":")[0]), "dbname": _decode(dbname)}
    hosts, ports = [], []
    for item in hostspec.split(",") if hostspec else []:
        host, port = _host_port(item)
        hosts.append(host)
        ports.append(port)
    fields["host"], fields["port"] = ",".join(hosts), ",".join(ports)
    for pair in query.split("&") if query else []:
        key = _key(pair)
        if key in fields:
            fields[key] = _decode(pair.partition("=")[2])
    hosts = fields["host"].split(",") if fields["host"] else [""]
    ports = fields["port"].split(",") if fields["port"] else [""]
    # libpq: one port serves every host; otherwise the i-th port is the i-th host's.
    places = [f"{_shown_host(h)}:{(ports[0] if len(ports) == 1 else ports[i] if i < len(ports) else '') or '5432'}"
              for i, h in enumerate(hosts)]
    user = f"{fields['user']}@" if fields["user"] else ""
    return f"{user}{','.join(places)}/{fields['dbname']}"


def hide_secrets(text: str, url: str) -> str:
    """`text` (a driver's message, which may quote the URL or a piece of it) without `url`'s secrets.

    The whole URL becomes its shown form; any secret still in the text
    becomes `***`, as written in the URL and as libpq decodes it.
    """
    text = text.replace(url, redact_url(url))
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def _secrets(url: str) -> set[str]:
    userinfo, _, rest = _split_userinfo(url.split("://", 1)[-1])
    found = [userinfo.partition(":")[2]] if ":" in userinfo else []
    query = rest.partition("?")[2]
    found += [pair.partition("=")[2] for pair in query.split("&") if _key(pair) in SECRET_PARAMETERS]
    return {form for raw in found for form in (raw, _decode(raw)) if form}


def _split_userinfo(rest: str) -> tuple[str, str, str]:
    """(userinfo, "@" or "", the rest), where libpq looks for it: before an `@` that comes before any `/`."""
    at, slash = rest.find("@"), rest.find("/")
    if at < 0 or 0 <= slash < at:
        return "", "", rest
    return rest[:at], "@", rest[at + 1 :]


def _host_port(item: str) -> tuple[str, str]:
    if item.startswith("["):  # an IPv6 address: [::1]:5432
        host, _, tail = item[1:].partition("]")
        return host, tail[1:] if tail.startswith(":") else ""
    host, _, port = item.partition(":")
    return _decode(host), port


def _shown_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host or "localhost"  # an IPv6 address keeps its brackets


def _key(pair: str) -> str:
    """A query parameter's name as libpq reads it (percent-decoded); lower case, to hide more, never less."""
    return _decode(pair.partition("=")[0]).lower()


def _decode(text: str) -> str:
    return unquote(text) if "%" in text else text  # libpq decodes %XX only (a `+` stays a `+`)
