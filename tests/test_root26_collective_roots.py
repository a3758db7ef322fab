"""The root of a rooted collective (Paraver event 50100003): Extrae writes it as a flag, value 1 on the root's own
entry record only; the reader puts the root's rank in its communicator on every member's call, the writer and the
simulator write the flag as Extrae does, and a flag where Extrae never writes one is said in one line."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from synthtrace.simulator import ExperimentSpec, TruthStore, simulate_experiment
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.formats.paraver.writer import Communicator, TraceMeta, write_paraver
from testing.traces import PRIME

#: per call of every task: (call, communicator, root rank in it or None); communicator 5 is tasks 2 and 4
_PLAN = [("MPI_Bcast", 1, 2), ("MPI_Reduce", 1, 0), ("MPI_Allreduce", 1, None), ("MPI_Bcast", 5, 1),
         ("MPI_Gather", 5, 1), ("MPI_Bcast", 1, 3)]
_SUB = (2, 4)


def _rooted_tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Bursts and calls of 4 tasks running :data:`_PLAN` (communicator 5's calls on its members only)."""
    bursts, calls = [], []
    for task in range(1, 5):
        at, seq = 0, 0
        for i, (call, comm, root) in enumerate(_PLAN):
            if comm == 5 and task not in _SUB:
                continue
            start = 1_000 * (i + 1) + 10 * task
            bursts.append((task, seq, at, start, call))
            calls.append((task, seq, call, start, start + 100, comm, root))
            at, seq = start + 100, seq + 1
        bursts.append((task, seq, at, 9_000, None))
    b = pl.DataFrame(bursts, schema=["task", "burst_seq", "start_ns", "end_ns", "mpi_call"], orient="row")
    b = b.with_columns(pl.lit(1).alias("appl"), pl.lit(1).alias("thread"), pl.col("task").alias("cpu"),
                       pl.lit(None, pl.String).alias("call_site"), (pl.col("end_ns") - pl.col("start_ns")).alias(
                           "PAPI_TOT_INS"))
    c = pl.DataFrame(calls, schema=["task", "call_seq", "mpi_call", "start_ns", "end_ns", "comm", "root"],
                     orient="row")
    c = c.with_columns(pl.lit(1).alias("appl"), pl.lit(1).alias("thread"), pl.col("task").alias("cpu"),
                       pl.lit("collective").alias("mpi_kind"), pl.lit(100).alias("duration_ns"),
                       pl.lit(8).alias("bytes_sent"), pl.lit(8).alias("bytes_recv"), pl.lit(0).alias("n_messages"))
    return b, c


def _written(tmp_path: Path) -> tuple[Path, pl.DataFrame]:
    bursts, calls = _rooted_tables()
    meta = TraceMeta.simple(4)
    meta = dataclasses.replace(meta, communicators=(*meta.communicators, Communicator(1, 5, _SUB)))
    return write_paraver(tmp_path / "rooted", bursts, calls, meta, counters=["PAPI_TOT_INS"]), calls


def _entry_pairs(line: str) -> dict[int, int]:
    f = line.split(":")[6:]
    return dict(zip(map(int, f[::2]), map(int, f[1::2]), strict=True))


def _roots(calls: pl.DataFrame) -> list[tuple]:
    return calls.select("task", "mpi_call", "start_ns", "root").sort("task", "start_ns").rows()


@pytest.mark.real_traces
def test_prime_rooted_calls_name_rank_0_on_every_task():
    """prime_v0 (Extrae): 19 Bcasts and 19 Reduces of 16 tasks, flag 1 on rank 0's records only: every task's
    record of each names root 0 (was 1 on rank 0's, NULL on the 15 others'); the Allreduce-free rest stays NULL."""
    _, calls, summary = ParaverTrace(PRIME).read_tables("prime")
    rooted = calls.filter(pl.col("mpi_call").is_in(["MPI_Bcast", "MPI_Reduce"]))
    assert rooted.height == 2 * 19 * 16 and rooted.get_column("task").n_unique() == 16
    assert rooted.get_column("root").to_list() == [0] * rooted.height
    assert calls.filter(~pl.col("mpi_call").is_in(["MPI_Bcast", "MPI_Reduce"])).get_column("root").null_count() \
        == calls.height - rooted.height
    assert not [w for w in summary.warnings if "50100003" in w]


