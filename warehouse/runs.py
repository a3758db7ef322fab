"""Reading the ingested runs back: the runs table and one run's bursts and MPI calls, straight from Parquet."""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from synthtrace.tracelib.merge.blocks import block_rows, group_rows, written
from synthtrace.tracelib.schema import RUN_SCHEMA, THREAD_KEYS
from synthtrace.tracelib.domain.uncore import attribute_dram_cas
from synthtrace.warehouse import snapshot
from synthtrace.warehouse.errors import RunsChangedError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.names import name_problem
from synthtrace.warehouse.parts import read_part, read_parts, scan_parts
from synthtrace.warehouse.stored import Folder, judge, missing_file, stored_parts


def runs_table(wh: Warehouse, leave_out: Iterable[str] = ()) -> pl.DataFrame:
    """Every run's row of the runs view (typed and empty when nothing was ingested), read as ``synthtrace sql``
    reads it (:mod:`~synthtrace.warehouse.snapshot`): one state of the warehouse whatever a writer removes or
    replaces meanwhile, and only the warehouse's own files (no run folder reached through a link). ``leave_out``:
    run ids not read (:func:`~synthtrace.warehouse.stored.damaged_runs`)."""
    def read(snap: snapshot.Snapshot) -> pl.DataFrame:
        files = snap.files.get("runs", [])
        if not files:
            return pl.DataFrame(schema=RUN_SCHEMA)
        return pl.concat([pl.read_parquet(f, glob=False) for f in files], how="diagonal_relaxed")

    return snapshot.read_whole(wh, ["runs"], read, [f"runs/{r}" for r in leave_out])


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


def run_folder(wh: Warehouse, run_id: str) -> Folder:
    """The verdict on run ``run_id``'s folder (:func:`~synthtrace.warehouse.stored.judge`: its manifest read once),
    for :func:`run_parts` of several patterns of one read of the run."""
    return judge(wh.root, ("runs", run_id))


def run_parts(wh: Warehouse, run_id: str, pattern: str, folder: Folder | None = None) -> list[Path]:
    """The stored files of run ``run_id`` matching ``pattern`` (a glob below its folder: ``bursts/*.parquet``,
    ``mpi_calls.parquet``), sorted: those its commit wrote, never a copy put beside them; a file its manifest lists
    that is missing, or a manifest that does not list the run's record (attack 9 C8), is
    :class:`~synthtrace.warehouse.errors.DamagedPartError` (attack 8 B1, B2;
    :func:`~synthtrace.warehouse.stored.stored_parts`). A run that is not there (removed while a command read
    it) is :class:`RunsChangedError` (B3: it read as an empty table). ``folder``: :func:`run_folder` of it, when
    one read takes several patterns (default: judged now)."""
    run_dir = wh.run_dir(run_id)
    files = stored_parts(run_dir, pattern, run_folder(wh, run_id) if folder is None else folder)
    if not (run_dir / "run.parquet").is_file():  # after the listing: removed before or while it was listed
        raise _removed(run_id)
    return files


def _removed(run_id: str) -> RunsChangedError:
    return RunsChangedError(f"run {run_id} was removed while it was read (`synthtrace runs rm`, or moved); nothing "
                            "was committed: run the command again")


@contextlib.contextmanager
def _reading(wh: Warehouse, run_id: str) -> Iterator[None]:
    """Reads of run ``run_id``'s files listed by :func:`run_parts`: one of them gone meanwhile is the run removed
    (:class:`RunsChangedError`) or, with the run still there, a stored file missing (DamagedPartError)."""
    try:
        yield
    except FileNotFoundError as exc:
        if not (wh.run_dir(run_id) / "run.parquet").is_file():
            raise _removed(run_id) from None
        raise missing_file(exc.filename or wh.run_dir(run_id)) from None


