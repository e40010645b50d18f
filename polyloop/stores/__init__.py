"""Store implementations. `JsonlStore` is the embedded default."""

from .._codec import ParsedLog, parse_log
from ._jsonl import JsonlStore

__all__ = ["JsonlStore", "ParsedLog", "parse_log"]
