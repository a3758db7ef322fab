"""The night as a loop over the jobs table (issue 26 items 2 and 6): a stage added as one row of ``jobs.JOBS`` runs
on the experiments that changed, is recorded as done, is skipped by ``--skip`` and by the next night with nothing
new; and a night hashes each new trace once (discovery's hash is the ingest's run_id)."""
from __future__ import annotations

import logging

import pytest

from synthtrace.pipelines import jobs
from synthtrace.warehouse import Warehouse
from testing.traces import PRIME, copy_trace

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]  # runs nights (Prefect)


def test_a_job_added_to_the_table_runs_once_per_changed_experiment_and_each_trace_is_hashed_once(
        prefect_harness, tmp_path, monkeypatch):
    from synthtrace.pipelines.nightly import run_night
    from synthtrace.tracelib.formats.source import ContentHasher

    seen: list[tuple[str, str | None]] = []

    def count_bursts(wh: Warehouse, experiment: str, settings: jobs.NightSettings) -> dict:
        exp = wh.experiment(experiment)
        seen.append((experiment, settings.machine))
        return {"bursts": exp.trace().bursts.height}

    row = jobs.Job("count", "experiment", count_bursts, invalidates=())
    monkeypatch.setattr(jobs, "JOBS", (*jobs.JOBS[:2], row, *jobs.JOBS[2:]))
    monkeypatch.setattr(jobs, "STAGES", tuple(j.name for j in jobs.JOBS))
    hashed: list[list[str]] = []
    of_files = ContentHasher.of_files.__func__

    def counting(cls, files):
        hashed.append([f.name for f in files])
        return of_files(cls, files)

    monkeypatch.setattr(ContentHasher, "of_files", classmethod(counting))
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "prime")
    wh = Warehouse(tmp_path / "wh")
    skip = [j.name for j in jobs.JOBS if j is not row]  # the new job alone

    first = run_night(drop, wh, machine="generic", skip=skip, settle_s=0)
    assert [r["run_name"] for r in first.ingested] == ["prime_v0"]
    assert seen == [("prime", "generic")]
    assert len(hashed) == 1, f"the trace was hashed {len(hashed)} times in one night: {hashed}"
    second = run_night(drop, wh, skip=skip, settle_s=0)  # nothing new: the job is done for prime's runs
    assert seen == [("prime", "generic")] and "count" in second.up_to_date
    copy_trace(PRIME, drop / "prime", "prime.run1")  # same bytes: no new run, nothing to redo
    run_night(drop, wh, skip=[*skip, "count"], settle_s=0)
    assert seen == [("prime", "generic")]


def test_a_run_that_could_not_be_stored_leaves_its_trace_for_the_next_night(tmp_path, monkeypatch):
    """Attack 7 A6: a night whose stage was removed under it (another writer's cleanup) quarantined the good trace
    for "No such file or directory", for good. A run that could not be stored says nothing of the trace: it stays
    in the drop folder for the next night, reported as failed."""
    from synthtrace.pipelines import nightly
    from synthtrace.warehouse.ingest import RunStoreError

    drop = copy_trace(PRIME, tmp_path / "drop").parent
    wh = Warehouse(tmp_path / "wh").ensure()

    def stage_removed(*args, **kwargs):
        raise RunStoreError(f"{wh.root}: cannot store the run of {PRIME.name} (No such file or directory (os "
                            f"error 2): {wh.staging_dir}/r.0badc0de.1/uncore/part-00000.parquet)")

    monkeypatch.setattr(jobs, "ingest", stage_removed)
    monkeypatch.setattr(nightly, "get_run_logger", lambda: logging.getLogger("night"))  # the task, outside a flow
    item = {"path": str(drop / PRIME.name), "run_id": None, "experiment": "drop", "known": None}
    out = nightly.ingest_task.fn(item, str(drop), wh)
    assert out["status"] == "failed" and "No such file" in out["reason"]
    assert (drop / PRIME.name).is_file() and not (drop / ".quarantine").exists()


def test_a_night_whose_record_of_a_done_job_cannot_be_written_says_so_in_its_summary(
        prefect_harness, tmp_path, monkeypatch):
    """Attack 19 F7: on a full disk the night's record that a job is done for an experiment (`mark_experiment`)
    raised outside every stage's catch: Prefect's 30-line traceback, the night ended, its later stages neither run
    nor reported. It is the job's failure for that experiment, said in the summary as any stage failure: the job
    stays pending (done again next night), the experiment's later jobs wait, the night goes on and ends."""
    import errno

    from synthtrace.pipelines import nightly

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "wh" / "experiments" / "prime"))

    monkeypatch.setattr(nightly, "mark_experiment", disk_full)
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop / "prime")
    wh = Warehouse(tmp_path / "wh")
    first_job = next(j.name for j in jobs.JOBS if j.scope == "experiment")
    summary = nightly.run_night(drop, wh, skip=["report", "retrain"], settle_s=0)
    assert [r["run_name"] for r in summary.ingested] == ["prime_v0"]
    assert [(e["stage"], e["args"]) for e in summary.errors] == [(first_job, ["prime"])], summary.errors
    assert "No space left on device" in summary.errors[0]["error"]
