"""Issue 13's OTF2 hang: an archive whose region stack never closes (a corrupt event file where every record reads
as an Enter looks like this) made the reader's call-site search quadratic in the nesting depth, carried from
chunk to chunk: ingest looped for hours. The read must stay bounded (linear in the events)."""
from __future__ import annotations

import threading
from pathlib import Path

import otf2
import pytest
from otf2.enums import LocationGroupType, LocationType, Paradigm, RegionRole

from synthtrace.tracelib.formats.otf2 import Otf2Trace

DEPTH = 60_000  # nested calls of a function that never returns, each calling MPI_Barrier
CHUNK_EVENTS = 250  # the stack is carried across 720 chunks: the quadratic search redid the whole stack in each
# a hang detector, not a speed test: the bounded read takes seconds even on a loaded machine; the quadratic one took
# > 60 s with 4x fewer chunks, and its cost grows with the number of chunks times the depth
TIMEOUT_S = 180


def _never_closing_stack(folder: Path) -> Path:
    with otf2.writer.open(str(folder), timer_resolution=10**9) as w:
        d = w.definitions
        group = d.location_group("MPI Rank 0", location_group_type=LocationGroupType.PROCESS,
                                 system_tree_parent=d.system_tree_node("node"))
        ev = w.event_writer_from_location(d.location("Master thread", type=LocationType.CPU_THREAD, group=group))
        recurse = d.region("recurse", region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER, source_file="r.c",
                           begin_line_number=7)
        barrier = d.region("MPI_Barrier", region_role=RegionRole.BARRIER, paradigm=Paradigm.MPI)
        ev.program_begin(0, "deep", [])
        for i in range(DEPTH):
            t = 10 * i + 10
            ev.enter(t, recurse)
            ev.enter(t + 2, barrier)
            ev.leave(t + 4, barrier)
    return folder / "traces.otf2"


@pytest.mark.slow
def test_a_region_stack_that_never_closes_is_read_in_bounded_time(tmp_path):
    anchor = _never_closing_stack(tmp_path / "deep")
    Otf2Trace(anchor).read_tables()  # the Numba kernels loaded before the clock starts
    result: list = []
    reader = threading.Thread(target=lambda: result.append(Otf2Trace(anchor, chunk_events=CHUNK_EVENTS).read_tables()),
                              daemon=True)
    reader.start()
    reader.join(TIMEOUT_S)
    assert not reader.is_alive(), f"reading {DEPTH} nested regions took more than {TIMEOUT_S} s"
    bursts, calls, _ = result[0]
    assert calls.height == DEPTH and bursts.height == DEPTH  # the one before each call
    assert calls["call_site"].unique().to_list() == ["recurse (r.c:7)"]  # the innermost open region, at any depth
