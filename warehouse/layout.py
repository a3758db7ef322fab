"""Where things live under a warehouse folder, and the staging-then-rename commit that makes writes atomic.

::

    WAREHOUSE/
      runs/<run_id>/run.parquet            one row of the runs view
      runs/<run_id>/bursts/part-*.parquet  the run's computation bursts
      runs/<run_id>/mpi_calls.parquet      the run's MPI calls
      runs/<run_id>/uncore/part-*.parquet  uncore counter samples (memory controllers), when the trace has them
      runs/<run_id>/threads.parquet        node of every thread (beside uncore/)
      experiments/<name>/...               merged data of one experiment (written by the merge)
      <stored folder>/checksums.json       digest, size and mtime of each file below it (warehouse/checksums.py)
      .staging/                            directories being written; never read
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthtrace.tracelib.errors import SynthtraceError
from synthtrace.tracelib.folder_tree import copy_tree, remove_tree, walk
from synthtrace.warehouse.errors import CommitsClosedError, WarehouseError
from synthtrace.warehouse.names import check_name

if TYPE_CHECKING:  # polars costs ~0.3 s to import; `runs` and `sql` never need it
    import polars as pl

    from synthtrace.warehouse.experiment import Experiment
    from synthtrace.warehouse.stored import Folder

MARKER = "synthtrace-warehouse"
#: the top folders writers make when first needed (beside runs/, experiments/, .staging/): attack 18 F7, a link at
#: one of them was written through (a model trained, predictions and index entries stored outside the warehouse)
WRITTEN_TOPS = (".locks", "models", "predictions", "regressions", "pop", ".index", ".cache")
#: the checksums of a stored folder's files (:mod:`synthtrace.warehouse.checksums`), written by :meth:`Warehouse.staged`
MANIFEST = "checksums.json"


#: why an existing warehouse cannot be written: a read-only mount, or no write permission for this user
_CANNOT_WRITE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


class ReadOnlyWarehouseError(WarehouseError):
    """A writer was given a warehouse it cannot write (a read-only mount, someone else's folder): bad input, exit 2;
    nothing was changed."""


class MissingWarehouseError(WarehouseError):
    """The ``--warehouse`` folder to read from does not exist (a typo): bad input."""

    exit_code = 2


#: what a stored folder holds together (a run, a merged or analysed experiment, a model), each set all of it: a
#: folder of a warehouse reached through another mount (a bind mount or a container volume of ``runs/<id>``) has
#: no marker above it, but is known by its own files (attack 6, F11: ``sql -o MOUNT/run.parquet`` replaced a run)
STORED_FOLDER_FILES: tuple[frozenset[str], ...] = (
    frozenset({"run.parquet", "bursts"}), frozenset({"experiment.json", "merged_bursts.parquet"}),
    frozenset({"archetypes.parquet", "burst_metrics.parquet"}), frozenset({"model.skops", "model.parquet"}))


def warehouse_holding(path: str | Path) -> Path | None:
    """The warehouse folder that ``path`` (links followed, as a write would follow them) is or lies in, or None.
    A warehouse is known by its :data:`MARKER` file, or by its ``runs/`` and ``.staging/`` folders. A folder of one
    reached through another mount (a bind mount or a container volume of ``runs/<id>``, ``runs/`` or
    ``experiments/``) has neither above it: a mount point that is a stored folder (:data:`STORED_FOLDER_FILES`) or
    holds nothing but stored folders counts as a warehouse folder too. A copy of a stored folder is no mount point,
    and is the user's: neither the folder holding it (attack 12 F2: every output below the folder holding a backup
    of a run was refused as "inside the warehouse"; attack 13 F3: so was every output beside a lone copied run) nor
    the copy itself is a warehouse."""
    mounts: frozenset[str] | None = None
    for folder in (real := Path(os.path.realpath(path)), *real.parents):
        if _marked(folder):  # its path alone: an output's folder need not be UTF-8, a warehouse's must (attack 20 F4)
            return folder
        if _stored_folder(folder) or _holds_stored_folders(folder):
            mounts = mount_points() if mounts is None else mounts
            if os.path.ismount(folder) or str(folder) in mounts:
                return folder
    return None


def _marked(folder: Path) -> bool:
    """Whether ``folder`` bears a warehouse's signs: its :data:`MARKER` file, or its ``runs/`` and ``.staging/``
    folders (those of :class:`Warehouse`)."""
    return (folder / MARKER).is_file() or ((folder / "runs").is_dir() and (folder / ".staging").is_dir())


def mount_points() -> frozenset[str]:
    """The mount points of this process's mount namespace (``/proc/self/mountinfo``, bind mounts on one file system
    included, which :func:`os.path.ismount` cannot tell); empty where that file cannot be read (then only
    :func:`os.path.ismount` tells a mount)."""
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            text = fh.read()
    except OSError:
        return frozenset()
    unescaped = (re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4])  # \040: a blank
                 for line in text.splitlines() if len(fields := line.split(b" ")) > 4)
    return frozenset(os.fsdecode(p) for p in unescaped)


def _stored_folder(folder: Path) -> bool:
    return any(all((folder / name).exists() for name in names) for names in STORED_FOLDER_FILES)


def _holds_stored_folders(folder: Path, sample: int = 8) -> bool:
    """Whether ``folder`` is a warehouse's ``runs/`` or ``experiments/`` (reached through another mount: attack 6
    F16, a new folder made under a bind mount of experiments/ was read by the views): it has a subfolder, and each
    of its first ``sample`` subfolders (hidden ones aside) is a stored folder; one that is not (the user's
    ``projects/`` beside a copied run) says it is the user's folder. Stops at the first ``sample`` subfolders, so a
    large folder costs no more."""
    seen = 0
    try:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
                    continue
                if not _stored_folder(Path(e.path)):
                    return False
                seen += 1
                if seen >= sample:
                    break
    except OSError:
        return False
    return seen > 0


#: the largest record a warehouse keeps as JSON (a swap journal, experiment.json, night.json), bytes
MAX_RECORD_BYTES = 1 << 20


def read_record(path: Path, limit: int = MAX_RECORD_BYTES) -> Any:
    """The JSON document in the warehouse's record file ``path``; ValueError when it is not one: anything but a
    regular file (a FIFO would block the reader for good, a link to /dev/zero fill its memory: attack 6 F14), one
    larger than ``limit`` bytes, or no JSON. Opened without following a link or blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{path}: a symbolic link, not a record") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise ValueError(f"{path}: not a record (a special file, or larger than {limit} bytes)")
        return json.loads(fh.read(limit + 1))


