"""An OTF2 events file whose chunks are out of sequence, the file otherwise whole (attack 21 F7): a chunk copied over
the next (``dd`` of a chunk, a bad block remapped) or two chunks swapped. libotf2 reads the chunks as they lie:
one chunk's events twice, the other's never, and the only word was one record out of time order. Each chunk header
must number its events on from the chunk before's: the file is refused naming its byte, or under --salvage read up
to the chunk out of sequence."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.otf2 import Otf2Trace
from synthtrace.tracelib.formats.source import ReadSummary

CHUNK = 256 * 1024  # OTF2's smallest events chunk (bytes)
STEPS = 60_000  # an Enter and a Leave of one region per step: five chunks


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """One rank's events in several chunks, written by the ``otf2`` wheel."""
    from testing.otf2_variants import region_steps

    root = region_steps(tmp_path_factory.mktemp("chunkorder") / "whole", STEPS, CHUNK)
    assert (root / "traces" / "0.evt").stat().st_size > 3 * CHUNK
    return root


def _first_event(data: bytes, offset: int) -> int:
    """The first event number of the chunk header at ``offset`` (little-endian, as the wheel writes here)."""
    assert data[offset:offset + 2] == bytes([3, 0x42])
    return int.from_bytes(data[offset + 2:offset + 10], "little")


def _rearranged(archive: Path, tmp_path: Path, chunks: list[int]) -> Path:
    """A copy of ``archive`` whose events file's first chunks are ``chunks`` (indices into the original's), the
    rest as written: its size unchanged."""
    copy = tmp_path / "rearranged"
    shutil.copytree(archive, copy)
    evt = copy / "traces" / "0.evt"
    data = evt.read_bytes()
    head = b"".join(data[i * CHUNK:(i + 1) * CHUNK] for i in chunks)
    evt.write_bytes(head + data[len(chunks) * CHUNK:])
    return copy


CASES = {"chunk-2-copied-over-3": [0, 1, 2, 2], "chunks-1-and-2-swapped": [0, 2, 1, 3]}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(CASES))
def test_chunks_out_of_sequence_are_refused_naming_the_byte(archive, tmp_path, case):
    chunks = CASES[case]
    damaged_at = next(i for i, c in enumerate(chunks) if c != i) * CHUNK
    if case == "chunk-2-copied-over-3":
        damaged_at = 3 * CHUNK  # chunk 2 is where it belongs; its copy at 3 repeats its events
    copy = _rearranged(archive, tmp_path, chunks)
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(copy / "traces.otf2").read_tables("r")
    assert Path(raised.value.path) == copy / "traces" / "0.evt"
    assert f"damaged chunk header at byte {damaged_at} of an events file (" in raised.value.reason


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(CASES))
def test_salvage_reads_the_chunks_before_the_one_out_of_sequence(archive, tmp_path, case):
    chunks = CASES[case]
    damaged_at = 3 * CHUNK if case == "chunk-2-copied-over-3" else CHUNK
    original = (archive / "traces" / "0.evt").read_bytes()
    kept = _first_event(original, damaged_at) - 1  # the events of the chunks before it, as written
    said, summary = salvaged(_rearranged(archive, tmp_path, chunks) / "traces.otf2")
    damage = [w for w in said if "damaged chunk header" in w]
    assert len(damage) == 1 and f"kept the {kept} events of the chunks before byte {damaged_at}" in damage[0]
    assert sum(summary.n_records.values()) <= kept


def salvaged(anchor: Path) -> tuple[list[str], ReadSummary]:
    """(the warnings said, the summary) of reading the archive ``anchor`` under --salvage."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _, _, summary = Otf2Trace(anchor, salvage=True).read_tables("r")
    return [str(w.message) for w in said], summary


def test_the_whole_file_reads_as_before(archive):
    """The chain costs nothing to a file as written: every event is read, nothing said."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _, _, summary = Otf2Trace(archive / "traces.otf2").read_tables("r")
    assert sum(summary.n_records.values()) == 2 * STEPS and not [w for w in said if "chunk" in str(w.message)]
