"""The per-(run, call site, rank) table of every application's runs, read for regression detection (DESIGN §8).

One DuckDB query over the ``runs``, ``bursts``, ``mpi_calls`` and ``mpi_messages`` views sums, per (run, call
site, rank), the compute that ends at the call site and the MPI calls made there (the site is the caller of the MPI
call; where traces do not resolve callers, the MPI call's name stands for it).

The bytes of a site are the bytes of the messages its calls post, never what a completion call happened to
complete: a point-to-point message counts at the call holding its send end and at the call holding its receive end
(the logical messages of ``mpi_messages``, :mod:`synthtrace.tracelib.merge.messages`), a collective with the sizes
on its call. Which ``MPI_Wait``/``Waitall``/``Test`` completes a message depends on arrival, so bytes summed over
completions move from night to night on a quiet code. A run ingested before ``mpi_messages`` existed counts the
bytes on its calls except completion calls. Counters are summed per hardware quantity
(any alias a run recorded it under, see :mod:`synthtrace.tracelib.domain.counters`), NULL where the run did not record
it.

A *visit* of a site is one logical region, not one burst: a polling loop (``MPI_Test``/``MPI_Iprobe`` and
kin, :data:`POLLING_CALLS`) closes many short bursts at the kernel's own site, so the bursts and calls that follow
a polling call at the same site belong to the visit it started (the kernel plus its polls, summed). Per-visit
medians then compare kernels with kernels, never a kernel with a 2 µs poll.

The signals of each night and site are computed from this table by :mod:`synthtrace.models.site_signals`.
"""
from __future__ import annotations

import difflib
import tempfile

import duckdb
import polars as pl

from synthtrace.tracelib.domain.counters import ROLES
from synthtrace.tracelib.domain.mpi_calls import calls_with
from synthtrace.tracelib.merge.messages import COMPLETION_CALLS
from synthtrace.warehouse import snapshot
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.catalog import connect
from synthtrace.warehouse.errors import UnknownExperimentError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.names import one_spelling
from synthtrace.warehouse.sql import duckdb_limits

#: hardware quantities the history keeps (role -> column name in the history)
HISTORY_ROLES: tuple[str, ...] = ("ins", "cyc", "l1_dcm", "l2_dcm", "l3_tcm", "br_ins", "br_msp", "fp_ins", "vec_ins",
                                  "l1_icm")
END_OF_THREAD = "(end of thread)"
#: the views the history reads
HISTORY_VIEWS: tuple[str, ...] = ("runs", "bursts", "mpi_calls", "mpi_messages")
#: MPI calls that poll (the test family and the nonblocking probes of the MPI call catalogue): the bursts between
#: repeated polls at one site are one logical region with the compute before the first poll
POLLING_CALLS: tuple[str, ...] = calls_with(roles=("test",)) + calls_with(roles=("probe",), blocking=False)


class UnknownAppError(UnknownExperimentError):
    """An application named by the user has no runs in the warehouse."""


def apps(wh: Warehouse) -> list[str]:
    """Applications with runs in the warehouse, sorted."""
    runs = runs_table(wh)
    return sorted(runs["app"].drop_nulls().unique().to_list()) if "app" in runs.columns else []


def app_nights(wh: Warehouse, names: list[str]) -> dict[str, int]:
    """App -> its nights of history at most: the (experiment, day) pairs of its runs, from the runs table alone
    (a series of :mod:`~synthtrace.models.site_signals` has one point per pair), 0 for an app without runs."""
    runs = runs_table(wh)
    if runs.height == 0:
        return dict.fromkeys(names, 0)
    n = (runs.filter(pl.col("app").is_in(names))
         .group_by("app").agg(pl.struct("experiment", pl.col("started_at").dt.date()).n_unique().alias("n")))
    return {a: dict(n.iter_rows()).get(a, 0) for a in names}


def match_apps(wh: Warehouse, app: str) -> list[str]:
    """The applications ``app`` names: itself if it has runs, else those whose name starts with it at a word
    boundary (``lulesh`` -> ``lulesh_4+4_with_uncores_sockets1+2``, ``lulesh_7+1_...``: an app named by its trace's
    stem up to the first dot; ``lulesh`` -> ``lulesh2.0``, the binary a trace records: letters then digits is a
    boundary, attack 10 D7; ``lu`` names no ``lulesh``). Raises :class:`UnknownAppError` naming the closest
    applications otherwise."""
    known = apps(wh)
    typed, spelled = one_spelling(app), [one_spelling(a) for a in known]  # a Mac's names (NFD) are the same names
    if exact := [a for a, s in zip(known, spelled) if s == typed]:
        return exact
    hits = [a for a, s in zip(known, spelled) if s.startswith(typed) and typed and _boundary(typed[-1], s[len(typed)])]
    if hits:
        return hits
    def likeness(a: str) -> float:  # whole name, or the prefix of the same length (names are long stems)
        return max(
            difflib.SequenceMatcher(None, app, a).ratio(), difflib.SequenceMatcher(None, app, a[: len(app)]).ratio()
        )

    close = sorted((a for a in known if likeness(a) >= 0.6), key=likeness, reverse=True)[:3]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UnknownAppError(f"no application {app!r} in {wh.root}"
                          + (f" (applications: {', '.join(known)}){hint}" if known else " (nothing ingested)"))


