"""Issue 23 item 11 where a query cannot take links (a read-only mount, someone else's warehouse: no write access to
its `.staging`): it binds the files by path, and a writer racing it must still leave it one state of the warehouse
(answered again), or one line after too many changes; item 6 for every reader of the runs table."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from testing.stored_runs import warehouse_with_runs

pytestmark = pytest.mark.real_traces


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory) -> Path:
    """A warehouse of three stored runs of the real jacobi trace (one ingested, two copies under other ids)."""
    return warehouse_with_runs(tmp_path_factory.mktemp("three") / "wh", 3).root


def _without_staging(src: Path, tmp_path: Path):
    """A copy of the warehouse ``src`` whose `.staging` is gone (as if it could not be written): queries bind by
    path."""
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(tmp_path / "wh")
    shutil.copytree(src, wh.root)
    shutil.rmtree(wh.staging_dir)
    return wh


def _racing_connect(monkeypatch, calls: Path, change) -> None:
    """Before each connection a query makes (in its child process), call ``change(n)`` (n: 0, 1, ... ) and note
    the call in the file ``calls``: a writer acting between the query's listing and its reads."""
    import synthtrace.warehouse.sql as sql

    real = sql.connect

    def connect(*args, **kwargs):
        n = len(calls.read_text().splitlines()) if calls.exists() else 0
        with calls.open("a") as f:
            f.write("connect\n")
        change(n)
        return real(*args, **kwargs)

    monkeypatch.setattr(sql, "connect", connect)


def _bursts_of(run: Path) -> int:
    return pl.scan_parquet(run / "bursts" / "*.parquet").select(pl.len()).collect().item()


def test_a_run_removed_under_a_query_bound_by_path_is_answered_as_one_state(three_runs, tmp_path, monkeypatch):
    """`runs rm` between the listing and the reads of a query without links: the old code failed the query (the
    file it listed was gone); now the query is answered again, as the warehouse without the run."""
    import synthtrace.warehouse.sql as sql

    wh = _without_staging(three_runs, tmp_path)
    victim = sorted(wh.runs_dir.iterdir())[0]
    per_run = _bursts_of(victim)
    calls = tmp_path / "calls"

    def remove_once(n: int) -> None:
        if n == 0:
            os.rename(victim, tmp_path / "removed")  # as Warehouse.remove: gone from its place at once
            shutil.rmtree(tmp_path / "removed")

    _racing_connect(monkeypatch, calls, remove_once)
    got = sql.query_rows(wh, "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM bursts)")[1][0]
    assert got == (2, 2 * per_run)
    assert calls.read_text().count("connect") == 2  # the racing writer acted, and the query was answered again
    assert not wh.staging_dir.exists()  # nothing written into a warehouse it could not write


def test_a_query_bound_by_path_under_a_writer_that_never_stops_is_one_line(three_runs, tmp_path, monkeypatch,
                                                                          run_cli):
    """A run replaced before every attempt: never a mixed answer; after a few attempts, one error line, exit 2."""
    from synthtrace.warehouse.layout import Warehouse

    wh = _without_staging(three_runs, tmp_path)
    victim = sorted(wh.runs_dir.iterdir())[0]
    calls = tmp_path / "calls"

    def replace(n: int) -> None:  # a new version of the run, swapped in by rename (as `ingest` replacing it)
        new = tmp_path / f"new{n}"
        shutil.copytree(victim, new)
        os.rename(victim, tmp_path / f"old{n}")
        os.rename(new, victim)

    _racing_connect(monkeypatch, calls, replace)
    code, out, err = run_cli("sql", "SELECT count(*) FROM bursts", "-w", wh.root)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error:") and "changed while it was read" in err
    assert calls.read_text().count("connect") >= 2
    assert Warehouse(wh.root).has_run(victim.name)


def test_the_runs_table_reads_no_run_folder_reached_through_a_link(three_runs, tmp_path):
    """Item 6 for `history.apps` and every reader of the runs table: a `runs/evil -> /elsewhere` folder (holding a
    run.parquet of an application `evil`) was read as a run of the warehouse; the views never read it."""
    from synthtrace.warehouse import history
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(tmp_path / "wh")
    shutil.copytree(three_runs, wh.root)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(next(wh.runs_dir.iterdir()), elsewhere)
    row = pl.read_parquet(elsewhere / "run.parquet")
    row.with_columns(pl.lit("evil").alias("app"), pl.lit("e" * 16).alias("run_id")).write_parquet(
        elsewhere / "run.parquet")
    (wh.runs_dir / "evil").symlink_to(elsewhere)
    assert "evil" not in history.apps(wh)
    assert history.apps(wh) == sorted(set(row["app"]))


def test_the_attempts_of_a_query_bound_by_path_share_its_time_limit(three_runs, tmp_path, monkeypatch, run_cli):
    """Each attempt of a query read again had the whole `--timeout` (5 attempts of 0.3 s and more ran past a limit
    of 1.2 s, then said the warehouse changed); the attempts now share the limit, and the query stops at it."""
    import time

    wh = _without_staging(three_runs, tmp_path)
    victim = sorted(wh.runs_dir.iterdir())[0]

    def slow_replace(n: int) -> None:  # each attempt takes at least 0.3 s, and finds the run replaced
        time.sleep(0.3)
        new = tmp_path / f"new{n}"
        shutil.copytree(victim, new)
        os.rename(victim, tmp_path / f"old{n}")
        os.rename(new, victim)

    _racing_connect(monkeypatch, tmp_path / "calls", slow_replace)
    code, out, err = run_cli("sql", "SELECT count(*) FROM bursts", "-w", wh.root, "--timeout", "1.2")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "query stopped after 1.2 s (its time limit" in err
    assert (tmp_path / "calls").read_text().count("connect") < 5


_FEW_DESCRIPTORS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))  # a batch job's `ulimit -n 64`, hard
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.sql import query_rows
wh = Warehouse(sys.argv[1])
print(runs_table(wh).height, query_rows(wh, "SELECT count(*) FROM runs")[1][0][0])
"""


def test_a_warehouse_with_more_runs_than_descriptors_is_read_by_path(tmp_path):
    """A read without links held every run folder open: past the descriptors a process may open (80 runs under
    `ulimit -n 64`) every read of the warehouse was refused ('too many folders to hold open'). The folders it cannot
    hold are now known by their identity (inode and times)."""
    import subprocess
    import sys

    wh = warehouse_with_runs(tmp_path / "wh", 80)
    shutil.rmtree(wh.staging_dir)
    out = subprocess.run([sys.executable, "-c", _FEW_DESCRIPTORS, str(wh.root)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["80", "80"]
