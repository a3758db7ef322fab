"""``synthtrace sql`` errors that name what exists: the counter columns of the view a mistyped counter was looked
for in, and what to run before a view that nothing has filled yet (issue 24 item 6)."""
from __future__ import annotations

from pathlib import Path

import pytest

from testing.traces import LULESH_A, PRIME, copy_trace, ingested

pytestmark = pytest.mark.real_traces


@pytest.fixture(scope="module")
def lulesh_wh(tmp_path_factory) -> Path:
    """The LULESH 4+4 run ingested, nothing merged or analysed."""
    return ingested(tmp_path_factory.mktemp("sql-errors"), "lulesh", LULESH_A)


def one_error_line(run_cli, *args: str) -> str:
    code, out, err = run_cli("sql", *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and not out, (code, out, err)
    return lines[0]


def test_an_unknown_counter_lists_the_counter_columns_of_the_view(lulesh_wh, run_cli):
    err = one_error_line(run_cli, "SELECT sum(PAPI_TOT_INZ) FROM bursts", "-w", lulesh_wh)
    assert "PAPI_TOT_INZ" in err and "did you mean PAPI_TOT_INS" in err, err
    listed = err.split("the counter columns of bursts: ", 1)[1].split(";")[0].split(", ")
    assert set(listed) == {"PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_REF_CYC", "LONGEST_LAT_CACHE:MISS"}, err
    assert '"LONGEST_LAT_CACHE:MISS"' in err  # how to quote a name with a colon


def test_an_unknown_column_in_a_join_names_each_view_read(lulesh_wh, run_cli):
    err = one_error_line(run_cli, "SELECT r.run_name, PAPI_L9_TCM FROM bursts JOIN runs r USING (run_id)",
                         "-w", lulesh_wh)
    assert "the counter columns of bursts: " in err and "the columns of runs: " in err and "run_name" in err, err
    assert "did you mean" not in err  # no column within two edits of PAPI_L9_TCM


def test_merged_bursts_before_any_merge_says_to_merge(lulesh_wh, run_cli):
    for view in ("merged_bursts", "merge_quality"):
        err = one_error_line(run_cli, f"SELECT count(*) FROM {view}", "-w", lulesh_wh)
        assert "no experiment has been merged yet: run `synthtrace merge`" in err, err
        assert "Catalog Error" not in err


def test_a_mistyped_view_names_the_views(lulesh_wh, run_cli):
    err = one_error_line(run_cli, "SELECT * FROM burst", "-w", lulesh_wh)
    assert "no view named burst" in err and "did you mean bursts" in err and "merged_bursts" in err, err


def test_a_counter_of_another_run_is_listed_once_it_is_stored(tmp_path, run_cli):
    """The list is read from the warehouse's files, not from a fixed catalogue of counters."""
    import polars as pl

    from synthtrace.tracelib.schema import counter_columns

    copy_trace(PRIME, tmp_path / "prime")
    assert run_cli("ingest", tmp_path / "prime", "-w", tmp_path / "wh")[0] == 0
    # every part: a part of end-of-thread bursts has no counter column (the view is their union by name)
    parts = sorted((tmp_path / "wh" / "runs").glob("*/bursts/*.parquet"))
    stored = pl.concat([pl.read_parquet(p) for p in parts], how="diagonal_relaxed")

    err = one_error_line(run_cli, "SELECT nope FROM bursts", "-w", tmp_path / "wh")
    assert err.split("the counter columns of bursts: ", 1)[1].split(";")[0].split(", ") == counter_columns(stored)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_error_met_while_the_result_streams_is_one_line(tmp_path, run_cli, fmt):
    """Attack rerun 5: an error DuckDB meets after the first rows were handed over (here `error()` at row 300,001;
    also an allocation past the memory cap in its Arrow conversion) came out of Arrow's stream as an OSError with
    DuckDB's whole text, several lines (a query could print a forged line), in CSV and Parquet; one line now."""
    from synthtrace.warehouse.layout import Warehouse

    Warehouse(tmp_path / "wh").ensure()  # an empty warehouse: the query reads no view
    out = ["-o", str(tmp_path / "out.parquet")] if fmt == "parquet" else []
    err = one_error_line(run_cli, "SELECT CASE WHEN range > 300000 THEN error('boom' || chr(10) || 'error: forged') "
                         "ELSE range END AS x FROM range(400000)", "-w", tmp_path / "wh", "-f", fmt, *out)
    assert err == "error: query failed: Invalid Input Error: boom", err
    assert not (tmp_path / "out.parquet").exists()


def test_a_failed_query_leaves_no_folder_made_for_its_output(lulesh_wh, tmp_path, run_cli):
    """Session 6 item 3: ``--output new/dir/x.csv`` made new/dir before the query ran, and a query that failed
    left it behind. An output's folder is never made (attack 10: tests/test_output_args.py): refused before the
    query runs."""
    out = tmp_path / "new" / "dir" / "x.csv"
    err = one_error_line(run_cli, "SELECT sum(PAPI_TOT_INZ) FROM bursts", "-w", lulesh_wh, "--output", out)
    assert "does not exist" in err and not (tmp_path / "new").exists()
    out.parent.mkdir(parents=True)
    err = one_error_line(run_cli, "SELECT sum(PAPI_TOT_INZ) FROM bursts", "-w", lulesh_wh, "--output", out)
    assert "PAPI_TOT_INZ" in err and not out.exists()
    code, _, err = run_cli("sql", "SELECT 42 AS answer", "-w", lulesh_wh, "--output", out)
    assert code == 0 and out.read_text() == '"answer"\n42\n', err



def test_a_failed_allocation_in_a_parquet_read_is_the_memory_limit_not_damage(lulesh_wh, tmp_path, run_cli,
                                                                             monkeypatch):
    """Attack 19 F9: `select * from mpi_calls --format csv` over 40,000 calls of 4,115 columns at the default 1 GiB
    cap said "...mpi_calls.parquet: a damaged stored Parquet file (malloc of size 131072 failed); remove the run
    (`synthtrace runs rm ...`) and ingest its trace again" of a sound file. DuckDB's "Out of Memory Error" came out
    of Arrow's stream as an OSError (raised again as DuckDB's out-of-memory error, the OSError its context), which
    was taken for a reader's failure; the search for the damaged file then read its row groups under the same cap,
    and pyarrow's failed allocation was given as the damage. Both failures, raised where they were, are the
    memory limit's line now; nothing is written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import synthtrace.warehouse.sql as sql

    real_batches = sql._batches

    class OutOfMemoryStream:  # DuckDB's stream at the cap, as Arrow hands it over
        def __iter__(self):
            return self

        def __next__(self):
            raise OSError("Out of Memory Error: ArrowBuffer: failed to allocate 65536 bytes\n\nPossible solutions:")

    def read_row_group(*_args, **_kwargs):  # pyarrow under the same cap
        raise pa.ArrowMemoryError("malloc of size 131072 failed")

    monkeypatch.setattr(sql, "_batches", lambda _reader: real_batches(OutOfMemoryStream()))
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", read_row_group)
    out = tmp_path / "s.csv"
    err = one_error_line(run_cli, "SELECT * FROM mpi_calls", "-w", lulesh_wh, "-f", "csv", "--output", out)
    assert err.startswith("error: query needs more than its memory or temporary-disk limit (see --memory-limit"), err
    assert "damaged" not in err and "runs rm" not in err and not out.exists()
