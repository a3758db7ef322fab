"""A data page damaged behind an intact Parquet footer is found by every reader, as one line naming the file, exit 2,
and nothing stored changes (issue 23, left open by attack rerun 6).

Such a file passes the frame check (magic bytes, footer): before, DuckDB decoded the damaged bursts page to garbage
without an error (``sql`` answered from it; ``detect`` ended in a Polars ``InvalidOperationError`` traceback), and
``merge --export-prv`` committed the merge before it read the damaged events part (a refused command changed the
warehouse). Now every committed folder holds the checksums of its files (warehouse/checksums.py), checked when a
file is read. One merged and analysed LULESH warehouse (the session's ``merged_lulesh`` + ``archetypes``) is
copied per case.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testing.attack_cases import DAMAGED_EXPERIMENT as EXP, PAGE_DAMAGE
from testing.traces import tree_digest

damage_page = PAGE_DAMAGE["page"]  # 512 bytes overwritten a third into the file


@pytest.fixture(scope="module")
def analysed(merged_lulesh: Path, tmp_path_factory) -> Path:
    """The merged LULESH warehouse with its analysis tables (``archetypes``)."""
    from synthtrace.pipelines.cli import main

    wh = tmp_path_factory.mktemp("integrity") / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    assert main(["archetypes", EXP, "--no-discover", "-w", str(wh)]) == 0
    return wh


def _damaged_copy(analysed: Path, tmp_path: Path, pattern: str, kind: str = "page") -> tuple[Path, list[Path]]:
    wh = tmp_path / "wh"
    shutil.copytree(analysed, wh, symlinks=True)
    files = sorted(wh.glob(pattern))
    assert files, pattern
    for f in files:
        f.write_bytes(PAGE_DAMAGE[kind](f.read_bytes()))
    return wh, files


# case -> (stored files damaged, command): each command reads them; "{out}" is a folder outside the warehouse
CASES = {
    "bursts-sql": ("runs/*/bursts/*.parquet", ["sql", "SELECT sum(duration_ns), max(task) FROM bursts"]),
    "bursts-detect": ("runs/*/bursts/*.parquet", ["detect"]),
    "bursts-bit-sql": ("runs/*/bursts/*.parquet", ["sql", "SELECT sum(duration_ns), max(task) FROM bursts"], "bit"),
    "events-merge-export": ("runs/*/events/*.parquet", ["merge", EXP, "--export-prv", "{out}/m"]),
    "events-sql": ("runs/*/events/*.parquet", ["sql", "SELECT sum(value) FROM events"]),
    "merged-export": ("experiments/*/merged_bursts.parquet", ["export", EXP, "-o", "{out}/e.json"]),
    "merged-archetypes": ("experiments/*/merged_bursts.parquet", ["archetypes", EXP, "--no-discover"]),
    "merged-sql": ("experiments/*/merged_bursts.parquet", ["sql", "SELECT sum(duration_ns) FROM merged_bursts"]),
    "archetypes-report": ("experiments/*/archetypes.parquet", ["report", "-o", "{out}/r.html"]),
    "burst_metrics-sql": ("experiments/*/burst_metrics.parquet", ["sql", "SELECT * FROM burst_metrics"]),
}


@pytest.mark.real_traces
@pytest.mark.parametrize("case", CASES)
def test_a_damaged_page_is_one_line_naming_its_file_and_changes_nothing(analysed, tmp_path, run_cli, case,
                                                                       detect_reads_any_history):
    pattern, args, *kind = CASES[case]
    wh, files = _damaged_copy(analysed, tmp_path, pattern, *kind)
    before = tree_digest(wh)
    (tmp_path / "out").mkdir()  # an output's folder is not made (attack 10)
    code, _, err = run_cli(*(a.format(out=tmp_path / "out") for a in args), "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[-2000:])
    assert any(str(f) in lines[0] for f in files) and "checksum" in lines[0], lines[0]
    assert tree_digest(wh) == before
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.real_traces
@pytest.mark.parametrize(("pattern", "stage"), [("experiments/*/merged_bursts.parquet", "archetypes"),
                                               ("experiments/*/archetypes.parquet", "report"),
                                               ("runs/*/bursts/*.parquet", "detect")])
def test_a_night_stage_reading_a_damaged_page_is_the_one_error(analysed, tmp_path, pattern, stage,
                                                              detect_reads_any_history):
    from synthtrace.pipelines import jobs
    from synthtrace.warehouse.errors import DamagedPartError
    from synthtrace.warehouse.layout import Warehouse

    wh, files = _damaged_copy(analysed, tmp_path, pattern)
    before = tree_digest(wh)
    job = jobs.job(stage)
    with pytest.raises(DamagedPartError) as raised:
        job.run(Warehouse(wh), *([EXP] if job.scope == "experiment" else []), jobs.NightSettings())
    assert any(str(f) in str(raised.value) for f in files), raised.value
    assert tree_digest(wh) == before


@pytest.mark.real_traces
def test_every_committed_folder_lists_its_files_and_a_rewrite_keeps_the_recorded_digests(analysed, tmp_path):
    """The checksums cover every file of a run and an experiment; an experiment rewritten by ``update_dir`` (here
    the analysis, which keeps the merge's files as hard links) keeps the digests recorded for the kept files, so a
    file damaged before the rewrite is still found after it (hashing it anew would bless the damage)."""
    import polars as pl

    from synthtrace.warehouse.checksums import Recorded, recorded
    from synthtrace.warehouse.errors import DamagedPartError
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.parts import read_part

    wh = tmp_path / "wh"
    shutil.copytree(analysed, wh, symlinks=True)
    for folder in [*wh.glob("runs/*"), *wh.glob("experiments/*")]:
        stored = [p for p in folder.rglob("*") if p.is_file() and p.name != "checksums.json"]
        assert stored and all(isinstance(recorded(p), Recorded) for p in stored), folder
    exp = next(wh.glob("experiments/*"))
    merged = exp / "merged_bursts.parquet"
    merged.write_bytes(damage_page(merged.read_bytes()))
    Warehouse(wh).update_dir(exp, {"note": pl.DataFrame({"x": [1]})})
    with pytest.raises(DamagedPartError, match="checksum"):
        read_part(exp / "merged_bursts.parquet")


@pytest.mark.real_traces
def test_a_folder_stored_without_checksums_still_reads(analysed, tmp_path, run_cli):
    """A warehouse written before checksums (no checksums.json) reads as before: its frames are checked."""
    wh = tmp_path / "wh"
    shutil.copytree(analysed, wh, symlinks=True)
    for m in wh.rglob("checksums.json"):
        m.unlink()
    code, out, err = run_cli("sql", "SELECT count(*) AS n FROM merged_bursts", "-w", wh, "-f", "csv")
    assert code == 0 and int(out.splitlines()[1]) > 0, err
    code, _, err = run_cli("export", EXP, "-o", tmp_path / "e.json", "-w", wh)
    assert code == 0, err


@pytest.mark.real_traces
@pytest.mark.parametrize("kind", PAGE_DAMAGE)
def test_a_run_record_damaged_inside_is_named_and_ingesting_its_trace_again_repairs_it(analysed, tmp_path, run_cli,
                                                                                         kind):
    """The remedy the line gives must work for damage a decoder does not notice: ingest took a run whose
    run.parquet still decoded for already stored (and left it damaged)."""
    import polars as pl

    wh = tmp_path / "wh"
    shutil.copytree(analysed, wh, symlinks=True)
    record = sorted(wh.glob("runs/*/run.parquet"))[0]
    source = pl.read_parquet(record).get_column("source_path")[0]
    record.write_bytes(PAGE_DAMAGE[kind](record.read_bytes()))
    code, out, err = run_cli("runs", "-w", wh)  # attack 8 B6: the other run is listed, the damaged one named
    assert code == 0 and str(record) in err and "ingest its trace again" in err, err
    assert f"synthtrace runs rm {record.parent.name}" in err and record.parent.name not in out, (out, err)
    code, _, err = run_cli("ingest", source, "--experiment", EXP, "-w", wh)
    assert code == 0, err
    code, out, err = run_cli("sql", "SELECT count(*) AS n FROM runs", "-w", wh, "-f", "csv")
    assert code == 0 and out.splitlines()[1] == "2", (out, err)


@pytest.mark.real_traces
def test_a_damaged_checksums_file_vouches_for_nothing_and_its_runs_remedy_repairs_it(analysed, tmp_path, run_cli):
    """Damaged checksums cannot tell a sound file from a damaged one: each read of a file of that folder is
    refused (they once read as a folder stored without checksums: unchecked); ingesting the trace again
    replaces the run whole."""
    import polars as pl

    wh = tmp_path / "wh"
    shutil.copytree(analysed, wh, symlinks=True)
    run = sorted(wh.glob("runs/*"))[0]
    source = pl.read_parquet(run / "run.parquet").get_column("source_path")[0]
    (run / "checksums.json").write_bytes(b'{"algorithm": "xxh3_128", "files": {"run.parquet": [')
    before = tree_digest(wh)
    code, _, err = run_cli("sql", "SELECT count(*) FROM bursts", "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(run) in err and "checksums.json" in err, err
    assert tree_digest(wh) == before
    code, _, err = run_cli("ingest", source, "--experiment", EXP, "-w", wh)
    assert code == 0, err
    code, out, err = run_cli("sql", "SELECT count(*) AS n FROM runs", "-w", wh, "-f", "csv")
    assert code == 0 and out.splitlines()[1] == "2", (out, err)
