"""A reader of a FIFO for tests that write into one: it holds the FIFO open for reading *before* the command under
test runs, so the writer's "does any process read it?" check never races the reader's start, and it never blocks
the test (non-blocking reads, drained in a thread)."""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def reading(fifo: Path) -> Iterator[bytearray]:
    """Read ``fifo`` while the block runs; the bytes read so far are the yielded bytearray (complete once the
    block has ended)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader from now on: a writer's open succeeds at once
    got, done = bytearray(), threading.Event()

    def drain() -> None:
        while True:
            # whether the block had ended is taken BEFORE the read: taken after it, a read that found nothing (no
            # writer yet), then the whole command's write and the block's end, then the check, left the bytes
            # unread (a once-seen failure of test_outputs_outside_warehouse's FIFO case under load)
            ended = done.is_set()
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # a writer is there, nothing written yet
                chunk = None
            if chunk:
                got.extend(chunk)
            elif ended:
                return
            else:
                done.wait(0.01)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield got
    finally:
        done.set()
        reader.join(timeout=60)
        os.close(fd)
