"""Guarded money transfers against a bank that lives outside the agent process.

The bank is a SQLite file (`$BANK_DB`, default `bank.sqlite`): every process
that opens it sees the same accounts, so a test (or you) can change the world
while the agent's run is down. The `transfer` tool is a `never` tool with all
four guards (docs/how-to/guard-a-side-effect.md):

* precondition: the source account still holds the amount (no overdraft),
  checked after the intent is durable and again on every resume;
* verify: the transfer is read back by its idempotency key and must have
  credited the whole amount;
* rollback (compensate): a refund, itself keyed (the rollback's own
  idempotency key), so it is applied at most once by the bank;
* reconcile: after a crash that leaves the transfer unknown, the bank is
  asked whether a transfer with this idempotency key exists.

Fault switches (environment, read by the tool and its guards):
`TRANSFER_CRASH=POINT` kills the process with SIGKILL at POINT
(`before_precondition`, `after_transfer`, `in_verify`, `before_refund`,
`in_refund`, `in_reconcile`); `TRANSFER_SKIM=N` makes the bank credit N less
than asked (a bug the verification catches). The bank's `requests` table
logs every request that reached it, duplicates included.

Run the clean scenario::

    python examples/transfer.py
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

from polyloop import Agent, ScriptedModel, ToolContext, executed, not_executed, tool

GOAL = "pay bob 800 from alice"
SCRIPT = [
    {"tool": "transfer", "args": {"src": "alice", "dst": "bob", "amount": 800}},
    {"final": "done: see the transfer's observation"},
]


# -- the bank -------------------------------------------------------------------


def bank_path() -> str:
    return os.environ.get("BANK_DB", "bank.sqlite")


def connect() -> sqlite3.Connection:
    db = sqlite3.connect(bank_path(), timeout=10, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def open_bank(accounts: dict[str, int]) -> None:
    """Create the bank's tables and accounts (existing ones keep their balance)."""
    with closing(connect()) as db:
        db.execute("CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, balance INTEGER NOT NULL)")
        db.execute(
            "CREATE TABLE IF NOT EXISTS transfers (key TEXT PRIMARY KEY, src TEXT, dst TEXT,"
            " amount INTEGER, credited INTEGER)"
        )
        db.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, transfer TEXT)")
        # The bank's request log: every request that reached it, duplicates included.
        db.execute("CREATE TABLE IF NOT EXISTS requests (what TEXT, key TEXT, attempt INTEGER)")
        for name, balance in accounts.items():
            db.execute("INSERT OR IGNORE INTO accounts VALUES (?, ?)", (name, balance))


def balance(name: str) -> int:
    with closing(connect()) as db:
        row = db.execute("SELECT balance FROM accounts WHERE name = ?", (name,)).fetchone()
    return row[0] if row else 0


def find(key: str) -> tuple[str, str, int, int] | None:
    with closing(connect()) as db:
        return db.execute("SELECT src, dst, amount, credited FROM transfers WHERE key = ?", (key,)).fetchone()


def _crash_at(point: str) -> None:
    if os.environ.get("TRANSFER_CRASH") == point:
        os.kill(os.getpid(), signal.SIGKILL)


# -- the tool and its guards ------------------------------------------------------


@tool
def transfer(src: str, dst: str, amount: int, ctx: ToolContext) -> str:
    """Move `amount` from account `src` to account `dst`."""
    credited = amount - int(os.environ.get("TRANSFER_SKIM", "0"))
    db = connect()
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO requests VALUES ('transfer', ?, ?)", (ctx.idempotency_key, ctx.attempt))
        # The bank de-duplicates by the idempotency key: the same logical
        # transfer, sent twice, moves money once.
        if db.execute("SELECT 1 FROM transfers WHERE key = ?", (ctx.idempotency_key,)).fetchone() is None:
            db.execute("UPDATE accounts SET balance = balance - ? WHERE name = ?", (amount, src))
            db.execute("UPDATE accounts SET balance = balance + ? WHERE name = ?", (credited, dst))
            db.execute("INSERT INTO transfers VALUES (?, ?, ?, ?, ?)", (ctx.idempotency_key, src, dst, amount, credited))
        db.execute("COMMIT")
    finally:
        db.close()
    _crash_at("after_transfer")
    return f"moved {amount} from {src} to {dst}"


@transfer.precondition
def _enough_money(args: dict, ctx: ToolContext) -> bool | str:
    _crash_at("before_precondition")
    have = balance(args["src"])
    return have >= args["amount"] or f"{args['src']} holds {have}, less than {args['amount']}"


@transfer.verify
def _credited(args: dict, result: str, ctx: ToolContext) -> bool | str:
    _crash_at("in_verify")
    row = find(ctx.idempotency_key)
    if row is None:
        return "the bank has no transfer with this idempotency key"
    return row[3] == args["amount"] or f"{args['dst']} was credited {row[3]}, not {args['amount']}"


@transfer.rollback(kind="compensate")
def _refund(args: dict, result: str, ctx: ToolContext) -> str:
    transfer_key = ctx.idempotency_key.removesuffix("-rollback")
    _crash_at("before_refund")
    db = connect()
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO requests VALUES ('refund', ?, ?)", (ctx.idempotency_key, ctx.attempt))
        if db.execute("SELECT 1 FROM refunds WHERE key = ?", (ctx.idempotency_key,)).fetchone() is None:
            src, dst, amount, credited = db.execute(
                "SELECT src, dst, amount, credited FROM transfers WHERE key = ?", (transfer_key,)
            ).fetchone()
            db.execute("UPDATE accounts SET balance = balance + ? WHERE name = ?", (amount, src))
            db.execute("UPDATE accounts SET balance = balance - ? WHERE name = ?", (credited, dst))
            db.execute("INSERT INTO refunds VALUES (?, ?)", (ctx.idempotency_key, transfer_key))
        db.execute("COMMIT")
    finally:
        db.close()
    _crash_at("in_refund")
    return f"refunded {args['amount']} to {args['src']}"


@transfer.reconcile
def _ask_the_bank(args: dict, ctx: ToolContext):
    _crash_at("in_reconcile")
    row = find(ctx.idempotency_key)
    if row is None:
        return not_executed()
    return executed(f"moved {row[2]} from {row[0]} to {row[1]}")


def agent() -> Agent:
    """The agent target: `polyloop run examples/transfer.py:agent --goal "..."`.

    Opens the bank first: a new one gets alice 1000 and bob 0; an existing one is left as it is.
    """
    open_bank({"alice": 1000, "bob": 0})
    return Agent(model=ScriptedModel(SCRIPT), tools=[transfer])


def main() -> int:
    import asyncio

    from polyloop import JsonlStore

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("BANK_DB", str(Path(tmp) / "bank.sqlite"))
        result = asyncio.run(agent().run(GOAL, store=JsonlStore(Path(tmp) / "runs")))
        print(f"{result.reason}: {result.text}")
        print(f"alice {balance('alice')}, bob {balance('bob')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
