"""Whether a file's name says it is gzip-compressed: ``.gz`` in any case (``run.prv.GZ``, ``Q.CSV.GZ``), one rule for
the traces read and the outputs written (attack 12: ``.gz`` was matched case-sensitively in some places and not in
others, so ``x.prv.GZ`` was no trace and ``--export-prv x.prv.GZ`` was not refused as a compression). No import
beyond the standard library's path types: the command line's start-up reads it."""
from __future__ import annotations

from pathlib import PurePath

#: the suffix of a gzip-compressed file (compared in lower case)
GZIP_SUFFIX = ".gz"


def gzip_named(path: PurePath | str) -> bool:
    """Whether the name of ``path`` ends in ``.gz``, in any case."""
    return PurePath(path).name.lower().endswith(GZIP_SUFFIX)


def without_gzip(name: str) -> str:
    """The file name ``name`` without a final ``.gz`` (any case); ``name`` itself when it has none."""
    return name[:-len(GZIP_SUFFIX)] if name.lower().endswith(GZIP_SUFFIX) else name
