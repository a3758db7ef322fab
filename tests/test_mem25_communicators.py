"""A ``c:`` line under the communicator cap padded with megabytes of blanks or of a number's leading zeros (issue
23, note24 Open 3): few members, so the cap lets it through, and it was parsed whole at ~13 bytes held per byte of
the line (blanks; ~5 for zeros). A line longer than a block is now cut short first (its trailing blanks, its long
numbers' extra digits), a block at a time: what is held is the line's numbers, not its bytes."""
from __future__ import annotations

import pytest

from synthtrace.tracelib.formats.paraver import communicators
from synthtrace.tracelib.formats.paraver.communicators import communicator_members
from testing.held import traced_peak

HEAD = b"#Paraver (01/01/2020 at 00:00):1000_ns:1(4):1:4(1:1,1:1,1:1,1:1)\n"
TASKS = (4,)  # HEAD's
PADDED = 24 << 20


@pytest.mark.parametrize("line", [b"c:1:1:3:1:2:3" + b" " * PADDED + b"\r\n",
                                  b"c:1:1:3:" + b"0" * PADDED + b"1:2:03\n"],
                         ids=["blanks", "leading zeros"])
def test_a_padded_line_keeps_its_members_holding_a_few_bytes_a_byte(line):
    """24 MiB of blanks after a line's members, or of zeros before its first task: the members 1, 2, 3 read, at
    most 3 bytes held per byte of the line at the peak (was 13 for blanks, 5 for zeros)."""
    prefix = HEAD + line
    communicator_members(HEAD + b"c:1:1:1:1\n", "t.prv", TASKS)  # what loads once
    (frame, said), peak = traced_peak(lambda: communicator_members(prefix, "t.prv", TASKS))
    assert frame.rows() == [(1, 1, 1), (1, 1, 2), (1, 1, 3)] and not said
    assert peak / len(line) < 3, f"{peak / len(line):.1f} bytes held per byte of the line"


RUN = communicators.SHORTENED_RUN
LINES = [  # each parsed as a long line (cut short) and as a short one (whole): the same members and warnings
    b"c:1:1:3:1:2:3" + b" " * RUN + b"\t" * RUN,  # valid: trailing blanks
    b"c:1:2:3:1:2:3" + b" " * RUN + b"4",  # blanks before a number
    b"c:1:3:3:1:2" + b" " * RUN + b":3",
    b"c:1:4:3:" + b"0" * RUN + b"7:2:3",  # a task's leading zeros
    b"c:1:20:3:" + b"0" * (RUN + 5) + b":2:3",  # a task of zeros
    b"c:1:21:1:" + b"0" * RUN + b"2147483647",  # the largest task
    b"c:1:22:1:" + b"0" * RUN + b"2147483648",  # one past it
    b"c:1:" + b"0" * RUN + b"5:2:1:2",  # head fields of more digits than allowed, their values small
    b"c:" + b"0" * RUN + b"1:5:1:2",
    b"c:1:5:" + b"0" * RUN + b"2:1:2",
    b"c:1:6:2:" + b"9" * (RUN + 30) + b":1",  # a task past int64
    b"c:1:7:2:" + b"1" + b"0" * (RUN + 30) + b":1",
    b"c:1:8:2:1:" + b"1" * 19 + b"0" * RUN,
    b"c:1:9:2:1:2:" + b"x" * RUN,  # junk
    b"c:1:10:2:1:2" + b":" * RUN,
    b"c:1:11:2:1:" + b" :" * RUN + b"2",
    b"c:1:12:2:1:2" + b" :" * RUN,
    b"c:1:13:2:" + b" " * RUN + b"1:2",
    b"c:" + b" " * RUN,
    b"c:" + b"0" * RUN,
    b"c:1:14:1:" + b"0" * 18 + b"3",  # 19 digits
    b"c:1:15:1:" + b"0" * 19 + b"9" * 19,  # 38 digits, past int64
]


@pytest.mark.parametrize("block_bytes", [1, 7, 64])
def test_a_line_cut_short_reads_as_the_whole_line(monkeypatch, block_bytes):
    """Every line above, each of its runs of ``SHORTENED_RUN`` bytes or more a case of the cut: the members and the
    warnings of a header of them read with blocks shorter than each line (each cut short, looked at
    ``block_bytes`` at a time) are those read with blocks longer than them (each parsed whole)."""
    prefix = HEAD + b"\n".join(LINES) + b"\n"
    whole = communicator_members(prefix, "t.prv", TASKS)
    assert whole[0].height >= 4 and len(whole[1]) == 2  # members read, lines skipped (malformed, past 4 tasks)
    monkeypatch.setattr(communicators, "BLOCK_BYTES", block_bytes)
    frame, said = communicator_members(prefix, "t.prv", TASKS)
    assert frame.equals(whole[0]) and said == whole[1]