def _boundary(last: str, next_: str) -> bool:
    """Whether a name's prefix ending in ``last`` ends at a word boundary before ``next_``: ``next_`` is no letter
    or digit, or a digit after a letter (a version: ``lulesh2.0``) or a letter after a digit."""
    return not next_.isalnum() or next_.isdigit() != last.isdigit()


def check_app(wh: Warehouse, app: str) -> None:
    """Raise :class:`UnknownAppError` unless ``app`` names applications of the warehouse (see :func:`match_apps`)."""
    match_apps(wh, app)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _role_sql(role: str, columns: list[str]) -> str:
    """The per-row value of a role (first alias present), NULL when no column measures it."""
    hits = [c for c in ROLES[role].aliases if c in columns]
    if not hits:
        return f"CAST(NULL AS DOUBLE) AS {role}"
    parts = ", ".join(f"CAST({_quote(c)} AS DOUBLE)" for c in hits)
    return f"coalesce({parts}) AS {role}" if len(hits) > 1 else f"{parts} AS {role}"


def _regions(table: str, seq: str, site: str, extra: str) -> str:
    """Rows of ``table`` with ``region_``: a new logical region per thread unless the previous row closed on a
    polling call at the same site (see the module docstring)."""
    polls = ", ".join(_literal(c) for c in POLLING_CALLS)
    w = f"PARTITION BY run_id, appl, task, thread ORDER BY {seq}"
    return f"""(SELECT *, sum(new_) OVER ({w} ROWS UNBOUNDED PRECEDING) AS region_ FROM (
      SELECT x.run_id, x.appl, x.task, x.thread, x.{seq}, {site} AS call_site, x.duration_ns, {extra},
             CASE WHEN lag(x.mpi_call) OVER ({w}) IN ({polls})
                   AND lag({site}) OVER ({w}) IS NOT DISTINCT FROM {site} THEN 0 ELSE 1 END AS new_
      FROM {table} x JOIN r USING (run_id)))"""


def has_view(con: duckdb.DuckDBPyConnection, view: str) -> bool:
    """Whether the catalog connection ``con`` has the view ``view`` (views over files exist once a file does)."""
    return bool(con.sql(f"SELECT count(*) FROM duckdb_views() WHERE view_name = {_literal(view)}").fetchall()[0][0])


def _posted_bytes_cte(has_messages: bool) -> str:
    """CTE ``cm``: the MPI calls of the runs in ``r`` with ``posted_bytes``, the bytes of the messages each call
    posts (see the module docstring): collectives their sizes; point-to-point calls the logical messages whose send
    or receive end they hold; in a run without logical messages, the call's bytes unless it is a completion call."""
    completions = ", ".join(_literal(c) for c in COMPLETION_CALLS)
    own = "coalesce(c.bytes_sent, 0) + coalesce(c.bytes_recv, 0)"
    fallback = f"CASE WHEN c.mpi_call IN ({completions}) THEN 0 ELSE {own} END"
    if not has_messages:
        return f"""cm AS (SELECT c.*, CASE WHEN c.mpi_kind = 'collective' THEN {own} ELSE {fallback} END::DOUBLE
         AS posted_bytes FROM mpi_calls c JOIN r USING (run_id))"""
    return f"""mr AS (SELECT DISTINCT run_id FROM mpi_messages JOIN r USING (run_id)),
mb AS (SELECT run_id, appl, task, thread, call_seq, sum(bytes)::DOUBLE AS msg_bytes FROM (
         SELECT run_id, appl, sender AS task, s_thread AS thread, s_call_seq AS call_seq, bytes FROM mpi_messages
         WHERE s_call_seq IS NOT NULL
         UNION ALL
         SELECT run_id, appl, receiver, r_thread, r_call_seq, bytes FROM mpi_messages WHERE r_call_seq IS NOT NULL)
       JOIN r USING (run_id) GROUP BY ALL),
cm AS (SELECT c.*, CASE WHEN c.mpi_kind = 'collective' THEN {own}
                        WHEN mr.run_id IS NOT NULL THEN coalesce(mb.msg_bytes, 0)
                        ELSE {fallback} END::DOUBLE AS posted_bytes
       FROM mpi_calls c JOIN r USING (run_id) LEFT JOIN mr USING (run_id)
       LEFT JOIN mb USING (run_id, appl, task, thread, call_seq))"""


