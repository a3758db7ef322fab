"""Folder names of the form ``name=value`` are names, never data (issue 23, attack 7 A1).

DuckDB reads a path's ``key=value`` folders as hive partition columns that replace the files' own columns of that
name; HPC paths hold such folders (``/scratch/jobid=123/``, ``date=2026-12-02``), and an experiment may be named
``task=3``. Every view must answer from the stored rows whatever the warehouse's path and names."""
from __future__ import annotations

import pytest

PRIME = "../shared/traces/paraver/prime_v0.prv"


@pytest.mark.real_traces
@pytest.mark.parametrize(("folder", "experiment"), [("task=5", "prime"), ("run_id=x", "date=2026")])
def test_a_key_value_folder_in_the_path_relabels_no_row(tmp_path, run_cli, folder, experiment):
    wh = tmp_path / folder / "wh"
    code, _, err = run_cli("ingest", PRIME, "-w", wh, "--experiment", experiment)
    assert code == 0, err
    code, out, err = run_cli("sql", "SELECT count(DISTINCT task) AS tasks, count(DISTINCT run_id) AS runs, "
                             "min(run_id) AS run FROM bursts", "-w", wh, "--format", "csv")
    assert code == 0, err
    tasks, runs, run = out.strip().splitlines()[-1].replace('"', "").split(",")
    assert (int(tasks), int(runs)) == (16, 1) and run != "x", out
    code, out, err = run_cli("sql", "SELECT DISTINCT experiment FROM runs", "-w", wh, "--format", "csv")
    assert code == 0 and experiment in out, (out, err)
