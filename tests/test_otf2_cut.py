"""An OTF2 events file cut before its end-of-file record (a copy interrupted, a job killed while it flushed).

The OTF2 library reads a chunk into a buffer of the chunk size and, past a short file's end, parses what the buffer
held before: the previous chunk's stale records (read again and again: the ingest never ended) or uninitialised
memory (valgrind; a pytest worker crashed on the real ping-pong archive cut at 500 bytes). The reader now finds the
cut from the file's own bytes before the library reads it: refused in one line naming the file and the byte, and
under --salvage exactly the events whole before the cut are read."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import TraceFormatError, TruncatedTraceError
from synthtrace.tracelib.formats.otf2 import Otf2Trace

CHUNK = 256 * 1024  # OTF2's smallest events chunk (bytes)
N_EVENTS = 60_000  # an Enter and a Leave of one region per step of 10 ticks


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """One rank's events in three chunks, written by the ``otf2`` wheel."""
    from testing.otf2_variants import region_steps

    root = region_steps(tmp_path_factory.mktemp("otf2cut") / "whole", N_EVENTS // 2, CHUNK)
    assert (root / "traces" / "0.evt").stat().st_size > 2 * CHUNK
    return root


def _cut(archive: Path, tmp_path: Path, size: int) -> Path:
    copy = tmp_path / "cut"
    shutil.copytree(archive, copy)
    evt = copy / "traces" / "0.evt"
    evt.write_bytes(evt.read_bytes()[:size])
    return copy


def _header_events(evt: Path, offset: int) -> tuple[int, int]:
    """(first, last) event numbers the writer put in the header of the chunk at ``offset`` (little-endian here)."""
    head = evt.read_bytes()[offset:offset + 18]
    assert head[:2] == bytes([3, 0x42])
    return int.from_bytes(head[2:10], "little"), int.from_bytes(head[10:18], "little")


def _last_time(n_events: int) -> int:
    """The time (ticks from the first event) of event ``n_events``, counted from 1, of :func:`archive`."""
    step = (n_events - 1) // 2
    return 10 * step + 5 * ((n_events - 1) % 2)


@pytest.mark.parametrize("where", ["at-the-chunk-boundary", "inside-a-chunk-header", "inside-a-record"])
def test_a_cut_events_file_is_refused_before_the_library_reads_it(archive, tmp_path, where):
    """Before: ``inside-a-record`` and ``inside-a-chunk-header`` never ended (the library parsed the first
    chunk's stale bytes as the second's, over and over)."""
    size = {"at-the-chunk-boundary": CHUNK, "inside-a-chunk-header": CHUNK + 10,
            "inside-a-record": CHUNK + 5000}[where]
    cut = _cut(archive, tmp_path, size)
    with pytest.raises(TruncatedTraceError) as raised:
        Otf2Trace(cut / "traces.otf2")
    assert raised.value.path == str(cut / "traces" / "0.evt")
    assert f"({size} bytes)" in raised.value.reason and "--salvage" in raised.value.reason


@pytest.mark.parametrize("where", ["at-the-chunk-boundary", "inside-a-chunk-header", "inside-a-record"])
def test_salvage_reads_exactly_the_events_whole_before_the_cut(archive, tmp_path, where):
    evt = archive / "traces" / "0.evt"
    _, in_first = _header_events(evt, 0)
    first_of_second, _ = _header_events(evt, CHUNK)
    per_event = (CHUNK - 18) / in_first  # bytes of an event record and its timestamp, about
    size = {"at-the-chunk-boundary": CHUNK, "inside-a-chunk-header": CHUNK + 10,
            "inside-a-record": CHUNK + 5000}[where]
    cut = _cut(archive, tmp_path, size)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        trace = Otf2Trace(cut / "traces.otf2", salvage=True)
        _, _, summary = trace.read_tables("r")
    n = summary.n_records[1]
    if where == "inside-a-record":
        assert abs(n - (first_of_second - 1 + (size - CHUNK - 18) / per_event)) <= 1
    else:  # nothing of the second chunk is whole: the first chunk's events, as its header numbers them
        assert n == in_first
    assert summary.last_time_ns == _last_time(n)  # the original's first n events, not stale or garbage ones
    cut_said = [str(w.message) for w in said if "cut short" in str(w.message)]
    assert len(cut_said) == 1 and f"({size} bytes)" in cut_said[0] and f"{n} of the {N_EVENTS}" in cut_said[0]


def test_an_events_file_cut_inside_its_first_chunk_header_reads_no_event(archive, tmp_path):
    cut = _cut(archive, tmp_path, 17)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, calls, summary = Otf2Trace(cut / "traces.otf2", salvage=True).read_tables("r")
    assert summary.n_records[1] == 0 and calls.height == 0


def test_whole_archives_are_not_said_cut(archive):
    """The archive as written, and the real ones, read without a word about a cut."""
    from testing.traces import TRACES

    anchors = [archive / "traces.otf2", *sorted((TRACES / "otf2").glob("*/traces.otf2"))]
    for anchor in anchors:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            Otf2Trace(anchor).read_tables("r")
        assert not [w for w in said if "cut short" in str(w.message)], anchor


def _ping_pong(tmp_path: Path) -> Path:
    from testing.traces import copy_archive

    return copy_archive("ping-pong-otf2", tmp_path / "pp")


@pytest.mark.real_traces
@pytest.mark.parametrize("damage", ["end-of-file-record-overwritten", "record-type-zeroed"])
def test_a_full_size_events_file_without_its_end_of_file_record_is_refused(tmp_path, damage):
    """Attack 20 F10: the file keeps its size but its END_OF_FILE record is gone (its last 2 bytes overwritten), or
    a record's type byte is zeroed (OTF2's END_OF_CHUNK token): libotf2 then "loads the next chunk" from its buffer's
    uninitialised bytes. Refused up front naming the file; salvaged, the events before it are read."""
    archive = _ping_pong(tmp_path)
    evt = archive / "traces" / "0.evt"
    data = bytearray(evt.read_bytes())
    assert data[-2:] == bytes([2, 1]) and data[18] == 5  # END_OF_FILE, END_OF_BUFFER; the first timestamp
    if damage == "end-of-file-record-overwritten":
        data[-2:] = bytes([5, 0])
    else:
        data[27] = 0  # the record after the first timestamp
    evt.write_bytes(bytes(data))
    with pytest.raises(TruncatedTraceError) as raised:
        Otf2Trace(archive / "traces.otf2")
    assert raised.value.path == str(evt) and "cut short, no end-of-file record" in raised.value.reason
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, calls, summary = Otf2Trace(archive / "traces.otf2", salvage=True).read_tables("r")
    rank0 = calls.filter(calls["task"] == 1).height
    assert rank0 == (20 if damage == "end-of-file-record-overwritten" else 0)


@pytest.mark.real_traces
def test_the_event_a_library_failure_names_counts_every_record_read(tmp_path, monkeypatch):
    """Attack 20 F11: the library failing mid-read was said at "event 44" when 60 events had been read (only the
    region records were counted, not the message records). Here it fails after 7 events and 5 more."""
    import _otf2

    archive = _ping_pong(tmp_path)
    real, calls_made = _otf2.Reader_ReadLocalEvents, []

    def failing(handle, evt_reader, want):
        calls_made.append(want)
        if len(calls_made) == 2:
            real(handle, evt_reader, 5)  # delivered to the callbacks, then the failure
            raise _otf2.Error(_otf2.ERROR_INVALID_DATA)
        return real(handle, evt_reader, want)

    monkeypatch.setattr(_otf2, "Reader_ReadLocalEvents", failing)
    with pytest.raises(TruncatedTraceError, match=r"0\.evt: event 13: "):
        Otf2Trace(archive / "traces.otf2", chunk_events=7).read_tables("r")


@pytest.mark.real_traces
@pytest.mark.parametrize("damage", ["cut-in-half", "zeroed-inside"])
def test_damaged_global_definitions_are_refused_before_the_library_reads_them(tmp_path, damage):
    """Attack 20 F17: ``traces.def`` cut in half, or 500 bytes zeroed inside it (a zero where a record starts is
    OTF2's end-of-chunk token): libotf2 "loaded the next chunk" from uninitialised memory (valgrind), and what it
    made of it decided the outcome. Refused up front in one line naming the file."""
    archive = _ping_pong(tmp_path)
    defs = archive / "traces.def"
    data = bytearray(defs.read_bytes())
    if damage == "cut-in-half":
        data = data[:len(data) // 2]
    else:
        data[2000:2500] = bytes(500)
    defs.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(archive / "traces.otf2")
    assert raised.value.path == str(defs) and raised.value.reason.startswith("damaged OTF2 definitions")


@pytest.mark.real_traces
def test_damaged_local_definitions_are_refused_or_their_location_salvaged(tmp_path):
    """Attack 20 F17: ``1.def`` without its last 2 bytes (its end-of-file record): libotf2 read past it. Refused
    naming the file; --salvage reads the trace without that location, and says so."""
    archive = _ping_pong(tmp_path)
    local = archive / "traces" / "1.def"
    local.write_bytes(local.read_bytes()[:-2])
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(archive / "traces.otf2")
    assert raised.value.path == str(local), raised.value
    assert "damaged OTF2 definitions" in raised.value.reason
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _, calls, _ = Otf2Trace(archive / "traces.otf2", salvage=True).read_tables("r")
    assert set(calls.get_column("task").to_list()) == {1}
    assert any(str(local) in str(w.message) and "read without its events" in str(w.message) for w in said)
