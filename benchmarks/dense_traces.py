"""Records-dense Paraver traces for the ingest benchmark (issue 27): short bursts and many records per byte, in the
layout Extrae writes (counters on the MPI entry for the burst it closes, on the exit for the call, a
communication record per message), of three shapes:

- ``ring``: 64 MPI ranks of one thread; per iteration a short burst, MPI_Isend to the right neighbour,
  MPI_Irecv from the left, MPI_Waitall; every 50 iterations an MPI_Allreduce;
- ``openmp``: 4 ranks of 16 threads; per iteration every thread runs a short burst inside an OpenMP parallel
  function (event 60000018, counters on its entry and exit), the master then an MPI_Allreduce;
- ``collective``: 256 ranks of one thread on 4 nodes; per iteration a short burst, then an MPI_Allreduce (its
  sizes and communicator on the entry) that every rank leaves together.

    python benchmarks/dense_traces.py ring OUT.prv --mb 270
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

COUNTERS = (42_000_050, 42_000_059, 42_000_008, 42_000_055)  # TOT_INS, TOT_CYC, L3_TCM, BR_INS
PCF = """DEFAULT_OPTIONS

LEVEL               THREAD
UNITS               NANOSEC

EVENT_TYPE
9   50000001    MPI Point-to-point
VALUES
3   MPI_Isend
4   MPI_Irecv
0   Outside MPI

EVENT_TYPE
9   50000002    MPI Collective Comm
VALUES
10   MPI_Allreduce
0   Outside MPI

EVENT_TYPE
9   50000003    MPI Other
VALUES
9   MPI_Waitall
0   Outside MPI

EVENT_TYPE
0    60000018    Executed OpenMP parallel function
VALUES
0   End
1   kernel

