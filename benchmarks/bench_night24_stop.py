"""How long a Paraver read in a worker thread goes on after a night's stop (review 23, 6b): the real LULESH 4+4
trace tiled in time (``COPIES`` copies, ~0.87 MB each), read in a thread; once a quarter of its bytes are read,
``stop_reads()`` is called. Prints the seconds from the call to the read's end, and the seconds of the whole read.
Before night24 a Paraver read did not stop (it read on to its end); since, it ends at its next chunk (8 MiB).

    python benchmarks/bench_night24_stop.py [COPIES]   # default 150 (~130 MB)
"""
from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from synthtrace.tracelib.errors import ReadStopped
from synthtrace.tracelib.formats.otf2 import stop_reads
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from testing.paraver_tile import tile_trace
from testing.traces import LULESH_A


def read_seconds(prv: Path, stop_at_bytes: int | None) -> tuple[float, float | None, str]:
    """Seconds of the read, seconds from the stop to its end (None: not stopped), how it ended."""
    read = [0]
    asked: list[float] = []

    def progress(n: int) -> None:
        read[0] += n
        if stop_at_bytes is not None and read[0] >= stop_at_bytes and not asked:
            asked.append(time.perf_counter())
            threading.Thread(target=stop_reads).start()  # from another thread, as the night's handler does

    outcome = ["read whole"]

    def work() -> None:
        try:
            for _ in ParaverTrace(prv).read("bench", progress=progress):
                pass
        except ReadStopped:
            outcome[0] = f"stopped after {read[0] / 1e6:.0f} MB"

    began = time.perf_counter()
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    ended = time.perf_counter()
    return ended - began, (ended - asked[0]) if asked else None, outcome[0]


def main() -> None:
    copies = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    with tempfile.TemporaryDirectory() as tmp:
        prv = tile_trace(LULESH_A, Path(tmp) / "lulesh.big.prv", copies)
        size = prv.stat().st_size
        whole, _, _ = read_seconds(prv, None)
        total, after, how = read_seconds(prv, size // 4)
        print(f"{size / 1e6:.0f} MB: whole read {whole:.2f} s; stop asked at 1/4: {how}, "
              f"{after:.2f} s after the ask (read {total:.2f} s)")


if __name__ == "__main__":
    main()
