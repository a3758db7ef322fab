"""A folder made read-only for this process, as a ``ro`` mount makes it: as root (the CI's containers) a chmod stops
no write, so every write below the folder through ``os.open``, ``os.mkdir`` and ``os.utime`` fails with EROFS."""
from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_only(root: Path, patch: Callable[[Any, str, Any], None]) -> None:
    """From here on, writes below ``root`` fail with EROFS; ``patch``: how to replace an attribute (pytest's
    ``monkeypatch.setattr``, undone by it)."""
    below = str(root.resolve())

    def guarded(real: Callable[..., Any], writes: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kw: Any) -> Any:
            if writes(*args) and os.path.abspath(os.fspath(path)).startswith(below):
                if real is os.mkdir and os.path.isdir(path):
                    raise FileExistsError(errno.EEXIST, "File exists", str(path))
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real(path, *args, **kw)
        return call

    patch(os, "open", guarded(os.open, lambda flags, *_: flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)))
    patch(os, "mkdir", guarded(os.mkdir, lambda *_: True))
    patch(os, "utime", guarded(os.utime, lambda *_: True))
