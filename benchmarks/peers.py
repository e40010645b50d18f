"""Figure 3: the same agent loop on PolyLoop, LangGraph (SQLite, `sync`) and DBOS (SQLite).

The work is identical everywhere: an instant model that decides from the
history (a tool call until the history holds N assistant turns, then a final
answer), one trivial tool, ~500-byte messages. Each system runs in its own
natural form and its defaults:

* PolyLoop: `Agent` on `JsonlStore` (two fsyncs a step: the intents).
* LangGraph: a `StateGraph` loop agent → tools → agent with `SqliteSaver`,
  `durability="sync"`, a `TypedDict` state whose messages are plain dicts
  joined by `operator.add` (the lightest state LangGraph offers; no
  langchain message classes).
* DBOS: a workflow with one `@DBOS.step` per model call and per tool call,
  SQLite system database.

The guarantees differ (see docs/performance.md): only PolyLoop writes an
intent before each call; the peers record a node's or step's result after
it ran. Setup (graph compilation, database creation, DBOS launch) is done
once and not timed; each timed run is a fresh thread / workflow / run id in
the same database or directory, as for a user running many rollouts.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any

from ._common import (
    FINAL,
    OBSERVATION,
    THOUGHT,
    TOOL_ARGS,
    TOOL_NAME,
    Section,
    Target,
    lookup_tool,
    median,
    ratio,
    scripted_outputs,
    size,
    us,
)

INSTALL = (
    "the peers are not installed in this Python. Install them in a separate environment "
    "(never needed to use PolyLoop): `python -m venv .venv-peers && .venv-peers/bin/pip install "
    "-e '.[peers]'`; `benchmarks/run.py` then finds `.venv-peers/bin/python` "
    "(or pass `--peers-python`)."
)


def _dir_bytes(directory: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(directory) if e.is_file())


def _assistant(turns: int, steps: int) -> dict[str, Any]:
    if turns >= steps:
        return {"role": "assistant", "content": FINAL, "tool_call": None}
    call = {"id": f"call-{turns + 1}", "name": TOOL_NAME, "args": TOOL_ARGS}
    return {"role": "assistant", "content": THOUGHT, "tool_call": call}


def _lookup(query: str) -> str:
    return OBSERVATION


class _PolyLoop:
    name = "PolyLoop (JSONL)"

    def __init__(self, directory: str) -> None:
        from polyloop import JsonlStore

        self.directory = os.path.join(directory, "polyloop")
        self.store = JsonlStore(self.directory)
        self.loop = asyncio.new_event_loop()
        self.tool = lookup_tool()

    def run(self, steps: int) -> None:
        from polyloop import Agent, ScriptedModel

        agent = Agent(model=ScriptedModel(scripted_outputs(steps)), tools=[self.tool], max_steps=steps + 1)
        result = self.loop.run_until_complete(
            agent.run("build every module", run_id=f"run-{uuid.uuid4().hex[:12]}", store=self.store)
        )
        assert result.reason == "final_answer" and result.steps == steps + 1

    def bytes(self) -> int:
        return _dir_bytes(self.directory) if os.path.isdir(self.directory) else 0

    def close(self) -> None:
        self.loop.close()


class _LangGraph:
    name = "LangGraph (SqliteSaver, sync)"

    def __init__(self, directory: str) -> None:
        import operator
        from typing import Annotated, TypedDict

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph

        # Functional form: this module's `from __future__ import annotations` would
        # turn class-body annotations into strings LangGraph cannot resolve here.
        State = TypedDict("State", {"messages": Annotated[list, operator.add], "steps": int})  # type: ignore[misc]

        def agent(state: Any) -> dict[str, Any]:
            messages = state["messages"]
            return {"messages": [_assistant((len(messages) - 1) // 2, state["steps"])]}

        def tools(state: Any) -> dict[str, Any]:
            call = state["messages"][-1]["tool_call"]
            observation = _lookup(**call["args"])
            return {"messages": [{"role": "tool", "tool_call_id": call["id"], "content": observation}]}

        def route(state: Any) -> str:
            return "tools" if state["messages"][-1]["tool_call"] else END

        graph = StateGraph(State)
        graph.add_node("agent", agent)
        graph.add_node("tools", tools)
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", route, ["tools", END])
        graph.add_edge("tools", "agent")
        self.directory = os.path.join(directory, "langgraph")
        os.makedirs(self.directory)
        self.conn = sqlite3.connect(os.path.join(self.directory, "checkpoints.sqlite"), check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.graph = graph.compile(checkpointer=self.saver)
        self.settings = {
            "journal_mode": self.conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": self.conn.execute("PRAGMA synchronous").fetchone()[0],
        }

    def run(self, steps: int) -> None:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 2 * steps + 10}
        state = self.graph.invoke(
            {"messages": [{"role": "user", "content": "build every module"}], "steps": steps},
            config,
            durability="sync",
        )
        assert state["messages"][-1]["content"] == FINAL and len(state["messages"]) == 2 * steps + 2

    def bytes(self) -> int:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return _dir_bytes(self.directory)

    def close(self) -> None:
        self.conn.close()


class _Dbos:
    name = "DBOS (SQLite)"

    def __init__(self, directory: str) -> None:
        import logging

        from dbos import DBOS, SetWorkflowID

        self.directory = os.path.join(directory, "dbos")
        os.makedirs(self.directory)
        path = os.path.join(self.directory, "system.sqlite")

        @DBOS.step()
        def model_step(history: list[dict[str, Any]], steps: int) -> dict[str, Any]:
            return _assistant((len(history) - 1) // 2, steps)

        @DBOS.step()
        def tool_step(args: dict[str, Any]) -> str:
            return _lookup(**args)

        @DBOS.workflow()
        def agent_workflow(goal: str, steps: int) -> str:
            history: list[dict[str, Any]] = [{"role": "user", "content": goal}]
            while True:
                message = model_step(history, steps)
                history.append(message)
                call = message["tool_call"]
                if call is None:
                    return str(message["content"])
                observation = tool_step(call["args"])
                history.append({"role": "tool", "tool_call_id": call["id"], "content": observation})

        DBOS(config={"name": "polyloop-bench", "system_database_url": f"sqlite:///{path}", "log_level": "ERROR"})
        DBOS.launch()
        logging.getLogger("dbos").setLevel(logging.ERROR)
        self.workflow = agent_workflow
        self.set_id: Callable[[str], Any] = SetWorkflowID
        self.dbos = DBOS
        probe = sqlite3.connect(path)
        self.settings = {
            "journal_mode": probe.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": probe.execute("PRAGMA synchronous").fetchone()[0],
        }
        probe.close()

    def run(self, steps: int) -> None:
        with self.set_id(uuid.uuid4().hex):
            assert self.workflow("build every module", steps) == FINAL

    def bytes(self) -> int:
        return _dir_bytes(self.directory)

    def close(self) -> None:
        self.dbos.destroy(destroy_registry=True)


def _available() -> tuple[list[type], list[str]]:
    systems: list[type] = []
    missing: list[str] = []
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
        import langgraph.graph  # noqa: F401

        systems.append(_LangGraph)
    except ImportError:
        missing.append("LangGraph (`langgraph`, `langgraph-checkpoint-sqlite`)")
    try:
        import dbos  # noqa: F401

        systems.append(_Dbos)
    except ImportError:
        missing.append("DBOS (`dbos`)")
    return systems, missing


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "?"


def measure(workdir: str, *, quick: bool) -> list[Section]:
    peer_classes, missing = _available()
    section = Section(key="peers", title="3. The peers on the same work")
    if not peer_classes:
        section.skipped = INSTALL
        return [section]
    sizes = (10, 50) if quick else (10, 100, 1_000)
    reps = {10: 2, 50: 1} if quick else {10: 15, 100: 5, 1_000: 3}
    directory = os.path.join(workdir, f"peers-{uuid.uuid4().hex[:8]}")
    os.makedirs(directory)
    systems: list[Any] = [_PolyLoop(directory)] + [cls(directory) for cls in peer_classes]
    try:
        per_step: dict[tuple[str, int], float] = {}
        grown: dict[tuple[str, int], int] = {}
        for n in sizes:
            times: dict[str, list[float]] = {s.name: [] for s in systems}
            for rep in range(reps[n]):
                for s in systems if rep % 2 == 0 else reversed(systems):
                    before = s.bytes() if rep == 0 else 0
                    start = time.perf_counter()
                    s.run(n)
                    times[s.name].append((time.perf_counter() - start) / n)
                    if rep == 0:
                        grown[(s.name, n)] = s.bytes() - before
            for name, values in times.items():
                per_step[(name, n)] = median(values)
    finally:
        for s in systems:
            s.close()

    ours = systems[0].name
    section.columns = ["system", "N"] + ["per step", "× PolyLoop's time", "storage after N steps", "× PolyLoop's size"]
    for s in systems:
        for n in sizes:
            t, b = per_step[(s.name, n)], grown[(s.name, n)]
            t0, b0 = per_step[(ours, n)], grown[(ours, n)]
            section.rows.append([s.name, f"{n:,}", us(t), ratio(t / t0), size(b), ratio(b / b0) if b0 else "—"])
    for s in systems[1:]:
        short = s.name.split(" ")[0]
        if 1_000 in sizes:
            need = 15.0 if short == "LangGraph" else 7.0  # issue 33's targets (DBOS's was 3 before it)
            section.targets.append(
                Target(f"{short} time / PolyLoop's per step at N = 1,000", per_step[(s.name, 1_000)] / per_step[(ours, 1_000)], need, True)
            )
        section.targets.append(
            Target(f"{short} time / PolyLoop's per step at N = 10", per_step[(s.name, 10)] / per_step[(ours, 10)], 2.0, True)
        )
    versions = [f"langgraph {_version('langgraph')}, langgraph-checkpoint-sqlite {_version('langgraph-checkpoint-sqlite')}"] if _LangGraph in peer_classes else []
    if _Dbos in peer_classes:
        versions.append(f"dbos {_version('dbos')}")
    settings = [f"{s.name.split(' ')[0]}: SQLite journal_mode={s.settings['journal_mode']}, synchronous={s.settings['synchronous']}" for s in systems[1:]]
    section.notes.append(
        f"Per step = a whole run's wall time / N (run start and end included), median of "
        f"{', '.join(f'{reps[n]} run(s) at N = {n:,}' for n in sizes)}, systems interleaved. "
        "Storage = bytes the run added to its directory or database (WAL checkpointed first)."
    )
    section.notes.append("Versions: " + "; ".join(versions) + ". " + "; ".join(settings) + " (synchronous 2 = FULL).")
    if missing:
        section.notes.append("Not installed, so not measured: " + ", ".join(missing) + ".")
    return [section]

