"""Attack 27 A1: a single root flag (event 50100003) on a task that is no member of the collective's DECLARED
communicator was stored as a rank outside it (the task index: root 3 of a 1-member communicator), silently. Such a
flag names no rank of the communicator: the root is NULL and one line says so, as for the old form's rank outside
it (attack 26 A1)."""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from tests.test_roots27_collective_roots import _undeclared_trace


def test_a_flag_on_a_task_outside_its_declared_communicator_names_no_root(tmp_path):
    """test_root26's communicator 5 (tasks 2 and 4) declared with task 2 only: its Bcast's flag, on task 4 (no
    member now), and its Gather's, on task 2 (task index 1, past a 1-member communicator), name no rank of it."""
    _undeclared_trace(tmp_path)  # writes the declared trace first
    prv = tmp_path / "declared" / "rooted.prv"
    lines = prv.read_text().splitlines(keepends=True)
    [at] = [i for i, ln in enumerate(lines) if ln.startswith("c:1:5:")]
    lines[at] = "c:1:5:1:2\n"
    prv.write_text("".join(lines))
    _, read, summary = ParaverTrace(prv).read_tables("x")
    rooted = read.filter((pl.col("comm") == 5) & pl.col("mpi_call").is_in(["MPI_Bcast", "MPI_Gather"]))
    assert rooted.height == 4 and rooted.get_column("root").null_count() == 4
    said = [w for w in summary.warnings if "no member of their communicator" in w]
    assert len(said) == 1 and str(prv) in said[0] and "communicator 5" in said[0], summary.warnings
    world = read.filter((pl.col("comm") != 5) & pl.col("root").is_not_null())
    assert world.height > 0  # the world's roots are untouched
