"""Reads a Score-P OTF2 archive into the same tidy burst and MPI-call tables as the Paraver reader (DESIGN §4).

Model of an OTF2 run (``Otf2Trace``):

- ``appl`` is 1; ``task`` is the MPI rank + 1 (rank from the MPI ``COMM_LOCATIONS`` group, else the order of the
  process location groups); ``thread`` numbers the CPU-thread locations of a rank from 1 in definition order.
  Score-P numbers thread t of rank r ``(t << 32) | r``. Other locations (GPU streams, metric recorders) are skipped
  with a warning naming the metrics they record.
- **computation burst**: per location, the time outside MPI regions: from the location's first event (its
  ``ProgramBegin``) to the ``Enter`` of the first MPI region, between the ``Leave`` of one outermost MPI region and
  the ``Enter`` of the next, and from the last ``Leave`` to the location's last event. A region is MPI when its
  paradigm is MPI or its name starts with ``MPI_``; MPI regions nested in MPI regions belong to the outer call. A
  worker thread (thread > 1) between thread teams (``ThreadTeamEnd`` of its last team to the next
  ``ThreadTeamBegin``) waits in the OpenMP runtime: no burst there. Nor inside the measurement system's own
  regions (Score-P's ``TRACE BUFFER FLUSH``, ``MEASUREMENT OFF``): a computation around a buffer flush is two
  bursts, the first closed by no call, as Extrae's flush state cuts a Paraver Running burst. Calling-context
  enters/leaves (unwinding mode) arrive as Enter/Leave of their region (the C library's fallback).
- **counters**: Metric records (Score-P attaches them to Enter/Leave). Per metric member, ``ACCUMULATED_START``
  values are running totals from the start of the measurement (baseline 0), other accumulated values are readings
  that get differenced (modulo 2^64), ``*_LAST`` / ``RELATIVE_POINT`` values already count the interval since the
  previous reading and ``*_NEXT`` values the interval up to the next one; ``ABSOLUTE_*`` values are levels (power,
  temperature), not counts: left out with a warning. Every value becomes a count at the time that closes its
  interval; a burst's counter is the sum of the counts inside it (start < t <= end). Doubles count in whole units.
- **MPI calls**: outermost MPI regions, with name, kind (from the MPI call catalogue,
  :mod:`synthtrace.tracelib.domain.mpi_calls`), collective sizes / root / communicator from ``MpiCollectiveEnd`` (and
  ``NonBlockingCollectiveComplete``, on the call that completes the collective, where OTF2 records it), the
  communicator of point-to-point records, and ``call_site`` = the innermost enclosing non-MPI region
  (``name (file:line)``).
- **messages**: ``MpiSend``/``MpiIsend`` matched with ``MpiRecv``/``MpiIrecv`` per (sender rank, receiver rank,
  communicator, tag) in order (MPI's non-overtaking rule); an ``MpiIrecv`` counts at the time of its
  ``MpiIrecvRequest`` (the logical receive, as Extrae records it) and completes at its own time (``r_phys_ns``,
  in the wait or test that completed it, as Paraver's physical receive), an ``MpiMrecv`` is a receive from the
  sender, communicator and tag of the ``MpiProbe`` that found its message. Unmatched halves are kept with one side NULL,
  and said in one warning; a run where most receives have no send is refused (``--salvage`` reads it, warned).
- **which events file is whose**: OTF2 names no location inside an events file (its chunks hold event numbers and
  times only). A file with more events than its location's definition announces is refused; events files moved
  between locations show as receives without sends (above); two locations with byte-identical events files are
  named in that refusal, or warned of (a generated trace may hold twins). Names with control characters (regions,
  metrics, locations, source files) are kept escaped, with one warning.

Times are integer ns from the trace's global offset (clock properties: resolution in ticks/s). Records of a
location are taken in (timestamp, record order). Events are read per location through the OTF2 C library with
thin ctypes callbacks registered directly on its event reader (the ``otf2`` wheel's own event objects make a bare
loop over the events ~3x slower than this whole reader, see benchmarks/results/otf2.md), ``chunk_events`` at a
time, and handed to the :class:`~synthtrace.tracelib.formats.bursts.BurstAssembler` chunk by chunk, so the tables'
memory is
bounded by the chunk size; only the point-to-point records wait for the end (message halves live on two locations).

Modules, one job each: ``library`` (ctypes bindings of the C library, its errors), ``definitions`` (global
definitions, archive checks), ``events`` (buffering one location's raw events), ``convert`` (events to bursts,
calls, samples), ``messages`` (send/receive matching), ``trace`` (the driver, :class:`Otf2Trace`), ``stopping``
(a read stopped from another thread: :func:`stop_reads`, or the ``stop`` event given to :class:`Otf2Trace`).
"""
from __future__ import annotations

from synthtrace.tracelib.read_stop import stop_reads
from synthtrace.tracelib.formats.otf2.trace import Otf2Trace

__all__ = ["Otf2Trace", "stop_reads"]
