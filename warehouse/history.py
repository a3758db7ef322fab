"""The nightly history of every application, aggregated per run and call site, for regression detection (DESIGN §8).

One DuckDB query over the ``runs``, ``bursts`` and ``mpi_calls`` views sums, per (run, call site, rank), the
compute bursts that end at the call site and the MPI calls made there (the site is the caller of the MPI call;
where traces do not resolve callers, the MPI call's name stands for it). Counters are summed per hardware
quantity (any alias a run recorded it under, see :mod:`synthtrace.tracelib.counters`), NULL where the run did not record it.

Points of a series: runs of the same application, configuration (tasks x threads) and night (``experiment`` and
the day of ``started_at``) are one point; they were recorded with different counter sets, so each quantity is
taken from the runs that recorded it. Points are ordered by ``started_at``.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from synthtrace.tracelib.counters import ROLES
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.catalog import connect
from synthtrace.warehouse.errors import UnknownExperimentError
from synthtrace.warehouse.layout import Warehouse

#: hardware quantities the history keeps (role -> column name in the history)
HISTORY_ROLES: tuple[str, ...] = ("ins", "cyc", "l1_dcm", "l2_dcm", "l3_tcm", "br_ins", "br_msp", "fp_ins", "vec_ins",
                                  "l1_icm")
END_OF_THREAD = "(end of thread)"


class UnknownAppError(UnknownExperimentError):
    """An application named by the user has no runs in the warehouse."""


def apps(root: str | Path) -> list[str]:
    """Applications with runs in the warehouse, sorted."""
    runs = runs_table(Warehouse(root))
    return sorted(runs["app"].drop_nulls().unique().to_list()) if "app" in runs.columns else []


def check_app(root: str | Path, app: str) -> None:
    """Raise :class:`UnknownAppError` unless ``app`` has runs in the warehouse."""
    known = apps(root)
    if app not in known:
        raise UnknownAppError(f"no application {app!r} in {root}"
                              + (f" (applications: {', '.join(known)})" if known else " (nothing ingested)"))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _role_sql(role: str, columns: list[str]) -> str:
    hits = [c for c in ROLES[role].aliases if c in columns]
    if not hits:
        return f"CAST(NULL AS DOUBLE) AS {role}"
    parts = ", ".join(f"CAST(b.{_quote(c)} AS DOUBLE)" for c in hits)
    return f"sum(coalesce({parts})) AS {role}" if len(hits) > 1 else f"sum({parts}) AS {role}"


def site_rank_table(root: str | Path, app: str | None = None) -> pl.DataFrame:
    """Per (run, call site, thread): visits, compute and MPI time (ns), MPI bytes and calls, summed counters.

    Columns: app, experiment, run_id, started_at, n_tasks, n_threads, call_site, appl, task, thread, visits,
    compute_ns (sum), compute_med_ns (median per visit), mpi_ns, mpi_med_ns,
    mpi_calls, mpi_bytes and one column per role of :data:`HISTORY_ROLES`. Empty when nothing is ingested.
    A thread of any application of the trace (``appl``) is one unit; "rank" below means such a unit.
    """
    con = connect(root)
    try:
        cols = [r[0] for r in con.sql("DESCRIBE bursts").fetchall()]
        has_calls = bool(con.sql("SELECT count(*) FROM duckdb_views() WHERE view_name = 'mpi_calls'").fetchall()[0][0])
        where = f"WHERE app = {_literal(app)}" if app is not None else ""
        roles = ",\n  ".join(_role_sql(r, cols) for r in HISTORY_ROLES)
        site = f"coalesce(b.call_site, b.mpi_call, {_literal(END_OF_THREAD)})"
        csite = "coalesce(c.call_site, c.mpi_call)"
        calls_cte = (f"""c AS (
  SELECT c.run_id, {csite} AS call_site, c.appl, c.task, c.thread, count(*) AS mpi_calls, sum(c.duration_ns)::DOUBLE AS mpi_ns,
         median(c.duration_ns)::DOUBLE AS mpi_med_ns,
         sum(coalesce(c.bytes_sent, 0) + coalesce(c.bytes_recv, 0))::DOUBLE AS mpi_bytes
  FROM mpi_calls c JOIN r USING (run_id) GROUP BY ALL)""" if has_calls else
                     "c AS (SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS call_site, NULL::INTEGER AS appl, "
                     "NULL::INTEGER AS task, NULL::INTEGER AS thread, "
                     "NULL::BIGINT AS mpi_calls, NULL::DOUBLE AS mpi_ns, NULL::DOUBLE AS mpi_med_ns, NULL::DOUBLE AS mpi_bytes "
                     "WHERE false)")
        sql = f"""
WITH r AS (SELECT run_id, app, experiment, started_at, n_tasks, n_threads FROM runs {where}),
b AS (
  SELECT b.run_id, {site} AS call_site, b.appl, b.task, b.thread, count(*) AS visits, sum(b.duration_ns)::DOUBLE AS compute_ns,
  median(b.duration_ns)::DOUBLE AS compute_med_ns,
  {roles}
  FROM bursts b JOIN r USING (run_id) GROUP BY ALL),
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
    except duckdb.CatalogException:  # no bursts view: nothing ingested
        return pl.DataFrame()
    finally:
        con.close()


