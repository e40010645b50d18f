"""The machinery of the nemesis (benchmarks/nemesis.py): a throwaway server, worker processes, a network namespace.

Nothing here touches a server it did not start: the PostgreSQL is initdb'd in
a temporary directory (the `pgserver` package's binaries, run as its
`pgserver` user when we are root) on a free port, and stopped and deleted at
the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "stores" / "postgres"))
from pg_proxy import Proxy  # noqa: E402  - the tests' loopback proxy: pass, blackhole, hold replies, cut

WORKER = Path(__file__).with_name("nemesis_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A throwaway PostgreSQL in a temporary directory, listening on 127.0.0.1 (and `extra_host`)."""

    def __init__(self, *, extra_host: str | None = None) -> None:
        import pgserver  # the test extra: PostgreSQL binaries on PyPI
        from pgserver.utils import ensure_user_exists

        self.bin = Path(pgserver.__file__).parent / "pginstall" / "bin"
        self.user = None
        if os.geteuid() == 0:  # initdb refuses root
            self.user = "pgserver"
            ensure_user_exists(self.user)
        self.top = Path(tempfile.mkdtemp(prefix="polyloop-nemesis-"))
        self.top.chmod(0o777)  # the server's user writes its output files here
        self.data = self.top / "pgdata"
        self.data.mkdir()
        if self.user:
            shutil.chown(self.data, self.user, self.user)
        self.port = free_port()
        hosts = "127.0.0.1" + (f",{extra_host}" if extra_host else "")
        self._pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale")
        if extra_host:
            net = extra_host.rsplit(".", 1)[0] + ".0/24"
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {net} trust\n")
        options = f"-p {self.port} -h {hosts} -k {self.data} -c fsync=on -c max_connections=300"
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.data / "log"), "-w", "-o", options, "start")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, exe: str, *args: str) -> None:
        # Not captured: the postmaster pg_ctl starts inherits its output, and a pipe would never close.
        with open(self.top / f"{exe}.out", "ab") as out:
            subprocess.run([str(self.bin / exe), *args], check=True, user=self.user, stdout=out, stderr=out,
                           stdin=subprocess.DEVNULL, timeout=120, env={**os.environ, "LC_ALL": "C"}, cwd=self.top)

    def restart_immediate(self) -> None:
        """`pg_ctl restart -m immediate`: the server dies without a checkpoint and recovers from its WAL."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "restart")

    def close(self) -> None:
        try:
            self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.top, ignore_errors=True)


class Namespace:
    """A network namespace joined to this one by a veth pair: a worker's own "machine" whose link can go down."""

    def __init__(self) -> None:
        n = os.getpid() % 200 + 20
        self.name, self.host_if, self.ns_if = f"plnem{n}", f"plnh{n}", f"plnn{n}"
        self.host_ip, self.ns_ip = f"10.77.{n}.1", f"10.77.{n}.2"
        for cmd in (
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if],
            ["ip", "link", "set", self.ns_if, "netns", self.name],
            ["ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_if],
            ["ip", "link", "set", self.host_if, "up"],
            ["ip", "netns", "exec", self.name, "ip", "addr", "add", f"{self.ns_ip}/24", "dev", self.ns_if],
            ["ip", "netns", "exec", self.name, "ip", "link", "set", self.ns_if, "up"],
            ["ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up"],
        ):
            subprocess.run(cmd, check=True, capture_output=True)

    def link(self, up: bool) -> None:
        subprocess.run(["ip", "link", "set", self.host_if, "up" if up else "down"], check=True, capture_output=True)

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def namespaces_work() -> bool:
    """Whether this process may make network namespaces (root, with `ip`)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


class WorkerProc:
    """One nemesis worker process (benchmarks/nemesis_worker.py), respawned after a kill."""

    def __init__(self, index: int, url: str, env: dict[str, str], events: Path, *, lease: float, concurrency: int,
                 netns: str | None = None) -> None:
        self.index, self.url, self.env, self.events = index, url, env, events
        self.lease, self.concurrency, self.netns = lease, concurrency, netns
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False
        self.spawn()

    def spawn(self) -> None:
        cmd = [sys.executable, str(WORKER), self.url, str(self.lease), str(self.concurrency)]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        with open(self.events, "ab") as out, open(self.events.with_suffix(".stderr"), "ab") as err:
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=err)
        self.stopped = False
        self.killed = False
        self.born = time.monotonic()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> bool:
        if not self.alive:
            return False
        assert self.proc is not None
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            return False
        if sig == signal.SIGKILL:
            self.killed = True
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig in (signal.SIGCONT, signal.SIGKILL):
            self.stopped = False
        return True

    def stop(self, timeout: float = 30) -> None:
        if not self.alive:
            return
        assert self.proc is not None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_until(condition, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return False


__all__ = ["Namespace", "Proxy", "Server", "WorkerProc", "free_port", "namespaces_work", "wait_until"]
