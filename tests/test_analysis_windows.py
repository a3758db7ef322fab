"""Issue 23: the analysis of a stored experiment is read, measured and classified a window at a time (a thread's
bursts cut by start time) and committed from part files; its frames must be those of the whole trace, analysed at
once, on the real traces (LULESH with uncore readers: DRAM CAS apportioned over the whole node; two runs: their
union by name), with windows much smaller than the trace. Discovery is fitted on a deterministic sample beyond
:data:`~synthtrace.models.analysis.DISCOVERY_SAMPLE_ROWS` bursts: it must name the bursts as the whole fit does."""
from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from synthtrace.models.analysis import analyse_input, analyse_windows
from synthtrace.pipelines.jobs import analyse as analyse_experiment
from synthtrace.tracelib.domain.machine import load_machine
from synthtrace.warehouse.analysis_store import AnalysisParts, load_experiment_windows
from synthtrace.warehouse.layout import Warehouse
from testing.traces import LULESH_A, LULESH_B

pytestmark = pytest.mark.real_traces

#: each analysis frame's rows are told apart by these (those the frame has)
KEYS = ["experiment", "run_id", "unit", "appl", "task", "thread", "burst_seq", "call_seq", "phase"]
WINDOW = 400  # bursts; LULESH holds ~2,100 (4+4) and ~2,700 (7+1)


@pytest.fixture(scope="module")
def whs(tmp_path_factory) -> dict[str, Warehouse]:
    """experiment -> its warehouse: ``one`` (LULESH 4+4), ``pair`` (both LULESH runs, not merged)."""
    from synthtrace.warehouse.ingest import ingest_trace

    out = {}
    for experiment, paths in (("one", [LULESH_A]), ("pair", [LULESH_A, LULESH_B])):
        out[experiment] = Warehouse(tmp_path_factory.mktemp(experiment))
        for path in paths:
            ingest_trace(out[experiment], path, experiment=experiment)
    return out


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    return df.sort([k for k in KEYS if k in df.columns], nulls_last=True)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["one", "pair"])
def test_windowed_analysis_equals_the_whole(whs, tmp_path, experiment):
    wh, machine = whs[experiment], load_machine()
    inp = load_experiment_windows(wh, experiment, rows=WINDOW)
    assert sum(len(t.windows) for t in inp.traces) > 4  # windows much smaller than the trace
    windowed = analyse_windows(inp.traces, AnalysisParts(tmp_path), machine=machine, n_nodes=inp.n_nodes)
    whole = analyse_input(wh.experiment(experiment).trace().labelled(), machine=machine)
    assert windowed.discovery == whole.discovery
    for name, frame in whole.frames().items():
        got = windowed.frames()[name].lazy().collect()
        assert_frame_equal(_sorted(got), _sorted(frame), check_column_order=False)
    bursts = whole.archetypes.filter(pl.col("unit") == "burst")
    assert bursts["cluster_archetype"].null_count() < bursts.height  # discovery ran and was compared
    assert "DRAM_CAS" in wh.experiment(experiment).trace().bursts.columns  # the apportioning was compared too


@pytest.mark.slow
def test_stored_analysis_is_the_whole_one(whs):
    """What ``synthtrace archetypes`` commits (a window at a time) is what the whole analysis computes."""
    wh, machine = whs["one"], load_machine()
    done = analyse_experiment(wh.experiment("one"), machine=machine)
    whole = analyse_input(wh.experiment("one").trace().labelled(), machine=machine)
    for name, frame in whole.frames().items():
        stored = pl.read_parquet(wh.experiment_dir("one") / f"{name}.parquet")
        assert_frame_equal(_sorted(stored), _sorted(frame), check_column_order=False)
        assert_frame_equal(_sorted(done.result.frames()[name].lazy().collect()), _sorted(frame),
                           check_column_order=False)


@pytest.mark.slow
def test_sampled_discovery_names_bursts_as_the_whole_fit(whs, tmp_path):
    """Fitted on every 4th burst (a sample far below the trace), discovery names the bursts as the fit on all of
    them does, and its agreement with the rules stays within a few hundredths."""
    wh, machine = whs["one"], load_machine()
    inp = load_experiment_windows(wh, "one", rows=WINDOW)
    n = sum(t.count() for t in inp.traces)
    sampled = analyse_windows(inp.traces, AnalysisParts(tmp_path), machine=machine, sample_rows=n // 4)
    whole = analyse_input(wh.experiment("one").trace().labelled(), machine=machine)
    assert sampled.discovery["sampled_every"] == 4 and sampled.discovery["n_clustered"] < n / 3
    keys = ["task", "thread", "burst_seq"]
    a = _sorted(sampled.archetypes.lazy().filter(pl.col("unit") == "burst").collect())
    b = _sorted(whole.archetypes.filter(pl.col("unit") == "burst"))
    assert a.select(keys).equals(b.select(keys))
    both = pl.DataFrame({"s": a["cluster_archetype"], "w": b["cluster_archetype"], "ns": b["duration_ns"]})
    same = both.filter(pl.col("s").eq_missing(pl.col("w")))
    assert same["ns"].sum() / both["ns"].sum() >= 0.95
    assert abs(sampled.discovery["kappa_weighted"] - whole.discovery["kappa_weighted"]) <= 0.05
    # deterministic: the same sample, the same fit
    (tmp_path / "again").mkdir()
    again = analyse_windows(inp.traces, AnalysisParts(tmp_path / "again"), machine=machine, sample_rows=n // 4)
    assert again.discovery == sampled.discovery


@pytest.mark.slow
def test_an_input_analysed_again_apportions_again_into_its_own_scratch(whs, tmp_path):
    """The DRAM counts are apportioned into the analysis' scratch (issue 23): analysing the same input again, after
    the first analysis' scratch went, apportions again into the new one, the same frames."""
    import shutil

    wh, machine = whs["one"], load_machine()
    inp = load_experiment_windows(wh, "one", rows=WINDOW)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = analyse_windows(inp.traces, AnalysisParts(tmp_path / "a"), machine=machine, discover=False)
    frames = {name: f.lazy().collect() for name, f in first.frames().items()}
    shutil.rmtree(tmp_path / "a")
    again = analyse_windows(inp.traces, AnalysisParts(tmp_path / "b"), machine=machine, discover=False)
    for name, frame in frames.items():
        assert_frame_equal(_sorted(again.frames()[name].lazy().collect()), _sorted(frame), check_column_order=False)
