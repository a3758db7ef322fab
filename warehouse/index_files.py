"""The files of the warehouse's indexes under ``.index/`` (runs by folder, programs, runs read without a .pcf),
never read or written through a symbolic link (attack 20 F5: a link planted at ``.index/without_pcf/<key>`` had
the next ingest delete every file of the folder it pointed to; ``.index/folders`` and ``.index/programs`` made
folders and files through one). A link there is an :class:`OSError` naming it, which the index writes after a
commit say as a warning (the run is stored; the next ingest rebuilds the indexes)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

from synthtrace.warehouse.layout import Warehouse


def not_linked(wh: Warehouse, path: Path) -> Path:
    """``path``, inside ``wh``, when none of its parts below the warehouse's root is a symbolic link; else an
    :class:`OSError` naming the link."""
    at = wh.root
    for part in path.relative_to(wh.root).parts:
        at = at / part
        if at.is_symlink():
            raise OSError(errno.ELOOP, f"{at} is a symbolic link, not followed (nothing it points to was read or "
                          "changed): remove it")
    return path


def mark_file(wh: Warehouse, folder: Path, name: str) -> None:
    """Make the empty file ``folder/name`` of an index (and ``folder``), never through a symbolic link (the file
    itself opened with ``O_NOFOLLOW``)."""
    not_linked(wh, folder).mkdir(parents=True, exist_ok=True)
    os.close(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
