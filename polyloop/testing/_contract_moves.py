"""A property of the contract kit (polyloop/testing/_contract.py): a run moves out of the store whole.

For a store that hands runs over (`Capabilities.exporting`, as `PostgresStore`
does): a run whose tool stored a product is exported as `polyloop export`
writes it, the files pass `verify`, a `JsonlStore` over them reads the same
records and the same product, and loading them back into the store (what
`polyloop import` does) finds the run already there, identical: nothing is
written twice.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from typing import Any

from .._log.codec import parse_log
from .._log.model_port import ScriptedModel
from .._log.store_port import capabilities_of
from .._operate.transfer import _log_bytes, _product_file, checked, write_run_files
from .._operate.verify import verify_logs
from .._run.agent import Agent
from .._run.context import ToolContext
from .._run.tools import tool
from ..stores._jsonl import JsonlStore


async def a_run_moves_out_whole(store: Any, expect: Any) -> None:
    """Export a run with a product; verify the files; read them back; load them again (identical)."""
    if not capabilities_of(store).exporting or not capabilities_of(store).artifacts:
        return
    run_id = f"contract-moves-{uuid.uuid4().hex[:12]}"

    @tool(replay="safe")
    def keep(ctx: ToolContext) -> Any:
        return ctx.artifacts.write("kept.bin", bytes(range(256)) * 1200)

    agent = Agent(model=ScriptedModel([{"tool": "keep", "args": {}}, {"final": "ok"}]), tools=[keep])
    await agent.run("move me", run_id=run_id, store=store)
    with tempfile.TemporaryDirectory(prefix="polyloop-contract-") as folder:
        data = await _log_bytes(store, run_id)
        walker = checked(data, run_id)
        expect((await write_run_files(store, run_id, data, walker, folder)).products == 1, "the product was not exported")
        expect(not (await asyncio.to_thread(verify_logs, folder, workers=1)).failed(), "verify refuses the export")
        local = JsonlStore(folder)
        expect(list(await local.read_log(run_id)) == list(await store.read_log(run_id)),
               "the exported log reads back other records")
        expect(await local.get_product(run_id, "kept.bin") == bytes(range(256)) * 1200,
               "the exported product reads back other bytes")
        raw = data.split(b"\n")
        parsed = parse_log(data)
        lines = [(r.TAG, raw[n - 1].decode()) for r, n in zip(parsed.records, parsed.lines)]
        product = await asyncio.to_thread(_product_file, local.artifact_folder(run_id) / "kept.bin", "kept.bin")
        again = await store.load_run(run_id, lines, [product], finished=True)
        expect(again == "identical", f"loading the run back into its store found it {again}")
