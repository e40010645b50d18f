"""A child process for the approval crash tests: runs or decides on a JSONL store that kills itself on cue.

    python approval_child.py run DIR RUN_ID          (start the run, or resume it)
    python approval_child.py approve DIR RUN_ID ID [ARGS_JSON]
    python approval_child.py deny DIR RUN_ID ID
    python approval_child.py answer DIR RUN_ID ID TEXT

`POLYLOOP_KILL_AT=before|after:KIND:N` SIGKILLs this real process just before
or just after the N-th write of KIND by it; KIND is `approval_request`,
`decision`, `intent:model_call`, `intent:action`, `intents` (a step's several
intents written together), `action_result`, `step_completed`,
`model_call_result`, `resolution` or `run_finished`; or just before or after
the N-th side effect of `pay` in this process (KIND `effect`). The tool `pay`
appends one line per execution to `$EFFECTS` and fsyncs it before it returns,
so the world's ground truth survives the kill. `APPROVAL_SCRIPT=step` runs
`STEP_SCRIPT` (steps of several tool calls) instead of `SCRIPT`. Exit codes
follow the CLI: 0 finished or recorded, 1 failure, 2 refused, 3 waits for a
person or operator.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

from polyloop import (
    Agent,
    DecisionError,
    NeedsOperatorError,
    PolyLoopError,
    RunActiveError,
    ScriptedModel,
    ToolContext,
    answer,
    approve,
    ask_human,
    deny,
    tool,
)
from support.cue import KillCueStore

KILL_AT = os.environ.get("POLYLOOP_KILL_AT", "")
_effects = Counter[str]()
_effects_lock = threading.Lock()  # the calls of a step of several pay in threads at once


def _effect_cue(when: str) -> None:
    with _effects_lock:
        _effects[when] += 1
        n = _effects[when]
    if KILL_AT == f"{when}:effect:{n}":
        os.kill(os.getpid(), signal.SIGKILL)


@tool(approval=lambda args: args["amount"] > 100)
def pay(amount: int, to: str, ctx: ToolContext) -> str:
    """Pay someone (an effect in the world: one fsync'd line per execution)."""
    _effect_cue("before")
    fd = os.open(os.environ["EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        line = {"amount": amount, "to": to, "key": ctx.idempotency_key, "result_id": ctx.result_id}
        os.write(fd, (json.dumps(line) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    _effect_cue("after")
    return f"paid {amount} to {to}"


SCRIPT = [
    {"tool": "pay", "args": {"amount": 500, "to": "bob"}},
    {"tool": "ask_human", "args": {"question": "which colour?"}},
    {"tool": "pay", "args": {"amount": 5, "to": "al"}},
    {"final": "done"},
]


# Two steps of several calls: two payments that wait for approval around one
# that waits for nobody; then a question beside a payment that waits for nobody.
STEP_SCRIPT = [
    {"calls": [{"tool": "pay", "args": {"amount": 500, "to": "bob"}},
               {"tool": "pay", "args": {"amount": 5, "to": "al"}},
               {"tool": "pay", "args": {"amount": 600, "to": "cy"}}]},
    {"calls": [{"tool": "ask_human", "args": {"question": "which colour?"}},
               {"tool": "pay", "args": {"amount": 7, "to": "dee"}}]},
    {"final": "done"},
]


def agent() -> Agent:
    script = STEP_SCRIPT if os.environ.get("APPROVAL_SCRIPT") == "step" else SCRIPT
    return Agent(model=ScriptedModel(script), tools=[pay, ask_human])


async def main(argv: list[str]) -> int:
    command, directory, run_id = argv[0], argv[1], argv[2]
    store = KillCueStore(directory, KILL_AT)
    try:
        if command == "run":
            exists = os.path.exists(os.path.join(directory, f"{run_id}.jsonl"))
            await agent().run(None if exists else "pay and ask", run_id=run_id, store=store)
        elif command == "approve":
            edited = json.loads(argv[4]) if len(argv) > 4 else None
            await approve(store, run_id, argv[3], reason="checked", by="tester", args=edited)
        elif command == "deny":
            await deny(store, run_id, argv[3], reason="too much", by="tester")
        elif command == "answer":
            await answer(store, run_id, argv[3], argv[4], by="tester")
        else:
            raise SystemExit(f"unknown command {command}")
    except NeedsOperatorError as exc:
        print(exc, file=sys.stderr)
        return 3
    except (DecisionError, RunActiveError) as exc:
        print(exc, file=sys.stderr)
        return 2
    except PolyLoopError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
