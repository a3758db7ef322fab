"""The OTF2 C library through ctypes: its error messages captured as one-line reasons, and the callback types
and setters of its event reader (thin callbacks registered directly, bypassing the wheel's event objects)."""
from __future__ import annotations

import contextlib
import ctypes
import io
import sys
import threading
from collections.abc import Iterator

_ERROR_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p,
                             ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


@contextlib.contextmanager
def _captured_otf2_errors() -> Iterator[list[str]]:
    """Collect the OTF2 C library's error messages instead of letting it print them to stderr."""
    from _otf2.Config import conf

    messages: list[str] = []

    def on_error(_user, _file, _line, function, _code, fmt, _va):
        text = (fmt or b"").decode("utf-8", "replace").replace("%s", "?").strip()
        if text:
            messages.append(text)
        return _code

    callback = _ERROR_CB(on_error)
    register = conf.lib["OTF2_Error_RegisterCallback"]
    register.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    register.restype = ctypes.c_void_p
    previous = register(ctypes.cast(callback, ctypes.c_void_p), None)
    try:
        yield messages
    finally:
        register(previous, None)


class _CallbackTraceback(io.StringIO):
    """Where the otf2 wheel's definition callbacks write the traceback of the exception they caught (their bare
    ``except:`` catches a KeyboardInterrupt too): that exception, while it is handled, is a Ctrl-C or SIGTERM when
    it is a KeyboardInterrupt (or SystemExit), kept for :func:`raise_callback_interrupt` as an interrupt
    :func:`callback_interrupts` saw is (attack 22 F5: it was printed and its last line taken as the reason why a
    sound archive was "not a readable OTF2 archive (KeyboardInterrupt)")."""

    def write(self, text: str) -> int:
        if isinstance(handled := sys.exc_info()[1], KeyboardInterrupt | SystemExit):
            _interrupts.setdefault(threading.get_ident(), handled)
        return super().write(text)


class _ThreadStderr:
    """``sys.stderr`` while threads capture the wheel's tracebacks: a capturing thread's writes go to its capture,
    every other thread's to the stream before. ``contextlib.redirect_stderr`` swaps the stream of every thread: a
    Ctrl-C's "aborted" line, written by the main thread while a worker read a big archive's global definitions, went
    into the worker's capture and was never printed (attack 22 F6: exit 130, nothing on stderr)."""

    def __init__(self, before):
        self.before = before
        self.captures: dict[int, io.StringIO] = {}  # thread id -> its capture

    def _stream(self):
        return self.captures.get(threading.get_ident(), self.before)

    def write(self, text: str) -> int:
        return self._stream().write(text)

    def flush(self) -> None:
        self._stream().flush()

    def __getattr__(self, name: str):
        return getattr(self._stream(), name)


_stderr_lock = threading.Lock()


@contextlib.contextmanager
def _thread_stderr(capture: io.StringIO) -> Iterator[None]:
    """Send this thread's writes to ``sys.stderr`` (and no other thread's) to ``capture`` meanwhile."""
    with _stderr_lock:
        routed = sys.stderr if isinstance(sys.stderr, _ThreadStderr) else _ThreadStderr(sys.stderr)
        sys.stderr = routed
        routed.captures[threading.get_ident()] = capture
    try:
        yield
    finally:
        with _stderr_lock:
            routed.captures.pop(threading.get_ident(), None)
            if not routed.captures and sys.stderr is routed:
                sys.stderr = routed.before


@contextlib.contextmanager
def _python_callback_errors(messages: list[str]) -> Iterator[None]:
    """The otf2 wheel's definition callbacks write the traceback of an exception they meet (an undecodable
    name, a duplicate definition in a damaged archive) to stderr: capture this thread's, keep its last line as a
    reason; a Ctrl-C or SIGTERM one of them met is raised instead."""
    captured = _CallbackTraceback()
    try:
        with _thread_stderr(captured):
            yield
    finally:
        raise_callback_interrupt()
        lines = [ln.strip() for ln in captured.getvalue().splitlines() if ln.strip()]
        if lines:
            messages.append(lines[-1][:200])


