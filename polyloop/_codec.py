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

from ._errors import Problem
from ._records import Record, RecordError, UnknownSchemaError, decode, paused_gc


@dataclass(slots=True)
class ParsedLog:
    """What a log holds, read without judging the run.

    `records` and `lines` (1-based line numbers) are parallel. `torn_line` is
    the line of a torn tail (None if there is none) and `torn_offset` its
    byte offset: everything from there on was never acknowledged.
    `problems` lists corruption, each with its line (or no line when the
    file as a whole is unreadable as a log); `schema_version` is set when the
    log's major version is unknown. `ends_without_newline` says the last
    line is a whole record whose newline is missing (a writer adds it before
    appending).
    """

    records: list[Record] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    torn_line: int | None = None
    torn_offset: int | None = None
    problems: list[Problem] = field(default_factory=list)
    schema_version: object = None
    ends_without_newline: bool = False

    def locate(self, problem: Problem) -> Problem:
        """`problem` (found in `records`, e.g. by the classifier) with its line number."""
        if problem.line is None and problem.index is not None and problem.index < len(self.lines):
            return Problem(problem.message, index=problem.index, line=self.lines[problem.index])
        return problem


def parse_log(data: bytes) -> ParsedLog:
    """Split a log's bytes into records, a torn tail and corruption.

    Blank lines (only spaces, tabs, CR) are skipped. The final segment after
    the last newline, if it does not decode, is the torn tail. A
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
    first_bad: int | None = None  # index into lines
    for index, line in enumerate(lines):
        try:
            obj = loads(line)
        except JSONDecodeError:
            if first_bad is None and line.strip():  # blank lines are skipped
                first_bad = index
            continue
        if first_bad is not None:
            problems.append(
                Problem(f"line {first_bad + 1} does not decode but a later line does", line=index + 1)
            )
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
    # Only the last piece of the split lacks a newline after it.
    out.ends_without_newline = bool(numbers) and numbers[-1] == len(lines)
    if first_bad is not None and not problems:
        out.torn_line = first_bad + 1
        out.torn_offset = sum(map(len, lines[:first_bad])) + first_bad
        out.ends_without_newline = False
    return out
