"""Parsing a log's bytes (temporary bridge; the codec moves here from the JSONL store)."""

from .stores._jsonl import ParsedLog, parse_log

__all__ = ["ParsedLog", "parse_log"]