@contextlib.contextmanager
def callback_interrupts() -> Iterator[None]:
    """While the C library calls Python back, keep a Ctrl-C or SIGTERM (a KeyboardInterrupt raised by the signal
    handler inside a ctypes callback) for :func:`raise_callback_interrupt`: ctypes cannot raise from a callback, it
    reports the exception to ``sys.unraisablehook`` ("Exception ignored on calling ctypes callback function") and the
    C library reads on, so the signal was lost. Signals reach only the main thread; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = sys.unraisablehook

    def keep(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt | SystemExit):
            _interrupts.setdefault(threading.get_ident(), unraisable.exc_value)
        else:
            previous(unraisable)

    sys.unraisablehook = keep
    try:
        yield
        raise_callback_interrupt()
    finally:
        sys.unraisablehook = previous
        _interrupts.pop(threading.get_ident(), None)


_interrupts: dict[int, BaseException] = {}  # thread id -> the interrupt a callback of that thread met


def raise_callback_interrupt() -> None:
    """Raise the interrupt a callback of this thread met since the last call (see :func:`callback_interrupts`)."""
    exc = _interrupts.pop(threading.get_ident(), None)
    if exc is not None:
        raise exc


def _library_reason(exc: BaseException, messages: list[str]) -> str:
    """A one-line reason from the otf2 library's exception and the C library's messages."""
    parts = [m for m in messages[-3:] if m]
    text = "; ".join(dict.fromkeys(parts)) or str(exc) or type(exc).__name__
    return f"not a readable OTF2 archive ({text})"


_u64, _u32, _u8, _vp = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint8, ctypes.c_void_p
_BASE = (_u64, _u64, _u64, _vp, _vp)  # location, time, event position, user data, attribute list
_FP_REGION = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32)  # Enter / Leave (region), ThreadTeamBegin / End (team)
_FP_BEGIN = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32, _u32, _vp)  # ProgramBegin
_FP_END = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, ctypes.c_int64)  # ProgramEnd
_FP_METRIC = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32, _u8, _vp, ctypes.POINTER(_u64))  # values as raw 64-bit words
_FP_SEND = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32, _u32, _u32, _u64)  # peer, comm, tag, length (probe: message)
_FP_ISEND = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u32, _u32, _u32, _u64, _u64)  # ... request id
_FP_IRECV_REQ = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u64)
_FP_MRECV = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u64, _u64)  # message id, length
_FP_COLL_END = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u8, _u32, _u32, _u64, _u64)  # op, comm, root, sent, recv
_FP_NBC_END = ctypes.CFUNCTYPE(ctypes.c_int, *_BASE, _u8, _u32, _u32, _u64, _u64, _u64)  # ... request id


def _callback_setter(name: str):
    import _otf2
    from _otf2.Config import conf

    fp = {"Enter": _FP_REGION, "Leave": _FP_REGION, "ThreadTeamBegin": _FP_REGION, "ThreadTeamEnd": _FP_REGION,
          "ProgramBegin": _FP_BEGIN, "ProgramEnd": _FP_END,
          "Metric": _FP_METRIC, "MpiSend": _FP_SEND, "MpiIsend": _FP_ISEND, "MpiRecv": _FP_SEND,
          "MpiIrecv": _FP_ISEND, "MpiIrecvRequest": _FP_IRECV_REQ, "MpiCollectiveEnd": _FP_COLL_END,
          "NonBlockingCollectiveComplete": _FP_NBC_END, "MpiProbe": _FP_SEND, "MpiMrecv": _FP_MRECV}[name]
    func = conf.lib[f"OTF2_EvtReaderCallbacks_Set{name}Callback"]
    func.argtypes = [ctypes.POINTER(_otf2.EvtReaderCallbacks), fp]
    func.restype = ctypes.c_int
    return func

