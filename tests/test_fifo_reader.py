"""testing.fifo_reader, which the output tests rely on to read what a command writes into a FIFO."""
from __future__ import annotations

import os
import time

import testing.fifo_reader as fifo_reader


def test_bytes_written_after_a_read_found_nothing_are_read(tmp_path, monkeypatch):
    """The drain read nothing (no writer yet), the command wrote and the block ended before the drain checked
    whether it had ended: the bytes were left unread (test_outputs_outside_warehouse's FIFO case once got none)."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    real_read, first = os.read, []

    def read_then_stall(fd: int, n: int) -> bytes:
        chunk = real_read(fd, n)
        if not first:  # the drain's first read: nothing yet; it is preempted until the block has ended
            first.append(chunk)
            time.sleep(0.5)
        return chunk

    monkeypatch.setattr(fifo_reader.os, "read", read_then_stall)
    with fifo_reader.reading(fifo) as got:
        time.sleep(0.1)  # the drain is in its first read's stall
        with open(fifo, "wb") as w:
            w.write(b"answer\n42\n")
    assert first == [b""] and bytes(got) == b"answer\n42\n"
