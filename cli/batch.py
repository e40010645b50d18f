"""`polyloop batch`: one run per line of a goals file; running it again is the resume."""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from polyloop import BatchInterrupted, BatchProgress, BatchReport, BatchRun, run_batch

from . import options, render
from .errors import FAILURE, INTERRUPTED, NEEDS_OPERATOR, OK, BadInput, Scope, failures

SHOWN = 20  # runs listed per kind in the human summary; --json lists every one
PLAIN_EVERY = 2.0  # seconds between progress lines when stderr is not a terminal

_CODES = {"finished": OK, "needs_operator": NEEDS_OPERATOR, "failed": FAILURE, "interrupted": INTERRUPTED}


def command(
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET",
            help="The agent: `path/to/file.py:name` or `module.path:name`.",
            show_default=False,
        ),
    ],
    goals_file: Annotated[
        str,
        typer.Argument(
            metavar="GOALS_FILE",
            help="JSONL of {\"goal\": ..., \"run_id\": ...} objects, or one goal per line.",
            show_default=False,
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            metavar="NAME",
            help="The batch name: run ids are NAME-00001, NAME-00002, ... (line numbers). "
            "Default: the goals file's name without its extension.",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option("--concurrency", metavar="N", min=1, help="Runs at a time in each worker process."),
    ] = 16,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes", metavar="P", min=1, help="Worker processes (default: one per core).", show_default=False
        ),
    ] = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    lease: Annotated[
        float | None,
        typer.Option(
            "--lease", metavar="SECONDS", min=0.5,
            help="With --store postgresql://...: how long a run's lease lasts unrenewed (default 15); "
            "a re-run after a kill waits about this long for the killed batch's runs.",
            show_default=False,
        ),
    ] = None,
    json: options.Json = False,
) -> None:
    """Run the agent at TARGET once per line of GOALS_FILE; run it again to resume.

    A file whose first non-blank line starts with `{` is JSONL: each line an
    object with a "goal" and, optionally, a "run_id" and "inputs" (names to
    file or directory paths, as `run --input`; other keys are ignored). Otherwise each non-blank line is one goal. A line without a
    run id runs as NAME-LLLLL (its line number), so the same command again
    is the resume: finished runs are skipped, interrupted ones resumed, runs
    that need an operator stay parked (the settle commands are printed), and
    the rest start. A line that changed since the batch first ran is
    reported, never run against the old run's log; a line that moved
    (deleted, inserted or reordered lines) is not started again under a new
    run id, no new line starts while a recorded line differs, and nothing
    starts with another TARGET than the batch first ran. A bad line is
    reported and the other lines still run. Runs are spread over worker processes; a
    worker that dies is replaced and its runs resumed.

    With --store postgresql://... the runs live in the database: each worker
    process opens its own connections, every run is held through a lease,
    and the batch's manifest is a row of the table polyloop_batches (on a
    directory it is DIR/.batch-NAME.json).

    Exit: 0 every run finished, 1 some run failed (an error, a bad or
    changed line, a corrupt log, a run held elsewhere) or the database
    cannot be reached, 2 bad usage or bad input (goals file, target, flags;
    nothing ran), 3 no failure, but some run needs an operator, 130
    interrupted: the runs under way end the model call or action they are
    in and stop before the next, so every run stays resumable (a second
    Ctrl-C kills them mid-call instead).

    \b
    Example:
      polyloop batch examples/demo.py:agent goals.txt --concurrency 8
      polyloop batch examples/demo.py:agent goals.txt --store postgresql://postgres@127.0.0.1/test
    """
    with failures(Scope(json=json)) as scope:
        scope.directory = where = options.where(directory, store_url)
        if lease is not None and not options.is_url(where):
            raise BadInput("--lease applies to a PostgreSQL store (--store postgresql://...)")
        options.utf8(target, "TARGET")
        options.utf8(goals_file, "GOALS_FILE")
        # With --json, stdout is the one document: whatever the agent's module
        # prints as the batch loads it goes to stderr, as the workers' output does.
        quiet = contextlib.redirect_stdout(sys.stderr) if json else contextlib.nullcontext()
        try:
            with quiet, _progress(live=sys.stderr.isatty(), plain=not json) as show:
                report = run_batch(
                    target, goals_file, name=name, directory=where,
                    concurrency=concurrency, processes=processes, progress=show,
                    **({"lease": lease} if lease is not None else {}),
                )
        except BatchInterrupted as exc:
            report = exc.report
        # Made only when printed: a command that names the store is what store_note's note is about.
        again = "" if report.outcome == "finished" else _again_command(
            target, goals_file, name, where if (directory or store_url) else None, lease
        )
        if json:
            render.print_json(_json_doc(report, again))
        else:
            _summary(report, again)
    raise typer.Exit(_CODES[report.outcome])


