"""Run PolyLoop's benchmarks and print their table.

    python benchmarks/run.py            # the full run (a few minutes)
    python benchmarks/run.py --quick    # CI size: checks that every benchmark runs
    python benchmarks/run.py --update-docs   # full run, then rewrite docs/performance.md's table

Each figure runs in its own child process (clean memory figures, no state
shared between figures). The peers (LangGraph, DBOS) run under the Python of
a separate environment that has them (`--peers-python`, by default
`.venv-peers/bin/python` when it exists), so PolyLoop's users never install
them; without one, that figure is skipped with a message.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import Section, filesystem, machine  # noqa: E402

FIGURES = ("steps", "peers", "read", "concurrency", "loop")
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- benchmark:begin -->", "<!-- benchmark:end -->"


def _figure(name: str, workdir: str, quick: bool) -> list[Section]:
    modules = {"steps": "steps", "peers": "peers", "read": "readside", "concurrency": "concurrency",
               "loop": "loopcpu"}
    if name not in modules:
        raise SystemExit(f"unknown figure {name!r}; choose from {', '.join(FIGURES)}")
    module = importlib.import_module(f"benchmarks.{modules[name]}")
    start = time.perf_counter()
    sections = module.measure(workdir, quick=quick)
    for section in sections:
        section.seconds = time.perf_counter() - start
    return sections


def _child(python: str, name: str, workdir: str, quick: bool, timeout: float) -> list[Section]:
    cmd = [python, str(Path(__file__).resolve()), "--child", name, "--dir", workdir]
    if quick:
        cmd.append("--quick")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return [Section(key=name, title=name, skipped=f"did not finish within {timeout:.0f} s")]
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise SystemExit(f"benchmark {name!r} failed (exit {proc.returncode}):\n" + "\n".join(tail))
    sections = [Section.from_json(d) for d in json.loads(proc.stdout.strip().splitlines()[-1])]
    for s in sections:
        s.seconds = time.perf_counter() - start
    return sections


def _peers_python(explicit: str | None) -> str:
    if explicit:
        return explicit
    env = os.environ.get("POLYLOOP_PEERS_PYTHON")
    if env:
        return env
    candidate = ROOT / ".venv-peers" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def render(sections: list[Section], info: dict[str, str], command: str, elapsed: float, *, quick: bool = False) -> str:
    out = [
        f"Command: `{command}` — {elapsed:.0f} s in all, on {info['date']}.",
        "",
        f"Machine: {info['cpus']} CPUs ({info['cpu']}), {info['memory']} memory, "
        f"{info['filesystem']}, Linux {info['kernel']}, Python {info['python']}, orjson {info['orjson']}; "
        f"load average {info.get('load', '?')} when the run started (the machine is shared).",
        "",
    ]
    for s in sections:
        out.append(s.render())
    targets = [(s, t) for s in sections for t in s.targets]
    if targets:
        out += ["### Targets", "", "| target | this run | limit | met |", "|---|---:|---:|---|"]
        for _, t in targets:
            sign = "≥" if t.higher_is_better else "≤"
            met = "not judged (--quick)" if quick else "yes" if t.met else "**no**"
            out.append(f"| {t.name} | {t.value:.2f} | {sign} {t.limit:g} | {met} |")
        out.append("")
        if quick:
            out += ["`--quick` checks that every benchmark runs; its sizes are too small to judge targets.", ""]
    return "\n".join(out)


def update_docs(table: str) -> None:
    text = DOC.read_text()
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC} lacks the {BEGIN} ... {END} markers")
    DOC.write_text(f"{head}{BEGIN}\n\n{table}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CI-size runs (seconds, not minutes)")
    parser.add_argument("--only", action="append", choices=FIGURES, help="run only this figure (repeatable)")
    parser.add_argument("--dir", help="where the logs go (default: a fresh temporary directory)")
    parser.add_argument("--peers-python", help="the Python that has the peers installed")
    parser.add_argument("--json", metavar="PATH", help="also write the sections as JSON to PATH")
    parser.add_argument("--update-docs", action="store_true", help=f"rewrite the table in {DOC.relative_to(ROOT)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        sections = _figure(args.child, args.dir, args.quick)
        print(json.dumps([s.to_json() for s in sections]))
        return 0

    base = args.dir or tempfile.gettempdir()
    workdir = tempfile.mkdtemp(prefix="polyloop-bench-", dir=base)
    info = machine()
    info["filesystem"] = filesystem(workdir)
    peers_python = _peers_python(args.peers_python)
    timeout = 300.0 if args.quick else 900.0
    start = time.perf_counter()
    sections: list[Section] = []
    try:
        for name in args.only or FIGURES:
            python = peers_python if name == "peers" else sys.executable
            print(f"running {name} ...", file=sys.stderr, flush=True)
            sections += _child(python, name, workdir, args.quick, timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - start
    command = "python benchmarks/run.py" + (" --quick" if args.quick else "")
    if args.only:
        command += "".join(f" --only {n}" for n in args.only)
    table = render(sections, info, command, elapsed, quick=args.quick)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "sections": [s.to_json() for s in sections]}, indent=2))
    if args.update_docs:
        if args.quick or args.only:
            raise SystemExit("--update-docs publishes full runs only (no --quick, no --only)")
        update_docs(table)
        print(f"updated {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
