"""Intermediate products by reference: `ctx.artifacts`, and their check on resume.

A tool stores a product with `ctx.artifacts.write(name, data)`: the store
makes the bytes durable atomically (`ArtifactStore.put_product`: a temporary
file in the same folder, write, fsync, rename, fsync of the folder), then
the run appends an `artifact` record with the product's size and SHA-256.
The log holds the reference, never the content. Before a resumed run does
anything, `check_artifacts` compares every product the run has referenced
(the latest reference per name) with what the store holds now; a missing or
altered one refuses the resume (`CheckpointError`, exit code 4). A product
that is no longer the regular file written (a directory, a FIFO, a symbolic
link, even to the same bytes, or a folder that is a link) is missing: the
run's bytes are not there. `judge` is the one judgement every reader (resume,
`inspect`, `ls`, `verify`, `ctx.artifacts.read`) uses, `read_artifact_file`
(storage: polyloop/stores/_artifacts.py) the one way a product file is read,
and `refused_artifacts` the one rule of which changes refuse. See docs/how-to/keep-intermediate-products.md.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._recovery.on_artifacts import artifact_path
from .._log import commands
from .._log.errors import ArtifactError, CheckpointError, PolyLoopError, StoreError
from .._log.ids import check_artifact_name
from .._log.records import Artifact
from .._log.store_port import Store, capabilities_of
from ..stores._artifacts import NotRegularArtifactError

if TYPE_CHECKING:
    from .._recovery.walker import Walker

ArtifactState = Literal["ok", "missing", "altered", "unsettled"]
# Of those, what the checkpoint refuses (and `--accept-changes` accepts); `unsettled`
# is refused only once the interrupted step completed, unless accepted before.
_CHANGED: tuple[ArtifactState, ...] = ("missing", "altered")

# Hashing more than this moves off the event loop (other runs share it).
_OFF_LOOP_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """A reference to a stored product, as `ctx.artifacts.write` returns it.

    JSON-able: a tool may return it (or a dict or list holding it) and the
    model reads `{"name", "path", "size", "sha256"}`.

    Attributes:
        name: the product's name within its run.
        path: where it lives, relative to the store's run folder
            (`<run_id>.artifacts/<name>`).
        size: its length in bytes.
        sha256: the SHA-256 of its bytes, 64 lowercase hex digits.
    """

    name: str
    path: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """`{"name", "path", "size", "sha256"}`."""
        return {"name": self.name, "path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class ArtifactCheck:
    """What a referenced product holds now, against its latest reference.

    `state` is `ok`, `missing` (no regular file holds the product: it is
    gone, or `instead` says what is in its place), `altered` (other bytes
    than recorded) or `unsettled`: other bytes than recorded while an action
    of the open step has no recorded outcome — a crash may have cut it
    between replacing the product and recording the new reference, so the
    log cannot tell. The action is settled as any unknown action is (a
    `safe` one runs again and writes the product again); a later read of the
    product verifies it. A product is written by an atomic rename of a
    regular file, so no crash leaves a directory, a FIFO or a link in its
    place: those are `missing`, never `unsettled`.
    """

    ref: Artifact
    state: ArtifactState
    now_size: int | None = None
    now_sha256: str | None = None
    instead: str | None = None  # what stands where the regular file was written, in words

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    def to_json(self) -> dict[str, Any]:
        r = self.ref
        now = None if self.now_size is None else {"size": self.now_size, "sha256": self.now_sha256}
        return {
            "name": r.name, "path": r.path, "size": r.size, "sha256": r.sha256, "result_id": r.result_id,
            "ok": self.ok, "state": self.state, "now": now,
        }

    def difference(self) -> dict[str, Any]:
        """The `CheckpointError.differences` entry: `{"what": "product", "name", "recorded", "now"}`."""
        r = self.ref
        now = None if self.now_size is None else {"size": self.now_size, "sha256": self.now_sha256}
        recorded = {"path": r.path, "size": r.size, "sha256": r.sha256}
        return {"what": "product", "name": r.name, "recorded": recorded, "now": now}

    def sentence(self) -> str:
        r = self.ref
        if self.state == "missing":
            return f"product {r.name!r} ({r.path}) is missing" + (f": {self.instead}" if self.instead else "")
        return (
            f"product {r.name!r} ({r.path}) was altered: recorded {r.size} bytes, sha256 {r.sha256[:12]}…; "
            f"now {self.now_size} bytes, sha256 {(self.now_sha256 or '')[:12]}…"
        )


def judge(ref: Artifact, data: bytes | None, *, in_flight: bool = False, instead: str | None = None) -> ArtifactCheck:
    """Compare a product's bytes (None: no regular file holds them; `instead`: what does) with its reference; pure."""
    if data is None:
        return ArtifactCheck(ref, "missing", instead=instead)
    return judge_digest(ref, len(data), hashlib.sha256(data).hexdigest(), in_flight=in_flight)


