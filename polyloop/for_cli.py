"""What the command line uses beyond the public API: an internal face, not public API.

`cli/` is an honest client of the library and imports no private module;
what it needs that a Python user does not (the commands to paste, where a
store spec is as a command names it, a settlement with inspect's report
from one read of the log, the one refusal of a FIFO or device
for a file a person names) it takes from here. Names here may change in
any release.
"""

from __future__ import annotations

from collections.abc import Callable

from ._files import read_regular
from ._fleet.health import keep_file, serve_port, write_state
from ._log import commands
from ._log.commands import Place
from ._log.names import execution_name
from ._operate.decide import decide
from ._operate.resolve import Settled, resolve
from ._operate.shapes import JSON_SCHEMA
from ._operate.trace import otlp_traces_url, trace_json, trace_run
from ._operate.transfer import MovedRun, TransferReport, export_runs, import_runs
from ._trace.content import capture_from_env, check_exporters, telemetry_by_env
from ._run.target import canonical_target
from ._serve.access import ROLES, UsersFileError, add_user
from ._serve.setup import Options as ServeOptions
from ._serve.setup import is_loopback
from .stores._place import place_of

__all__ = [
    "JSON_SCHEMA", "MovedRun", "Place", "ROLES", "ServeOptions", "Settled", "TransferReport", "UsersFileError",
    "add_user", "canonical_target", "capture_from_env", "check_exporters", "commands", "decide", "execution_name",
    "export_runs", "import_runs", "is_loopback", "keep_file", "otlp_traces_url", "place_of", "read_regular", "resolve",
    "serve_console", "serve_port", "telemetry_by_env", "trace_json", "trace_run", "write_state",
]


def serve_console(options: ServeOptions, say: Callable[[str], None]) -> None:
    """`polyloop serve`: the browser console until interrupted (ImportError without the `serve` extra)."""
    from ._serve.server import serve

    serve(options, say)