def is_own_file(root: Path, path: Path) -> bool:
    """True when ``path`` (below ``root``) is a regular file reached through no symbolic link below ``root``: a
    linked folder or file inside a warehouse (``runs/evil -> /elsewhere``) is not the warehouse's (issue 23 item 6)."""
    try:
        regular = stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:  # vanished meanwhile (a run removed)
        return False
    return regular and os.path.realpath(path) == os.path.join(os.path.realpath(root), os.path.relpath(path, root))


def _refuse_path_not_utf8(root: Path) -> None:
    """Refuse, in one line naming it, a warehouse whose path holds a byte that is not UTF-8: Polars' Parquet reader
    and writer, which read and write every stored table, cannot open such a path (a 40-line TypeError traceback,
    attack 19 F1), also for a warehouse renamed so after it was made. The path as given (a relative one under a
    Latin-1 folder is fine)."""
    raw = os.fsencode(root)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WarehouseError(
            f"{raw.decode('utf-8', 'backslashreplace')}: the warehouse's path holds a byte that is not UTF-8 "
            f"(0x{raw[exc.start]:02X}) at byte {exc.start + 1}, which the Parquet reader and writer cannot open; "
            "nothing was read or written: use a warehouse whose path is UTF-8 (rename that folder, or give another "
            "-w)") from None


