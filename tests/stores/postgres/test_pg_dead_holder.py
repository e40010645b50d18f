"""A lease whose holder is a dead process of this host is taken over at once, fenced like any takeover."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from test_pg_ls import polyloop

from polyloop.stores import PostgresStore
from support import ROOT

DEMO = str(ROOT / "examples" / "demo.py") + ":agent"


def test_a_killed_run_resumes_at_once_not_when_its_lease_lapses(own_db, tmp_path):
    crashed = polyloop("run", DEMO, "--run-id", "k", "--goal", "g", "--store", own_db, cwd=tmp_path,
                       env={"POLYLOOP_DEMO_CRASH": "1"})
    assert crashed.code == -9, crashed
    started = time.monotonic()
    resumed = polyloop("resume", "k", "--store", own_db, cwd=tmp_path)
    assert resumed.code == 3, resumed  # the unknown write_file waits for a person: the run was taken over
    assert time.monotonic() - started < 10, "it waited for the dead holder's 15 s lease"
    assert "is active" not in resumed.stderr


async def test_a_live_holder_elsewhere_or_here_is_never_taken_over(own_db):
    run_id = f"live-{uuid.uuid4().hex[:8]}"
    here = PostgresStore(own_db, lease=30)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for name in (f"pid {sleeper.pid} on {os.uname().nodename}", "pid 1 on another-host", "a worker of ours"):
            holder = PostgresStore(own_db, lease=30, name=name)
            lease = await holder.claim(run_id)
            try:
                with pytest.raises(Exception, match="active"):
                    await here.claim(run_id)
            finally:
                await holder._release(lease, None)
                await holder.aclose()
        sleeper.kill()
        sleeper.wait()
        dead = PostgresStore(own_db, lease=30, name=f"pid {sleeper.pid} on {os.uname().nodename}")
        first = await dead.claim(run_id)
        taken = await here.claim(run_id)  # its holder is gone: no waiting for the lease
        assert taken.epoch == first.epoch + 1 and taken.taken_over_from == dead.name
        await here._release(taken, None)
        await dead.aclose()
    finally:
        sleeper.kill()
        sleeper.wait()
        await here.aclose()