def _settle(run: BatchRun, directory: str) -> list[tuple[str, str]]:
    """The commands that settle what a parked run waits for, each with what it means."""
    if not run.waiting:
        return []
    flag = render.dir_flag(directory)
    rid = shlex.quote(str(run.run_id))
    out = []
    for w in run.waiting:
        tool = render.clip(w.get("tool"), 60)
        kind = w.get("kind", "unknown")
        if kind == "crash_loop":
            out.append((f"polyloop resume {rid} --accept-crash-loop --reason TEXT{flag}",
                        "resume it once more, on the record"))
            continue
        if kind in ("approval", "answer"):
            out.extend(render.decide_commands(str(run.run_id), kind, str(w["id"]), directory))
            continue
        if kind not in ("unknown", "alert"):
            # A kind of waiting this version does not know: inspect names its commands.
            out.append((f"polyloop inspect {rid}{flag}", f"{kind}: inspect says how to settle it"))
            continue
        base = f"polyloop mark-resolved {rid} {shlex.quote(str(w['id']))}"
        out.append((f"{base} --executed{flag}", f"{tool} happened"))
        out.append((f"{base} --not-executed{flag}", f"{tool} did not happen"))
    return out


def _json_doc(report: BatchReport, again: str) -> dict:
    """The report's document, plus the commands a script can run next (the same as printed)."""
    doc = report.to_json()
    for entry, run in zip(doc["runs"], report.runs, strict=True):
        entry["next"] = [command for command, _ in _settle(run, report.directory)]
    doc["next"] = None if report.outcome == "finished" else again
    return doc


def _again_command(
    target: str, goals_file: str, name: str | None, directory: str | None, lease: float | None = None
) -> str:
    parts = ["polyloop", "batch", shlex.quote(target), shlex.quote(goals_file)]
    if name is not None:
        parts += ["--name", shlex.quote(name)]
    if lease is not None:
        parts += ["--lease", f"{lease:g}"]
    return " ".join(parts) + render.dir_flag(directory)


# -- progress ----------------------------------------------------------------------


def _counts_text(p: BatchProgress, *, width: int | None = None) -> str:
    """The counts by status, pace and ETA; within `width` columns when given (a live display)."""
    c = p.counts
    failed = sum(c[s] for s in ("failed", "corrupt", "invalid", "changed", "active"))
    eta = "?" if p.eta is None else _duration(p.eta)
    # The pace first: on a narrow terminal the end of the line is what gets cut.
    full = (
        f"{p.steps_per_second:.0f} steps/s, ETA {eta}; {c['finished']} finished, "
        f"{c['needs_operator']} need an operator, {failed} failed, {p.running} running, {p.queued} queued"
    )
    if width is None or len(full) <= width:
        return full
    short = (
        f"{p.steps_per_second:.0f} steps/s, ETA {eta}; {c['finished']} done, {c['needs_operator']} wait, "
        f"{failed} failed, {p.running} running"
    )
    return short if len(short) <= width else short[: max(width - 1, 0)] + "…"


def _stopping_notice(console: Console) -> Callable[[BatchProgress], None]:
    said = [False]

    def notice(p: BatchProgress) -> None:
        if p.stopping and not said[0]:
            said[0] = True
            console.print(
                Text(f"stopping: {p.running} runs are finishing what they started "
                     "(Ctrl-C again to kill them: an action in progress then stays unknown)"),
                soft_wrap=True,
            )

    return notice


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


_LABEL, _BAR = "batch", 16  # the live display's first two columns


@contextmanager
def _progress(*, live: bool, plain: bool) -> Iterator[Callable[[BatchProgress], None] | None]:
    """A live display on a terminal, plain lines on stderr otherwise (none for --json to a pipe)."""
    if live:
        progress = Progress(
            TextColumn(_LABEL),
            BarColumn(bar_width=_BAR),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            console=render.console(sys.stderr),
            transient=True,
            auto_refresh=False,
        )
        task = progress.add_task("", total=None)

        notice = _stopping_notice(progress.console)

        def update(p: BatchProgress) -> None:
            # What the bar and the count leave of the line (an 80-column terminal keeps both).
            room = progress.console.width - len(_LABEL) - _BAR - len(f"{p.total}/{p.total}") - 3  # 3 gaps
            progress.update(task, completed=p.done, total=p.total, description=_counts_text(p, width=room))
            progress.refresh()
            notice(p)

        with progress:
            yield update
        return
    notice = _stopping_notice(render.err())
    if not plain:
        yield notice
        return
    last = [time.monotonic(), -1]  # the first line after PLAIN_EVERY: a short batch prints one

    def line(p: BatchProgress) -> None:
        notice(p)
        now = time.monotonic()
        if p.done == last[1] or (now - last[0] < PLAIN_EVERY and p.done < p.total):
            return
        last[0], last[1] = now, p.done
        render.err().print(Text(f"batch: {p.done}/{p.total} settled; {_counts_text(p)}"), soft_wrap=True)

    yield line


