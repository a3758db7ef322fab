"""The night's memory budget (issue 23: a night's process <= 1.5 GB on every input): the night's jobs run as threads
of one process (:mod:`~synthtrace.pipelines.nightly`), each holding its estimated working set (MB) from one budget
while it runs, and waiting while the sum would pass it. A job larger than the whole budget runs alone: never a
deadlock, never a refusal. Plain Python, no Prefect: the task wrappers use it around their jobs.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from synthtrace.tracelib.errors import BadInputError

#: the environment variable that sets the night's memory target (MB), as ``synthtrace nightly --memory-mb`` does
MEMORY_ENV = "SYNTHTRACE_NIGHT_MEMORY_MB"
#: the night's memory target when none is set (MB): issue 23's bound on a night's process
TARGET_MB = 1500
#: the share of the memory available at the night's start (the machine's, or its cgroup's limit) the default takes
AVAILABLE_SHARE = 0.5
#: what the night's process holds besides its jobs (MB): Python, Polars, DuckDB, scikit-learn and Prefect's client
#: loaded, measured at 515-551 MB before a night's first job (benchmarks/bench_night_memory.py, RESULTS.md "session
#: 27, nightmem27"; attack26 N1 saw ~380 MB on a lighter night)
PROCESS_BASE_MB = 550
#: the least the jobs of a night share (MB), whatever the target: a smaller budget would only run them one at a time
LEAST_JOBS_MB = 256


class MemoryBudget:
    """``capacity_mb`` shared by threads: :meth:`held` blocks until its share fits beside what the others hold.
    Records the most MB and the most holders ever held at once (:attr:`peak_mb`, :attr:`peak_holders`)."""

    def __init__(self, capacity_mb: int) -> None:
        self._changed = threading.Condition()
        self.capacity_mb = max(1, capacity_mb)
        self.held_mb = 0
        self.holders = 0
        self.peak_mb = 0
        self.peak_holders = 0

    def resize(self, capacity_mb: int) -> None:
        """Change the capacity (a night's setting); the jobs holding their share keep it."""
        with self._changed:
            self.capacity_mb = max(1, capacity_mb)
            self._changed.notify_all()

    @contextlib.contextmanager
    def held(self, mb: int) -> Iterator[int]:
        """Hold ``mb`` (the job's estimate) while the block runs, once it fits; a job of more than the capacity waits
        until nothing else is held and takes the whole budget (runs alone). Yields the MB held. Released however the
        block ends (an exception, a stop)."""
        with self._changed:
            share = min(max(mb, 1), self.capacity_mb)
            while self.held_mb + share > self.capacity_mb and self.holders:
                self._changed.wait()
                share = min(max(mb, 1), self.capacity_mb)  # resized meanwhile
            self.held_mb += share
            self.holders += 1
            self.peak_mb = max(self.peak_mb, self.held_mb)
            self.peak_holders = max(self.peak_holders, self.holders)
        try:
            yield share
        finally:
            with self._changed:
                self.held_mb -= share
                self.holders -= 1
                self._changed.notify_all()


#: the budget of the jobs of this process's nights (one process, one memory: two nights in it share it)
PROCESS_BUDGET = MemoryBudget(TARGET_MB - PROCESS_BASE_MB)


#: the most malloc arenas the night's process keeps (glibc's default: 8 a core). Each thread that allocates at once
#: with others gets an arena of its own, and what a job frees stays in its arena for that thread: a night on a
#: 40-core node (40 task threads) over 40 small traces held 1,618 MB, 1,217 MB with two arenas (attack27 A6;
#: RESULTS.md "session 27, lead"). Polars' and Arrow's own allocators are not glibc's: this bounds the rest
HEAP_ARENAS = 2
#: glibc's mallopt parameter for the arena count (M_ARENA_MAX in malloc.h)
_M_ARENA_MAX = -8


def bound_heap_arenas(arenas: int = HEAP_ARENAS) -> bool:
    """Bound the process's malloc arenas to ``arenas`` from now on (arenas made already stay); whether the C library
    took it (glibc's ``mallopt``; False elsewhere, e.g. musl or macOS, where nothing changes). A ``MALLOC_ARENA_MAX``
    set in the environment wins: the caller's choice."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        return ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas) == 1
    except (OSError, AttributeError):
        return False


def night_memory_mb(setting: int | None = None) -> int:
    """The night's memory target (MB): ``setting`` (``--memory-mb``), else :data:`MEMORY_ENV`, else the least of
    :data:`TARGET_MB` and :data:`AVAILABLE_SHARE` of the memory available now (:func:`available_mb`). Raises
    :class:`~synthtrace.tracelib.errors.BadInputError` for an environment value that is no positive whole number."""
    if setting is not None:
        return setting
    if (text := os.environ.get(MEMORY_ENV, "").strip()):
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise BadInputError(f"{MEMORY_ENV}={text!r}: not a positive whole number of MB")
        return value
    available = available_mb()
    return TARGET_MB if available is None else min(TARGET_MB, int(available * AVAILABLE_SHARE))


def jobs_mb(target_mb: int) -> int:
    """The MB the night's jobs share under a process target of ``target_mb``: what the process's base leaves."""
    return max(LEAST_JOBS_MB, target_mb - PROCESS_BASE_MB)


def local_workers(target_mb: int, cores: int, job_mb: int) -> int:
    """The worker processes of a temporary Dask cluster whose sum fits in ``target_mb`` beside the night's own
    process: each a process's base plus the largest job it runs (``job_mb``), at most ``cores``, at least one. (Dask's
    own ``memory_limit`` pauses a worker past it; it bounds no sum.)"""
    return max(1, min(cores, (target_mb - PROCESS_BASE_MB) // (PROCESS_BASE_MB + job_mb)))


def available_mb() -> int | None:
    """The memory this process may still take (MB): the machine's available memory (``MemAvailable``), or less when
    its cgroup (a batch job's share of the node) has a limit; None where neither can be read."""
    found = [mb for mb in (_meminfo_available_mb(), _cgroup_left_mb()) if mb is not None]
    return min(found) if found else None


def _meminfo_available_mb() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_left_mb(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The least a memory limit of this process's cgroup or of any group above it leaves (MB): each level's cgroup v2
    ``memory.max`` less its ``memory.current`` (``/proc/self/cgroup``'s ``0::`` line), or v1 ``memory.limit_in_bytes``
    less ``memory.usage_in_bytes``; None without a limit. Batch systems put the limit above the process's own group
    (Slurm's ``job_N`` over ``step_0/user/task_0``, systemd's ``.slice``), which says "max" (review27 R2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    left: list[int] = []
    for line in lines:
        number, controllers, group = line.split(":", 2)
        if number == "0" and controllers == "":
            base, names = root, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            base, names = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        parts = [p for p in group.strip("/").split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = base.joinpath(*parts[:depth])
            try:
                limit, used = ((folder / name).read_text().strip() for name in names)
                if limit != "max" and int(limit) < 1 << 60:  # v1 writes "no limit" as a huge number
                    left.append(max(0, int(limit) - int(used)) // 2**20)
            except (OSError, ValueError):
                continue
    return min(left) if left else None
