"""Where an ingest without ``--experiment`` places a trace (issue 23, attack 12 F11, F12): with its folder's earlier
runs of the same program, matched by the program the runs record (not the app ``--app`` named), looked up in the
folder's index (not the whole runs table)."""
from __future__ import annotations

from pathlib import Path

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


def _interleaved(wh: Warehouse, first: Path, second: Path, monkeypatch) -> list[str]:
    """Two ingests as two ``synthtrace ingest`` commands at the same moment would run them: each places its trace
    (:func:`experiment_names`) before the other has committed, and the second commits while the first is still
    writing its run (forced: the first's run is written, then the second's ingest runs whole, then the first
    commits). Returns the first's notes."""
    from synthtrace.warehouse import ingest
    from synthtrace.warehouse.ingest import experiment_names, ingest_trace

    real_write_run = ingest._write_run

    def write_run(*args, **kwargs):
        summary = real_write_run(*args, **kwargs)
        monkeypatch.setattr(ingest, "_write_run", real_write_run)
        ingest_trace(wh, second, default_experiment=experiment_names([second], wh)[0][second])
        return summary

    placed = experiment_names([first], wh)[0][first]
    monkeypatch.setattr(ingest, "_write_run", write_run)
    return ingest_trace(wh, first, default_experiment=placed).notes


def _programs_by_experiment(wh: Warehouse) -> dict[str, set[str]]:
    from synthtrace.warehouse.programs import run_programs

    keys = run_programs(wh)
    out: dict[str, set[str]] = {}
    for r in query(wh, "SELECT run_id, experiment FROM runs").to_pylist():
        out.setdefault(r["experiment"], set()).add(keys[r["run_id"]])
    return out


@pytest.mark.parametrize("binaries", [("solver", "fft"), ("a.out", "a.out")])
def test_two_programs_from_one_folder_ingested_at_once_are_two_experiments(tmp_path, monkeypatch, binaries):
    """Attack 13 F5: two ``synthtrace ingest`` of two programs' traces from one folder at the same moment each chose
    the folder's experiment before the other had committed, so both landed in one experiment (a merge would mix
    them); two ``a.out`` programs also both got the app ``a.out``. The placement is decided again at the commit,
    under the writers' lock: the second to commit sees the first's program and goes apart, as it would after it."""
    import warnings

    from testing.otf2_variants import scorep_archive

    solver = ("solve_a", "assemble_a", "precond_a", "smooth_a", "restrict_a", "prolong_a")
    fft = ("fft_b", "transpose_b", "pack_b", "unpack_b", "twiddle_b", "plan_b")
    first = scorep_archive(tmp_path / "campaign" / "scorep-1", binaries[0], solver)
    second = scorep_archive(tmp_path / "campaign" / "scorep-2", binaries[1], fft)
    wh = Warehouse(tmp_path / "wh")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        notes = _interleaved(wh, first, second, monkeypatch)
    assert any("while it was read, runs of another program" in n for n in notes), notes  # it says why
    by_experiment = _programs_by_experiment(wh)
    assert len(by_experiment) == 2 and all(len(p) == 1 for p in by_experiment.values()), by_experiment
    apps = {r["app"] for r in query(wh, "SELECT app FROM runs").to_pylist()}
    assert len(apps) == 2, apps  # the second a.out program has an app of its own, as when ingested after the first
    # the folder's next trace of either program joins its program's runs
    from synthtrace.warehouse.ingest import experiment_names

    again = scorep_archive(tmp_path / "campaign" / "scorep-3", binaries[0], solver)
    solver_experiment = next(e for e, p in by_experiment.items() if p == {_key_of(wh, "scorep-1")})
    assert experiment_names([again], wh)[0] == {again: solver_experiment}


def _key_of(wh: Warehouse, run_name: str) -> str:
    from synthtrace.warehouse.programs import run_programs

    run_id = query(wh, f"SELECT run_id FROM runs WHERE run_name = '{run_name}'").to_pylist()[0]["run_id"]
    return run_programs(wh)[run_id]
