"""A real full disk, driven from inside a private user+mount namespace.

    unshare -rm python tests/crash/full_disk.py ROOT

Mounts a small tmpfs as the run directory, runs the agent through the CLI
with a tool that fills that file system to the last byte right after its
side effect, so the next record (a large step record) is cut short by the
kernel and then refused with ENOSPC. Then it checks that the run stopped
with a clear error and left a clean log, frees the space, resumes through
the CLI and audits the result. Everything happens in this process's
namespace (the tmpfs is gone when it exits), so the checks run here; the
exit status and the last line of stdout (JSON) report the outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

import crashkit as ck  # noqa: E402
from polyloop.stores import parse_log  # noqa: E402

BIG = "8000"  # bytes of observation: more than the slack left in the log's last page


def main(root: Path) -> dict:
    golden = ck.golden_run(root / "golden", extra_env={"POLYLOOP_BIG": BIG})
    w = ck.World(root / "full", extra_env={"POLYLOOP_BIG": BIG})
    w.dir.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(w.dir)], check=True)
    p = w.run(env={"POLYLOOP_AT_EFFECT": "1:fill-disk"})
    assert p.code == 1 and "No space left on device" in p.err and str(w.log_path) in p.err, str(p)
    data = w.log_path.read_bytes()
    parsed = parse_log(data)
    assert not parsed.problems and parsed.torn_line is None and data.endswith(b"\n"), parsed
    assert [r.TAG for r in parsed.records][-1] == "intent"  # the step record did not land, not even half
    os.unlink(w.dir / "filler")  # the operator frees the space
    w.verify()
    w.recover()
    ck.audit(golden, w, ck.expect(golden, "before:step_completed:1"))
    return {"processes": w.processes + 1, "tracebacks": w.tracebacks()}


if __name__ == "__main__":
    try:
        result = {"ok": True, **main(Path(sys.argv[1]))}
    except Exception:
        result = {"ok": False, "error": traceback.format_exc()}
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
