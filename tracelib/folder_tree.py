"""Walking, copying and removing a folder tree without recursion: Python 3.11's ``os.walk``, ``shutil.copytree`` and
``shutil.rmtree`` recurse once per level, so a chain of folders ~1,000 deep planted in a warehouse folder stopped a
command with a RecursionError (issue 23, session 18: ``runs rm`` left the folder half removed in ``.staging``, and
every writer after it stopped clearing it). Links are never followed."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def walk(top: str | os.PathLike) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top)``: (folder, its folders' names, its other names), top-down, a link to a folder named among
    the folders but never entered, a folder that cannot be listed passed over; the caller may prune the folders'
    names it is given. Walked with a stack: any depth."""
    stack = [os.fspath(top)]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError:
            continue
        dirs, others, real = [], [], set()
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirs if is_dir else others).append(entry.name)
            with contextlib.suppress(OSError):
                if is_dir and not entry.is_symlink():
                    real.add(entry.name)
        yield here, dirs, others
        stack.extend(os.path.join(here, d) for d in reversed(dirs) if d in real)


def copy_tree(src: str | os.PathLike, dst: str | os.PathLike, *, copy_function: Callable[[str, str], object],
              ignore: Callable[[str, list[str]], set[str]]) -> None:
    """``shutil.copytree(src, dst, copy_function=..., ignore=...)`` without recursion: ``dst`` made (it must not
    exist), every folder below ``src`` made again under it (its mode and times copied once it is full), every other
    name ``copy_function(source, destination)``; what ``ignore(folder, names)`` returns is left out (a folder left
    out is not entered). A link is handed to ``copy_function`` as any other name: give an ``ignore`` that leaves
    links out."""
    src, dst = os.fspath(src), os.fspath(dst)
    made: list[tuple[str, str]] = []
    for here, dirs, others in walk(src):
        out = os.path.normpath(os.path.join(dst, os.path.relpath(here, src)))
        os.mkdir(out)
        made.append((here, out))
        left_out = ignore(here, dirs + others)
        dirs[:] = [d for d in dirs if d not in left_out]
        for name in others:
            if name not in left_out:
                copy_function(os.path.join(here, name), os.path.join(out, name))
    for here, out in reversed(made):
        shutil.copystat(here, out)


def remove_tree(path: str | os.PathLike, *, ignore_errors: bool = False) -> None:
    """``shutil.rmtree(path)`` without recursion and never through a link: each folder below ``path`` is renamed up
    into ``path`` itself (one rename, in the folder opened without following a link) and emptied there, so no path
    grows with the depth; a link is removed, never what it leads to. ``path`` itself a link is an :class:`OSError`.
    ``ignore_errors``: what cannot be removed is left, the rest removed."""
    try:
        top = os.open(path, _DIR_FLAGS)
    except OSError:
        if ignore_errors:
            return
        raise
    tag, moved = uuid.uuid4().hex[:12], 0
    pending: list[str] = []
    try:
        for name in _names(top, ignore_errors):
            if _unlinked_or_folder(name, top, ignore_errors):
                pending.append(name)
        while pending:
            name = pending.pop()
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=top)
            except OSError as exc:  # no folder any more (replaced by a link or a file meanwhile): removed as it is
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    _unlinked_or_folder(name, top, ignore_errors)
                elif not (ignore_errors or exc.errno == errno.ENOENT):
                    raise
                continue
            try:
                for inner in _names(fd, ignore_errors):
                    if _unlinked_or_folder(inner, fd, ignore_errors):
                        up = f".rm-{tag}-{moved}"
                        moved += 1
                        try:
                            os.rename(inner, up, src_dir_fd=fd, dst_dir_fd=top)
                        except OSError:
                            if not ignore_errors:
                                raise
                            continue
                        pending.append(up)
            finally:
                os.close(fd)
            _removed(lambda n=name: os.rmdir(n, dir_fd=top), ignore_errors)
    finally:
        os.close(top)
    _removed(lambda: os.rmdir(path), ignore_errors)


def _names(fd: int, ignore_errors: bool) -> list[str]:
    """The names in the folder open as ``fd`` (listed whole before any is moved: a folder renamed into the folder
    being listed must not be listed again)."""
    try:
        with os.scandir(fd) as listing:
            return [entry.name for entry in listing]
    except OSError:
        if ignore_errors:
            return []
        raise


def _unlinked_or_folder(name: str, fd: int, ignore_errors: bool) -> bool:
    """Unlink ``name`` in the folder open as ``fd`` (anything but a folder: a link goes, not what it leads to);
    True when it is a folder (to empty first)."""
    try:
        os.unlink(name, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.EPERM) and _is_folder(name, fd):
            return True
        if not (ignore_errors or exc.errno == errno.ENOENT):
            raise
    return False


def _is_folder(name: str, fd: int) -> bool:
    """Whether ``name`` in the folder open as ``fd`` is a folder (a link to one is not)."""
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _removed(remove: Callable[[], None], ignore_errors: bool) -> None:
    try:
        remove()
    except FileNotFoundError:
        pass
    except OSError:
        if not ignore_errors:
            raise
