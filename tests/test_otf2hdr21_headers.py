"""An OTF2 events file cut short whose chunk headers are damaged (attack 21 F3): a header's event numbers never set
how far libotf2 reads. The count of whole events came from the last chunk header's first-event number as read: set
to 2^62, --salvage asked libotf2 for that many events, past the cut (it never ended); set to 1, it kept the last
chunk's few events where the chunks before hold nearly all. Now each header must number its events on from the
chunk before's: one that does not is refused, naming the file and its byte, or salvaged up to the chunk before it."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import TraceFormatError, TruncatedTraceError
from synthtrace.tracelib.formats.otf2 import Otf2Trace

CHUNK = 256 * 1024  # OTF2's smallest events chunk (bytes)
N_EVENTS = 60_000  # an Enter and a Leave of one region per step
BIG = 2**62  # a first-event number no file holds


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """One rank's events in three chunks, written by the ``otf2`` wheel."""
    from testing.otf2_variants import region_steps

    root = region_steps(tmp_path_factory.mktemp("otf2hdr") / "whole", N_EVENTS // 2, CHUNK)
    assert (root / "traces" / "0.evt").stat().st_size > 2 * CHUNK
    return root


def _numbers(data: bytes, offset: int) -> tuple[int, int]:
    """(first, last) event numbers of the chunk header at ``offset`` (the wheel writes little-endian here)."""
    assert data[offset:offset + 2] == bytes([3, 0x42])
    return int.from_bytes(data[offset + 2:offset + 10], "little"), int.from_bytes(data[offset + 10:offset + 18],
                                                                                   "little")


def _damaged(archive: Path, tmp_path: Path, size: int, header: int, field: int, number: int) -> Path:
    """A copy of ``archive`` whose events file is cut to ``size`` bytes and the header of its chunk at byte
    ``header`` numbers its first (``field`` 0) or last (1) event ``number``."""
    copy = tmp_path / "damaged"
    shutil.copytree(archive, copy)
    evt = copy / "traces" / "0.evt"
    data = bytearray(evt.read_bytes()[:size])
    at = header + 2 + 8 * field
    data[at:at + 8] = number.to_bytes(8, "little")
    evt.write_bytes(bytes(data))
    return copy


def _salvaged(copy: Path) -> tuple[int, list[str]]:
    """Events read from ``copy`` under --salvage, and what was said."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _, _, summary = Otf2Trace(copy / "traces.otf2", salvage=True).read_tables("r")
    return summary.n_records[1], [str(w.message) for w in said]


# (cut at byte, header at byte, its field: 0 first / 1 last, the number written there)
CASES = {
    "last-chunk-first-event-2^62": (2 * CHUNK + 5000, 2 * CHUNK, 0, BIG),
    "last-chunk-first-event-1": (2 * CHUNK + 5000, 2 * CHUNK, 0, 1),
    "cut-header-after-a-last-event-2^62": (2 * CHUNK + 10, CHUNK, 1, BIG),
    "middle-chunk-first-event-0": (2 * CHUNK + 5000, CHUNK, 0, 0),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_chunk_header_is_refused_naming_its_byte(archive, tmp_path, case):
    """Before: the refusal said "4611686018427388083 of the 60000 events ... are whole", from the header as read."""
    size, header, field, number = CASES[case]
    copy = _damaged(archive, tmp_path, size, header, field, number)
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(copy / "traces.otf2")
    assert type(raised.value) is not TruncatedTraceError  # damage, not a mere cut
    assert raised.value.path == str(copy / "traces" / "0.evt")
    assert f"damaged chunk header at byte {header} " in raised.value.reason
    assert "--salvage" in raised.value.reason


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(CASES))
def test_salvage_reads_the_chunks_before_a_damaged_header(archive, tmp_path, case):
    """Before: the 2^62 lies never ended (libotf2 was asked for that many events, past the cut) and the lie of 1
    kept the last chunk's ~180 events of the ~60,000 whole. Now the events of the chunks whose headers agree."""
    size, header, field, number = CASES[case]
    original = (archive / "traces" / "0.evt").read_bytes()
    kept = _numbers(original, header - CHUNK)[1]  # the events of the chunks before the damaged header
    n, said = _salvaged(_damaged(archive, tmp_path, size, header, field, number))
    assert n == kept and n > 0
    damage = [s for s in said if "damaged chunk header" in s]
    assert len(damage) == 1 and f"kept the {kept} events of the chunks before byte {header}" in damage[0]


def test_a_cut_file_whose_headers_agree_still_salvages_every_whole_event(archive, tmp_path):
    """The check takes nothing from a file only cut: every event whole before the cut is read."""
    original = (archive / "traces" / "0.evt").read_bytes()
    first_of_last, _ = _numbers(original, 2 * CHUNK)
    copy = _damaged(archive, tmp_path, 2 * CHUNK + 5000, 2 * CHUNK, 0, first_of_last)  # the number it held
    n, said = _salvaged(copy)
    assert n >= first_of_last and not [s for s in said if "damaged chunk header" in s]
