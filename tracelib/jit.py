"""Numba kernels compiled once and cached: the first call of a process loads them from Numba's cache
(``__pycache__`` beside the module, else the user cache, else a folder in the temp dir), or compiles them."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from numba import njit


def cached_njit(fn: Callable | None = None, **options) -> Callable:
    """``njit(cache=True, nogil=True, **options)``; when neither the package folder nor the user cache is
    writable (a read-only install, no home), the cache goes to a folder of the temp dir; without any, no cache."""
    from numba.core import config

    if fn is None:
        return lambda f: cached_njit(f, **options)
    try:
        return njit(cache=True, nogil=True, **options)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        pass
    if not config.CACHE_DIR:
        config.CACHE_DIR = os.path.join(
            tempfile.gettempdir(), f"synthtrace-numba-{os.getuid() if hasattr(os, 'getuid') else 0}"
        )
        try:
            return njit(cache=True, nogil=True, **options)(fn)
        except (RuntimeError, OSError):
            pass
    return njit(cache=False, nogil=True, **options)(fn)
