"""What the pages show, in words and colours, from the library's reports (`inspect --json`, `ls --json`).

Nothing here decides anything: it arranges a `RunReport`'s document for the
templates. Every string from a model, a tool or a log stays data: the
templates autoescape it, and it is never used as a template.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import orjson

# Each execution state in words (docs/reference/log-format.md, "The four states of an execution").
STATE_WORDS = {
    "done": "done: its result is recorded",
    "resolved": "settled by a person (or its reconcile)",
    "unknown": "unknown: the intent is recorded, the outcome is not",
    "superseded": "unknown, then replaced by a later attempt",
    "pending": "not started: its precondition was never checked",
    "alert": "alert: its verification failed and nothing undid it",
    "rolled_back": "undone by its rollback",
}
STATUS_WORDS = {
    "finished": "finished",
    "needs_operator": "waits for a person",
    "resumable": "stopped: resume continues it",
    "corrupt": "corrupt log",
    "active": "running",
}
# The four states (docs/reference/log-format.md): where each display state belongs. The fourth,
# impossible, is a record a correct writer cannot produce: the log's problems count it.
FOUR = {"done": ("done", "resolved", "rolled_back"), "not started": ("pending",),
        "unknown": ("unknown", "alert", "superseded")}


def shown_json(value: Any) -> str:
    """`value` as indented JSON, keys in the order the model gave them."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        return repr(value)


def run_view(doc: dict[str, Any], seen: int) -> dict[str, Any]:
    """The run page's context from `RunReport.to_json()` and the log's length it was read at."""
    requests = {r["id"]: r for r in doc.get("requests", [])}
    waiting = []
    for w in doc["waiting"]:
        entry = dict(w, args_json=shown_json(w.get("args")), sha256=None)
        if w["id"] in requests:
            entry["sha256"] = requests[w["id"]]["args_sha256"]
            entry["asked_at"] = requests[w["id"]]["at"]
        waiting.append(entry)
    steps: dict[int, list[dict[str, Any]]] = {}
    counts = dict.fromkeys(FOUR, 0)
    for e in doc.get("executions", []):
        e = dict(e, words=STATE_WORDS.get(e["state"], e["state"]), args_json=shown_json(e.get("args")))
        steps.setdefault(e.get("step") or 0, []).append(e)
        for name, states in FOUR.items():
            if e["state"] in states:
                counts[name] += 1
    counts["impossible"] = len(doc.get("problems", []))
    decided = [dict(r, args_json=shown_json(r["args"])) for r in doc.get("requests", []) if r["decision"]]
    return {
        "doc": doc,
        "status_words": STATUS_WORDS.get(doc["status"], doc["status"]),
        "waiting": waiting,
        "steps": sorted(steps.items()),
        "counts": counts,
        "decided": decided,
        "seen": seen,
        "differences": (doc.get("validity") or {}).get("differences") or [],
        "not_checked": (doc.get("validity") or {}).get("not_checked"),
    }


def ago(at: str | None, now: datetime | None = None) -> str:
    """How long ago ISO time `at` was, in words (`3 min`, `2 h 5 min`, `4 d`); "" when unknown."""
    try:
        then = datetime.fromisoformat((at or "").replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = max(0, int(((now or datetime.now(timezone.utc)) - then).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours < 48 else f"{hours // 24} d"


def runs_view(summaries: list[Any]) -> list[dict[str, Any]]:
    """The runs page's rows from `list_runs`' summaries."""
    rows = []
    for s in summaries:
        doc = s.to_json()
        doc["ago"] = ago(s.updated)
        doc["status_words"] = STATUS_WORDS.get(doc["status"], doc["status"])
        doc["waits_words"] = [f"{w['kind']} {w.get('tool') or ''} ({w['id']})".replace("  ", " ") for w in s.waits]
        rows.append(doc)
    return rows
