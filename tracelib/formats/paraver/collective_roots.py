"""The root of a rooted collective in a Paraver trace, as Extrae writes it and as the tidy ``root`` column holds it.

Extrae's merger (``mpi_prv_semantics.c``, ``trace_enter_global_op``) writes event 50100003 ("Root in MPI Global
OP") as a FLAG: value 1 on the root task's own entry record of the collective, no event on the other members'.
Only MPI_Bcast, MPI_Reduce, MPI_Gather(v) and MPI_Scatter(v) (and their non-blocking forms) are flagged: a Bcast or
Reduce on the member whose rank in the communicator is the root, a Gather or Scatter on the member whose task index
(0-based, in the application) equals the root's rank in the communicator (the merger compares the two numbers; on
MPI_COMM_WORLD it is the same member). Dimemas' translator (prv2dim) reads it the same way: "is root?", value 1,
the root of each (communicator, k-th collective) the task that carries it.

The tidy ``root`` column holds the root's rank in the collective's communicator (0-based; what OTF2 records) on
every member's call of that collective, NULL where the call has no root or no member carries the flag. A member's
rank is its position in the communicator's ``c:`` line (Extrae lists the members in rank order). Extrae declares
every communicator a run used (its merger numbers them from 1 in the order first defined, one id per list of
members: the world is not always 1, LULESH's pair has it at 14), so a communicator with no ``c:`` line comes from
a cut, edited or other tool's trace. There a Gather's or Scatter's flag still names the root (the task index is the
rank), and a collective whose members are all the application's tasks is taken as on MPI_COMM_WORLD (or a
duplicate: rank = task index); elsewhere a Bcast's or Reduce's rank is unknown, its root left NULL and said. The
members of one collective are the calls that are the k-th collective on that communicator of each task (MPI orders
the collectives on a communicator alike in every member).

Traces this project wrote before (session 26) carry the root's rank itself on every member's record: a collective
whose every declared member carries one value is read as that rank."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

#: rooted calls whose flag is on the member whose task index equals the root's rank (the others': rank equals it)
FLAGGED_BY_TASK_INDEX = frozenset({"MPI_Gather", "MPI_Igather", "MPI_Gatherv", "MPI_Igatherv", "MPI_Scatter",
                                   "MPI_Iscatter", "MPI_Scatterv", "MPI_Iscatterv"})
#: the calls Extrae flags with a root
ROOTED_CALLS = FLAGGED_BY_TASK_INDEX | {"MPI_Bcast", "MPI_Ibcast", "MPI_Reduce", "MPI_Ireduce"}
#: a task's collectives on one communicator are numbered within these
_MEMBER = ["appl", "task", "comm"]
#: one collective: its communicator and its number there
_INSTANCE = ["appl", "comm", "_instance"]
_RANKS_SCHEMA = {"appl": pl.Int32, "comm": pl.Int64, "task": pl.Int32, "_rank": pl.Int64, "_members": pl.UInt32}


def member_ranks(members: pl.DataFrame) -> pl.DataFrame:
    """Each declared member's rank in its communicator (``_rank``, 0-based: its position in the ``c:`` line) and
    the communicator's size (``_members``), from one row per (appl, comm, task) in line order (COMMUNICATOR_SCHEMA)."""
    if not members.height:
        return pl.DataFrame(schema=_RANKS_SCHEMA)
    per = ["appl", "comm"]
    return members.select(per + ["task"]).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over(per).alias("_rank"),
        pl.len().over(per).alias("_members")).cast(_RANKS_SCHEMA)


def _flag_rank(ranks: pl.DataFrame, calls: pl.DataFrame) -> pl.Series:
    """The root rank (0-based, in the communicator) a flag on each of ``calls`` (appl, task, comm, mpi_call) names;
    NULL on a call of a task that is no member of its declared communicator (attack27 A1: it names no rank there)."""
    declared = ranks.select("appl", "comm").unique().with_columns(pl.lit(True).alias("_declared"))
    known = (calls.select(_MEMBER + ["mpi_call"]).join(ranks, on=_MEMBER, how="left", maintain_order="left")
             .join(declared, on=["appl", "comm"], how="left", maintain_order="left"))
    return known.select(pl.when(pl.col("_rank").is_null() & pl.col("_declared")).then(None)
                        .when(pl.col("mpi_call").is_in(FLAGGED_BY_TASK_INDEX) | pl.col("_rank").is_null())
                        .then(pl.col("task").cast(pl.Int64) - 1).otherwise(pl.col("_rank")).alias("_flag_rank")
                        ).to_series()