class Warehouse:
    """A warehouse folder. Creating the object does not touch the disk; :meth:`ensure` does."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        _refuse_path_not_utf8(self.root)

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
    @property
    def made_dirs(self) -> tuple[Path, ...]:
        """The folders :meth:`ensure` makes in a new warehouse, before its marker."""
        return self.runs_dir, self.experiments_dir, self.staging_dir

    @property
    def layout_dirs(self) -> tuple[Path, ...]:
        """The folders writers write in (and clean, for ``.staging``), made as they are first needed but
        :attr:`made_dirs`: each is refused as a link by every writer (:meth:`check_layout`)."""
        return *self.made_dirs, *(self.root / top for top in WRITTEN_TOPS)

    def check_layout(self) -> None:
        """Refuse a warehouse whose layout folders (:attr:`layout_dirs`) are not its own folders: a symbolic link
        there would make every writer write, and the stale-staging cleanup delete, wherever it points (attack 6,
        F2/F3: ``.staging -> /elsewhere`` lost the subfolders of /elsewhere at the next ingest)."""
        for d in self.layout_dirs:
            try:
                mode = d.lstat().st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                raise WarehouseError(f"{d}: is a symbolic link (to {os.readlink(d)}), not a folder of the warehouse; "
                                     "nothing was written: replace it with a folder (or give --warehouse the "
                                     "folder it belongs to)")
            if not stat.S_ISDIR(mode):
                raise WarehouseError(f"{d}: is not a folder; nothing was written: move it away")

    def ensure(self) -> Warehouse:
        """Create the folder layout and clear staging left by killed writers (a layout folder that is a link or a
        file is refused: :meth:`check_layout`)."""
        if self.root.exists() and not self.root.is_dir():
            raise WarehouseError(f"{self.root}: exists and is not a folder")
        self.check_layout()
        existed = self.root.is_dir()
        if existed:
            self._check_new_in_empty()
        try:
            for d in self.made_dirs:
                d.mkdir(parents=True, exist_ok=True)
            (self.root / MARKER).touch(exist_ok=True)
        except OSError as exc:
            if existed:  # attack 8 B10: it is there, it cannot be written
                self._refuse_read_only(exc)
            raise WarehouseError(f"{self.root}: cannot create the warehouse ({exc.strerror})") from None
        self._clear_stale_staging()
        return self

    def _check_new_in_empty(self) -> None:
        """Refuse to make a new warehouse in a folder that holds something else (attack 16 F6: ``ingest -w ~/thesis``
        made the user's folder a warehouse, and every output under it was then refused as inside one): a folder is
        taken as it is when it is a warehouse already (:func:`warehouse_holding`'s signs), or holds only what
        :meth:`ensure` makes before the marker (another writer making it at the same moment)."""
        if _marked(self.root):
            return
        made = {d.name for d in self.made_dirs}
        try:
            others = sorted(p.name for p in self.root.iterdir() if p.name not in made)
        except OSError:  # not readable: the writes below say why
            return
        if others:
            shown = ", ".join(repr(n) for n in others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise WarehouseError(f"{self.root}: not a synthtrace warehouse (no {MARKER} file) and not empty (it holds "
                                 f"{shown}); nothing was made: give --warehouse a new or empty folder")

    def _refuse_read_only(self, exc: OSError) -> None:
        """Raise :class:`ReadOnlyWarehouseError` when ``exc`` says the warehouse cannot be written (a read-only
        mount, no permission); return otherwise."""
        if exc.errno in _CANNOT_WRITE:
            raise ReadOnlyWarehouseError(f"{self.root}: the warehouse is read-only for this command "
                                         f"({exc.strerror}); nothing was changed") from None

    @contextlib.contextmanager
    def removed_if_unused(self) -> Iterator[Warehouse]:
        """For a block that may create this warehouse: when the folder did not exist before and the block leaves it
        holding nothing (every trace refused), it is removed again: a refused ingest creates no empty warehouse."""
        existed = self.root.exists() or self.root.is_symlink()
        try:
            yield self
        finally:
            if not existed:
                self._remove_if_empty()

    def _remove_if_empty(self) -> None:
        """Remove the folder layout :meth:`ensure` creates if nothing else is in it (``rmdir`` refuses a folder that
        is not empty, so a concurrent writer's files are never touched)."""
        layout = self.layout_dirs
        with contextlib.suppress(OSError):
            if {p.name for p in self.root.iterdir()} - {MARKER} - {d.name for d in layout}:
                return  # something else was stored
            if any(any(d.iterdir()) for d in layout if d.is_dir()):
                return
            for d in layout:
                if d.is_dir():
                    d.rmdir()
            (self.root / MARKER).unlink(missing_ok=True)
            self.root.rmdir()

    def _clear_stale_staging(self) -> None:
        """Finish the swaps killed writers left half done (:meth:`_recover_swaps`), then remove the staging
        directories whose writer process is gone (a killed ingest)."""
        self._recover_swaps()
        for d in self.staging_dir.iterdir():
            if self.owner_alive(d.name.split(".")[-1]):  # [helper races] attack 7 A6: by lease, not by pid
                continue
            if d.name.endswith(_SWAP_SUFFIX) and not d.is_dir():  # not a writer's journal (they are in .locks)
                d.unlink(missing_ok=True)
                continue
            remove_tree(d, ignore_errors=True)
        for lease in [*self.journal_dir.glob(f"L*{_LEASE_SUFFIX}"), *self.journal_dir.glob(".L*.new")]:
            _lease_held(lease)  # [helper races] the leases of writers gone (and of those killed taking one)

    @contextlib.contextmanager
    def lease(self) -> Iterator[str]:
        """[helper races] attack 7 A6. What ends the names of what a block puts in ``.staging`` (a stage, the old
        folder of a swap, query links, a merge's spill) and of a swap's journal: the id of a lease, a file in
        ``.locks/`` this process holds locked (``flock``) until the block ends, then removes. A writer on another host
        or in another PID namespace (Dask workers sharing the warehouse, a container) thus tells a live writer's
        stage from a killed one's (its lease unlocked): a pid says nothing there. Where ``.locks/`` cannot be written
        (a reader of someone else's warehouse) the id is the pid, judged on this host as before."""
        owner = f"L{uuid.uuid4().hex[:16]}"
        tmp, lease = self.journal_dir / f".{owner}.new", self.journal_dir / f"{owner}{_LEASE_SUFFIX}"
        fd = None
        try:
            self.journal_dir.mkdir(exist_ok=True)
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)  # before it has its name: nobody ever sees it unlocked
            os.rename(tmp, lease)
        except OSError:  # .locks not writable, full, or a file system without locks: the pid, as before
            if fd is not None:
                os.close(fd)
                fd = None
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        try:
            yield owner if fd is not None else str(os.getpid())
        finally:
            if fd is not None:
                with contextlib.suppress(OSError):
                    lease.unlink(missing_ok=True)
                os.close(fd)

    def owner_alive(self, owner: str) -> bool:
        """[helper races] Whether the process that named a ``.staging`` entry or a journal ``...<owner>`` lives: its
        lease is held (on any host; a dead one's lease file is removed here), or, for a pid, the process exists."""
        if owner.isdigit():
            return pid_alive(int(owner))
        if not _LEASE_ID.fullmatch(owner):
            return False
        return _lease_held(self.journal_dir / f"{owner}{_LEASE_SUFFIX}")

    @property
    def journal_dir(self) -> Path:
        """Where a directory swap's journal is written: ``.locks/``, which only writers write. ``.staging`` is
        writable by whoever may query (the snapshots' links): a journal planted there with a planted folder made
        the next writer commit a forged run (attack 6 F17); one there is never acted on, only removed."""
        return self.root / ".locks"

    def _recover_swaps(self) -> None:
        """For each swap journal whose writer is gone: when the target is missing (killed between the two renames)
        put the new directory in place if it is there, else the old one back; then the journal goes. The only
        copy of a run or experiment is never deleted."""
        if not self.journal_dir.is_dir():
            return
        for journal in self.journal_dir.glob(f"*{_SWAP_SUFFIX}"):
            if self.owner_alive(journal.name.removesuffix(_SWAP_SUFFIX).split(".")[-1]):  # [helper races] A6
                continue
            try:
                target, old, new = self._journal_paths(read_record(journal))
            except (OSError, ValueError, KeyError, TypeError):
                # written but cut (no rename had started, see _swap), or not one this warehouse's writers write
                if journal.is_dir() and not journal.is_symlink():
                    remove_tree(journal, ignore_errors=True)  # a folder named like one (attack 6 F18)
                else:
                    journal.unlink(missing_ok=True)
                continue
            if not target.exists():
                for candidate in (new, old):
                    if candidate.is_dir():
                        os.rename(candidate, target)
                        break
            _fsync_dir(target.parent)
            journal.unlink(missing_ok=True)

    def _journal_paths(self, swap: dict) -> tuple[Path, Path, Path]:
        """A swap journal's (target, old, new), or ValueError unless they are where :meth:`_swap` puts them: the
        target a folder inside the warehouse (``runs/<id>``, ``experiments/<name>``, ...), old and new directories
        right inside ``.staging``. Anyone who may query may write in ``.staging`` (the query snapshots' links), so
        a planted journal must not make the next writer rename a folder from, or to, anywhere else."""
        rel = {k: Path(swap[k]) for k in ("target", "old", "new")}
        for path in rel.values():
            if path.is_absolute() or any(part in ("", ".", "..") for part in path.parts):
                raise ValueError(f"{path}: not a path inside the warehouse")
        if (len(rel["target"].parts) < 2 or rel["target"].parts[0] == self.staging_dir.name
                or (self.root / rel["target"]).parent.is_symlink()):
            raise ValueError(f"{rel['target']}: not a stored folder")
        for k in ("old", "new"):
            if rel[k].parent != Path(self.staging_dir.name) or (self.root / rel[k]).is_symlink():
                raise ValueError(f"{rel[k]}: not a directory of {self.staging_dir.name}")
        return self.root / rel["target"], self.root / rel["old"], self.root / rel["new"]

    @contextlib.contextmanager
    def staged(self, target: Path, *, replace: bool = False,
               commit: Callable[[Path], contextlib.AbstractContextManager[bool]] | None = None) -> Iterator[Path]:
        """Write into a staging directory; on success it is renamed to ``target`` in one step.

        On any error the staging directory is removed and ``target`` is left as it was. With ``replace`` an
        existing ``target`` is swapped out (renamed aside, then deleted), so readers see old or new, never a mix.
        The folder's checksums (:data:`MANIFEST`) are written into it last, before the rename. A ``target`` that is
        there and no commit's (a user's copy) is refused before anything is staged (:func:`~synthtrace.warehouse.
        stored.refuse_foreign`). ``commit(stage)``: a context entered once the stage is complete and held through the
        rename (a lock under which a writer decides what it commits: an ingest's placement); it may change files of
        the stage and then yields True (the checksums are written again); an error in it refuses the commit.
        """
        self.check_layout()
        from synthtrace.warehouse.stored import refuse_foreign  # stored reads manifests, which read records here

        refuse_foreign(target)
        with self.lease() as owner:  # [helper races] attack 7 A6: what it stages is judged by this lease
            stage = self.staging_dir / f"{target.name}.{uuid.uuid4().hex[:8]}.{owner}"
            try:
                stage.mkdir(parents=True)  # inside: a Ctrl-C raised as mkdir returns is removed too (issue 23)
                yield stage
                from synthtrace.warehouse.checksums import write_manifest  # checksums reads records with this module

                write_manifest(stage, target if target.is_dir() else None, target.name)
                _fsync_tree(stage)
                with commit(stage) if commit is not None else contextlib.nullcontext(False) as changed:
                    if changed:
                        write_manifest(stage, target if target.is_dir() else None, target.name)
                        _fsync_tree(stage)
                    old = self._commit(stage, target, owner, replace)
                if old is not None:
                    remove_tree(old, ignore_errors=True)
            except BaseException as exc:
                os_error = os_error_within(exc, target)  # before the stage goes: its space tells a full disk
                remove_tree(stage, ignore_errors=True)
                if (apart := self._apart(exc, target)) is not None:
                    raise apart from None
                if os_error is not None:
                    raise os_error from None  # a full disk is one line at the CLI edge (issue 23 item 12)
                raise

    def _commit(self, stage: Path, target: Path, owner: str, replace: bool) -> Path | None:
        """Rename the complete ``stage`` to ``target`` (:meth:`staged`); returns where a replaced folder now is (to
        delete), else None. A ``target`` committed meanwhile by another writer (the same content) is kept, and the
        stage removed, unless ``replace``."""
        target.parent.mkdir(parents=True, exist_ok=True)
        with _open_commits(target):
            if target.exists():
                if not replace:
                    remove_tree(stage)  # someone committed the same content meanwhile
                    return None
                old = self._swap(stage, target, owner)
                COMMITTED.append(target)  # [helper races] attack 6 F22: a Ctrl-C after this says it was stored
            else:
                old = None
                try:
                    os.rename(stage, target)
                except OSError as exc:
                    # another writer committed the same target between our exists() check and this rename
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not target.is_dir():
                        raise
                    remove_tree(stage)
                    return None
                COMMITTED.append(target)  # [helper races]
        _fsync_dir(target.parent)
        return old

    @contextlib.contextmanager
    def scratch(self, target: Path, what: str) -> Iterator[Path]:
        """A folder in ``.staging`` for a writer's intermediate files on the way to ``target`` (a merge's spill, an
        analysis' parts; ``what`` names it), removed when the block ends and, after a kill, by the next writer's
        stale-staging cleanup (its lease is gone). On the warehouse's own file system: a full disk there is one
        :class:`OSError` naming ``target``, as a commit's (attack 9 C4, C7: the analysis' parts in ``$TMPDIR``
        ended in a Polars traceback when it filled, and stayed there after a kill)."""
        self.check_layout()
        with self.lease() as owner:
            folder = self.staging_dir / f"{what}-{target.name}.{uuid.uuid4().hex[:8]}.{owner}"
            try:
                try:  # inside the block that removes it: a Ctrl-C raised as mkdir returns (issue 23)
                    folder.mkdir(parents=True)
                except OSError as exc:  # the first write of a merge that reads its runs from a spill (dc6588f)
                    self._refuse_read_only(exc)
                    raise
                yield folder
            except Exception as exc:
                os_error = None if isinstance(exc, SynthtraceError) else os_error_within(exc, target)
                if os_error is not None:
                    raise os_error from None
                raise
            finally:
                remove_tree(folder, ignore_errors=True)

    def _swap(self, stage: Path, target: Path, owner: str) -> Path:
        """Put ``stage`` in the place of the directory ``target``; returns where the old one now is (to delete).

        One ``renameat2(RENAME_EXCHANGE)`` where the file system has it: readers see the old or the new directory,
        never none. Elsewhere two renames, journalled first in ``.locks/*.<pid>.swap.json`` so that a writer
        killed between them is finished by the next (:meth:`_recover_swaps`)."""
        if _exchange(stage, target):
            return stage
        old = self.staging_dir / f"{target.name}.old.{uuid.uuid4().hex[:8]}.{owner}"  # [helper races] A6
        self.journal_dir.mkdir(exist_ok=True)
        journal = self.journal_dir / f"{target.name}.{uuid.uuid4().hex[:8]}.{owner}{_SWAP_SUFFIX}"
        doc = {k: str(p.relative_to(self.root)) for k, p in (("target", target), ("old", old), ("new", stage))}
        with open(journal, "w") as fh:
            fh.write(json.dumps(doc))
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(self.journal_dir)
        os.rename(target, old)
        try:
            os.rename(stage, target)
        except BaseException:  # a failed second rename, Ctrl-C: the old directory goes back
            if not target.exists():
                os.rename(old, target)
            journal.unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)
        journal.unlink()
        return old

    @contextlib.contextmanager
    def writers_lock(self, target: Path) -> Iterator[None]:
        """Take turns with every other writer of ``target`` (a run or experiment folder), in any process: an
        exclusive lock on a file under ``.locks/``, held until the block ends (or its process dies). Not
        re-entrant: a block holding it must not call :meth:`update_dir` on the same ``target``. The lock file is
        opened as the night lock is (:func:`~synthtrace.warehouse.night_lock.open_lock`): a link, FIFO, socket or
        second name planted there is refused in one line, nothing written (attack 16 F4: ``open(.., "w")`` emptied
        what a link there pointed to, and waited on a FIFO for good)."""
        from synthtrace.warehouse.night_lock import open_lock  # it builds on this module

        self.ensure()
        self.journal_dir.mkdir(exist_ok=True)
        fd = open_lock(self.journal_dir / f"{target.parent.name}.{target.name}.lock", "a writers' lock",
                       "nothing was written")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def update_dir(self, target: Path, frames: dict[str, pl.DataFrame],
                   documents: dict[str, dict] | None = None, *, check: Callable[[], None] | None = None,
                   drop: Iterable[str] = ()) -> Path:
        """Replace some files of a directory (``<name>.parquet`` per frame, ``<name>.json`` per document) and keep
        the others, in one atomic swap: the directory is rebuilt in staging (kept files hard-linked) and renamed
        into place. Writers of the same directory take turns (:meth:`writers_lock`), so none loses another's
        files; ``check()`` runs first under that lock and raises to refuse the update (what the frames were
        computed from has changed). Only regular files and folders are kept: a FIFO, socket, device or link found
        there is not ours and is left out (opening a FIFO would block the writer for good); so is a file the
        folder's manifest does not list (put there by hand: the new manifest would make it stored data, attack 8
        B1). A file it lists that is a link, or lies in a linked folder, is refused as the readers refuse it
        (:func:`refuse_linked_members`), unless this update replaces or drops it. ``drop``: names of files of the
        folder not kept (computed from what this update replaces)."""
        from synthtrace.warehouse.stored import Folder  # stored reads manifests, which read records with this module

        mine = {f"{n}.parquet" for n in frames} | {f"{n}.json" for n in (documents or {})} | set(drop)
        with self.writers_lock(target):
            if check is not None:
                check()  # under the lock: what it checked cannot change before the swap
            was = Folder.of(target) if target.is_dir() else None
            refuse_linked_members(target, mine, was)
            with self.staged(target, replace=True) as stage:
                if was is not None:

                    def not_kept(folder: str, names: list[str]) -> set[str]:
                        rel = os.path.relpath(folder, target)
                        return _not_regular(folder, names) | {
                            n for n in names if not was.lists(f"{rel}/{n}") and os.path.isfile(os.path.join(folder, n))}
                    for entry in target.iterdir():
                        if entry.name in mine or entry.name == MANIFEST:  # written anew by staged(), or dropped
                            continue
                        mode = entry.lstat().st_mode
                        if stat.S_ISDIR(mode):
                            try:
                                copy_tree(entry, stage / entry.name, copy_function=link_or_copy, ignore=not_kept)
                            except OSError as exc:
                                if exc.errno != errno.ENAMETOOLONG or not exc.filename:
                                    raise
                                raise _too_deep(target, os.path.relpath(exc.filename, stage), was) from None
                        elif stat.S_ISREG(mode) and was.lists(entry.name):
                            link_or_copy(entry, stage / entry.name)
                for name, df in frames.items():
                    df.write_parquet(stage / f"{name}.parquet", statistics=True)
                for name, doc in (documents or {}).items():
                    (stage / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str))
        return target

    def _apart(self, exc: BaseException, target: Path) -> WarehouseError | None:
        """The one line for a rename between ``.staging`` and ``target`` (a run or experiment folder) that failed
        because they lie on two file systems (a folder mounted apart: attack 9 said only "Invalid cross-device
        link"), naming the folder that is apart; None for any other failure."""
        if not isinstance(exc, OSError) or exc.errno != errno.EXDEV:
            return None
        try:
            staging = os.stat(self.staging_dir).st_dev
            apart = next((p for p in (target, target.parent) if p.exists() and os.stat(p).st_dev != staging),
                         target.parent)
        except OSError:
            apart = target.parent
        return WarehouseError(f"{apart}: on another file system (or mount) than the warehouse's {self.staging_dir}, "
                              "where writers stage a folder before renaming it into place (a rename cannot cross "
                              "file systems); nothing was changed: keep the warehouse on one file system")

    def remove(self, target: Path) -> None:
        """Remove a run or experiment directory whole (renamed aside first, so it disappears at once)."""
        if target.exists():
            gone = self.staging_dir / f"{target.name}.rm.{uuid.uuid4().hex[:8]}.{os.getpid()}"
            with _open_commits(target):
                try:
                    os.rename(target, gone)
                except OSError as exc:
                    if (apart := self._apart(exc, target)) is not None:
                        raise apart from None
                    raise
                COMMITTED.append(target)  # [helper races] removed: committed
            remove_tree(gone, ignore_errors=True)


