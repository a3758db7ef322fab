"""Operating-system errors of the simulator's writers name the file being written.

A ``write()`` that fills the disk raises an OSError that names no file (``[Errno 28] No space left on device``),
and Polars or Arrow writing through a file object say the same; :func:`writing` names the trace or ground-truth
file it happened to (attack 6 F12).
"""
from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

#: the error number in an OSError's text where a library that re-raised it kept only the text
_ERRNO = re.compile(r"\[Errno (\d+)\]|\(os error (\d+)\)")


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Re-raise an OSError of the block that names no file as one naming ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        code = exc.errno
        if code is None and (m := _ERRNO.search(str(exc))):
            code = int(m[1] or m[2])
        raise OSError(code, os.strerror(code) if code else str(exc), str(path)) from exc
