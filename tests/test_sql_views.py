"""A query's connection holds only the views it names (each view costs a listing of its files and a read of their
schemas), yet every spelling of a name and every way of listing the catalog still sees what it saw before."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testing.traces import LULESH_A, PRIME, copy_trace

pytestmark = pytest.mark.real_traces


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    """The prime trace and a LULESH trace with uncore samples."""
    from synthtrace.pipelines.cli import main

    root = tmp_path_factory.mktemp("views")
    copy_trace(PRIME, root / "t")
    copy_trace(LULESH_A, root / "t")
    assert main(["ingest", str(root / "t"), "-w", str(root / "wh")]) == 0
    return root / "wh"


def csv_values(run_cli, query: str, wh: Path) -> list[str]:
    code, out, err = run_cli("sql", query, "-w", wh, "-f", "csv")
    assert code == 0, err
    return [line.strip('"') for line in out.splitlines()[1:]]


def test_a_query_reads_only_the_views_it_names(wh, tmp_path, run_cli):
    """A damaged file of one table (here a bursts part overwritten) leaves the queries of the other tables
    answered; the query that reads it fails with one line."""
    broken = tmp_path / "wh"
    shutil.copytree(wh, broken)
    part = next(broken.glob("runs/*/bursts/*.parquet"))
    part.write_bytes(b"not parquet at all" * 10)
    assert csv_values(run_cli, "SELECT count(*) FROM runs", broken) == ["2"]
    assert csv_values(run_cli, "SELECT count(*) > 0 FROM mpi_calls", broken) == ["true"]
    assert csv_values(run_cli, "SELECT 42", broken) == ["42"]
    code, out, err = run_cli("sql", "SELECT count(*) FROM bursts", "-w", broken)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and err.startswith("error: ")


@pytest.mark.parametrize("spelling", ["bursts", "Bursts", '"BURSTS"', "main.bursts", '"main"."bursts"',
                                      "(FROM bursts)", "query_table('bursts')"])
def test_every_spelling_of_a_view_is_found(wh, run_cli, spelling):
    expected = csv_values(run_cli, "SELECT count(*) FROM bursts", wh)
    assert int(expected[0]) > 0
    assert csv_values(run_cli, f"SELECT count(*) FROM {spelling}", wh) == expected


@pytest.mark.parametrize("listing", [
    "SELECT name FROM (SHOW TABLES) ORDER BY name",
    "SELECT name FROM (SHOW ALL TABLES) ORDER BY name",
    "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY view_name",
    "SELECT table_name FROM information_schema.tables ORDER BY table_name",
])
def test_listing_the_catalog_sees_every_view(wh, run_cli, listing):
    """The views with files in the warehouse, whichever way the catalog is listed."""
    assert csv_values(run_cli, listing, wh) == ["bursts", "counter_anomalies", "events", "mpi_calls",
                                               "mpi_messages", "runs", "uncore_samples"]