#: [helper races] every folder this process committed (renamed into place or removed), in order: the CLI says
#: what a command had stored when a signal stopped it (pipelines/interrupts.py)
COMMITTED: list[Path] = []
#: held while a commit of this process renames into place and is counted in :data:`COMMITTED`; re-entrant: a signal
#: handler closing the commits may run in the thread it interrupted mid-commit
_commit_gate = threading.RLock()
#: set once by :func:`close_commits`: every later commit of this process is refused
_commits_closed = threading.Event()


def close_commits(timeout_s: float) -> None:
    """Refuse every later commit of this process (:class:`CommitsClosedError`, its stage removed), after waiting at
    most ``timeout_s`` seconds for one renaming now: what :data:`COMMITTED` holds then is all the process stores (a
    night stopped at once says it, then ends; attack 23 F11: a worker committed after the line)."""
    acquired = _commit_gate.acquire(timeout=timeout_s)
    _commits_closed.set()
    if acquired:
        _commit_gate.release()


@contextlib.contextmanager
def _open_commits(target: Path) -> Iterator[None]:
    """Hold :data:`_commit_gate` for a commit of ``target``; :class:`CommitsClosedError` once they are closed."""
    with _commit_gate:
        if _commits_closed.is_set():
            raise CommitsClosedError(f"{target}: not committed: this process is stopping")
        yield
