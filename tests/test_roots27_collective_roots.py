"""review26 F7: the root of a Bcast or Reduce on a communicator the ``.prv`` header declares no ``c:`` line for. Its
flag marks the root's task, not its rank: the rank is the task index only on a communicator of all the
application's tasks (MPI_COMM_WORLD or a duplicate); on one of some of them the root is NULL, said in one line with
the communicator and its count of calls (also when several members carry the flag)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.formats.paraver.writer import Communicator, TraceMeta, write_paraver
from testing.traces import PRIME
from tests.test_root26_collective_roots import _SUB, _roots, _rooted_tables

_UNDECLARED = "declares no members of"


def _without_communicator_lines(prv: Path, out: Path) -> Path:
    """``prv`` copied into folder ``out`` (with its .pcf and .row) with its ``c:`` lines cut (a header that
    declares no communicator)."""
    text = prv.read_text().splitlines(keepends=True)
    header = text[0].rstrip("\n").rsplit(",", 1)[0] + ",0\n"
    out.mkdir(parents=True, exist_ok=True)
    target = out / prv.name
    target.write_text(header + "".join(ln for ln in text[1:] if not ln.startswith("c:")))
    for suffix in (".pcf", ".row"):
        target.with_suffix(suffix).write_bytes(prv.with_suffix(suffix).read_bytes())
    return target


def _undeclared_trace(tmp_path: Path) -> tuple[Path, pl.DataFrame]:
    """test_root26's 4 tasks (world 1 and communicator 5 = tasks 2, 4), written with their ``c:`` lines (the flags
    where Extrae writes them), then cut."""
    bursts, calls = _rooted_tables()
    meta = TraceMeta.simple(4)
    meta = dataclasses.replace(meta, communicators=(*meta.communicators, Communicator(1, 5, _SUB)))
    prv = write_paraver(tmp_path / "declared" / "rooted", bursts, calls, meta, counters=["PAPI_TOT_INS"])
    return _without_communicator_lines(prv, tmp_path / "undeclared"), calls


def test_an_undeclared_sub_communicators_bcast_root_is_unknown_and_said(tmp_path):
    """Communicator 5 (tasks 2 and 4, its c: line cut): its Bcast rooted at rank 1 is flagged on task 4 (Extrae's
    rule), whose task index (3) is no rank there: the root is NULL on both members' calls, one line names the
    communicator and its 2 calls. Its Gather's flag (on task 2: task index 1 = the root's rank, Extrae's rule)
    still names root 1; the world's collectives (all 4 tasks, cut too) keep their ranks. Failed first: root 3 on
    both Bcast calls, nothing said."""
    prv, calls = _undeclared_trace(tmp_path)
    assert not [ln for ln in prv.read_text().splitlines() if ln.startswith("c:")]
    _, read, summary = ParaverTrace(prv).read_tables("x")
    sub_bcast = (pl.col("comm") == 5) & (pl.col("mpi_call") == "MPI_Bcast")
    expected = calls.with_columns(pl.when(sub_bcast).then(None).otherwise(pl.col("root")).alias("root"))
    assert _roots(read) == _roots(expected.cast({"root": pl.Int32}))
    said = [w for w in summary.warnings if _UNDECLARED in w]
    assert len(said) == 1, summary.warnings
    assert str(prv) in said[0] and "2 calls of 1 rooted collectives on 1 communicators" in said[0]
    assert "communicator 5 of application 1: 2 calls of 2 tasks" in said[0]


def test_flags_on_several_members_of_an_undeclared_sub_communicator_are_said(tmp_path):
    """The same trace with task 2's call of communicator 5's Bcast flagged too (two flags: the project's old form
    or a broken trace, and no member list to tell): root NULL as before, now said in the same one line (was
    silent: failed first)."""
    prv, calls = _undeclared_trace(tmp_path / "w")
    lines = prv.read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("2:") and ln.split(":")[3] == "2"
              and ":50000002:7:" in ln and ":50100004:5" in ln)
    lines[at] = lines[at].rstrip("\n") + ":50100003:1\n"
    prv.write_text("".join(lines))
    _, read, summary = ParaverTrace(prv).read_tables("x")
    said = [w for w in summary.warnings if "50100003" in w or _UNDECLARED in w]
    assert len(said) == 1 and "communicator 5 of application 1: 2 calls of 2 tasks" in said[0], summary.warnings
    sub_bcast = (pl.col("comm") == 5) & (pl.col("mpi_call") == "MPI_Bcast")
    assert read.filter(sub_bcast).get_column("root").to_list() == [None, None]
    assert read.filter(pl.col("task").is_in(_SUB) & (pl.col("mpi_call") == "MPI_Gather")).get_column(
        "root").to_list() == [1, 1]


@pytest.mark.real_traces
@pytest.mark.skipif(not PRIME.is_file(), reason="real traces not found")
def test_prime_without_its_communicator_lines_still_names_rank_0(tmp_path):
    """prime_v0 (Extrae, 16 tasks) with its 17 ``c:`` lines cut: its Bcasts and Reduces are on a communicator of
    all 16 tasks, so the flag on task 1 names rank 0 on every member's call, nothing said (the rule that leaves
    sub-communicators' roots NULL must not take the world's)."""
    target = _without_communicator_lines(PRIME, tmp_path)
    _, calls, summary = ParaverTrace(target).read_tables("x")
    rooted = calls.filter(pl.col("mpi_call").is_in(["MPI_Bcast", "MPI_Reduce"]))
    assert rooted.height == 2 * 19 * 16 and rooted.get_column("root").to_list() == [0] * rooted.height
    assert not [w for w in summary.warnings if _UNDECLARED in w or "50100003" in w]
