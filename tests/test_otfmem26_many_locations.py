"""attack25 A1: an OTF2 archive of many small locations held ~66 KB a location while it was read (20,000 locations:
~1.6 GB), one small Polars frame per location and table kept until the read ended (the calls, the point-to-point
records, the parts of consecutive locations). The small frames a read holds are now joined a few dozen at a time
(:class:`synthtrace.tracelib.formats.held_frames.HeldFrames`): what is held no longer grows a frame per location, and
the rows read are the same, in the same order."""
from __future__ import annotations

import gc
from pathlib import Path

import polars as pl
import pytest

from synthtrace.tracelib.formats import held_frames
from synthtrace.tracelib.formats.held_frames import HeldFrames
from synthtrace.tracelib.formats.otf2 import Otf2Trace
from testing.otf2_variants import _Archive, many_ranks

LOCATIONS = 200


@pytest.fixture
def ring(tmp_path) -> Path:
    """``LOCATIONS // 2`` ranks: all but the last one send to the next in a ring (MPI_Send, then MPI_Recv), the even
    ones with a PAPI_TOT_INS reading at every Enter and Leave, the odd ones with none; the last rank records no
    event."""
    ranks = LOCATIONS // 2
    ring = ranks - 1
    a = _Archive(tmp_path / "archive", ranks=ranks, threads=1)
    a.mpi("MPI_Send", "MPI_Recv")
    for rank in range(ring):
        e = a.events(rank)
        enter, leave = (e.enter, e.leave) if rank % 2 == 0 else (_unmeasured(e, "enter"), _unmeasured(e, "leave"))
        e.program_begin(0, "many", [])
        enter(0, "main")
        enter(100, "MPI_Send")
        e.mpi_send(110, (rank + 1) % ring, a.world, 7, 64 + rank)
        leave(200, "MPI_Send")
        enter(300, "MPI_Recv")
        e.mpi_recv(310, (rank - 1) % ring, a.world, 7, 64 + (rank - 1) % ring)
        leave(400, "MPI_Recv")
        leave(500, "main")
        e.program_end(500, 0)
    return a.close()


def _unmeasured(events, what: str):
    """The wheel's Enter or Leave (``what``) of ``events``' location, with no metric record before it."""
    return lambda ns, region: getattr(events.ev, what)(events.a.ticks(ns), events.a.regions[region])


def _frames_alive() -> int:
    gc.collect()
    return sum(isinstance(o, pl.DataFrame) for o in gc.get_objects())


def _read(anchor: Path) -> tuple[dict[str, pl.DataFrame], pl.DataFrame, pl.DataFrame]:
    stream = Otf2Trace(anchor).read(run_id="r")
    parts: dict[str, list[pl.DataFrame]] = {}
    for part in stream:
        parts.setdefault(part.table, []).append(part.frame)
    return ({t: pl.concat(f, how="diagonal_relaxed") for t, f in parts.items()}, stream.summary.calls.collect(),
            stream.summary.messages)


def test_a_read_of_many_small_locations_holds_no_frame_per_location(tmp_path):
    """``LOCATIONS`` ranks of one MPI_Barrier each (attack25 A1's archive). The frames counted are the read's:
    those alive before it (earlier tests' in the same worker, review26 F3) are taken off."""
    anchor = many_ranks(tmp_path / "archive", LOCATIONS, barrier=True)
    before = _frames_alive()
    stream = Otf2Trace(anchor).read(run_id="r")
    parts = iter(stream)
    first = next(parts)  # every location read: the parts of consecutive locations, the calls and records held
    held = _frames_alive() - before
    assert held < LOCATIONS // 4, f"{held} frames alive after reading {LOCATIONS} locations"
    assert first.table == "bursts" and first.frame.get_column("task").n_unique() == LOCATIONS
    list(parts)
    assert stream.summary.calls.collect().get_column("task").n_unique() == LOCATIONS


def test_joined_frames_read_the_rows_of_frames_held_one_by_one(ring, monkeypatch):
    """Calls, point-to-point records and parts of locations with and without a counter, joined 8 at a time."""
    monkeypatch.setattr(held_frames, "JOIN_EVERY", 8)
    joined = _read(ring)
    assert joined[1].height == 2 * (LOCATIONS // 2 - 1) and joined[2].height == LOCATIONS // 2 - 1
    monkeypatch.setattr(held_frames, "JOIN_EVERY", 10**9)
    one_by_one = _read(ring)
    assert joined[0].keys() == one_by_one[0].keys()
    for table, frame in joined[0].items():
        assert frame.equals(one_by_one[0][table]), table
    assert joined[1].equals(one_by_one[1]) and joined[2].equals(one_by_one[2])
    calls = joined[1]
    # the counter of the even ranks only: NULL on the odd ranks' calls, never a column of some parts only
    measured = calls.select(pl.col("PAPI_TOT_INS").is_not_null(), (pl.col("task") % 2 == 1))
    assert measured.get_column("PAPI_TOT_INS").to_list() == measured.get_column("task").to_list()


def test_held_frames_keep_the_order_and_columns_of_the_frames_appended(monkeypatch):
    monkeypatch.setattr(held_frames, "JOIN_EVERY", 4)
    monkeypatch.setattr(held_frames, "SMALL_BYTES", 1000)
    frames = [pl.DataFrame({"i": [i], **({"c": [i * 10]} if i % 3 else {})}) for i in range(10)]
    frames.insert(5, pl.DataFrame({"i": pl.Series([], dtype=pl.Int64)}))  # empty
    frames.insert(7, pl.DataFrame({"i": range(200), "c": pl.Series([None] * 200, dtype=pl.Int64)}))  # big: held as is
    held = HeldFrames()
    for frame in frames:
        held.append(frame)
    assert len(held) < len(frames)
    assert any(f is frames[7] for f in held)
    assert pl.concat(held, how="diagonal_relaxed").equals(pl.concat(frames, how="diagonal_relaxed"))