def judge_digest(ref: Artifact, size: int, digest: str, *, in_flight: bool = False) -> ArtifactCheck:
    """`judge` of a product known by its size and SHA-256 (hashed as it streamed by); pure."""
    if size == ref.size and digest == ref.sha256:
        return ArtifactCheck(ref, "ok", size, digest)
    return ArtifactCheck(ref, "unsettled" if in_flight else "altered", size, digest)


async def artifact_checks(store: Store, walker: Walker) -> list[ArtifactCheck]:
    """Every product the run references (latest reference per name), checked against the store.

    A store without the `ArtifactStore` capability holds none: each is `missing`.
    A store that streams its products (`product_chunks`, a database:
    `Capabilities.exporting`) has each hashed a chunk at a time, never read whole.
    """
    refs = list(walker.artifacts.values())
    if not refs:
        return []
    in_flight = bool(walker.in_flight())
    run_id = walker.started.run_id if walker.started else ""
    can = capabilities_of(store)
    streams = can.artifacts and can.exporting
    checks = []
    for ref in refs:
        if streams:
            checks.append(await _streamed(store, run_id, ref, in_flight))
            continue
        data, instead = await _get(store, run_id, ref.name)
        if data is not None and len(data) > _OFF_LOOP_BYTES:
            checks.append(await asyncio.to_thread(judge, ref, data, in_flight=in_flight))
        else:
            checks.append(judge(ref, data, in_flight=in_flight, instead=instead))
    return checks


async def _streamed(store: Any, run_id: str, ref: Artifact, in_flight: bool) -> ArtifactCheck:
    """The check of a product the store streams: hashed a chunk at a time (none: missing)."""
    try:
        size, digest = await stream_digest(store.product_chunks(run_id, ref.name))
        if size == 0 and await store.get_product(run_id, ref.name) is None:
            return judge(ref, None, in_flight=in_flight)
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to read product {ref.name!r} of run {run_id!r}: {exc}", run_id=run_id) from exc
    return judge_digest(ref, size, digest, in_flight=in_flight)


async def stream_digest(chunks: AsyncIterator[bytes]) -> tuple[int, str]:
    """(size, sha256) of a product streamed a chunk at a time, never holding it whole."""
    h = hashlib.sha256()
    size = 0
    async for chunk in chunks:
        h.update(chunk)
        size += len(chunk)
    return size, h.hexdigest()


def accepted_artifacts(walker: Walker) -> set[tuple[str, str | None]]:
    """`(name, sha256 now)` of every product change a `checkpoint_accepted` record accepted.

    A product accepted as missing (its `now` is null) is `(name, None)`.
    """
    return {
        (d["name"], d["now"].get("sha256") if isinstance(d.get("now"), dict) else None)
        for rec in walker.accepted
        for d in rec.differences
        if d.get("what") == "product"
    }


