"""An OTF2 archive of many locations is stored in parts of many locations each, not one file per location and table
(attack 22 F7: a Ctrl-C of the ingest of a 3,000-location archive took 8-14 s to end).

The time went to removing the stage: 6,000 part files (bursts and events of each location, 1 to 2 rows each),
and a file whose data the kernel has already written back costs milliseconds to unlink (here ext4 mounted with
``discard``: 17.8 s for 2,400 such files against 0.23 s for as many fresh ones; a parallel file system is slower
still). A stored run of 6,000 files was as slow to read or remove afterwards."""
from __future__ import annotations

import polars as pl

from testing.otf2_variants import many_ranks

RANKS = 120


def test_the_locations_of_an_archive_share_their_part_files(tmp_path, run_cli):
    anchor = many_ranks(tmp_path / "many", RANKS, barrier=True)
    code, _, err = run_cli("ingest", anchor, "-w", tmp_path / "wh")
    assert code == 0, err
    (run,) = (tmp_path / "wh" / "runs").iterdir()
    parts = {table: sorted((run / table).glob("*.parquet")) for table in ("bursts", "events")}
    assert [len(parts["bursts"]), len(parts["events"])] == [1, 1], {t: len(p) for t, p in parts.items()}
    bursts = pl.read_parquet(parts["bursts"]).sort("task", "start_ns")
    assert bursts["task"].to_list() == [t for t in range(1, RANKS + 1) for _ in range(2)]
    assert bursts["end_ns"].to_list() == [e for r in range(RANKS) for e in (4000 + r, 9000 + r)]
    assert bursts["mpi_call"].to_list() == ["MPI_Barrier", None] * RANKS
