"""The OTF2 reader's driver: an archive's identity and resources, and its tables read location by location."""
from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from synthtrace.tracelib.formats.bursts import HORIZON_SCHEMA, BurstAssembler, RecordBatch
from synthtrace.tracelib.formats.call_store import CallStore
from synthtrace.tracelib.formats.held_frames import HeldFrames
from synthtrace.tracelib.errors import TraceFormatError, TruncatedTraceError
from synthtrace.tracelib.formats.otf2.convert import _LocationConverter
from synthtrace.tracelib.formats.source import ReadSummary, TablePart, TraceReader
from synthtrace.tracelib.formats.untraced import UntracedMarks
from synthtrace.tracelib.formats.otf2.definitions import (_check_global_definitions, _check_location_files,
                                                          _identical_event_files, _Location, _read_definitions,
                                                          _validate_archive, communicator_members)
from synthtrace.tracelib.formats.otf2.events import _clear, _EventBuffer
from synthtrace.tracelib.formats.otf2.evt_file import EventsEnd, skipped_events
from synthtrace.tracelib.formats.otf2.library import (
    _callback_setter,
    _captured_otf2_errors,
    _library_reason,
    _python_callback_errors,
    callback_interrupts,
    raise_callback_interrupt,
)
from synthtrace.tracelib.formats.otf2.messages import P2pRecords, check_pairing
from synthtrace.tracelib.read_stop import stoppable
from synthtrace.tracelib.printable import is_utf8
from synthtrace.tracelib.schema import THREAD_NODE_SCHEMA

DEFAULT_CHUNK_EVENTS = 200_000


@dataclass
class _ReadState:
    """What one read of an archive tallies across its locations."""

    run_id: str = ""
    n_bursts: int = 0
    n_events: int = 0
    n_records: dict[int, int] = field(default_factory=lambda: {1: 0, 2: 0, 3: 0, 4: 0})
    last_ns: int = 0
    p2p: P2pRecords | None = None
    untraced: UntracedMarks = field(default_factory=UntracedMarks)  # where recording was switched off

    def assembled(self, bursts: Iterator[pl.DataFrame], calls: Iterator[pl.DataFrame],
                  store: CallStore) -> Iterator[TablePart]:
        """The assembler's parts (:meth:`BurstAssembler.feed_parts`): calls to the store, bursts streamed."""
        for part in calls:
            store.add(part)
        for part in bursts:
            self.n_bursts += part.height
            if part.height:
                yield TablePart("bursts", self.untraced.marked(part))


class _SharedParts:
    """The parts of consecutive locations joined until a table's hold ``rows`` rows (bounded memory): one part per
    location and table made a run of 3,000 locations 6,000 files of a row or two, whose removal after a Ctrl-C took
    8-14 s (attack 22 F7: a file the kernel has written back costs milliseconds to unlink), as slow to read."""

    def __init__(self, rows: int):
        self.rows = rows
        self._held: dict[str, HeldFrames] = {}
        self._n_held: dict[str, int] = {}  # table -> rows held

    def add(self, parts: Iterable[TablePart]) -> Iterator[TablePart]:
        """Hold ``parts``; yield a table's held frames as one part once they reach :attr:`rows` rows."""
        for part in parts:
            self._held.setdefault(part.table, HeldFrames()).append(part.frame)
            self._n_held[part.table] = self._n_held.get(part.table, 0) + part.frame.height
            if self._n_held[part.table] >= self.rows:
                yield self._joined(part.table)

    def rest(self) -> Iterator[TablePart]:
        """The frames still held, one part per table."""
        for table in list(self._held):
            yield self._joined(table)

    def _joined(self, table: str) -> TablePart:
        self._n_held.pop(table)
        held = self._held.pop(table)  # the columns of a counter some locations lack: NULL, as a read of parts has it
        return TablePart(table, held[0] if len(held) == 1 else pl.concat(held, how="diagonal_relaxed"))