def test_writer_writes_the_flag_on_the_roots_own_record_and_reads_back_the_ranks(tmp_path):
    """write -> read keeps every root (a rank in the communicator, on every member's call), and the .prv carries
    50100003:1 on one entry a rooted collective, as Extrae: Bcast/Reduce on the member of that rank (communicator
    5's rank 1 is task 4), Gather on the member whose task index is the rank (task 2), none on the Allreduce."""
    prv, calls = _written(tmp_path)
    _, read, summary = ParaverTrace(prv).read_tables("x")
    assert _roots(read) == _roots(calls.cast({"root": pl.Int32}))
    flagged = sorted((int(ln.split(":")[3]), _entry_pairs(ln)[50_000_002], _entry_pairs(ln)[50_100_003])
                     for ln in prv.read_text().splitlines() if ln.startswith("2:") and ":50100003:" in ln)
    bcast, reduce, gather = 7, 9, 13  # Extrae's call ids
    assert flagged == [(1, reduce, 1), (2, gather, 1), (3, bcast, 1), (4, bcast, 1), (4, bcast, 1)]
    assert not summary.warnings


def test_simulated_roots_are_flags_and_read_back(tmp_path):
    """The simulator's master-worker Bcasts (rooted at the master, tasks renumbered per run) carry the flag on the
    master's call only, and the reader gives every task's call the master's rank, as the ground truth says."""
    truth = TruthStore(tmp_path / "truth")
    simulate_experiment(tmp_path, ExperimentSpec(app="mw", pattern="master_worker", ranks=4, iterations=3, runs=1,
                                                 seed=5), truth)
    truth.close()
    run = pl.read_parquet(tmp_path / "truth" / "runs.parquet").row(0, named=True)
    expected = pl.read_parquet(tmp_path / "truth" / "mpi_calls").filter(pl.col("run_name") == run["run_name"])
    rooted = expected.filter(pl.col("root").is_not_null())
    assert rooted.height > 4
    text = Path(run["trace"]).read_text().splitlines()
    flags = [_entry_pairs(ln)[50_100_003] for ln in text if ln.startswith("2:") and ":50100003:" in ln]
    assert flags == [1] * (rooted.height // 4)
    _, read, _ = ParaverTrace(run["trace"]).read_tables("x")
    keys = ["task", "start_ns"]
    both = read.select(*keys, "root").join(expected.select(*keys, pl.col("root").alias("truth")), on=keys)
    assert both.height == read.height and both.filter(pl.col("root").ne_missing(pl.col("truth"))).height == 0


def _with_extra_flags(prv: Path, out: Path, where: list[tuple[int, int, int]]) -> Path:
    """``prv`` copied to ``out`` (with its .pcf and .row) with 50100003:value added to the entries of (task, call
    id, value) at their first occurrence."""
    lines = prv.read_text().splitlines(keepends=True)
    for task, call_id, value in where:
        i = next(i for i, ln in enumerate(lines) if ln.startswith("2:") and int(ln.split(":")[3]) == task
                 and f":50000002:{call_id}:" in ln and ":50100003:" not in ln)
        lines[i] = lines[i].rstrip("\n") + f":50100003:{value}\n"
    target = out / prv.name
    out.mkdir()
    target.write_text("".join(lines))
    for suffix in (".pcf", ".row"):
        target.with_suffix(suffix).write_bytes(prv.with_suffix(suffix).read_bytes())
    return target


def test_two_flags_in_one_collective_and_a_flag_on_an_allreduce_are_said(tmp_path):
    """A second member flagged in the first Bcast: one line naming it, that Bcast's root unknown (NULL) on every
    member, the other roots kept; a flag on an Allreduce (no root): one line, ignored (a 0 there, "not the root",
    is no flag: not said). Warned, not refused: Paraver reads such a trace, and nothing but the root depends on
    the flag."""
    prv, calls = _written(tmp_path / "w")
    allreduce = 10
    bad = _with_extra_flags(prv, tmp_path / "bad", [(1, 7, 1), (2, allreduce, 1), (3, allreduce, 0)])
    _, read, summary = ParaverTrace(bad).read_tables("x")
    said = [w for w in summary.warnings if "50100003" in w]
    assert len(said) == 2
    assert "1 collectives carry the root flag (event 50100003) on more than one member" in said[1]
    assert "MPI_Bcast at 1010 ns on communicator 1 of application 1, tasks 1, 3" in said[1]
    assert "1 calls that have no root carry the root flag" in said[0] and "MPI_Allreduce of task 2" in said[0]
    first_bcast = pl.col("start_ns") < 1_100
    expected = calls.with_columns(pl.when(first_bcast).then(None).otherwise(pl.col("root")).alias("root"))
    assert _roots(read) == _roots(expected.cast({"root": pl.Int32}))


def test_roots_survive_spilled_calls_small_parts_and_a_second_pass(tmp_path, monkeypatch):
    """24 tasks x 90 collectives (Bcast and Reduce rooted at a moving rank, Allreduce), read in small parts with the
    calls spilled to Parquet parts that group them otherwise: every member's call names its collective's root, and
    a second pass over the calls (a second query) names the same roots."""
    from synthtrace.tracelib.formats import bursts as bursts_module
    from synthtrace.tracelib.formats import call_store

    n_tasks, n_calls = 24, 90
    task = [t for t in range(1, n_tasks + 1) for _ in range(n_calls)]
    seq = [s for _ in range(n_tasks) for s in range(n_calls)]
    name = [("MPI_Bcast", "MPI_Reduce", "MPI_Allreduce")[s % 3] for s in seq]
    root = [None if s % 3 == 2 else (s * 7) % n_tasks for s in seq]
    start = [1_000 * (s + 1) + t for s, t in zip(seq, task, strict=True)]
    calls = pl.DataFrame({"appl": 1, "task": task, "thread": 1, "call_seq": seq, "cpu": task, "mpi_call": name,
                          "mpi_kind": "collective", "start_ns": start, "end_ns": [s + 100 for s in start],
                          "duration_ns": 100, "bytes_sent": 8, "bytes_recv": 8, "n_messages": 0, "comm": 1,
                          "root": root})
    bursts = calls.select("appl", "task", "thread", pl.col("call_seq").alias("burst_seq"), "cpu", "mpi_call",
                          (pl.col("start_ns") - 800).alias("start_ns"), pl.col("start_ns").alias("end_ns"),
                          pl.lit(800).alias("PAPI_TOT_INS"))
    prv = write_paraver(tmp_path / "moving", bursts, calls, TraceMeta.simple(n_tasks), counters=["PAPI_TOT_INS"])
    monkeypatch.setattr(bursts_module, "MAX_PART_CELLS", 4096)
    monkeypatch.setattr(call_store, "HOLD_BYTES", 1 << 14)
    monkeypatch.setattr(call_store, "SPILL_PART_BYTES", 1 << 15)
    stream = ParaverTrace(prv).read("r", spill=tmp_path / "spill")
    for _ in stream:
        pass
    assert len(list((tmp_path / "spill").glob("*.parquet"))) > 1
    first, second = stream.summary.calls.collect(), stream.summary.calls.collect()
    assert _roots(first) == _roots(second) == _roots(calls.cast({"root": pl.Int32}))


def test_paraver_and_otf2_of_one_simulated_run_name_the_same_roots(tmp_path):
    """The checkpoint mechanism's run 1 (a Gather rooted at rank 0 inside one iteration) written as a .prv and as
    an OTF2 archive: both readers name root 0 on every member's Gather, the .prv carrying the flag once."""
    import dataclasses as dc

    from synthtrace.simulator import mechanisms as mech
    from synthtrace.tracelib.formats.otf2 import Otf2Trace

    spec = mech.campaign("checkpoint", 3, ranks=4, iterations=6, runs=2)
    prv = mech.simulate(tmp_path / "prv", spec).traces[1]
    otf2 = mech.simulate(tmp_path / "otf2", dc.replace(spec, trace_format="otf2")).traces[1]
    gathers = []
    for calls in (ParaverTrace(prv).read_tables("p")[1], Otf2Trace(otf2).read_tables("o")[1]):
        gathers.append(calls.filter(pl.col("mpi_call") == "MPI_Gather").select("task", "root").sort("task").rows())
    assert gathers[0] == gathers[1] == [(t, 0) for t in range(1, 5)]
    flags = [ln for ln in Path(prv).read_text().splitlines() if ln.startswith("2:") and ":50100003:" in ln]
    assert len(flags) == 1 and flags[0].split(":")[3] == "1"


def test_a_member_missing_a_collective_leaves_that_communicators_roots_unknown(tmp_path):
    """Task 4's first Bcast not recorded (a trace cut mid-collective): its k-th collective on the world is not the
    others' k-th, so the world's roots are NULL on every call, said in one line; communicator 5's kept."""
    bursts, calls = _rooted_tables()
    lost = (pl.col("task") == 4) & (pl.col("start_ns") < 1_100)
    calls = calls.filter(~lost)
    bursts = bursts.with_columns(pl.when(lost.not_() | pl.col("mpi_call").is_null()).then(pl.col("mpi_call"))
                                 .alias("mpi_call"))
    meta = TraceMeta.simple(4)
    meta = dataclasses.replace(meta, communicators=(*meta.communicators, Communicator(1, 5, _SUB)))
    prv = write_paraver(tmp_path / "cut", bursts, calls, meta, counters=["PAPI_TOT_INS"])
    _, read, summary = ParaverTrace(prv).read_tables("x")
    said = [w for w in summary.warnings if "different numbers of collectives" in w]
    assert len(said) == 1 and "communicator 1 of application 1: 3 to 4" in said[0]
    expected = calls.with_columns(pl.when(pl.col("comm") == 5).then(pl.col("root")).alias("root"))
    assert _roots(read) == _roots(expected.cast({"root": pl.Int32}))


def _every_member_carries(tmp_path: Path, value: int) -> Path:
    """prime_v0 (real) with the first MPI_Bcast's entry record of each of its 16 tasks carrying 50100003:value
    (the project's old form: the root's rank on every member) and task 1's own flag removed."""
    out, seen = [], set()
    for line in PRIME.read_text().splitlines(keepends=True):
        fields = line.split(":")
        if fields[0] == "2" and ":50000002:7:" in line and fields[1] not in seen:
            seen.add(fields[1])
            line = line.replace(":50100003:1:", ":").replace(":50100004:1:", f":50100004:1:50100003:{value}:")
        out.append(line)
    assert len(seen) == 16
    target = tmp_path / PRIME.name
    target.write_text("".join(out))
    for suffix in (".pcf", ".row"):
        target.with_suffix(suffix).write_bytes(PRIME.with_suffix(suffix).read_bytes())
    return target


@pytest.mark.skipif(not PRIME.is_file(), reason="real traces not found")
@pytest.mark.parametrize("value", [99999, 16])
def test_an_old_form_root_outside_its_communicator_is_said_and_unknown(tmp_path, value):
    """attack26 A1: every member of prime's first Bcast (16 members) names root ``value``, no rank of that
    communicator: one line naming it, that Bcast's root NULL on every member, the 37 other rooted collectives' root
    0 kept. Failed first: stored as root 99999 (16) on 16 calls, nothing said."""
    _, calls, summary = ParaverTrace(_every_member_carries(tmp_path, value)).read_tables("x")
    said = [w for w in summary.warnings if "outside their communicator" in w]
    assert len(said) == 1 and f"root {value} of 16 members" in said[0], summary.warnings
    rooted = calls.filter(pl.col("mpi_call").is_in(["MPI_Bcast", "MPI_Reduce"]))
    assert rooted.filter(pl.col("root").is_null()).height == 16
    assert set(rooted.get_column("root").drop_nulls()) == {0}


@pytest.mark.skipif(not PRIME.is_file(), reason="real traces not found")
def test_an_old_form_root_inside_its_communicator_is_read_as_that_rank(tmp_path):
    """The same with rank 3 (a member's): read as 3 on the 16 members, nothing said of it."""
    _, calls, summary = ParaverTrace(_every_member_carries(tmp_path, 3)).read_tables("x")
    assert not [w for w in summary.warnings if "50100003" in w], summary.warnings
    rooted = calls.filter(pl.col("mpi_call").is_in(["MPI_Bcast", "MPI_Reduce"]))
    assert rooted.filter(pl.col("root") == 3).height == 16 and rooted.get_column("root").null_count() == 0
