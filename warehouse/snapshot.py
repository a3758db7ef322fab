"""A query's own copy of the warehouse state: hard links to the files of its views, so that no writer can take
them away before the query has read them (issue 23 item 11).

Writers commit by renaming whole folders (a run, an experiment) and remove them the same way; the files a query
listed could vanish, or be replaced, before DuckDB opened them, and no number of fresh listings helps against a
writer faster than the query. Here every listed file gets a hard link in ``.staging/query.<id>.<pid>/`` (same
file, no bytes copied; DuckDB's sandbox compares real paths, so a link path that never changes is what it reads),
each run or experiment folder listed through one descriptor of that folder, so that all the files of a run come
from one version of it. A folder whose version is deleted while it is being linked is linked again as it is now.
The links go when the query ends; those of a killed query, with the next writer's stale-staging cleanup or the
next query's.

Only regular files reached without a symbolic link below the warehouse root are taken (a ``runs/evil ->
/elsewhere`` folder is not the warehouse's, issue 23 item 6); a run folder counts only with its ``run.parquet``.
Where the querying user cannot write the warehouse's ``.staging`` (a read-only mount, someone else's warehouse)
the files are bound by their paths (:func:`catalog.view_files`), and :attr:`Snapshot.by_path` says so.
"""
from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from synthtrace.warehouse.catalog import VIEW_FILES, view_files
from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse.layout import Warehouse, pid_alive

_PREFIX = "query."
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: errors that mean "not there (any more), or not a plain folder": the entry is left out
_LEFT_OUT = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP}
#: times the linking starts again because a writer deleted a folder version under it (each takes milliseconds)
_ATTEMPTS = 50

Folder = tuple[int, list[str]]  # a folder's descriptor and its entry names, as listed once


class _Vanished(Exception):
    """A folder version being linked was deleted meanwhile (a run removed or replaced): link again."""


class _CannotLink(Exception):
    """The kernel refuses this user links to the warehouse's files (``fs.protected_hardlinks``: someone else's
    files): the query binds paths instead."""


@dataclass
class Snapshot:
    """The files of some views as a query reads them: ``files`` view -> paths for DuckDB; :meth:`named` turns such
    a path in an error message back into the file's place in the warehouse."""

    root: Path
    files: dict[str, list[str]] = field(default_factory=dict)
    by_path: bool = False
    links: Path | None = None
    _origin: dict[str, str] = field(default_factory=dict)  # link name -> path below the warehouse root

    @property
    def originals(self) -> list[str]:
        """The warehouse paths of the linked files (a query may also name them itself)."""
        return [str(self.root / rel) for rel in self._origin.values()]

    def named(self, text: str) -> str:
        """``text`` with every link path of this snapshot replaced by the file's warehouse path."""
        if self.links is None:
            return text
        pattern = re.escape(str(self.links)) + r"/(\d+\.parquet)"
        return re.sub(pattern, lambda m: str(self.root / self._origin.get(m[1], m[1])), text)


@contextlib.contextmanager
def pinned(wh: Warehouse, views: Iterable[str]) -> Iterator[Snapshot]:
    """The files of ``views`` (names of :data:`~synthtrace.warehouse.catalog.VIEW_FILES`) as they are now, linked
    until the block ends; by path where the warehouse cannot take the links."""
    wanted = [v for v in VIEW_FILES if v in set(views)]
    snap = Snapshot(wh.root)
    if wanted:
        snap.links = _links_folder(wh)
    if snap.links is None:
        snap.files, snap.by_path = view_files(wh, wanted), True
        yield snap
        return
    try:
        for _ in range(_ATTEMPTS):
            try:
                _link(snap, wanted)
                break
            except _Vanished:
                _empty(snap)
            except _CannotLink:
                _empty(snap)
                snap.files, snap.by_path = view_files(wh, wanted), True
                break
        else:
            raise WarehouseError(f"{wh.root}: the warehouse changed {_ATTEMPTS} times while a query was being "
                                 "prepared; try again")
        yield snap
    finally:
        shutil.rmtree(snap.links, ignore_errors=True)


def release(wh: Warehouse, pid: int) -> None:
    """Remove the links of the query process ``pid`` (ended, killed or not)."""
    for d in wh.staging_dir.glob(f"{_PREFIX}*.{pid}"):
        shutil.rmtree(d, ignore_errors=True)


def _links_folder(wh: Warehouse) -> Path | None:
    """A new private folder for the links under ``.staging`` (after removing those of queries that were killed),
    or None when it cannot be made there."""
    try:
        if not stat.S_ISDIR(wh.staging_dir.lstat().st_mode):
            return None  # a link planted in the warehouse: the links would go wherever it points
        for d in wh.staging_dir.glob(f"{_PREFIX}*"):
            pid = d.name.rsplit(".", 1)[-1]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(d, ignore_errors=True)
        links = wh.staging_dir / f"{_PREFIX}{uuid.uuid4().hex[:12]}.{os.getpid()}"
        links.mkdir(mode=0o700)
        return links
    except OSError:
        return None


def _empty(snap: Snapshot) -> None:
    for name in snap._origin:
        (snap.links / name).unlink(missing_ok=True)
    snap._origin.clear()
    snap.files.clear()


