"""Communicators matched across runs by their members.

A trace names a communicator by a per-run handle (Extrae numbers them in the order the run created them, OTF2 by
definition reference), so two runs of one program may give one communicator other ids: a row communicator of a
4x4 grid is 17 in one run and 24 in another. Collectives are named ``(appl, comm, k)`` and calls' signatures hold
the communicator (:mod:`synthtrace.tracelib.merge.messages`, :mod:`synthtrace.tracelib.merge.align`), so the other
run's ids are rewritten to the reference's before it is aligned (:func:`on_reference_communicators`): a
communicator is the reference's communicator with the same member tasks. Several communicators of one member set
(MPI_COMM_WORLD and its duplicates, or two splits alike) are paired in the order of their ids, which is the order
the runs created them; when the runs hold a different number of them the pairing is a guess, and the merge says so.
A communicator whose member set the reference lacks gets an id no reference communicator has (its collectives then
have no counterpart). Runs without a stored members table (ingested before it was kept, or traces that declare
none) keep their ids: the merge compares them as numbers, as before.

Member sets are compared in the run's own task numbering first (the rank correspondence counts messages per
communicator), then again in the reference's when the rank correspondence renumbers the run's tasks
(:mod:`synthtrace.tracelib.merge.ranks`: a run whose program placed its roles on other ranks, e.g. a reordering
MPI_Cart_create, lists other world ranks as the members of the same communicator). A communicator id a call names
that its trace does not declare keeps its number.
Point-to-point messages need no mapping of their peers: Extrae's communication records and the OTF2 reader's
(:func:`~synthtrace.tracelib.formats.otf2.messages.peer_tasks`) name world tasks, not communicator ranks. Their
communicator is another matter: Extrae's records name none (the point-to-point calls' ``comm`` is NULL), Score-P's
name the OTF2 communicator. When one run names it and the reference does not (the same program traced by the two
tools), the run's point-to-point calls and messages name none either; when the reference names it and the run does
not, the run's are put on the communicator the reference's name most (its world communicator): messages on another
communicator, which Extrae's records cannot tell apart, stay on that one (mergeattack23 P6)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

import polars as pl

from synthtrace.tracelib.domain.mpi_calls import calls_with
from synthtrace.tracelib.merge.messages import NO_COMM
from synthtrace.tracelib.merge.ranks import renumber_columns

if TYPE_CHECKING:
    from synthtrace.tracelib.merge.merge_runs import RunTables

Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)
#: the member set of an MPI_COMM_SELF that OTF2 defines once for every process (its task NULL)
_SELF = "self"
#: the calls of a point-to-point message's two ends, and every point-to-point call (completion calls take the
#: communicator of the receives they complete in the OTF2 reader)
_ENDS = calls_with(roles=("send", "recv", "sendrecv"))
_POINT_TO_POINT = calls_with(roles=("send", "recv", "sendrecv", "probe", "wait", "test", "init", "start", "ready",
                                    "cancel", "free"))


def _member_sets(members: pl.DataFrame) -> pl.DataFrame:
    """Per communicator: appl, comm, its member set as one key (sorted tasks) and ``nth``, its place (1, 2, ...)
    among the communicators of the same set in id order (the order the run created them)."""
    key = (pl.when(pl.col("task").is_null().all()).then(pl.lit(_SELF))
           .otherwise(pl.col("task").drop_nulls().sort().cast(pl.String).str.join(",")))
    return (members.group_by("appl", "comm").agg(key.alias("members"))
            .with_columns(pl.col("comm").rank("ordinal").over("appl", "members").alias("nth")))


def communicator_map(reference: pl.DataFrame, other: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The reference's id of each communicator of ``other`` (both COMMUNICATOR_SCHEMA): ``(appl, comm, to)``, one
    row per communicator of ``other`` (``to``: an id no communicator of either run has when the reference has
    no communicator of its member set, or fewer of them), and the member sets the runs hold a different number of
    communicators of (``appl, members, alike, ref_alike``: their pairing by order is ambiguous)."""
    ref, own = _member_sets(reference), _member_sets(other)
    paired = own.join(ref.select("appl", "members", "nth", pl.col("comm").alias("to")),
                      on=["appl", "members", "nth"], how="left")
    fresh = max(int(ref.get_column("comm").max() or 0), int(own.get_column("comm").max() or 0)) + 1
    mapped = paired.with_columns(pl.coalesce("to", fresh + pl.int_range(pl.len()).over("to")).alias("to"))
    alike = [s.group_by("appl", "members").agg(pl.len().alias(name)) for s, name in ((own, "alike"),
                                                                                      (ref, "ref_alike"))]
    uneven = alike[0].join(alike[1], on=["appl", "members"]).filter(pl.col("alike") != pl.col("ref_alike"))
    return mapped.select("appl", "comm", "to").sort("appl", "comm"), uneven


