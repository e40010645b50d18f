"""What `ls` and `verify` print about the many logs of a store, and their progress bars."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone

from rich.text import Text

from polyloop import RunSummary, VerifyReport

from .inspect_view import STATUS_STYLE
from .terminal import SHOWN_PROBLEMS, clip, more_problems, out, say, worker_bar


def verify_report(report: VerifyReport, *, strict: bool) -> None:
    console = out()
    for f in report.files:
        if f.status == "ok":
            continue
        style = "bold red" if f.status in ("corrupt", "bad_product") or strict else "yellow"
        for i, (line, message) in enumerate((f.problems or ((None, ""),))[:SHOWN_PROBLEMS]):
            where = f"line {line}: " if line is not None else ""
            rule = f" (rule {f.rule(i)})" if f.rule(i) is not None else ""
            say(console, (f"{f.status:<9}", style), " ", clip(f.path, 400), "  ",
                  clip(f"{where}{message}{rule}", 400))
        more_problems(console, len(f.problems))
    s = report.summary
    total = len(report.files)
    verdict = ("FAIL", "bold red") if report.failed(strict=strict) else ("OK", "bold green")
    say(
        console,
        verdict,
        f"  {total} log{'' if total == 1 else 's'} checked: {s['ok']} ok, "
        f"{s['torn_tail']} torn tail{'' if s['torn_tail'] == 1 else 's'}, {s['corrupt']} corrupt",
        f", {s['bad_product']} with a missing or altered product" if s["bad_product"] else "",
        " (torn tails fail with --strict)" if strict and s["torn_tail"] else "",
    )


@contextmanager
def verify_progress(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr (only when `enabled`), as a `verify_logs` callback."""
    if not enabled:
        yield None
        return
    progress = worker_bar("verifying")
    task = progress.add_task("verify", total=None)

    def advance(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)
        progress.refresh()

    with progress:
        yield advance


LS_REASON = 100  # characters of a reason in a line of `ls`; --json has the whole


_LS_HEADER = ("RUN", "STATUS", "WAITS FOR", "STEPS", "UPDATED", "REASON")


def _waits(kinds: Sequence[str]) -> str:
    counts = {k: kinds.count(k) for k in kinds}
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in counts.items()) or "-"


def _when(updated: str | None) -> str:
    """A record's ISO time as `2026-12-01T08:36:03Z` (to the second, UTC)."""
    if updated is None:
        return "-"
    moment = datetime.fromisoformat(updated)
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def ls_report(runs: Sequence[RunSummary], directory: str, statuses: Sequence[str]) -> None:
    """`polyloop ls`: one aligned line per run, then how many of each status."""
    console = out()
    if not runs:
        which = f" with status {' or '.join(statuses)}" if statuses else ""
        say(console, f"no runs{which} in {directory}")
        return
    rows = [
        (clip(s.run_id, 60), s.status, clip(_waits(s.waiting), 40), str(s.steps), _when(s.updated), clip(_cause(s), LS_REASON))
        for s in runs
    ]
    widths = [max(len(r[i]) for r in [_LS_HEADER, *rows]) for i in range(5)]
    table = Text()
    cells = [h.rjust(w) if h == "STEPS" else h.ljust(w) for h, w in zip(_LS_HEADER, widths)]
    table.append("  ".join([*cells, _LS_HEADER[-1]]) + "\n", style="bold")
    for run, status, waits, steps, when, reason in rows:
        table.append(run.ljust(widths[0]) + "  ")
        table.append(status.ljust(widths[1]), style=STATUS_STYLE.get(status, ""))
        table.append(f"  {waits.ljust(widths[2])}  {steps.rjust(widths[3])}  {when.ljust(widths[4])}  {reason}\n")
    counts = {status: 0 for status in STATUS_STYLE}  # in the order of the statuses
    for s in runs:
        counts[s.status] += 1
    tally = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    table.append(f"{len(runs)} run{'' if len(runs) == 1 else 's'}: {tally}", style="dim")
    console.print(table, soft_wrap=True)
    console.file.flush()


def _cause(s: RunSummary) -> str:
    """The REASON cell: a finished run's word, and what ended it when there is more to say."""
    if s.status == "finished" and s.cause:
        return f"{s.reason}: {s.cause}" if not s.cause.startswith(s.reason) else s.cause
    return s.reason


@contextmanager
def ls_progress(enabled: bool, *, after: float = 0.3) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr for `list_runs`, shown only once it has taken `after` seconds."""
    if not enabled:
        yield None
        return
    progress = worker_bar("reading runs")
    task = progress.add_task("ls", total=None)
    start = time.monotonic()
    shown = False

    def advance(done: int, total: int) -> None:
        nonlocal shown
        if not shown:
            if done >= total or time.monotonic() - start < after:
                return
            progress.start()
            shown = True
        progress.update(task, completed=done, total=total)
        progress.refresh()

    try:
        yield advance
    finally:
        if shown:
            progress.stop()
