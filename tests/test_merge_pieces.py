"""Compute phases read as several bursts (tracelib.merge.pieces, issue 22): OpenMP worker threads, whose bursts are
cut where timing decides (lock waits, barriers, the tracer's flushes), matched through their master thread's
parallel regions, the pieces of a region as one unit (many-to-one where the runs cut it differently)."""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.merge.merge_runs import merge_runs
from synthtrace.tracelib.merge.pieces import host_rows, units
from testing.simulator_campaigns import read_campaign, simulated

NO_MATCH = 1 << 62  # the simulator's logical-id bit of a piece with no counterpart of its own in another run


def _region_of_every_burst(truth: pl.DataFrame) -> pl.DataFrame:
    """The truth with ``unit_lid``: a piece's unit (the logical id of the first later burst of its thread that is
    not a piece: the region's last piece, or the burst that an MPI call closes)."""
    piece = (pl.col("logical_id") // NO_MATCH) % 2 == 1
    return (truth.sort("run_name", "task", "thread", "burst_seq")
            .with_columns(pl.when(~piece).then(pl.col("logical_id")).backward_fill()
                          .over("run_name", "task", "thread").alias("unit_lid"), piece.alias("piece")))


def _hybrid_merge(tmp_path, mechanism: str):
    c = simulated(mechanism, 0, tmp_path, ranks=2, iterations=8)
    runs = read_campaign(c)
    res = merge_runs(runs)
    ref = res.reference_run_id
    other = next(r.run_id for r in runs if r.run_id != ref)
    t = _region_of_every_burst(c.truth)
    own = t.filter(pl.col("run_name") == other).select("logical_id", pl.col("burst_seq").alias("own_seq"),
                                                       pl.col("thread").alias("own_thread"))
    unit = own.rename({"logical_id": "unit_lid", "own_seq": "unit_seq", "own_thread": "unit_thread"})
    m = res.matches.select(pl.col("task", "thread").cast(pl.Int64), "burst_seq", "other_task", "other_thread",
                           "other_burst_seq")
    return (t.filter(pl.col("run_name") == ref).with_columns(pl.col("task", "thread").cast(pl.Int64))
            .join(m, on=["task", "thread", "burst_seq"], how="left")
            .join(own.unique("logical_id"), on="logical_id", how="left")
            .join(unit.unique("unit_lid"), on="unit_lid", how="left"))


def test_worker_pieces_are_matched_to_their_region_whatever_the_cuts(tmp_path):
    """MPI + OpenMP, 4 threads per rank, workers cut 0-2 times per region by lock waits (as the timing falls, so
    the runs cut regions differently): every worker burst is matched to its own counterpart (a region cut alike)
    or to the other run's region as a whole (apportioned), never to a neighbouring region. Before, worker threads
    (no MPI call of their own) were aligned by position: one extra piece shifted the rest of the thread."""
    j = _hybrid_merge(tmp_path, "hybrid_locks")
    workers = j.filter(pl.col("thread") > 1)
    assert workers.height > 50 and workers.get_column("piece").sum() > 10  # the campaign cuts regions
    own = (pl.col("other_burst_seq") == pl.col("own_seq")) & (pl.col("other_thread") == pl.col("own_thread"))
    whole = pl.col("piece") & (pl.col("other_burst_seq") == pl.col("unit_seq")) & (
        pl.col("other_thread") == pl.col("unit_thread"))
    wrong = workers.filter(~(own | whole).fill_null(False))
    assert wrong.height == 0, wrong.select("task", "thread", "burst_seq", "other_burst_seq", "own_seq", "unit_seq")
    assert workers.get_column("other_burst_seq").null_count() == 0  # every region has its counterpart


def test_a_worker_region_belongs_to_its_masters_epoch():
    """A worker burst belongs to the master burst whose epoch (its start to the master's next start) holds the
    worker burst's middle: one that leaves the barrier a little before its master (real OpenMP traces) still
    falls in the master's epoch, one that works on past its master's end too; a task without MPI calls (pure
    OpenMP) and the master's own bursts have none. The worker's bursts of one epoch are one unit."""
    def row(task, thread, seq, start, end, call=None):
        return {"appl": 1, "task": task, "thread": thread, "burst_seq": seq, "start_ns": start, "end_ns": end,
                "duration_ns": end - start, "mpi_call": call, "PAPI_TOT_INS": end - start}
    b = pl.DataFrame([
        row(1, 1, 0, 0, 100, "MPI_Init"), row(1, 1, 1, 200, 1_000, "MPI_Waitall"),
        row(1, 1, 2, 1_100, 2_000, "MPI_Waitall"),
        row(1, 2, 0, 210, 500), row(1, 2, 1, 510, 1_050),  # a region cut in two, the second past the master's end
        row(1, 2, 2, 1_090, 1_900),  # leaves the barrier 10 ns before its master
        row(2, 1, 0, 0, 1_000), row(2, 2, 0, 10, 900),  # no MPI call on task 2: no master
    ])
    assert host_rows(b).tolist() == [-1, -1, -1, 1, 1, 2, -1, -1]
    u = units(b)
    assert u.size.tolist() == [1, 1, 1, 2, 1, 1, 1]
    assert u.table.filter(pl.col("thread") == 2, pl.col("task") == 1).get_column("PAPI_TOT_INS").to_list() == [
        290 + 540, 810]


def test_a_unit_whose_pieces_sum_past_int64_is_unknown_not_wrapped():
    """tidy20 (issue 23's sums): a unit's counters and time were its pieces' plain Int64 sums: two pieces of 2^62
    instructions each (each within counter_sanity's 2^62 per interval) made a unit of -2^63. Past int64 the unit's
    value is unknown (NULL), as every other sum of the project (tracelib/domain/sums.py); below it, exact."""
    big = 1 << 62

    def row(thread, seq, start, end, ins, call=None):
        return {"appl": 1, "task": 1, "thread": thread, "burst_seq": seq, "start_ns": start, "end_ns": end,
                "duration_ns": end - start, "mpi_call": call, "PAPI_TOT_INS": ins}
    b = pl.DataFrame([
        row(1, 0, 0, 100, 5, "MPI_Init"), row(1, 1, 200, 1_000, 7, "MPI_Barrier"),
        row(1, 2, 1_005, 1_300, 9, "MPI_Barrier"),
        row(2, 0, 210, 500, big), row(2, 1, 510, 900, big),  # one worker region in two pieces
        row(2, 2, 1_010, 1_100, big - 1), row(2, 3, 1_110, 1_200, 1),  # the next epoch's: just within int64
    ])
    u = units(b)
    workers = u.table.filter(pl.col("thread") == 2)
    assert workers.get_column("PAPI_TOT_INS").to_list() == [None, big]
    assert workers.get_column("duration_ns").to_list() == [290 + 390, 90 + 90]
