"""Uncore memory-controller samples: read from the real LULESH traces, stored with the run, apportioned to bursts."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from testing.traces import LULESH_A, LULESH_B, PRIME
from synthtrace.tracelib.domain.metrics import burst_metrics
from synthtrace.tracelib.domain.machine import load_machine
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.domain.uncore import DRAM_CAS_COLUMN, apportion, attribute_dram_cas, cas_rate_pieces
from synthtrace.warehouse.analysis_store import BURST_ORDER, UncoreInput, uncore_input
from synthtrace.warehouse.ingest import ingest_trace
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.parts import scan_parts
from synthtrace.warehouse.runs import run_bursts, run_parts

pytestmark = pytest.mark.real_traces


def naive_uncore(prv) -> dict[tuple[int, int, int], tuple[int, int]]:
    """(appl, task, thread) -> (number of 46xxxxxx values, their sum), line by line."""
    out: dict[tuple[int, int, int], list[int]] = {}
    with open(prv) as fh:
        for line in fh:
            f = line.rstrip("\n").split(":")
            if f[0] != "2":
                continue
            key = (int(f[2]), int(f[3]), int(f[4]))
            for i in range(6, len(f) - 1, 2):
                if 46_000_000 <= int(f[i]) < 47_000_000:
                    acc = out.setdefault(key, [0, 0])
                    acc[0] += 1
                    acc[1] += int(f[i + 1])
    return {k: (n, s) for k, (n, s) in out.items()}


@pytest.mark.parametrize("prv", [LULESH_A, LULESH_B], ids=["lulesh_4+4", "lulesh_7+1"])
def test_reader_keeps_every_uncore_sample(prv):
    _, _, summary = ParaverTrace(prv).read_tables("r")
    got = summary.uncore.group_by("appl", "task", "thread").agg(pl.len().alias("n"), pl.col("value").sum().alias("s"))
    assert {(r["appl"], r["task"], r["thread"]): (r["n"], r["s"]) for r in got.iter_rows(named=True)} == naive_uncore(
        prv
    )
    assert set(summary.uncore["appl"].unique()) == {2}  # Extrae's uncore readers
    assert summary.uncore["counter"].str.contains("UNC_M_CAS_COUNT").all()
    assert summary.uncore["node"].to_list() == [1] * summary.uncore.height  # one node, from the header


def test_trace_without_uncore_has_no_samples():
    _, _, summary = ParaverTrace(PRIME).read_tables("r")
    assert summary.uncore.height == 0 and summary.thread_nodes.height == 16


def test_apportion_splits_by_miss_rate_and_conserves_traffic():
    # node CAS rate 2/ns over [0, 100); burst A [0, 100) 300 misses, burst B [50, 100) 300 misses
    cas = apportion(np.array([0, 50]), np.array([100, 100]), np.array([300.0, 300.0]),
                    np.array([0]), np.array([100]), np.array([2.0]))
    # [0,50): A alone gets 100; [50,100): rates 3 vs 6 per ns -> A 1/3, B 2/3 of 100
    assert cas == pytest.approx([100 + 100 / 3, 200 / 3])
    # traffic while no burst runs goes to nobody; zero-length or weightless bursts get nothing
    cas = apportion(np.array([10, 40, 40]), np.array([20, 40, 60]), np.array([1.0, 5.0, 0.0]),
                    np.array([0, 30]), np.array([30, 60]), np.array([1.0, 3.0]))
    assert cas == pytest.approx([10.0, 0.0, 0.0])


def test_lulesh_bursts_get_measured_dram_traffic(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    res = ingest_trace(wh, LULESH_A)
    run_dir = wh.run_dir(res.run_id)
    samples = pl.read_parquet(run_dir / "uncore")
    assert samples.height == sum(n for n, _ in naive_uncore(LULESH_A).values())
    bursts = run_bursts(wh, res.run_id)
    cas = bursts.get_column(DRAM_CAS_COLUMN)
    pieces = cas_rate_pieces(samples)
    node_total = float((pieces["rate"] * (pieces["end_ns"] - pieces["start_ns"])).sum())
    # every CAS command of the node during some burst is given to a burst, none twice
    assert 0.9 * node_total <= cas.sum() <= node_total * (1 + 1e-9)
    # CAS counts reads, write-backs and prefetches: more than the demand LLC misses, within reason
    big = bursts.filter(pl.col("duration_ns") > 1_000_000)
    ratio = (big[DRAM_CAS_COLUMN] / big["LONGEST_LAT_CACHE:MISS"]).median()
    assert 1.0 < ratio < 4.0
    m = burst_metrics(big, load_machine())
    assert not m["dram_bytes_estimated"].any()
    assert m["dram_bytes"].to_list() == pytest.approx((big[DRAM_CAS_COLUMN] * 64).cast(pl.Float64).to_list())
    # the stored bursts are untouched: the column is derived on read
    assert DRAM_CAS_COLUMN not in run_bursts(wh, res.run_id, dram_from_uncore=False).columns


def test_uncore_samples_view_and_no_double_count(tmp_path, run_cli):
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", str(LULESH_B), "-w", str(wh))
    assert code == 0, err
    code, out, _ = run_cli(
        "sql", "SELECT count(*) AS n, count(DISTINCT counter) AS c FROM uncore_samples", "-w", str(wh), "-f", "csv"
    )
    assert out.strip().splitlines()[1] == f"{sum(n for n, _ in naive_uncore(LULESH_B).values())},24"
    run_dir = next(Warehouse(wh).runs_dir.iterdir())
    bursts = run_bursts(Warehouse(wh), run_dir.name)
    assert bursts[DRAM_CAS_COLUMN].sum() > 0
    again = attribute_dram_cas(bursts, pl.read_parquet(run_dir / "uncore"),
                               pl.read_parquet(run_dir / "threads.parquet"))
    assert again.equals(bursts)  # bursts that already measure DRAM CAS are left as they are


def _apportioned(inp: UncoreInput) -> pl.DataFrame:
    return pl.concat(list(inp.apportioned())).sort(BURST_ORDER)


@pytest.mark.parametrize("prv", [LULESH_A, LULESH_B], ids=["lulesh_4+4", "lulesh_7+1"])
def test_apportioned_a_window_of_time_at_a_time_the_counts_are_the_whole_runs(tmp_path, prv):
    """Issue 23: the analysis apportions a run's CAS samples a window of time at a time (the whole run's 9 M
    samples and 5 M bursts of a 2 GB trace held at once took 1.3 GB); every burst's count is the whole run's."""
    wh = Warehouse(tmp_path / "wh")
    run_id = ingest_trace(wh, prv).run_id
    whole = run_bursts(wh, run_id)  # apportioned at once
    inp = uncore_input(wh, run_id, scan_parts(run_parts(wh, run_id, "bursts/*.parquet")), rows=40)
    assert len(inp.windows) > 20  # windows of ~80 bursts and samples; the run has ~2,000 bursts, ~4,000 samples
    assert inp.straddling.height > 0  # some rate pieces cross a window's edge
    crossing = whole.filter(pl.any_horizontal((pl.col("start_ns") < lo) & (pl.col("end_ns") >= lo)
                                              for lo, _ in inp.windows[1:]))
    assert crossing.height > 0  # and so do some bursts
    got = _apportioned(inp)
    assert got.select(*BURST_ORDER, "start_ns").equals(whole.select(*BURST_ORDER, "start_ns"))
    assert got[DRAM_CAS_COLUMN].to_list() == whole[DRAM_CAS_COLUMN].to_list()
    assert whole[DRAM_CAS_COLUMN].sum() > 0


def test_samples_and_bursts_spanning_many_windows_get_the_whole_runs_counts():
    """Rate pieces and bursts that span several windows (a reader that stops sampling for a while, bursts longer
    than a window), two counters sampled at the same instants, bursts of two nodes: the windowed counts are the
    whole run's to the last unit at ~1e15 CAS (where any other order of the float sums shows)."""
    rng = np.random.default_rng(23)
    rows = []
    for task in (1, 2, 3):
        t = 0
        for seq in range(60):
            start = t + int(rng.integers(0, 50))
            end = start + int(rng.choice([1, 40, 400, 3_000]))
            rows.append((1, task, 1, seq, start, end, end - start, float(rng.integers(1, 10**6))))
            t = end
    bursts = pl.DataFrame(rows, schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32,
                                         "burst_seq": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                         "duration_ns": pl.Int64, "PAPI_L3_TCM": pl.Float64}, orient="row")
    horizon = int(bursts["end_ns"].max())
    times = sorted({*map(int, rng.integers(0, horizon // 3, 40)), *map(int, rng.integers(horizon // 2, horizon, 40))})
    samples = pl.DataFrame([(2, task, 1, node, t, counter, int(rng.integers(10**15, 10**16)))
                            for task, node in ((1, 1), (2, 2)) for t in times for counter in ("RD", "WR")],
                           schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "node": pl.Int32,
                                   "time_ns": pl.Int64, "counter": pl.String, "value": pl.Int64}, orient="row")
    samples = samples.with_columns(pl.format("skx_unc_imc0::UNC_M_CAS_COUNT:{}", "counter").alias("counter"))
    nodes = pl.DataFrame({"appl": [1, 1, 1, 2, 2], "task": [1, 2, 3, 1, 2], "thread": [1] * 5,
                          "node": [1, 1, 2, 1, 2]}, schema_overrides={"node": pl.Int32})
    whole = attribute_dram_cas(bursts, samples, nodes)
    assert whole[DRAM_CAS_COLUMN].sum() > 10**15
    cas = sorted(set(samples["counter"]))
    edges = list(range(97, horizon, 97))
    inp = UncoreInput.of(bursts.lazy(), samples.lazy(), nodes, cas, list(zip([None, *edges], [*edges, None])))
    assert inp is not None and inp.straddling.filter(pl.col("end_ns") - pl.col("start_ns") > 3 * 97).height
    assert bursts.filter(pl.col("duration_ns") > 2 * 97).height  # bursts spanning whole windows
    got = _apportioned(inp)
    assert got[DRAM_CAS_COLUMN].to_list() == whole.sort(BURST_ORDER)[DRAM_CAS_COLUMN].to_list()
