"""A file written whole or not at all: written beside its target under a hidden name, then renamed into place.

A disk that fills up, a killed process or a failing writer never leaves a truncated file that looks valid (a CSV
cut mid-row, an empty report), and a reader never sees one half-written.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` into a hidden file beside ``path``, then rename it to ``path`` (one rename within a folder:
    atomic on POSIX). On any error the partial file is removed, ``path`` is as it was, and the error propagates.
    Returns ``path``."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
