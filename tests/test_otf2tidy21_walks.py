"""The OTF2 reader's checks of an archive's files before libotf2 reads them (session 21): each events file's last
chunk walked once, each definitions file opened once, the events libotf2 skips after an end-of-chunk record inside
a chunk said, and a definitions file of several chunks (or one over 256 KiB) checked as one of a single small chunk
is, reading at most one chunk of it."""
from __future__ import annotations

import builtins
import shutil
import warnings
from collections import Counter
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import TraceFormatError, TruncatedTraceError
from synthtrace.tracelib.formats.otf2 import Otf2Trace, definitions, evt_file

CHUNK = 256 * 1024  # OTF2's smallest chunk (bytes)


class _Opens:
    """Files the reader's own Python code opens (``open`` in its modules), and bytes read from each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.opens: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        for module in (definitions, evt_file):
            monkeypatch.setattr(module, "open", self._open, raising=False)

    def _open(self, path, *args, **kwargs):
        fh = builtins.open(path, *args, **kwargs)
        name, read = str(path), fh.read
        self.opens[name] += 1

        def counted(*a):
            data = read(*a)
            self.bytes[name] += len(data)
            return data
        fh.read = counted
        return fh


def _read(anchor: Path, **kw):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        tables = Otf2Trace(anchor, **kw).read_tables("r")
    return tables, [str(w.message) for w in said]


@pytest.mark.real_traces
def test_each_file_of_a_real_archive_is_opened_once_and_each_events_file_walked_once(tmp_path, monkeypatch):
    """Before: each events file's last chunk was read and walked twice (the cut when the trace opened, the bytes
    after the events after the read: 1 MiB more per location at Score-P's chunk size), and each definitions file
    opened twice (its first 16 bytes, then its records)."""
    from testing.traces import copy_archive

    archive = copy_archive("ping-pong-otf2", tmp_path / "pp")
    opens = _Opens(monkeypatch)
    walk, walks = evt_file._walk, []

    def counted_walk(chunk, little, timed):
        walks.append(timed)
        return walk(chunk, little, timed)
    monkeypatch.setattr(evt_file, "_walk", counted_walk)
    (_, calls, _), _ = _read(archive / "traces.otf2")
    assert calls.height == 40  # read as ever: 20 MPI calls a rank
    folder = archive / "traces"
    files = [archive / "traces.def", *(folder / f"{r}.def" for r in (0, 1)), *(folder / f"{r}.evt" for r in (0, 1))]
    assert {f: opens.opens[str(f)] for f in files} == dict.fromkeys(files, 1), opens.opens
    assert walks.count(True) == 2 and walks.count(False) == 3  # a walk per events file, per definitions file


def test_the_last_chunk_of_an_events_file_of_several_chunks_is_read_once(tmp_path, monkeypatch):
    from testing.otf2_variants import region_steps

    root = region_steps(tmp_path / "steps", 30_000, CHUNK)
    evt = root / "traces" / "0.evt"
    size = evt.stat().st_size
    assert size > 2 * CHUNK
    opens = _Opens(monkeypatch)
    (_, _, summary), _ = _read(root / "traces.otf2")
    assert summary.n_records[1] == 60_000
    # its magic and each chunk once: its header (which chunk holds the last event: review21) and its timestamps
    # (none going back from one chunk to the next: attack 22 F1)
    assert opens.bytes[str(evt)] <= 16 + size


@pytest.fixture(scope="module")
def steps(tmp_path_factory) -> Path:
    """One rank's 60,000 events in three chunks of 256 KiB."""
    from testing.otf2_variants import region_steps

    return region_steps(tmp_path_factory.mktemp("steps") / "whole", 30_000, CHUNK)


def _first_chunk_zeroed(steps: Path, tmp_path: Path) -> tuple[Path, int]:
    """A copy of ``steps`` whose first chunk's first event record (byte 27, after the header and a timestamp) has
    its type byte zeroed: OTF2's END_OF_CHUNK token. Returns the anchor and the events of that chunk."""
    copy = tmp_path / "zeroed"
    shutil.copytree(steps, copy)
    evt = copy / "traces" / "0.evt"
    data = bytearray(evt.read_bytes())
    assert data[18] == 5 and data[27] == 12  # a timestamp, then an Enter
    data[27] = 0
    evt.write_bytes(bytes(data))
    return copy / "traces.otf2", int.from_bytes(data[10:18], "little")


def test_events_libotf2_skips_inside_a_chunk_before_the_last_are_refused_naming_them(steps, tmp_path):
    """Before: libotf2 went on with the next chunk without a word; refused as "36171 of the 60000 events the
    definitions announce", said as a cut (under --salvage "kept the events before the cut", the events after the
    skipped ones kept too)."""
    anchor, in_first = _first_chunk_zeroed(steps, tmp_path)
    with pytest.raises(TraceFormatError) as raised:
        _read(anchor)
    assert not isinstance(raised.value, TruncatedTraceError)
    reason = raised.value.reason
    assert raised.value.path == str(anchor.parent / "traces" / "0.evt")
    assert f"{in_first} of the 60000 events" in reason and f"events 1 to {in_first}" in reason, reason
    assert "byte 27" in reason and "--salvage" in reason


def test_salvage_says_which_events_libotf2_skipped(steps, tmp_path):
    anchor, in_first = _first_chunk_zeroed(steps, tmp_path)
    (_, _, summary), said = _read(anchor, salvage=True)
    assert summary.n_records[1] == 60_000 - in_first
    (skipped,) = [w for w in said if "0.evt" in w]
    assert f"events 1 to {in_first}" in skipped and "before the cut" not in skipped, said


@pytest.mark.parametrize("damage", ["cut-inside-the-last-chunk", "last-chunk-record-zeroed"])
def test_a_definitions_file_of_several_chunks_is_checked_reading_one_chunk(tmp_path, monkeypatch, damage):
    """Before: a definitions file over 256 KiB was left to libotf2 (only its first chunk was walked, and it ends
    with an end-of-chunk record), which then read the cut chunk's buffer past the data."""
    from testing.otf2_variants import wide_definitions

    root = wide_definitions(tmp_path / "wide", 4000, CHUNK)
    defs = root / "traces.def"
    data = bytearray(defs.read_bytes())
    last = len(data) // CHUNK * CHUNK
    assert len(data) > CHUNK and len(data) > last + 1000 and data[last] == 3  # a chunk header: several chunks
    opens = _Opens(monkeypatch)
    Otf2Trace(root / "traces.otf2")  # whole: read
    assert opens.bytes[str(defs)] <= 16 + len(data) - last  # its magic and its last chunk
    if damage == "cut-inside-the-last-chunk":
        data = data[:last + 500]
    else:
        data[last + 18] = 0  # the last chunk's first record
    defs.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(root / "traces.otf2")
    assert raised.value.path == str(defs) and raised.value.reason.startswith("damaged OTF2 definitions")


def test_a_definitions_file_of_one_chunk_over_256_kib_with_a_record_zeroed_is_refused(tmp_path):
    """Before: an end-of-chunk record in a definitions file over 256 KiB was taken for a full chunk's end (the
    file's chunk size was not known), and libotf2 read on past the file's data."""
    from testing.otf2_variants import wide_definitions

    root = wide_definitions(tmp_path / "wide", 4000, 4 * 1024 * 1024)  # the writer's default chunk: one chunk
    defs = root / "traces.def"
    data = bytearray(defs.read_bytes())
    assert len(data) > CHUNK
    data[18] = 0  # the first record
    defs.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(root / "traces.otf2")
    assert raised.value.path == str(defs) and "end-of-chunk record at byte 18" in raised.value.reason
