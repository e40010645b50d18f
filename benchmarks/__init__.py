"""PolyLoop's benchmarks: run them with `python benchmarks/run.py` (see docs/performance.md)."""
