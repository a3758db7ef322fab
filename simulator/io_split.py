"""Progress writes inside compute phases: one run's compute burst read as two pieces (issue 12, split bursts).

A rank that writes a progress or diagnostic line every so often of its own running time (wall-clock driven, so
at other points in every run) does it wherever its compute happens to be: Extrae's I/O instrumentation reads the
counters at the write's entry (event 40000005 "I/O Write", value 1, thread state I/O) and the burst ends there,
without an MPI call; the compute resumes after the write. The writes form a Poisson stream over compute time
(mean gap ``Variation.io_every_ns``): a work burst of duration d is hit with probability 1 - exp(-d / gap), at a
uniform point. Counts split in proportion to the time before and after the cut (work uniform over the phase); the
write's own time is taken from the second piece, so the program's timeline does not move. The first piece's
logical id is the negative of its burst's (no other run has it unless split there too); the second keeps it.
"""
from __future__ import annotations

import numpy as np

from synthtrace.simulator.builder import IO_WRITE, NO_CALL, WORK, PairBlock, MIN_BURST_NS
from synthtrace.simulator.variation import Variation


def split_by_writes(pb: PairBlock, ids: np.ndarray, v: Variation,
                    rng: np.random.Generator) -> tuple[PairBlock, np.ndarray]:
    """``pb`` (and its bursts' logical ``ids``) with the work bursts a progress write hits read in two pieces."""
    c = pb.cols
    dur = (c["b_end"] - c["b_start"]).astype(np.float64)
    room = dur - v.io_write_ns - 2 * MIN_BURST_NS  # ns left for the two pieces' compute
    hit = ((c["role"] == WORK) & (c["call"] != NO_CALL) & (room > 0)
           & (rng.random(pb.n) < -np.expm1(-dur / v.io_every_ns)))
    rows = np.flatnonzero(hit)
    if rows.size == 0:
        return pb, ids
    share = rng.uniform(0.05, 0.95, rows.size)  # of the compute before the write
    cut = c["b_start"][rows] + np.rint(MIN_BURST_NS + share * room[rows]).astype(np.int64)
    resume = cut + int(round(v.io_write_ns))
    first_counts = np.rint(pb.counters[rows] * share[:, None]).astype(pb.counters.dtype)
    first = {k: a[rows].copy() for k, a in c.items()}
    first.update(b_end=cut, c_exit=resume, call=np.full(rows.size, IO_WRITE), peer=np.full(rows.size, -1),
                 tag=np.full(rows.size, -1), n_msgs=np.zeros(rows.size, np.int64),
                 bytes_sent=np.zeros(rows.size, np.int64), bytes_recv=np.zeros(rows.size, np.int64),
                 coll_send=np.full(rows.size, -1), coll_recv=np.full(rows.size, -1), root=np.full(rows.size, -1),
                 comm=np.full(rows.size, -1))
    rest = {k: a.copy() for k, a in c.items()}
    rest["b_start"][rows] = resume
    first["ins"] = first["ins"] * share
    rest["ins"][rows] *= 1.0 - share
    counters = pb.counters.copy()
    counters[rows] -= first_counts
    cols = {k: np.concatenate([rest[k], first[k]]) for k in c}
    order = np.lexsort((cols["b_start"], cols["task"]))
    out = PairBlock({k: a[order] for k, a in cols.items()}, np.concatenate([counters, first_counts])[order],
                    pb.messages, np.concatenate([pb.outlier, pb.outlier[rows]])[order],
                    np.concatenate([pb.world, np.zeros(rows.size, bool)])[order], pb.n_polls)
    return out, np.concatenate([ids, -ids[rows]])[order]