def site_rank_table(wh: Warehouse, app: str | list[str] | None = None) -> pl.DataFrame:
    """Per (run, call site, thread): visits (logical regions), compute and MPI time (ns), MPI calls, the bytes of
    the messages posted there (see the module docstring), summed counters.

    Columns: app, experiment, run_id, started_at, n_tasks, n_threads, call_site, appl, task, thread, visits,
    compute_ns (sum), compute_med_ns (median per visit), mpi_ns, mpi_med_ns,
    mpi_calls, mpi_bytes and one column per role of :data:`HISTORY_ROLES`. Empty when nothing is ingested.
    A thread of any application of the trace (``appl``) is one unit; "rank" below means such a unit.

    The warehouse is read as it was when the table was started (the files held as ``synthtrace sql`` holds them,
    :mod:`~synthtrace.warehouse.snapshot`): a run removed or replaced meanwhile is read whole, old or new.
    """
    def read(snap: snapshot.Snapshot) -> pl.DataFrame:
        with tempfile.TemporaryDirectory(prefix="synthtrace-history-") as spill:
            # attack 11 E7: without caps DuckDB took 2.6 GB over one 2 GB run; capped as `synthtrace sql` is, it
            # spills its aggregates to a folder of its own (a reader may not write the warehouse)
            con = connect(wh, views=HISTORY_VIEWS, files=snap.duckdb_files(), also_allowed=snap.originals,
                          temp_directory=spill, settings=duckdb_limits())
            try:
                return _site_rank_table(con, app)
            except duckdb.CatalogException:  # no bursts view: nothing ingested
                return pl.DataFrame()
            finally:
                con.close()

    return snapshot.read_whole(wh, HISTORY_VIEWS, read)


def _site_rank_table(con: duckdb.DuckDBPyConnection, app: str | list[str] | None) -> pl.DataFrame:
    """:func:`site_rank_table` on the connection ``con``."""
    cols = [r[0] for r in con.sql("DESCRIBE bursts").fetchall()]
    has_calls = has_view(con, "mpi_calls")
    names = [app] if isinstance(app, str) else app
    where = f"WHERE app IN ({', '.join(_literal(a) for a in names)})" if names else ""
    roles = ", ".join(_role_sql(r, cols) for r in HISTORY_ROLES)
    sums = ", ".join(f"sum({r}) AS {r}" for r in HISTORY_ROLES)
    bursts = _regions("bursts", "burst_seq", f"coalesce(x.call_site, x.mpi_call, {_literal(END_OF_THREAD)})", roles)
    calls = _regions("cm", "call_seq", "coalesce(x.call_site, x.mpi_call)", "x.posted_bytes AS bytes")
    calls_cte = (
        f"""{_posted_bytes_cte(has_view(con, "mpi_messages"))},
cr AS (SELECT run_id, call_site, appl, task, thread, region_, count(*) AS n,
     sum(duration_ns)::DOUBLE AS dur, sum(bytes)::DOUBLE AS bytes FROM {calls} GROUP BY ALL),
c AS (SELECT run_id, call_site, appl, task, thread, sum(n) AS mpi_calls, sum(dur) AS mpi_ns, median(dur) AS mpi_med_ns,
     sum(bytes) AS mpi_bytes FROM cr GROUP BY ALL)"""
        if has_calls
        else "c AS (SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS call_site, NULL::INTEGER AS appl, "
        "NULL::INTEGER AS task, NULL::INTEGER AS thread, "
        "NULL::BIGINT AS mpi_calls, NULL::DOUBLE AS mpi_ns, NULL::DOUBLE AS mpi_med_ns, NULL::DOUBLE AS mpi_bytes "
        "WHERE false)"
    )
    sql = f"""
WITH r AS (SELECT run_id, app, experiment, started_at, n_tasks, n_threads FROM runs {where}),
br AS (SELECT run_id, call_site, appl, task, thread, region_, sum(duration_ns)::DOUBLE AS dur, {sums}
       FROM {bursts} GROUP BY ALL),
b AS (SELECT run_id, call_site, appl, task, thread, count(*) AS visits, sum(dur) AS compute_ns,
         median(dur) AS compute_med_ns, {sums} FROM br GROUP BY ALL),
{calls_cte}
SELECT r.app, r.experiment, r.run_id, r.started_at, r.n_tasks, r.n_threads, b.call_site, b.appl, b.task, b.thread,
       b.visits,
       b.compute_ns, b.compute_med_ns, coalesce(c.mpi_ns, 0) AS mpi_ns, coalesce(c.mpi_med_ns, 0) AS mpi_med_ns,
       coalesce(c.mpi_calls, 0) AS mpi_calls,
       coalesce(c.mpi_bytes, 0) AS mpi_bytes, {', '.join('b.' + r for r in HISTORY_ROLES)}
FROM b JOIN r USING (run_id) LEFT JOIN c ON c.run_id = b.run_id AND c.call_site = b.call_site AND c.appl = b.appl
     AND c.task = b.task AND c.thread = b.thread
ORDER BY r.app, r.started_at, r.run_id, b.call_site, b.appl, b.task, b.thread"""
    return pl.from_arrow(con.sql(sql).to_arrow_table())