def _link(snap: Snapshot, views: list[str]) -> None:
    """Link the files of ``views`` into ``snap.links``, each through its folder's descriptor. Every folder is
    opened and listed once; a run or experiment folder (the second level of a view's pattern) serves every view
    below it and is closed before the next one is opened, so the descriptors held stay few however many runs."""
    folders: dict[tuple[str, ...], Folder | None] = {}
    out = os.open(snap.links, _DIR_FLAGS)

    def folder(parts: tuple[str, ...]) -> Folder | None:
        if parts not in folders:
            folders[parts] = None
            parent = folder(parts[:-1]) if parts else None
            if parts and parent is None:
                return None
            fd = (_open_dir(parts[-1], parent[0]) if parts
                  else _open_dir(str(snap.root), None, follow=True))  # the root itself may be a link
            if fd is not None:
                with os.scandir(fd) as entries:
                    folders[parts] = (fd, sorted(e.name for e in entries))
        return folders[parts]

    def take(view: str, found: Iterator[tuple[str, ...]]) -> None:
        for rel in found:
            if _whole(rel, folder) and (name := _link_one(snap, rel, folder(rel[:-1]), out)) is not None:
                snap.files.setdefault(view, []).append(str(snap.links / name))

    def forget(prefix: tuple[str, ...]) -> None:
        for parts in [p for p in folders if p[:len(prefix)] == prefix]:
            if (entry := folders.pop(parts)) is not None:
                os.close(entry[0])

    per_folder: dict[tuple[str, str], list[str]] = {}  # (top folder, pattern of its subfolders) -> views below
    try:
        for view in views:
            pattern = VIEW_FILES[view].split("/")
            if len(pattern) <= 2:
                take(view, _matches((), pattern, folder))
            else:
                per_folder.setdefault((pattern[0], pattern[1]), []).append(view)
        for (top, sub), below in per_folder.items():
            for rel in _matches((), [top, sub], folder):
                for view in below:
                    take(view, _matches(rel, VIEW_FILES[view].split("/")[2:], folder))
                if not _still_in_place(rel, folder):
                    raise _Vanished  # this version was swapped out or removed while it was taken: its listing
                    # may miss what the writer's deletion had already removed (a run without run.parquet)
                forget(rel)
    finally:
        os.close(out)
        for entry in folders.values():
            if entry is not None:
                os.close(entry[0])


def _still_in_place(rel: tuple[str, ...], folder: Callable[[tuple[str, ...]], Folder | None]) -> bool:
    """Whether the folder version taken for ``rel`` (a run or experiment) is still the one at its path. A version
    that never left its path was never being deleted; one that left may have been listed half deleted."""
    here, parent = folder(rel), folder(rel[:-1])
    if here is None or parent is None:
        return True  # nothing was taken from it
    try:
        now = os.stat(rel[-1], dir_fd=parent[0], follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(here[0])
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _matches(parts: tuple[str, ...], pattern: list[str],
             folder: Callable[[tuple[str, ...]], Folder | None]) -> Iterator[tuple[str, ...]]:
    """Relative paths of the entries below folder ``parts`` that match the rest of a view's ``pattern``."""
    here = folder(parts)
    if here is None:
        return
    head, rest = pattern[0], pattern[1:]
    for name in fnmatch.filter(here[1], head) if any(c in head for c in "*?[") else [head] * (head in here[1]):
        if rest:
            yield from _matches((*parts, name), rest, folder)
        else:
            yield (*parts, name)


def _link_one(snap: Snapshot, rel: tuple[str, ...], parent: Folder | None, out: int) -> str | None:
    """Hard-link ``rel`` (an entry of the folder ``parent``) into the links folder; its link name, or None when it
    is not a regular file (a link, a FIFO, a folder: not the warehouse's data)."""
    if parent is None:
        return None
    name = f"{len(snap._origin)}.parquet"
    try:
        if not stat.S_ISREG(os.stat(rel[-1], dir_fd=parent[0], follow_symlinks=False).st_mode):
            return None
        os.link(rel[-1], name, src_dir_fd=parent[0], dst_dir_fd=out, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise _Vanished from None  # listed in this folder version, deleted since: the version is going
        if exc.errno in (errno.EPERM, errno.EXDEV):  # someone else's files; a .staging on another file system
            raise _CannotLink from None
        raise
    if not stat.S_ISREG(os.stat(name, dir_fd=out, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=out)  # a symbolic link (linked as itself) or a special file
        return None
    snap._origin[name] = "/".join(rel)
    return name


def _whole(rel: tuple[str, ...], folder: Callable[[tuple[str, ...]], Folder | None]) -> bool:
    """False for a file of a run folder without its ``run.parquet`` (written last: not a run)."""
    if rel[0] != "runs" or len(rel) < 3:
        return True
    run = folder(rel[:2])
    return run is not None and "run.parquet" in run[1]


def _open_dir(name: str, dir_fd: int | None, *, follow: bool = False) -> int | None:
    """A descriptor of the folder ``name`` (relative to ``dir_fd``; a link is not followed unless ``follow``),
    or None when it is gone or not a folder."""
    try:
        return os.open(name, _DIR_FLAGS & ~(os.O_NOFOLLOW if follow else 0), dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _LEFT_OUT:
            return None
        raise
