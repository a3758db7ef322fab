"""Running under an address-space limit (``ulimit -v``, as HPC login nodes and batch systems set it).

The limit counts address space reserved, not memory used. glibc gives every thread that allocates its own malloc
arena of 64 MiB reserved, and Polars, Numba, DuckDB and OpenMP each start one thread per core: on small data a
command reserved several GiB and died at 0.8-1.5 GiB limits: LLVM's ``std::bad_alloc`` (an abort, exit 134), a
Rust panic, a ``MemoryError``, a shared library that could not be mapped (issue 23, attack 7 A10). Under a limit
the arenas are capped at two and the thread pools sized to it, before any of those libraries is loaded; what still
does not fit is one line at the CLI edge (:func:`out_of_memory_line`).
"""
from __future__ import annotations

import ctypes
import errno
import os
import resource
import sys

#: address space a command needs before its pools (bytes: the interpreter, the libraries mapped, LLVM) and per
#: pool thread: one thread per GiB beyond the first (a merge at 2 GiB with two threads aborted in Arrow where one
#: thread at 1.6 GiB passed, attack 7 A20)
_BASE = 1 << 30
_PER_THREAD = 1 << 30
#: the thread-pool sizes of the libraries a command may load (each read once, when its library is imported)
_POOL_VARIABLES = ("POLARS_MAX_THREADS", "RAYON_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS",
                   "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: glibc's mallopt parameter for the number of malloc arenas
_M_ARENA_MAX = -8
#: the address space Arrow's mimalloc reserves at a time (its default, 1 GiB, is taken whenever it fits under the
#: limit and falls back to 128 MiB when it does not: a merge passed at 1.6 and 2.0 GiB and failed at 1.85-1.95 GiB,
#: where the 1 GiB reservation fit and left too little for the rest, attack 7 A27)
_MIMALLOC_ARENA_RESERVE = "64MiB"
#: the settings of Polars' jemalloc (its symbols prefixed _rjem_), read once, when Polars is loaded
_JEMALLOC_CONF = "_RJEM_MALLOC_CONF"
#: when Polars' jemalloc hands back the pages it freed (ms: dirty, then muzzy, i.e. lazily freed but still resident).
#: Polars 2.x's own setting, 500 / 1000 ms (``polars/__init__.py``, which appends ours after it: ours wins), kept
#: freed pages resident at the peak of a merge of 2 x 550 MB runs (issue 23, benchmarks/RESULTS.md, session 17): 250 /
#: 250 ms gave ~20 MB less at no measurable CPU cost (merge 38.4-38.6 s against 38.1-38.9 s); 100 / 100 ms ~40 MB
#: less for +6 % CPU; 0 / 0 ms ~80 MB less for +15 % CPU on the merge and +14 % on an ingest (every free handed
#: back, every reuse a page fault again)
JEMALLOC_DECAY = "dirty_decay_ms:250,muzzy_decay_ms:250"


#: MB as ``prlimit --as`` and the address-space figures below count them (bytes)
MB = 10**6
#: the address space (MB) each command needs at the least, below which it cannot run at all: a Python library that
#: could not be mapped, a MemoryError, a Rust or LLVM abort (exit 134, no line: attack 18 F4, attack 20 F9) or a crash
#: at exit (SIGSEGV after the out-of-memory line). Measured on the project's own machine (2 cores, Python 3.11, Polars
#: 2.1, pyarrow 26, Numba 0.68, DuckDB 2.0) by bisection with ``prlimit --as`` to 8 MB (--help: 4 MB; demo: 32 MB),
#: benchmarks/bench_address_floors.py, figures in benchmarks/RESULTS.md (session 21, edges21); each constant is the
#: highest limit seen failing, so no limit a command was seen working under is refused. ``ingest``: one real Paraver
#: trace (prime_v0, 300 kB) into a new warehouse; ``runs``, ``sql``, ``report``: a warehouse holding it; ``merge``:
#: the two LULESH runs; ``demo``: its default campaign. Commands not run on data here (simulate, plan, nightly,
#: serve, archetypes, machines, train, models, predict, detect, pop) take what importing their module needs (their
#: --help's floor below), which no use of them goes under. Bigger inputs need more: those fail as before, with
#: :func:`out_of_memory_line`.
COMMAND_FLOORS_MB: dict[str, int] = {
    "ingest": 875, "runs": 197, "sql": 197, "merge": 1016, "report": 1079, "demo": 1474,
    "simulate": 859, "plan": 221, "nightly": 737, "serve": 737, "archetypes": 217, "machines": 217,
    "train": 217, "models": 217, "predict": 217, "detect": 217, "pop": 536,
}
#: what ``synthtrace COMMAND --help`` needs (MB), the command's module imported to print it (the same bisection);
#: ``--version``, ``--help`` and the commands absent here (ingest, runs, sql and export: read without their
#: module) answered at 64 MB, the lowest limit tried
HELP_FLOORS_MB: dict[str, int] = {
    "simulate": 859, "plan": 221, "merge": 871, "nightly": 737, "serve": 737, "demo": 737, "archetypes": 217,
    "machines": 217, "report": 217, "train": 217, "models": 217, "predict": 217, "detect": 217, "pop": 536,
}
#: what asks a command for its help rather than running it
_HELP_OPTIONS = frozenset(["--help", "-h"])


def address_space_limit() -> int | None:
    """The process's address-space limit (bytes), None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def fit_to_address_space() -> int | None:
    """Under a limit: at most two malloc arenas (glibc; a no-op elsewhere) and thread pools of one thread per GiB
    beyond the first (at least one, at most one per core), unless the user set a pool's size; Arrow's mimalloc
    reserving 64 MiB at a time, not 1 GiB (so that what fits grows with the limit); Polars' jemalloc is set by
    :func:`configure_jemalloc`. Call before Polars, Numba or DuckDB is imported. Returns the limit (bytes) or None."""
    limit = address_space_limit()
    if limit is None:
        return None
    try:
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 2)
    except (AttributeError, OSError):  # not glibc
        pass
    threads = max(1, min(os.cpu_count() or 1, (limit - _BASE) // _PER_THREAD))
    for name in _POOL_VARIABLES:
        os.environ.setdefault(name, str(threads))
    os.environ.setdefault("MIMALLOC_ARENA_RESERVE", _MIMALLOC_ARENA_RESERVE)  # Arrow's mimalloc
    return limit


def configure_jemalloc(limited: bool) -> None:
    """Polars' jemalloc settings for a command, unless the user set their own (``_RJEM_MALLOC_CONF``) or Polars is
    loaded already (it read them then; a host process keeps its own): freed pages handed back after
    :data:`JEMALLOC_DECAY`, and under an address-space limit (``limited``) one arena (its per-core arenas'
    reservations made an allocation fail with an abort, not a MemoryError). For the console script only, before
    Polars is imported: a library must not change its host's allocator (``import synthtrace`` sets nothing)."""
    if _JEMALLOC_CONF in os.environ or "polars" in sys.modules:
        return
    os.environ[_JEMALLOC_CONF] = f"narenas:1,{JEMALLOC_DECAY}" if limited else JEMALLOC_DECAY


def out_of_memory_line(exc: BaseException) -> str | None:
    """The one line for an allocation failure ``exc`` (a ``MemoryError``, a Rust panic or a shared library that
    could not be mapped, under a limit), or None when ``exc`` is not one."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    limit = address_space_limit()
    mapped = isinstance(exc, (ImportError, OSError)) and limit is not None and (
        "failed to map segment" in text or "Could not find/load shared object" in text)  # dlopen's mmap refused
    panic = type(exc).__name__ == "PanicException" and limit is not None
    no_thread = isinstance(exc, RuntimeError) and "can't start new thread" in text and limit is not None
    engine = type(exc).__name__ == "OutOfMemoryException"  # DuckDB's (attack 11 E7: a 45-line traceback)
    # ENOMEM from the kernel, raised by Python or by Polars' Rust code as its text (attack 12 F8: a merge said
    # "error: Cannot allocate memory (os error 12)" as if a file were at fault)
    no_memory = isinstance(exc, OSError) and (exc.errno == errno.ENOMEM or "(os error 12)" in text)
    if not (isinstance(exc, MemoryError) or mapped or panic or no_thread or engine or no_memory):
        return None
    where = (f"under the address-space limit of {limit / (1 << 30):.2f} GiB (ulimit -v): raise it, or run where "
             "more memory may be reserved" if limit is not None else "the machine has no more to give")
    return f"out of memory ({text or 'an allocation failed'}); {where}"


def too_small_line(args: list[str], limit: int | None) -> str | None:
    """The one line refusing the command line ``args`` (without the program's name) when the address-space limit
    (``limit``, bytes; None: unlimited) is below what its command needs (:data:`COMMAND_FLOORS_MB`,
    :data:`HELP_FLOORS_MB` when it asks for help); None when it may run. Called before Polars, Arrow, Numba or
    DuckDB is loaded: a failed allocation inside them may abort the process, which no handler can turn into a line."""
    if limit is None or not args:
        return None
    command = args[0]
    helping = not _HELP_OPTIONS.isdisjoint(args[1:])
    floor_mb = (HELP_FLOORS_MB if helping else COMMAND_FLOORS_MB).get(command)
    if floor_mb is None or limit >= floor_mb * MB:
        return None
    what = f"{command} --help" if helping else command
    return (f"address-space limit {limit // MB} MB (ulimit -v) is below the {floor_mb} MB synthtrace's {what} needs; "
            f"raise it with ulimit -v {-(-floor_mb * MB // 1024)} (KiB) or more")
