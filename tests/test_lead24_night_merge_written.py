"""review24 F10: a night's merge stopped once its result is committed ends with its summary, not ReadStopped.

night24 (1985070) checks the night's stop at every step of a merge, the last one ("written") included, which is
reported after the commit: a Ctrl-C there raised ReadStopped over a stored merge, so the stage was recorded as not
done ("nothing committed", its docstring said) and the next night merged the experiment again."""
from __future__ import annotations

from synthtrace.pipelines import jobs
from synthtrace.tracelib.formats.otf2 import stop_reads
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.experiment import Experiment
from testing.traces import LULESH_A, LULESH_B, copy_trace


def test_a_stop_after_the_merge_is_committed_keeps_the_stage_s_summary(tmp_path, monkeypatch):
    from synthtrace.pipelines.cli import main

    for prv in (LULESH_A, LULESH_B):
        copy_trace(prv, tmp_path / "lulesh")
    assert main(["ingest", str(tmp_path / "lulesh"), "--experiment", "lulesh-8r", "-w", str(tmp_path / "wh")]) == 0
    commit = Experiment.commit_merge

    def committed_then_stopped(self, *args, **kwargs):  # the night stopped just after the merge was stored
        path = commit(self, *args, **kwargs)
        assert stop_reads() >= 1
        return path

    monkeypatch.setattr(Experiment, "commit_merge", committed_then_stopped)
    wh = Warehouse(tmp_path / "wh")
    summary = jobs.merge(wh, "lulesh-8r")
    assert summary is not None and summary["n_bursts"] > 0
    assert (wh.experiment("lulesh-8r").dir / "merged_bursts.parquet").exists()
