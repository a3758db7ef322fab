"""The chunk order check of an OTF2 events file (attack 22 F1, chunk23), made cheap and closed at its ends:
- review23 item 5: opening an archive read and walked every byte of every events file to find each chunk's first
  timestamp (~4.5 s per GiB); a chunk's first record is that timestamp, so its header and first record are read;
- chunk23's leftovers: a cut last chunk holding another chunk's records was not compared with the chunk before it
  (--salvage kept its events); of two swapped chunks --salvage kept the first, out of place too; the events
  dropped are now counted in the warning."""
from __future__ import annotations

import builtins
import shutil
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.otf2 import Otf2Trace, evt_file

from tests import test_lead22_otf2_chunk_order as chunk_order

CHUNK, STEPS, _first_event = chunk_order.CHUNK, chunk_order.STEPS, chunk_order._first_event
archive = chunk_order.archive  # one rank's events in six chunks of 256 KiB, written by the otf2 wheel


def test_opening_reads_each_chunk_s_header_and_first_record_and_the_last_chunk(archive, monkeypatch):
    """What ``events_end`` reads of a sound file of six chunks: 27 bytes of each chunk (header, first timestamp)
    and the last chunk whole; it was every byte."""
    evt = archive / "traces" / "0.evt"
    size = evt.stat().st_size
    read: list[int] = []

    class Counted:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def read(self, n=-1):
            data = self.fh.read(n)
            read.append(len(data))
            return data

        def seek(self, *args):
            return self.fh.seek(*args)

    monkeypatch.setattr(evt_file, "open", lambda *a, **k: Counted(builtins.open(*a, **k)), raising=False)
    end = evt_file.events_end(evt, CHUNK, 2 * STEPS)
    assert end.cut is None and end.trailing is None
    chunks = -(-size // CHUNK)
    assert sum(read) <= 16 + (size - (chunks - 1) * CHUNK) + chunks * 27, (sum(read), size)


def _last_chunk_from(archive: Path, tmp_path: Path, back: int, cut: int) -> tuple[Path, int]:
    """(a copy of ``archive`` whose last chunk holds the records of the chunk ``back`` chunks before it (0: its
    own) under its own header, the file cut ``cut`` bytes into that chunk; the byte of that chunk)."""
    copy = tmp_path / "lastcopied"
    shutil.copytree(archive, copy)
    evt = copy / "traces" / "0.evt"
    data = bytearray(evt.read_bytes())
    last = (len(data) - 1) // CHUNK * CHUNK
    assert 18 < cut < len(data) - last
    source = last - back * CHUNK
    data[last + 18:last + cut] = data[source + 18:source + cut]
    evt.write_bytes(bytes(data[:last + cut]))
    return copy, last


@pytest.mark.timeout(120)
def test_a_cut_last_chunk_holding_the_chunk_before_s_records_is_out_of_time(archive, tmp_path):
    """Refused as out of time order at the last chunk's byte (it was 'cut short'); --salvage keeps the chunks
    before it, not the copied records (it kept them as the location's last events)."""
    copy, last = _last_chunk_from(archive, tmp_path, 1, 5_000)
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(copy / "traces.otf2").read_tables("r")
    assert f"chunk out of time order at byte {last} of an events file cut short" in raised.value.reason
    kept = _first_event((archive / "traces" / "0.evt").read_bytes(), last) - 1
    said, summary = chunk_order.salvaged(copy / "traces.otf2")
    damage = [w for w in said if "chunk out of time order" in w]
    assert len(damage) == 1, said
    assert f"kept the {kept} events of the chunks before byte {last}, dropped the {2 * STEPS - kept}" in damage[0]
    assert sum(summary.n_records.values()) == kept


@pytest.mark.timeout(120)
def test_a_cut_last_chunk_as_written_is_still_cut(archive, tmp_path):
    """The check costs a cut file nothing: its last chunk's records are its own, so it is cut short (refused,
    --salvage keeps the events whole before the cut)."""
    copy, _ = _last_chunk_from(archive, tmp_path, 0, 5_000)
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(copy / "traces.otf2").read_tables("r")
    assert "cut short" in raised.value.reason and "out of time" not in raised.value.reason
