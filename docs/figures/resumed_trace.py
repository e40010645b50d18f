"""Draw docs/figures/resumed-trace.svg: a crashed-and-resumed run as a tracing tool shows it.

    python docs/figures/resumed_trace.py --capture   # crash, settle and resume the demo; keep its trace
    python docs/figures/resumed_trace.py             # redraw the figure from the kept trace
    python docs/figures/resumed_trace.py --check     # exit 1 if the committed figure differs

The trace is real: `--capture` runs `polyloop run` of the demo until it kills itself in
`write_file`, settles that write with `polyloop mark-resolved`, resumes, and keeps what
`polyloop trace RUN --json` prints in resumed-trace.json. The drawing is made from that file alone
(tests/docs/test_doc_figures.py fails when the committed SVG is not what it writes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

FIGURE = Path(__file__).with_name("resumed-trace.svg")
TRACE = Path(__file__).with_name("resumed-trace.json")
WIDTH, ROW, TOP, LABELS, GAP = 900, 22, 84, 330, 56
SEGMENT = (WIDTH - LABELS - GAP - 20) // 2  # each process gets the same width: a crash is no time scale
COLORS = {"invoke_agent": ("#e8f0fb", "#3b6fb6"), "chat": ("#f1eafb", "#7048a8"), "execute_tool": ("#e3f4e6", "#2e7d32")}
CUT = ("#fde7e7", "#c62828")


def capture() -> None:
    """Run the demo's crash, settle it, resume it, and keep the trace (`polyloop trace --json`)."""
    polyloop = str(Path(sys.executable).with_name("polyloop"))
    # Traced live (`--otel`), exporting nowhere: the log records the trace context, as it does for you.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "OTEL_"))}
    env |= {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
    with tempfile.TemporaryDirectory() as work:
        def run(*args: str, **more: str) -> str:
            done = subprocess.run([polyloop, *args], cwd=work, env=env | more, capture_output=True, text=True)
            return done.stdout

        run("run", "polyloop.examples.demo:agent", "--run-id", "notes", "--goal", "write up the notes", "--otel",
            POLYLOOP_DEMO_CRASH="1")
        run("mark-resolved", "notes", "s2-a1", "--executed", "--observation", "wrote 188 bytes to notes.txt",
            "--reason", "notes.txt is there")
        run("resume", "notes", "--otel")
        TRACE.write_text(json.dumps(json.loads(run("trace", "notes", "--json")), indent=1) + "\n")


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: int = 12, weight: str = "normal",
          fill: str = "#1f2933") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" font-weight="{weight}" '
            f'fill="{fill}">{escape(text)}</text>')


def _rows(doc: dict) -> list[tuple[dict, int]]:
    """The spans in tree order, each with its depth (a tracing tool's waterfall)."""
    ids = {s["span_id"] for s in doc["spans"]}
    children: dict[str | None, list[dict]] = {}
    for s in doc["spans"]:
        children.setdefault(s["parent_span_id"] if s["parent_span_id"] in ids else None, []).append(s)
    out: list[tuple[dict, int]] = []

    def walk(span: dict, depth: int) -> None:
        out.append((span, depth))
        for child in children.get(span["span_id"], []):
            walk(child, depth + 1)

    for root in children.get(None, []):
        walk(root, 0)
    return out