def refused_artifacts(checks: Iterable[ArtifactCheck], walker: Walker, *, unsettled: bool = False) -> list[ArtifactCheck]:
    """The checks that show a change of the checkpoint no `checkpoint_accepted` record covers.

    A change is a `missing` or `altered` product, and with `unsettled` also
    an `unsettled` one: what `--accept-changes` accepts, so one acceptance
    covers the products the resumed step only checks once it completed.
    """
    accepted = accepted_artifacts(walker)
    states = (*_CHANGED, "unsettled") if unsettled else _CHANGED
    return [c for c in checks if c.state in states and (c.ref.name, c.now_sha256) not in accepted]


async def bad_artifacts(store: Store, walker: Walker, *, unsettled: bool = False) -> list[ArtifactCheck]:
    """`refused_artifacts` of the run's products now (none for a finished run: nothing will run)."""
    if walker.finished is not None or not walker.artifacts or walker.started is None:
        return []
    return refused_artifacts(await artifact_checks(store, walker), walker, unsettled=unsettled)


def artifact_refusal(
    run_id: str, bad: list[ArtifactCheck], store: object, *, when: str = "cannot resume"
) -> CheckpointError:
    """The `CheckpointError` that refuses a run over changed products, naming both ways forward."""
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    lacks = "" if capabilities_of(store).artifacts else f" ({_lacks(store)})"
    message = (
        f"run {run_id!r} {when}: {bad[0].sentence()}{more}{lacks}. Continuing on other data than "
        "the run recorded could mix old and new products; start over under a new run id, or accept the "
        f"change on the record with `{commands.accept_changes(run_id)}`"
    )
    return CheckpointError(run_id, message, [c.difference() for c in bad])


async def check_artifacts(store: Store, walker: Walker, *, when: str = "cannot resume") -> None:
    """Refuse to go on with a run whose referenced products changed and no acceptance covers it.

    Called before anything of a resumed run runs, and again once an
    interrupted step completed. A finished run is not checked (nothing will
    run). A product altered while an action of the open step has no
    recorded outcome is `unsettled`, not refused (see `ArtifactCheck`); the
    run loop checks again once that step completed. Every change a
    `checkpoint_accepted` record of the run accepted is left alone.

    Args:
        store: where the run lives.
        walker: the run's walked log.
        when: how the message says what is refused (`run X cannot resume: ...`).

    Raises:
        CheckpointError: with one `differences` entry per bad product.
        StoreError: a product cannot be read.
    """
    bad = await bad_artifacts(store, walker)
    if bad:
        assert walker.started is not None
        raise artifact_refusal(walker.started.run_id, bad, store, when=when)


async def _get(store: Store, run_id: str, name: str) -> tuple[bytes | None, str | None]:
    """The product's bytes (None: no regular file holds them) and, if something else stands there, what."""
    if not capabilities_of(store).artifacts:
        return None, None
    try:
        return await store.get_product(run_id, name), None
    except NotRegularArtifactError as exc:
        return None, exc.instead
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to read product {name!r} of run {run_id!r}: {exc}", run_id=run_id) from exc


def _lacks(store: object) -> str:
    return f"{type(store).__name__} keeps no products: it lacks put_product, get_product and write_artifact"


def as_bytes(data: object) -> bytes:
    """A product's content as bytes: `bytes`-like as is, `str` as UTF-8; anything else is a `TypeError`."""
    if isinstance(data, str):
        return data.encode("utf-8", "surrogateescape")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"a product is bytes or str, not {type(data).__name__}")


