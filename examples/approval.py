"""One approval: a refund above 100 waits for a person before anything of it runs.

The model (scripted here) refunds order 1042 for 250. `refund` requires
approval above 100, so the run records an `approval_request` and stops
(exit 3); a person approves (possibly with edited arguments) or denies it,
and resume carries on. See docs/how-to/require-approval.md.

    polyloop run examples/approval.py:agent --run-id refund-1 --goal "refund order 1042"
    polyloop approve refund-1 s1-a1 --reason "the parcel came back" --by ann
    polyloop resume refund-1

Each refund appends one line to `refunds.txt` (or `$REFUND_LEDGER`),
fsync'd, with its idempotency key: the shop's ledger.
"""

from __future__ import annotations

import os

from polyloop import Agent, ScriptedModel, ToolContext, tool


@tool(approval=lambda args: args["amount"] > 100)
def refund(order: str, amount: int, ctx: ToolContext) -> str:
    """Refund an order: money leaves the shop.

    Args:
        order: the order number.
        amount: how much to refund, in euros.
    """
    with open(os.environ.get("REFUND_LEDGER", "refunds.txt"), "a", encoding="utf-8") as ledger:
        ledger.write(f"{ctx.idempotency_key} order {order} refunded {amount}\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    return f"refunded {amount} for order {order}"


def agent() -> Agent:
    script = [
        {"tool": "refund", "args": {"order": "1042", "amount": 250}},
        {"final": "handled the refund request for order 1042"},
    ]
    return Agent(model=ScriptedModel(script), tools=[refund])
