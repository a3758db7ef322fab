"""One long communicator line (review24 F1): a ``c:`` line longer than a block is a block of its own, and it was
parsed whole (~20-30 bytes held per byte: one 30 MiB line of 16M tasks took 640 MB) before the MAX_MEMBERS cap was
checked. Each line's count toward the cap (its digit runs) is now taken first, 2 bytes a byte, and a header past
the cap is not parsed."""
from __future__ import annotations

import pytest

from synthtrace.tracelib.formats.paraver import communicators
from synthtrace.tracelib.formats.paraver.communicators import communicator_members
from testing.held import traced_peak

HEAD = b"#Paraver (01/01/2020 at 00:00):1000_ns:1(4):1:4(1:1,1:1,1:1,1:1)\n"
TASKS = (4,)  # HEAD's
CAP_SAID = ("the communicator lines list more than {:,} members (a line counted as one): none kept (a merge compares "
            "this run's communicator ids as numbers)")


@pytest.mark.parametrize("separator", [b":", b" "])
def test_one_40_mib_line_past_the_cap_is_refused_holding_a_few_bytes_a_byte(tmp_path, separator):
    """A 40 MiB line listing 21M tasks (':' or, not of the form, ' ' between them), written to a file and read
    back: refused naming its line, at most 4 bytes held per byte of it at the peak (was ~20-30)."""
    tasks = 20 << 20
    path = tmp_path / "long.prv"
    path.write_bytes(HEAD + b"c:1:1:%d" % tasks + (separator + b"7") * tasks + b"\n")
    prefix = path.read_bytes()
    communicator_members(HEAD + b"c:1:1:1:1\n", str(path), TASKS)  # what loads once
    (frame, said), peak = traced_peak(lambda: communicator_members(prefix, str(path), TASKS))
    assert frame.height == 0 and said == [f"{path}:2: " + CAP_SAID.format(communicators.MAX_MEMBERS)]
    assert peak / len(prefix) < 4, f"{peak / len(prefix):.1f} bytes held per byte of the line"


@pytest.mark.parametrize("block_bytes", [1, 64, communicators.BLOCK_BYTES])
@pytest.mark.parametrize(("listed", "kept"), [(47, True), (48, False)])
def test_the_cap_counts_each_line_one_and_its_numbers_after_the_third(monkeypatch, block_bytes, listed, kept):
    """Cap 100: a line of 50 tasks (51), a line of ``listed`` numbers after its third, not of the form (spaces
    between them: ``listed`` + 1) and an empty line (1) are kept at 100 and refused at 101, said at the last."""
    monkeypatch.setattr(communicators, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(communicators, "MAX_MEMBERS", 100)
    prefix = (HEAD + b"c:1:1:50" + b"".join(b":%d" % t for t in range(1, 51)) + b"\n"
              + b"c:1:2:%d " % listed + b" ".join(b"%d" % t for t in range(1, listed + 1)) + b"\nc:\n")
    frame, said = communicator_members(prefix, "t.prv", (50,))  # an application of 50 tasks
    if kept:
        assert frame.height == 50 and len(said) == 1 and "communicator line skipped" in said[0]
    else:
        assert frame.height == 0 and said == ["t.prv:4: " + CAP_SAID.format(100)]
