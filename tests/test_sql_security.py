"""`synthtrace sql` attacked: no statement may change a byte under the warehouse, write anywhere else, read a file
outside the warehouse or run without a time limit (DESIGN §11). Every view stays readable."""
from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from testing.traces import LULESH_A, LULESH_B, copy_trace, tree_digest
from synthtrace.warehouse.catalog import VIEW_FILES

pytestmark = pytest.mark.real_traces


@pytest.fixture(scope="module")
def sealed_wh(tmp_path_factory) -> Path:
    """A warehouse with two real runs, and one file at every other view's place (their content is irrelevant
    here: what is tested is that the sealed connection still reads each view's files)."""
    from synthtrace.pipelines.cli import main

    root = tmp_path_factory.mktemp("sealed")
    drop = root / "drop" / "lulesh"
    copy_trace(LULESH_A, drop)
    copy_trace(LULESH_B, drop)
    wh = root / "wh"
    assert main(["ingest", str(drop), "-w", str(wh)]) == 0
    from synthtrace.warehouse.checksums import write_manifest
    from synthtrace.warehouse.stored import unit_of

    sample = pl.read_parquet(next((wh / "runs").glob("*/bursts/*.parquet"))).head(5)
    planted = set()
    for pattern in VIEW_FILES.values():
        if not any(wh.glob(pattern)):
            target = wh / pattern.replace("*", "lulesh")
            target.parent.mkdir(parents=True, exist_ok=True)
            sample.write_parquet(target)
            planted.add(unit_of(target.relative_to(wh).parts))
    for unit in planted:  # as a commit leaves them: files no commit wrote are not read (attack 8 B1, 9 C1)
        write_manifest(wh.joinpath(*unit), None, unit[-1] if len(unit) == 2 else None)
    return wh


@pytest.fixture
def outside(tmp_path, monkeypatch) -> Path:
    """A folder outside the warehouse, also the working directory: nothing may appear in it."""
    d = tmp_path / "outside"
    d.mkdir()
    monkeypatch.chdir(d)
    return d


def _run_parquet(wh: Path) -> Path:
    return next((wh / "runs").glob("*/run.parquet"))


def test_every_view_is_readable(sealed_wh, run_cli):
    for view, pattern in VIEW_FILES.items():
        files = [p for p in sealed_wh.glob(pattern) if p.is_file()]
        expected = sum(pl.scan_parquet(f).select(pl.len()).collect().item() for f in files)
        code, out, err = run_cli("sql", f'SELECT count(*) AS n FROM "{view}"', "-w", sealed_wh, "-f", "csv")
        assert code == 0, (view, err)
        assert int(out.splitlines()[1]) == expected, view
    code, out, _ = run_cli("sql", "SELECT count(*) FROM bursts b JOIN runs r USING (run_id) WHERE r.n_tasks > 0",
                           "-w", sealed_wh, "-f", "csv")
    assert code == 0 and int(out.splitlines()[1]) == 2140 + 848


