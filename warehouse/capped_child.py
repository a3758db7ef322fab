"""Run a piece of work in a forked child under a memory cap and a deadline, and stream what it produces back.

DuckDB's ``memory_limit`` bounds its buffer manager (hash tables, sorts, aggregates), not every allocation: one
scalar (``repeat('x', 1 << 30)``, ``range(1 << 28)`` as one list) is built outside it, and so the process that
runs a query can grow past any figure its caller gave (issue 23, F3: 2.1 GB at ``--memory-limit 512MiB``). Only
the kernel can hold a process to a size whatever allocates in it, and a process cannot be held to a size after
it has grown, nor stopped mid-computation from Python. So the work runs in a child forked for it:

- its data segment (``RLIMIT_DATA``: heap and private writable mappings, what every allocator grows) is capped
  at what it holds once the work's ``reserve`` has run plus the allowance it is given: past it an allocation fails
  (DuckDB and Arrow raise their out-of-memory errors, Python its ``MemoryError``) and the child reports
  :class:`ChildOutOfMemory`. ``reserve`` takes up front the address space an allocator reserves without using it
  (pyarrow's mimalloc maps a 1 GiB arena at its first allocation, ~4 MB of it resident: attack 21 F2), so the
  allowance counts memory the work uses, not what an allocator set aside;
- past the deadline it is killed (a scalar function does not look at DuckDB's interrupt flag) and the caller
  gets :class:`ChildTimedOut`; Ctrl-C in the parent kills it too (the child ignores SIGINT), and it dies with
  the thread that forked it (``PR_SET_PDEATHSIG``), so a killed caller leaves no query running;
- what it produces comes back item by item through a pipe (pickled, length-prefixed), so the child holds one
  item at a time and the parent what it keeps; the work can weigh what the parent keeps against its own growth
  (:func:`grown_bytes`: one budget for both processes).

Fork, not spawn: the child starts in a few milliseconds with every module the parent imported (a fresh
interpreter would import DuckDB and pyarrow again, ~0.5 s). The child must not use thread pools the parent
started (Polars' is never used by the work given here).
"""
from __future__ import annotations

import ctypes
import os
import pickle
import resource
import select
import signal
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

from synthtrace.tracelib.errors import SynthtraceError

_LENGTH = struct.Struct("<Q")
_READ_BYTES = 1 << 20
#: the child's exit status when it could not even report that it ran out of memory
_EXIT_NO_MEMORY = 3
_PR_SET_PDEATHSIG = 1
#: signals a child dies of when an allocation fails where nobody checks (an abort on an uncaught std::bad_alloc, a
#: write through a null pointer) or the kernel's OOM killer chose it
_MEMORY_DEATHS = {signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGKILL}
#: in a child of :func:`stream`: its private resident memory when it started (bytes; see :func:`grown_bytes`)
_started_anon = 0


class ChildError(SynthtraceError):
    """The child ended without finishing its work (a crash, an unreadable answer)."""


class ChildOutOfMemory(ChildError):
    """An allocation in the child failed at its memory cap (or the child died the way that makes it die)."""


class ChildTimedOut(ChildError):
    """The child was killed at its deadline."""


def data_segment_bytes() -> int:
    """The calling process's data segment now (``VmData``: what ``RLIMIT_DATA`` counts), in bytes."""
    return _status_bytes(b"VmData:")


