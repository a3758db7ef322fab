"""A long ``c:`` line under the communicator cap, zero-padded or blank-padded (review25 C1, mem25's leftovers): its
numbers of 64 digits or more were cut short before the parse, so 63-digit zero-padded numbers were parsed whole at
8 bytes held a byte of the line (~0.5 GB for a 64 MiB header). Numbers of 40 digits or more are now cut (the cut
leaves at most 39), and the line's digit runs (its count toward the cap) and its end are found a block at a time
(each held 1 byte a byte of the line)."""
from __future__ import annotations

import pytest

from synthtrace.tracelib.formats.paraver.communicators import communicator_members
from testing.held import traced_peak

HEAD = b"#Paraver (01/01/2020 at 00:00):1000_ns:1(4):1:4(1:1,1:1,1:1,1:1)\n"
PADDED = 24 << 20
NUMBERS = PADDED // 64  # zero-padded 63-digit numbers, each the task 1


@pytest.mark.parametrize(("line", "tasks", "bound"), [
    (b"c:1:1:%d:" % NUMBERS + b":".join([b"0" * 62 + b"1"] * NUMBERS) + b"\n", [1], 4),  # was 8.0
    (b"c:1:1:3:1:2:3" + b" " * PADDED + b"\r\n", [1, 2, 3], 2.5),  # was 3.2
    (b"c:1:1:3:" + b"0" * PADDED + b"1:2:03\n", [1, 2, 3], 2.5),  # was 3.0
], ids=["63-digit numbers", "blanks", "leading zeros"])
def test_a_padded_line_is_read_holding_at_most_a_few_bytes_a_byte(line, tasks, bound):
    """The members read as written; at most ``bound`` bytes held per byte of the line at the peak, the header
    itself (1 byte a byte) among them."""
    communicator_members(HEAD + b"c:1:1:1:1\n", "t.prv", (4,))  # what loads once
    (frame, said), peak = traced_peak(lambda: communicator_members(HEAD + line, "t.prv", (4,)))
    assert not said and frame.get_column("task").to_list() == tasks
    assert peak / len(line) < bound, f"{peak / len(line):.1f} bytes held per byte of the line"
