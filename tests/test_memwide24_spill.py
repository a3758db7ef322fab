"""The partitioned merge keeps on disk only the groups' spilled bursts it will still read (review23 item 7: every
group's folder, superseded ones included, stayed until the merge ended: its peak disk use was every group's bursts
and partners' bursts, aligned once or more, plus the merged parts)."""
from __future__ import annotations

import warnings
from pathlib import Path

import polars as pl
import pytest

import synthtrace
from synthtrace.tracelib.merge import partitioned
from synthtrace.tracelib.merge.merge_runs import MergeOptions
from synthtrace.tracelib.thread_key import task_key
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.merged import StoredRun
from testing.simulator_campaigns import simulated


def test_a_group_s_spilled_bursts_go_once_its_parts_are_merged(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A master and 7 workers merged in groups of a few tasks, a worker's group told once that it paired the
    master otherwise than the master's group did (as where a hub's alignment depends on every worker), so that
    groups are aligned again with their partners' partners: as each part is merged, the groups' folders on disk
    are those the parts not yet merged read, no superseded alignment's and none of a group whose parts are all
    merged; none is left at the end."""
    c = simulated("master_worker", 0, tmp_path / "sim", ranks=8, iterations=20)
    for t in c.traces:
        synthtrace.ingest(str(tmp_path / "wh"), str(t), experiment="mw")
    wh = Warehouse(tmp_path / "wh")
    exp = wh.experiment("mw")
    sources = [StoredRun(wh, r, exp.run_names[r]) for r in exp.run_ids]
    per_task = sum(s.threads().get_column("bursts").sum() for s in sources) // 8
    spill = tmp_path / "spill"
    on_disk: list[tuple[set[str], set[str]]] = []
    merged_blocks = partitioned.merged_blocks

    def spy(*args, **kwargs):
        unmerged = {pl.read_parquet(p, columns=["_group"]).item(0, 0) for p in spill.glob("pairs-*.parquet")}
        on_disk.append(({f.name for f in (spill / "groups").iterdir()}, unmerged))
        return merged_blocks(*args, **kwargs)

    monkeypatch.setattr(partitioned, "merged_blocks", spy)
    disagreeing, told = partitioned._disagreeing, []

    def master_paired_otherwise(at: Path, gi: int, n_others: int) -> set[int]:
        off = disagreeing(at, gi, n_others)
        if gi == 1 and not told:  # the worker's group's partner: the master
            told.append(gi)
            off |= set(pl.read_parquet(at / "partners-0000-00001.parquet").select(task_key()).to_series())
        return off

    monkeypatch.setattr(partitioned, "_disagreeing", master_paired_otherwise)
    steps: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        partitioned.merge_partitioned(sources, spill, MergeOptions(), "mw", budget=3 * per_task,
                                      max_load=8 * per_task, on_step=lambda what, n: steps.append(what))
    assert any("aligned again" in s for s in steps)  # a superseded alignment to remove
    assert len(on_disk) >= 8
    assert all(folders == unmerged for folders, unmerged in on_disk)
    assert not list((spill / "groups").iterdir())
