"""The power-loss crash-state explorer: record a store's file-system calls, list what a power cut may leave.

Modules, in the order data flows through them (README.md has a whole
session for a third-party store):

* `trace` — `Op` and `Trace`: the recorded calls, the starting files, marks.
* `recorder` — `RecordingDisk`: the store's disk seam, doing and recording each call.
* `model` — the file-system model (its docstring states it) and the crash
  states one crash point allows.
* `explore` — `explore(trace)`: every distinct crash state, enumerated whole
  where small, sampled with a fixed seed where not.
* `scenarios`, `check` — PolyLoop's own sessions and its checker.
"""
