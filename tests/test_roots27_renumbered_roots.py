"""A renumbered simulated run (simulator/mechanisms ``renumber_run``: the program's rank t is MPI rank perm[t]) names
as each rooted collective's root the rank of the task that played the root, as its trace numbers the tasks."""
from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

from synthtrace.simulator import mechanisms as mech
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace


def _master(calls: pl.DataFrame) -> int:
    """The farm's master (0-based task index as traced): the one task that sends to every other task."""
    sends = calls.filter(pl.col("mpi_call") == "MPI_Send").group_by("task").agg(pl.col("peer").n_unique())
    tasks = calls.get_column("task").n_unique()
    return int(sends.filter(pl.col("peer") == tasks - 1).get_column("task").item()) - 1


def test_a_renumbered_runs_bcast_roots_name_its_master(tmp_path):
    """master_worker (a Bcast from the master, rank 0 of the program, every iteration), run 1 renumbered: read
    back, every Bcast call of run 1 names as root the master's rank there, as of run 0 (rank 0). Failed first:
    run 1's roots stayed program rank 0 (task 1 there is a worker)."""
    spec = dataclasses.replace(mech.campaign("master_worker", 1, ranks=6, iterations=4, runs=2), renumber_run=1)
    traces = mech.simulate(tmp_path, spec).traces
    masters, roots = [], []
    for prv in traces:
        _, calls, _ = ParaverTrace(prv).read_tables("x")
        bcasts = calls.filter(pl.col("mpi_call") == "MPI_Bcast")
        assert bcasts.height == 6 * 4
        masters.append(_master(calls))
        roots.append(set(bcasts.get_column("root").to_list()))
    assert masters[0] == 0 and masters[1] != 0  # the seed's permutation moves the master
    assert roots == [{masters[0]}, {masters[1]}]


def test_a_sub_communicators_root_follows_its_task_to_its_new_rank():
    """Communicator 2 of program ranks (1, 3), rooted at its rank 1 (program rank 3); the run numbers program rank
    t as perm[t] = 3 - t, so its tracer lists the members as (0, 2) and program rank 3 (now 0) is rank 0 there;
    on the world program rank 2 is rank 1."""
    calls = pl.DataFrame({"task": [2, 4, 1, 2, 3, 4], "comm": [2, 2, 1, 1, 1, 1], "root": [1, 1, 2, 2, 2, 2]},
                         schema={"task": pl.Int32, "comm": pl.Int64, "root": pl.Int32})
    perm = np.array([3, 2, 1, 0])
    (out,) = mech._renumbered(perm, {1: (0, 1, 2, 3), 2: (1, 3)}, calls)
    assert out.rows() == [(3, 2, 0), (1, 2, 0), (4, 1, 1), (3, 1, 1), (2, 1, 1), (1, 1, 1)]
