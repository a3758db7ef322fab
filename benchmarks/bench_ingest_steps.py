"""Thread CPU of each step of one ingest (issue 27: which thread pays for what, without a profiler's own cost and
without charging a step with the CPU other threads spend meanwhile, as a profile on process time does).

One ``ingest_trace`` in a fresh process, the reader's steps wrapped (nothing else changed): per thread, the sum of
``time.thread_time`` inside each step (nested steps indented under the step that calls them), and the process CPU
after the imports. Threads: the caller (``MainThread``: assembling, frames, messages placed), the read-ahead
(tokenizer, MPI naming, event frames), the Numba warm-up (kernels loaded, a tiny trace through the same steps) and the
part writer.

    python benchmarks/bench_ingest_steps.py TRACE
"""
from __future__ import annotations

import collections
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT))
    from synthtrace.tracelib.domain import counter_sanity
    from synthtrace.tracelib.formats import bursts, call_store
    from synthtrace.tracelib.formats.paraver import reader, records, tokenizer
    from synthtrace.warehouse import Warehouse, ingest

    spent: dict[tuple[str, str], float] = collections.defaultdict(float)
    calls: collections.Counter = collections.Counter()
    local = threading.local()

    def wrap(owner: object, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def step(*args, **kwargs):
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            t = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                local.depth = depth
                key = (threading.current_thread().name, "  " * depth + label)
                spent[key] += time.thread_time() - t
                calls[key] += 1
        setattr(owner, name, step)

    wrap(ingest, "run_identity", "run_identity (files hashed)")
    wrap(reader, "_warm_up", "warm-up")
    wrap(records.RecordParser, "parse", "parse")
    wrap(tokenizer, "tokenize", "tokenize (kernel, arrays)")
    wrap(reader._EventConverter, "mpi_arrays", "mpi_arrays")
    wrap(reader._EventConverter, "events", "events frame")
    wrap(reader._EventConverter, "uncore_samples", "uncore samples")
    wrap(reader._EventConverter, "loose_samples", "loose samples")
    wrap(reader._EventConverter, "batch", "batch")
    wrap(bursts.BurstAssembler, "feed", "feed")
    wrap(bursts.BurstAssembler, "_pair_calls", "_pair_calls")
    wrap(bursts.BurstAssembler, "_close_bursts", "_close_bursts")
    wrap(call_store.CallStore, "add", "calls kept")
    wrap(call_store.CallStore, "with_messages", "messages placed (with_messages)")
    wrap(counter_sanity.AnomalyTally, "add", "anomaly tally")
    wrap(ingest, "_write_logical_messages", "logical messages")
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-steps-"))
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    try:
        ingest.ingest_trace(Warehouse(tmp / "wh"), sys.argv[1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    print(f"{Path(sys.argv[1]).name}: process CPU after the imports {cpu:.3f} s, "
          f"wall {time.perf_counter() - w0:.2f} s, load {os.getloadavg()[0]:.1f}")
    print("| thread | step | thread CPU | calls |\n|---|---|---|---|")
    for (thread, label), seconds in sorted(spent.items()):
        print(f"| {thread} | {label} | {seconds * 1000:.1f} ms | {calls[(thread, label)]} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main()
