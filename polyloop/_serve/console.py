"""What the console serves and how: the store, the gate, the names it answers to, its templates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader
from starlette.responses import HTMLResponse

from .access import Gate

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


@dataclass(slots=True)
class Console:
    """What the console serves and how: the store, who may enter, which names it answers to."""

    where: str
    store: Any
    gate: Gate
    allow_remote: bool
    port: int
    templates: Environment

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """Template `name` rendered (every value autoescaped) as an HTML response."""
        return HTMLResponse(self.templates.get_template(name).render(**context), status_code=status)

    def host_ok(self, host: str) -> bool:
        """Whether `host` (the `Host` header) names this console."""
        if self.allow_remote:
            return True
        name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
        return name in LOOPBACK and port == str(self.port)


def templates() -> Environment:
    """Jinja2 over the package's templates, autoescaping everything (never a string as a template)."""
    env = Environment(loader=PackageLoader("polyloop._serve", "templates"), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    return env


