"""What is computed from an experiment's merge follows the merge (attack 12 F3, F6, F9): the night redoes the
warehouse stages after redoing an experiment's stage, an analysis of a merge replaced while it was computed is not
committed, and a merge that does not cover all the experiment's runs is said so. Cases on the two LULESH runs (the
session's ``merged_lulesh``), copied per case."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse

pytestmark = pytest.mark.real_traces

RUN_A, RUN_B = "d12d9ce89c673a43", "113698729df2a852"  # 2,140 and 848 bursts


def _copy(merged_lulesh: Path, tmp_path: Path) -> Path:
    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    return wh


# ---------------------------------------------------------------------------------------------------- F3
def _night_done(merged_lulesh: Path, tmp_path: Path) -> tuple[Warehouse, Path, list[str], list[str]]:
    """A copy of the merged LULESH pair with every night stage recorded done (the night's records as the flow
    writes them, :mod:`~synthtrace.pipelines.nightly`'s loop), an empty drop, and the per-experiment and
    per-warehouse stage names."""
    from synthtrace.pipelines import jobs
    from synthtrace.pipelines.nightly import nothing_to_do
    from synthtrace.warehouse import night_state

    wh = Warehouse(_copy(merged_lulesh, tmp_path))
    drop = tmp_path / "drop"
    drop.mkdir()
    per_experiment = [j.name for j in jobs.JOBS if j.scope == "experiment"]
    per_warehouse = [j.name for j in jobs.JOBS if j.scope == "warehouse"]
    (item,), _ = night_state.pending(wh, per_experiment)
    night_state.mark_experiment(wh, item, per_experiment)
    night_state.mark_global(wh, night_state.fingerprint(wh), per_warehouse)
    assert nothing_to_do(drop, wh) is not None
    return wh, drop, per_experiment, per_warehouse


def test_a_night_that_redoes_an_experiments_stage_redoes_the_warehouse_stages(merged_lulesh, tmp_path, run_cli):
    """Attack 12 F3: after a merge by hand (``--reference`` the other run) the next night redid the archetypes on
    the new merge, then said "nothing new for: ... report" and left the report of the old merge: the warehouse
    stages' fingerprint hashed the experiments' stage names, the same once the dropped stage was redone. The
    night's records as the flow writes them (:mod:`~synthtrace.pipelines.nightly`'s loop), the merge by the CLI."""
    from synthtrace.pipelines.nightly import nothing_to_do
    from synthtrace.warehouse import night_state

    wh, drop, per_experiment, per_warehouse = _night_done(merged_lulesh, tmp_path)
    # a merge by hand makes the analysis stale; night 2 redoes it ...
    assert run_cli("merge", "lulesh-8r", "--reference", RUN_B, "-w", wh.root)[0] == 0
    (item,), _ = night_state.pending(wh, per_experiment)
    assert item.stages == ("archetypes",)
    night_state.mark_experiment(wh, item, ["archetypes"])
    # ... and then the warehouse stages computed from the analysis it replaced
    assert night_state.global_stages_left(wh, per_warehouse, night_state.fingerprint(wh)) == per_warehouse
    assert nothing_to_do(drop, wh) is None
    # once they are done, the next night has nothing to do
    night_state.mark_global(wh, night_state.fingerprint(wh), per_warehouse)
    assert nothing_to_do(drop, wh) is not None


def test_an_analysis_by_hand_makes_the_warehouse_stages_stale(merged_lulesh, tmp_path, run_cli):
    """Attack 12 (after F3's fix): a hand ``archetypes`` commits a new analysis but writes no night record, so the
    warehouse stages' fingerprint stayed the same and the next night left the report of the analysis it replaced.
    The fingerprint follows what each experiment folder holds: the warehouse stages are due again."""
    from synthtrace.pipelines.nightly import nothing_to_do
    from synthtrace.warehouse import night_state

    wh, drop, per_experiment, per_warehouse = _night_done(merged_lulesh, tmp_path)
    assert run_cli("archetypes", "lulesh-8r", "-w", wh.root)[0] == 0
    assert night_state.pending(wh, per_experiment)[0] == []  # the experiment's stages: done (by hand)
    assert night_state.global_stages_left(wh, per_warehouse, night_state.fingerprint(wh)) == per_warehouse
    assert nothing_to_do(drop, wh) is None


# ---------------------------------------------------------------------------------------------------- F6
@pytest.mark.parametrize("analysed", ["merged", "runs"])
def test_an_analysis_of_a_merge_replaced_while_it_ran_is_not_committed(merged_lulesh, tmp_path, run_cli, monkeypatch,
                                                                       analysed):
    """Attack 12 F6: an ``archetypes`` started before ``merge --reference <the other run>`` committed the old
    merge's analysis (2,140 bursts of the first run) after it, exit 0: its commit checked the runs, not that the
    merge was the one it read. It now refuses in one line and leaves the folder as the merge left it. The merge
    lands between the analysis' read and its commit (the seam: the computation); ``runs``: an experiment analysed
    before its first merge, merged meanwhile."""
    from synthtrace.models import analysis
    from testing.traces import tree_digest

    wh = _copy(merged_lulesh, tmp_path)
    exp = wh / "experiments" / "lulesh-8r"
    if analysed == "runs":
        shutil.rmtree(exp)
    compute, after_merge = analysis.analyse_stored, {}

    def merged_meanwhile(*args, **kwargs):
        result = compute(*args, **kwargs)
        code, _, err = run_cli("merge", "lulesh-8r", "--reference", RUN_B, "-w", wh)
        assert code == 0, err
        after_merge["digest"] = tree_digest(exp)
        return result

    monkeypatch.setattr(analysis, "analyse_stored", merged_meanwhile)
    code, out, err = run_cli("archetypes", "lulesh-8r", "-w", wh)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "the merge changed while it was analysed" in lines[0], (out, err)
    assert "run archetypes again" in lines[0]
    assert tree_digest(exp) == after_merge["digest"] and not (exp / "archetypes.parquet").exists()
    monkeypatch.setattr(analysis, "analyse_stored", compute)
    assert run_cli("archetypes", "lulesh-8r", "-w", wh)[0] == 0  # run again: the new merge's analysis
    code, out, err = run_cli("sql", "SELECT count(*), min(run_id) FROM archetypes WHERE unit = 'burst'", "-f", "csv",
                             "-w", wh)
    assert code == 0 and out.splitlines()[1:] == [f'848,"{RUN_B}"'], (out, err)


# ---------------------------------------------------------------------------------------------------- F9
def _another_night(tmp_path: Path) -> Path:
    """The 7+1 LULESH run as another night's (its header's date changed: another content, another run)."""
    from testing.traces import LULESH_B, copy_trace

    prv = copy_trace(LULESH_B, tmp_path / "later", "x71")
    text = prv.read_bytes()
    assert b"(31/01/2022" in text[:40]
    prv.write_bytes(text.replace(b"(31/01/2022", b"(01/02/2022", 1))
    return prv


def test_a_run_ingested_into_a_merged_experiment_is_said_to_be_out_of_its_merge(merged_lulesh, tmp_path, run_cli):
    """Attack 12 F9: a run ingested into a merged experiment was left out of its merge without a word: ingest said
    nothing, and ``archetypes``, ``export`` and ``report`` read the merge of the other runs, exit 0. Ingest now says
    the experiment was merged without it, and each reader of the merge says which runs it does not cover."""
    wh = _copy(merged_lulesh, tmp_path)
    code, out, err = run_cli("ingest", _another_night(tmp_path), "--experiment", "lulesh-8r", "-w", wh)
    assert code == 0 and "ingested as x71" in out, (out, err)
    assert "note: experiment lulesh-8r was merged without this run: run `synthtrace merge lulesh-8r`" in err, err
    uncovered = "experiment lulesh-8r: its merge does not cover 1 of its 3 runs (x71, added since it was merged)"
    code, out, err = run_cli("archetypes", "lulesh-8r", "--no-discover", "-w", wh)
    assert code == 0 and f"note: {uncovered}" in " ".join(err.split()), (out, err)
    code, out, err = run_cli("export", "lulesh-8r", "--format", "csv", "-o", tmp_path / "x.csv", "-w", wh)
    assert code == 0 and f"note: {uncovered}" in " ".join(err.split()), (out, err)
    code, out, err = run_cli("report", "--experiment", "lulesh-8r", "-o", tmp_path / "r.html", "-w", wh)
    assert code == 0 and f"note: {uncovered}" in " ".join(err.split()), (out, err)
    assert "does not cover 1 of its 3 runs (x71" in (tmp_path / "r.html").read_text()
    # attack 13: train and predict read the same merge
    code, out, err = run_cli("train", "--experiments", "lulesh-8r", "--folds", "2", "-w", wh)
    assert code == 0 and f"note: {uncovered}" in " ".join(err.split()), (out, err)
    code, out, err = run_cli("predict", "--experiment", "lulesh-8r", "-w", wh)
    assert code == 0 and f"note: {uncovered}" in " ".join(err.split()), (out, err)
    # merged again, nothing is said
    assert run_cli("merge", "lulesh-8r", "-w", wh)[0] == 0
    code, out, err = run_cli("export", "lulesh-8r", "--format", "csv", "-o", tmp_path / "y.csv", "-w", wh)
    assert code == 0 and "does not cover" not in err, err
