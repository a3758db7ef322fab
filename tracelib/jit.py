"""Numba kernels compiled once and cached: the first call of a process loads them from Numba's on-disk cache, or
compiles them.

The cache is never written beside the modules (Numba's default, ``__pycache__`` in the package): files left there
outlive an uninstall, and a ``synthtrace`` folder left in site-packages without its ``__init__.py`` makes
``synthtrace`` a namespace package that shadows an editable install. It goes to ``$NUMBA_CACHE_DIR`` when the
user set one, else to ``$XDG_CACHE_HOME/synthtrace/numba`` (``~/.cache/...``), else to a folder of the temp dir;
without any writable place the kernels are compiled in each process.
"""
from __future__ import annotations

import contextlib
import gc
import os
import threading
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def _held_back(modules: list[str]) -> Iterator[None]:
    """While inside, an import of any of ``modules`` not loaded yet raises ImportError (the importer then takes them
    as not installed); afterwards they import as usual."""
    blocked = [m for m in modules if m not in sys.modules]
    for m in blocked:
        sys.modules[m] = None
    try:
        yield
    finally:
        for m in blocked:
            if sys.modules.get(m, 0) is None:
                del sys.modules[m]


#: threads whose work nothing stores (the kernels' warm-up): the console script ends its process without waiting for
#: them (:func:`synthtrace.pipelines.interrupts.end_process`, no interpreter teardown to unwind them). A Ctrl-C can
#: leave Numba's compiler lock held by the main thread, and a warm-up waiting on it would never end (bench25 H1)
DISPOSABLE_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

_gc_pauses = 0  # pauses under way
_gc_was_enabled = True  # whether the collector was on when the first of them began
_gc_lock = threading.Lock()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while inside (any thread; overlapping pauses end with the last), then
    as it was when the first began. Importing Numba and loading the reader's kernels make ~85,000 long-lived
    objects, and the two full collections they set off walked every object of the process: ~0.07 s of CPU of every
    command that reads a trace, serial (issue 27 item 2). The garbage made inside is collected after; a first
    compile of the kernels (empty cache, once) peaks ~100 MB higher for it."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        _gc_pauses += 1
        if _gc_pauses == 1:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def settle_long_lived() -> None:
    """Move every object the collector tracks now into its permanent generation (``gc.freeze``): called once the
    modules and kernels of a process are loaded, so that no later collection walks them again. Without it, the
    first full collection after a :func:`gc_paused` import (due: the import made ~60,000 long-lived objects) walked
    every object of the process, 0.03-0.05 s of serial CPU of a ``synthtrace ingest`` (issue 27 item 2). What is
    frozen stays until the process ends unless its reference count drops to zero; cyclic garbage of the imports is
    kept (a few kB)."""
    gc.freeze()


#: modules ``import numba`` loads only to check or offer what synthtrace does not use: SciPy (a version check) and
#: PyYAML (to read a ``.numba_config.yaml`` of the working directory: held back only when there is none)
_UNUSED_BY_NUMBA_IMPORT = ("scipy", "yaml")
if "numba" not in sys.modules:
    with gc_paused(), _held_back([m for m in _UNUSED_BY_NUMBA_IMPORT
                                  if m != "yaml" or not os.path.exists(".numba_config.yaml")]):
        import numba  # noqa: F401  (issue 27 item 2: 30-150 ms less start-up for every command that reads a trace)
    settle_long_lived()
from numba import njit  # noqa: E402


def cache_roots() -> list[Path]:
    """Where the kernels' cache may go, in order of preference."""
    from numba.core import config

    if config.CACHE_DIR:  # NUMBA_CACHE_DIR: the user's own choice
        return [Path(config.CACHE_DIR)]
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return [user_cache / "synthtrace" / "numba", Path(tempfile.gettempdir()) / f"synthtrace-numba-{uid}"]


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _numba_cache_dir(folder: Path) -> Iterator[None]:
    """Numba's cache folder set to ``folder`` while a kernel is decorated (its cache locator is chosen then), the
    user's setting restored after, so that other Numba code of the process is not moved."""
    from numba.core import config

    before = config.CACHE_DIR
    config.CACHE_DIR = str(folder)
    try:
        yield
    finally:
        config.CACHE_DIR = before


def cached_njit(fn: Callable | None = None, **options) -> Callable:
    """``njit(cache=True, nogil=True, **options)`` with the cache in the first writable folder of
    :func:`cache_roots`; without one, ``njit(cache=False, ...)``."""
    if fn is None:
        return lambda f: cached_njit(f, **options)
    for root in cache_roots():
        if _writable(root):
            with _numba_cache_dir(root):
                try:
                    return njit(cache=True, nogil=True, **options)(fn)
                except (RuntimeError, OSError):  # "cannot cache function ...: no locator available"
                    continue
    return njit(cache=False, nogil=True, **options)(fn)


#: modules Numba imports on its first compile or cache load only to offer what the kernels never use: SciPy's
#: linear algebra (``numba.np.arraymath`` probes for a BLAS through ``scipy.linalg``, 0.2-0.6 s) and cffi
_UNUSED_BY_KERNELS = ("scipy.linalg", "cffi")
_NUMBA_MODULES_PROBING = ("numba.np.arraymath", "numba.core.typing.cffi_utils")


def load_numba_extensions() -> None:
    """Import the Numba modules that the first kernel call of a process imports, without letting them import
    SciPy's linear algebra or cffi when neither is loaded yet (issue 27 item 2: start-up of every command that
    reads a trace). Numba then offers no ``np.dot``/``np.linalg`` nor cffi calls to kernels, which use neither.
    Call it from the main thread before kernels are dispatched; it does nothing the second time."""
    if all(m in sys.modules for m in _NUMBA_MODULES_PROBING):
        return
    with gc_paused(), _held_back(list(_UNUSED_BY_KERNELS)):  # the probe says "not available"
        for m in _NUMBA_MODULES_PROBING:
            __import__(m)