EVENT_TYPE
7  42000050 PAPI_TOT_INS [Instr completed]
7  42000059 PAPI_TOT_CYC [Total cycles]
7  42000008 PAPI_L3_TCM [Level 3 cache misses]
7  42000055 PAPI_BR_INS [Branch instructions]
"""


def _counters(rng: random.Random, ns: int) -> str:
    ins = ns * rng.randint(2, 6)
    return ":".join(f"{t}:{v}" for t, v in zip(COUNTERS, (ins, ns * 3, ins // rng.randint(50, 500),
                                                           ins // rng.randint(5, 9))))


#: a ring rank's steps per iteration: (Paraver state, duration range in ns, MPI event type and value at its end):
#: a burst, then MPI_Isend, a burst, MPI_Irecv, a burst, then MPI_Waitall's entry
RING_STEPS = ((1, (300, 3000), 50000001, 3), (10, (200, 800), 50000001, 0), (1, (100, 400), 50000001, 4),
              (11, (200, 600), 50000001, 0), (1, (100, 400), 50000003, 9))


def _allreduce(lines: list[str], rng: random.Random, t: list[int], burst: int, cost: int) -> None:
    """Every rank (one thread each) runs a burst of ``burst`` ns, then an MPI_Allreduce of 8 bytes that all leave
    ``cost`` ns after the last one entered; ``t`` (each rank's time) advances."""
    top = max(t) + burst + cost
    for r in range(len(t)):
        c = r + 1
        lines.append(f"1:{c}:1:{c}:1:{t[r]}:{t[r] + burst}:1\n")
        lines.append(f"2:{c}:1:{c}:1:{t[r] + burst}:50000002:10:50100001:8:50100002:8:50100004:1:"
                     f"{_counters(rng, burst)}\n")
        lines.append(f"1:{c}:1:{c}:1:{t[r] + burst}:{top}:13\n")
        lines.append(f"2:{c}:1:{c}:1:{top}:50000002:0:{_counters(rng, top - t[r] - burst)}\n")
        t[r] = top


def ring(out, target: int, rng: random.Random) -> int:
    """64 ranks, one thread each (see module docstring)."""
    n = 64
    t = [1000 + 37 * r for r in range(n)]
    written, it = 0, 0
    while written < target:
        lines = []
        send = [0] * n
        for r in range(n):
            c = r + 1
            for state, (lo, hi), event, value in RING_STEPS:
                end = t[r] + rng.randint(lo, hi)
                lines.append(f"1:{c}:1:{c}:1:{t[r]}:{end}:{state}\n")
                lines.append(f"2:{c}:1:{c}:1:{end}:{event}:{value}:{_counters(rng, end - t[r])}\n")
                if (event, value) == (50000001, 3):  # the MPI_Isend's entry: the message leaves
                    send[r] = end
                t[r] = end
        for r in range(n):  # Waitall ends once the left neighbour's message is there
            c, left = r + 1, (r - 1) % n
            end = max(t[r], send[left]) + rng.randint(500, 5000)
            lines.append(f"1:{c}:1:{c}:1:{t[r]}:{end}:8\n")
            lines.append(f"2:{c}:1:{c}:1:{end}:50000003:0:{_counters(rng, end - t[r])}\n")
            lines.append(f"3:{left + 1}:1:{left + 1}:1:{send[left]}:{send[left] + 100}:{c}:1:{c}:1:{t[r]}:{end}:"
                         f"4096:{it}\n")
            t[r] = end
        if it % 50 == 49:
            _allreduce(lines, rng, t, 10, 1000)
        lines.sort(key=lambda ln: int(ln.split(":")[5]))
        text = "".join(lines)
        out.write(text)
        written += len(text)
        it += 1
    return max(t)


def openmp(out, target: int, rng: random.Random) -> int:
    """4 ranks of 16 threads (see module docstring)."""
    ranks, threads = 4, 16
    t = [1000] * ranks
    written = 0
    while written < target:
        lines = []
        for r in range(ranks):
            c0 = r * threads
            ends = []
            for h in range(threads):
                c = c0 + h + 1
                a = t[r] + 50 * h
                b = a + rng.randint(500, 4000)
                lines.append(f"1:{c}:1:{r + 1}:{h + 1}:{a}:{b}:1\n")
                lines.append(f"2:{c}:1:{r + 1}:{h + 1}:{a}:60000018:1:{_counters(rng, 100)}\n")
                lines.append(f"2:{c}:1:{r + 1}:{h + 1}:{b}:60000018:0:{_counters(rng, b - a)}\n")
                ends.append(b)
            join = max(ends) + 100
            for h in range(1, threads):
                c = c0 + h + 1
                lines.append(f"1:{c}:1:{r + 1}:{h + 1}:{ends[h]}:{join}:5\n")
            c = c0 + 1
            lines.append(f"1:{c}:1:{r + 1}:1:{ends[0]}:{join}:1\n")
            lines.append(f"2:{c}:1:{r + 1}:1:{join}:50000002:10:50100001:8:50100002:8:50100004:1:"
                         f"{_counters(rng, join - ends[0])}\n")
            done = join + rng.randint(1000, 5000)
            lines.append(f"1:{c}:1:{r + 1}:1:{join}:{done}:13\n")
            lines.append(f"2:{c}:1:{r + 1}:1:{done}:50000002:0:{_counters(rng, done - join)}\n")
            t[r] = done + 10
        lines.sort(key=lambda ln: int(ln.split(":")[5]))
        text = "".join(lines)
        out.write(text)
        written += len(text)
    return max(t)


def collective(out, target: int, rng: random.Random) -> int:
    """256 ranks of one thread on 4 nodes (see module docstring)."""
    t = [1000 + 13 * r for r in range(256)]
    written = 0
    while written < target:
        lines: list[str] = []
        _allreduce(lines, rng, t, rng.randint(300, 3000), rng.randint(500, 2000))
        lines.sort(key=lambda ln: int(ln.split(":")[5]))
        text = "".join(lines)
        out.write(text)
        written += len(text)
    return max(t)


SHAPES = {"ring": (ring, "1(64):1:64(" + ",".join("1:1" for _ in range(64)) + ")"),
          "openmp": (openmp, "1(64):1:4(" + ",".join("16:1" for _ in range(4)) + ")"),
          "collective": (collective, "4(64,64,64,64):1:256(" + ",".join(f"1:{1 + r // 64}" for r in range(256)) + ")")}


def write_dense(shape: str, prv: Path, mb: int, seed: int = 1) -> Path:
    """Write ``prv`` (+ .pcf, .row-less) of about ``mb`` MB in ``shape``; returns its path."""
    make, resources = SHAPES[shape]
    body = prv.with_suffix(".body")
    with open(body, "w") as out:
        end = make(out, mb * 1_000_000, random.Random(seed))
    with open(prv, "w") as out, open(body) as src:
        out.write(f"#Paraver (01/01/2026 at 00:00):{end + 1000}_ns:{resources},0\n")
        while block := src.read(1 << 24):
            out.write(block)
    body.unlink()
    prv.with_suffix(".pcf").write_text(PCF)
    return prv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=int, default=100)
    a = ap.parse_args()
    print(write_dense(a.shape, a.out, a.mb))


if __name__ == "__main__":
    main()
