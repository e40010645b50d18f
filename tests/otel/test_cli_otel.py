"""`--otel` refusals: without the extra, and with an exporter or protocol the extra does not ship (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.cli import clean_env, polyloop

AGENT = str(Path(__file__).with_name("agents.py")) + ":agent"


def test_otel_without_the_extra_is_bad_usage_and_an_env_variable_alone_only_warns(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['polyloop.otel'] = None\n"  # as if polyloop[otel] were not installed
            "from polyloop_cli.entry import main\n"
            "sys.argv = ['polyloop', *sys.argv[1:]]\n"
            "main()\n")
    args = ["run", AGENT, "--goal", "g", "--dir", str(tmp_path / "runs")]
    done = subprocess.run([sys.executable, "-c", code, *args, "--run-id", "a", "--otel"], capture_output=True,
                          text=True, env=clean_env(), timeout=60)
    assert done.returncode == 2 and "pip install 'polyloop[otel]'" in done.stderr
    assert not (tmp_path / "runs" / "a.jsonl").exists()
    warned = subprocess.run([sys.executable, "-c", code, *args, "--run-id", "b"], capture_output=True, text=True,
                            env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"), timeout=60)
    assert warned.returncode == 0 and "polyloop[otel] is not installed" in warned.stderr


def test_a_grpc_exporter_is_refused(tmp_path: Path) -> None:
    done = polyloop("run", AGENT, "--goal", "g", "--run-id", "c", "--dir", str(tmp_path / "runs"), "--otel",
                    env=clean_env(OTEL_EXPORTER_OTLP_PROTOCOL="grpc"))
    assert done.code == 2 and "http/protobuf" in done.stderr
