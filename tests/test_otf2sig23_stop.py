"""An OTF2 read in a thread other than the main one stops when told (attack 22 F6/F7, issue 23): a signal reaches
the main thread only, and a worker of the nightly flow read on to the end of its archive while the main thread had
already ended the command. :func:`~synthtrace.tracelib.formats.otf2.stop_reads` (or a read's own ``stop`` event)
stops it at its next location, local definitions reader or chunk of events, with ReadStopped: the trace is not at
fault. Counted by the reader's progress calls (one per chunk of events read), never by time."""
from __future__ import annotations

import threading

import pytest

from synthtrace.tracelib.errors import BadInputError, ReadStopped
from synthtrace.tracelib.formats.otf2 import Otf2Trace, stop_reads
from testing.otf2_variants import many_ranks

RANKS = 20


def _read_in_a_thread(trace: Otf2Trace, on_progress) -> tuple[threading.Thread, dict]:
    """A thread reading ``trace`` whole, ``on_progress`` called at each chunk read; its outcome in the dict."""
    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            stream = trace.read("r", progress=on_progress)
            outcome["parts"] = list(stream)
        except BaseException as exc:  # the test looks at what ended the read
            outcome["raised"] = exc

    thread = threading.Thread(target=work, name="otf2sig23-reader")
    thread.start()
    return thread, outcome


def test_stop_reads_stops_a_read_in_another_thread_at_its_next_location(tmp_path):
    trace = Otf2Trace(many_ranks(tmp_path / "many", RANKS, barrier=True))
    chunks_read, first_read, told = [], threading.Event(), threading.Event()

    def progress(n_bytes: int) -> None:
        chunks_read.append(n_bytes)
        first_read.set()
        assert told.wait(120)  # the first location read, the reader waits for the main thread here

    thread, outcome = _read_in_a_thread(trace, progress)
    assert first_read.wait(120)
    assert stop_reads() == 1  # the one read running, in the other thread
    told.set()
    thread.join(120)
    assert isinstance(outcome.get("raised"), ReadStopped), outcome
    assert not isinstance(outcome["raised"], BadInputError)  # a sound trace: a night must not set it aside
    assert len(chunks_read) == 1, f"{len(chunks_read)} of {RANKS} locations read, the stop came after the first"
    assert stop_reads() == 0  # the stopped read is no longer running


def test_a_read_whose_stop_is_set_reads_no_location(tmp_path):
    stop = threading.Event()
    trace = Otf2Trace(many_ranks(tmp_path / "many", RANKS, barrier=True), stop=stop)
    chunks_read: list[int] = []
    stop.set()
    with pytest.raises(ReadStopped, match="traces.otf2"):
        list(trace.read("r", progress=chunks_read.append))
    assert chunks_read == []


def test_a_later_read_is_not_stopped_by_an_earlier_stop(tmp_path):
    """stop_reads stops the reads running when it is called, not the next night's."""
    anchor = many_ranks(tmp_path / "many", RANKS, barrier=True)
    stop_reads()
    bursts = sum(p.frame.height for p in Otf2Trace(anchor).read("r") if p.table == "bursts")
    assert bursts == 2 * RANKS


def test_stop_reads_from_a_signal_handler_while_its_thread_registers_a_read():
    """A Ctrl-C handler calls stop_reads in the main thread, which may be inside stoppable's registration at that
    moment (review23): the registry's lock must let its own thread in, or the handler waits for ever."""
    from synthtrace.tracelib import read_stop as stopping

    def handler_inside_registration() -> None:
        with stopping._lock:  # the thread is inside stoppable's add/discard when the signal arrives
            stopping.stop_reads()

    t = threading.Thread(target=handler_inside_registration, daemon=True)
    t.start()
    t.join(timeout=30)  # a hang guard, not a timing assertion
    assert not t.is_alive(), "stop_reads blocked on the lock its own thread holds"
