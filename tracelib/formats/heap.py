"""Giving the process's free heap memory back to the system between the phases of a big read (issue 27).

NumPy's arrays below glibc's mmap threshold (up to 32 MiB) live in malloc's arenas, one per thread that allocates
(the read-ahead, assembling and writing threads each have theirs); what they free stays mapped, so the resident
size after streaming a 2 GB trace held about 300 MB of free heap when the messages were placed. ``malloc_trim``
returns it; elsewhere than glibc this does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


def release_free_heap() -> None:
    """Return the free pages of every malloc arena to the system (glibc's ``malloc_trim(0)``; a few ms)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
