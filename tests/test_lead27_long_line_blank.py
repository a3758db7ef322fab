"""Attack 27 A3: a ``c:`` line longer than a block whose first byte after ``c:`` is below '0' (a blank) printed
numpy's "overflow encountered in scalar subtract" before the line's own warning: the block-at-a-time parse tested
its first byte as a uint8 scalar, which wraps. Only the line's own warning is said."""
from __future__ import annotations

import warnings

import pytest

from synthtrace.tracelib.formats.paraver import communicators
from synthtrace.tracelib.formats.paraver.communicators import communicator_members

HEAD = b"#Paraver (01/01/2020 at 00:00):1000_ns:1(4):1:4(1:1,1:1,1:1,1:1)\n"


@pytest.mark.parametrize("first", [b" ", b"\t", b"+", b"/"])
def test_a_long_line_starting_below_a_digit_says_only_its_own_warning(monkeypatch, first):
    header = HEAD + b"c:" + first + b"1:1:4:1:2:3:4\n"
    whole = communicator_members(header, "t.prv", (4,))
    monkeypatch.setattr(communicators, "BLOCK_BYTES", 4)  # the line is longer than a block
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame, said = communicator_members(header, "t.prv", (4,))
    assert frame.height == 0 and said == whole[1] and len(said) == 1