def _renamed(frame: Frame | None, moved: pl.DataFrame) -> Frame | None:
    """``frame`` with its ``comm`` column (when it has one) rewritten by ``moved`` (appl, comm, to) within each
    appl (its ``appl`` column, a communication record's ``s_appl``)."""
    names = _columns(frame) if frame is not None else []
    if frame is None or "comm" not in names:
        return frame
    appl = "appl" if "appl" in names else "s_appl"
    comm = pl.col("comm")
    for (a,), part in moved.group_by("appl"):
        comm = pl.when(pl.col(appl) == a).then(comm.replace(part.get_column("comm"), part.get_column("to"))
                                               ).otherwise(comm)
    return frame.with_columns(comm.cast(pl.Int64).alias("comm"))


def _columns(frame: Frame) -> list[str]:
    return frame.collect_schema().names()


@dataclass(frozen=True)
class Renamed:
    """A run with its communicator ids the reference's (:func:`renamed_communicators`): ``run``, the ids it
    rewrote (``moved``: appl, comm, to; None: none) and what the merge notes of it."""

    run: RunTables
    moved: pl.DataFrame | None
    notes: list[str]

    def same_ids(self, other: Renamed) -> bool:
        """Whether ``other`` rewrote the same ids to the same ones."""
        if self.moved is None or other.moved is None:
            return self.moved is None and other.moved is None
        return self.moved.equals(other.moved)


def _point_to_point_comms(run: RunTables) -> pl.DataFrame | None:
    """Per appl, the communicator ``run``'s point-to-point sends and receives name most (appl, comm; comm NULL when
    they name none); None when it has no such call."""
    if not isinstance(run.mpi_calls, (pl.DataFrame, pl.LazyFrame)) or not {"appl", "mpi_call", "comm"} <= set(
            _columns(run.mpi_calls)):
        return None
    ends = run.mpi_calls.lazy().filter(pl.col("mpi_call").is_in(list(_ENDS)))
    most = (ends.group_by("appl", "comm").agg(pl.len().alias("_n"))
            .sort("appl", pl.col("comm").is_not_null(), "_n", descending=[False, True, True])
            .unique("appl", keep="first").select("appl", "comm").collect())
    return most if most.height else None


def _point_to_point_on(run: RunTables, comms: pl.DataFrame | None) -> RunTables:
    """``run`` with its point-to-point calls' and messages' communicator unnamed (``comms`` None: NULL, its logical
    messages' ``NO_COMM``) or, where unnamed, its appl's in ``comms`` (appl, comm)."""
    def comm(appl: str, unnamed: pl.Expr) -> pl.Expr:
        if comms is None:
            return unnamed
        named = pl.col(appl).replace_strict(comms.get_column("appl"), comms.get_column("comm"), default=None)
        return pl.when(pl.col("comm").is_null() | (pl.col("comm") == NO_COMM)).then(named).otherwise(pl.col("comm"))
    p2p = pl.col("mpi_call").is_in(list(_POINT_TO_POINT))
    calls = run.mpi_calls.with_columns(pl.when(p2p).then(comm("appl", pl.lit(None, pl.Int64)))
                                       .otherwise(pl.col("comm")).cast(pl.Int64).alias("comm"))
    messages = run.messages
    if messages is not None and "comm" in (names := _columns(messages)):
        messages = messages.with_columns(comm("appl" if "appl" in names else "s_appl", pl.lit(NO_COMM, pl.Int64))
                                         .cast(pl.Int64).alias("comm"))
    return replace(run, mpi_calls=calls, messages=messages)


def tool_neutral(run: RunTables, reference: RunTables) -> tuple[RunTables, list[str]]:
    """``run`` (its communicator ids the reference's already) with its point-to-point communicators named as the
    reference names them (see the module docstring: Extrae names none, Score-P the OTF2 communicator) and what the
    merge notes of it."""
    ours, theirs = _point_to_point_comms(run), _point_to_point_comms(reference)
    if ours is None or theirs is None:
        return run, []
    named, ref_named = (bool(f.get_column("comm").is_not_null().any()) for f in (ours, theirs))
    if named == ref_named:
        return run, []
    # the run's (Extrae's) on the communicator the reference's name most: its world communicator
    run = _point_to_point_on(run, theirs if ref_named else None)
    said, does = ("names", "does not") if named else ("does not name", "does")
    return run, [f"{run.run_name} {said} the communicator of its point-to-point messages where {reference.run_name} "
                 f"{does} (traced by another tool: Extrae names none, Score-P does): compared as the reference "
                 "names them"]


