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
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # a writer is there, nothing written yet
                chunk = None
            if chunk:
                got.extend(chunk)
            elif done.is_set():
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