def run_bursts(wh: Warehouse, run_id: str, *, dram_from_uncore: bool = True,
               leave_out: Collection[str] = ()) -> pl.DataFrame:
    """The bursts of one run (its parts unioned by name), sorted by thread and burst_seq; empty if none. The
    columns ``leave_out`` are not read (a scan's projection: what a model reads of a run sampling thousands of
    counter types).

    With ``dram_from_uncore`` and uncore memory-controller samples stored with the run, a ``DRAM_CAS`` column
    is added: the node's measured CAS counts apportioned to its bursts (:mod:`synthtrace.tracelib.domain.uncore`).
    """
    folder = run_folder(wh, run_id)  # one read of its manifest serves every pattern
    parts = run_parts(wh, run_id, "bursts/*.parquet", folder)
    if not parts:
        return pl.DataFrame()
    with _reading(wh, run_id):
        bursts = (scan_parts(parts).drop(leave_out, strict=False).collect() if leave_out else read_parts(parts)).sort(
            "appl", "task", "thread", "burst_seq"
        )
        uncore = run_parts(wh, run_id, "uncore/*.parquet", folder) if dram_from_uncore else []
        if uncore:
            threads = run_parts(wh, run_id, "threads.parquet", folder)
            if not threads:
                raise missing_file(wh.run_dir(run_id) / "threads.parquet")
            bursts = attribute_dram_cas(bursts, read_parts(uncore), read_part(threads[0]))
    return bursts


#: how :func:`run_bursts_to` writes its copy (a scratch file of the merge): neither compressed, dictionary-encoded
#: nor with statistics (issue 23: at 4,106 columns the encodings took 3/4 of the copy's time, and the statistics
#: add to what the writer keeps per column chunk until its footer)
SCRATCH_PARQUET = {"compression": "none", "use_dictionary": False, "write_statistics": False}


def run_bursts_to(wh: Warehouse, run_id: str, path: Path) -> bool:
    """Whether the run's stored bursts were copied to the Parquet file ``path`` (without the run id), sorted by
    thread and ``burst_seq``, a block at a time, never held whole: when no uncore samples are to be apportioned
    (else False, nothing written: read them with :func:`run_bursts`). Each part is read a block of
    :data:`~synthtrace.tracelib.merge.blocks.BLOCK_CELLS` cells of the copy's columns at a time, the columns it lacks
    added as NULL, and written by pyarrow in row groups sized for the copy's width
    (:func:`~synthtrace.tracelib.merge.blocks.group_rows`). Issue 23: Polars' sink of the union of a wide run's 149
    parts of ~1,000 of 4,096 counter columns each took 2.7 GB for 150,000 bursts. Parts not in that order (a run
    ingested in several chunks: each chunk's parts hold every thread) are put in order through a folder beside
    ``path`` (:func:`_in_order`), removed before it returns (review26 F8: such a run was read whole)."""
    folder = run_folder(wh, run_id)
    parts = run_parts(wh, run_id, "bursts/*.parquet", folder)
    if not parts or run_parts(wh, run_id, "uncore/*.parquet", folder):
        return False
    with _reading(wh, run_id):
        scan = scan_parts(parts).drop("run_id", strict=False)
        keys = scan.select(*THREAD_KEYS, "burst_seq").collect()
        schema = scan.head(0).collect().to_arrow().schema
    rows = group_rows(keys.height, len(schema))
    blocks = _part_blocks(wh, run_id, parts, schema)
    # each stored row's position once sorted (one sort serves the order check and the sorted copy)
    rank = keys.with_row_index("_in").sort(*THREAD_KEYS, "burst_seq", maintain_order=True).get_column("_in").to_numpy()
    del keys
    if (rank == np.arange(rank.size)).all():
        written(blocks, path, rows, **SCRATCH_PARQUET)
        return True
    buckets = path.with_name(f"{path.name}.buckets")
    try:
        buckets.mkdir()
        written(_in_order(blocks, rank, len(schema), buckets), path, rows, **SCRATCH_PARQUET)
    finally:
        shutil.rmtree(buckets, ignore_errors=True)
    return True