def tool_neutral_counts(counts: pl.DataFrame, reference: pl.DataFrame) -> pl.DataFrame:
    """A run's message counts (:func:`~synthtrace.tracelib.merge.messages.message_counts`, its communicator ids the
    reference's already) with their communicator named as the reference's ``reference`` counts name it, as
    :func:`tool_neutral` names a run's messages: none (``NO_COMM``) where the reference names none, else, where the
    run names none, the communicator most of the reference's messages name. The partitioned merge's rank
    correspondence counts them (mixed25: a Score-P run beside an Extrae reference was refused there, 0 % agreeing)."""
    def named(c: pl.DataFrame) -> bool:
        return bool((c.get_column("comm") != NO_COMM).any())
    if not counts.height or not reference.height or named(counts) == named(reference):
        return counts
    if named(reference):
        most = (reference.filter(pl.col("comm") != NO_COMM).group_by("appl", "comm").agg(pl.col("n").sum())
                .sort("n", descending=True).unique("appl", keep="first"))
        comm = pl.col("appl").replace_strict(most.get_column("appl"), most.get_column("comm"), default=NO_COMM)
        comm = pl.when(pl.col("comm") == NO_COMM).then(comm).otherwise(pl.col("comm"))
    else:
        comm = pl.lit(NO_COMM)
    keys = [c for c in counts.columns if c != "n"]
    return (counts.with_columns(comm.cast(counts.schema["comm"]).alias("comm")).group_by(keys, maintain_order=True)
            .agg(pl.col("n").sum().cast(counts.schema["n"])).select(counts.columns))


def renamed_communicators(run: RunTables, reference: RunTables, renum: Mapping[int, int] | None = None) -> Renamed:
    """``run`` with its calls' and messages' communicator ids the reference's (:func:`communicator_map` of the
    members, in the reference's task numbering when ``renum``, the rank correspondence's packed task key -> task,
    is given) and its point-to-point ones named as the reference names them (:func:`tool_neutral`); ``run`` as it
    is when either run has no members table or the ids already agree, and both name those alike."""
    renamed = _renamed_ids(run, reference, renum)
    neutral, notes = tool_neutral(renamed.run, reference)
    return replace(renamed, run=neutral, notes=notes + renamed.notes)


def _renamed_ids(run: RunTables, reference: RunTables, renum: Mapping[int, int] | None) -> Renamed:
    """:func:`renamed_communicators` but the naming of the point-to-point communicators."""
    if run.communicators is None or reference.communicators is None or not run.communicators.height \
            or not reference.communicators.height:
        return Renamed(run, None, [])
    members = renumber_columns(run.communicators, dict(renum), ("task",)) if renum else run.communicators
    mapping, uneven = communicator_map(reference.communicators, members)
    notes = [f"{run.run_name}: {r['alike']} communicator(s) of tasks {{{r['members']}}} (appl {r['appl']}) where "
             f"{reference.run_name} has {r['ref_alike']}: paired in the order the runs created them, which may "
             "not be the same communicators" for r in uneven.iter_rows(named=True)]
    moved = mapping.filter(pl.col("comm") != pl.col("to"))
    if not moved.height:
        return Renamed(run, None, notes)
    calls, messages = _renamed(run.mpi_calls, moved), _renamed(run.messages, moved)
    shown = ", ".join(f"{c}->{t}" for c, t in moved.select("comm", "to").head(8).iter_rows())
    notes.append(f"{run.run_name}: {moved.height} communicator id(s) renamed to {reference.run_name}'s by their "
                 f"members ({shown}{', ...' if moved.height > 8 else ''})")
    return Renamed(replace(run, mpi_calls=calls, messages=messages), moved, notes)


def on_reference_ids(frame: pl.DataFrame, reference: pl.DataFrame | None, members: pl.DataFrame | None
                     ) -> pl.DataFrame:
    """``frame`` (a run's calls, messages or message counts) with its communicator ids the reference's: those of
    the reference's communicators (``reference`` members) with the members ``members`` of the frame's run's
    (:func:`communicator_map`); as it is when either is unknown."""
    if reference is None or members is None or not reference.height or not members.height:
        return frame
    moved = communicator_map(reference, members)[0].filter(pl.col("comm") != pl.col("to"))
    return _renamed(frame, moved) if moved.height else frame
