"""Draw docs/figures/four-states.svg: the four states of an execution and the moves between them.

    python docs/figures/four_states.py           # rewrite the figure
    python docs/figures/four_states.py --check   # exit 1 if the committed figure differs

The figure is data, not a drawing: edit the boxes and moves below, then run this script
(tests/docs/test_doc_figures.py fails when the committed SVG is not what it writes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from xml.sax.saxutils import escape

FIGURE = Path(__file__).with_name("four-states.svg")
WIDTH, HEIGHT = 820, 470

# name: (x, y, width, height, what the log holds, fill, stroke, dashed)
BOXES = {
    "not started": (30, 150, 170, 56, "no intent", "#eef2f7", "#5b6b7f", False),
    "unknown": (325, 150, 170, 56, "an intent, no result", "#fff4d6", "#b58100", False),
    "done": (620, 150, 170, 56, "an intent and its result", "#e3f4e6", "#2e7d32", False),
    "waits for an operator": (300, 290, 220, 50, "unknown, and a `never` tool", "#ffffff", "#b58100", True),
    "impossible": (30, 390, 170, 56, "a result, no intent", "#fde7e7", "#c62828", False),
}

# (path, label lines, label x, label y, text-anchor)
MOVES = [
    ("M200,178 L321,178", ["intent", "made durable"], 262, 158, "middle"),
    ("M495,178 L616,178", ["result", "made durable"], 557, 158, "middle"),
    ("M410,150 C410,60 115,60 115,146", ["crash, then resume: a model call or a `safe` tool",
                                         "is re-issued as a new attempt"], 262, 46, "middle"),
    ("M410,206 L410,286", ["crash, then resume:", "a `never` tool stops", "the run (exit 3)"], 420, 228, "start"),
    ("M520,315 L702,210", ["mark-resolved --executed:", "shown as resolved; the operator's",
                           "observation is its result"], 556, 296, "start"),
    ("M300,315 L118,210", ["mark-resolved --not-executed:", "shown as resolved; resume runs",
                           "it again as a new attempt"], 30, 296, "start"),
]

NOTES = [
    (705, 118, "middle", "resume reuses it from the log:"),
    (705, 134, "middle", "never runs it again"),
    (215, 412, "start", "a record no correct writer could have written: resume and verify refuse"),
    (215, 428, "start", "the log (exit 1), and nothing repairs it"),
]

TITLE = "An execution's four states in the log, and what moves it from one to another"


def _text(x: float, y: float, text: str, *, anchor: str = "middle", size: int = 12, weight: str = "normal") -> str:
    return (f'<text x="{x}" y="{y}" text-anchor="{anchor}" font-size="{size}" font-weight="{weight}">'
            f"{escape(text)}</text>")


def render() -> str:
    """The SVG, as text: the same bytes on every run."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif" fill="#1f2933">',
        f"<title>{escape(TITLE)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#1f2933"/></marker></defs>',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        _text(WIDTH / 2, 20, TITLE, size=14, weight="bold"),
        f'<line x1="20" y1="372" x2="{WIDTH - 20}" y2="372" stroke="#c0c8d2" stroke-dasharray="4 4"/>',
    ]
    for name, (x, y, w, h, holds, fill, stroke, dashed) in BOXES.items():
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="10" fill="{fill}" stroke="{stroke}" '
                   f'stroke-width="2"{dash}/>')
        out.append(_text(x + w / 2, y + 23, name, size=15, weight="bold"))
        out.append(_text(x + w / 2, y + 41, holds))
    for path, lines, lx, ly, anchor in MOVES:
        out.append(f'<path d="{path}" fill="none" stroke="#1f2933" stroke-width="1.5" marker-end="url(#arrow)"/>')
        out.extend(_text(lx, ly + 16 * n, line, anchor=anchor) for n, line in enumerate(lines))
    out.extend(_text(x, y, text, anchor=anchor) for x, y, anchor, text in NOTES)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        if FIGURE.read_text(encoding="utf-8") != render():
            print(f"{FIGURE} is out of date: run python {Path(__file__).as_posix()}", file=sys.stderr)
            return 1
        return 0
    FIGURE.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