class Artifacts:
    """`ctx.artifacts`: store and read the intermediate products of the action's run.

    `write` and `read` block: call them from a synchronous tool (which runs
    in a worker thread). An async tool awaits `awrite` and `aread` instead.
    """

    __slots__ = ("_run", "_result_id", "_loop", "_lock")

    def __init__(self, run: Any = None, result_id: str = "") -> None:
        self._run = run  # the run (a `RunPort`; None: a context built by hand, without a run)
        self._result_id = result_id
        self._loop = asyncio.get_running_loop() if run is not None else None
        self._lock: asyncio.Lock | None = None  # made by the first `awrite` (most actions write none)

    def __repr__(self) -> str:
        return f"<Artifacts of {self._result_id}>" if self._run is not None else "NO_ARTIFACTS"

    def write(self, name: str, data: bytes | str) -> ArtifactRef:
        """Store `data` as product `name` of this run; blocks until it is durable and referenced.

        The bytes are written atomically and durably (a reader sees the
        whole old product or the whole new one, never part of one), then
        the run's log records the reference, naming this action. A later
        write of the same name replaces the product and supersedes the
        reference. `str` data is stored as UTF-8.

        Args:
            name: a safe file name (`[A-Za-z0-9._-]+`, not starting with '.' or '-').
            data: the content.

        Returns:
            The `ArtifactRef` (return it from the tool to show the model).

        Raises:
            InvalidInputError: an unsafe name.
            TypeError: `data` is neither bytes nor str.
            StoreError: the store cannot keep products, or the write failed
                (then the product is the old one or absent, never partial).
            RuntimeError: called from the event loop's thread (use `awrite`).
        """
        return self._blocking(self.awrite(name, data))

    def read(self, name: str) -> bytes:
        """The bytes of product `name`, verified against the run's latest reference; blocks.

        Raises:
            ArtifactError: the run has no product of that name, or it is
                missing, or its size or SHA-256 differs from the reference.
            InvalidInputError: an unsafe name.
            RuntimeError: called from the event loop's thread (use `aread`).
        """
        return self._blocking(self.aread(name))

    async def awrite(self, name: str, data: bytes | str) -> ArtifactRef:
        """`write` for async tools."""
        run = self._bound()
        check_artifact_name(name)
        content = as_bytes(data)
        store = run.store
        if not capabilities_of(store).artifacts:
            raise StoreError(f"cannot store product {name!r}: {_lacks(store)}", run_id=run.run_id)
        digest = hashlib.sha256(content).hexdigest()
        path = artifact_path(run.run_id, name)
        if self._lock is None:  # on the loop's thread, like every awrite: no race to make two
            self._lock = asyncio.Lock()
        async with self._lock:  # one product write of this action at a time: records stay in order
            try:
                await store.put_product(run.run_id, name, content)
            except PolyLoopError:
                raise
            except Exception as exc:
                raise StoreError(
                    f"store failed to write product {name!r} of run {run.run_id!r}: {exc}", run_id=run.run_id
                ) from exc
            await run.write(
                Artifact(result_id=self._result_id, name=name, path=path, size=len(content), sha256=digest)
            )
        return ArtifactRef(name, path, len(content), digest)

    async def aread(self, name: str) -> bytes:
        """`read` for async tools."""
        run = self._bound()
        check_artifact_name(name)
        ref = run.walker.artifacts.get(name)
        if ref is None:
            raise ArtifactError(run.run_id, name, f"run {run.run_id!r} has no product {name!r}")
        data, instead = await _get(run.store, run.run_id, name)
        check = judge(ref, data, instead=instead)
        # Bytes a person accepted on the record (`--accept-changes`) are read as they are now.
        if data is None or refused_artifacts([check], run.walker):
            raise ArtifactError(run.run_id, name, f"cannot read: {check.sentence()}")
        return data

    def _bound(self) -> Any:
        if self._run is None:
            raise RuntimeError("this ToolContext belongs to no run: ctx.artifacts works inside a run's action")
        return self._run

    def _blocking(self, coro: Any) -> Any:
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            coro.close()
            if loop is None:
                self._bound()
            raise RuntimeError("ctx.artifacts.write/read block the event loop: in an async tool, await awrite/aread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()


NO_ARTIFACTS = Artifacts()

