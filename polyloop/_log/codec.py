"""A log's bytes as records: one JSON record per line, a torn tail, corruption.

The rules are those of docs/reference/log-format.md ("Reading: torn tails and
corruption"). A write cut short by a crash leaves a prefix of one record at
the end of the file, and a prefix of a record line never ends with the
line's newline. So only the final segment *without* a newline can be a torn
tail; every newline-terminated line that does not decode is corruption,
wherever it stands, the last line included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from .errors import CorruptLogError, Problem, SchemaVersionError
from .decode import decode
from .gc_pause import paused_gc
from .records import Record, RecordError, UnknownSchemaError


@dataclass(slots=True)
class ParsedLog:
    """What a log holds, read without judging the run.

    `records` and `lines` (1-based line numbers) are parallel. `torn_line` is
    the line of a torn tail (None if there is none) and `torn_offset` its
    byte offset: everything from there on was never acknowledged.
    `problems` lists corruption, each with its line (or no line when the
    file as a whole is unreadable as a log); `schema_version` is set when the
    log's major version is unknown.
    """

    records: list[Record] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    torn_line: int | None = None
    torn_offset: int | None = None
    problems: list[Problem] = field(default_factory=list)
    schema_version: object = None

    def records_or_raise(self, run_id: str | None) -> list[Record]:
        """The records, if the log has no problems; else the error a reader raises.

        Raises:
            SchemaVersionError: the log's major schema version is unknown.
            CorruptLogError: any other problem (a line that does not decode
                and is not a torn tail, a line that is not a valid record).
        """
        if self.schema_version is not None:
            raise SchemaVersionError(run_id, self.schema_version)
        if self.problems:
            raise CorruptLogError(run_id, self.problems)
        return self.records

    def locate(self, problem: Problem) -> Problem:
        """`problem` (found in `records`, e.g. by the classifier) with its line number."""
        if problem.line is None and problem.index is not None and problem.index < len(self.lines):
            return Problem(problem.message, index=problem.index, line=self.lines[problem.index], rule=problem.rule)
        return problem


def parse_log(data: bytes) -> ParsedLog:
    """Split a log's bytes into records, a torn tail and corruption.

    Blank lines (only spaces, tabs, CR) are skipped. The final segment after
    the last newline is the torn tail, even when it happens to decode: every
    record is written with its newline in one write, so a record without it
    was never acknowledged. A
    newline-terminated line that does not decode is corruption, reported once
    at its own line, and so is a line that decodes as JSON but is not a valid
    record; a line of NUL bytes ended by a newline is corruption too (a power
    cut leaves NULs only in the unterminated tail). Records on the lines
    after a corrupt one are still returned, for display; a log with
    `problems` must not be resumed.

    Not guaranteed: that the records form a valid run; that is the
    classifier's job.
    """
    with paused_gc():
        return _parse(data)


def _parse(data: bytes) -> ParsedLog:
    out = ParsedLog()
    loads = orjson.loads
    JSONDecodeError = orjson.JSONDecodeError
    records, numbers, problems = out.records, out.lines, out.problems
    lines = data.split(b"\n")
    last = len(lines) - 1  # the segment after the last newline (empty when the file ends with one)
    tail = lines[last]
    if tail.strip():  # an unterminated final segment: a write cut off by a crash
        out.torn_line = last + 1
        out.torn_offset = len(data) - len(tail)
        lines.pop()
    for index, line in enumerate(lines):
        try:
            obj = loads(line)
        except JSONDecodeError:
            if not line.strip():  # blank (orjson refuses an empty document)
                continue
            problems.append(Problem(_undecodable(line), line=index + 1))
            continue
        try:
            record = decode(obj)
        except UnknownSchemaError as exc:
            out.schema_version = exc.version
            problems.append(Problem(str(exc), line=index + 1))
            continue
        except RecordError as exc:
            problems.append(Problem(str(exc), line=index + 1))
            continue
        records.append(record)
        numbers.append(index + 1)
    return out


def _undecodable(line: bytes) -> str:
    if not line.strip(b"\x00"):
        return "a whole line of NUL bytes (data lost before this point, not a torn tail)"
    return "a complete line that is not valid JSON (a torn write cannot end with a newline)"
