"""Reading the ingested runs back: the runs table and one run's bursts and MPI calls, straight from Parquet."""
from __future__ import annotations

import os
from collections.abc import Iterable

import polars as pl
from synthtrace.tracelib.schema import RUN_SCHEMA
from synthtrace.tracelib.domain.uncore import attribute_dram_cas
from synthtrace.warehouse import snapshot
from synthtrace.warehouse.errors import RunsChangedError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.names import name_problem
from synthtrace.warehouse.parts import read_part, read_parts


def runs_table(wh: Warehouse) -> pl.DataFrame:
    """Every run's row of the runs view (typed and empty when nothing was ingested), read as ``synthtrace sql``
    reads it (:mod:`~synthtrace.warehouse.snapshot`): one state of the warehouse whatever a writer removes or
    replaces meanwhile, and only the warehouse's own files (no run folder reached through a link)."""
    def read(snap: snapshot.Snapshot) -> pl.DataFrame:
        files = snap.files.get("runs", [])
        if not files:
            return pl.DataFrame(schema=RUN_SCHEMA)
        return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")

    return snapshot.read_whole(wh, ["runs"], read)


def experiment_runs(wh: Warehouse, experiment: str) -> pl.DataFrame:
    """The runs of ``experiment`` sorted by run name; raises :class:`UnknownExperimentError` if it has none."""
    return wh.experiment(experiment).require_runs().runs


def run_folders(wh: Warehouse) -> dict[str, tuple[int, int]]:
    """Run id -> (inode, change time in ns) of each run folder: every write of a run (an ingest, ``runs move``)
    puts a new folder in its place, so a folder whose pair differs from an earlier call's was written since. One
    ``scandir`` and a ``stat`` per run: no run file is read (a link or a folder of no run's name is no run)."""
    try:
        with os.scandir(wh.runs_dir) as entries:
            return {e.name: (st.st_ino, st.st_ctime_ns) for e in entries
                    if e.is_dir(follow_symlinks=False) and name_problem(e.name) is None
                    and (st := e.stat(follow_symlinks=False))}
    except FileNotFoundError:
        return {}


def check_runs_still_in(wh: Warehouse, experiment: str, run_ids: Iterable[str], what: str, *,
                        had: Iterable[str] | None = None, folders: dict[str, tuple[int, int]] | None = None) -> None:
    """Raise :class:`RunsChangedError` when a run of ``run_ids`` is no longer a run of ``experiment`` (removed or
    moved since ``what``, e.g. "it merged", read them), or, given ``had`` (the experiment's runs when ``what``
    began), when a run not among them has joined it since (``runs move`` into it, an ingest): a merge committed
    then would omit a run the experiment has. ``folders``: :func:`run_folders` taken before ``had`` was read (only
    the runs written since are read; None: every run not in ``had``). Call it under the experiment's
    :meth:`~Warehouse.writers_lock`, which ``synthtrace runs rm|move`` hold while they change runs."""
    def still_in(run_id: str) -> bool:
        f = wh.run_dir(run_id) / "run.parquet"
        return f.is_file() and read_part(f, columns=["experiment"]).get_column("experiment")[0] == experiment

    if gone := [r for r in run_ids if not still_in(r)]:
        raise RunsChangedError(f"experiment {experiment!r}: run(s) {', '.join(gone)} left it while {what} (removed "
                               "or moved); nothing was committed: run the command again")
    if had is None:
        return
    before, kept = folders or {}, set(had)
    written = [r for r, state in run_folders(wh).items() if r not in kept and before.get(r) != state]
    if joined := sorted(r for r in written if still_in(r)):  # [helper edges] issue 23: the other direction
        raise RunsChangedError(f"experiment {experiment!r}: run(s) {', '.join(joined)} joined it while {what} "
                               "(moved in or ingested); nothing was committed: run the command again")


def run_bursts(wh: Warehouse, run_id: str, *, dram_from_uncore: bool = True) -> pl.DataFrame:
    """The bursts of one run (its parts unioned by name), sorted by thread and burst_seq; empty if none.

    With ``dram_from_uncore`` and uncore memory-controller samples stored with the run, a ``DRAM_CAS`` column
    is added: the node's measured CAS counts apportioned to its bursts (:mod:`synthtrace.tracelib.domain.uncore`).
    """
    run_dir = wh.run_dir(run_id)
    parts = sorted((run_dir / "bursts").glob("*.parquet"))
    if not parts:
        return pl.DataFrame()
    bursts = read_parts(parts).sort(
        "appl", "task", "thread", "burst_seq"
    )
    uncore = sorted((run_dir / "uncore").glob("*.parquet")) if dram_from_uncore else []
    if uncore:
        bursts = attribute_dram_cas(bursts, read_parts(uncore), read_part(run_dir / "threads.parquet"))
    return bursts


def run_calls(wh: Warehouse, run_id: str) -> pl.DataFrame | None:
    """The MPI calls of one run sorted by thread and call_seq, or None when it has none."""
    f = wh.run_dir(run_id) / "mpi_calls.parquet"
    return read_part(f).sort("appl", "task", "thread", "call_seq") if f.is_file() else None
