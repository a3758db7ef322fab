"""Per-site nightly signals (models.site_signals): the bytes of a site come from the messages it posts, so quiet
nights of one program give the same bytes whatever the timing did (issue 28 item 4)."""

from __future__ import annotations

import polars as pl
import pytest

from synthtrace.models.site_signals import APP_TOTAL, site_history
from synthtrace.pipelines.cli import main as cli
from synthtrace.warehouse.history import site_rank_table
from synthtrace.warehouse.layout import Warehouse


@pytest.fixture(scope="module")
def quiet_halo(tmp_path_factory) -> Warehouse:
    """Four quiet nights of the simulator's halo exchange (Isend/Irecv, then a polling MPI_Test loop whose number
    of calls follows arrival), ingested as the nightly would."""
    root = tmp_path_factory.mktemp("quiet_halo")
    sim, wh = root / "sim", root / "wh"
    args = ["simulate", sim, "--pattern", "halo", "--nights", 4, "--ranks", 4, "--iterations", 4, "--seed", 3,
            "--inject", "none"]
    assert cli([str(a) for a in args]) == 0
    assert cli(["ingest", str(sim), "-w", str(wh)]) == 0
    return Warehouse(wh)


def test_quiet_nights_give_every_site_the_same_bytes(quiet_halo):
    """Fails on the old code: bytes per *call* of the application total moved with the number of polls (45,293 to
    51,036 bytes over these four nights), which is timing, not the program."""
    calls = site_rank_table(quiet_halo).group_by("run_id", "call_site").agg(pl.col("mpi_calls").sum())
    varying = calls.group_by("call_site").agg(pl.col("mpi_calls").n_unique()).filter(pl.col("mpi_calls") > 1)
    assert varying.height > 0, "the polling site's call count varies from run to run (what the test is about)"
    h = site_history(quiet_halo)
    moved = (h.filter(pl.col("mpi_bytes").is_not_null()).group_by("call_site")
             .agg(pl.col("mpi_bytes").n_unique().alias("values"), pl.col("mpi_bytes").min().alias("lo"),
                  pl.col("mpi_bytes").max().alias("hi"))
             .filter(pl.col("values") > 1))
    assert moved.height == 0, moved
    total = h.filter(pl.col("call_site") == APP_TOTAL)
    # per rank and run: every halo message sent and received once (4 ranks, 4 iterations, 2 x 64 KiB neighbours)
    assert total["mpi_bytes"].min() > 0 and total["mpi_bw"].is_not_null().all()

