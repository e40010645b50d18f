"""The `polyloop` command line: the typer app and `main()`.

Each command lives in its own module (parse, one library call, render);
the `*_view` modules say what each prints, `terminal` is the one gate of
untrusted text, `paste` builds every command a person is told to run, and
`errors` holds all exit codes.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 vendors click; older typers use click itself
    from typer._click.core import Command
    from typer._click.shell_completion import CompletionItem
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.core import Command
    from click.shell_completion import CompletionItem

from . import errors

HELP = """Resumable LLM agent runs on a durable, append-only intent log.

Before every model call and every tool action, PolyLoop makes an intent
durable in the run's JSONL log. After a crash it knows, for each execution,
whether it is done, not started or unknown - and it never silently repeats
an unknown side effect: `safe` tools are replayed, `never` tools (the
default) stop for an operator. It promises detection, not atomicity.

\b
The workflow, with the demo agent that ships with PolyLoop:
  POLYLOOP_DEMO_CRASH=1 polyloop demo --run-id demo
  # the process dies right after a side effect (as with kill -9, OOM, a reboot)
  polyloop inspect demo              # what happened; what resume would do next
  polyloop mark-resolved demo s2-a1 --executed --reason "notes.txt is there"   # settle an unknown action
  polyloop resume demo               # continue where it stopped
  polyloop verify runs/              # in CI: is any log corrupt?

\b
Runs live in --dir DIR, or with --store URL in a PostgreSQL database
(postgresql://...); the default is $POLYLOOP_STORE, else $POLYLOOP_DIR,
else ./runs.
Exit codes: 0 success, 1 failure (run error, corrupt log), 2 bad usage or
bad input, 3 needs an operator (or a crash loop), 4 the checkpoint is no
longer valid (an input, the logic version or the agent changed), 130
interrupted (the run stays resumable).

\b
Example:
  polyloop demo                      # the demo agent, start to finish
  polyloop run polyloop.examples.demo:agent --run-id notes-1 --goal "write up the notes"
"""


# In the order of the workflow: run, (crash), inspect, mark-resolved, resume; verify for CI.
# Each command's module is imported only when that command runs (or shows its help).
COMMANDS: dict[str, tuple[str, str, str]] = {  # name: (module, function, the one line `--help` lists)
    "run": ("run", "command", "Start a new run of an agent; prints its run id."),
    "demo": ("demo", "command", "Run the demo agent that ships with PolyLoop (no network, no API key)."),
    "inspect": ("inspect_cmd", "command", "Show a run's steps, states, and what resume would do."),
    "ls": ("ls", "command", "List the runs of a directory: status, what waits, last activity."),
    "mark-resolved": ("mark_resolved", "command", "Settle an unknown `never` action as executed or not."),
    "approve": ("decide", "approve_command", "Approve a tool call that waits for a person; resume runs it."),
    "deny": ("decide", "deny_command", "Deny a tool call that waits for a person; the model reads why."),
    "answer": ("decide", "answer_command", "Answer a question the model asked a person (ask_human)."),
    "resume": ("resume", "command", "Continue a run after a crash."),
    "watch": ("watch", "command", "Follow a run live until it finishes or stops."),
    "serve": ("serve", "command", "Serve a web console to see runs and decide what waits (the serve extra)."),
    "trace": ("trace_cmd", "command", "Rebuild a run's trace from its log alone; print it or send it over OTLP."),
    "cancel": ("cancel", "command", "End a run for good, on the record (who, why); a live one at a safe point."),
    "verify": ("verify", "command", "Check every log in a directory for corruption (CI)."),
    "doctor": ("doctor", "command", "Check the store can keep runs (and an agent imports)."),
    "archive": ("archive", "command", "Move runs (finished, or named) out of the way, whole, to another directory."),
    "export": ("transfer", "export_command", "Write runs of a store as JSONL logs with their products, to a directory."),
    "import": ("transfer", "import_command", "Load verified JSONL logs (and products) into a PostgreSQL store."),
    "batch": ("batch", "command", "Run an agent once per line of a goals file; re-run to resume."),
    "submit": ("submit", "command", "Queue a run on a PostgreSQL store for the workers."),
    "worker": ("worker", "command", "Claim queued runs from a PostgreSQL store and run them."),
}


def create_command(name: str) -> Any:
    """The command `name`, its module imported now (pip's `create_command` is the model)."""
    module, function, short_help = COMMANDS[name]
    callback = getattr(importlib.import_module(f".{module}", __package__), function)
    one = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                      pretty_exceptions_show_locals=False)
    one.command(name, short_help=short_help)(callback)
    return typer.main.get_command(one)


class _Commands(Mapping[str, Any]):
    """The commands by name, each made on first lookup: listing them imports nothing."""

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in COMMANDS:
            raise KeyError(name)
        if name not in self._made:
            self._made[name] = create_command(name)
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class _Group(TyperGroup):
    """Every outcome, usage errors included, ends as one exit code and clean output.

    Its commands are `COMMANDS`, made when first looked up.
    """

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands()  # type: ignore[assignment]

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        # Command names and their one-line helps come from the table, so completing
        # `polyloop w<TAB>` imports no command; the group's own options follow.
        found = [CompletionItem(name, help=short_help) for name, (_, _, short_help) in COMMANDS.items()
                 if name.startswith(incomplete)]
        return found + Command.shell_complete(self, ctx, incomplete)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # The one-line helps come from the table: `polyloop --help` imports no command.
        with formatter.section("Commands"):
            formatter.write_dl([(name, short_help) for name, (_, _, short_help) in COMMANDS.items()])

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            rv = super().main(
                args=argv,
                prog_name="polyloop",
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = rv if isinstance(rv, int) else 0
            if code == errors.INTERRUPTED and not errors.interruption_reported:
                # Ctrl-C outside a command's body (while parsing, or importing
                # what a command needs): typer turns it into a bare 130.
                sys.stderr.write("polyloop: interrupted\n")
        except errors.ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":
                sys.stdout.write(exc.format_message() + "\n")
                code = errors.OK
            else:
                code = errors.usage_failure(exc, json="--json" in argv)
        except (typer.Abort, KeyboardInterrupt):
            sys.stderr.write("polyloop: interrupted\n")
            code = errors.INTERRUPTED
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=_Group,
    help=HELP,
    name="polyloop",
    no_args_is_help=True,
    # `--install-completion` / `--show-completion` (bash, zsh, fish): typer's own mechanism.
    add_completion=True,
    rich_markup_mode=None,  # help text is shown as written: no markup to inject or mangle
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,  # locals hold prompts and keys
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from polyloop import __version__

        sys.stdout.write(f"polyloop {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[
        bool,
        typer.Option("--debug", help="On failure, show the traceback too (or set POLYLOOP_DEBUG=1)."),
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", is_eager=True, callback=_version),
    ] = False,
) -> None:
    errors.set_debug(debug)


def main() -> None:
    """The `polyloop` console script (and `python -m polyloop`)."""
    errors.stream_safe()
    app()