_SWAP_SUFFIX = ".swap.json"
_RENAME_EXCHANGE = 2  # renameat2 flag (linux/fs.h)
_AT_FDCWD = -100
_libc_renameat2: Callable[..., int] | None | bool = False  # False: not looked up yet


def _exchange(a: Path, b: Path) -> bool:
    """Swap the directories ``a`` and ``b`` in one step (Linux ``renameat2`` with ``RENAME_EXCHANGE``); False
    when this system or file system cannot (the caller renames twice instead)."""
    global _libc_renameat2
    if _libc_renameat2 is False:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            _libc_renameat2 = fn
        except (OSError, AttributeError):
            _libc_renameat2 = None
    if not _libc_renameat2:
        return False
    import ctypes

    if _libc_renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def os_error_within(exc: BaseException, target: Path) -> OSError | None:
    """The operating-system error a library reported as its own exception (Polars' ``ComputeError: ... No space
    left on device (os error 28)`` when a Parquet write fills the disk), as an :class:`OSError` naming ``target``;
    an OSError that names no file (a write() that filled the disk: ``[Errno 28] No space left on device``) named
    ``target`` too; None for an OSError naming its file or any other failure. A library's OSError without an errno
    (Polars' ``OSError: Broken pipe (os error 32)``) is read as its text."""
    if isinstance(exc, OSError) and exc.errno:
        return OSError(exc.errno, exc.strerror, str(target)) if exc.filename is None else None
    if not isinstance(exc, Exception):
        return None
    m = _OS_ERROR.search(str(exc))
    if m is not None:
        code = int(m[1])
        return OSError(code, os.strerror(code), str(target))
    if _full_file_system(target):  # a Parquet writer's short write: "Invalid thrift: transport error", no errno
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
    return None


