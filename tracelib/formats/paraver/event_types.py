"""Extrae's Paraver event types, in one place: what the tokenizer keeps, the reader names and the writer writes.

Values as Extrae's merger writes them (``MPI_EventEncoding.h``, ``events.h``): MPI calls (value = call id at entry,
0 at exit, :mod:`synthtrace.tracelib.domain.mpi_calls`), collective sizes, callers, hardware counters.
"""
from __future__ import annotations

from synthtrace.tracelib.domain.mpi_calls import MpiKind

#: MPI call events: point-to-point, collective, other, one-sided, I/O
MPI_EVENT_TYPES = (50_000_001, 50_000_002, 50_000_003, 50_000_004, 50_000_005)
#: the kind of an MPI call of each event type, for calls the catalogue does not name; entries and exits pair
#: within one type
MPI_TYPE_KINDS: dict[int, MpiKind] = dict(
    zip(MPI_EVENT_TYPES, ("point_to_point", "collective", "other", "other", "other"), strict=True)
)
#: collective send size, receive size, root and communicator, at the entry of a collective
COLLECTIVE_INFO_TYPES = (50_100_001, 50_100_002, 50_100_003, 50_100_004)
#: the caller of an MPI call (function id) and its line, at the entry
CALLER_TYPE, CALLER_LINE_TYPE = 70_000_001, 80_000_001
#: the events beside an MPI entry that describe it (the columns of the tokenizer's MPI info)
INFO_TYPES = (*COLLECTIVE_INFO_TYPES, CALLER_TYPE, CALLER_LINE_TYPE)
#: hardware counters: 42/43 PAPI presets, 44/45 natives, 46/47 uncore (+1,000,000: absolute values); max exclusive
COUNTER_TYPE_MIN, COUNTER_TYPE_MAX = 42_000_000, 48_000_000
PRESET_BASE, NATIVE_BASE, UNCORE_BASE = 42_000_000, 44_000_000, 46_000_000
#: a user function (Extrae: value = function id at entry, 0 at exit); the OTF2 reader writes its user regions so
USER_FUNCTION_EVENT = 60_000_019
#: application begin/end, and the active hardware counter set
APPL_EVENT, COUNTER_SET_EVENT = 40_000_001, 41_999_999
#: Extrae's tracing switch (Extrae_shutdown / Extrae_restart): value 0 where recording stops, 1 where it resumes
TRACING_EVENT, TRACING_OFF = 40_000_012, 0
