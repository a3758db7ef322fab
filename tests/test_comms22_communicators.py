"""Communicators matched across runs by their members (comms22, mergeattack21 M4): a tracer's communicator ids are
per-run handles (Extrae numbers them as the run creates them, OTF2 by definition reference), so the merge maps
each run's communicators to the reference's by their member tasks (the ``c:`` lines of a ``.prv`` header, OTF2's
communicator groups), kept with the stored run; a run without them keeps its ids (compared as numbers)."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.formats.otf2 import Otf2Trace
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.formats.source import COMMUNICATOR_SCHEMA
from synthtrace.tracelib.merge.communicators import communicator_map, renamed_communicators
from synthtrace.tracelib.merge.merge_runs import RunTables, merge_runs
from synthtrace.tracelib.thread_key import ID_BITS
from testing.simulator_campaigns import mechanism_score, merge_campaign, read_campaign

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
LULESH_A = TRACES / "paraver" / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
LULESH_B = TRACES / "paraver" / "lulesh_7+1_with_uncores_sockets1+2.chop8.prv"
PING_PONG = TRACES / "otf2" / "ping-pong-otf2" / "traces.otf2"
PING_PONG_PAPI = TRACES / "otf2" / "ping-pong-otf2-papi" / "traces.otf2"

real = pytest.mark.skipif(not LULESH_A.is_file(), reason="the real traces are not here")


def _sets(members: pl.DataFrame) -> dict[int, list[int | None]]:
    """comm -> its member tasks, sorted."""
    grouped = members.group_by("comm").agg(pl.col("task").sort())
    return dict(zip(grouped.get_column("comm").to_list(), grouped.get_column("task").to_list()))


def _members(rows: dict[int, list[int]]) -> pl.DataFrame:
    return pl.DataFrame([(1, c, t) for c, ts in rows.items() for t in ts], schema=COMMUNICATOR_SCHEMA, orient="row")


@real
def test_the_lulesh_headers_communicators_are_read():
    """Extrae's c: lines: the world (id 1), a MPI_COMM_SELF per task (ids 2-13), and the 8 ranks' communicator 14
    that the collectives name (50100004 = 14)."""
    sets = _sets(ParaverTrace(LULESH_A).communicators)
    assert len(sets) == 14
    assert sets[1] == list(range(1, 13)) and sets[14] == list(range(1, 9))
    assert sets[2] == [9] and sets[13] == [1]  # the self communicators, numbered as the run created them


@real
def test_the_two_lulesh_runs_self_communicators_are_paired_by_their_members():
    """The two real runs number their tasks' MPI_COMM_SELF differently (task 9's is 2 in one, 7 in the other):
    each communicator of one is the other's with the same members; the world and the ranks' communicator keep
    their ids; no member set is held by a different number of communicators."""
    a, b = ParaverTrace(LULESH_A).communicators, ParaverTrace(LULESH_B).communicators
    mapping, uneven = communicator_map(a, b)
    to = dict(zip(mapping.get_column("comm").to_list(), mapping.get_column("to").to_list()))
    assert to[1] == 1 and to[14] == 14
    assert to[7] == 2 and to[2] == 4  # task 9's self: 7 -> 2; task 2's: 2 -> 4
    sets_a, sets_b = _sets(a), _sets(b)
    assert all(sets_b[c] == sets_a[t] for c, t in to.items())
    assert uneven.height == 0


def test_a_bad_communicator_line_is_skipped_with_a_warning(tmp_path):
    """A c: line whose task count is not its N is said (file and line) and skipped; the others are read."""
    prv = tmp_path / "t.prv"
    prv.write_text("#Paraver (01/01/2020 at 00:00):1000_ns:1(2):1:2(1:1,1:1),3\n"
                   "c:1:1:2:1:2\nc:1:2:3:1\nc:1:3:1:2\n1:1:1:1:1:0:1000:1\n1:2:1:2:1:0:1000:1\n")
    with pytest.warns(UserWarning, match=re.escape(f"{prv}:3: communicator line skipped")):
        trace = ParaverTrace(prv)
    assert _sets(trace.communicators) == {1: [1, 2], 3: [2]}


def test_a_header_listing_too_many_members_keeps_none(tmp_path, monkeypatch):
    """The header may be 64 MiB of c: lines: past MAX_MEMBERS members none are kept (said, with the line), and the
    trace is read as one without them (its communicator ids compared as numbers)."""
    import synthtrace.tracelib.formats.paraver.communicators as paraver_comms
    monkeypatch.setattr(paraver_comms, "MAX_MEMBERS", 3)
    prv = tmp_path / "t.prv"
    prv.write_text("#Paraver (01/01/2020 at 00:00):1000_ns:1(2):1:2(1:1,1:1),2\n"
                   "c:1:1:2:1:2\nc:1:2:2:1:2\n1:1:1:1:1:0:1000:1\n1:2:1:2:1:0:1000:1\n")
    with pytest.warns(UserWarning, match=re.escape(f"{prv}:3: the communicator lines list more than 3 members")):
        trace = ParaverTrace(prv)
    assert trace.communicators.height == 0


def test_duplicates_pair_in_creation_order_and_the_rest_get_ids_no_reference_communicator_has():
    """The world and its duplicates (one member set) pair in id order; a run holding more of them than the
    reference says which set is ambiguous; a communicator whose members the reference lacks, or an extra
    duplicate, gets an id that names no reference communicator (its collectives then have no counterpart)."""
    ref = _members({1: [1, 2, 3, 4], 5: [1, 2, 3, 4], 6: [1, 2], 7: [3, 4]})
    other = _members({1: [1, 2, 3, 4], 9: [1, 2, 3, 4], 12: [1, 2, 3, 4], 6: [3, 4], 8: [1, 3]})
    mapping, uneven = communicator_map(ref, other)
    to = dict(zip(mapping.get_column("comm").to_list(), mapping.get_column("to").to_list()))
    assert to[1] == 1 and to[9] == 5 and to[6] == 7
    unknown = {to[12], to[8]}
    assert len(unknown) == 2 and not unknown & {1, 5, 6, 7, 9, 12, 8}
    assert uneven.select("members", "alike", "ref_alike").rows() == [("1,2,3,4", 3, 2)]


def test_a_renumbered_runs_members_are_compared_in_the_references_numbering():
    """A run whose roles sit on other ranks (tasks 1 and 3, 2 and 4 swapped: a reordering MPI_Cart_create) lists
    other ranks as the members of the same communicator: as numbered, its row of roles 1-2 looks like the
    reference's other row; in the reference's numbering (the rank correspondence's) it is the same row."""
    ref = _members({1: [1, 2, 3, 4], 2: [1, 2], 3: [3, 4]})
    other = _members({1: [1, 2, 3, 4], 2: [3, 4], 3: [1, 2]})
    calls = pl.DataFrame({"appl": [1, 1], "task": [3, 1], "comm": [2, 3]}, schema={"appl": pl.Int32,
                                                                                    "task": pl.Int32, "comm": pl.Int64})
    run = RunTables("b", "b", pl.DataFrame(), calls, communicators=other)
    reference = RunTables("a", "a", pl.DataFrame(), calls.head(0), communicators=ref)
    as_numbered = renamed_communicators(run, reference)
    assert as_numbered.run.mpi_calls.get_column("comm").to_list() == [3, 2]
    renum = {(1 << ID_BITS) | a: b for a, b in ((1, 3), (3, 1), (2, 4), (4, 2))}
    renumbered = renamed_communicators(run, reference, renum)
    assert renumbered.moved is None and renumbered.run.mpi_calls.get_column("comm").to_list() == [2, 3]
    assert not renumbered.same_ids(as_numbered)


@pytest.mark.skipif(not PING_PONG.is_file(), reason="the real traces are not here")
def test_otf2_communicators_come_from_their_groups():
    """Score-P's ping-pong: two communicators of both ranks (the world and the one the messages name) and
    MPI_COMM_SELF, defined once (no members); the two real runs define them alike."""
    _, calls, summary = Otf2Trace(PING_PONG).read_tables("a")
    sets = _sets(summary.communicators)
    assert sets == {0: [1, 2], 1: [1, 2], 2: [None]}
    assert set(calls.get_column("comm").drop_nulls()) <= set(sets)
    _, _, papi = Otf2Trace(PING_PONG_PAPI).read_tables("b")
    mapping, uneven = communicator_map(summary.communicators, papi.communicators)
    assert mapping.filter(pl.col("comm") != pl.col("to")).height == 0 and uneven.height == 0


@pytest.fixture(scope="module")
def shifted(tmp_path_factory) -> mech.Campaign:
    """Row and column communicators and a duplicate of the world; run 1's tracer numbers every communicator after
    the world 4 further, so its rows carry the reference's column ids (the 4x4 grid's)."""
    return mech.simulate(tmp_path_factory.mktemp("sim"), mech.campaign("sub_comms_ids", 0, iterations=12))


def test_a_run_numbering_its_communicators_otherwise_is_merged_right(shifted):
    """Before: refused (the halo on the duplicate looked like other channels: 50 % of the messages agreed)."""
    o = merge_campaign(shifted)
    assert o.verdict == "ok" and o.right >= 0.995, (o.verdict, o.right, o.message)
    assert "communicator id(s) renamed" in o.message


def test_runs_without_members_keep_comparing_ids(tmp_path):
    """A run stored before its communicators were kept (or whose trace declares none): its ids are compared as
    numbers, as before, and a campaign whose runs number them alike merges right."""
    c = mech.simulate(tmp_path, mech.campaign("sub_comms", 0, iterations=12))
    runs = read_campaign(c)
    res = merge_runs([runs[0], replace(runs[1], communicators=None)])
    assert not any("renamed" in n for n in res.warnings)
    assert set(res.quality.get_column("verdict")) == {"ok"}
    assert mechanism_score(c.truth, runs[0].run_id, runs[1].run_id, res.matches)[0] >= 0.995


def test_the_members_are_stored_with_the_run_and_the_merge_uses_them(run_cli, shifted, tmp_path):
    """Through the warehouse: ingest keeps each run's communicators (communicators.parquet), and ``synthtrace
    merge`` maps the shifted run's by them."""
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", *shifted.traces, "--experiment", "x", "-w", wh)
    assert code == 0, err
    stored = sorted((wh / "runs").glob("*/communicators.parquet"))
    assert len(stored) == 2
    assert {len(_sets(pl.read_parquet(p))) for p in stored} == {10}  # world, 4 rows, 4 columns, the duplicate
    code, out, err = run_cli("merge", "x", "-w", wh)
    assert code == 0, err
    assert re.search(r"^verdict for x: ok", out, re.M), out
    matches = pl.read_parquet(wh / "experiments" / "x" / "merge_matches.parquet")
    right = mechanism_score(shifted.truth, shifted.traces[0].stem, shifted.traces[1].stem,
                            matches.with_columns(pl.col("other_run").alias("other_run_id")))[0]
    assert right >= 0.995


def test_the_partitioned_merge_maps_them_as_the_whole_merge(shifted, tmp_path):
    """A merge a few tasks at a time (stored runs above the partition threshold): the rank correspondence's
    message counts and each group's calls carry the reference's ids, and the result is the whole runs' merge.
    Before: refused (the counts compared the shifted ids)."""
    import warnings

    from polars.testing import assert_frame_equal

    import synthtrace
    from synthtrace.tracelib.merge.merge_runs import MergeOptions
    from synthtrace.tracelib.merge.partitioned import merge_partitioned
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.merged import StoredRun, merge_inputs

    for t in shifted.traces:
        synthtrace.ingest(str(tmp_path / "wh"), str(t), experiment="x")
    wh = Warehouse(tmp_path / "wh")
    exp = wh.experiment("x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = merge_runs(merge_inputs(exp), MergeOptions(), experiment="x")
        sources = [StoredRun(wh, r, exp.run_names[r]) for r in exp.run_ids]
        per_task = sum(s.threads().get_column("bursts").sum() for s in sources) // 16
        part = merge_partitioned(sources, tmp_path / "spill", MergeOptions(), "x", budget=5 * per_task)
    assert set(part.quality.get_column("verdict")) == {"ok"}
    assert_frame_equal(part.merged.collect(), whole.merged, check_exact=False, rel_tol=1e-9)
    assert sorted(part.warnings) == sorted(whole.warnings)
