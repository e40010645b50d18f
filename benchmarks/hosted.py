"""The CPU a hosted model's call costs this process: a TLS context per call against one per process.

    python benchmarks/hosted.py              # 6 alternating rounds of 40 calls each way
    python benchmarks/hosted.py --quick      # 2 rounds of 5 calls: checks that it runs

Every call of `OpenAIModel` (and `AnthropicModel`) opens a fresh SDK client,
so a model can be used from any event loop. The HTTP library builds a TLS
context for each new client unless it is given one, loading the whole CA
bundle each time; `polyloop._run.provider` hands every client the process's
one context instead. Both ways run here side by side, alternating, against
the fake OpenAI server over a real socket (whose threads are in this process:
their CPU is counted both ways). The table gives the CPU time per call,
median of the rounds, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from polyloop._run import provider as hosted  # noqa: E402
from polyloop.openai import OpenAIModel  # noqa: E402
from polyloop.testing import FakeOpenAIServer, FakeResponse  # noqa: E402

HISTORY = [{"role": "user", "content": "weather in Oslo?"}]
SHARED = hosted._fresh_http_client


async def cpu_per_call(calls: int, *, shared: bool) -> float:
    """Milliseconds of this process's CPU per `complete()`, with the one context or a context per call."""
    hosted._fresh_http_client = SHARED if shared else (lambda sdk: None)  # None: the SDK builds its own
    try:
        with FakeOpenAIServer([FakeResponse.final("ok")] * calls) as server:
            model = OpenAIModel(model="fake-model", base_url=server.base_url, api_key="k")
            started = time.process_time()
            for _ in range(calls):
                await model.complete(HISTORY, [])
            return (time.process_time() - started) / calls * 1e3
    finally:
        hosted._fresh_http_client = SHARED


async def main(rounds: int, calls: int) -> None:
    await cpu_per_call(2, shared=False)  # warm both ways: imports, the one context
    await cpu_per_call(2, shared=True)
    each: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for shared in (False, True):
            each[shared].append(await cpu_per_call(calls, shared=shared))
    own, one = statistics.median(each[False]), statistics.median(each[True])
    print(f"| way | CPU per model call | against a context per call |\n|---|---:|---:|\n"
          f"| a TLS context built per call (the SDK's default) | {own:.1f} ms | 1.00x |\n"
          f"| the process's one TLS context (shipped) | {one:.1f} ms | {one / own:.2f}x |")
    print(f"{rounds} alternating rounds of {calls} calls each way; medians.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 5 calls: checks that it runs")
    quick = parser.parse_args().quick
    asyncio.run(main(2 if quick else 6, 5 if quick else 40))
