"""The merge's per-burst quality flags reach the metrics users query (contention25's left-alone item): a burst whose
IPC or misses per instruction mix another machine state's values says so in ``burst_metrics`` as in
``merged_bursts``, so one ``WHERE other_machine_state IS NOT TRUE`` serves both views."""
from __future__ import annotations

import polars as pl

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.schema import OTHER_STATE
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.sql import query


def test_burst_metrics_carry_the_merged_bursts_flags(tmp_path, run_cli):
    """The shared_node campaign flags tasks 1-4's bursts (run 1's cache counters in a contended state); after
    ``archetypes`` each burst's metrics row carries the same ``other_machine_state`` and ``estimated`` as its merged
    burst. Failed first: burst_metrics had no such column (QueryError)."""
    c = mech.simulate(tmp_path, mech.campaign("shared_node", 0))
    wh = tmp_path / "wh"
    assert run_cli("ingest", *c.traces, "--experiment", "x", "-w", wh)[0] == 0
    for step in (("merge", "x"), ("archetypes", "x")):
        code, _, err = run_cli(*step, "-w", wh)
        assert code == 0, err
    keys = "task, thread, burst_seq"
    got = pl.from_arrow(query(Warehouse(wh), f"""
        SELECT m.task, m.{OTHER_STATE} AS merged_flag, b.{OTHER_STATE} AS metrics_flag,
               m.estimated AS merged_est, b.estimated AS metrics_est
        FROM merged_bursts m JOIN burst_metrics b USING (experiment, {keys})"""))
    n_merged = query(Warehouse(wh), "SELECT count(*) FROM merged_bursts").to_pylist()[0]
    assert got.height == next(iter(n_merged.values())), "every merged burst has its metrics row"
    assert got.get_column("metrics_flag").to_list() == got.get_column("merged_flag").to_list()
    assert got.get_column("metrics_est").to_list() == got.get_column("merged_est").to_list()
    flagged = set(got.filter(pl.col("metrics_flag")).get_column("task").to_list())
    assert flagged == {1, 2, 3, 4}, flagged
