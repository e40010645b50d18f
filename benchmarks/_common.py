"""The workload every benchmark shares, and how figures are measured and printed.

The work of one step is the same everywhere (PolyLoop, the in-memory store,
the peers): an instant model that answers with ~500 bytes of text and a call
of one trivial tool, which answers with ~500 bytes. Every figure is a ratio
of two things measured side by side in the same process and the same
minutes, because the machine is shared and noisy; absolute times are printed
for orientation only.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

MESSAGE_BYTES = 500


def _filler(label: str, size: int) -> str:
    words = f"{label}: the build of module {{}} passed its checks and the next module is queued. "
    text = "".join(words.format(i) for i in range(size // len(words) + 2))
    return text[:size]


# The model's text with each tool call, and the tool's observation: ~500 bytes each.
THOUGHT = _filler("thought", MESSAGE_BYTES - 20)
OBSERVATION = _filler("observation", MESSAGE_BYTES)
TOOL_NAME = "lookup"
TOOL_ARGS = {"query": "status of the nightly build"}
FINAL = "all modules built"

# The floor's record: what one intent line weighs.
FLOOR_RECORD = (b'{"record":"intent","kind":"model_call","step":1,"attempt":1,"result_id":"s1-m1",'
                b'"tool":null,"args":null,"replay":null,"idempotency_key":null,"at":"')
FLOOR_RECORD = FLOOR_RECORD + b"x" * (200 - len(FLOOR_RECORD) - 3) + b'"}\n'
assert len(FLOOR_RECORD) == 200


def floor_pair(path: str) -> float:
    """The physical floor of one step: two 200-byte appends with fsync; seconds taken.

    Each append is what the JSONL store does for an intent: open with
    O_APPEND, write, fsync, close.
    """
    start = time.perf_counter()
    for _ in range(2):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, FLOOR_RECORD)
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def scripted_outputs(steps: int) -> list[dict[str, Any]]:
    """A script of `steps` tool calls, then a final answer."""
    call = {"tool": TOOL_NAME, "args": TOOL_ARGS, "text": THOUGHT}
    return [call] * steps + [{"final": FINAL}]


def lookup_tool() -> Any:
    """The trivial tool: async (no thread hand-off), `safe`, answers ~500 bytes."""
    from polyloop import tool

    @tool(name=TOOL_NAME, replay="safe")
    async def lookup(query: str) -> str:
        """Look up the status of something."""
        return OBSERVATION

    return lookup


class Probe:
    """Wraps a model and timestamps every call, so steps are timed from outside the loop.

    Step *k* costs the time from the return of model call *k* to the return
    of model call *k + 1*: the model result, the action intent, the tool, the
    step record, the next model intent and the next (instant) decision. When
    a call number is in `floor_at`, the floor is measured inside that call
    and its time is taken out of the step.
    """

    def __init__(self, model: Any, *, floor_at: Iterable[int] = (), floor_path: str | None = None) -> None:
        self.model = model
        self.floor_at = set(floor_at)
        self.floor_path = floor_path
        self.leave: list[float] = []
        self.excluded: list[float] = []
        self.floors: dict[int, float] = {}

    def describe(self) -> dict[str, Any]:
        return {"type": "Probe", "model": self.model.describe()}

    async def complete(self, messages: Sequence[Any], tools: Sequence[Any]) -> Any:
        call = len(self.leave) + 1
        excluded = 0.0
        if call in self.floor_at and self.floor_path is not None:
            excluded = self.floors[call] = floor_pair(self.floor_path)
        out = await self.model.complete(messages, tools)
        self.leave.append(time.perf_counter())
        self.excluded.append(excluded)
        return out

    def step_times(self) -> list[float]:
        """Seconds per step, index 0 = step 1 (the final answer's call closes the last)."""
        return [
            self.leave[k] - self.leave[k - 1] - self.excluded[k] for k in range(1, len(self.leave))
        ]


def window(center: int, steps: int, width: int) -> range:
    """Step numbers (from 1) of a window of `width` steps around `center`, inside 1..steps."""
    start = max(1, min(center - width // 2, steps - width + 1))
    return range(start, min(steps, start + width - 1) + 1)


def median(values: Iterable[float]) -> float:
    data = list(values)
    return statistics.median(data) if data else float("nan")


def spread(values: Iterable[float]) -> str:
    """The 10th-90th percentile range, to show how noisy a sample was."""
    data = sorted(values)
    if not data:
        return "?"
    lo, hi = data[len(data) // 10], data[min(len(data) - 1, len(data) * 9 // 10)]
    return f"{us(lo)}–{us(hi)}"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"


def ratio(value: float) -> str:
    return f"{value:.2f}×"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@dataclass
class Target:
    """One target of issue 6, judged on this run's figure."""

    name: str
    value: float
    limit: float
    higher_is_better: bool = False

    @property
    def met(self) -> bool:
        return self.value >= self.limit if self.higher_is_better else self.value <= self.limit


@dataclass
class Section:
    """One figure: a table, notes that explain it, and the targets it judges."""

    key: str
    title: str
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    skipped: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Section:
        data = dict(data)
        data["targets"] = [Target(**t) for t in data.get("targets", [])]
        return cls(**data)

    def render(self) -> str:
        out = [f"### {self.title}", ""]
        if self.skipped:
            out += [f"Skipped: {self.skipped}", ""]
            return "\n".join(out)
        if self.rows:
            out.append("| " + " | ".join(self.columns) + " |")
            out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.columns))) + "|")
            out += ["| " + " | ".join(row) + " |" for row in self.rows]
            out.append("")
        out += [f"{note}" for note in self.notes]
        if self.notes:
            out.append("")
        return "\n".join(out)


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    import orjson

    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = size(int(line.split()[1]) * 1024)
    except OSError:
        pass
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = f"{os.getloadavg()[0]:.1f}"
    except OSError:
        load = "?"
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": load,
        "cpus": str(os.cpu_count()),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "orjson": orjson.__version__,
    }


def filesystem(path: str) -> str:
    """The file system type and device holding `path` (from /proc/self/mounts)."""
    best, kind = "", "?"
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                dev, mount, fstype, *_ = line.split()
                if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                    best, kind = mount, f"{fstype} ({dev} on {mount})"
                    name = os.path.basename(dev)
                    if fstype in ("ext3", "ext4") and os.path.isdir("/proc/fs/jbd2"):
                        journaled = any(e.startswith(name + "-") for e in os.listdir("/proc/fs/jbd2"))
                        kind = f"{fstype} {'with' if journaled else 'without'} a journal ({dev} on {mount})"
    except OSError:
        pass
    return kind
