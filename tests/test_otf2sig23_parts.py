"""An OTF2 archive of many locations is stored in parts of many locations each, not one file per location and table
(attack 22 F7: a Ctrl-C of the ingest of a 3,000-location archive took 8-14 s to end).

The time went to removing the stage: 6,000 part files (bursts and events of each location, 1 to 2 rows each),
and a file whose data the kernel has already written back costs milliseconds to unlink (here ext4 mounted with
``discard``: 17.8 s for 2,400 such files against 0.23 s for as many fresh ones; a parallel file system is slower
still). A stored run of 6,000 files was as slow to read or remove afterwards."""
from __future__ import annotations

from pathlib import Path

import otf2
import polars as pl
from otf2.enums import LocationGroupType, LocationType, Paradigm, RegionRole

RANKS = 120


def many_ranks(root: Path, ranks: int) -> Path:
    """An archive of ``ranks`` single-threaded ranks, rank r entering main at 1000 ns, MPI_Barrier from 5000 + r to
    6000 + r and leaving main at 10000 + r: two bursts per rank. Returns its anchor."""
    with otf2.writer.open(str(root), timer_resolution=10**9) as w:
        d = w.definitions
        node = d.system_tree_node("node")
        main = d.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.COMPILER)
        barrier = d.region("MPI_Barrier", region_role=RegionRole.BARRIER, paradigm=Paradigm.MPI)
        for r in range(ranks):
            group = d.location_group(f"MPI Rank {r}", location_group_type=LocationGroupType.PROCESS,
                                     system_tree_parent=node)
            events = w.event_writer_from_location(d.location("Master thread", type=LocationType.CPU_THREAD,
                                                             group=group))
            events.enter(1000, main)
            events.enter(5000 + r, barrier)
            events.leave(6000 + r, barrier)
            events.leave(10000 + r, main)
    return root / "traces.otf2"


def test_the_locations_of_an_archive_share_their_part_files(tmp_path, run_cli):
    anchor = many_ranks(tmp_path / "many", RANKS)
    code, _, err = run_cli("ingest", anchor, "-w", tmp_path / "wh")
    assert code == 0, err
    (run,) = (tmp_path / "wh" / "runs").iterdir()
    parts = {table: sorted((run / table).glob("*.parquet")) for table in ("bursts", "events")}
    assert [len(parts["bursts"]), len(parts["events"])] == [1, 1], {t: len(p) for t, p in parts.items()}
    bursts = pl.read_parquet(parts["bursts"]).sort("task", "start_ns")
    assert bursts["task"].to_list() == [t for t in range(1, RANKS + 1) for _ in range(2)]
    assert bursts["end_ns"].to_list() == [e for r in range(RANKS) for e in (4000 + r, 9000 + r)]
    assert bursts["mpi_call"].to_list() == ["MPI_Barrier", None] * RANKS
