"""A damaged stored Parquet file is one line naming it, exit 2, for every command and night stage that reads it, and
the warehouse is left as it was (issue 23, session 6 item 1).

A stored file can be damaged behind synthtrace's back (a disk fault, a copy cut short, a hand edit). Three kinds:
random bytes (``head -c 3000 /dev/urandom > part``), a file cut short behind valid magic bytes (its footer's
length and ``PAR1`` kept, the footer itself gone), and zero bytes. Before, ``merge`` ended with Polars'
``ComputeError`` traceback and ``detect`` with DuckDB's (exit 1); ``sql`` said "don't know what type" naming no
file. One ingested and merged warehouse (the session's ``merged_lulesh``) is copied per case.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testing.attack_cases import DAMAGE, DAMAGED_EXPERIMENT as EXPERIMENT, STORED_READERS as READERS, add_model_record
from testing.traces import tree_digest


@pytest.fixture(scope="module")
def stored(merged_lulesh: Path, tmp_path_factory) -> Path:
    """The merged LULESH warehouse with a model record folder (damaged in every case that reads it)."""
    wh = tmp_path_factory.mktemp("damaged-parts") / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    add_model_record(wh)
    return wh


@pytest.mark.real_traces
@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("table", READERS)
def test_a_damaged_stored_part_is_one_line_naming_it_and_changes_nothing(stored, tmp_path, run_cli, table, kind,
                                                                        detect_reads_any_history):
    from synthtrace.pipelines import jobs
    from synthtrace.tracelib.errors import SynthtraceError
    from synthtrace.warehouse.layout import Warehouse

    wh, out = tmp_path / "wh", tmp_path / "out"
    shutil.copytree(stored, wh, symlinks=True)
    out.mkdir()  # an output's folder is not made (attack 10)
    pattern, commands, stages = READERS[table]
    # the table lists no `detect` command (with one night of history it reads nothing); here it reads any history
    commands = [*commands, ["detect"]] if "detect" in stages else commands
    files = sorted(wh.glob(pattern))
    assert files, pattern
    for f in files:
        f.write_bytes(DAMAGE[kind](f.read_bytes()))
    before = tree_digest(wh)
    for args in commands:
        code, _, err = run_cli(*(a.format(out=out) for a in args), "-w", wh)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, code, err[-2000:])
        assert any(str(f) in lines[0] for f in files), (args, lines[0])
        assert tree_digest(wh) == before, args
    for stage in stages:
        job = jobs.job(stage)
        with pytest.raises(SynthtraceError) as raised:
            job.run(Warehouse(wh), *([EXPERIMENT] if job.scope == "experiment" else []), jobs.NightSettings())
        assert any(str(f) in str(raised.value).splitlines()[0] for f in files), (stage, raised.value)
        assert tree_digest(wh) == before, stage


@pytest.mark.real_traces
@pytest.mark.parametrize(("table", "args"), [("mpi_calls", ["detect"]), ("mpi_messages", ["detect"]),
                                             ("bursts", ["pop"])])
def test_a_damaged_page_behind_an_intact_footer_is_one_line_naming_its_file(stored, tmp_path, run_cli, table, args,
                                                                            detect_reads_any_history):
    """A page overwritten in the middle of a file whose footer is intact passes the frame check: DuckDB (detect)
    failed with "Failed to read file <the query's link>" or "Variable-length int over 10 bytes" tracebacks, and
    pop's lazy scan with Polars' "zstd error" traceback. On a reader's failure the files are read a row group at a
    time to name the damaged one."""
    from testing.attack_cases import PAGE_DAMAGE

    wh = tmp_path / "wh"
    shutil.copytree(stored, wh, symlinks=True)
    files = sorted(wh.glob(READERS[table][0]))
    for f in files:
        f.write_bytes(PAGE_DAMAGE["page"](f.read_bytes()))
    before = tree_digest(wh)
    code, _, err = run_cli(*args, "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and any(str(f) in lines[0] for f in files), err[-2000:]
    assert tree_digest(wh) == before


@pytest.mark.real_traces
def test_a_damaged_run_record_says_how_to_repair_it_and_the_repair_works(stored, tmp_path, run_cli):
    """The line's remedies must work: ingesting the trace again replaces the run whole; then the warehouse reads
    again (`runs rm` of such a run works too since attack 8 B6: tests/test_stored_state.py)."""
    import polars as pl

    wh = tmp_path / "wh"
    shutil.copytree(stored, wh, symlinks=True)
    record = sorted(wh.glob("runs/*/run.parquet"))[0]
    source = pl.read_parquet(record).get_column("source_path")[0]
    size = record.stat().st_size
    record.write_bytes(b"")
    code, out, err = run_cli("runs", "-w", wh)  # the other run listed, this one named (attack 8 B6)
    assert code == 0 and err.strip() == (f"warning: {record}: a damaged stored Parquet file (0 bytes where "
                                         f"{size} were stored); ingest its trace again (a run whose record is "
                                         "damaged is replaced whole), or remove the run (`synthtrace runs rm "
                                         f"{record.parent.name}`); it is not listed"), err
    code, _, err = run_cli("ingest", source, "--experiment", EXPERIMENT, "-w", wh)
    assert code == 0, err
    code, out, err = run_cli("sql", "SELECT count(*) AS n FROM runs", "-w", wh, "-f", "csv")
    assert code == 0 and out.splitlines()[1] == "2", (out, err)
