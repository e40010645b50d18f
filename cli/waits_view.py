"""What waits for a person: a run stopped at an unknown action, an alert or a request,
the exact commands that settle or decide each, and what a settlement leaves next."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console

from polyloop import Execution, Recovery, RunReport
from polyloop.for_cli import execution_name

from .paste import decide_commands, resume_command, settle_commands
from .terminal import clip, compact, err, out, say


def settle_block(console: Console, run_id: str, blocking: Sequence[Execution], directory: str | None) -> None:
    for e in blocking:
        if e.kind == "rollback":  # shown as the rollback it is, not as the call it rolls back
            say(console, "  ", (f"{clip(execution_name(e), 200)} is in doubt", "bold"))
        say(
            console,
            "  ",
            (clip(e.tool, 60), "bold"),
            f"({clip(compact(e.args), 60)})  step {e.step}, result id {e.result_id}, "
            f"idempotency key {e.idempotency_key}",
        )
        executed, not_executed = settle_commands(run_id, e.result_id, directory)
        width = len(not_executed)
        if e.state == "alert":
            said = ("  # the effect stands (add --observation TEXT)", "  # it has no effect: the model is told so")
        elif e.kind == "rollback":
            said = ("  # it undid the action", "  # it did not: resume runs the rollback again")
        else:
            said = ("  # it happened (add --observation TEXT: what it returned)",
                    "  # it did not happen: resume runs it again")
        say(console, "    ", (executed.ljust(width), "cyan"), (said[0], "dim"))
        say(console, "    ", (not_executed, "cyan"), (said[1], "dim"))
    say(console, "  then: ", (resume_command(run_id, directory), "cyan"))


def decide_block(console: Console, run_id: str, requests: Sequence[Any], directory: str | None) -> None:
    for r in requests:
        if r.kind == "answer":
            what = f"asks: {clip(r.args.get('question', ''), 300)}"
        else:
            why = f" ({clip(r.request.reason, 120)})" if r.request.reason else ""
            what = f"({clip(compact(r.args), 200)}) waits for approval{why}"
        say(console, "  ", (clip(r.tool, 60), "bold"), f" {what}")
        say(console, "    ", (f"step {r.step}, id {clip(r.result_id, 40)}, args sha256 {r.request.args_sha256}", "dim"))
        commands = decide_commands(run_id, r.kind, r.result_id, directory)
        width = max(len(c) for c, _ in commands)
        for command, meaning in commands:
            say(console, "    ", (command.ljust(width), "cyan"), (f"  # {meaning}", "dim"))
    say(console, "  then: ", (resume_command(run_id, directory), "cyan"))


def waits_stop(run_id: str, requests: Sequence[Any], directory: str | None) -> None:
    """The run stopped because tool calls wait for a person: say so, and how to decide each."""
    console = err()
    say(
        console,
        ("polyloop: stopped: ", "bold yellow"),
        f"run {run_id} waits for a person. Nothing of the call below has run; it is recorded, "
        "and resume goes on once it is decided:",
    )
    decide_block(console, run_id, requests, directory)


def needs_operator(run_id: str, blocking: Sequence[Execution], directory: str | None) -> None:
    """The run stopped at unknown `never` actions: say so, and how to settle each."""
    console = err()
    say(
        console,
        ("polyloop: stopped: ", "bold yellow"),
        f"run {run_id} needs an operator. " + (
            "The rollback below is in doubt (the process stopped after its intent and before its "
            "result), and a rollback is never repeated silently. Check whether it undid the action, then:"
            if blocking and blocking[0].kind == "rollback" else
            "The outcome of the action below is unknown "
            "(the process stopped after its intent and before its result), and its tool "
            "is `never` replay, so resume will not guess. Check whether it happened, then:"),
    )
    settle_block(console, run_id, blocking, directory)


def alert_stop(run_id: str, blocking: Sequence[Execution], directory: str | None) -> None:
    """The run stopped at a failed verification nothing undid: say so, and how to settle it."""
    console = err()
    e = blocking[0]
    ver = e.verification
    why = ver.reason if ver is not None and ver.reason else "it returned False"
    say(
        console,
        ("polyloop: stopped: ", "bold yellow"),
        f"run {run_id} needs an operator. The verification of the action below failed "
        f"({clip(why, 400)}) and no rollback undid it; the state is left for investigation. "
        "Check the world, then:",
    )
    executed, not_executed = settle_commands(run_id, e.result_id, directory)
    say(console, "  ", (clip(e.tool, 60), "bold"), f"({clip(compact(e.args), 60)})  step {e.step}, "
        f"result id {e.result_id}, idempotency key {e.idempotency_key}")
    say(console, "    ", (executed, "cyan"), ("  # the effect stands (add --observation TEXT)", "dim"))
    say(console, "    ", (not_executed, "cyan"), ("  # it has no effect: the model is told so", "dim"))
    say(console, "  then: ", (resume_command(run_id, directory), "cyan"))


def alerts(found: Sequence[tuple[str, str, str]]) -> None:
    """One warning line on stderr per alert a command's run raised: (result id, tool, why)."""
    console = err()
    for rid, tool, why in found:
        say(console, ("polyloop: ALERT: ", "bold red"),
              f"{clip(tool, 60)} ({clip(rid, 40)}): {clip(why, 400)}")


def decided(run_id: str, request_id: str, recovery: Recovery, report: RunReport, directory: str | None) -> None:
    """approve, deny or answer recorded a decision: say which, and (as inspect says it) what comes next."""
    console = out()
    r = recovery.request_of(request_id)
    d = r.decision if r is not None else None
    assert d is not None
    edited = " with edited arguments" if d.args is not None else ""
    say(console, (f"{d.decision} ", "bold green"), f"{request_id} of run {run_id}{edited} (by {clip(d.by, 60)})")
    say(console, ("next     ", "bold"), clip(report.next, 10_000))
    waiting = recovery.waiting_requests()
    if waiting:
        decide_block(console, run_id, waiting, directory)
        return
    resume_line(console, run_id, report, directory)


def resolved(
    run_id: str, result_id: str, executed: bool, recovery: Recovery, report: RunReport, directory: str | None
) -> None:
    """mark-resolved recorded a resolution: say which, and (as inspect says it) what comes next."""
    console = out()
    outcome = "executed" if executed else "not executed"
    by = recovery.resolutions[-1].by if recovery.resolutions else ""
    say(console, ("resolved ", "bold green"), f"{result_id} of run {run_id} as {outcome} (by {clip(by, 60)})")
    say(console, ("next     ", "bold"), clip(report.next, 10_000))
    if recovery.blocking:
        settle_block(console, run_id, recovery.blocking, directory)
        return
    resume_line(console, run_id, report, directory)


def resume_line(console: Console, run_id: str, report: RunReport, directory: str | None) -> None:
    """After a settlement: the resume to run, unless resume would refuse (the next line says how to accept)."""
    if report.refusal is None:
        say(console, ("run      ", "bold"), (resume_command(run_id, directory), "cyan"))
