"""Store implementations. `JsonlStore` is the embedded default."""

from ._jsonl import JsonlStore, ParsedLog, parse_log

__all__ = ["JsonlStore", "ParsedLog", "parse_log"]