#: free bytes below which a file system counts as full when a library's write fails without saying why
FULL_FILE_SYSTEM_BYTES = 4 << 20


def _full_file_system(target: Path) -> bool:
    """Whether the file system that holds (or would hold) ``target`` has less than :data:`FULL_FILE_SYSTEM_BYTES`
    free for this user (attack 6 F12: with ~20 kB free, Polars' Parquet writer failed with ``Invalid thrift:
    transport error``, naming neither the disk nor the file)."""
    folder = next((p for p in (target, *target.parents) if p.exists()), None)
    try:
        st = os.statvfs(folder) if folder is not None else None
    except OSError:
        return False
    return st is not None and st.f_bavail * st.f_frsize < FULL_FILE_SYSTEM_BYTES


def _too_deep(target: Path, rel: str, was: Any) -> WarehouseError:
    """The one line for a copy of ``target`` (a stored folder, :meth:`Warehouse.update_dir`) that failed at its
    path ``rel`` (below it) because folders nest there past the longest path the system names (attack 19 F4: a
    4 kB line of ``d/d/d...`` with no advice): the shallowest folder on the way that holds nothing its manifest
    (``was``: its :class:`~synthtrace.warehouse.stored.Folder`) lists, and what to do."""
    from synthtrace.tracelib.printable import clipped

    parts = rel.split(os.sep)
    depth = next((d for d in range(1, len(parts)) if not was.holds("/".join(parts[:d]))), 1)
    named = os.path.join(target, *parts[:depth])
    return WarehouseError(f"{clipped(named, 200)}: folders nested over {len(parts) - depth:,} levels deep below it, "
                          "past the longest path the system can name, that no commit of the warehouse wrote; nothing "
                          "was changed: move that folder out of the warehouse")


