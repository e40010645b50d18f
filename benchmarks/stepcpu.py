"""Where an in-memory step's CPU goes: cProfile shares scaled to the unprofiled CPU per step.

    python benchmarks/stepcpu.py 2000      # from the repository's root; prints one JSON object

The benchmarks' workload (`ScriptedModel`, the trivial async tool) on `MemoryStore`: the CPU per
step without the profiler (the best of three runs), split by each part's share of one profiled run.
cProfile's per-call overhead inflates parts made of many small calls, so the parts are rough; the
total is not. Run it on two versions alternately to compare them (benchmarks/README.md).
"""
import asyncio, sys, time, cProfile, pstats, json
sys.path.insert(0, '.')
from benchmarks._common import scripted_outputs, lookup_tool
from polyloop import Agent, ScriptedModel
from polyloop.testing import MemoryStore
n = int(sys.argv[1])
async def one(i):
    agent = Agent(model=ScriptedModel(scripted_outputs(n)), tools=[lookup_tool()], max_steps=n + 1)
    c = time.process_time()
    await agent.run("go", run_id=f"r{i}", store=MemoryStore())
    return (time.process_time() - c) / n
asyncio.run(one(0))
cpu = min(asyncio.run(one(i)) for i in range(1, 4))
pr = cProfile.Profile(); pr.enable(); asyncio.run(one(9)); pr.disable()
st = pstats.Stats(pr).stats
def cum(pred):
    return sum(v[3] for (f, l, name), v in st.items() if pred(f, name))
total = cum(lambda f, n: f.endswith("loop.py") and n == "go")
parts = {
    "walker: feeding the four records": cum(lambda f, n: f.endswith("walker.py") and n == "feed"),
    "store: encoding and appending (MemoryStore)": cum(lambda f, n: f.endswith("_memory.py") and n == "_append_records"),
    "planner": cum(lambda f, n: f.endswith("plan.py") and n == "plan"),
    "the model (ScriptedModel.complete)": cum(lambda f, n: f.endswith("model_port.py") and n == "complete"),
    "arguments checked against the schema": cum(lambda f, n: f.endswith("tools.py") and n == "check_args"),
    "the tool's call (invoke, observation)": cum(lambda f, n: f.endswith("invoke.py") and n == "invoke"),
    "the idempotency key (the loop's derivation)": cum(lambda f, n: f.endswith("ids.py") and n == "idempotency_key") - cum(lambda f, n: f.endswith("on_keys.py") and n == "_derived_key"),
    "record objects built (frozen dataclasses, timestamps)": cum(lambda f, n: f == "<string>" and n == "__init__"),
    "the tool's context (ToolContext, Artifacts)": cum(lambda f, n: f.endswith("loop.py") and n == "_context"),
}
out = {k: v / total * cpu * 1e6 for k, v in parts.items()}
out["the rest: the loop's own code, coroutines, the writer's turn"] = cpu * 1e6 - sum(out.values())
out["total (CPU per step, unprofiled)"] = cpu * 1e6
print(json.dumps(out))
