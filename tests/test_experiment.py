"""The experiment as one object (issue 26 item 1): a command reads the runs table once, the merge stores its
reference run and options in ``experiments/<name>/experiment.json``, and the stages read the reference from there."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from synthtrace.warehouse import Warehouse
from testing.traces import LULESH_A, LULESH_B, PRIME, copy_trace


@pytest.fixture
def lulesh(merged_lulesh, tmp_path) -> Path:
    """A copy of the merged LULESH warehouse, with one more experiment beside it (prime) so that reading the
    whole runs table and reading the experiment's runs differ."""
    from synthtrace.warehouse.ingest import ingest_trace

    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh)
    ingest_trace(Warehouse(wh), copy_trace(PRIME, tmp_path / "prime"), experiment="prime")
    return wh


def _runs_table_reads(monkeypatch) -> list[str]:
    """Every read of the runs table (the ``runs`` view's files, read through the warehouse's snapshot) from now on.
    [helper security] it counted globs of ``runs/*/run.parquet``; the runs table reads through
    ``warehouse.snapshot.read_whole`` since issue 23 (the count is then 0 if the reads move again: the test fails)."""
    from synthtrace.warehouse import snapshot

    scans: list[str] = []
    read_whole = snapshot.read_whole

    def counting(wh, views, read, *rest):
        if list(views) == ["runs"]:
            scans.append(str(wh.root))
        return read_whole(wh, views, read, *rest)

    monkeypatch.setattr(snapshot, "read_whole", counting)
    return scans


@pytest.mark.parametrize("command", [["merge", "lulesh-8r"], ["archetypes", "lulesh-8r", "--no-discover"],
                                     ["merge", "lulesh-8r", "--export-prv", "OUT"]])
def test_a_command_on_one_experiment_reads_the_runs_table_once(lulesh, run_cli, monkeypatch, command, tmp_path):
    args = [str(tmp_path / "out" / "merged") if a == "OUT" else a for a in command]
    scans = _runs_table_reads(monkeypatch)
    code, out, err = run_cli(*args, "-w", lulesh)
    assert code == 0, err
    assert len(scans) == 1, f"{' '.join(command)} read the runs table {len(scans)} times"


def test_merge_stores_its_reference_run_and_options_and_the_analysis_reads_them(lulesh, run_cli):
    wh = Warehouse(lulesh)
    runs = wh.experiment("lulesh-8r").runs
    second_id, second = runs.row(1, named=True)["run_id"], runs.row(1, named=True)["run_name"]
    code, _, err = run_cli("merge", "lulesh-8r", "--reference", second, "--no-rescale", "-w", lulesh)
    assert code == 0, err
    record = json.loads((lulesh / "experiments" / "lulesh-8r" / "experiment.json").read_text())
    assert record["reference_run_id"] == second_id and record["reference_run"] == second
    assert record["merge_options"]["reference"] == second and record["merge_options"]["rescale"] is False
    assert sorted(record["run_ids"]) == sorted(runs.get_column("run_id").to_list())
    # the merged bursts are the second run's: the analysis takes that run's MPI calls with them
    trace = wh.experiment("lulesh-8r").trace()
    assert trace.source == "merged" and trace.reference_run_id == second_id
    labelled = trace.labelled()
    assert labelled.bursts.get_column("run_id").unique().to_list() == [second_id]
    assert labelled.calls.get_column("run_id").unique().to_list() == [second_id]
    own_calls = pl.read_parquet(lulesh / "runs" / second_id / "mpi_calls.parquet")
    assert labelled.calls.height == own_calls.height


def test_a_merge_stored_before_the_record_still_names_its_reference(lulesh):
    """Warehouses merged before experiment.json existed: the reference is the one run of the merged bursts."""
    (lulesh / "experiments" / "lulesh-8r" / "experiment.json").unlink(missing_ok=True)
    exp = Warehouse(lulesh).experiment("lulesh-8r")
    merged = pl.read_parquet(lulesh / "experiments" / "lulesh-8r" / "merged_bursts.parquet")
    assert exp.reference_run_id(merged) == merged.get_column("run_id")[0]
    assert exp.trace().labelled().calls.get_column("run_id").unique().to_list() == [merged.get_column("run_id")[0]]


def test_an_unknown_experiment_names_the_known_ones(lulesh):
    from synthtrace.warehouse.errors import UnknownExperimentError

    with pytest.raises(UnknownExperimentError, match=r"no experiment 'nope' .*\(experiments: lulesh-8r, prime\)"):
        Warehouse(lulesh).experiment("nope").trace()


def test_experiment_runs_are_sorted_by_name_and_hold_only_its_runs(lulesh):
    exp = Warehouse(lulesh).experiment("lulesh-8r")
    assert list(exp.run_names.values()) == sorted([LULESH_A.stem, LULESH_B.stem])
    assert set(exp.runs.get_column("experiment").to_list()) == {"lulesh-8r"}
