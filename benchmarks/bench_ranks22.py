"""The rank correspondence's cost on big symmetric campaigns (ranks22): a torus (tags per direction) or a ring of
256-1024 ranks whose other run numbers rank r as r + shift, ranks nearly alike (work 1 % apart, 0.3 % noise).

    python benchmarks/bench_ranks22.py                      # 256 and 1024 ranks, torus and ring
    /usr/bin/time -v python benchmarks/bench_ranks22.py --ranks 1024 --topology ring   # peak RSS of one case

Per case: seconds of the behaviour profiles and their assignment (what the correspondence computed before
ranks22), of the message graph's numberings (:func:`synthtrace.tracelib.merge.symmetries.numberings`), of the whole
:func:`synthtrace.tracelib.merge.ranks.correspondence`, and whether it found the shift and said a tie.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import polars as pl

from synthtrace.tracelib.merge import ranks
from synthtrace.tracelib.merge.symmetries import numberings
from synthtrace.tracelib.thread_key import task_int

KEYS = ("MPI_Irecv@a.c:1", "MPI_Waitall@a.c:2", "MPI_Allreduce@a.c:3")


def edges(topology: str, n: int, shift: int) -> pl.DataFrame:
    """Message counts of a torus or a ring of ``n`` ranks numbered r -> (r + shift) % n (tasks from 1)."""
    px = int(np.sqrt(n)) if topology == "torus" else n
    py = n // px
    r = np.arange(n)
    x, y = r % px, r // px
    nb = [(((x - 1) % px) + y * px, 1), (((x + 1) % px) + y * px, 2)]
    if py > 1:
        nb += [(x + ((y - 1) % py) * px, 3), (x + ((y + 1) % py) * px, 4)]
    s = np.concatenate([r for _ in nb])
    d = np.concatenate([q for q, _ in nb])
    t = np.concatenate([np.full(n, tag) for _, tag in nb])
    return pl.DataFrame({"appl": 1, "comm": 1, "sender": (s + shift) % n + 1, "receiver": (d + shift) % n + 1,
                         "tag": t, "bytes": 8192, "n": 20}).cast({"sender": pl.Int32, "receiver": pl.Int32})


def bursts(n: int, shift: int, seed: int) -> pl.DataFrame:
    """64 iterations of 3 bursts (each closed by its own call) per rank; rank r's work 1 % apart from others' (its
    subdomain), 0.3 % noise."""
    rng = np.random.default_rng(seed)
    rank_work = np.exp(0.01 * np.random.default_rng(0).standard_normal(n))
    rows = n * len(KEYS) * 64
    r = np.repeat(np.arange(n), len(KEYS) * 64)
    key = np.tile(np.arange(len(KEYS)), n * 64)  # iteration after iteration: the calls in turn
    ins = 1e6 * rank_work[r] * (1 + key) * np.exp(0.003 * rng.standard_normal(rows))
    call, site = zip(*(k.split("@") for k in KEYS))
    return pl.DataFrame({"appl": 1, "task": ((r + shift) % n + 1).astype(np.int32), "thread": 1,
                         "mpi_call": np.array(call)[key], "call_site": np.array(site)[key],
                         "PAPI_TOT_INS": ins, "duration_ns": ins}).sort("task", "thread", maintain_order=True)


def case(topology: str, n: int, shift: int) -> dict:
    ref_b, oth_b = bursts(n, 0, 1), bursts(n, shift, 2)
    ref_c, oth_c = edges(topology, n, 0), edges(topology, n, shift)
    t0 = time.perf_counter()
    beh = ranks._behaviours(ref_b, oth_b)
    ranks._assignment(beh)
    t_before = time.perf_counter() - t0
    nodes = np.array([task_int(1, t) for t in range(1, n + 1)], np.int64)
    cand = ranks._Candidates(nodes, beh)
    t0 = time.perf_counter()
    found = numberings(nodes, ref_c, oth_c, cand.closer, cand.surest).found
    t_num = time.perf_counter() - t0
    t0 = time.perf_counter()
    corr = ranks.correspondence(ref_b, ref_c, oth_b, oth_c, ("ref", "other"))
    t_all = time.perf_counter() - t0
    want = {task_int(1, (t + shift) % n + 1): t + 1 for t in range(n)}
    return {"topology": topology, "ranks": n, "profiles+assignment s": round(t_before, 2),
            "numberings s": round(t_num, 2), "numberings": len(found), "correspondence s": round(t_all, 2),
            "shift found": corr.mapping == want, "tie": corr.tie is not None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="*", default=[256, 1024])
    ap.add_argument("--topology", nargs="*", default=["torus", "ring"])
    ap.add_argument("--shift", type=int, default=5)
    args = ap.parse_args()
    print_table([case(t, n, args.shift) for t in args.topology for n in args.ranks])


def print_table(rows: list[dict]) -> None:
    """``rows`` (dicts with the same keys) as a Markdown table on standard output."""
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |", flush=True)


if __name__ == "__main__":
    main()
