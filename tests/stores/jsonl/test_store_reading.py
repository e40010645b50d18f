"""The torn-tail rule: only an unterminated last segment is a torn tail; a complete line never is.

A write cut short by a crash leaves a prefix of one record, and a prefix of
a record line cannot end with its newline. These tests take the class of
defect of issue 10, item 1 (a newline-terminated last line that does not
decode taken for a torn tail, cut off, and its `never` action run again)
at every byte of a real last line, through the reader, `verify` and the
lock's tail sealing.
"""

from __future__ import annotations

import pytest

from polyloop import CorruptLogError, Intent, ModelCallResult, RunStarted, encode_record, verify_file
from polyloop.stores import parse_log

STARTED = RunStarted(run_id="r", goal="g")
MODEL = Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1")
ACTION = Intent(kind="action", step=1, attempt=1, result_id="s1-a1", tool="charge", args={"cents": 500},
                replay="never", idempotency_key="pl-" + "0" * 32)
HEAD = encode_record(STARTED) + encode_record(MODEL)
STEP = ModelCallResult(result_id="s1-m1", output=None, error="boom")
LAST = encode_record(ACTION)  # the log ends with a `never` action's intent: killed inside the tool


def flips(line: bytes):
    """Every one-byte change of `line` (its newline kept) that stops it from decoding as JSON."""
    import orjson

    for i in range(len(line) - 1):
        for b in (0x00, 0x23, 0xFF, line[i] ^ 0x01):
            flipped = line[:i] + bytes([b]) + line[i + 1:]
            if flipped == line:
                continue
            try:
                orjson.loads(flipped)
            except orjson.JSONDecodeError:
                yield i, flipped


def test_a_flipped_byte_in_a_terminated_last_line_is_corruption_at_every_position():
    cases = list(flips(LAST))
    assert len(cases) > len(LAST)  # the test has something to say
    for i, flipped in cases:
        parsed = parse_log(HEAD + flipped)
        assert parsed.torn_line is None and parsed.torn_offset is None, f"byte {i}: taken for a torn tail"
        assert [p.line for p in parsed.problems] == [3], f"byte {i}: {parsed.problems}"


def test_the_same_line_without_its_newline_is_a_torn_tail_at_every_position():
    for i, flipped in flips(LAST):
        parsed = parse_log(HEAD + flipped[:-1])
        assert parsed.torn_line == 3 and parsed.torn_offset == len(HEAD), f"byte {i}"
        assert not parsed.problems and len(parsed.records) == 2


def test_a_cut_anywhere_in_the_last_write_is_a_torn_tail_and_never_corruption():
    for cut in range(1, len(LAST)):
        parsed = parse_log(HEAD + LAST[:cut])
        assert not parsed.problems, cut
        # Even the whole JSON without its newline: a record is written with its
        # newline in one write, so without it the write was never acknowledged.
        assert parsed.torn_line == 3 and len(parsed.records) == 2


@pytest.mark.parametrize("zeros", [b"\x00", b"\x00" * 512, b"\x00" * 512 + b"\n" + b"\x00" * 100])
def test_nul_bytes_are_a_torn_tail_only_when_unterminated(zeros):
    parsed = parse_log(HEAD + zeros)
    if zeros.endswith(b"\x00") and b"\n" not in zeros:
        assert parsed.torn_line == 3 and not parsed.problems
    else:  # a terminated line of NULs: data after it was kept, so data before it was lost
        assert parsed.problems and parsed.problems[0].line == 3 and "NUL" in parsed.problems[0].message


def test_a_terminated_nul_line_as_the_last_line_is_corruption():
    parsed = parse_log(HEAD + b"\x00" * 64 + b"\n")
    assert [p.line for p in parsed.problems] == [3] and parsed.torn_line is None


def test_blank_lines_anywhere_are_skipped_and_never_a_torn_tail():
    data = b"\n  \n" + encode_record(STARTED) + b"\t\r\n\n" + encode_record(MODEL) + b"   "
    parsed = parse_log(data)
    assert parsed.records == [STARTED, MODEL] and parsed.lines == [3, 6]
    assert not parsed.problems and parsed.torn_line is None


def test_a_garbage_middle_line_is_one_problem_at_its_own_line_in_verify(tmp_path):
    # The defect of issue 9: one problem per *later* line, each pointing at the later line.
    lines = [encode_record(STARTED), encode_record(MODEL)]
    good = [encode_record(Intent(kind="model_call", step=1, attempt=a, result_id=f"x{a}")) for a in range(2, 9)]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(lines) + b"#### overwritten ####\n" + b"".join(good))
    verdict = verify_file(path)
    assert verdict.status == "corrupt"
    assert [line for line, _ in verdict.problems] == [3]


async def test_the_lock_never_cuts_a_terminated_line(store):
    store.directory.mkdir(parents=True)
    for i, flipped in list(flips(LAST))[::7]:
        store.path("r").write_bytes(HEAD + flipped)
        async with store.lock("r") as parsed:
            assert parsed is not None and [p.line for p in parsed.problems] == [3], i
        assert store.path("r").read_bytes() == HEAD + flipped, f"byte {i}: the lock changed a corrupt log"
        with pytest.raises(CorruptLogError, match="line 3"):
            await store.read_log("r")
        assert verify_file(store.path("r")).status == "corrupt"


async def test_the_first_write_under_the_lock_cuts_exactly_the_unterminated_segment(store):
    store.directory.mkdir(parents=True)
    for cut in range(1, len(LAST)):
        store.path("r").write_bytes(HEAD + LAST[:cut])
        async with store.lock("r") as parsed:
            assert parsed is not None and parsed.records == [STARTED, MODEL] and parsed.torn_line == 3
            await store.write_model_call_result("r", STEP)
        assert store.path("r").read_bytes() == HEAD + encode_record(STEP), cut


def test_records_or_raise_gives_the_readers_error():
    from polyloop import SCHEMA_VERSION, SchemaVersionError

    assert parse_log(HEAD + b'{"rec').records_or_raise("r") == [STARTED, MODEL]
    with pytest.raises(CorruptLogError, match="line 3"):
        parse_log(HEAD + b"garbage\n").records_or_raise("r")
    with pytest.raises(SchemaVersionError):
        current = f'"schema_version":"{SCHEMA_VERSION}"'.encode()
        assert current in HEAD
        parse_log(HEAD.replace(current, b'"schema_version":"9.0"')).records_or_raise("r")