ATTACKS = [
    # writes, directly and through EXPLAIN ANALYZE (which executes what it explains)
    "COPY (SELECT 42) TO '{out}/f.csv'",
    "EXPLAIN ANALYZE COPY (SELECT 42) TO '{out}/f.csv'",
    "EXPLAIN (ANALYZE) COPY (SELECT 42) TO '{out}/f.csv'",
    "EXPLAIN ANALYSE COPY (SELECT 42) TO '{out}/f.csv'",
    "explain   analyze\nCOPY (SELECT 42) TO '{out}/f.csv'",
    "EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{run}' (FORMAT parquet, USE_TMP_FILE false)",
    "COPY (SELECT 1 AS x) TO '{run}' (FORMAT parquet, USE_TMP_FILE false)",
    "EXPLAIN ANALYZE COPY (SELECT 'import os' AS x) TO '{out}/evil.pth' (FORMAT csv, HEADER false)",
    "EXPORT DATABASE '{out}/dump'", "EXPLAIN COPY (SELECT 42) TO '{out}/f.csv'",
    "ATTACH '{out}/x.duckdb' AS x",
    "EXPLAIN ANALYZE ATTACH '{out}/x.duckdb' AS x",
    "INSTALL httpfs", "LOAD httpfs", "EXPLAIN ANALYZE INSTALL httpfs", "LOAD '{out}/evil.duckdb_extension'",
    # configuration, pragmas, procedures
    "SET enable_external_access = true", "RESET enable_external_access", "SET lock_configuration = false",
    "PRAGMA enable_profiling", "CALL pragma_version()",
    # several statements: each is checked, the harmless first one does not carry the rest
    "SELECT 1; DROP VIEW runs", "SELECT 1; SET enable_external_access = true; SELECT * FROM read_text('/etc/passwd')",
    "SELECT 1; COPY (SELECT 42) TO '{out}/f.csv'", "SELECT 1;\nATTACH '{out}/x.duckdb' AS x",
    # reading the machine
    "SELECT * FROM read_text('/etc/passwd')", "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd', sep = ':')", "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')", "SELECT * FROM read_json('/etc/passwd')",
    "SELECT * FROM glob('/root/*')", "SELECT * FROM glob('{wh}/*')", "SELECT * FROM read_text('/proc/self/environ')",
    "SELECT * FROM read_text('{wh}/../secret.txt')", "SELECT * FROM read_text('{out}/../secret.txt')",
    "SELECT * FROM '/etc/passwd'", "SELECT * FROM read_parquet('{out}/../*.parquet')",
    "SELECT * FROM parquet_metadata('{out}/../planted.parquet')",
    "WITH t AS (SELECT * FROM read_text('/etc/passwd')) SELECT * FROM t",
    "SELECT (SELECT content FROM read_text('/etc/passwd'))",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_changes_nothing_and_reads_nothing(sealed_wh, outside, run_cli, attack):
    (outside.parent / "secret.txt").write_text("s3cret-marker\n")
    pl.DataFrame({"s3cret": ["s3cret-marker"]}).write_parquet(outside.parent / "planted.parquet")
    before = tree_digest(sealed_wh)
    statement = attack.format(out=outside, run=_run_parquet(sealed_wh), wh=sealed_wh)
    code, out, err = run_cli("sql", statement, "-w", sealed_wh, "-f", "csv")
    assert code == 2, (statement, out)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert any(why in err for why in ("refused", "does not parse", "does not exist", "no view named")), err
    assert tree_digest(sealed_wh) == before
    assert list(outside.iterdir()) == []
    assert "root:" not in out and "s3cret" not in out and "PATH=" not in out


def test_symlink_planted_in_the_warehouse_is_not_followed(sealed_wh, tmp_path, run_cli):
    """A view file that is a link to a file outside is not read (the views list regular files only)."""
    secret = tmp_path / "secret.parquet"
    pl.DataFrame({"s3cret": ["s3cret-marker"]}).write_parquet(secret)
    link = sealed_wh / "regressions" / "planted.parquet"
    link.symlink_to(secret)
    try:
        code, out, err = run_cli("sql", "SELECT * FROM regressions", "-w", sealed_wh, "-f", "csv")
    finally:
        link.unlink()
    assert code == 0, err
    assert "s3cret" not in out


def test_explain_without_analyze_and_read_only_forms_are_answered(sealed_wh, outside, run_cli):
    for statement in [
        "EXPLAIN SELECT count(*) FROM bursts",
        "DESCRIBE bursts",
        "SUMMARIZE runs",
        "FROM runs SELECT run_name",
        "SHOW TABLES",
        "VALUES (1, 'analyze')",
        "SELECT 'ANALYZE' AS \"analyze\"",
        f"SELECT count(*) FROM read_parquet('{_run_parquet(sealed_wh)}')",
    ]:
        code, out, err = run_cli("sql", statement, "-w", sealed_wh, "-f", "csv")
        assert code == 0, (statement, err)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("view", ["", ", (SELECT count(*) FROM runs) r"])
def test_a_long_query_is_stopped_by_its_time_limit(sealed_wh, outside, run_cli, view):
    """Stopped, and nothing of it left in the warehouse: a query reading a view, killed at its limit, left its
    lease in .locks (until the next writer)."""
    before = tree_digest(sealed_wh)
    endless = f"SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b{view}"
    code, out, err = run_cli("sql", endless, "-w", sealed_wh, "--timeout", "1")
    assert code == 2 and "time limit" in err and len(err.strip().splitlines()) == 1, err
    assert tree_digest(sealed_wh) == before
    code, out, err = run_cli("sql", "SELECT count(*) FROM bursts", "-w", sealed_wh, "--timeout", "60", "-f", "csv")
    assert code == 0 and int(out.splitlines()[1]) == 2140 + 848


def test_missing_warehouse_is_one_line_and_not_created(tmp_path, run_cli):
    for wh in (tmp_path / "typo", tmp_path / "a-file"):
        if wh.name == "a-file":
            wh.write_text("")
        code, out, err = run_cli("sql", "SELECT 1", "-w", wh)
        assert (
            code == 2
            and ("no such warehouse" in err or "not a warehouse" in err)
            and len(err.strip().splitlines()) == 1
        ), err
    assert not (tmp_path / "typo").exists()



@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_ctrl_c_stops_a_running_query(sealed_wh):
    """Ctrl-C during a long query stops it at once ('aborted', exit 130), well before its time limit: DuckDB
    computes in the main thread, where Python's own SIGINT handler would wait for the query to end."""
    import subprocess
    import sys

    from testing.processes import ctrl_c_when_busy, interruptible

    endless = "SELECT count(*) FROM range(1000000000000)"
    p = interruptible([sys.executable, "-m", "synthtrace.pipelines.cli", "sql", endless, "-w", str(sealed_wh),
                      "--timeout", "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = ctrl_c_when_busy(p, cpu_s=2.0)  # the query is running once it burns CPU
    assert p.returncode == 130 and err.strip().splitlines() == ["aborted"], (p.returncode, err)


# ------------------------------------------------------------------------------- issue 23 (round 3 of attacks)
def test_output_inside_the_warehouse_is_refused(sealed_wh, run_cli):
    """Item 2: `sql --output WH/runs/<id>/run.parquet` once replaced a run; no output may land in a warehouse, also
    through a link that points into it."""
    before = tree_digest(sealed_wh)
    link = sealed_wh.parent / "into-the-warehouse"
    link.symlink_to(sealed_wh / "runs")
    try:
        for target in (_run_parquet(sealed_wh), sealed_wh / "new.csv", link / "x" / "run.parquet"):
            code, out, err = run_cli("sql", "SELECT 'pwned' AS run_id", "-w", sealed_wh, "--output", target)
            assert code == 2 and "inside the warehouse" in err and len(err.strip().splitlines()) == 1, err
    finally:
        link.unlink()
    assert tree_digest(sealed_wh) == before


def test_output_to_a_fifo_or_link_writes_through_it(sealed_wh, outside, run_cli):
    """Item 1: a FIFO is written into (or refused when nobody reads it), a link is followed; neither is replaced."""
    import os
    import stat

    fifo = outside / "pipe"
    os.mkfifo(fifo)
    code, _, err = run_cli("sql", "SELECT 42 AS answer", "-w", sealed_wh, "--output", fifo, "-f", "csv")
    assert code == 2 and "no process reads" in err, err
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader (what is written waits in the pipe)
    try:
        code, _, err = run_cli("sql", "SELECT 42 AS answer", "-w", sealed_wh, "--output", fifo, "-f", "csv")
        got = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert code == 0, err
    assert got == b'"answer"\n42\n'
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)

    link, real = outside / "latest.csv", outside / "results" / "2026-12-02.csv"
    real.parent.mkdir()
    real.write_text("old\n")
    link.symlink_to(real)
    code, _, err = run_cli("sql", "SELECT 42 AS answer", "-w", sealed_wh, "--output", link)
    assert code == 0, err
    assert link.is_symlink() and real.read_text() == '"answer"\n42\n'


def test_timeouts_without_end_are_refused_in_one_line(sealed_wh, run_cli):
    """Item 5: `--timeout inf` or 1e10 once killed the timer thread and ran unbounded."""
    for value in ("inf", "1e10", "9.3e9"):
        code, out, err = run_cli("sql", "SELECT 1", "-w", sealed_wh, "--timeout", value)
        assert code == 2 and "--timeout" in err and len(err.strip().splitlines()) == 1, (value, err)
        assert "Traceback" not in err


def test_memory_limit_caps_a_query(sealed_wh, run_cli):
    """Item 5: a query needing more memory than its cap ends in one line (DuckDB's default is 80 % of the RAM);
    with a larger cap the same query is answered."""
    hungry = "SELECT length(string_agg(repeat('x', 100000), ',')) AS n FROM range(2000)"
    code, out, err = run_cli("sql", hungry, "-w", sealed_wh, "--memory-limit", "64MiB", "-f", "csv")
    assert code == 2 and "memory" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = run_cli("sql", hungry, "-w", sealed_wh, "--memory-limit", "2GiB", "-f", "csv")
    assert code == 0 and out.splitlines()[1] == str(2000 * 100000 + 1999), err
    code, out, err = run_cli("sql", "SELECT 1", "-w", sealed_wh, "--temp-limit", "lots")
    assert code == 2 and "--temp-limit" in err, err



@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_a_result_larger_than_the_memory_limit_is_refused_in_one_line(sealed_wh, run_cli, tmp_path, fmt):
    """Item 5, found by the attack rerun: DuckDB's cap bounds what it computes, not the result it hands over; the
    rows of `SELECT * FROM range(20000000)` took 1.8 GB in Python at the default 1 GiB limit (10 GB for 10^8 rows).
    A result held for the terminal is now held to the same limit: one line naming it, exit 2, nothing written. (An
    `--output` file is written as the result comes, whatever its size: test_sql_streamed.)"""
    code, out, err = run_cli("sql", "SELECT range AS i, range * 2 AS j FROM range(2000000)", "-w", sealed_wh,
                             "--memory-limit", "16MiB", "-f", fmt)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--memory-limit" in err and "result" in err, err
    assert not out and list(tmp_path.iterdir()) == []
    code, out, err = run_cli("sql", "SELECT range AS i FROM range(1000)", "-w", sealed_wh, "--memory-limit", "16MiB",
                             "-f", fmt)
    assert code == 0, err

def test_blob_and_nested_columns_to_csv(sealed_wh, run_cli):
    """Item 5: BLOB columns in CSV gave an Arrow traceback; nested columns are JSON text, converted by DuckDB
    (within the query's time limit: the conversion is part of the query)."""
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import query

    statement = "SELECT 'ab'::BLOB AS b, [1, 2] AS l, {'k': 'v'} AS s, INTERVAL 2 DAY AS i, run_name FROM runs"
    code, out, err = run_cli("sql", statement, "-w", sealed_wh, "-f", "csv")
    assert code == 0, err
    assert out.splitlines()[1].startswith('"ab","[1,2]","{""k"":""v""}","2 days",')
    table = query(Warehouse(sealed_wh), statement, flat=True)
    assert {str(t) for t in table.schema.types[:4]} == {"string"}



def test_interval_and_union_columns_to_parquet(sealed_wh, run_cli, tmp_path):
    """Found by the attack rerun: an INTERVAL or UNION column (alone or in a list) written with `-f parquet` gave
    an Arrow traceback (Parquet has no such type); it is written as DuckDB's text, the other columns as they are."""
    import pyarrow.parquet as pq

    out_file = tmp_path / "out.parquet"
    statement = ("SELECT INTERVAL 2 DAY AS i, [INTERVAL 1 HOUR] AS li, union_value(k := 1) AS u, 7 AS n, "
                 "'ab'::BLOB AS b FROM runs")
    code, out, err = run_cli("sql", statement, "-w", sealed_wh, "-o", out_file)
    assert code == 0, err
    table = pq.read_table(out_file)
    assert table.column("i").to_pylist() == ["2 days"] * 2 and table.column("li").to_pylist() == ["['01:00:00']"] * 2
    assert table.column("u").to_pylist() == ["1"] * 2 and table.column("n").to_pylist() == [7] * 2
    assert table.column("b").to_pylist() == [b"ab"] * 2

def test_a_symlinked_folder_in_the_warehouse_is_not_read(sealed_wh, tmp_path, run_cli):
    """Item 6: `runs/evil -> /elsewhere` was read by the views (only leaf links were left out)."""
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(next((sealed_wh / "runs").iterdir()), elsewhere)
    pl.DataFrame({"run_id": ["s3cret-marker"]}).write_parquet(elsewhere / "run.parquet")
    evil = sealed_wh / "runs" / "evil"
    evil.symlink_to(elsewhere, target_is_directory=True)
    try:
        code, out, err = run_cli("sql", "SELECT run_id FROM runs", "-w", sealed_wh, "-f", "csv")
    finally:
        evil.unlink()
    assert code == 0, err
    assert "s3cret" not in out and len(out.splitlines()) == 3


def _removing_after(connect, wh, victim: Path):
    """``connect`` that removes the run folder ``victim`` once the connection is made: `runs rm` landing after
    the listing, before the read."""
    def connect_then_rm(*args, **kwargs):
        con = connect(*args, **kwargs)
        if victim.exists():
            wh.remove(victim)
        return con

    return connect_then_rm


def test_a_query_racing_runs_rm_reads_the_state_it_started_on(sealed_wh, tmp_path, monkeypatch):
    """Item 11: a run removed between the query's listing and its read was refused as a sandbox violation (DuckDB
    retries a vanished file as a glob outside the allowed paths); the query is answered on the state it started
    on (it was answered on the new one, after a second listing; the files are now held for it)."""
    import synthtrace.warehouse.sql as sql
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(tmp_path / "wh")
    shutil.copytree(sealed_wh, wh.root)
    victim = next(wh.runs_dir.iterdir())
    monkeypatch.setattr(sql, "connect", _removing_after(sql.connect, wh, victim))
    n = sql.query_rows(wh, "SELECT count(*) FROM bursts b JOIN runs r USING (run_id)")[1][0][0]
    assert n == 2140 + 848 and not victim.exists()


def test_views_listed_across_a_run_removal_see_that_run_whole_or_not_at_all(sealed_wh, tmp_path, monkeypatch):
    """Item 11: the views are listed one after another; a `runs rm` landing between the `runs` and the `bursts`
    listings gave a `runs` row without its bursts (a state that never existed). The run is now left out whole."""
    from pathlib import Path

    from synthtrace.warehouse.catalog import view_files
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(tmp_path / "wh")
    shutil.copytree(sealed_wh, wh.root)
    victim = next(wh.runs_dir.iterdir())
    real_glob = Path.glob

    def glob_then_rm(self, pattern, *args, **kwargs):
        if pattern.startswith("runs/*/bursts") and victim.exists():
            wh.remove(victim)  # the writer lands after the `runs` listing, before the `bursts` one
        return real_glob(self, pattern, *args, **kwargs)

    monkeypatch.setattr(Path, "glob", glob_then_rm)
    files = view_files(wh, ["runs", "bursts", "mpi_calls"])
    runs_of = {view: {Path(f).relative_to(wh.root).parts[1] for f in paths} for view, paths in files.items()}
    assert victim.name not in runs_of["runs"]
    assert runs_of["bursts"] <= runs_of["runs"] and runs_of["runs"] <= runs_of["bursts"]


def _copy_of(sealed_wh: Path, tmp_path: Path):
    from synthtrace.warehouse.layout import Warehouse

    wh = Warehouse(tmp_path / "wh")
    shutil.copytree(sealed_wh, wh.root)
    return wh


def test_a_query_under_a_writer_faster_than_its_reads_is_answered(sealed_wh, tmp_path, monkeypatch):
    """Item 11 (the attack rerun's 7 queries that failed after 8 attempts): a writer that removes a run after
    every listing and stores it again before the next (`runs rm` and `ingest` in a loop) made each attempt fail
    on a vanished file, however many. The query now reads the files it listed, whatever the writer does after:
    all of the old state, at the first attempt."""
    import synthtrace.warehouse.sql as sql

    wh = _copy_of(sealed_wh, tmp_path)
    victim = next(wh.runs_dir.iterdir())
    joined = "SELECT count(DISTINCT r.run_id), count(*) FROM bursts b JOIN runs r USING (run_id)"
    before = sql.query_rows(wh, joined)[1]
    real_connect = sql.connect
    attempts = tmp_path / "attempts"  # a file: the query runs in a child process

    def connect_then_rm(*args, **kwargs):  # [security] the writer removes the run after every listing
        with attempts.open("a") as f:
            f.write("1\n")
        con = real_connect(*args, **kwargs)
        if victim.exists():
            wh.remove(victim)
        return con

    # (a patch of the earlier code's own listing, `sql.view_files`, stayed here with raising=False after the query
    # stopped calling it, and did nothing: removed; the writer acts from the connection the query does make)
    monkeypatch.setattr(sql, "connect", connect_then_rm)
    assert sql.query_rows(wh, joined)[1] == before == [(2, 2988)]
    assert attempts.read_text() == "1\n" and not victim.exists()

def test_a_damaged_file_is_named_by_its_warehouse_path(sealed_wh, tmp_path):
    """The query reads the files it pinned (through descriptors); an error about one still names the file as it
    lies in the warehouse."""
    import synthtrace.warehouse.sql as sql
    from synthtrace.warehouse.errors import DamagedPartError

    wh = _copy_of(sealed_wh, tmp_path)
    damaged = _run_parquet(wh.root)
    damaged.write_bytes(b"PAR1 not really")
    with pytest.raises(DamagedPartError, match=str(damaged.relative_to(wh.root))) as err:
        sql.query_rows(wh, "SELECT count(*) FROM runs")
    assert "/proc/" not in str(err.value)


def test_a_run_replaced_while_the_query_links_it_is_read_whole(sealed_wh, tmp_path, monkeypatch):
    """Item 11: a run swapped for a new version while the query takes hold of its files (`ingest --replace`, a
    re-merge) is read as one version, never the old `runs` row with the new bursts; nothing stays behind."""
    import os

    import synthtrace.warehouse.sql as sql

    wh = _copy_of(sealed_wh, tmp_path)
    victim = next(wh.runs_dir.iterdir())
    n_victim = pl.scan_parquet(victim / "bursts" / "*.parquet").select(pl.len()).collect().item()
    real_link, swapped = os.link, tmp_path / "swapped"  # a file: the query runs in a child process

    def swap_then_link(*args, **kwargs):
        if not swapped.exists():
            swapped.touch()
            with wh.staged(victim, replace=True) as stage:  # the new version of the run: no bursts
                shutil.copy(victim / "run.parquet", stage / "run.parquet")
        return real_link(*args, **kwargs)

    monkeypatch.setattr(os, "link", swap_then_link)
    runs, bursts = sql.query_rows(wh, "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM bursts)")[1][0]
    assert swapped.exists() and (runs, bursts) in ((2, 2988), (2, 2988 - n_victim))
    assert list(wh.staging_dir.iterdir()) == []


def test_the_links_of_a_killed_query_are_removed_by_the_next(sealed_wh, tmp_path):
    """A query killed (-9) while it held the warehouse's files leaves its links in `.staging`; the next query (or
    writer) removes them, and a query without write access to the warehouse reads the files by their paths."""
    import subprocess
    import sys

    import synthtrace.warehouse.sql as sql

    wh = _copy_of(sealed_wh, tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that has surely ended
    left = wh.staging_dir / f"query.0123456789ab.{proc.pid}"
    left.mkdir()
    (left / "0.parquet").hardlink_to(_run_parquet(wh.root))
    assert sql.query_rows(wh, "SELECT count(*) FROM runs")[1] == [(2,)]
    assert list(wh.staging_dir.iterdir()) == []

    shutil.rmtree(wh.staging_dir)  # no place for links (as on a read-only mount): bound by path
    assert sql.query_rows(wh, "SELECT count(*) FROM runs")[1] == [(2,)]
    assert not wh.staging_dir.exists()



def test_a_long_query_prints_nothing_on_its_callers_stdout(sealed_wh):
    """Found by the attack rerun: a query running longer than 2 s drew DuckDB's progress bar on the process's
    standard output (the probe's JSON line, or the CSV a script writes to stdout, came out with bar text in it)."""
    import subprocess
    import sys

    script = ("import sys\n"
              "from synthtrace.warehouse.layout import Warehouse\n"
              "from synthtrace.warehouse.sql import query_rows\n"
              "from synthtrace.warehouse.errors import QueryError\n"
              "try:\n"
              "    query_rows(Warehouse(sys.argv[1]), 'SELECT count(*) FROM range(3000000000) a, range(2) b '\n"
              "               'WHERE a.range % 7 = b.range', timeout_s=4)\n"
              "except QueryError:\n"
              "    pass\n")
    proc = subprocess.run([sys.executable, "-c", script, str(sealed_wh)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""


def test_a_query_over_more_runs_than_open_files_allowed(tmp_path):
    """The snapshot held one descriptor per run folder until every view was linked: 150 runs under an open-file
    limit of 128 (many clusters' default is 1024 against thousands of runs) failed with `Too many open files`.
    The folders are now taken one at a time."""
    import subprocess
    import sys

    from testing.stored_runs import warehouse_with_runs

    wh = warehouse_with_runs(tmp_path / "wh", 150)
    script = ("import resource, sys\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))\n"
              "from synthtrace.warehouse.layout import Warehouse\n"
              "from synthtrace.warehouse.sql import query_rows\n"
              "print(query_rows(Warehouse(sys.argv[1]), 'SELECT count(*) FROM runs JOIN bursts USING (run_id)')[1])\n")
    proc = subprocess.run([sys.executable, "-c", script, str(wh.root)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    n_bursts = pl.scan_parquet(next(wh.runs_dir.iterdir()) / "bursts" / "*.parquet").select(pl.len()).collect().item()
    assert proc.stdout.strip() == str([(150 * n_bursts,)])


# ------------------------------------------------------------------ issue 23 F3 (memory outside DuckDB's accounting)
_PEAK_OF_SQL = """
import resource, subprocess, sys
proc = subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", "sql", *sys.argv[1:]], capture_output=True,
                      text=True)
sys.stdout.write(proc.stderr)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_a_huge_scalar_is_held_to_the_memory_limit(sealed_wh):
    """F3 (found by the attack rerun): DuckDB builds one scalar outside its memory limit; `repeat('x', 1 << 30)` took
    1 GiB at `--memory-limit 64MiB` and was answered (2.1 GB peak as CSV), `length(range(1 << 28))` 14.7 GB in
    196 s. The query now ends in one memory-limit line, and no process of the command grew past its cap; a scalar
    within the limit is answered."""
    import subprocess
    import sys

    for hog in ("SELECT length(repeat('x', 1 << 30)) AS n", "SELECT length(range(1 << 28)) AS n"):
        proc = subprocess.run([sys.executable, "-c", _PEAK_OF_SQL, hog, "-w", str(sealed_wh), "--memory-limit",
                               "64MiB", "-f", "csv"], capture_output=True, text=True, timeout=600)
        *err, last = proc.stdout.splitlines()
        code, peak_mb = map(int, last.split())
        assert code == 2 and len(err) == 1 and "--memory-limit" in err[0] and "Traceback" not in err[0], proc.stdout
        assert peak_mb < 768, (hog, peak_mb)
    code, _, err = (lambda p: (p.returncode, p.stdout, p.stderr))(subprocess.run(
        [sys.executable, "-m", "synthtrace.pipelines.cli", "sql", "SELECT length(repeat('x', 1 << 26)) AS n", "-w",
         str(sealed_wh), "--memory-limit", "256MiB", "-f", "csv"], capture_output=True, text=True, timeout=600))
    assert code == 0, err


def test_a_query_after_polars_work_in_the_same_process_is_answered(tmp_path):
    """The query runs in a forked child, which has none of the threads of the parent's Polars pool: a view built
    there through Polars (the empty, typed `runs` view of a warehouse with nothing ingested) would wait for ever.
    Python API callers (a notebook, a flow) have used Polars before they query."""
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import query_rows

    wh = Warehouse(tmp_path / "wh").ensure()
    frame = pl.DataFrame({"a": range(2_000_000)}).with_columns(b=pl.col("a") * 2)
    assert frame.group_by(pl.col("a") % 7).agg(pl.col("b").sum()).height == 7  # the pool is started
    assert query_rows(wh, "SELECT count(*) FROM runs, bursts", timeout_s=120)[1] == [(0,)]


def test_the_links_of_a_killed_query_process_left_unreaped_are_removed(sealed_wh, tmp_path):
    """Found by the kill family after F3: a query process killed with its caller (PR_SET_PDEATHSIG) stays a zombie
    where nobody reaps orphans (a container's first process), and its links counted as those of a live query:
    they stayed in `.staging` for good. A zombie holds nothing; the next query removes them."""
    import os

    import synthtrace.warehouse.sql as sql

    wh = _copy_of(sealed_wh, tmp_path)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends at once, and stays a zombie until reaped below
        os._exit(0)
    try:
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            pass
        left = wh.staging_dir / f"query.0123456789ab.{pid}"
        left.mkdir()
        (left / "0.parquet").hardlink_to(_run_parquet(wh.root))
        assert sql.query_rows(wh, "SELECT count(*) FROM runs")[1] == [(2,)]
        assert list(wh.staging_dir.iterdir()) == []
    finally:
        os.waitpid(pid, 0)


def test_the_regression_history_racing_runs_rm_reads_the_state_it_started_on(sealed_wh, tmp_path, monkeypatch):
    """The nightly regression history (warehouse/history.py) read the files by their paths: a `runs rm` landing
    between its listing and its read failed the night (DuckDB retried the vanished file as a glob outside the
    allowed paths). It now holds the files as `synthtrace sql` does: the state it started on, both runs whole."""
    import synthtrace.warehouse.history as history

    wh = _copy_of(sealed_wh, tmp_path)
    before = history.site_rank_table(wh)
    victim = next(wh.runs_dir.iterdir())
    monkeypatch.setattr(history, "connect", _removing_after(history.connect, wh, victim))
    during = history.site_rank_table(wh)
    assert not victim.exists() and during["run_id"].n_unique() == 2
    assert during.equals(before)
    assert list(wh.staging_dir.iterdir()) == []


def test_a_shell_data_limit_below_the_query_cap_is_kept(sealed_wh):
    """Fresh attack after F3: under a batch job's `ulimit -d` (hard) below the query's cap, the query process
    asked for more than its hard limit and died before it could say why ('the child process ended by exit status
    1' for `SELECT 1`). The cap is now the hard limit where that is lower: small queries are answered, a query
    past it ends in the memory-limit line."""
    import resource
    import subprocess
    import sys

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (700 << 20, 700 << 20))

    def sql(statement: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", "sql", statement, "-w",
                               str(sealed_wh), "-f", "csv"], capture_output=True, text=True, timeout=600,
                              preexec_fn=low_limit)

    small = sql("SELECT count(*) AS n FROM runs")
    assert small.returncode == 0 and small.stdout.splitlines()[1] == "2", small.stderr
    hog = sql("SELECT length(repeat('x', 1 << 30)) AS n")
    assert hog.returncode == 2 and "--memory-limit" in hog.stderr and len(hog.stderr.splitlines()) == 1, hog.stderr


def test_a_memory_limit_no_machine_has_is_one_line_naming_it(sealed_wh, run_cli):
    """Fresh attack after F3: `--memory-limit 99999999999TiB` overflowed the kernel's limit in the query process
    ('query failed: the child process ended by exit status 1')."""
    for option in ("--memory-limit", "--temp-limit"):
        code, _, err = run_cli("sql", "SELECT 1", "-w", sealed_wh, option, "99999999999TiB")
        assert code == 2 and f"{option} '99999999999TiB': at most" in err and len(err.splitlines()) == 1, err


def test_the_spill_of_a_killed_query_is_removed_by_the_next(sealed_wh, tmp_path, monkeypatch):
    """Fresh attack after F3: `kill -9` of a `sql` that spilled (a sort past --memory-limit) left its spill folder,
    up to --temp-limit (8 GiB by default), in the temporary folder for good; killed again and again, the disk
    fills. The next query removes the spill of a query whose process is gone (this user's), never a live one's."""
    import os
    import subprocess
    import sys
    import tempfile

    import synthtrace.warehouse.sql as sql

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that has surely ended
    dead, live = tmp_path / f"synthtrace-sql-0123abcd.{proc.pid}", tmp_path / f"synthtrace-sql-4567cdef.{os.getpid()}"
    for left in (dead, live):
        left.mkdir()
        (left / "duckdb_temp_storage-0.tmp").write_bytes(b"\0" * 4096)
    assert sql.query_rows(sql.Warehouse(sealed_wh), "SELECT count(*) FROM runs")[1] == [(2,)]
    assert not dead.exists() and live.exists()


def test_a_run_replaced_just_after_the_query_opened_it_is_read_whole(sealed_wh, tmp_path, monkeypatch):
    """Found by the query family of attack run 4 (2 of 900 queries saw no run at all): the query opened a run's
    folder, then a writer swapped in a new version and deleted the old one under it; the listing through the
    descriptor of the old version missed its run.parquet, so the run was left out whole, a state that never
    existed. A version that left its path while it was taken is now taken again: the new one, whole."""
    import shutil as sh

    import synthtrace.warehouse.snapshot as snapshot
    import synthtrace.warehouse.sql as sql

    wh = _copy_of(sealed_wh, tmp_path)
    victim = next(wh.runs_dir.iterdir())
    real_open_dir, swapped = snapshot._open_dir, tmp_path / "swapped"  # a file: the query runs in a child process

    def open_then_swap(name, dir_fd, **kwargs):
        fd = real_open_dir(name, dir_fd, **kwargs)
        if name == victim.name and not swapped.exists():
            swapped.touch()
            with wh.staged(victim, replace=True) as stage:  # a new copy; the old version is deleted at once
                sh.copytree(victim, stage, dirs_exist_ok=True)
        return fd

    monkeypatch.setattr(snapshot, "_open_dir", open_then_swap)
    got = sql.query_rows(wh, "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM bursts)")[1][0]
    assert swapped.exists() and got == (2, 2140 + 848)


def test_a_staging_folder_planted_as_a_link_is_not_written_through(sealed_wh, tmp_path):
    """Fresh attack (issue 23): with the warehouse's `.staging` replaced by a link to another file system, every
    query failed ('part-00000.parquet: Invalid cross-device link'); on the same file system its links went to
    wherever the link points. The query now binds the files by path there, and writes nothing through it."""
    import os
    import tempfile

    import synthtrace.warehouse.sql as sql

    wh = _copy_of(sealed_wh, tmp_path)
    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else tmp_path))
    try:
        if os.stat(elsewhere).st_dev == os.stat(wh.root).st_dev:
            pytest.skip("needs a second file system for the link's target")
        shutil.rmtree(wh.staging_dir)
        wh.staging_dir.symlink_to(elsewhere)
        assert sql.query_rows(wh, "SELECT count(*) FROM bursts")[1] == [(2140 + 848,)]
        assert list(elsewhere.iterdir()) == []
    finally:
        shutil.rmtree(elsewhere)
