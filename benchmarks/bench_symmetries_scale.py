"""The message graph's numberings (:func:`synthtrace.tracelib.merge.symmetries.numberings`) on big rings and tori
(review22 item 1): a 1-D ring needs about n/2 rounds of colour refinement after its first pin, and a refinement
that revisited every edge each round took 1.4 s at 4k ranks, 33 s at 16k, > 400 s at 64k, on every merge with
messages.

    python benchmarks/bench_symmetries_scale.py                       # rings of 4k, 16k, 64k ranks
    python benchmarks/bench_symmetries_scale.py --ranks 4096 --topology torus --timeout 600

Per case (the other run numbers rank r as r + shift, a symmetry of the ring: the numbering as it is carries too):
seconds of :func:`numberings` (or ``> timeout``) and its CPU seconds (the machine is shared), the numberings found,
whether the search tried every choice, its work (:attr:`Numberings.work`; none before it was counted) and whether
the numbering as it is was found.
"""
from __future__ import annotations

import argparse
import signal
import time

import numpy as np

from benchmarks.bench_ranks22 import edges, print_table
from synthtrace.tracelib.merge import symmetries
from synthtrace.tracelib.thread_key import task_int


class _TimedOut(Exception):
    pass


def _alarm(signum, frame):
    raise _TimedOut


def case(topology: str, n: int, shift: int, timeout: int) -> dict:
    nodes = np.array([task_int(1, t) for t in range(1, n + 1)], np.int64)
    ref_c, oth_c = edges(topology, n, 0), edges(topology, n, shift)
    row = {"topology": topology, "ranks": n}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        got = symmetries.numberings(nodes, ref_c, oth_c, lambda o, refs: refs)
    except _TimedOut:
        return row | {"numberings s": f"> {timeout}", "cpu s": f"{time.process_time() - c0:.1f}", "numberings": "",
                      "complete": "", "work": "", "as numbered": ""}
    finally:
        signal.alarm(0)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    ident = np.arange(n)
    return row | {"numberings s": round(seconds, 2), "cpu s": round(cpu, 2), "numberings": len(got.found),
                  "complete": got.complete, "work": getattr(got, "work", ""),
                  "as numbered": any(np.array_equal(p, ident) for p in got.found)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="*", default=[4096, 16384, 65536])
    ap.add_argument("--topology", nargs="*", default=["ring"])
    ap.add_argument("--shift", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=120, help="seconds a case may take (then reported as > it)")
    args = ap.parse_args()
    print_table([case(t, n, args.shift, args.timeout) for t in args.topology for n in args.ranks])


if __name__ == "__main__":
    main()
