"""The optional extras: importing a module of one without it says which `pip install` it needs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def needs_extra(package: str, extra: str, what: str) -> Iterator[None]:
    """Turn a missing `package` (a module of the extra itself) into an ImportError naming the extra.

    `what` says what needs it ("polyloop.otel needs OpenTelemetry"); any other missing
    module is a different problem and passes through as it is.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(package):
            raise
        raise ImportError(f"{what}, an optional extra of polyloop: pip install 'polyloop[{extra}]'",
                          name=exc.name) from exc
