"""The storage contract: properties every `Store` implementation must have.

Each property is an async function taking a store factory (a zero-argument
callable returning a store). Properties use fresh run ids only, so a store
that is shared (a database with other data in it) can run them too. They
check ordering and crash semantics through the run loop, not only API
round-trips: a run stopped at a step boundary and resumed must write the
same logical log as an uninterrupted one; an unknown `never` action must
stop the run; an unknown `safe` one must be replayed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .._run.agent import Agent
from .._recovery.walker import classify
from .._log.errors import NeedsOperatorError, RunActiveError, RunExistsError, RunNotFoundError, SchemaVersionError
from .._log.ids import idempotency_key
from .._operate.resolve import mark_resolved
from .._log.model_port import ScriptedModel
from .._log.records import (
    ActionResult,
    Artifact,
    GuardCheck,
    ApprovalRequest,
    Decision,
    Intent,
    ModelCallResult,
    Record,
    Resumed,
    RunFinished,
    RunStarted,
    RunStopped,
    StepCompleted,
)
from .._log.store_port import Store, capabilities_of
from .._run.context import ToolContext
from .._run.tools import tool
from ._contract_moves import a_run_moves_out_whole
from ._contract_loop import a_users_loop_follows_replay_policies, a_users_loop_writes_the_built_in_loops_log_and_resumes_the_same
from ._samples import ContractViolation, make_store as _make
from ._samples import CrashIn, StopAfter, Stopped, approved_run, contract_agent, guarded_run, logical, sample_run

StoreFactory = Callable[[], Any]
Property = Callable[[StoreFactory], Awaitable[None]]


def _fresh_id(label: str) -> str:
    return f"contract-{label}-{uuid.uuid4().hex[:12]}"


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


async def _write(store: Store, run_id: str, record: Record) -> None:
    if isinstance(record, RunStarted):
        await store.write_run_started(record)
    elif isinstance(record, Intent):
        await store.write_intent(run_id, record)
    elif isinstance(record, ModelCallResult):
        await store.write_model_call_result(run_id, record)
    elif isinstance(record, StepCompleted):
        await store.write_step_completed(run_id, record)
    elif isinstance(record, RunFinished):
        await store.write_run_finished(run_id, record)
    elif isinstance(record, GuardCheck):
        await store.write_guard_check(run_id, record)  # type: ignore[attr-defined]
    elif isinstance(record, ActionResult):
        await store.write_action_result(run_id, record)  # type: ignore[attr-defined]
    elif isinstance(record, ApprovalRequest):
        await store.write_approval_request(run_id, record)  # type: ignore[attr-defined]
    elif isinstance(record, Decision):
        await store.write_decision(run_id, record)  # type: ignore[attr-defined]
    elif isinstance(record, Artifact):
        await store.write_artifact(run_id, record)  # type: ignore[attr-defined]
    else:
        await store.write_resolution(run_id, record)


async def round_trip_every_record_kind(factory: StoreFactory) -> None:
    """Every record kind reads back equal, in order, and classifies."""
    store = await _make(factory)
    run_id = _fresh_id("roundtrip")
    records = sample_run(run_id)
    for r in records:
        await _write(store, run_id, r)
    got = list(await store.read_log(run_id))
    _expect(got == records, f"read_log returned {got!r}, expected {records!r}")
    _expect(classify(got, run_id=run_id).status == "finished", "the sample run should classify as finished")


async def read_back_after_each_write(factory: StoreFactory) -> None:
    """A record is visible to read_log as soon as its write returns."""
    store = await _make(factory)
    run_id = _fresh_id("prefix")
    records = sample_run(run_id)
    for n, r in enumerate(records, start=1):
        await _write(store, run_id, r)
        got = list(await store.read_log(run_id))
        _expect(got == records[:n], f"after {n} writes read_log returned {len(got)} records")


async def run_started_is_exclusive(factory: StoreFactory) -> None:
    """Creating a run twice fails with RunExistsError and leaves the first intact."""
    store = await _make(factory)
    run_id = _fresh_id("exclusive")
    first = RunStarted(run_id=run_id, goal="first")
    await store.write_run_started(first)
    try:
        await store.write_run_started(RunStarted(run_id=run_id, goal="second"))
    except RunExistsError:
        pass
    else:
        raise ContractViolation("a second write_run_started for the same id did not raise RunExistsError")
    _expect(list(await store.read_log(run_id)) == [first], "the first run_started must survive")


async def unknown_run_is_not_found(factory: StoreFactory) -> None:
    """read_log of a run id never written raises RunNotFoundError."""
    store = await _make(factory)
    try:
        await store.read_log(_fresh_id("missing"))
    except RunNotFoundError:
        return
    raise ContractViolation("read_log of an unknown run did not raise RunNotFoundError")


async def runs_are_isolated(factory: StoreFactory) -> None:
    """Interleaved writes of two runs never mix, even when concurrent."""
    store = await _make(factory)
    ids = [_fresh_id(f"iso{i}") for i in range(8)]
    logs = {run_id: sample_run(run_id) for run_id in ids}

    async def write_all(run_id: str) -> None:
        for r in logs[run_id]:
            await _write(store, run_id, r)
            await asyncio.sleep(0)

    await asyncio.gather(*(write_all(run_id) for run_id in ids))
    for run_id in ids:
        _expect(list(await store.read_log(run_id)) == logs[run_id], f"run {run_id} read back mixed or out of order")


async def payloads_survive_exactly(factory: StoreFactory) -> None:
    """Large, unicode and control-character payloads read back byte for byte."""
    store = await _make(factory)
    run_id = _fresh_id("payload")
    nasty = "".join(chr(c) for c in range(0, 0x250)) + "\u202e\u2028\u2029[red]x[/red] 😀" * 50
    big = "x" * 1_000_000
    records: list[Record] = [
        RunStarted(run_id=run_id, goal=nasty),
        Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
        ModelCallResult(result_id="s1-m1", output={"text": big, "tool_call": None}),
    ]
    for r in records:
        await _write(store, run_id, r)
    _expect(list(await store.read_log(run_id)) == records, "a large or unusual payload did not round-trip")


async def resume_matches_uninterrupted_run(factory: StoreFactory) -> None:
    """A run stopped after step N and resumed writes the same logical log as one never stopped."""
    store = await _make(factory)
    effects: list[str] = []
    base_id = _fresh_id("whole")
    whole = await contract_agent(effects).run("contract", run_id=base_id, store=store)
    expected = logical(list(await store.read_log(base_id)))
    for stop in range(1, 5):
        run_id = _fresh_id(f"stop{stop}")
        try:
            await contract_agent([]).run("contract", run_id=run_id, store=StopAfter(store, stop))
        except Stopped:
            pass
        else:
            raise ContractViolation("the stop wrapper did not stop the run")
        resumed = await contract_agent([]).run("contract", run_id=run_id, store=store)
        _expect(
            (resumed.text, resumed.reason, resumed.steps) == (whole.text, whole.reason, whole.steps),
            f"stopped after step {stop}: resumed result {resumed} differs from {whole}",
        )
        records = list(await store.read_log(run_id))
        counted = [r for r in records if r.TAG == "resumed"]  # a resume's own bookkeeping (log format 1.2)
        if Resumed in capabilities_of(store).writes:
            _expect(len(counted) == 1, f"stopped after step {stop}: {len(counted)} resumed records, not 1")
        got = logical([r for r in records if r.TAG != "resumed"])
        for entry in got:
            entry.pop("run_id", None)
            if entry.get("idempotency_key"):
                entry["idempotency_key"] = "k"
        for entry in expected:
            entry.pop("run_id", None)
            if entry.get("idempotency_key"):
                entry["idempotency_key"] = "k"
        _expect(got == expected, f"stopped after step {stop}: the resumed log differs from an uninterrupted one")


async def unknown_actions_follow_their_replay_policy(factory: StoreFactory) -> None:
    """An unknown `never` action stops the run; after `not_executed` it runs again; `safe` replays."""
    store = await _make(factory)
    for policy in ("never", "safe"):
        calls: list[int] = []

        def effect(ctx_attempt: int) -> str:
            calls.append(ctx_attempt)
            if len(calls) == 1:
                raise CrashIn
            return "ok"

        @tool(replay=policy)  # type: ignore[arg-type]
        def act(ctx: Any) -> str:
            """Do it."""
            return effect(ctx.attempt)

        agent = Agent(
            model=ScriptedModel([{"tool": "act", "args": {}}, {"final": "fin"}]), tools=[act]
        )
        run_id = _fresh_id(f"policy-{policy}")
        try:
            await agent.run("contract", run_id=run_id, store=store)
        except CrashIn:
            pass
        if policy == "never":
            try:
                await agent.run(run_id=run_id, store=store)
            except NeedsOperatorError as exc:
                _expect([e.result_id for e in exc.executions] == ["s1-a1"], "the unknown action must be listed")
            else:
                raise ContractViolation("resume went past an unknown `never` action")
            _expect(calls == [1], "an unknown `never` action was repeated without an operator")
            await mark_resolved(store, run_id, "s1-a1", executed=False, reason="contract")
        result = await agent.run(run_id=run_id, store=store)
        _expect(result.text == "fin", f"{policy}: the run did not finish after recovery")
        _expect(calls == [1, 2], f"{policy}: expected one crash and one new attempt, got {calls}")


async def lock_excludes_a_second_holder(factory: StoreFactory) -> None:
    """If the store offers `lock`, a second holder is refused until the first lets go."""
    store = await _make(factory)
    if not capabilities_of(store).locking:
        return
    run_id = _fresh_id("lock")
    async with store.lock(run_id):
        try:
            async with store.lock(run_id):
                raise ContractViolation("a second holder got the lock")
        except RunActiveError:
            pass
    async with store.lock(run_id):
        pass


async def unknown_major_version_is_refused(factory: StoreFactory) -> None:
    """A log of an unknown major format reads as `SchemaVersionError`, whichever store keeps it."""
    store = await _make(factory)
    run_id = _fresh_id("schema")
    await store.write_run_started(RunStarted(run_id=run_id, goal="from the future", schema_version="99.0"))
    try:
        await store.read_log(run_id)
    except SchemaVersionError as exc:
        _expect(exc.version == "99.0", f"SchemaVersionError names version {exc.version!r}, not '99.0'")
        return
    except Exception as exc:  # the contract is one error class for one meaning
        raise ContractViolation(
            f"read_log of a log written in format 99.0 raised {type(exc).__name__}, not SchemaVersionError"
        ) from exc
    raise ContractViolation("read_log of a log written in format 99.0 did not raise SchemaVersionError")


async def guard_records_round_trip(factory: StoreFactory) -> None:
    """The log format 1.1 records of a guarded action read back equal, in order, and classify.

    Only for a store that offers `write_guard_check` and `write_action_result`
    (a store without them serves every agent but those with guarded tools).
    """
    store = await _make(factory)
    if not {GuardCheck, ActionResult} <= capabilities_of(store).writes:
        return
    run_id = _fresh_id("guards")
    records = guarded_run(run_id)
    for r in records:
        await _write(store, run_id, r)
    got = list(await store.read_log(run_id))
    _expect(got == records, f"read_log returned {got!r}, expected {records!r}")
    verdict = classify(got, run_id=run_id)
    _expect(verdict.execution("s1-a1").state == "rolled_back", "the guarded run should classify as rolled back")


async def approval_records_round_trip(factory: StoreFactory) -> None:
    """The log format 1.2 records of an approved call read back equal, in order, and classify.

    Only for a store that offers `write_approval_request` and `write_decision`
    (a store without them serves every agent but those whose tool calls wait
    for a person).
    """
    store = await _make(factory)
    if not {ApprovalRequest, Decision} <= capabilities_of(store).writes:
        return
    run_id = _fresh_id("approval")
    records = approved_run(run_id)
    for r in records:
        await _write(store, run_id, r)
    got = list(await store.read_log(run_id))
    _expect(got == records, f"read_log returned {got!r}, expected {records!r}")
    verdict = classify(got, run_id=run_id)
    _expect(verdict.request_of("s1-a1").state == "approved", "the approved call should classify as approved")
    _expect(verdict.execution("s1-a1").state == "done", "the approved action should classify as done")


async def outage_records_round_trip(factory: StoreFactory) -> None:
    """A run stopped on a model outage (log format 1.3) reads back equal, in order, and classifies resumable.

    Only for a store that offers `write_run_stopped` (a store without it
    stops such runs all the same, without the record).
    """
    store = await _make(factory)
    if RunStopped not in capabilities_of(store).writes:
        return
    run_id = _fresh_id("outage")
    records: list[Record] = [RunStarted(run_id=run_id, goal="g", config={"max_steps": 3, "max_attempts": 1})]
    records += [Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
                ModelCallResult(result_id="s1-m1", output=None, error="TransientModelError: HTTP 503", transient=True),
                RunStopped(cause="model_unavailable", step=1, attempts=1, failures=1, error="HTTP 503",
                           since="2026-12-03T09:00:00.000000Z", endpoint="OpenAIModel http://127.0.0.1:9/v1")]
    for r in records[:-1]:
        await _write(store, run_id, r)
    await store.write_run_stopped(run_id, records[-1])  # type: ignore[attr-defined]
    got = list(await store.read_log(run_id))
    _expect(got == records, f"read_log returned {got!r}, expected {records!r}")
    verdict = classify(got, run_id=run_id)
    _expect(verdict.status == "resumable" and verdict.stopped == records[-1], "a stopped run should classify resumable")


async def products_round_trip(factory: StoreFactory) -> None:
    """ArtifactFiles read back exactly, per run and name, and a later put replaces the earlier one.

    Only for a store that offers the `ArtifactStore` capability (log format
    1.2); without it a tool's `ctx.artifacts.write` fails with a clear
    `StoreError` and every other agent is served. Also checks the `artifact`
    record round-trips and that a run whose tool stores a product resumes.
    Atomicity under a crash cannot be seen through the port: a file-based
    store proves it with the power-loss explorer (tests/crash/powerloss).
    """
    store = await _make(factory)
    if not capabilities_of(store).artifacts:
        return
    one, two = _fresh_id("products"), _fresh_id("products")
    _expect(await store.get_product(one, "never-written") is None, "get_product of an unwritten name is not None")
    payloads = [b"", b"\x00\xff\n\r binary \x1b[31m", ("ünïcode ✓ " * 20_000).encode()]
    for i, data in enumerate(payloads):
        await store.put_product(one, f"p{i}.bin", data)
    for i, data in enumerate(payloads):
        got = await store.get_product(one, f"p{i}.bin")
        _expect(got == data, f"product p{i}.bin read back {len(got or b'')} bytes, not the {len(data)} written")
    await store.put_product(one, "p1.bin", b"newer")
    _expect(await store.get_product(one, "p1.bin") == b"newer", "a second put_product did not replace the product")
    _expect(await store.get_product(two, "p1.bin") is None, "a product of one run is visible in another")

    records: list[Record] = [
        RunStarted(run_id=two, goal="products", config={"max_steps": 2, "tools": [{"name": "keep", "replay": "safe"}]}),
        Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
        ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": {"name": "keep", "args": {}}}),
        Intent(kind="action", step=1, attempt=1, result_id="s1-a1", tool="keep", args={}, replay="safe",
               idempotency_key=idempotency_key(two, 1, "keep", {})),
        Artifact(result_id="s1-a1", name="x.json", path=f"{two}.artifacts/x.json", size=3, sha256="ab" * 32),
    ]
    for r in records:
        await _write(store, two, r)
    got_log = list(await store.read_log(two))
    _expect(got_log == records, f"read_log returned {got_log!r}, expected {records!r}")

    run_id = _fresh_id("products-run")

    @tool(replay="safe")
    def keep(ctx: ToolContext) -> Any:
        return ctx.artifacts.write("kept.txt", "kept")

    agent = Agent(model=ScriptedModel([{"tool": "keep", "args": {}}, {"final": "ok"}]), tools=[keep])
    result = await agent.run("keep a product", run_id=run_id, store=store)
    _expect(result.text == "ok", f"the run with a product ended {result.reason}")
    _expect(await store.get_product(run_id, "kept.txt") == b"kept", "the tool's product did not read back")
    verdict = classify(list(await store.read_log(run_id)), run_id=run_id)
    _expect(verdict.status == "finished", "the run with a product should classify as finished")


async def a_run_moves_out_whole_property(factory: StoreFactory) -> None:
    """A run with a product is exported whole and loads back identical (stores that hand runs over)."""
    await a_run_moves_out_whole(await _make(factory), _expect)


PROPERTIES: tuple[Property, ...] = (
    round_trip_every_record_kind,
    read_back_after_each_write,
    run_started_is_exclusive,
    unknown_run_is_not_found,
    runs_are_isolated,
    payloads_survive_exactly,
    resume_matches_uninterrupted_run,
    unknown_actions_follow_their_replay_policy,
    lock_excludes_a_second_holder,
    unknown_major_version_is_refused,
    guard_records_round_trip,
    approval_records_round_trip,
    products_round_trip,
    outage_records_round_trip,
    a_run_moves_out_whole_property,
    a_users_loop_writes_the_built_in_loops_log_and_resumes_the_same,
    a_users_loop_follows_replay_policies,
)


def check_store(factory: StoreFactory) -> None:
    """Run every contract property against stores from `factory`, without pytest.

    Args:
        factory: a zero-argument callable returning a store (or an awaitable
            of one). It may return the same store each time; properties only
            use fresh run ids.

    Raises:
        ContractViolation: the first property the store breaks, by name.
    """
    for prop in PROPERTIES:
        try:
            asyncio.run(prop(factory))
        except ContractViolation as exc:
            raise ContractViolation(f"{prop.__name__}: {exc}") from exc


class StoreContract:
    """Subclass in a pytest module and provide a `store_factory` fixture.

        from polyloop.testing import StoreContract

        class TestMyStore(StoreContract):
            @pytest.fixture
            def store_factory(self, tmp_path):
                return lambda: MyStore(tmp_path / "db.sqlite")

    Each property is its own test, so `-k`, `xfail` and reporting work.
    """

    def test_round_trip_every_record_kind(self, store_factory: StoreFactory) -> None:
        asyncio.run(round_trip_every_record_kind(store_factory))

    def test_read_back_after_each_write(self, store_factory: StoreFactory) -> None:
        asyncio.run(read_back_after_each_write(store_factory))

    def test_run_started_is_exclusive(self, store_factory: StoreFactory) -> None:
        asyncio.run(run_started_is_exclusive(store_factory))

    def test_unknown_run_is_not_found(self, store_factory: StoreFactory) -> None:
        asyncio.run(unknown_run_is_not_found(store_factory))

    def test_runs_are_isolated(self, store_factory: StoreFactory) -> None:
        asyncio.run(runs_are_isolated(store_factory))

    def test_payloads_survive_exactly(self, store_factory: StoreFactory) -> None:
        asyncio.run(payloads_survive_exactly(store_factory))

    def test_resume_matches_uninterrupted_run(self, store_factory: StoreFactory) -> None:
        asyncio.run(resume_matches_uninterrupted_run(store_factory))

    def test_unknown_actions_follow_their_replay_policy(self, store_factory: StoreFactory) -> None:
        asyncio.run(unknown_actions_follow_their_replay_policy(store_factory))

    def test_lock_excludes_a_second_holder(self, store_factory: StoreFactory) -> None:
        asyncio.run(lock_excludes_a_second_holder(store_factory))

    def test_unknown_major_version_is_refused(self, store_factory: StoreFactory) -> None:
        asyncio.run(unknown_major_version_is_refused(store_factory))

    def test_guard_records_round_trip(self, store_factory: StoreFactory) -> None:
        asyncio.run(guard_records_round_trip(store_factory))

    def test_approval_records_round_trip(self, store_factory: StoreFactory) -> None:
        asyncio.run(approval_records_round_trip(store_factory))
    def test_products_round_trip(self, store_factory: StoreFactory) -> None:
        asyncio.run(products_round_trip(store_factory))
    def test_outage_records_round_trip(self, store_factory: StoreFactory) -> None:
        asyncio.run(outage_records_round_trip(store_factory))
    def test_a_run_moves_out_whole_property(self, store_factory: StoreFactory) -> None:
        asyncio.run(a_run_moves_out_whole_property(store_factory))
    def test_a_users_loop_writes_the_built_in_loops_log_and_resumes_the_same(self, store_factory: StoreFactory) -> None:
        asyncio.run(a_users_loop_writes_the_built_in_loops_log_and_resumes_the_same(store_factory))
    def test_a_users_loop_follows_replay_policies(self, store_factory: StoreFactory) -> None:
        asyncio.run(a_users_loop_follows_replay_policies(store_factory))
