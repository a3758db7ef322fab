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
the files are bound by their paths (:func:`catalog.view_files`), and :attr:`Snapshot.by_path` says so. Nothing
holds them there, so each run or experiment folder (or top-level file) they lie in is held open from before the
listing, and a read is kept only if every such folder is still the one at its path when it ends (a folder version
never comes back once it left, and while held its inode cannot be reused): else it is read again
(:func:`read_whole`, :func:`retried`), and refused with one line after :data:`BY_PATH_ATTEMPTS` changed reads.
"""
from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import re
import resource
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from synthtrace.tracelib.folder_tree import remove_tree
from synthtrace.warehouse.parts import content_check, first_damaged, may_be_damage
from synthtrace.warehouse.catalog import VIEW_FILES, view_files
from synthtrace.warehouse.errors import DamagedPartError, WarehouseError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.stored import Stored, unit_of

_PREFIX = "query."
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: errors that mean "not there (any more), or not a plain folder": the entry is left out
_LEFT_OUT = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP}
#: times the linking starts again because a writer deleted a folder version under it (each takes milliseconds)
_ATTEMPTS = 50
#: times a read bound by path is made again because a writer changed what it read, before it is refused
BY_PATH_ATTEMPTS = 5
#: the characters DuckDB expands in a file's path (``{`` is literal to it)
_GLOB = re.compile(r"[*?\[]")
_HOLD_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC  # holds the inode; opens no content (a FIFO cannot block)

Folder = tuple[int, list[str]]  # a folder's descriptor and its entry names, as listed once
T = TypeVar("T")


class SnapshotChanged(WarehouseError):
    """A read bound by path found a run or experiment it read replaced or removed meanwhile: read again."""


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
    #: stored folders not read at all (``runs/<id>``: a run whose record is damaged, which ``synthtrace runs`` lists
    #: apart, attack 8 B6)
    leave_out: frozenset[str] = frozenset()
    _origin: dict[str, str] = field(default_factory=dict)  # link name -> path below the warehouse root
    #: by path: folder (2 parts) -> its descriptor, or its identity when too many to hold (see :func:`_hold_units`)
    _held: dict[tuple[str, ...], int | tuple[int, ...]] = field(default_factory=dict)
    #: a descriptor of ``root`` while DuckDB reads through it (:meth:`duckdb_files`), closed with the snapshot
    _root_fd: int | None = None

    @property
    def originals(self) -> list[str]:
        """The warehouse paths of the linked files (a query may also name them itself)."""
        return [str(self.root / rel) for rel in self._origin.values()]

    def duckdb_files(self) -> dict[str, list[str]]:
        """:attr:`files` as DuckDB must be given them to read each file itself and no other: it expands a path
        holding ``*``, ``?`` or ``[`` as a pattern (attack 21 F6: a warehouse at ``/data/wh*`` read ``/data/whA``'s
        files too, one under ``w[1]`` failed every query on a sibling whose name is not UTF-8). Such a path is
        given through a descriptor of the root held until the snapshot ends (``/proc/self/fd/<n>/``, which no
        listing of the root's parent follows), the part below the root escaped (``[*]``: DuckDB's literal ``*``)."""
        if not any(_GLOB.search(f) for files in self.files.values() for f in files):
            return self.files
        if self._root_fd is None:
            self._root_fd = os.open(self.root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the root itself may be a link
        base = f"/proc/self/fd/{self._root_fd}"
        return {view: [f if not _GLOB.search(f) else
                       f"{base}/{_GLOB.sub(lambda m: f'[{m[0]}]', os.path.relpath(f, self.root))}" for f in files]
                for view, files in self.files.items()}

    def named(self, text: str) -> str:
        """``text`` with every link path of this snapshot replaced by the file's warehouse path (a path given to
        DuckDB through the root's descriptor, :meth:`duckdb_files`, too)."""
        if self._root_fd is not None:
            text = re.sub(re.escape(f"/proc/self/fd/{self._root_fd}") + r"(?=/)", lambda _: str(self.root), text)
        if self.links is None:
            return text
        pattern = re.escape(str(self.links)) + r"/(\d+\.parquet)"
        return re.sub(pattern, lambda m: str(self.root / self._origin.get(m[1], m[1])), text)

    def moved(self) -> bool:
        """Bound by path: whether a folder (or top-level file) holding a listed file is no longer the one held
        before the listing (replaced, removed, or appeared while being listed). Linked: never."""
        if not self.by_path:
            return False
        units = {Path(f).relative_to(self.root).parts[:2] for files in self.files.values() for f in files}
        for unit in units:
            if (held := self._held.get(unit)) is None:
                return True
            try:
                now = os.lstat(self.root.joinpath(*unit))
            except FileNotFoundError:
                return True
            if _identity(now, exact=isinstance(held, int)) != (
                    _identity(os.fstat(held), exact=True) if isinstance(held, int) else held):
                return True
        return False

    def place(self, path: str) -> str:
        """The warehouse path of the stored file a snapshot path reads (a link's original; a bound path itself)."""
        if self.links is not None and os.path.dirname(path) == str(self.links):
            name = os.path.basename(path)
            return os.path.join(self.root, self._origin.get(name, name))
        return path

    def verify(self) -> None:
        """Check the files of this snapshot against the checksums their folders' commits recorded, hashing only
        those whose size or mtime changed since (:func:`~synthtrace.warehouse.parts.content_check`, not thorough:
        a query must not read a large warehouse twice). A damaged one is
        :class:`~synthtrace.warehouse.errors.DamagedPartError`; a mismatch because a writer replaced the folder
        since it was linked (the checksums are read at the file's place, which now holds another version) is
        :class:`SnapshotChanged` (the read is made again), and so is a file bound by path that a writer removed
        between the lookup of its checksums and its own (bench21 B1: a bare FileNotFoundError)."""
        for files in self.files.values():
            for f in files:
                place = self.place(f)
                try:
                    content_check(f, place, thorough=False)
                except (DamagedPartError, FileNotFoundError) as exc:
                    if self.moved() or (not _same_inode(f, place) if isinstance(exc, DamagedPartError)
                                        else self.by_path):
                        raise SnapshotChanged(f"{self.root}: changed while it was read") from None
                    raise

    def checked(self, read: Callable[[], T]) -> T:
        """``read()`` (which reads this snapshot's files), or :class:`SnapshotChanged` when they were bound by
        path and a writer changed them while it read (its result, or its error, is then about no single state);
        a read that failed on a damaged file is :class:`~synthtrace.warehouse.errors.DamagedPartError` naming it
        (:mod:`~synthtrace.warehouse.parts`)."""
        self.verify()
        try:
            out = read()
        except Exception as exc:
            if self.moved():
                raise SnapshotChanged(f"{self.root}: changed while it was read") from None
            if may_be_damage(exc) and (bad := first_damaged(
                    [f for files in self.files.values() for f in files], self.named, exc)) is not None:
                raise bad from None  # DuckDB names no file for some damage ("don't know what type")
            raise
        if self.moved():
            raise SnapshotChanged(f"{self.root}: changed while it was read")
        return out


@contextlib.contextmanager
def pinned(wh: Warehouse, views: Iterable[str], leave_out: Iterable[str] = ()) -> Iterator[Snapshot]:
    """The files of ``views`` (names of :data:`~synthtrace.warehouse.catalog.VIEW_FILES`) as they are now, linked
    until the block ends; by path where the warehouse cannot take the links (then read them inside
    :meth:`Snapshot.checked`). ``leave_out``: stored folders not read (``runs/<id>``)."""
    wanted = [v for v in VIEW_FILES if v in set(views)]
    snap = Snapshot(wh.root, leave_out=frozenset(leave_out))
    held = contextlib.ExitStack()  # [helper races] attack 7 A6: the links are judged by this lease
    if wanted:
        snap.links = _links_folder(wh, held.enter_context(wh.lease()))
    try:
        if snap.links is None:
            _bind_by_path(snap, wh, wanted)
            yield snap
            return
        for _ in range(_ATTEMPTS):
            try:
                _link(snap, wanted)
                break
            except _Vanished:
                _empty(snap)
            except _CannotLink:
                _empty(snap)
                _bind_by_path(snap, wh, wanted)
                break
        else:
            raise WarehouseError(f"{wh.root}: the warehouse changed {_ATTEMPTS} times while a query was being "
                                 "prepared; try again")
        yield snap
    finally:
        if snap.links is not None:
            remove_tree(snap.links, ignore_errors=True)
        held.close()
        for fd in snap._held.values():
            if isinstance(fd, int):
                os.close(fd)
        snap._held.clear()
        if snap._root_fd is not None:
            os.close(snap._root_fd)
            snap._root_fd = None


def retried(wh: Warehouse, attempt: Callable[[], T]) -> T:
    """``attempt()`` (a read of a :func:`pinned` snapshot inside :meth:`Snapshot.checked`), made again while a
    writer changes what it read by path; one line after :data:`BY_PATH_ATTEMPTS` changed reads."""
    for _ in range(BY_PATH_ATTEMPTS):
        try:
            return attempt()
        except SnapshotChanged:
            continue
    raise WarehouseError(f"{wh.root}: the warehouse changed while it was read, {BY_PATH_ATTEMPTS} times in a row "
                         "(reading it without write access to its .staging, the read cannot hold its files); try "
                         "again when its writers are done")


def read_whole(wh: Warehouse, views: Iterable[str], read: Callable[[Snapshot], T], leave_out: Iterable[str] = ()
               ) -> T:
    """``read(snapshot)`` of the files of ``views`` as one state of the warehouse, whatever writers do meanwhile
    (linked; or by path, read again when a writer changed them); ``leave_out``: stored folders not read."""
    leave_out = frozenset(leave_out)

    def attempt() -> T:
        with pinned(wh, views, leave_out) as snap:
            return snap.checked(lambda: read(snap))

    return retried(wh, attempt)


def _bind_by_path(snap: Snapshot, wh: Warehouse, views: list[str]) -> None:
    """Bind ``views`` by their paths: hold every folder (or top-level file) they may read from, then list."""
    snap._held, snap.by_path = _hold_units(wh.root, views), True
    try:
        snap.files = view_files(wh, views, leave_out=snap.leave_out)
    except (FileNotFoundError, NotADirectoryError):  # a folder being listed was removed meanwhile
        raise SnapshotChanged(f"{wh.root}: changed while it was listed") from None


def _hold_units(root: Path, views: list[str]) -> dict[tuple[str, ...], int | tuple[int, ...]]:
    """Each entry of the warehouse's top folders that the patterns of ``views`` name at their second level
    (``runs/<id>``, ``experiments/<name>``, ``regressions/<file>``), keyed by its two path parts: held by an
    ``O_PATH`` descriptor (exact: its inode cannot be reused while held) while at most half of the descriptors this
    process may open go to it (the soft limit raised to the hard one first when needed), else known by its identity
    (device, inode, change and modification times: a version replaced in the same clock tick by one reusing its inode
    number would pass unseen)."""
    held: dict[tuple[str, ...], int | tuple[int, ...]] = {}
    try:
        for top, pattern in dict.fromkeys(tuple(VIEW_FILES[v].split("/")[:2]) for v in views):
            try:
                top_fd = os.open(root / top, _DIR_FLAGS)
            except OSError as exc:
                if exc.errno in _LEFT_OUT:
                    continue
                raise
            try:
                names = fnmatch.filter(os.listdir(top_fd), pattern)
                budget = _descriptor_budget(len(held) + len(names))
                for name in names:
                    if (top, name) not in held and (unit := _hold(name, top_fd, budget > 0)) is not None:
                        held[(top, name)] = unit
                        budget -= isinstance(unit, int)
            finally:
                os.close(top_fd)
    except BaseException:
        for unit in held.values():
            if isinstance(unit, int):
                os.close(unit)
        raise
    return held


def _descriptor_budget(wanted: int) -> int:
    """How many more descriptors a read may hold (half of what the process may open), the soft limit raised to
    the hard one when ``wanted`` needs more than half of it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if wanted > soft // 2 and soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc (not Linux)
        open_now = 64
    return max(0, min(soft, 1 << 20) // 2 - open_now)


def _hold(name: str, dir_fd: int, by_descriptor: bool) -> int | tuple[int, ...] | None:
    """``name`` in ``dir_fd`` held (an ``O_PATH`` descriptor) or known by its identity; None when gone."""
    try:
        if by_descriptor:
            try:
                return os.open(name, _HOLD_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
        return _identity(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), exact=False)
    except FileNotFoundError:
        return None


def _same_inode(a: str, b: str) -> bool:
    """Whether the paths ``a`` and ``b`` are the same file (both there)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _identity(st: os.stat_result, *, exact: bool) -> tuple[int, ...]:
    """What tells a folder version from another: device and inode for one held open; also its change and
    modification times (nanoseconds) for one only looked at."""
    return (st.st_dev, st.st_ino) if exact else (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns)


def release(wh: Warehouse, pid: int) -> None:
    """Remove the links of the query process ``pid`` (ended, killed or not), and its lease (a query killed at its
    time limit left its ``.locks/<owner>.lease`` for the next writer: the warehouse changed by a read)."""
    for d in wh.staging_dir.glob(f"{_PREFIX}*.{pid}.*"):  # [helper races] query.<id>.<pid>.<owner>
        remove_tree(d, ignore_errors=True)
        wh.owner_alive(d.name.rsplit(".", 1)[-1])  # a lease nobody holds is removed


def _links_folder(wh: Warehouse, owner: str) -> Path | None:
    """A new private folder for the links under ``.staging`` (after removing those of queries that were killed),
    or None when it cannot be made there."""
    try:
        if not stat.S_ISDIR(wh.staging_dir.lstat().st_mode):
            return None  # a link planted in the warehouse: the links would go wherever it points
        for d in wh.staging_dir.glob(f"{_PREFIX}*"):
            if not wh.owner_alive(d.name.rsplit(".", 1)[-1]):  # [helper races] attack 7 A6: by lease, not pid
                remove_tree(d, ignore_errors=True)
        links = wh.staging_dir / f"{_PREFIX}{uuid.uuid4().hex[:12]}.{os.getpid()}.{owner}"
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
    stored = Stored(snap.root)  # attack 8 B1, B2: only what the folders' commits wrote, and all of it
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

    def take(view: str, found: Iterator[tuple[str, ...]]) -> set[str]:
        """Link the files ``found`` of ``view``; returns those linked (``/``-separated, below their folder)."""
        linked = set()
        for rel in found:
            if ((not snap.leave_out or "/".join(unit_of(rel)) not in snap.leave_out) and _whole(rel, folder)
                    and stored.keep(rel)
                    and (name := _link_one(snap, rel, folder(rel[:-1]), out)) is not None):
                snap.files.setdefault(view, []).append(str(snap.links / name))
                linked.add("/".join(rel[2:]))
        return linked

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
                linked: set[str] = set()
                for view in below:
                    linked |= take(view, _matches(rel, VIEW_FILES[view].split("/")[2:], folder))
                if not _still_in_place(rel, folder):
                    raise _Vanished  # this version was swapped out or removed while it was taken: its listing
                    # may miss what the writer's deletion had already removed (a run without run.parquet)
                if "/".join(rel) not in snap.leave_out:
                    stored.check_whole(rel, _read_below(top, below), linked)
                forget(rel)
    finally:
        os.close(out)
        for entry in folders.values():
            if entry is not None:
                os.close(entry[0])


def _read_below(top: str, views: Iterable[str]) -> list[list[str]]:
    """The patterns (below a run or experiment folder) of the files ``views`` read there; a run's ``run.parquet``
    too (without it, none of its files is read)."""
    return [VIEW_FILES[v].split("/")[2:] for v in views] + ([["run.parquet"]] if top == "runs" else [])


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
        if exc.errno in _NO_LINK:  # someone else's files, a .staging on another file system; [helper races]
            raise _CannotLink from None  # attack 7 A11: no inode or quota left for a link (a read needs no space)
        raise OSError(exc.errno, exc.strerror, str(snap.root.joinpath(*rel))) from None  # the file, not its name
    if not stat.S_ISREG(os.stat(name, dir_fd=out, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=out)  # a symbolic link (linked as itself) or a special file
        return None
    snap._origin[name] = "/".join(rel)
    return name


#: why a link cannot be made where the file can still be read by its path: someone else's file, another file
#: system, a full disk or file table, a quota, a file with the most links it may have ([helper races] A11)
_NO_LINK = frozenset({errno.EPERM, errno.EXDEV, errno.ENOSPC, errno.EDQUOT, errno.EMLINK, errno.EROFS})


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