def refuse_linked_members(target: Path, replaced: Collection[str] = (), folder: Folder | None = None) -> None:
    """Raise the readers' one line (:func:`~synthtrace.warehouse.stored.linked_error`, attack 19 F3) when a file the
    stored folder ``target`` holds by its manifest (any file, for a folder without a readable one) is a symbolic link
    or lies in a linked folder below it, but for those below the top names ``replaced`` (an update writes them anew
    or drops them). A writer that rebuilds the folder keeps only its own files: such a member was left out of the
    new manifest, its rows lost without a word (attack 20 F6, ``runs move``). Nothing is changed; a ``target`` that
    is not there passes. ``folder``: ``target`` as :meth:`Folder.of` read it already."""
    from synthtrace.warehouse.checksums import Manifest  # checksums reads records with this module
    from synthtrace.warehouse.stored import Folder, refuse_linked

    if not target.is_dir():
        return
    listed = (folder or Folder.of(target)).manifest
    rels = (listed.files if isinstance(listed, Manifest) else  # relpath: "/"-separated on POSIX
            (os.path.relpath(os.path.join(here, n), target)
             for here, subs, names in walk(target) for n in subs + names))
    refuse_linked(target, (rel for rel in rels if rel.split("/", 1)[0] not in replaced))


def _not_regular(folder: str, names: list[str]) -> set[str]:
    """:func:`~synthtrace.tracelib.folder_tree.copy_tree` ignore function: the entries of ``folder`` that are
    neither regular files nor folders."""
    keep = (stat.S_ISREG, stat.S_ISDIR)
    return {n for n in names if not any(k(os.lstat(os.path.join(folder, n)).st_mode) for k in keep)}


def link_or_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Hard-link ``src`` to ``dst`` (no bytes copied), or copy it with its metadata where links fail (another
    file system, no link support)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


# [helper races] attack 7 A6: leases (Warehouse.owner)
_LEASE_SUFFIX = ".lease"
_LEASE_ID = re.compile(r"L[0-9a-f]{16}")
def _lease_held(lease: Path) -> bool:
    """Whether some process (on any host sharing the file system's locks) holds ``lease``; one nobody holds is
    removed (its holder is gone). A lease that cannot be looked at counts as held: nothing is removed on a guess."""
    try:
        fd = os.open(lease, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        lease.unlink(missing_ok=True)
        return False
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (another user's counts) and is not a zombie: a process killed after its
    parent (a query process whose caller was killed) stays one for as long as nobody reaps it, which in a
    container whose first process reaps nothing is for ever."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (not Linux), or it ended meanwhile
        return True


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in walk(root):  # any depth (issue 23: os.walk recursed per level)
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
