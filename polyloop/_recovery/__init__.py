"""Pure recovery: records → the walker → a verdict → the planner's next move. No I/O, no asyncio,
no store: the writer and every reader (resume, inspect, verify) walk a log through the same code."""
