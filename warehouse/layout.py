"""Where things live under a warehouse folder, and the staging-then-rename commit that makes writes atomic.

::

    WAREHOUSE/
      runs/<run_id>/run.parquet            one row of the runs view
      runs/<run_id>/bursts/part-*.parquet  the run's computation bursts
      runs/<run_id>/mpi_calls.parquet      the run's MPI calls
      runs/<run_id>/uncore/part-*.parquet  uncore counter samples (memory controllers), when the trace has them
      runs/<run_id>/threads.parquet        node of every thread (beside uncore/)
      experiments/<name>/...               merged data of one experiment (written by the merge)
      .staging/                            directories being written; never read
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse.names import check_name

if TYPE_CHECKING:  # polars costs ~0.3 s to import; `runs` and `sql` never need it
    import polars as pl

    from synthtrace.warehouse.experiment import Experiment

MARKER = "synthtrace-warehouse"


class MissingWarehouseError(WarehouseError):
    """The ``--warehouse`` folder to read from does not exist (a typo): bad input."""

    exit_code = 2


class Warehouse:
    """A warehouse folder. Creating the object does not touch the disk; :meth:`ensure` does."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    # ------------------------------------------------------------------ paths
    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def experiments_dir(self) -> Path:
        return self.root / "experiments"

    @property
    def staging_dir(self) -> Path:
        return self.root / ".staging"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / check_name(run_id, "run")

    def experiment_dir(self, name: str) -> Path:
        """The folder of experiment ``name`` (checked: never a path outside ``experiments/``)."""
        return self.experiments_dir / check_name(name)

    def existing(self) -> Warehouse:
        """This warehouse, after checking that its folder exists (reading never creates one)."""
        if not self.root.is_dir():
            what = "is not a folder" if self.root.exists() else "does not exist"
            raise MissingWarehouseError(f"{self.root}: no warehouse here (the folder {what}; see --warehouse)")
        return self

    def has_run(self, run_id: str) -> bool:
        return (self.run_dir(run_id) / "run.parquet").is_file()

    def experiment(self, name: str) -> Experiment:
        """Experiment ``name`` (:class:`~synthtrace.warehouse.experiment.Experiment`: the runs table read once)."""
        from synthtrace.warehouse.experiment import Experiment  # arch (issue 26): the experiment as an object

        return Experiment.open(self, name)

    # ------------------------------------------------------------------ writing
    def ensure(self) -> Warehouse:
        """Create the folder layout and clear staging left by killed writers."""
        if self.root.exists() and not self.root.is_dir():
            raise WarehouseError(f"{self.root}: exists and is not a folder")
        try:
            for d in (self.runs_dir, self.experiments_dir, self.staging_dir):
                d.mkdir(parents=True, exist_ok=True)
            (self.root / MARKER).touch(exist_ok=True)
        except OSError as exc:
            raise WarehouseError(f"{self.root}: cannot create the warehouse ({exc.strerror})") from None
        self._clear_stale_staging()
        return self

    def _clear_stale_staging(self) -> None:
        """Remove staging directories whose writer process is gone (a killed ingest)."""
        for d in self.staging_dir.iterdir():
            pid = d.name.split(".")[-1]
            if pid.isdigit() and _alive(int(pid)):
                continue
            shutil.rmtree(d, ignore_errors=True)

    @contextlib.contextmanager
    def staged(self, target: Path, *, replace: bool = False) -> Iterator[Path]:
        """Write into a staging directory; on success it is renamed to ``target`` in one step.

        On any error the staging directory is removed and ``target`` is left as it was. With ``replace`` an
        existing ``target`` is swapped out (renamed aside, then deleted), so readers see old or new, never a mix.
        """
        stage = self.staging_dir / f"{target.name}.{uuid.uuid4().hex[:8]}.{os.getpid()}"
        stage.mkdir(parents=True)
        try:
            yield stage
            _fsync_tree(stage)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                if not replace:
                    shutil.rmtree(stage)  # someone committed the same content meanwhile
                    return
                old = self.staging_dir / f"{target.name}.old.{uuid.uuid4().hex[:8]}.{os.getpid()}"
                os.rename(target, old)
                os.rename(stage, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                try:
                    os.rename(stage, target)
                except OSError as exc:
                    # another writer committed the same target between our exists() check and this rename
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not target.is_dir():
                        raise
                    shutil.rmtree(stage)
                    return
            _fsync_dir(target.parent)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise

    @contextlib.contextmanager
    def writers_lock(self, target: Path) -> Iterator[None]:
        """Take turns with every other writer of ``target`` (a run or experiment folder), in any process: an
        exclusive lock on a file under ``.locks/``, held until the block ends (or its process dies). Not
        re-entrant: a block holding it must not call :meth:`update_dir` on the same ``target``."""
        self.ensure()
        lock_dir = self.staging_dir.parent / ".locks"
        lock_dir.mkdir(exist_ok=True)
        with open(lock_dir / f"{target.parent.name}.{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def update_dir(self, target: Path, frames: dict[str, pl.DataFrame],
                   documents: dict[str, dict] | None = None, *, check: Callable[[], None] | None = None) -> Path:
        """Replace some files of a directory (``<name>.parquet`` per frame, ``<name>.json`` per document) and keep
        the others, in one atomic swap: the directory is rebuilt in staging (kept files hard-linked) and renamed
        into place. Writers of the same directory take turns (:meth:`writers_lock`), so none loses another's
        files; ``check()`` runs first under that lock and raises to refuse the update (what the frames were
        computed from has changed). Only regular files and folders are kept: a FIFO, socket, device or link found
        there is not ours and is left out (opening a FIFO would block the writer for good)."""
        mine = {f"{n}.parquet" for n in frames} | {f"{n}.json" for n in (documents or {})}
        with self.writers_lock(target):
            if check is not None:
                check()  # under the lock: what it checked cannot change before the swap
            with self.staged(target, replace=True) as stage:
                if target.is_dir():
                    for entry in target.iterdir():
                        if entry.name in mine:
                            continue
                        mode = entry.lstat().st_mode
                        if stat.S_ISDIR(mode):
                            shutil.copytree(entry, stage / entry.name, copy_function=link_or_copy,
                                            ignore=_not_regular)
                        elif stat.S_ISREG(mode):
                            link_or_copy(entry, stage / entry.name)
                for name, df in frames.items():
                    df.write_parquet(stage / f"{name}.parquet", statistics=True)
                for name, doc in (documents or {}).items():
                    (stage / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str))
        return target

    def remove(self, target: Path) -> None:
        """Remove a run or experiment directory whole (renamed aside first, so it disappears at once)."""
        if target.exists():
            gone = self.staging_dir / f"{target.name}.rm.{uuid.uuid4().hex[:8]}.{os.getpid()}"
            os.rename(target, gone)
            shutil.rmtree(gone, ignore_errors=True)


def _not_regular(folder: str, names: list[str]) -> set[str]:
    """``shutil.copytree`` ignore function: the entries of ``folder`` that are neither regular files nor folders."""
    keep = (stat.S_ISREG, stat.S_ISDIR)
    return {n for n in names if not any(k(os.lstat(os.path.join(folder, n)).st_mode) for k in keep)}


def link_or_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Hard-link ``src`` to ``dst`` (no bytes copied), or copy it with its metadata where links fail (another
    file system, no link support)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