def root_flags(calls: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """``calls`` (MPI_CALL_SCHEMA columns; ``root`` a rank in the communicator) with ``root`` as Extrae writes
    event 50100003: 1 on the call of the member the flag names (see the module), NULL on every other call."""
    flagged = (pl.col("mpi_call").is_in(ROOTED_CALLS) & (pl.col("root").cast(pl.Int64) == _flag_rank(ranks, calls)))
    return calls.with_columns(pl.when(flagged).then(pl.lit(1)).cast(calls.schema["root"]).alias("root"))


class CollectiveNumbers:
    """Numbers each task's collectives on a communicator 0, 1, 2, ... (``_instance``) over the parts of one
    trace's calls fed in order; NULL on calls that are no collective or name no communicator. Two numberings fed
    the same rows in the same order agree, however the rows are cut into parts (the number follows row order)."""

    def __init__(self) -> None:
        self._seen = pl.DataFrame(schema={"appl": pl.Int32, "task": pl.Int32, "comm": pl.Int64, "_seen": pl.Int64})

    def numbered(self, calls: pl.DataFrame) -> pl.DataFrame:
        """``calls`` (appl, task, comm, mpi_kind, ...) with ``_instance``, counting on from the parts before."""
        counted = (pl.col("mpi_kind") == "collective") & pl.col("comm").is_not_null()
        own = (pl.when(counted).then(pl.int_range(pl.len(), dtype=pl.Int64).over(counted, *_MEMBER))
               .alias("_instance"))
        out = calls.with_columns(own).join(self._seen, on=_MEMBER, how="left", maintain_order="left")
        out = out.with_columns(pl.col("_instance") + pl.col("_seen").fill_null(0)).drop("_seen")
        counts = out.filter(pl.col("_instance").is_not_null()).group_by(_MEMBER).agg(
            (pl.col("_instance").max() + 1).alias("_seen"))
        self._seen = pl.concat([self._seen.join(counts, on=_MEMBER, how="anti"), counts.select(self._seen.columns)])
        return out

    def members(self) -> pl.DataFrame:
        """(appl, comm, ``_tasks``): how many tasks were numbered collectives on each communicator so far."""
        return self._seen.group_by("appl", "comm", maintain_order=True).agg(pl.len().cast(pl.UInt32).alias("_tasks"))

    def uneven(self) -> pl.DataFrame:
        """The communicators (appl, comm) whose tasks were numbered different counts of collectives so far (a
        trace cut mid-collective, or records lost: the k-th of one task is then not the k-th of another), with
        the fewest and most (``_fewest``, ``_most``)."""
        per = self._seen.group_by("appl", "comm", maintain_order=True).agg(
            pl.col("_seen").min().alias("_fewest"), pl.col("_seen").max().alias("_most"))
        return per.filter(pl.col("_fewest") != pl.col("_most"))


class RootFlags:
    """Reads the root flags of one Paraver trace: :meth:`add` sees every part of its calls as read (``root`` the
    raw 50100003 value), :meth:`roots` then names each collective's root, :meth:`with_roots` puts it on every
    member's call as the calls come out (in the same order)."""

    def __init__(self, members: pl.DataFrame, app_tasks: Sequence[int]) -> None:
        """``members``: the declared communicators (COMMUNICATOR_SCHEMA); ``app_tasks``: each application's number
        of tasks (application 1 first), which tells a communicator of all of them."""
        self._ranks = member_ranks(members)
        self._app_tasks = pl.DataFrame({"appl": range(1, len(app_tasks) + 1), "_app_tasks": list(app_tasks)},
                                       schema={"appl": pl.Int32, "_app_tasks": pl.UInt32})
        self._read = CollectiveNumbers()
        self._carriers: list[pl.DataFrame] = []
        self._roots: pl.DataFrame | None = None

    def add(self, calls: pl.DataFrame) -> None:
        """Keep the calls of ``calls`` that carry event 50100003 (few: one a rooted collective), numbered."""
        numbered = self._read.numbered(calls.select(*_MEMBER, "mpi_kind", "mpi_call", "start_ns", "root"))
        carriers = numbered.filter(pl.col("root").is_not_null())
        if carriers.height:
            self._carriers.append(carriers.with_columns(_flag_rank(self._ranks, carriers)))

    def roots(self) -> list[str]:
        """Each collective's root (:meth:`with_roots` puts it on the calls); what to warn of, one line a kind:
        flags other than 0 on calls that have no root or name no communicator (ignored), and collectives with
        flags on more than one member that are not the old form (its root left NULL), old-form collectives naming a
        rank outside their communicator (left NULL), communicators whose members recorded different numbers of
        collectives (their roots left NULL), collectives whose one flag is on a task outside their declared
        communicator (left NULL), and collectives on undeclared communicators of some of the application's tasks
        whose flags name no rank there (left NULL)."""
        carriers = pl.concat(self._carriers) if self._carriers else pl.DataFrame(schema={
            **{c: t for c, t in _RANKS_SCHEMA.items() if c in _MEMBER}, "mpi_kind": pl.String,
            "mpi_call": pl.String, "start_ns": pl.Int64, "root": pl.Int32, "_instance": pl.Int64,
            "_flag_rank": pl.Int64})
        said = []
        # a 0 on a call without a root says "not the root" (Extrae writes no 0; the mergeattack23 generator does)
        stray = carriers.filter((~pl.col("mpi_call").is_in(ROOTED_CALLS) | pl.col("_instance").is_null())
                                & (pl.col("root") != 0))
        if stray.height:
            first = stray.row(0, named=True)
            said.append(f"{stray.height} calls that have no root carry the root flag of a collective (event "
                        f"50100003; Extrae writes it on a Bcast, Reduce, Gather or Scatter only), first "
                        f"{first['mpi_call']} of task {first['task']} at {first['start_ns']} ns: ignored")
        rooted = carriers.filter(pl.col("mpi_call").is_in(ROOTED_CALLS) & pl.col("_instance").is_not_null())
        uneven = self._read.uneven().join(rooted.select("appl", "comm").unique(), on=["appl", "comm"])
        if uneven.height:
            first = uneven.row(0, named=True)
            said.append(f"{uneven.height} communicators holding rooted collectives have members that recorded "
                        f"different numbers of collectives on them (first communicator {first['comm']} of "
                        f"application {first['appl']}: {first['_fewest']} to {first['_most']}; a trace cut "
                        f"mid-collective?), so which call of each member is which collective is unknown: their "
                        f"roots are left unknown (NULL)")
            rooted = rooted.join(uneven, on=["appl", "comm"], how="anti")
        per = rooted.group_by(_INSTANCE, maintain_order=True).agg(
            pl.len().alias("_n"), pl.col("root").n_unique().alias("_values"), pl.col("root").first().alias("_value"),
            pl.col("_flag_rank").first().alias("_flag"), pl.col("task").sort().alias("_tasks"),
            pl.col("mpi_call").first(), pl.col("start_ns").min())
        per = per.join(self._sizes(), on=["appl", "comm"], how="left", maintain_order="left")
        old_form = (pl.col("_n") > 1) & (pl.col("_values") == 1) & (pl.col("_n") == pl.col("_members"))
        # attack26 A1: the old form's value is a rank, so it must be one of the communicator's
        ranked = (pl.col("_value").cast(pl.Int64) >= 0) & (pl.col("_value").cast(pl.Int64) < pl.col("_members"))
        # review26 F7: without the members a Bcast's or Reduce's flag names a task, not a rank (Gather's: both)
        flag_names_rank = pl.col("_members").is_not_null() | pl.col("mpi_call").is_in(FLAGGED_BY_TASK_INDEX)
        # attack27 A1: one flag, on a task that is no member of the declared communicator or (a Gather's task
        # index) past its size, names no rank of it
        flag_ranked = pl.col("_flag").is_not_null() & (pl.col("_members").is_null()
                                                       | (pl.col("_flag") < pl.col("_members")))
        self._roots = per.select(*_INSTANCE, pl.when((pl.col("_n") == 1) & flag_names_rank & flag_ranked)
                                 .then(pl.col("_flag"))
                                 .when(old_form & ranked).then(pl.col("_value").cast(pl.Int64)).alias("_root"))
        undeclared = per.filter(pl.col("_members").is_null() & ~((pl.col("_n") == 1) & flag_names_rank))
        if undeclared.height:
            said.append(self._undeclared(undeclared))
        unknown = (
            (per.filter(old_form & ~ranked), "name as their root (event 50100003 on every member) a rank outside "
             "their communicator", lambda r: f": root {r['_value']} of {r['_members']} members"),
            (per.filter((pl.col("_n") == 1) & pl.col("_members").is_not_null() & ~flag_ranked), "carry the root "
             "flag (event 50100003) on a task that is no member of their communicator, or whose task index is past "
             "its size", lambda r: f", task {r['_tasks'][0]} of {r['_members']} members"),
            (per.filter((pl.col("_n") > 1) & ~old_form), "carry the root flag (event 50100003) on more than one "
             "member (Extrae writes it on the root's call only)",
             lambda r: f", tasks {', '.join(map(str, r['_tasks'][:8]))}"))
        for rows, what, detail in unknown:
            if rows.height:
                first = rows.row(0, named=True)
                said.append(f"{rows.height} collectives {what}, first {first['mpi_call']} at {first['start_ns']} ns "
                            f"on communicator {first['comm']} of application {first['appl']}{detail(first)}: "
                            f"their root is left unknown (NULL)")
        self._carriers = []
        return said

    def _sizes(self) -> pl.DataFrame:
        """(appl, comm, ``_members``): each declared communicator's size, and each undeclared one's whose members
        (the tasks that recorded collectives on it) are all its application's tasks: the world's, ranks = task
        indexes."""
        declared = self._ranks.group_by("appl", "comm").agg(pl.col("_members").first())
        seen = self._read.members().join(declared, on=["appl", "comm"], how="anti")
        whole = seen.join(self._app_tasks, on="appl").filter(pl.col("_tasks") == pl.col("_app_tasks"))
        return pl.concat([declared, whole.select("appl", "comm", pl.col("_tasks").alias("_members"))])

    def _undeclared(self, unknown: pl.DataFrame) -> str:
        """The line that says the roots of ``unknown`` (collectives: appl, comm, ...) are left NULL: their
        communicators have no ``c:`` line and are not all their application's tasks."""
        calls = unknown.group_by("appl", "comm", maintain_order=True).agg(pl.len().alias("_collectives")).join(
            self._read.members(), on=["appl", "comm"], how="left", maintain_order="left").with_columns(
            (pl.col("_collectives") * pl.col("_tasks")).alias("_calls"))
        first = calls.row(0, named=True)
        return (f"{calls.get_column('_calls').sum()} calls of {unknown.height} rooted collectives on {calls.height} "
                f"communicators the header declares no members of (no c: line) and that are not all their "
                f"application's tasks (first communicator {first['comm']} of application {first['appl']}: "
                f"{first['_calls']} calls of {first['_tasks']} tasks), so their root flags name no rank in them: "
                f"their root is left unknown (NULL)")

    def with_roots(self) -> Callable[[pl.DataFrame], pl.DataFrame]:
        """For one pass over the calls (the parts in the order :meth:`add` saw them): the function that gives a
        part (MPI_CALL_SCHEMA) ``root`` the rank of its collective's root in the communicator, NULL where none is
        known."""
        if self._roots is None:
            raise RuntimeError("RootFlags.roots() names the roots before the calls come out")
        roots, numbers = self._roots, CollectiveNumbers()

        def rooted(calls: pl.DataFrame) -> pl.DataFrame:
            numbered = numbers.numbered(calls.select(*_MEMBER, "mpi_kind"))
            root = numbered.select(_INSTANCE).join(roots, on=_INSTANCE, how="left", maintain_order="left")
            return calls.with_columns(root.get_column("_root").cast(calls.schema["root"]).alias("root"))
        return rooted
