"""Where an ingest without ``--experiment`` places a trace (issue 23, attack 12 F11, F12): with its folder's earlier
runs of the same program, matched by the program the runs record (not the app ``--app`` named), looked up in the
folder's index (not the whole runs table)."""
from __future__ import annotations

import pytest

from synthtrace.tracelib.formats.source import find_traces
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.traces import JACOBI, LULESH_A, LULESH_B, PRIME, copy_trace


def _experiments(wh: Warehouse) -> dict[str, str]:
    return {r["run_name"]: r["experiment"] for r in query(wh, "SELECT run_name, experiment FROM runs").to_pylist()}


@pytest.mark.real_traces
def test_the_next_run_of_a_binary_joins_its_folders_runs_ingested_with_app(tmp_path, run_cli):
    """Attack 12 F11: the 4+4 LULESH run ingested with ``--app lulesh`` went to experiment ``lulesh`` (its folder);
    the 7+1 run of the same binary from the same folder then went to ``lulesh2.0`` with a note that the folder held
    two applications: the rule compared the stored app (what ``--app`` chose) with the binary the new trace records.
    Both record ``lulesh2.0``: one experiment, no note."""
    src, wh = tmp_path / "src" / "lulesh", tmp_path / "wh"
    first = copy_trace(LULESH_A, src)
    assert run_cli("ingest", first, "--app", "lulesh", "-w", wh)[0] == 0
    second = copy_trace(LULESH_B, src)
    code, out, err = run_cli("ingest", second, "-w", wh)
    assert code == 0 and "applications" not in err, err
    assert _experiments(Warehouse(wh)) == {LULESH_A.stem: "lulesh", LULESH_B.stem: "lulesh"}


@pytest.mark.real_traces
def test_placing_a_trace_reads_only_its_folders_runs(tmp_path, monkeypatch, run_cli):
    """Attack 12 F12: every ingest without ``--experiment`` read the whole runs table (a manifest check and a read per
    stored run, ~1.3 ms of CPU each). Now a trace's folder is looked up in the index its runs' ingests keep: the runs
    of other folders are not read at all, and one run is read per program of its own folder. A warehouse written
    before the index is indexed once, and places traces as before."""
    from synthtrace.warehouse import ingest
    from synthtrace.warehouse.ingest import experiment_names, ingest_trace

    wh = Warehouse(tmp_path / "wh")
    for trace, folder in ((LULESH_A, "lulesh"), (PRIME, "primes"), (JACOBI, "stencils")):
        ingest_trace(wh, copy_trace(trace, tmp_path / folder))
    new = copy_trace(LULESH_B, tmp_path / "lulesh")
    assert experiment_names([new], wh)[0] == {new: "lulesh"}

    read: list[str] = []
    real_existing_run = ingest.existing_run

    def counted(w: Warehouse, run_id: str) -> dict | None:
        read.append(run_id)
        return real_existing_run(w, run_id)

    def no_whole_table(*_a, **_k):
        raise AssertionError("the whole runs table was read to place one trace")

    monkeypatch.setattr(ingest, "runs_table", no_whole_table)
    code, out, err = run_cli("ingest", copy_trace(PRIME, tmp_path / "primes", "prime.night2"), "-w", wh.root)
    assert code == 0 and "experiment primes" in out, (out, err)
    monkeypatch.setattr(ingest, "existing_run", counted)
    assert experiment_names([new], wh)[0] == {new: "lulesh"}
    assert len(read) == 1, read  # the lulesh run, not the primes' or the stencils'
    other = copy_trace(PRIME, tmp_path / "elsewhere")
    assert experiment_names([other], wh)[0] == {other: "elsewhere"} and len(read) == 1, read
    monkeypatch.undo()

    # a warehouse written before the index places traces from its runs table, and its next commit indexes it
    from synthtrace.warehouse import folder_index

    (wh.root / folder_index.FOLDER_INDEX / folder_index.COMPLETE).unlink()
    assert experiment_names(find_traces([tmp_path / "lulesh"]), wh)[0] == {
        tmp_path / "lulesh" / LULESH_A.name: "lulesh", new: "lulesh"}
    ingest_trace(wh, new, default_experiment="lulesh")
    assert folder_index.complete(wh) and len(folder_index.folder_runs(wh, "lulesh")["lulesh2.0"]) == 2


@pytest.mark.real_traces
def test_placing_a_trace_only_reads_the_index_and_runs_rm_forgets_its_entries(tmp_path, monkeypatch):
    """Placing a trace never writes the index (a refused ingest, or one into a read-only warehouse, changes
    nothing): the entry of a run deleted by hand is skipped, the trace placed all the same; ``runs rm``, the writer
    that removes runs, removes their entries."""
    import shutil
    from pathlib import Path

    from synthtrace.warehouse import folder_index
    from synthtrace.warehouse.ingest import experiment_names, ingest_trace
    from synthtrace.warehouse.run_admin import remove_runs

    wh = Warehouse(tmp_path / "wh")
    gone = ingest_trace(wh, copy_trace(LULESH_A, tmp_path / "lulesh"), default_experiment="lulesh").run_id
    kept = ingest_trace(wh, copy_trace(PRIME, tmp_path / "primes")).run_id
    shutil.rmtree(wh.run_dir(gone))
    new = copy_trace(LULESH_B, tmp_path / "lulesh")
    with monkeypatch.context() as m:
        m.setattr(Path, "unlink", lambda *_a, **_k: pytest.fail("placement wrote the index"))
        assert experiment_names([new], wh)[0] == {new: "lulesh"}
    assert folder_index.folder_runs(wh, "lulesh") == {"lulesh2.0": [gone]}
    remove_runs(wh, [kept])
    assert folder_index.folder_runs(wh, "primes") == {}