def render() -> str:
    """The SVG, as text: the same bytes on every run."""
    doc = json.loads(TRACE.read_text())
    rows = _rows(doc)
    processes = sorted((s for s in doc["spans"] if s["name"].startswith("invoke_agent")),
                       key=lambda s: s["start_unix_nano"])
    spans_of = {p["span_id"]: p for p in processes}
    x0 = {p["span_id"]: LABELS + k * (SEGMENT + GAP) for k, p in enumerate(processes)}

    def process_of(span: dict) -> dict:
        return span if span["span_id"] in spans_of else spans_of.get(span["parent_span_id"], processes[0])

    def x(span: dict, nanos: int) -> float:
        p = process_of(span)
        length = max(p["end_unix_nano"] - p["start_unix_nano"], 1)
        return x0[p["span_id"]] + SEGMENT * (nanos - p["start_unix_nano"]) / length

    events = [(e, p) for p in processes for e in p["events"]]
    height = TOP + ROW * len(rows) + 40 + 18 * len(events) + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif">',
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
           _text(20, 26, "One run, one trace: killed in write_file, settled by a person, resumed", size=15, weight="bold"),
           _text(20, 46, f"trace {doc['trace_id']} of run {doc['run_id']}, rebuilt by `polyloop trace` "
                         "(the same spans `--otel` sends live); each process drawn to its own time scale", size=11, fill="#52606d")]
    for k, p in enumerate(processes):
        label = "the first process (killed)" if k == 0 else f"resume {k}"
        out.append(_text(x0[p["span_id"]] + SEGMENT / 2, TOP - 6, label, anchor="middle", size=11, fill="#52606d"))
    if len(processes) > 1:
        mid = LABELS + SEGMENT + GAP / 2
        out.append(f'<path d="M{mid - 6},{TOP} L{mid + 6},{TOP + ROW * len(rows)}" stroke="#9aa5b1" '
                   f'stroke-dasharray="4 3" fill="none"/>')
        out.append(_text(mid, TOP + ROW * len(rows) + 14, "crash", anchor="middle", size=10, fill="#9aa5b1"))
    for i, (span, depth) in enumerate(rows):
        y = TOP + i * ROW
        kind = span["attributes"].get("gen_ai.operation.name", "")
        fill, stroke = CUT if span["error_type"] else COLORS.get(kind, COLORS["invoke_agent"])
        note = f"  [{span['error_type']}]" if span["error_type"] else ""
        out.append(_text(20 + 16 * depth, y + 15, span["name"] + note, size=12,
                         fill=CUT[1] if span["error_type"] else "#1f2933"))
        left, right = x(span, span["start_unix_nano"]), x(span, span["end_unix_nano"])
        out.append(f'<rect x="{left:.1f}" y="{y + 4}" width="{max(right - left, 3):.1f}" height="{ROW - 8}" '
                   f'rx="2" fill="{fill}" stroke="{stroke}"/>')
        if span["events"]:  # a process span's events: listed below the waterfall
            out.append(f'<circle cx="{left:.1f}" cy="{y + ROW / 2}" r="3.5" fill="#b58100"/>')
    y = TOP + ROW * len(rows) + 40
    out.append(_text(20, y, "What the resume found, as events on its span (nothing reused is a span again):",
                     size=12, weight="bold"))
    for j, (e, _p) in enumerate(events):
        attrs = e["attributes"]
        what = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in attrs.items()
                         if k in ("polyloop.result.id", "polyloop.recovery.verdict", "polyloop.execution.state",
                                  "polyloop.resolution.source"))
        out.append(f'<circle cx="26" cy="{y + 14 + 18 * j}" r="3.5" fill="#b58100"/>')
        out.append(_text(36, y + 18 + 18 * j, f"{e['name']}  {what}", size=12))
    legend_y = height - 22
    for k, (label, (fill, stroke)) in enumerate([("invoke_agent", COLORS["invoke_agent"]), ("chat", COLORS["chat"]),
                                                 ("execute_tool", COLORS["execute_tool"]), ("cut by the crash", CUT)]):
        lx = 20 + k * 170
        out.append(f'<rect x="{lx}" y="{legend_y - 10}" width="14" height="12" fill="{fill}" stroke="{stroke}"/>')
        out.append(_text(lx + 20, legend_y, label, size=11))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if "--capture" in argv:
        capture()
    svg = render()
    if "--check" in argv:
        return 0 if FIGURE.exists() and FIGURE.read_text(encoding="utf-8") == svg else 1
    FIGURE.write_text(svg, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