# -- the summary ---------------------------------------------------------------------

_ROWS = (
    ("finished", "finished", "green"),
    ("needs_operator", "needs operator", "yellow"),
    ("failed", "failed", "red"),
    ("corrupt", "corrupt", "red"),
    ("invalid", "invalid line", "red"),
    ("changed", "changed line", "red"),
    ("active", "held elsewhere", "red"),
    ("interrupted", "interrupted", "yellow"),
)
_ALWAYS = {"finished", "needs_operator", "failed", "corrupt"}


def _summary(report: BatchReport, again: str) -> None:
    console = render.out()
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("status")
    table.add_column("runs", justify="right")
    for status, label, style in _ROWS:
        n = report.counts[status]
        if n or status in _ALWAYS:
            table.add_row(Text(label, style=style if n else ""), str(n))
    rate = f" ({report.steps / report.seconds:.0f} steps/s)" if report.seconds > 0 and report.steps else ""
    restarts = f"; {report.restarts} worker restart{'' if report.restarts == 1 else 's'}" if report.restarts else ""
    _say(
        console, ("batch ", "bold"), (render.clip(report.name, 80), "bold cyan"),
        f": {_plural(len(report.runs), 'run')}; {_plural(report.steps, 'step')} in "
        f"{report.seconds:.1f}s{rate}{restarts}",
    )
    console.print(table)
    _next_steps(console, report, again)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _say(console: Console, *parts: str | tuple[str, str]) -> None:
    text = Text()
    for part in parts:
        if isinstance(part, tuple):
            text.append(render.safe_text(part[0]), style=part[1])
        else:
            text.append(render.safe_text(part))
    console.print(text, soft_wrap=True)


def _listed(console: Console, runs: list[BatchRun], title: str) -> list[BatchRun]:
    if runs:
        console.print()
        _say(console, (title, "bold"))
    return runs[:SHOWN]


def _more(console: Console, runs: list[BatchRun]) -> None:
    if len(runs) > SHOWN:
        _say(console, (f"  … and {len(runs) - SHOWN} more (--json lists them all)", "dim"))


def _who(run: BatchRun) -> str:
    rid = render.clip(run.run_id, 80) if run.run_id else "(no run id)"
    return f"  line {run.line}, {rid}: "


def _next_steps(console: Console, report: BatchReport, again: str) -> None:
    where = report.directory
    by = {s: [r for r in report.runs if r.status == s] for s, _, _ in _ROWS}
    parked = by["needs_operator"]
    heading = "needs an operator — settle what each waits for (did the action happen? approve it? answer it?):"
    for run in _listed(console, parked, heading):
        _say(console, _who(run), render.clip(run.reason, 300))
        for command, meaning in _settle(run, where):
            _say(console, "    ", (command, "cyan"), (f"  # {meaning}", "dim"))
    _more(console, parked)
    failed = sorted((r for s in ("failed", "active", "invalid", "changed") for r in by[s]), key=lambda r: r.line)
    for run in _listed(console, failed, "failed"):
        _say(console, _who(run), (render.clip(run.reason, 400), "red"))
    _more(console, failed)
    corrupt = by["corrupt"]
    for run in _listed(console, corrupt, "corrupt — never resumed; keep the log for analysis:"):
        command = f"polyloop inspect {shlex.quote(str(run.run_id))}{render.dir_flag(where)}"
        _say(console, _who(run), (command, "cyan"))
    _more(console, corrupt)
    console.print()
    if report.outcome == "finished":
        _say(console, ("done: ", "bold green"), "every run finished")
    elif report.outcome == "interrupted":
        if report.killed:
            _say(console, ("interrupted: ", "bold yellow"),
                 "the workers were killed mid-call, so a run may need an operator; run the same command again to see:")
        else:
            _say(console, ("interrupted: ", "bold yellow"), "every run stays resumable; run the same command again:")
        _say(console, "  ", (again, "cyan"))
    else:
        waiting = {r.status for r in report.runs} - {"finished"}
        if waiting <= {"changed", "invalid"}:
            # Nothing a re-run does by itself: the goals file (or the target) must change first.
            what = "do what each line above says (to the goals file, the target or --name), then run the batch again:"
        else:
            what = "run the same command again (it skips what finished):"
        _say(console, ("then: ", "bold"), what)
        _say(console, "  ", (again, "cyan"))
