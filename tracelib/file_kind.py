"""What a path names when a reader expects a regular file there and finds something else, for its error line: a
folder, a FIFO or a link to ``/dev/zero`` is there, not missing (attack25 N1: an OTF2 events file of each kind was
"missing")."""
from __future__ import annotations

import os
import stat
from collections.abc import Callable

from synthtrace.tracelib.printable import clipped

_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_a_file(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it is there but no regular file ("a folder", "a FIFO", "a link to /dev/zero, a
    character device", "a link to x, which leads to nothing"); None when it is a regular file (links followed) or
    nothing is there."""
    link = f"a link to {clipped(os.readlink(path))}" if os.path.islink(path) else None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None if link is None else f"{link}, which leads to nothing"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for is_kind, name in _KINDS if is_kind(mode)), "no regular file")
    return kind if link is None else f"{link}, {kind}"