class Otf2Trace(TraceReader):
    """One OTF2 archive on disk (its ``.otf2`` anchor file): definitions, resources and a streaming table reader.

    >>> trace = Otf2Trace("ping-pong/traces.otf2")
    >>> stream = trace.read(run_id="abc")
    >>> for part in stream: ...  # TablePart("bursts", frame)
    >>> stream.summary.calls  # the MPI calls, messages attached
    """

    format = "otf2"

    def __init__(self, path: str | Path, *, chunk_events: int = DEFAULT_CHUNK_EVENTS, salvage: bool = False,
                 stop: threading.Event | None = None):
        """``stop``: set (from another thread), it stops the opening and every read of the archive
        (:mod:`synthtrace.tracelib.read_stop`)."""
        self.path = _validate_archive(Path(path))
        self.chunk_events = int(chunk_events)
        self.salvage = salvage
        self.stop = stop
        self.warnings: list[str] = []
        with stoppable(self.path, stop) as check:
            self._open(check)

    def _open(self, check: Callable[[], None]) -> None:
        """Read the definitions and check every location's files (``check`` raises when the opening is stopped)."""
        with _captured_otf2_errors() as messages, callback_interrupts():
            self._event_chunk, def_chunk = self._chunk_sizes(messages)
            _check_global_definitions(self.path, def_chunk)
            reader = self._open_reader(messages)
            try:
                self.defs = _read_definitions(reader, self.path)
            except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
                raise TraceFormatError(self.path.with_suffix(".def"), None,
                                       f"inconsistent OTF2 definitions ({type(exc).__name__}: {exc})") from None
            finally:
                reader.close()
        if not self.defs.locations:
            raise TraceFormatError(self.path.with_suffix(".def"), None, "OTF2 archive defines no CPU locations")
        self._unread: list[_Location] = []  # locations without events, or (salvage) whose files are lost
        ends: dict[int, EventsEnd] = {}  # location ref -> how its events file ends
        for loc in self.defs.locations:
            check()
            try:
                if (end := _check_location_files(loc, def_chunk, self._event_chunk)) is not None:
                    ends[loc.ref] = end
                    continue
                self._unread.append(loc)
            except TraceFormatError as exc:
                if not self.salvage:
                    raise
                self._unread.append(loc)
                self.defs.warnings.append(f"{exc.path}: {exc.reason.split(';')[0]}: read without its events "
                                          "(--salvage)")
        self._trailing = {ref: end.trailing for ref, end in ends.items() if end.trailing is not None}
        self._whole = self._cut_files(ends)
        self._twins = _identical_event_files(self._read_locations)  # attack 8 B8: an events file copied over another
        for said in self.defs.warnings:  # said once per open, as the Paraver reader says its header's and .pcf's
            self._warn(said)

    def _cut_files(self, ends: dict[int, EventsEnd]) -> dict[int, int]:
        """The events whole before the cut (count) of each location (by ref) whose events file ends before its
        END_OF_FILE record (``ends``), said under salvage and refused otherwise, before the library reads one: past
        a short file's end it parses uninitialised memory (:func:`~.evt_file.events_end`)."""
        whole: dict[int, int] = {}
        for loc in self._read_locations:
            cut = ends[loc.ref].cut
            if cut is None:
                continue
            if not self.salvage:
                if cut.damage is not None:
                    raise TraceFormatError(loc.evt_file, None, f"{cut.reason(loc.n_events)} (--salvage reads those)")
                raise TruncatedTraceError(loc.evt_file, None, f"{cut.reason(loc.n_events)} (copied or written only "
                                          "in part? --salvage reads them)")
            whole[loc.ref] = cut.whole
            kept = ("the events before the cut" if cut.damage is None else
                    f"the {cut.whole} events of the chunks before byte {cut.damage.kept_before}, dropped the "
                    f"{max(loc.n_events - cut.whole, 0)} from it")
            self.defs.warnings.append(f"{loc.evt_file}: {cut.reason(loc.n_events)} (--salvage: kept {kept})")
        return whole

    def _warn(self, message: str) -> None:
        """Say ``message`` on the terminal (the CLI prints each warning once) and keep it with the read's summary
        (issue 23: only the B7 and B8 warnings were said; the others, a metric left out, a location read without
        its events or cut short under --salvage, out-of-order records, were kept in the summary alone)."""
        warnings.warn(message, UserWarning, stacklevel=3)
        self.warnings.append(message)

    def _library_anchor(self) -> tuple[str, int | None]:
        """The anchor's path as libotf2 can open it, and the folder descriptor it goes through (None: none). A
        folder above it whose name is not UTF-8 (a cluster's Latin-1 name) is reached through ``/proc/self/fd``:
        the wheel passes the path to libotf2 as UTF-8 text only, and refused such an archive as "not a readable
        OTF2 archive (UnicodeEncodeError)" (attack 20 F2). The caller closes the descriptor."""
        import os

        if not is_utf8(str(self.path)) and is_utf8(self.path.name) and Path("/proc/self/fd").is_dir():
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            return f"/proc/self/fd/{fd}/{self.path.name}", fd
        return str(self.path), None

    def _chunk_sizes(self, messages: list[str]) -> tuple[int, int]:
        """The archive's chunk sizes of events and definitions files (bytes), from its anchor file: libotf2 opened
        without the wheel, whose reader reads the global definitions as it opens (they are checked first)."""
        import os

        import _otf2

        anchor, fd = self._library_anchor()
        try:
            handle = _otf2.Reader_Open(anchor)
            try:
                events, definitions = _otf2.Reader_GetChunkSize(handle)
            finally:
                _otf2.Reader_Close(handle)
        except Exception as exc:  # the library raises its own errors
            raise TraceFormatError(self.path, None, _library_reason(exc, messages)) from None
        finally:
            if fd is not None:
                os.close(fd)
        return int(events), int(definitions)

    def _open_reader(self, messages: list[str]):
        """The wheel's reader of the archive (through ``/proc/self/fd`` where :meth:`_library_anchor` says; the
        folder's descriptor is then closed by the reader's ``close``)."""
        import os
        import weakref

        import otf2

        anchor, fd = self._library_anchor()
        try:
            with _python_callback_errors(messages):
                reader = otf2.reader.Reader(anchor)
            if fd is not None:  # closed when the reader is (once: a finalizer runs once), else when it is freed
                done, library_close = weakref.finalize(reader, os.close, fd), reader.close
                fd = None

                def close() -> None:
                    try:
                        library_close()
                    finally:
                        done()
                reader.close = close
            return reader
        except Exception as exc:  # the library raises its own errors (and KeyError etc. on garbage)
            raise TraceFormatError(self.path, None, _library_reason(exc, messages)) from None
        finally:
            if fd is not None:  # the reader did not open
                os.close(fd)

    # ------------------------------------------------------------------ identity and resources
    @property
    def started_at(self) -> datetime | None:
        """Wall-clock time of the trace start (naive UTC), when the clock properties record it."""
        ns = self.defs.realtime_ns
        return datetime.fromtimestamp(ns / 1e9, UTC).replace(tzinfo=None) if ns else None

    @property
    def resources(self) -> dict[str, int]:
        d = self.defs
        duration = d.scalar_ns(d.offset + d.trace_length) if d.trace_length else 0
        return {"n_appl": 1, "n_tasks": d.n_tasks, "n_threads": len(d.locations), "n_nodes": d.n_nodes,
                "duration_ns": duration}

    @property
    def n_events(self) -> int:
        """Events of the CPU locations, as the definitions count them."""
        return sum(loc.n_events for loc in self.defs.locations)

    def content_files(self) -> list[Path]:
        """Anchor, global definitions and every file of the event folder (sorted): the run's identity."""
        folder = self.path.with_suffix("")
        return [self.path, self.path.with_suffix(".def"), *sorted(p for p in folder.iterdir() if p.is_file())]

    # ------------------------------------------------------------------ streaming
    def _parts(self, run_id: str, progress: Callable[[int], None] | None,
               calls: CallStore) -> Generator[TablePart, None, ReadSummary]:
        """Bursts parts location by location (``progress`` gets bytes of event files read); the calls go to
        ``calls``, attached at the end to the messages matched across locations."""
        import _otf2

        self.warnings = list(self.defs.warnings)  # what reading adds is found again on every read
        assembler = BurstAssembler(run_id, source=self.path)
        read = _ReadState(run_id, p2p=P2pRecords(self.defs.comm_ranks, self.defs.self_comms, self.path,
                                                 calls.folder / "p2p" if calls.folder is not None else None))
        shared = _SharedParts(self.chunk_events)
        with _captured_otf2_errors() as messages, callback_interrupts(), stoppable(self.path, self.stop) as check:
            reader = self._open_reader(messages)
            handle = reader.handle
            try:
                self._read_local_definitions(_otf2, handle, messages, check)
                setters = {name: _callback_setter(name) for name in _EventBuffer().callbacks()}
                for loc in self._read_locations:
                    for batch, horizon, events in self._location_chunks(_otf2, handle, loc, setters, messages, read,
                                                                        progress, check):
                        h = pl.DataFrame(
                            {"appl": [1], "task": [loc.task], "thread": [loc.thread], "time_ns": [horizon]},
                            schema=HORIZON_SCHEMA,
                        )
                        yield from shared.add(read.assembled(*assembler.feed_parts(batch, h), calls))
                        if events.height:
                            read.n_events += events.height
                            yield from shared.add([TablePart("events", events)])
            finally:
                with contextlib.suppress(Exception):
                    _otf2.Reader_CloseEvtFiles(handle)
                reader.close()
        yield from shared.add(read.assembled(*assembler.finish_parts(), calls))
        yield from shared.rest()
        matched = read.p2p.matched(check_order=not self.salvage)
        for said in check_pairing(matched, self.path, self.salvage, self._twins):  # attack 8 B8: moved events files
            self._warn(said)
        with_messages = calls.with_messages(matched, self.path)  # refuses wrapped message bytes
        return ReadSummary(
            calls=with_messages, messages=matched, message_ends=calls.message_ends,
            thread_nodes=pl.DataFrame(schema=THREAD_NODE_SCHEMA),
            counters=tuple(assembler.counters), n_bursts=read.n_bursts, n_calls=calls.n_calls, n_uncore=0,
            n_events=read.n_events, n_records=read.n_records, last_time_ns=read.last_ns, warnings=tuple(self.warnings),
            communicators=communicator_members(self.defs.comm_ranks, self.defs.self_comms))

    def _location_chunks(self, _otf2, handle, loc: _Location, setters: dict, messages: list[str],
                         read: _ReadState, progress: Callable[[int], None] | None,
                         check: Callable[[], None]) -> Iterator[tuple[RecordBatch, int]]:
        """The events of one location, ``chunk_events`` at a time, as (record batch, horizon ns); the C library's
        failures and a location that ends before the events its definitions announce are bad input. ``check``
        raises before a chunk when the read is stopped."""
        buf = _EventBuffer()
        pointers = buf.callbacks()  # referenced until the location is read: the C library calls them
        conv = _LocationConverter(self.defs, loc, self.path, read.run_id)
        evt_bytes = loc.evt_file.stat().st_size
        try:
            evt_reader = _otf2.Reader_GetEvtReader(handle, loc.ref)
            cbs = _otf2.EvtReaderCallbacks_New()
            for name, fp in pointers.items():
                setters[name](cbs, fp)
            _otf2.Reader_RegisterEvtCallbacks(handle, evt_reader, cbs, None)
            _otf2.EvtReaderCallbacks_Delete(cbs)
        except _otf2.Error as exc:
            raise TraceFormatError(loc.evt_file, None, _library_reason(exc, messages)) from None
        n_read, reported, final = 0, 0, False
        limit = self._whole.get(loc.ref)  # a cut file: never past its whole events (the library reads garbage there)
        while not final:
            check()
            want = self.chunk_events if limit is None else min(self.chunk_events, limit - n_read)
            try:
                n = _read_local_events(_otf2, handle, evt_reader, want) if want > 0 else 0
            except _otf2.Error as exc:
                n = len(buf.r_pos) + len(buf.m_pos) + len(buf.p_pos) + len(buf.c_pos)
                cut = TruncatedTraceError(loc.evt_file, None, f"event {n_read + n + 1}: "
                                          + _library_reason(exc, messages))
                if not self.salvage:
                    raise cut from None
                self._warn(f"{cut} (--salvage: kept the events before the cut)")
                final = True
            n_read += n
            final = final or n < want or want <= 0 or n_read == limit
            for k, arr in ((1, buf.r_pos), (2, buf.m_pos), (3, buf.p_pos), (4, buf.c_pos)):
                read.n_records[k] += len(arr)
            batch, p2p, horizon = conv.convert(buf, final)
            _clear(buf)
            if p2p.height:
                read.p2p.add(p2p)
            read.untraced.add(conv.untraced_at)
            yield batch, horizon, conv.events
            if progress:
                done = evt_bytes if final else min(evt_bytes, evt_bytes * n_read // max(loc.n_events, 1))
                progress(done - reported)
                reported = done
        _otf2.Reader_CloseEvtReader(handle, evt_reader)
        if loc.n_events and n_read > loc.n_events:  # attack 8 B8: the file of a location that recorded more
            raise TraceFormatError(loc.evt_file, None, f"{n_read} events, more than the {loc.n_events} the definitions "
                                   f"announce for location {loc.ref} (rank {loc.task - 1}, thread {loc.thread}): the "
                                   "events file of another location or another run (restore the archive)")
        if loc.n_events and n_read < loc.n_events:
            self._fell_short(loc, n_read)
        if loc.n_events and n_read == loc.n_events:  # attack 9 C9: `cat 1.evt 1.evt > 1.evt` read as the original
            self._say_trailing(loc)
        read.last_ns = max(read.last_ns, conv.state.last_ns)
        self._location_warnings(conv)

    def _fell_short(self, loc: _Location, n_read: int) -> None:
        """Refuse (salvage: say) a location whose ``n_read`` events fall short of those its definitions announce:
        as chunks whose rest OTF2 skipped (an end-of-chunk record before a chunk's last event, a record's type
        byte zeroed: the events after them were read, :func:`~.evt_file.skipped_events`), else as cut."""
        skipped = skipped_events(loc.evt_file, self._event_chunk)
        if skipped:
            n = sum(s.last - s.first + 1 for s in skipped)
            where = ", ".join(f"{s.first} to {s.last} (end-of-chunk record at byte {s.at})" for s in skipped[:3])
            more = f" and {len(skipped) - 3} more chunks" if len(skipped) > 3 else ""
            reason = (f"{n} of the {loc.n_events} events the definitions announce are skipped by OTF2: events "
                      f"{where}{more}, each chunk ended early by a record's type byte zeroed?")
            if not self.salvage:
                raise TraceFormatError(loc.evt_file, None, f"{reason} (--salvage reads the others)")
            self._warn(f"{loc.evt_file}: {reason} (--salvage: kept the {n_read} others)")
            return
        cut = TruncatedTraceError(loc.evt_file, None, f"{n_read} of the {loc.n_events} events the definitions "
                                  "announce")
        if not self.salvage:
            raise cut
        if not any(str(loc.evt_file) in w for w in self.warnings):
            self._warn(f"{cut} (--salvage: kept the events before the cut)")

    def _say_trailing(self, loc: _Location) -> None:
        """Warn of bytes after the events the definitions announce for ``loc`` (OTF2 reads up to the file's
        END_OF_FILE record; found as the trace opened): said, not refused (:mod:`.evt_file`)."""
        if (extra := self._trailing.get(loc.ref)) is not None:
            at, n = extra
            self._warn(f"{loc.evt_file}: {n} bytes after the {loc.n_events} events the definitions announce for "
                       f"location {loc.ref} (from byte {at}) are not read: OTF2 ends the events there (data appended "
                       "to the file? restore the archive to be sure)")

    @property
    def _read_locations(self) -> list[_Location]:
        """The CPU locations whose events are read: all but those without events (or, salvaged, without files)."""
        return [loc for loc in self.defs.locations if loc not in self._unread]

    def _read_local_definitions(self, _otf2, handle, messages: list[str], check: Callable[[], None]) -> None:
        """Select the CPU locations to read and read their local definitions (mapping tables, clock offsets);
        ``check`` raises before each location's when the read is stopped."""
        for loc in self._read_locations:
            _otf2.Reader_SelectLocation(handle, loc.ref)
        try:
            _otf2.Reader_OpenDefFiles(handle)
            for loc in self._read_locations:
                check()
                def_reader = _otf2.Reader_GetDefReader(handle, loc.ref)
                if def_reader:
                    with _python_callback_errors(messages):
                        _otf2.Reader_ReadAllLocalDefinitions(handle, def_reader)
                    _otf2.Reader_CloseDefReader(handle, def_reader)
            _otf2.Reader_CloseDefFiles(handle)
            _otf2.Reader_OpenEvtFiles(handle)
        except _otf2.Error as exc:
            raise TraceFormatError(self.path.with_suffix(""), None, _library_reason(exc, messages)) from None

    def _location_warnings(self, conv: _LocationConverter) -> None:
        loc = conv.loc
        if conv.n_out_of_order:
            self._warn(f"{loc.evt_file}: {conv.n_out_of_order} records with a timestamp before the previous "
                                 "record's; ordered by (timestamp, record order)")
        if conv.n_repeated:  # worded as the Paraver reader's twin entries (attack 9 C6)
            self._warn(f"{loc.evt_file}: {conv.n_repeated} MPI records repeat the record before them on location "
                       f"{loc.ref} (rank {loc.task - 1}, thread {loc.thread}), alike in time and every field (records "
                       "written twice?); each read once, as a record written twice cannot be two MPI calls or two "
                       "messages")
        if conv.dropped_open_call:
            self._warn(f"{loc.evt_file}: rank {loc.task - 1} ends inside {conv.dropped_open_call}; "
                                 "that call was dropped")


def _read_local_events(_otf2, handle, evt_reader, want: int) -> int:
    """Read up to ``want`` events of one location through the callbacks; a Ctrl-C or SIGTERM one of them met stops
    the read here (also when it made the C library stop with an error, which is then no cut)."""
    try:
        return _otf2.Reader_ReadLocalEvents(handle, evt_reader, want)
    finally:
        raise_callback_interrupt()
