"""A file written whole or not at all: written beside its target under a hidden name, then renamed into place.

A disk that fills up, a killed process or a failing writer never leaves a truncated file that looks valid (a CSV
cut mid-row, an empty report), and a reader never sees one half-written.

What is at the path decides how (issue 23 item 1), the one rule of every output path of every command
(:func:`output_refusal` up front, :func:`write_atomically` when written; the CLI's help says it as
``OUTPUT_RULE``): a symbolic link is followed (the file it points to is written, the link stays); a character
device (``/dev/null``, a terminal) or a FIFO with a reader is written into, as a shell's ``>`` would (a stream
cannot be replaced whole); a folder, a block device, a socket, or a FIFO that nobody reads is refused with
:class:`SpecialFileError`. Nothing at the path is ever replaced by something of another kind. Several files
written together (a Paraver trace's ``.prv``/``.pcf``/``.row``) are each put in place by :func:`place_file`.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path


class SpecialFileError(OSError):
    """The path names a file that cannot be written as an output (a block device, a socket, an unread FIFO)."""


def _special_kind(mode: int) -> str | None:
    """How an output path's file of mode ``mode`` is refused, or None when it can be written."""
    if stat.S_ISBLK(mode):
        return "is a block device (a disk); refusing to write over it"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return None


def output_refusal(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be written as an output, by the module's rule (a folder, a block device, a socket; links
    followed), or None when it can. A FIFO is judged when written (a reader may come meanwhile)."""
    if not (mode := _mode(path)):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder; give a file name"
    return _special_kind(mode)


def _mode(path: str | os.PathLike) -> int:
    """The mode of what ``path`` names, links followed as ``open`` follows them (0 when nothing is there). Not the
    mode of its :func:`resolved_target`: ``/dev/stdout`` on a pipe resolves to ``/proc/PID/fd/pipe:[N]``, a name
    that exists only as the magic link's text (attack 7 A16: `-o /dev/stdout | gzip` failed for every command)."""
    try:
        return os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return 0


def _lmode(path: Path) -> int:
    """The mode of ``path`` itself (a link not followed; 0 when nothing is there)."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def is_stream(path: str | os.PathLike) -> bool:
    """Whether ``path`` (links followed) is a character device or a FIFO: written into, never replaced."""
    mode = _mode(path)
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def resolved_target(path: str | os.PathLike) -> Path:
    """Where writing ``path`` lands: ``path`` with every symbolic link followed (a dangling link's target, a path
    that does not exist yet as it is)."""
    return Path(os.path.realpath(path))


def lies_in(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it, both with every symbolic link followed (where a write to
    ``path`` lands, below where ``folder`` really is)."""
    return resolved_target(path).is_relative_to(resolved_target(folder))


def _write_into_stream(target: Path, mode: int, write: Callable[[Path], object]) -> None:
    """``write(target)`` into a character device or a FIFO, which is opened (and so truncated) by the writer."""
    if stat.S_ISFIFO(mode):
        try:  # a FIFO without a reader would block the writer for good: refuse it instead
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                raise SpecialFileError(errno.ENXIO, "is a FIFO that no process reads", str(target)) from None
            raise
        try:
            write(target)
        finally:
            os.close(fd)
        return
    write(target)


def write_atomically(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` into a hidden file beside ``path``, then rename it to ``path`` (one rename within a folder:
    atomic on POSIX). On any error the partial file is removed, ``path`` is as it was, and the error propagates.
    A link at ``path`` is followed; a character device or read FIFO is written into; a block device, socket or
    unread FIFO raises :class:`SpecialFileError` (see the module). Returns ``path``."""
    mode = _mode(path)
    if mode and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        if (why := _special_kind(mode)) is not None:
            raise SpecialFileError(errno.EINVAL, why, str(path))
        _write_into_stream(Path(path), mode, write)  # opened by its own name: a /proc magic link works so
        return Path(path)
    target = resolved_target(path)
    try:
        with _held_part(target) as tmp:
            write(tmp)
            os.replace(tmp, target)
    except OSError as exc:
        if exc.filename is None and exc.errno:  # a write() that filled the disk names no file: name the output
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    return Path(path)


@contextlib.contextmanager
def _held_part(target: Path) -> Iterator[Path]:
    """The hidden part file beside ``target`` (``.NAME.<random>.part``, made empty), held locked (``flock``, which
    the kernel releases with a killed process) until the block ends, then removed if still there. Part files of
    ``target`` that nobody holds (a writer killed with SIGKILL, the OOM killer, a batch job's time limit: its
    ``finally`` never ran) are removed first (attack 21 F5: they stayed for good, hidden)."""
    for stale in target.parent.glob(f".{glob.escape(target.name)}.*.part"):
        if stat.S_ISREG(_lmode(stale)) and unheld(stale):  # a folder of that name is not a part file
            stale.unlink(missing_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    new = tmp.with_name(tmp.name + ".new")  # locked before it has its name: never seen unheld by another writer
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with contextlib.suppress(OSError):  # a file system without locks: never judged stale by another
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(new, tmp)
        yield tmp
    finally:
        os.close(fd)
        new.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)


def unheld(path: Path) -> bool:
    """Whether no process holds ``path`` (a part file or folder of a write) locked with ``flock``: its writer is
    gone. A link, or what cannot be opened, counts as held: nothing is removed on a guess."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the descriptor
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def place_file(src: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Put the finished file ``src`` at ``path`` by the module's rule (renamed into place, copied where ``path``
    lies on another file system, copied into a stream); ``src`` is gone or left for its caller to remove."""
    mode = _mode(path)
    if not mode or stat.S_ISREG(mode):  # a finished file is renamed over its target at once: no part file needed
        try:
            os.replace(src, resolved_target(path))
            return Path(path)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise

    def copy(dest: Path) -> None:  # another file system (the hidden part beside the target), or a stream
        with open(src, "rb") as fin, open(dest, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)

    return write_atomically(path, copy)
