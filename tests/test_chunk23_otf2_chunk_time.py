"""An OTF2 events chunk copied over the next, or two chunks swapped, with the 18-byte chunk headers edited back to
the numbers the file had (attack 22 F1): the headers chain, so the check of attack 21 F7 passed, and libotf2 read
one chunk's events twice and dropped the other's (95,323 events lost, exit 0, one "records before the previous"
warning), or read swapped chunks silently reordered. A location's events file is written by one thread in time
order: a chunk that begins no later than the chunk before it began is damage (a chunk copied over the next begins
where its original did; of two swapped, the later begins first). The file is refused naming the file, the chunk's
byte and why; --salvage reads the chunks before it. A clock stepping back a tick where a chunk begins is not
(attack 23 F8: the whole trace was refused, --salvage dropped the rest of the location)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.otf2 import Otf2Trace

from tests import test_lead22_otf2_chunk_order as chunk_order

CHUNK, _first_event = chunk_order.CHUNK, chunk_order._first_event
archive = chunk_order.archive  # one rank's events in five chunks of 256 KiB, as attack 21 F7's test writes them


def _headers_kept(archive: Path, tmp_path: Path, chunks: list[int]) -> Path:
    """A copy of ``archive`` whose events file's first chunks hold the records of ``chunks`` (indices into the
    original's) under the original's chunk headers (18 bytes each): the event numbers chain as written."""
    copy = tmp_path / "rearranged"
    shutil.copytree(archive, copy)
    evt = copy / "traces" / "0.evt"
    data = bytearray(evt.read_bytes())
    original = bytes(data)
    assert len(original) > len(chunks) * CHUNK  # every chunk moved is whole
    for place, source in enumerate(chunks):
        at = place * CHUNK
        data[at + 18:at + CHUNK] = original[source * CHUNK + 18:(source + 1) * CHUNK]
    evt.write_bytes(bytes(data))
    return copy


#: chunk order of the first chunks -> byte of the first chunk whose time goes back before the chunk before it
CASES = {"chunk-2-copied-over-3": ([0, 1, 2, 2], 3 * CHUNK), "chunks-2-and-3-swapped": ([0, 1, 3, 2], 3 * CHUNK),
         "chunks-0-and-3-swapped": ([3, 1, 2, 0], CHUNK)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(CASES))
def test_a_chunk_going_back_in_time_is_refused_naming_the_byte(archive, tmp_path, case):
    chunks, damaged_at = CASES[case]
    copy = _headers_kept(archive, tmp_path, chunks)
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(copy / "traces.otf2").read_tables("r")
    assert Path(raised.value.path) == copy / "traces" / "0.evt"
    reason = raised.value.reason
    assert f"chunk out of time order at byte {damaged_at} of an events file" in reason
    assert "no later than the chunk before it began" in reason


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(CASES))
def test_salvage_reads_the_chunks_before_the_one_going_back(archive, tmp_path, case):
    chunks, damaged_at = CASES[case]
    # of two swapped the first is out of place too: dropped from it (reader24, chunk23's leftover)
    kept_before = {"chunks-2-and-3-swapped": 2 * CHUNK, "chunks-0-and-3-swapped": 0}.get(case, damaged_at)
    kept = _first_event((archive / "traces" / "0.evt").read_bytes(), kept_before) - 1 if kept_before else 0
    said, summary = chunk_order.salvaged(_headers_kept(archive, tmp_path, chunks) / "traces.otf2")
    damage = [w for w in said if "no later than the chunk before it began" in w]
    assert len(damage) == 1 and f"kept the {kept} events of the chunks before byte {kept_before}" in damage[0]
    assert sum(summary.n_records.values()) == kept
    assert not [w for w in said if "records with a timestamp before" in w]


def _stamps(data: bytes, start: int) -> list[tuple[int, int]]:
    """(byte, ticks) of the timestamp records (token 5, 8 bytes little-endian) of the chunk at ``start``, as far as
    the records are small (type, length byte, body): enough for the chunk's first and last."""
    at, out = start + 18, []
    while at < start + CHUNK:
        if data[at] == 5:
            out.append((at, int.from_bytes(data[at + 1:at + 9], "little")))
            at += 9
        elif data[at] in (0, 1, 2):
            break
        else:
            at += 2 + data[at + 1]
    return out


@pytest.mark.timeout(120)
def test_a_clock_stepping_back_a_tick_where_a_chunk_begins_is_read(archive, tmp_path):
    """Chunk 1's first timestamp one tick before chunk 0's last (a TSC stepping back at a buffer flush): the file is
    read whole, as a step back inside a chunk is, not refused as a chunk copied over another."""
    copy = tmp_path / "tsc"
    shutil.copytree(archive, copy)
    evt = copy / "traces" / "0.evt"
    data = bytearray(evt.read_bytes())
    (at, _), last = _stamps(data, CHUNK)[0], _stamps(data, 0)[-1][1]
    data[at + 1:at + 9] = (last - 1).to_bytes(8, "little")
    evt.write_bytes(bytes(data))
    whole = Otf2Trace(archive / "traces.otf2").read_tables("r")[2]
    stepped = Otf2Trace(copy / "traces.otf2").read_tables("r")[2]
    assert sum(stepped.n_records.values()) == sum(whole.n_records.values())
