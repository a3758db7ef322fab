"""The runs each trace folder gave, by program (attack 12 F11, F12): what places a folder's next trace in the
experiment its earlier runs of that program went to, read without the whole runs table.

``.index/folders/<folder>/<program>/<run_id>``: an empty file per run, ``<folder>`` the name of the folder the
trace came from (what names its default experiment, :func:`~synthtrace.warehouse.ingest.default_names`) and
``<program>`` the run's program identity (:func:`~synthtrace.warehouse.programs.program_identity`), both as
:func:`~synthtrace.warehouse.names.file_name` makes them. An ingest writes its run's entry before its commit (a crash
after the commit leaves no run unindexed) and again after it (a reader may have removed it meanwhile, its run not
there yet), under the program its commit decided. Commits that place runs take turns on the index's writers' lock
(:meth:`~synthtrace.warehouse.layout.Warehouse.writers_lock` of :func:`index_root`), held from the placement's last
decision to the entry written after the commit: a commit sees every run committed before it (attack 13 F5).
Readers never change it: an entry whose run is gone is skipped, and removed by ``runs rm`` (:func:`forget_runs`)
or left, if the run folder was deleted by hand; the run's experiment is read from the run itself (``runs move``
changes it without touching the index). A warehouse written before the index is indexed once, from its runs table,
on the first read (:data:`COMPLETE` then marks it).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from synthtrace.warehouse.index_files import mark_file, not_linked
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.names import file_name

FOLDER_INDEX = Path(".index") / "folders"
#: the mark of an index that holds every stored run (written by the one-time indexing of an older warehouse)
COMPLETE = ".complete"


def index_root(wh: Warehouse) -> Path:
    return wh.root / FOLDER_INDEX


def complete(wh: Warehouse) -> bool:
    """Whether every stored run is in the index (else :func:`mark_complete` after indexing them)."""
    return (index_root(wh) / COMPLETE).is_file()


def mark_complete(wh: Warehouse) -> None:
    mark_file(wh, index_root(wh), COMPLETE)


#: how often :func:`remember` makes its folders again when a ``runs rm`` removed them between its mkdir and its touch
_REMEMBER_TRIES = 8


def remember(wh: Warehouse, folder: str, program: str, run_id: str) -> None:
    """Index run ``run_id``, from the trace folder named ``folder``, of program identity ``program``. A ``runs rm``
    that emptied and removed the entry's folders between their mkdir and the entry's touch (:func:`_forget_entry`)
    is met by making them again (attack 14 F11: the ingest failed, a sound trace refused); once the entry is there,
    no ``rmdir`` removes its folder."""
    entry = index_root(wh) / file_name(folder) / file_name(program)
    for attempt in range(_REMEMBER_TRIES):
        try:
            mark_file(wh, entry, run_id)
            return
        except FileNotFoundError:
            if attempt == _REMEMBER_TRIES - 1:
                raise


@contextlib.contextmanager
def committing(wh: Warehouse, folder: str, program: str, run_id: str) -> Iterator[None]:
    """Index a run while its commit runs (:func:`remember`; a crash after the commit leaves it indexed); when the
    commit fails and the run is not there, its entry is removed again: a refused ingest leaves no trace. Nothing
    while the index is not complete: the commit then indexes every run (this one too)."""
    if not complete(wh):
        yield
        return
    made = not (index_root(wh) / file_name(folder) / file_name(program) / run_id).exists()
    remember(wh, folder, program, run_id)
    try:
        yield
    except BaseException:
        if made and not wh.run_dir(run_id).exists():  # an entry that was there (a run deleted by hand) stays
            forget(wh, folder, file_name(program), run_id)
        raise


def forget(wh: Warehouse, folder: str, program_file: str, run_id: str) -> None:
    """Remove the entry of a run that is gone (``program_file``: its program as :func:`folder_runs` names it; the
    empty folders too, when no entry is left)."""
    _forget_entry(index_root(wh) / file_name(folder) / program_file / run_id)


def forget_runs(wh: Warehouse, run_ids: Iterable[str]) -> None:
    """Remove the entries of runs a writer removed (``runs rm``), wherever their folder and program put them."""
    wanted = set(run_ids)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for folder in _folders(not_linked(wh, index_root(wh))):  # a link's target is not the index (attack 20 F5)
            for program in _folders(folder):
                for run_id in wanted.intersection(e.name for e in program.iterdir()):
                    _forget_entry(program / run_id)


def _folders(folder: Path) -> list[Path]:
    """The folders in ``folder``, links left out."""
    return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]


def _forget_entry(entry: Path) -> None:
    entry.unlink(missing_ok=True)
    for empty in (entry.parent, entry.parent.parent):
        with contextlib.suppress(OSError):  # not empty (another run, a concurrent ingest): kept
            empty.rmdir()


def folder_runs(wh: Warehouse, folder: str) -> dict[str, list[str]]:
    """Program (as its file name) -> the run ids indexed for it (sorted), of the trace folder named ``folder``: one
    ``scandir`` of that folder's entries, whatever the number of runs stored."""
    out: dict[str, list[str]] = {}
    here = index_root(wh) / file_name(folder)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for program in sorted(here.iterdir()):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                if runs := sorted(e.name for e in program.iterdir()):
                    out[program.name] = runs
    return out
