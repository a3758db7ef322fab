"""Synthetic multi-run burst tables with ground truth, for the merge tests and ``benchmarks/bench_merge.py``.

Builds the bursts and MPI calls of several runs of one SPMD program directly as tables (vectorised numpy, so a
million bursts per run take a second), together with the **logical identity** of every burst, so that a merge can
be scored against the truth. Each iteration of each task runs this template (call sites fixed per position):

====  ==============  ===================================================================================
pos   closing call    variation between runs
====  ==============  ===================================================================================
0,1   MPI_Irecv       —
2,3   MPI_Isend       —
4     MPI_Test        polling loop: the compute burst is followed by 0..``max_polls`` tiny polling bursts,
                      a different number in every run
5     MPI_Waitall     —
6,7   MPI_Recv        ``MPI_ANY_SOURCE``: the two messages (different peers and sizes) arrive in either order
8     MPI_Iprobe      an optional progress probe, missing in some runs (``p_missing``)
9     MPI_Allreduce   world collective (the alignment's anchor)
====  ==============  ===================================================================================

and with probability ``p_extra`` an extra burst closed by ``MPI_Comm_rank`` appears (present in one run only).
Every counter of every burst exists in the truth; each run keeps only its own counter set (``counter_sets``).
Counters vary between runs around the logical burst's base values: the burst's speed varies by a factor ``d``
(lognormal, ``time_noise``) shared by cycles (fully), misses (partly) and duration; instructions vary very little.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl

ALL_COUNTERS = ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_L3_TCM", "PAPI_BR_INS",
                "PAPI_BR_MSP", "PAPI_FP_OPS", "PAPI_VEC_INS", "PAPI_LD_INS"]
DEFAULT_SETS = [["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM", "PAPI_L2_DCM"],
                ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L3_TCM", "PAPI_BR_MSP"],
                ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_BR_INS", "PAPI_FP_OPS"],
                ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_VEC_INS", "PAPI_LD_INS"]]
# per counter: (log10 of events per instruction, exponent of the speed factor d, noise sigma)
_COUNTER_MODEL = {"PAPI_L1_DCM": (-1.6, 0.5, 0.04), "PAPI_L2_DCM": (-2.3, 0.6, 0.06),
                  "PAPI_L3_TCM": (-3.0, 0.8, 0.08), "PAPI_BR_INS": (-0.8, 0.0, 0.002),
                  "PAPI_BR_MSP": (-2.5, 0.3, 0.05), "PAPI_FP_OPS": (-0.5, 0.0, 0.004),
                  "PAPI_VEC_INS": (-0.9, 0.0, 0.004), "PAPI_LD_INS": (-0.5, 0.0, 0.003)}
# template: closing call, kind, call site, peer rule, bytes, log10 mean instructions of the compute burst
_TEMPLATE = [("MPI_Irecv", "point_to_point", "exchange (halo.c:10)", "left", 8192, 4.0),
             ("MPI_Irecv", "point_to_point", "exchange (halo.c:11)", "right", 8192, 3.8),
             ("MPI_Isend", "point_to_point", "exchange (halo.c:20)", "left", 8192, 5.5),
             ("MPI_Isend", "point_to_point", "exchange (halo.c:21)", "right", 8192, 5.3),
             ("MPI_Test", "point_to_point", "exchange (halo.c:40)", None, 0, 6.6),
             ("MPI_Waitall", "point_to_point", "exchange (halo.c:50)", None, 0, 5.0),
             ("MPI_Recv", "point_to_point", "gather (red.c:12)", "any", 0, 5.8),
             ("MPI_Recv", "point_to_point", "gather (red.c:12)", "any", 0, 5.9),
             ("MPI_Iprobe", "point_to_point", "progress (main.c:70)", None, 0, 4.5),
             ("MPI_Allreduce", "collective", "solve (main.c:99)", None, 8, 6.9)]
POLL_POS, ANY_POS, OPTIONAL_POS, EXTRA_POS = 4, (6, 7), 8, -1
WORLD_COMM = 1


@dataclass
class SynthRun:
    """One synthetic run: tables as a reader returns them, plus the truth."""

    run_id: str
    run_name: str
    bursts: pl.DataFrame  # BURST_SCHEMA + this run's counters
    mpi_calls: pl.DataFrame  # MPI_CALL_SCHEMA
    truth: pl.DataFrame  # appl, task, thread, burst_seq, logical (Int64 id, unique per logical burst), every counter
    counters: list[str]


def make_runs(*, n_tasks: int = 8, n_iters: int = 20, n_runs: int = 4, seed: int = 0, max_polls: int = 6,
              p_swap: float = 0.5, p_missing: float = 0.2, p_extra: float = 0.02, time_noise: float = 0.08,
              work_spread: float = 0.6, counter_sets: list[list[str]] | None = None, coll_every: int = 1,
              drift: float = 0.0, os_noise: float = 0.0, work_var: float = 0.0, p_split: float = 0.0,
              renumber: bool = False) -> list[SynthRun]:
    """``n_runs`` runs of one program of ``n_tasks`` single-threaded tasks and ``n_iters`` iterations.

    Stress conditions (all off by default): ``coll_every`` k closes every k-th iteration with the world
    collective and the others with an ``MPI_Sendrecv`` to the right neighbour (0: no collective at all);
    ``drift``: run r runs ``1 + drift * r`` times slower (clock and node speed: its time drifts against the other
    runs'); ``os_noise``: share of bursts hit by an OS interruption (duration and cycles x 1.5-4); ``work_var``:
    sigma of a per-run lognormal factor on the work (instructions and every count) of each logical burst (dynamic
    load balancing); ``p_split``: share of compute bursts split in two in runs > 0 (counters read at the split,
    the first piece closed by no MPI call); ``renumber``: the last run numbers its tasks by a random permutation.
    """
    if max_polls >= 999:
        raise ValueError("max_polls must stay below 999 (logical ids are logical burst * 1000 + poll)")
    rng = np.random.default_rng(seed)
    sets = counter_sets or [DEFAULT_SETS[i % len(DEFAULT_SETS)] for i in range(n_runs)]
    n_pos = len(_TEMPLATE)
    tasks = np.repeat(np.arange(1, n_tasks + 1), n_iters * n_pos)
    iters = np.tile(np.repeat(np.arange(n_iters), n_pos), n_tasks)
    pos = np.tile(np.arange(n_pos), n_tasks * n_iters)
    n_logical = tasks.size
    # base behaviour of every logical compute burst (same in all runs)
    mean_log_ins = np.array([t[5] for t in _TEMPLATE])[pos]
    base_ins = 10 ** (mean_log_ins + rng.normal(0, work_spread / 2.3, n_logical))
    base_ipc = np.clip(rng.normal(1.6, 0.5, n_logical), 0.3, 3.5)
    rates = {c: 10 ** (m + rng.normal(0, 0.4, n_logical)) for c, (m, _, _) in _COUNTER_MODEL.items()}
    optional_present = np.ones(n_logical, bool)
    runs = []
    for r in range(n_runs):
        rr = np.random.default_rng(seed * 1000 + r + 1)
        # how many bursts each logical position produces in this run: polling adds tiny bursts
        n_poll = np.where(pos == POLL_POS, rr.integers(0, max_polls + 1, n_logical), 0)
        present = optional_present.copy()
        if r > 0:
            present &= ~((pos == OPTIONAL_POS) & (rr.random(n_logical) < p_missing))
        reps = np.where(present, 1 + n_poll, 0)
        idx = np.repeat(np.arange(n_logical), reps)
        rep = np.arange(idx.size) - np.repeat(np.cumsum(reps) - reps, reps)  # 0 = compute burst, k = k-th poll
        # extra bursts of this run only: inserted before a random logical burst
        extra_mask = rr.random(n_logical) < p_extra
        ex_idx = np.flatnonzero(extra_mask)
        idx = np.concatenate([idx, ex_idx])
        rep = np.concatenate([rep, np.full(ex_idx.size, -2)])
        # split bursts: a first piece (rep -1) before the compute burst of a long logical burst
        split = (
            (rr.random(n_logical) < p_split) & present & (mean_log_ins >= 5.0) if r > 0 else np.zeros(n_logical, bool)
        )
        sp_idx = np.flatnonzero(split)
        idx = np.concatenate([idx, sp_idx])
        rep = np.concatenate([rep, np.full(sp_idx.size, -1)])
        order = np.lexsort((rep, idx))  # extra first, then the split piece, then compute, then polls
        idx, rep = idx[order], rep[order]
        n = idx.size
        is_poll = rep > 0
        is_extra = rep == -2
        is_piece = rep == -1
        share = np.where(is_piece, rr.uniform(0.2, 0.8, n), 1.0)  # the first piece's share of the work
        share = np.where(~is_piece & np.r_[False, is_piece[:-1]], 1.0 - np.r_[0.0, share[:-1]], share)
        task = tasks[idx]
        p = pos[idx]
        # behaviour in this run
        d = np.exp(rr.normal(0, time_noise, n)) * (1.0 + drift * r)
        d = np.where(rr.random(n) < os_noise, d * rr.uniform(1.5, 4.0, n), d)
        work = np.exp(rr.normal(0, work_var, n_logical))[idx] if work_var else 1.0
        ins = base_ins[idx] * np.exp(rr.normal(0, 0.001, n)) * work * share
        ins = np.where(is_poll, rr.uniform(800, 2500, n), ins)
        ins = np.where(is_extra, rr.uniform(2e3, 2e5, n), ins)
        cyc = ins / base_ipc[idx] * d * np.exp(rr.normal(0, 0.01, n))
        values = {"PAPI_TOT_INS": ins, "PAPI_TOT_CYC": cyc}
        for c, (_, expo, sig) in _COUNTER_MODEL.items():
            values[c] = ins * rates[c][idx] * d ** expo * np.exp(rr.normal(0, sig, n))
        dur = np.maximum(cyc / 2.5, 200.0)  # 2.5 GHz -> ns
        # closing calls
        call = np.array([t[0] for t in _TEMPLATE], dtype=object)[p]
        kind = np.array([t[1] for t in _TEMPLATE], dtype=object)[p]
        site = np.array([t[2] for t in _TEMPLATE], dtype=object)[p]
        left = (task - 2) % n_tasks + 1
        right = task % n_tasks + 1
        rule = np.array([t[3] or "" for t in _TEMPLATE], dtype=object)[p]
        peer = np.where(rule == "left", left, np.where(rule == "right", right, 0))
        nbytes = np.array([t[4] for t in _TEMPLATE])[p]
        # ANY_SOURCE: the first receive gets the left or the right neighbour's message, per run at random
        swap = rr.random(n_logical) < p_swap
        first_any = p == ANY_POS[0]
        got_left = np.where(first_any, ~swap[idx], swap[np.maximum(idx - 1, 0)])  # the pair shares one draw
        any_rows = np.isin(p, ANY_POS)
        peer = np.where(any_rows, np.where(got_left, left, right), peer)
        nbytes = np.where(any_rows, np.where(got_left, 4096, 16384), nbytes)
        closing = p == len(_TEMPLATE) - 1
        collective = closing & ((np.arange(n_iters)[iters[idx]] % coll_every == coll_every - 1) if coll_every
                                else np.zeros(n, bool))
        call = np.where(closing & ~collective, "MPI_Sendrecv", call)
        kind = np.where(closing & ~collective, "point_to_point", kind)
        site = np.where(closing & ~collective, "solve (main.c:98)", site)
        peer = np.where(closing & ~collective, right, peer)
        call = np.where(is_extra, "MPI_Comm_rank", call)
        kind = np.where(is_extra, "other", kind)
        site = np.where(is_extra, "setup (main.c:5)", site)
        peer = np.where(is_extra | is_piece, 0, peer)
        nbytes = np.where(is_extra | is_piece, 0, nbytes)
        call_dur = np.where(kind == "collective", rr.uniform(20e3, 200e3, n), rr.uniform(1e3, 8e3, n))
        call_dur = np.where(is_poll | (call == "MPI_Test"), rr.uniform(300, 900, n), call_dur)
        call_dur = np.where(is_piece, rr.uniform(2e3, 2e4, n), call_dur)  # not running: counters read, I/O
        # times: per task, bursts and calls alternate
        # integer nanoseconds first, so that a burst starts exactly when the call before it ends (as in a trace)
        step = dur.astype(np.int64) + call_dur.astype(np.int64)
        start = np.cumsum(step) - step
        task_first = np.r_[0, np.flatnonzero(np.diff(task)) + 1]
        offset = np.repeat(start[task_first], np.diff(np.r_[task_first, n]))
        start = start - offset + 1000
        end = start + dur.astype(np.int64)
        cend = end + call_dur.astype(np.int64)
        seq = np.arange(n) - np.repeat(task_first, np.diff(np.r_[task_first, n]))
        logical = np.where(is_extra, -(np.arange(n) + 1) - r * 10_000_000_000,
                           np.where(is_piece, idx * 1000 + 999, idx * 1000 + np.maximum(rep, 0)))
        if renumber and r == n_runs - 1 and n_runs > 1:
            perm = rr.permutation(n_tasks) + 1
            task = perm[task - 1]
            peer = np.where(peer > 0, perm[np.maximum(peer, 1) - 1], 0)
            o = np.lexsort((np.arange(n), task))  # the new numbering's order: rows of a task together
            arrays = [task, start, end, cend, call, kind, site, peer, nbytes, call_dur, logical, is_piece]
            task, start, end, cend, call, kind, site, peer, nbytes, call_dur, logical, is_piece = (x[o] for x in arrays)
            values = {c: v[o] for c, v in values.items()}
            task_first = np.r_[0, np.flatnonzero(np.diff(task)) + 1]
            seq = np.arange(n) - np.repeat(task_first, np.diff(np.r_[task_first, n]))
        runs.append(_run(f"synth{r}", task, seq, start, end, cend, call, kind, site, peer, nbytes, values, logical,
                         is_piece, list(sets[r])))
    return runs


def _run(run_id: str, task: np.ndarray, seq: np.ndarray, start: np.ndarray, end: np.ndarray, cend: np.ndarray,
         call: np.ndarray, kind: np.ndarray, site: np.ndarray, peer: np.ndarray, nbytes: np.ndarray,
         values: dict[str, np.ndarray], logical: np.ndarray, is_piece: np.ndarray, counters: list[str]) -> SynthRun:
    """A :class:`SynthRun` from per-burst arrays: its closing call (name, kind, site, partner (0: none), bytes;
    none for a split piece), times (ns: burst start and end, call end), counters and logical ids."""
    n = task.size
    i32 = pl.Int32
    keys = {"appl": np.ones(n, np.int32), "task": task.astype(np.int32), "thread": np.ones(n, np.int32)}
    truth = pl.DataFrame({**keys, "burst_seq": seq, "logical": logical, "duration_ns": end - start,
                          **{c: np.round(v).astype(np.int64) for c, v in values.items()}})
    bursts = pl.DataFrame({
        "run_id": [run_id] * n, **keys, "burst_seq": seq, "cpu": task.astype(np.int32), "start_ns": start,
        "end_ns": end, "duration_ns": end - start,
        "mpi_call": pl.Series(call.astype(str)).scatter(np.flatnonzero(is_piece), None),
        "call_site": pl.Series(site.astype(str)).scatter(np.flatnonzero(is_piece), None),
        **{c: np.round(values[c]).astype(np.int64) for c in counters}})
    sends = np.isin(call, ["MPI_Isend", "MPI_Send", "MPI_Allreduce", "MPI_Sendrecv"])
    recvs = np.isin(call, ["MPI_Irecv", "MPI_Recv", "MPI_Allreduce", "MPI_Sendrecv"])
    calls = pl.DataFrame({
        "run_id": [run_id] * n, **keys, "call_seq": seq, "cpu": task.astype(np.int32),
        "mpi_call": call.astype(str), "mpi_kind": kind.astype(str), "start_ns": end, "end_ns": cend,
        "duration_ns": cend - end, "bytes_sent": np.where(sends, nbytes, 0).astype(np.int64),
        "bytes_recv": np.where(recvs, nbytes, 0).astype(np.int64),
        "peer": pl.Series(peer.astype(np.int32)).replace(0, None),
        "n_messages": (peer > 0).astype(np.int32),
        "comm": pl.Series(np.where(kind == "collective", WORLD_COMM, 0)).replace(0, None),
        "root": pl.Series([None] * n, dtype=i32), "tag": pl.Series([None] * n, dtype=pl.Int64),
        "call_site": site.astype(str)}).filter(~pl.Series(is_piece))  # a split piece ends at no call
    return SynthRun(run_id, f"synth.run{run_id[5:]}", bursts, calls, truth, counters)


def make_master_worker(*, n_workers: int = 3, n_rounds: int = 500, n_runs: int = 2, seed: int = 0,
                       time_noise: float = 0.08, counter_sets: list[list[str]] | None = None) -> list[SynthRun]:
    """``n_runs`` runs of a master-worker program: task 1 sends one work item to each of ``n_workers`` workers
    per round (``MPI_Send``), then receives their results with ``MPI_ANY_SOURCE`` (the first receive of a round at
    its own call site, the others at another) and processes each result in the burst after its receive; the
    last result's burst ends at the next round's first send. Results arrive in the order the workers finish,
    which noise changes from run to run; the work of processing a result depends on the worker (its logical id
    is the round and the worker, not the position). Workers: receive (burst closed by ``MPI_Recv``), compute
    (closed by ``MPI_Send``)."""
    rng = np.random.default_rng(seed)
    sets = counter_sets or [DEFAULT_SETS[i % len(DEFAULT_SETS)] for i in range(n_runs)]
    W, R = n_workers, n_rounds
    n_slot = 3 * W + 2  # per task and round: sends, own work, a processing burst per worker (slot 2W + task)
    n_log = (W + 2) * (R + 1) * n_slot
    base_ins = 10 ** rng.normal(5.3, 0.25, n_log)
    base_ipc = np.clip(rng.normal(1.6, 0.4, n_log), 0.4, 3.0)
    rates = {c: 10 ** (m + rng.normal(0, 0.4, n_log)) for c, (m, _, _) in _COUNTER_MODEL.items()}
    work_w = 10 ** rng.normal(6.0, 0.02, (R, W))  # the workers' items: alike, so arrival order varies
    runs = []
    for r in range(n_runs):
        rr = np.random.default_rng(seed * 1000 + r + 1)
        finish = work_w * np.exp(rr.normal(0, time_noise, (R, W)))
        order = np.argsort(finish, axis=1) + 2  # worker task ids in arrival order, per round
        rnd = np.repeat(np.arange(R), 2 * W)
        k = np.tile(np.arange(2 * W), R)
        # master: k < W: burst closed by the send to worker k + 2 (k = 0: processing the previous round's last
        # result); k = W: own work closed by the first receive; k > W: processing the result of the (k - W)-th
        # arrival, closed by the next receive
        arrived = order[rnd, np.clip(k - W - 1, 0, W - 1)]
        last_prev = np.where(rnd > 0, order[np.maximum(rnd - 1, 0), W - 1], 0)
        m_slot = np.where(k == 0, np.where(rnd > 0, 2 * W + last_prev, 0),
                          np.where(k < W, k, np.where(k == W, W, 2 * W + arrived)))
        m_round = np.where((k == 0) & (rnd > 0), rnd - 1, rnd)
        m_call = np.where(k < W, "MPI_Send", "MPI_Recv")
        m_site = np.where(k < W, "distribute (mw.c:20)", np.where(k == W, "collect (mw.c:40)", "collect (mw.c:52)"))
        m_peer = np.where(k < W, k + 2, order[rnd, np.clip(k - W, 0, W - 1)])
        m_bytes = np.where(k < W, 4096, 1024 * m_peer)
        # workers: slot 0 waits for the item (closed by the receive), slot 1 computes it (closed by the send)
        w_task = np.repeat(np.arange(2, W + 2), 2 * R)
        w_round = np.tile(np.repeat(np.arange(R), 2), W)
        w_k = np.tile(np.arange(2), W * R)
        task = np.r_[np.ones(2 * W * R, np.int64), w_task]
        rounds = np.r_[m_round, w_round]
        slot = np.r_[m_slot, w_k]
        logical = (task * (R + 1) + rounds) * n_slot + slot
        call = np.r_[m_call, np.where(w_k == 0, "MPI_Recv", "MPI_Send")].astype(object)
        site = np.r_[m_site, np.where(w_k == 0, "work (mw.c:80)", "work (mw.c:90)")].astype(object)
        peer = np.r_[m_peer, np.ones(w_task.size, np.int64)]
        nbytes = np.r_[m_bytes, np.where(w_k == 0, 4096, 1024 * w_task)]
        n = task.size
        d = np.exp(rr.normal(0, time_noise, n))
        ins = base_ins[logical] * np.exp(rr.normal(0, 0.001, n))
        worker_compute = (task > 1) & (slot == 1)
        ins = np.where(worker_compute, work_w[np.minimum(rounds, R - 1), np.maximum(task - 2, 0)], ins)
        cyc = ins / base_ipc[logical] * d * np.exp(rr.normal(0, 0.01, n))
        cyc = np.where(worker_compute, finish[np.minimum(rounds, R - 1), np.maximum(task - 2, 0)] / 1.6, cyc)
        values = {"PAPI_TOT_INS": ins, "PAPI_TOT_CYC": cyc}
        for c, (_, expo, sig) in _COUNTER_MODEL.items():
            values[c] = ins * rates[c][logical] * d ** expo * np.exp(rr.normal(0, sig, n))
        dur = np.maximum(cyc / 2.5, 200.0).astype(np.int64)
        call_dur = rr.uniform(1e3, 8e3, n).astype(np.int64)
        step = dur + call_dur
        first = np.r_[0, np.flatnonzero(np.diff(task)) + 1]
        start = np.cumsum(step) - step
        start = start - np.repeat(start[first], np.diff(np.r_[first, n])) + 1000
        end = start + dur
        seq = np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))
        kind = np.full(n, "point_to_point", dtype=object)
        runs.append(_run(f"synth{r}", task, seq, start, end, end + call_dur, call, kind, site, peer, nbytes, values,
                         logical * 1000, np.zeros(n, bool), list(sets[r])))  # x 1000: as make_runs' ids
    return runs


def true_matches(ref: SynthRun, other: SynthRun) -> pl.DataFrame:
    """For every reference burst, the other run's burst with the same logical identity (NULL if it has none)."""
    o = other.truth.select(pl.col("task").alias("true_task"), pl.col("burst_seq").alias("true_seq"), "logical")
    return ref.truth.select("appl", "task", "thread", "burst_seq", "logical", "duration_ns").join(
        o, on="logical", how="left", maintain_order="left")


#: the stress conditions of issue 12, as options of :func:`make_condition` (4 ranks, 2 runs unless told otherwise)
CONDITIONS: dict[str, dict] = {
    "master-worker, ANY_SOURCE, first receive at its own site": dict(pattern="master_worker", n_workers=3,
                                                                      n_rounds=1000),
    "p2p only, 2,000 iterations": dict(n_tasks=4, n_iters=2000, n_runs=2, coll_every=0, drift=0.02),
    "collective every 100 iterations": dict(n_tasks=16, n_iters=1000, n_runs=2, coll_every=100, drift=0.02),
    "ranks renumbered": dict(n_tasks=8, n_iters=200, n_runs=2, coll_every=0, renumber=True),
    "split bursts": dict(n_tasks=4, n_iters=500, n_runs=2, p_split=0.05),
    "dynamic load balancing": dict(n_tasks=4, n_iters=500, n_runs=2, work_var=0.3),
    "long polling loops": dict(n_tasks=4, n_iters=300, n_runs=2, max_polls=400),
    "OS noise and drift": dict(n_tasks=4, n_iters=1000, n_runs=3, coll_every=0, drift=0.05, os_noise=0.02),
}


def make_condition(*, seed: int, pattern: str = "spmd", **options) -> list[SynthRun]:
    """Runs of one of the ``CONDITIONS``: :func:`make_master_worker` for ``pattern="master_worker"``, else
    :func:`make_runs`."""
    return (make_master_worker if pattern == "master_worker" else make_runs)(seed=seed, **options)


def score(ref: SynthRun, other: SynthRun, matches: pl.DataFrame, min_ns: int = 10_000) -> tuple[float, int]:
    """(share of reference bursts >= ``min_ns`` matched to their true logical burst, or left unmatched when the
    other run has none; number scored) from merge_matches rows of ``other``. A piece of a split burst is also
    right when matched to the other run's whole burst (a many-to-one match)."""
    t = true_matches(ref, other).filter(pl.col("duration_ns") >= min_ns)
    whole = other.truth.select(pl.col("task").alias("whole_task"), pl.col("burst_seq").alias("whole_seq"),
                               (pl.col("logical") + 999).alias("logical"))
    t = t.join(whole, on="logical", how="left", maintain_order="left").with_columns(
        pl.when(pl.col("logical") % 1000 == 999).then(pl.col("whole_task")).alias("whole_task"))
    m = matches.filter(pl.col("other_run_id") == other.run_id).select(
        "appl", "task", "thread", "burst_seq", "other_task", "other_burst_seq")
    j = t.join(m, on=["appl", "task", "thread", "burst_seq"], how="left")
    right = ((pl.col("true_seq").is_null() & pl.col("other_burst_seq").is_null())
             | ((pl.col("true_task") == pl.col("other_task")) & (pl.col("true_seq") == pl.col("other_burst_seq")))
             | ((pl.col("whole_task") == pl.col("other_task")) & (pl.col("whole_seq") == pl.col("other_burst_seq"))))
    return float(j.select(right.fill_null(False).mean()).item()), j.height


def periodic_rank(run: SynthRun, task: int, seed: int = 5) -> SynthRun:
    """``run`` with ``task``'s counters alike in every iteration: each the median over the task's bursts closed at
    the same call site, times a 0.2 % noise (a rank whose call sequence and work alone cannot tell its iterations
    apart)."""
    noise = pl.Series(np.exp(np.random.default_rng(seed).normal(0, 0.002, run.bursts.height)))
    def same(c: str) -> pl.Expr:
        return (pl.col(c).median().over("task", "mpi_call", "call_site") * noise).round().cast(pl.Int64)
    return replace(run, bursts=run.bursts.with_columns(
        pl.when(pl.col("task") == task).then(same(c)).otherwise(pl.col(c)).alias(c) for c in run.counters))


def late_start(run: SynthRun, task: int, iterations: int = 1) -> SynthRun:
    """``run`` with ``task``'s trace starting ``iterations`` later (tracing started late on that rank): its bursts,
    calls and truth before its burst closed at the call site of its first point-to-point call, that many times
    over, are cut."""
    own = run.bursts.filter(pl.col("task") == task)
    site = run.mpi_calls.filter((pl.col("task") == task) & pl.col("peer").is_not_null()).get_column("call_site")[0]
    t0 = own.filter(pl.col("call_site") == site).get_column("start_ns").sort()[iterations]
    cut = (pl.col("task") == task) & (pl.col("start_ns") < t0)
    gone = run.bursts.filter(cut).select("task", "burst_seq")
    return replace(run, bursts=run.bursts.filter(~cut), mpi_calls=run.mpi_calls.filter(~cut),
                   truth=run.truth.join(gone, on=["task", "burst_seq"], how="anti"))


def other_input_pair(out, seed: int, ranks: int = 6, iterations: int = 12) -> list:
    """Two Paraver traces of one experiment that are **not** the same program on the same input (``out/<app>.run0``
    and ``.run1``; returns their .prv paths): run 0 of the simulator's ``plain`` campaign ``seed``, and run 1 of the
    same application (same ranks, neighbours, message sizes and call structure) on another input deck: 2.5 x the
    interior work, computed by other kernels (their per-instruction rates differ). Two runs of one program differ
    by noise, arrival order, polling and timing, never by the work and the rates of the same burst at once."""
    import shutil
    from pathlib import Path

    from synthtrace.simulator import mechanisms as mech
    out = Path(out)
    same = mech.campaign("plain", seed, ranks=ranks, iterations=iterations)
    other = replace(same, shape=replace(same.shape, interior_ins=same.shape.interior_ins * 2.5, varying=True))
    traces = [mech.simulate(out / f"deck{i}", spec).traces[i] for i, spec in enumerate((same, other))]
    paths = []
    for prv in traces:
        for ext in (".prv", ".pcf", ".row"):
            shutil.copy(prv.with_suffix(ext), out / prv.with_suffix(ext).name)
        paths.append(out / prv.name)
    return paths
