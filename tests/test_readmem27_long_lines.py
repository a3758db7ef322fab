"""A long ``c:`` line of numbers under 40 digits (note26 Open 3): parafix26 cut numbers of 40 digits or more short,
but a line of shorter numbers was parsed whole, ~8 bytes held a byte of it (a 63 MiB line of 19-digit numbers:
684 MB for its ingest). A line longer than a block is now parsed a block at a time, the number a block ends inside
carried into the next: what is held is the header, the line's numbers and a block's work."""
from __future__ import annotations

import pytest

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.paraver import communicators
from synthtrace.tracelib.formats.paraver.communicators import communicator_members
from synthtrace.tracelib.formats.paraver.reader import MAX_HEADER_BYTES, ParaverTrace
from testing.held import traced_peak

HEAD = b"#Paraver (01/01/2020 at 00:00):1000_ns:1(4):1:4(1:1,1:1,1:1,1:1)\n"
TASKS = (4,)  # HEAD's
LINE_BYTES = 24 << 20


def _line(digits: int) -> bytes:
    """A ``c:`` line of about :data:`LINE_BYTES` bytes listing the tasks 1 to 4 in turn, each zero-padded to
    ``digits`` digits."""
    n = LINE_BYTES // (digits + 1) // 4 * 4
    unit = b":".join(b"%0*d" % (digits, 1 + k % 4) for k in range(4))
    return b"c:1:1:%d:" % n + b":".join([unit] * (n // 4)) + b"\n"


@pytest.mark.parametrize("digits", [19, 39])
def test_a_long_line_of_short_numbers_is_read_holding_about_two_bytes_a_byte(digits):
    """The members read as written, at most 2.5 bytes held per byte of the line at the peak (was 8.0), the header
    itself (1 byte a byte) and the members (8 bytes each while read) among them."""
    line = _line(digits)
    communicator_members(HEAD + b"c:1:1:1:1\n", "t.prv", TASKS)  # what loads once
    (frame, said), peak = traced_peak(lambda: communicator_members(HEAD + line, "t.prv", TASKS))
    assert not said and frame.rows() == [(1, 1, 1), (1, 1, 2), (1, 1, 3), (1, 1, 4)]
    assert peak / len(line) < 2.5, f"{peak / len(line):.1f} bytes held per byte of the line"


LINES = [  # numbers that end, or run on, at any block's edge
    b"c:1:1:6:1:02:003:0004:1:" + b"0" * 45 + b"2",
    b"c:1:2:3:" + b"0" * 38 + b"1:" + b"0" * 39 + b"2:" + b"0" * 40 + b"3 \t",
    b"c:1:3:2:1:" + b"9" * 19,  # a task past int64
    b"c:1:4:2:1:" + b"0" * 50 + b"9" * 25,
    b"c:01234567890:5:1:1",  # APPL of 11 digits
    b"c:1:" + b"0" * 18 + b"6:1:2",  # COMM of 19 digits
    b"c:1:7:" + b"0" * 10 + b"2:3:4",  # N of 11 digits
    b"c:1:8:3:1:2",  # fewer tasks than N
    b"c:1:9:2:1:" + b"0" * 41,  # the task 0
    b"c:1:10:2:3:4",
]


@pytest.mark.parametrize("block_bytes", [1, 2, 3, 5, 8, 13, 40])
def test_a_line_read_a_block_at_a_time_reads_as_the_whole_line(monkeypatch, block_bytes):
    """The members and the warnings of the lines above read with blocks shorter than each line are those read
    with one block holding them all."""
    prefix = HEAD + b"\n".join(LINES) + b"\n"
    whole = communicator_members(prefix, "t.prv", TASKS)
    assert whole[0].height == 9 and len(whole[1]) == 2  # lines skipped: malformed, a task past 4
    monkeypatch.setattr(communicators, "BLOCK_BYTES", block_bytes)
    frame, said = communicator_members(prefix, "t.prv", TASKS)
    assert frame.equals(whole[0]) and said == whole[1]


def test_a_communicator_line_past_the_header_cap_is_refused_at_its_own_line(tmp_path):
    """A ``c:`` line going on past the reader's 64 MiB header cap: one error naming the file, the line and the
    cap (it was cut at the cap, read as a communicator line, and its rest refused as 'unknown record type' on the
    next line)."""
    prv = tmp_path / "t.prv"
    numbers = (MAX_HEADER_BYTES >> 1) + 1024  # "1:" each: past the cap
    prv.write_bytes(HEAD + b"c:1:1:%d:" % numbers + b"1:" * (numbers - 1) + b"1\n1:1:1:1:1:0:100:1\n")
    with pytest.raises(TraceFormatError) as refused:
        ParaverTrace(prv)
    assert refused.value.line == 2 and refused.value.path == str(prv)
    assert f"longer than {MAX_HEADER_BYTES >> 20} MiB" in refused.value.reason
