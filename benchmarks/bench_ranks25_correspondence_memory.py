"""The rank correspondence's own peak RSS on a ring of N ranks (bench_ranks22's bursts: 3 closing calls x 64 bursts a
rank, every burst long), the other run numbered r + 5 (ranks25, issue 23).

    /usr/bin/time -v python benchmarks/bench_ranks25_correspondence_memory.py 16384 [CHECKOUT]

CHECKOUT (default: this one) is put first on sys.path, so an older checkout (``git archive``) is measured in the same
session. The peak RSS is reset (``/proc/self/clear_refs``) once the inputs are built and the free heap released:
``added_kB`` is what the correspondence adds; ``hash`` names the mapping found (the same on both sides: the same
numbering chosen).
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_ranks22 import bursts, edges
from synthtrace.tracelib.formats.heap import release_free_heap
from synthtrace.tracelib.merge import ranks


def status(key: str) -> int:
    """A line of /proc/self/status in kB."""
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1])


def main() -> None:
    n = int(sys.argv[1])
    ref_b, oth_b = bursts(n, 0, 1), bursts(n, 5, 2)
    ref_c, oth_c = edges("ring", n, 0), edges("ring", n, 5)
    release_free_heap()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS:")
    t0 = time.perf_counter()
    corr = ranks.correspondence(ref_b, ref_c, oth_b, oth_c, ("ref", "other"))
    print(n, "s", round(time.perf_counter() - t0, 1), "mapped", None if corr.mapping is None else len(corr.mapping),
          "tie", corr.tie, "hash", hash(tuple(sorted(corr.mapping.items()))) if corr.mapping else None,
          "rss_before_kB", before, "peak_during_kB", status("VmHWM:"), "added_kB", status("VmHWM:") - before)


if __name__ == "__main__":
    main()
