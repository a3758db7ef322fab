"""What ``train`` and ``predict`` read of an experiment whose bursts sample many counter types (issue 23: a run
sampling one of 4,096 types per burst was read whole, bursts x 4,096 mostly-NULL columns: 10,000 bursts took
1.5 GB to train on, 40,000 passed 3 GB): the keys, times and counters a model can use, never the counters that
cannot give it a value, and the same model and predictions as reading every column; and the analysis collects a
trace's schema once."""
from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import synthtrace
from synthtrace.models import registry, training_data
from synthtrace.pipelines.jobs import predict, train
from synthtrace.warehouse import Warehouse

#: counter types of the wide run no role knows (no .pcf name), one sampled per burst
UNKNOWN = 120
UNKNOWN_BASE = 44_100_000
NOW = datetime(2026, 12, 4, tzinfo=UTC)


def _unknown(columns: list[str]) -> list[str]:
    return [c for c in columns if c.isdigit() and int(c) >= UNKNOWN_BASE]


def _traces(folder: Path, learnable: bool = False) -> Path:
    """A narrow run (300 bursts of 1e5-1e6 instructions with cycles, L1 misses, branches and a native counter no
    role knows) and a wide run (2 x 240 bursts of under 1e4 instructions, or 2-3e4 when ``learnable``, each also
    sampling one of ``UNKNOWN`` unnamed counter types): one experiment's folder."""
    folder.mkdir(parents=True)
    rnd = random.Random(4)
    lines = ["#Paraver (01/01/26 at 00:00):400000000_ns:1(1):1:1(1:1)"]
    for i in range(300):
        ins = rnd.randrange(10**5, 10**6)
        l1, br, mine = int(ins * rnd.uniform(0.001, 0.05)), int(ins * rnd.uniform(0.05, 0.2)), rnd.randrange(ins)
        cyc = int(ins / (2.5 - 30 * l1 / ins) * rnd.uniform(0.97, 1.03))
        t = 1_000_000 * i
        lines += [f"1:1:1:1:1:{t}:{t + 900_000}:1",
                  f"2:1:1:1:1:{t + 900_000}:42000050:{ins}:42000059:{cyc}:42000000:{l1}:42000055:{br}:44000001:{mine}",
                  f"1:1:1:1:1:{t + 900_000}:{t + 1_000_000}:0"]
    (folder / "narrow.prv").write_text("\n".join(lines) + "\n")
    (folder / "narrow.pcf").write_text(
        "EVENT_TYPE\n7  42000050 PAPI_TOT_INS [Instr completed]\n7  42000059 PAPI_TOT_CYC [Total cycles]\n"
        "7  42000000 PAPI_L1_DCM [L1D misses]\n7  42000055 PAPI_BR_INS [Branches]\n7  44000001 MY_NATIVE [a native]\n")
    lines = ["#Paraver (01/01/26 at 00:00):10000000_ns:1(2):1:2(1:1,1:1)"]
    for task in (1, 2):
        for i in range(240):
            s = 10_000 * i
            lines += [f"1:{task}:1:{task}:1:{s}:{s + 6_000}:1",
                      f"2:{task}:1:{task}:1:{s + 3_000}:42000050:{1000 + 7 * i + task + 19_000 * learnable}"
                      f":42000059:{2000 + 3 * i + 8_000 * learnable}"
                      f":{UNKNOWN_BASE + i % UNKNOWN}:{i + 1}",
                      f"1:{task}:1:{task}:1:{s + 6_000}:{s + 10_000}:0"]
    (folder / "wide.prv").write_text("\n".join(lines) + "\n")
    (folder / "wide.pcf").write_text("EVENT_TYPE\n7  42000050 PAPI_TOT_INS [Instr completed]\n"
                                     "7  42000059 PAPI_TOT_CYC [Total cycles]\n")
    return folder


@pytest.fixture(scope="module")
def wide_wh(tmp_path_factory) -> Warehouse:
    """The narrow and the wide run ingested as experiment ``w``."""
    tmp = tmp_path_factory.mktemp("models-memory")
    synthtrace.ingest(str(tmp / "wh"), str(_traces(tmp / "w")), experiment="w")
    wh = Warehouse(tmp / "wh")
    assert len(_unknown(training_data.load_bursts(wh)[0].columns)) == UNKNOWN
    return wh


@pytest.fixture(params=["whole", "windows"])
def read(request, monkeypatch) -> str:
    """Each way the bursts are read: the experiment whole, or (over the cap) a window at a time."""
    if request.param == "windows":
        monkeypatch.setattr(training_data, "TRAIN_BURSTS_PER_EXPERIMENT", 100)
        from synthtrace.warehouse import analysis_store
        monkeypatch.setattr(analysis_store, "ANALYSIS_WINDOW_ROWS", 64)
    return request.param