def _status_bytes(field: bytes) -> int:
    """A size field of this process's ``/proc/self/status`` (``VmData:``, ``RssAnon:``), in bytes; 0 without it."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def grown_bytes() -> int:
    """In a child of :func:`stream`: the private memory it has taken since it started (growth of ``RssAnon``, the
    resident pages it does not share with its parent), in bytes. Its data segment is no such measure: DuckDB
    reserves ~1 GB of it that it never touches."""
    return max(0, _status_bytes(b"RssAnon:") - _started_anon)


def thread_stack_bytes() -> int:
    """The stack a new thread reserves (glibc takes ``RLIMIT_STACK``'s soft value; 8 MiB when unlimited), bytes.
    Each thread's stack counts against ``RLIMIT_DATA`` whether it is used or not."""
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    return 8 << 20 if soft == resource.RLIM_INFINITY else soft


def stream(work: Callable[[Callable[[Any], None]], None], *, allowance_bytes: int,
           deadline_s: float | None, on_exit: Callable[[int], None] | None = None,
           reserve: Callable[[], None] | None = None) -> Iterator[Any]:
    """The items ``work(send)`` sends, run in a forked child whose data segment may grow by ``allowance_bytes``
    over what it holds once ``reserve()`` has run in it (None: over what it inherited), killed after ``deadline_s``
    seconds (None: never). An exception ``work`` raises is raised here (pickled; :class:`ChildError` when it cannot
    be). ``on_exit(pid)`` runs once the child has ended (to remove what a killed child left behind). Leaving the
    loop early kills the child."""
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (coverage does not follow a fork)
        os.close(read_fd)
        _child(work, write_fd, parent, allowance_bytes, reserve)
    os.close(write_fd)
    ended = False
    try:
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        for kind, payload in _frames(read_fd, deadline):
            if kind == "item":
                yield payload
            elif kind == "error":
                raise payload
            else:
                break
        status = _reap(pid)
        ended = True
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) in _MEMORY_DEATHS or (
                os.WIFEXITED(status) and os.WEXITSTATUS(status) == _EXIT_NO_MEMORY):
            raise ChildOutOfMemory(f"the child process ended by {_ending(status)}")
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            raise ChildError(f"the child process ended by {_ending(status)}")
    finally:
        os.close(read_fd)
        if not ended:
            _kill(pid)
        if on_exit is not None:
            on_exit(pid)


def _child(work: Callable[[Callable[[Any], None]], None], out: int, parent: int, allowance_bytes: int,
           reserve: Callable[[], None] | None) -> None:
    """The child's whole life: never returns (``os._exit``), whatever happens."""
    global _started_anon
    code = 0
    try:
        _started_anon = _status_bytes(b"RssAnon:")
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it kills this process
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)

        def send(item: Any) -> None:
            _write(out, ("item", item))

        try:
            if reserve is not None:
                reserve()
            _cap_data_segment(allowance_bytes)
            work(send)
            _write(out, ("end", None))
        except MemoryError:
            code = _EXIT_NO_MEMORY
        except BaseException as exc:  # every failure is the parent's to raise
            _write(out, ("error", _picklable(exc)))
    except MemoryError:
        code = _EXIT_NO_MEMORY
    except BaseException:  # nothing more can be said: the parent sees the exit status
        code = 1
    finally:
        os._exit(code)


def _cap_data_segment(allowance_bytes: int) -> None:
    """Cap this process's data segment at what it holds now plus ``allowance_bytes``, never above the hard limit
    it was given (``ulimit -d`` of a batch job: a larger cap is not this process's to take)."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    cap = min(data_segment_bytes() + allowance_bytes, 2**63 - 1)
    if hard != resource.RLIM_INFINITY:  # (RLIM_INFINITY is -1 to Python: never a bound to take the minimum with)
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` itself when it survives pickling, else a :class:`ChildError` with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc.with_traceback(None)
    except Exception:  # any exception type may fail to pickle in its own way
        return ChildError(f"{type(exc).__name__}: {exc}")


def _write(fd: int, frame: tuple[str, Any]) -> None:
    """``frame`` pickled into ``fd``, its length first (written apart: no second copy of a large item)."""
    data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    for part in (_LENGTH.pack(len(data)), data):
        view = memoryview(part)
        while view:
            view = view[os.write(fd, view):]


def _frames(fd: int, deadline: float | None) -> Iterator[tuple[str, Any]]:
    """The frames the child writes to ``fd`` until it closes it; :class:`ChildTimedOut` past ``deadline``."""
    buf = bytearray()
    while True:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and (wait <= 0 or not select.select([fd], [], [], wait)[0]):
            raise ChildTimedOut("the child process passed its deadline")
        chunk = os.read(fd, _READ_BYTES)
        if not chunk:
            if buf:
                raise ChildError("the child process ended in the middle of an answer")
            return
        buf += chunk
        while len(buf) >= _LENGTH.size and len(buf) >= _LENGTH.size + (n := _LENGTH.unpack_from(buf)[0]):
            with memoryview(buf) as view:
                frame = pickle.loads(view[_LENGTH.size:_LENGTH.size + n])
            del buf[:_LENGTH.size + n]
            yield frame


def _reap(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:  # pragma: no cover - Python retries waitpid itself (PEP 475)
            continue


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)


def _ending(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"
