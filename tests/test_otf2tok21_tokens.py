"""A byte of an OTF2 events file damaged into a token no chunk holds where a record starts (attack 21 F4: a record's
token set to 1, END_OF_BUFFER, or 3, CHUNK_HEADER). libotf2 never refused such a file: it looped, its memory
growing, until killed. The reader now refuses it before the library reads, naming the file and the byte; under
--salvage the events before the damaged byte are read."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.otf2 import Otf2Trace

CHUNK = 256 * 1024  # OTF2's smallest events chunk (bytes)
N_EVENTS = 60_000  # an Enter and a Leave of one region per step of 10 ticks: three chunks
_END_OF_BUFFER, _CHUNK_HEADER, _TIMESTAMP = 1, 3, 5


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """One rank's events in three chunks, written by the ``otf2`` wheel."""
    from testing.otf2_variants import region_steps

    root = region_steps(tmp_path_factory.mktemp("otf2tok") / "whole", N_EVENTS // 2, CHUNK)
    assert (root / "traces" / "0.evt").stat().st_size > 2 * CHUNK
    return root


def _damaged(archive: Path, tmp_path: Path, token: int) -> tuple[Path, int, int]:
    """A copy of ``archive`` whose last chunk's first record (a timestamp) starts with ``token``: (the copy, the
    damaged byte's offset, the events before it)."""
    copy = tmp_path / "damaged"
    shutil.copytree(archive, copy)
    evt = copy / "traces" / "0.evt"
    data = bytearray(evt.read_bytes())
    last = (len(data) - 1) // CHUNK * CHUNK
    assert data[last:last + 2] == bytes([_CHUNK_HEADER, 0x42]) and data[last + 18] == _TIMESTAMP
    first = int.from_bytes(data[last + 2:last + 10], "little")
    data[last + 18] = token
    evt.write_bytes(bytes(data))
    return copy, last + 18, first - 1


@pytest.mark.timeout(60, method="thread")  # before: libotf2 looped for good (and swallowed the signal's exception)
@pytest.mark.parametrize("token", [_END_OF_BUFFER, _CHUNK_HEADER])
def test_a_token_no_chunk_holds_there_is_refused_before_the_library_reads(archive, tmp_path, token):
    damaged, at, _ = _damaged(archive, tmp_path, token)
    with pytest.raises(TraceFormatError) as raised:
        Otf2Trace(damaged / "traces.otf2").read_tables("r")
    assert raised.value.path == str(damaged / "traces" / "0.evt")
    assert f"byte {at}" in raised.value.reason and "damaged" in raised.value.reason
    assert "--salvage" in raised.value.reason


@pytest.mark.timeout(60, method="thread")
@pytest.mark.parametrize("token", [_END_OF_BUFFER, _CHUNK_HEADER])
def test_salvage_reads_the_events_before_the_damaged_token(archive, tmp_path, token):
    damaged, at, before = _damaged(archive, tmp_path, token)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _, _, summary = Otf2Trace(damaged / "traces.otf2", salvage=True).read_tables("r")
    assert summary.n_records[1] == before
    assert summary.last_time_ns == 10 * ((before - 1) // 2) + 5 * ((before - 1) % 2)  # the original's events
    damage_said = [str(w.message) for w in said if f"byte {at}" in str(w.message)]
    assert len(damage_said) == 1 and "damaged" in damage_said[0], [str(w.message) for w in said]
