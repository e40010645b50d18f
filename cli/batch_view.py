"""What `polyloop batch` prints: its progress while it runs, and the summary after."""

from __future__ import annotations

import sys
import time
from typing import Any
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from polyloop import BatchProgress, BatchReport, BatchRun

from .paste import inspect_command, waiting_commands
from .terminal import clip, console as make_console, err, out, say

SHOWN = 20  # runs listed per kind in the human summary; --json lists every one
PLAIN_EVERY = 2.0  # seconds between progress lines when stderr is not a terminal


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
    if p.outage:  # the runs wait together on a model endpoint that is down: say so first
        full = f"{p.outage}; {full}"
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
def progress(*, live: bool, plain: bool) -> Iterator[Callable[[BatchProgress], None] | None]:
    """A live display on a terminal, plain lines on stderr otherwise (none for --json to a pipe)."""
    if live:
        progress = Progress(
            TextColumn(_LABEL),
            BarColumn(bar_width=_BAR),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            console=make_console(sys.stderr),
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
    notice = _stopping_notice(err())
    if not plain:
        yield notice
        return
    last: list[Any] = [time.monotonic(), -1, None]  # the first line after PLAIN_EVERY: a short batch prints one

    def line(p: BatchProgress) -> None:
        notice(p)
        now = time.monotonic()
        if p.outage != last[2]:  # the runs began (or stopped) waiting on their model: say so now
            last[2] = p.outage
        elif p.done == last[1] or (now - last[0] < PLAIN_EVERY and p.done < p.total):
            return
        last[0], last[1] = now, p.done
        err().print(Text(f"batch: {p.done}/{p.total} settled; {_counts_text(p)}"), soft_wrap=True)

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
    ("unavailable", "model unavailable", "yellow"),
)
_ALWAYS = {"finished", "needs_operator", "failed", "corrupt"}


def summary(report: BatchReport, again: str) -> None:
    console = out()
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("status")
    table.add_column("runs", justify="right")
    for status, label, style in _ROWS:
        n = report.counts[status]
        if n or status in _ALWAYS:
            table.add_row(Text(label, style=style if n else ""), str(n))
    rate = f" ({report.steps / report.seconds:.0f} steps/s)" if report.seconds > 0 and report.steps else ""
    restarts = f"; {report.restarts} worker restart{'' if report.restarts == 1 else 's'}" if report.restarts else ""
    say(
        console, ("batch ", "bold"), (clip(report.name, 80), "bold cyan"),
        f": {_plural(len(report.runs), 'run')}; {_plural(report.steps, 'step')} in "
        f"{report.seconds:.1f}s{rate}{restarts}",
    )
    console.print(table)
    _next_steps(console, report, again)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _listed(console: Console, runs: list[BatchRun], title: str) -> list[BatchRun]:
    if runs:
        console.print()
        say(console, (title, "bold"))
    return runs[:SHOWN]


def _more(console: Console, runs: list[BatchRun]) -> None:
    if len(runs) > SHOWN:
        say(console, (f"  … and {len(runs) - SHOWN} more (--json lists them all)", "dim"))


def _who(run: BatchRun) -> str:
    rid = clip(run.run_id, 80) if run.run_id else "(no run id)"
    return f"  line {run.line}, {rid}: "


def _next_steps(console: Console, report: BatchReport, again: str) -> None:
    where = report.directory
    by = {s: [r for r in report.runs if r.status == s] for s, _, _ in _ROWS}
    parked = by["needs_operator"]
    heading = "needs an operator — settle what each waits for (did the action happen? approve it? answer it?):"
    for run in _listed(console, parked, heading):
        say(console, _who(run), clip(run.reason, 300))
        for command, meaning in waiting_commands(str(run.run_id), run.waiting, where):
            say(console, "    ", (command, "cyan"), (f"  # {meaning}", "dim"))
    _more(console, parked)
    stopped = by["unavailable"]
    for run in _listed(console, stopped, "stopped, resumable — the model was unavailable; run the batch again once it is back:"):
        say(console, _who(run), clip(run.reason, 300))
    _more(console, stopped)
    failed = sorted((r for s in ("failed", "active", "invalid", "changed") for r in by[s]), key=lambda r: r.line)
    for run in _listed(console, failed, "failed"):
        say(console, _who(run), (clip(run.reason, 400), "red"))
    _more(console, failed)
    corrupt = by["corrupt"]
    for run in _listed(console, corrupt, "corrupt — never resumed; keep the log for analysis:"):
        say(console, _who(run), (inspect_command(str(run.run_id), where), "cyan"))
    _more(console, corrupt)
    console.print()
    if report.outcome == "finished":
        say(console, ("done: ", "bold green"), "every run finished")
    elif report.outcome == "interrupted":
        if report.killed:
            say(console, ("interrupted: ", "bold yellow"),
                 "the workers were killed mid-call, so a run may need an operator; run the same command again to see:")
        else:
            say(console, ("interrupted: ", "bold yellow"), "every run stays resumable; run the same command again:")
        say(console, "  ", (again, "cyan"))
    else:
        waiting = {r.status for r in report.runs} - {"finished"}
        if waiting <= {"changed", "invalid"}:
            # Nothing a re-run does by itself: the goals file (or the target) must change first.
            what = "do what each line above says (to the goals file, the target or --name), then run the batch again:"
        else:
            what = "run the same command again (it skips what finished):"
        say(console, ("then: ", "bold"), what)
        say(console, "  ", (again, "cyan"))