def _in_order(blocks: Iterable[pa.Table], rank: np.ndarray, columns: int, folder: Path) -> Iterator[pa.Table]:
    """The rows of ``blocks`` in sorted order (``rank``: the stored row at each sorted position), a block of
    :func:`~synthtrace.tracelib.merge.blocks.block_rows` rows (``columns`` wide) at a time: each row is first
    appended to the file in ``folder`` of the output block it falls in (an LZ4-compressed Arrow stream, which keeps
    no state per write), then each such file is read and its rows put in place. Every row is read twice; held: one
    input block, one output block and ~32 bytes a row of positions (``rank``, each row's place and output block, the
    rows by block: O(rows), not a block: review27 R8). Neither library sorts this in bounded memory (session 27,
    measured on 24,000 rows of ~3,000 counter columns, 1.4 GB read whole: Polars' streaming sort 1.4 GB; DuckDB's
    spilling ORDER BY out of memory at 300 and 600 MB limits, 1.3 GB and 641 s at 1 GB)."""
    step = block_rows(columns)
    place = np.empty(rank.size, np.int64)  # each stored row's row in the copy
    place[rank] = np.arange(rank.size)
    bucket = place // step
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    try:
        at = 0
        for block in blocks:
            of = bucket[at:at + block.num_rows]
            at += block.num_rows
            order = np.argsort(of, kind="stable")
            for rows in np.split(order, np.flatnonzero(np.diff(of[order])) + 1):
                if rows.size:
                    k = int(of[rows[0]])
                    if k not in writers:
                        writers[k] = pa.ipc.new_stream(folder / f"{k}.arrow", block.schema, options=options)
                    writers[k].write_table(block.take(rows))
    finally:
        for w in writers.values():
            w.close()
    by_bucket = np.argsort(bucket, kind="stable")  # the stored rows of each file, in the order they were written
    starts = np.searchsorted(bucket[by_bucket], np.arange(len(writers) + 1))
    for k in range(len(writers)):
        with pa.OSFile(str(folder / f"{k}.arrow")) as f:
            got = pa.ipc.open_stream(f).read_all()
        at = place[by_bucket[starts[k]:starts[k + 1]]] - k * step  # each row's row in this output block
        order = np.empty(at.size, np.int64)
        order[at] = np.arange(at.size)
        (folder / f"{k}.arrow").unlink()
        yield got.take(order)


def _part_blocks(wh: Warehouse, run_id: str, parts: Sequence[Path], schema: pa.Schema) -> Iterator[pa.Table]:
    """The rows of run ``run_id``'s ``parts`` in order, a block of ``schema``'s columns at a time (at least one
    block: a copy has the schema), the columns a part lacks NULL (one shared array per type). Its reads are guarded
    (:func:`_reading`), not what its consumer does with the blocks."""
    with _reading(wh, run_id):
        for p in parts:
            with pq.ParquetFile(p) as f:
                have = set(f.schema_arrow.names)
                for batch in f.iter_batches(batch_size=block_rows(len(schema)),
                                            columns=[c for c in schema.names if c in have]):
                    nulls: dict[pa.DataType, pa.Array] = {}
                    yield pa.Table.from_arrays(
                        [batch.column(c.name).cast(c.type) if c.name in have
                         else nulls.setdefault(c.type, pa.nulls(batch.num_rows, c.type)) for c in schema],
                        schema=schema)
    yield schema.empty_table()


def run_calls(wh: Warehouse, run_id: str) -> pl.DataFrame | None:
    """The MPI calls of one run sorted by thread and call_seq, or None when it has none (or is not there: a merged
    experiment's reference run removed since; its bursts, :func:`run_bursts`, are refused then)."""
    found = stored_parts(wh.run_dir(run_id), "mpi_calls.parquet", run_folder(wh, run_id))
    with _reading(wh, run_id):
        return read_part(found[0]).sort("appl", "task", "thread", "call_seq") if found else None


def run_file(wh: Warehouse, run_id: str, name: str) -> Path | None:
    """The stored file ``name`` of run ``run_id`` (:func:`run_parts`), or None when the run has none."""
    return next(iter(run_parts(wh, run_id, name)), None)