def site_history(root: str | Path, app: str | None = None) -> pl.DataFrame:
    """One row per (app, configuration, point, call site): the signals of that call site that night.

    Signals (NULL where no run of the point recorded what they need):

    - ``time_ns``: time per visit of the site (ns): compute before the call + the call, each the median over
      the rank's visits (robust to a burst stretched by OS noise), averaged over ranks;
    - ``compute_ns``, ``mpi_ns``: its two parts (ns per visit); ``load_balance``: mean / max over ranks of the
      per-visit compute time at the site;
    - ``instructions`` (per visit and rank), ``ipc``, ``l1_mpki``, ``l2_mpki``, ``l3_mpki``, ``br_mpki``,
      ``icache_mpki`` (per 1000 instructions), ``br_per_ins``, ``br_misp_rate`` (mispredicted / branches),
      ``fp_share`` (FP / instructions), ``vec_share`` (vector / FP);
    - ``mpi_bytes`` (bytes per call and rank), ``mpi_bw`` (bytes per call / MPI time per call:
      bytes per ns = GB/s, including the waits).

    Keys: app, config (``<tasks>x<threads>``), point (experiment@day), started_at (first run of the point),
    run_id (that run), call_site, runs (runs in the point).
    """
    t = site_rank_table(root, app)
    if t.height == 0:
        return pl.DataFrame()
    t = t.with_columns(
        pl.format("{}x{}", pl.col("n_tasks"), pl.col("n_threads")).alias("config"),
        pl.format("{}@{}", pl.col("experiment"), pl.col("started_at").dt.date()).alias("point"))
    ins_ok = pl.col("ins") > 0
    per_run = t.group_by("app", "config", "point", "run_id", "started_at", "call_site").agg(
        pl.col("compute_med_ns").mean().alias("_comp"), pl.col("mpi_med_ns").mean().alias("_mpi"),
        pl.col("visits").sum().alias("_visits"), pl.col("mpi_calls").sum().alias("_calls"),
        pl.col("mpi_bytes").sum().alias("_bytes"),
        pl.col("compute_med_ns").max().alias("_cmax"),
        *[pl.col(r).sum().alias(r) for r in HISTORY_ROLES],
        *[pl.col(r).is_not_null().all().alias(f"_has_{r}") for r in HISTORY_ROLES],
    ).with_columns(*[pl.when(pl.col(f"_has_{r}")).then(pl.col(r)).alias(r) for r in HISTORY_ROLES])
    ins = pl.col("ins")
    rate = lambda c, s=1000.0: pl.when(ins > 0).then(pl.col(c) * s / ins)  # noqa: E731
    per_run = per_run.select(
        "app", "config", "point", "run_id", "started_at", "call_site",
        (pl.col("_comp") + pl.col("_mpi")).alias("time_ns"),
        pl.col("_comp").alias("compute_ns"),
        pl.col("_mpi").alias("mpi_ns"),
        pl.when(pl.col("_cmax") > 0).then(pl.col("_comp") / pl.col("_cmax")).alias("load_balance"),
        pl.when(ins_ok).then(ins / pl.col("_visits")).alias("instructions"),
        pl.when(pl.col("cyc") > 0).then(ins / pl.col("cyc")).alias("ipc"),
        rate("l1_dcm").alias("l1_mpki"), rate("l2_dcm").alias("l2_mpki"), rate("l3_tcm").alias("l3_mpki"),
        rate("br_msp").alias("br_mpki"), rate("br_ins", 1.0).alias("br_per_ins"), rate("l1_icm").alias("icache_mpki"),
        rate("fp_ins", 1.0).alias("fp_share"),
        pl.when(pl.col("fp_ins") > 0).then(pl.col("vec_ins") / pl.col("fp_ins")).alias("vec_share"),
        pl.when(pl.col("_calls") > 0).then(pl.col("_bytes") / pl.col("_calls")).alias("mpi_bytes"),
        pl.when((pl.col("_mpi") > 0) & (pl.col("_calls") > 0)).then(pl.col("_bytes") / pl.col("_calls") / pl.col("_mpi"))
        .alias("mpi_bw"),
    )
    signals = [c for c in per_run.columns if c not in ("app", "config", "point", "run_id", "started_at", "call_site")]
    first = per_run.sort("started_at", "run_id").group_by("app", "config", "point", "call_site", maintain_order=True).agg(
        pl.col("started_at").first(), pl.col("run_id").first(), pl.len().alias("runs"),
        *[pl.col(s).mean() for s in signals])
    # quantities of different runs combine at the point: mispredicted share of branches
    first = first.with_columns(pl.when(pl.col("br_per_ins") > 0).then(pl.col("br_mpki") / 1000 / pl.col("br_per_ins"))
                               .alias("br_misp_rate"))
    return first.sort("app", "config", "call_site", "started_at")