def test_train_reads_no_counter_that_cannot_feed_its_features_and_learns_the_same_model(wide_wh, read,
                                                                                         monkeypatch):
    """The bursts ``train`` learns from hold no counter of the wide run's 120 unnamed types (the old reader held
    them all: their rates have no value on a burst it learns from, >= 1e4 instructions); the model is the one
    learned from every column: same features, rows, data and predictions, and the same counters recorded."""
    seen: list[list[str]] = []
    fit = registry.train

    def spy(frame, info, *args, **kwargs):
        seen.append(frame.columns)
        return fit(frame, info, *args, **kwargs)

    monkeypatch.setattr(registry, "train", spy)
    model = train(wide_wh, "ipc", "hgb", now=NOW)
    assert len(seen) == 1 and "PAPI_TOT_INS" in seen[0] and "MY_NATIVE" in seen[0]
    assert _unknown(seen[0]) == [], "train read the counters no feature can use"
    frame, info = training_data.load_bursts(wide_wh, None, training_data.TRAIN_BURSTS_PER_EXPERIMENT)
    assert len(_unknown(frame.columns)) == UNKNOWN
    every, _ = fit(frame, info, "ipc", "hgb", now=NOW)
    for field in ("features", "n_rows", "data_hash", "fingerprint", "counters", "metrics"):
        assert model.record[field] == every.record[field], (read, field)
    assert "rate:MY_NATIVE" in model.features and len(model.record["counters"]) == UNKNOWN + 5


def test_predict_reads_the_models_counters_only_and_predicts_the_same(wide_wh, read, monkeypatch):
    """The bursts ``predict`` reads hold no counter of the 120 unnamed types its model does not read; its
    predictions are those of the bursts read with every column."""
    model = train(wide_wh, "ipc", "hgb", now=NOW)
    seen: list[list[str]] = []
    apply = registry.window_predictions

    def spy(model, windows, *args, **kwargs):
        def spied():
            for w in windows:
                seen.append(w.columns)
                yield w
        return apply(model, spied(), *args, **kwargs)

    monkeypatch.setattr(registry, "window_predictions", spy)
    _, out = predict(wide_wh, "w", model.model_id, store=False, now=NOW)
    assert seen and (len(seen) > 1) == (read == "windows")
    assert all(_unknown(cols) == [] and "PAPI_TOT_INS" in cols for cols in seen), "predict read unused counters"
    every = apply(model, training_data.prediction_input(wide_wh, "w").windows, "w", now=NOW)
    assert_frame_equal(out, every)
    assert out.height == 300 + 480 and out["predicted"].is_not_null().all()


def test_the_analysis_collects_a_traces_schema_once(wide_wh, monkeypatch):
    """Review (issue 23): the analysis asked the same lazy bursts frame for its schema six times a trace (each
    a plan resolution over every counter column); once."""
    from synthtrace.models import analysis
    from synthtrace.warehouse.analysis_store import AnalysisParts, load_experiment_windows

    traces = load_experiment_windows(wide_wh, "w").traces
    asked: dict[int, int] = {}
    collect_schema = pl.LazyFrame.collect_schema

    def counted(self):
        asked[id(self)] = asked.get(id(self), 0) + 1
        return collect_schema(self)

    monkeypatch.setattr(pl.LazyFrame, "collect_schema", counted)
    analysis.analyse_windows(traces, AnalysisParts(), discover=False)
    assert [asked.get(id(t.bursts), 0) for t in traces] == [1] * len(traces)


def test_a_counter_on_under_one_percent_of_a_runs_bursts_is_neither_read_nor_a_feature(tmp_path, monkeypatch):
    """The wide run's bursts are ones a predictor learns from (>= 1e4 instructions, cycles), each with one of 120
    unnamed counter types: each type has values on 4 of its 480 bursts (0.8 %), under MIN_GENERIC_SHARE. ``train``
    reads none of them (the old reader held them all and made each a feature: 120 rate features missing on 99 %
    of the bursts; 4,096 such types were bursts x 4,096 values to hold); the native counter the narrow run records
    on every burst stays a feature."""
    synthtrace.ingest(str(tmp_path / "wh"), str(_traces(tmp_path / "w", learnable=True)), experiment="w")
    wh = Warehouse(tmp_path / "wh")
    seen: list[list[str]] = []
    fit = registry.train
    monkeypatch.setattr(registry, "train", lambda frame, *a, **k: seen.append(frame.columns) or fit(frame, *a, **k))
    model = train(wh, "ipc", "hgb", now=NOW)
    assert _unknown(seen[0]) == [] and "MY_NATIVE" in seen[0]
    assert not [f for f in model.features if _unknown([f.removeprefix("rate:")])]
    assert "rate:MY_NATIVE" in model.features and model.record["n_rows"] == 780


def test_loading_an_experiment_lists_and_checks_each_runs_parts_once(wide_wh, monkeypatch):
    """Review (issue 23): the sample's stride and the counters left out each listed every run's parts and checked
    (hashed, footers read) every part again; ``train`` lists and checks them once before it reads them."""
    from collections import Counter

    from synthtrace.models.features import feature_columns

    listed, checked = Counter(), Counter()
    list_parts, scan = training_data.run_parts, training_data.scan_parts

    def counted_list(wh, run_id, pattern, *args):
        listed[run_id, pattern] += 1
        return list_parts(wh, run_id, pattern, *args)

    def counted_scan(paths):
        paths = list(paths)
        checked.update(map(str, paths))
        return scan(paths)

    monkeypatch.setattr(training_data, "run_parts", counted_list)
    monkeypatch.setattr(training_data, "scan_parts", counted_scan)
    frame, _ = training_data.load_bursts(wide_wh, None, training_data.TRAIN_BURSTS_PER_EXPERIMENT,
                                         columns=feature_columns("ipc"))
    assert frame.height == 300 + 480
    assert len(listed) == 2 and set(listed.values()) == {1}, listed
    assert checked and set(checked.values()) == {1}, checked
