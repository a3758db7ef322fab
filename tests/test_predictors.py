"""Predictors: features without the target's ingredients, grouped evaluation, the registry's safety and
repeatability."""

from __future__ import annotations

import shutil

import json

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal
import pytest
import skops.io as sio

from synthtrace.models.features import (
    ARCHETYPE_VOCAB, NoTrainingDataError, UnknownTargetError, build_features, counter_sets, is_cycle_counter)
from synthtrace.models.predictors import (
    ESTIMATORS, UnknownModelKindError, compare_counter_sets, cross_validate, make_estimator)
from synthtrace.models.registry import TRUSTED_TYPES, load
from synthtrace.pipelines.jobs import predict, train
from testing.model_campaigns import PREDICT_PLAN, predictor_campaign
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.errors import UnknownExperimentError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.models.training_data import comparison_plan, load_bursts
from synthtrace.warehouse.model_store import ArtifactIntegrityError, UnknownModelError, models_dir, sha256


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("predictors")
    predictor_campaign(root, n_apps=3, n_kernels=4, n_iters=4, seed=3)
    frame, info = load_bursts(Warehouse(root))
    return root, frame.filter(pl.col("experiment").is_in(info["merged"]))


@pytest.fixture(scope="module")
def trained(campaign):
    root, _ = campaign
    return train(Warehouse(root), "ipc", "hgb", seed=7)


def test_features_never_contain_the_target(campaign):
    _, frame = campaign
    frame = frame.with_columns((pl.col("PAPI_TOT_CYC") * 2).alias("CPU_CLK_UNHALTED:REF_TSC"),
                               (pl.col("PAPI_TOT_INS") // 7).alias("MY_EVENT"))
    for target in ("ipc", "tpi"):
        t = build_features(frame, target)
        assert not [f for f in t.features if "CYC" in f or "CLK" in f or "duration" in f], t.features
        assert "rate:MY_EVENT" in t.features and "l3_mpki" in t.features and "vec_share" in t.features
    assert (
        is_cycle_counter("PAPI_TOT_CYC") and is_cycle_counter("PAPI_REF_CYC") and is_cycle_counter("SOME_STALL_CYCLES")
    )
    assert not is_cycle_counter("PAPI_L3_TCM")


def test_aliases_of_one_counter_are_one_feature():
    # experiments read together: one recorded PAPI_L3_TCM, the other LONGEST_LAT_CACHE:MISS
    f = pl.DataFrame({"PAPI_TOT_INS": [1e5, 2e5, 3e5, 4e5], "PAPI_TOT_CYC": [1e5, 1e5, 2e5, 2e5],
                      "PAPI_L3_TCM": [10, None, None, None], "LONGEST_LAT_CACHE:MISS": [None, 20, 30, 40],
                      "duration_ns": [100_000] * 4, "app": ["a", "a", "b", "b"]})
    t = build_features(f, "ipc", archetype=False)
    np.testing.assert_allclose(t.X[:, t.features.index("l3_mpki")], [0.1, 0.1, 0.1, 0.1])
    np.testing.assert_allclose(t.y, [1.0, 2.0, 1.5, 2.0])


def test_targets_are_computed_from_the_frame(campaign):
    _, frame = campaign
    ipc = build_features(frame, "ipc").y
    tpi = build_features(frame, "tpi").y
    np.testing.assert_allclose(ipc, (frame["PAPI_TOT_INS"] / frame["PAPI_TOT_CYC"]).to_numpy())
    np.testing.assert_allclose(tpi, (frame["duration_ns"] / frame["PAPI_TOT_INS"]).to_numpy())
    with pytest.raises(UnknownTargetError):
        build_features(frame, "flops")


def test_counter_set_restricts_features_and_archetype_is_one_hot(campaign):
    _, frame = campaign
    full = build_features(frame, "ipc")
    one = build_features(frame, "ipc", counters=PREDICT_PLAN[0])
    assert "l1_mpki" in one.features and "l3_mpki" not in one.features and "vec_share" not in one.features
    np.testing.assert_array_equal(full.y, one.y)
    arch = full.select([f"arch_{a}" for a in ARCHETYPE_VOCAB])
    assert np.all(np.nansum(arch, axis=1) <= 1)


def test_grouped_cross_validation_needs_two_applications(campaign):
    _, frame = campaign
    t = build_features(frame, "ipc").trainable()
    cv = cross_validate(t, "linear", seed=0, n_splits=5)
    assert cv.n_splits == 3 and np.isfinite(cv.y_pred).all()
    assert set(cv.per_group()["group"].to_list()) == {"app0", "app1", "app2"}
    with pytest.raises(NoTrainingDataError):
        cross_validate(t.subset(t.groups == "app0"), "linear")
    with pytest.raises(UnknownModelKindError):
        make_estimator("svm")


def test_merged_counters_beat_every_single_run_set(campaign):
    root, frame = campaign
    sets = counter_sets(runs_table(Warehouse(root)))
    assert list(sets) == ["run0", "run1", "run2"]
    table = compare_counter_sets(frame, "ipc", sets, kinds=("linear",), n_splits=3)
    assert table["counter_set"].to_list() == ["merged", "run0", "run1", "run2", "best single (run0)"] or \
        table["counter_set"][-1].startswith("best single")
    merged = table.filter(pl.col("counter_set") == "merged").row(0, named=True)
    singles = table.filter(pl.col("counter_set").str.starts_with("run"))["mape"]
    assert merged["mape"] < singles.min()
    assert merged["mape_cut_vs_best_single"] > 0


def _kth_runs(runs: pl.DataFrame, k: int) -> pl.DataFrame:
    """The k-th run (by name) of every experiment."""
    return runs.sort("experiment", "run_name").filter(pl.int_range(pl.len()).over("experiment") == k)


def test_compare_on_merged_bursts_gives_each_set_its_own_counters(campaign):
    """Issue 15: the single-run rows of ``train --compare`` differ, each from its run's counters."""
    root, _ = campaign
    wh = Warehouse(root)
    runs = runs_table(wh)
    plan = comparison_plan(*load_bursts(wh), runs)
    assert plan.note is None and not plan.rows and set(plan.frame["experiment"]) == {"app0-exp", "app1-exp", "app2-exp"}
    assert plan.frame["run_id"].n_unique() == 3  # merged bursts: one (reference) run per experiment
    for k, name in enumerate(sorted(plan.sets)):
        kth = _kth_runs(runs, k)
        assert plan.sets[name] == {e: list(c) for e, c in zip(kth["experiment"], kth["counters"])}
    table = compare_counter_sets(plan.frame, "ipc", plan.sets, rows=plan.rows, kinds=("linear",), n_splits=3)
    singles = table.filter(pl.col("counter_set").str.starts_with("run"))
    assert singles["mape"].n_unique() == 3 and singles["n"].n_unique() == 1


def test_compare_without_a_merge_evaluates_each_set_on_its_own_run(tmp_path):
    """Issue 15: in experiments that were not merged, set run<k> is evaluated on the bursts of the k-th runs
    (which recorded it), not on every run's bursts (which lack its counters)."""
    predictor_campaign(tmp_path, n_apps=2, n_kernels=3, n_iters=2, seed=4, merge="none")
    wh = Warehouse(tmp_path)
    frame, info = load_bursts(wh)
    runs = runs_table(wh)
    plan = comparison_plan(frame, info, runs)
    assert info["merged"] == [] and set(plan.rows) == set(plan.sets) == {"run0", "run1", "run2"}
    for k, name in enumerate(sorted(plan.sets)):
        assert sorted(frame.filter(plan.rows[name])["run_id"].unique()) == sorted(_kth_runs(runs, k)["run_id"])
    table = compare_counter_sets(plan.frame, "ipc", plan.sets, rows=plan.rows, kinds=("linear",), n_splits=2)
    n = dict(zip(table["counter_set"], table["n"]))
    assert n["run0"] + n["run1"] + n["run2"] == n["merged"] and 0 < n["run0"] < n["merged"]
    # one counter set only: nothing to compare
    one = runs.with_columns(pl.lit(PREDICT_PLAN[0]).alias("counters"))
    assert comparison_plan(frame, info, one) is None


@pytest.mark.real_traces
def test_compare_plan_on_the_merged_lulesh_pair(merged_lulesh):
    """The real LULESH pair recorded one counter set twice: nothing to compare. Had the 7+1 run recorded
    fewer counters, its set would be the merged bursts' columns it measured, with the note that one
    application cannot be evaluated on unseen applications."""
    wh = Warehouse(merged_lulesh)
    frame, info = load_bursts(wh)
    runs = runs_table(wh)
    assert info["merged"] == ["lulesh-8r"] and comparison_plan(frame, info, runs) is None
    fewer = runs.with_columns(pl.when(pl.col("run_name").str.contains("7")).then(
        pl.col("counters").list.set_difference(pl.lit(["PAPI_REF_CYC", "LONGEST_LAT_CACHE:MISS"])))
        .otherwise(pl.col("counters")).alias("counters"))
    plan = comparison_plan(frame, info, fewer)
    assert plan.note and "one application" in plan.note
    assert {len(c["lulesh-8r"]) for c in plan.sets.values()} == {len(runs["counters"][0]), len(runs["counters"][0]) - 2}
    assert all(frame.filter(r).height == frame.height for r in plan.rows.values())  # merged bursts serve every set


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_estimators_follow_scikit_learn_conventions(kind):
    """Issue 14: hyperparameters are constructor parameters (get_params/set_params/clone), unfitted use raises
    NotFittedError, and the seed reaches the estimator."""
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError
    from sklearn.utils import estimator_checks as ec
    est = make_estimator(kind, seed=5)
    name = type(est).__name__
    for check in (ec.check_no_attributes_set_in_init, ec.check_get_params_invariance, ec.check_set_params,
                  ec.check_parameters_default_constructible, ec.check_estimators_unfitted, ec.check_estimator_repr):
        check(name, est)
    assert est.get_params()["random_state"] == 5 and clone(est).get_params() == est.get_params()
    with pytest.raises(NotFittedError):
        est.predict(np.ones((2, 3)))


def test_registry_records_what_the_model_saw(campaign, trained):
    root, _ = campaign
    r = trained.record
    assert r["target"] == "ipc" and r["kind"] == "hgb" and r["seed"] == 7
    assert sorted(r["experiments"]) == ["app0-exp", "app1-exp", "app2-exp"] and len(r["run_ids"]) == 9
    assert r["n_rows"] > 100 and len(r["data_hash"]) == 64 and r["features"]
    assert {"scikit-learn", "skops", "numpy"} <= set(json.loads(r["library_versions"]))
    assert r["cv_folds"] == 3 and np.isfinite(r["cv_mape"])
    assert (models_dir(Warehouse(root)) / r["model_id"] / "model.skops").is_file()


def test_same_seed_and_data_give_the_same_model(campaign, trained):
    root, frame = campaign
    again = train(Warehouse(root), "ipc", "hgb", seed=7)
    assert again.model_id != trained.model_id  # every version is kept
    assert again.record["data_hash"] == trained.record["data_hash"]
    assert again.record["fingerprint"] == trained.record["fingerprint"]
    X = build_features(frame, "ipc").select(trained.features)
    np.testing.assert_array_equal(load(Warehouse(root), again.model_id).estimator.predict(X),
                                  trained.estimator.predict(X))
    # the seed matters where the estimator draws random numbers (bootstrap samples of a random forest)
    rf1, rf2 = (train(Warehouse(root), "ipc", "rf", seed=1, evaluate=False),
                train(Warehouse(root), "ipc", "rf", seed=2, evaluate=False))
    assert rf1.record["fingerprint"] != rf2.record["fingerprint"]


def test_load_refuses_a_link_or_special_file_in_place_of_the_artifact(campaign, trained):
    """A link to /dev/zero (or any file elsewhere) in place of model.skops is refused before a byte is read: it
    once grew the process to 4.5 GB and ended in a MemoryError traceback (issue 23, fresh attacker)."""
    root, _ = campaign
    path = models_dir(Warehouse(root)) / trained.model_id / "model.skops"
    good = path.read_bytes()
    try:
        path.unlink()
        path.symlink_to("/dev/zero")
        with pytest.raises(ArtifactIntegrityError, match="not the regular file"):
            load(Warehouse(root), trained.model_id)
    finally:
        path.unlink()
        path.write_bytes(good)
    assert load(Warehouse(root), trained.model_id).model_id == trained.model_id


def test_a_damaged_or_planted_model_record_is_one_error_not_a_hang(campaign, trained, tmp_path):
    """Random bytes as a model's record: the integrity error (it was a Polars traceback); a FIFO planted as another
    model's record is not read (reading it waited forever)."""
    import os
    import threading

    root, _ = campaign
    record = models_dir(Warehouse(root)) / trained.model_id / "model.parquet"
    good = record.read_bytes()
    try:
        record.write_bytes(os.urandom(5000))
        with pytest.raises(ArtifactIntegrityError, match="cannot be read"):
            load(Warehouse(root), trained.model_id)
    finally:
        record.write_bytes(good)
    planted = models_dir(Warehouse(root)) / "planted"
    planted.mkdir()
    os.mkfifo(planted / "model.parquet")
    try:
        done: list[str] = []
        reader = threading.Thread(target=lambda: done.append(load(Warehouse(root), trained.model_id).model_id),
                                  daemon=True)
        reader.start()
        reader.join(60)
        assert done == [trained.model_id], "loading the models waited on a FIFO planted in models/"
    finally:
        if reader.is_alive():  # unblock the old code's reader so the worker can go on
            with open(planted / "model.parquet", "wb"):
                pass
        (planted / "model.parquet").unlink()
        planted.rmdir()


def test_load_refuses_a_tampered_artifact(campaign, trained, tmp_path):
    root, _ = campaign
    path = models_dir(Warehouse(root)) / trained.model_id / "model.skops"
    good = path.read_bytes()
    try:
        path.write_bytes(good[:-10] + b"0123456789")
        with pytest.raises(ArtifactIntegrityError, match="SHA-256"):
            load(Warehouse(root), trained.model_id)
    finally:
        path.write_bytes(good)
    assert load(Warehouse(root), trained.model_id).model_id == trained.model_id


class Payload:
    """A type no model may contain."""


def test_load_refuses_untrusted_types_even_with_a_matching_hash(campaign, trained):
    root, _ = campaign
    wh = Warehouse(root)
    d = models_dir(wh) / trained.model_id
    evil = sio.dumps({"model": Payload()})
    assert set(sio.get_untrusted_types(data=evil)) - set(TRUSTED_TYPES)
    good_art, good_rec = (d / "model.skops").read_bytes(), (d / "model.parquet").read_bytes()
    sums = (d / "checksums.json").read_bytes()  # [helper integrity] whoever forges the record can drop these too
    try:
        (d / "model.skops").write_bytes(evil)
        pl.read_parquet(d / "model.parquet").with_columns(pl.lit(sha256(evil)).alias("artifact_sha256")).write_parquet(
            d / "model.parquet")
        (d / "checksums.json").unlink()
        with pytest.raises(ArtifactIntegrityError, match="untrusted"):
            load(Warehouse(root), trained.model_id)
    finally:
        (d / "model.skops").write_bytes(good_art)
        (d / "model.parquet").write_bytes(good_rec)
        (d / "checksums.json").write_bytes(sums)


def test_predict_writes_the_predictions_view(campaign, trained):
    root, _ = campaign
    from synthtrace.warehouse.sql import query
    _, out = predict(Warehouse(root), "app1-exp", trained.model_id)
    assert out.height and out["predicted"].is_not_null().all()
    rows = pl.from_arrow(
        query(
            Warehouse(root),
            f"SELECT count(*) AS n, avg(abs(predicted - actual) / actual) AS mape "
            f"FROM predictions WHERE model_id = '{trained.model_id}' AND experiment = 'app1-exp'",
        )
    )
    assert rows["n"][0] == out.height and rows["mape"][0] < 0.2
    with pytest.raises(UnknownModelError):
        load(Warehouse(root), "no-such-model")
    with pytest.raises(UnknownExperimentError):
        predict(Warehouse(root), "no-such-experiment", trained.model_id)


@pytest.mark.parametrize("kind", ["hgb", "rf", "linear"])
def test_every_estimator_kind_loads_with_the_trusted_list(kind):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    X[::5, 2] = np.nan
    est = make_estimator(kind, 0).fit(X, np.exp(0.3 * X[:, 0]))
    data = sio.dumps(est)
    assert set(sio.get_untrusted_types(data=data)) <= set(TRUSTED_TYPES)
    back = sio.loads(data, trusted=list(TRUSTED_TYPES))
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


def test_a_rejected_model_says_which_part_of_the_rule_it_failed():
    """Issue 28: the rejection rule is R² < 0.3 on unseen programs or a MAPE not 20 % below the training mean's; the
    warning names the part that failed, with its figures (was: 'worse than their mean (R² ...)' for both)."""
    from synthtrace.models.registry import rejection_reason
    low_r2 = {"status": "rejected", "cv_r2": 0.009, "cv_mape": 0.817, "metrics": '{"cv": {"mean_mape": 0.85}}'}
    assert rejection_reason(low_r2) == "R² 0.009 on unseen programs, below 0.3"
    mape = {**low_r2, "cv_r2": 0.45}
    assert rejection_reason(mape) == ("MAPE 81.7% on unseen programs (the training mean's: 85.0%), "
                                      "not 20% below the training mean's")
    assert rejection_reason({**mape, "status": "ok"}) == ""


def test_bursts_without_the_models_counters_are_not_predicted_from_nothing(campaign, trained):
    """A model of counter rates applied to bursts that recorded none of its counters stored a 'prediction' per
    burst from its default branches (attack 7 A12: 42 IPC values for an OTF2 ping-pong without instructions).
    Such bursts are NULL; when no burst has any of them, one error naming the model and what it reads."""
    from synthtrace.models.registry import NothingToPredictFromError, load, measured_features, predict_frame
    from synthtrace.tracelib.schema import counter_columns

    root, frame = campaign
    model = load(Warehouse(root), trained.model_id)
    frame = frame.filter(pl.col("experiment") == "app1-exp")
    counters = [c for c in counter_columns(frame) if not is_cycle_counter(c)]
    assert measured_features(model.features) and counters
    half = frame.with_row_index("_i").with_columns(
        [pl.when(pl.col("_i") % 2 == 0).then(None).otherwise(pl.col(c)).alias(c) for c in counters]).drop("_i")
    out = predict_frame(model, half)
    assert out.height == frame.height
    assert out["predicted"].null_count() == (frame.height + 1) // 2 and out["predicted"].drop_nulls().min() > 0
    with pytest.raises(NothingToPredictFromError, match=f"model {model.model_id} reads .*no burst has any of them"):
        predict_frame(model, frame.with_columns([pl.lit(None, frame.schema[c]).alias(c) for c in counters]))


def test_bursts_without_any_counter_are_refused_in_one_error(campaign, trained):
    """Bursts that recorded no counter at all (the real ping-pong-otf2 trace: OTF2 without PAPI metrics) stopped
    ``predict`` with Polars' 'Series actual, length 1 doesn't match the DataFrame height of 42' (the target of no
    counters was one literal NULL, not one per burst): the error names the model and what it reads."""
    from synthtrace.models.registry import NothingToPredictFromError, load, predict_frame
    from synthtrace.tracelib.schema import counter_columns

    root, frame = campaign
    model = load(Warehouse(root), trained.model_id)
    bare = frame.filter(pl.col("experiment") == "app1-exp").drop(counter_columns(frame))
    table = build_features(bare, "ipc")
    assert table.y.shape == (bare.height,) and np.isnan(table.y).all()
    with pytest.raises(NothingToPredictFromError, match="no burst has any of them .*the bursts have no counter"):
        predict_frame(model, bare)


@pytest.mark.real_traces
def test_an_experiment_over_the_cap_is_predicted_a_window_at_a_time(campaign, trained, monkeypatch, tmp_path):
    """Attack 12 F7: ``predict`` read every burst of the experiment whole (4.7 M bursts of a 2 GB run: SIGABRT
    under a 4 GB limit). Over the cap it reads a window of bursts at a time; its predictions are the whole read's,
    row for row, on merged experiments and on experiments of unmerged runs."""
    from datetime import UTC, datetime

    from synthtrace.models import training_data
    from synthtrace.warehouse import analysis_store
    from synthtrace.warehouse.model_store import experiment_apps

    from synthtrace.pipelines.cli import main

    root, _ = campaign
    shutil.copytree(root, tmp_path / "wh", symlinks=True)
    wh, now = Warehouse(tmp_path / "wh"), datetime(2026, 12, 3, tzinfo=UTC)
    a_run = runs_table(wh).filter(pl.col("experiment") == "app0-exp")["run_id"][0]
    assert main(["runs", "move", a_run, "--experiment", "solo", "-w", str(wh.root)]) == 0  # both lose their merge
    names = sorted(experiment_apps(wh))
    whole = {name: predict(wh, name, trained.model_id, store=False, now=now)[1] for name in names}
    windows: list[int] = []
    read_windows = training_data.burst_windows

    def counted(wh, experiment, *left_out):
        for w in read_windows(wh, experiment, *left_out):
            windows.append(w.height)
            yield w

    monkeypatch.setattr(training_data, "TRAIN_BURSTS_PER_EXPERIMENT", 10)
    monkeypatch.setattr(training_data, "burst_windows", counted)
    monkeypatch.setattr(analysis_store, "ANALYSIS_WINDOW_ROWS", 16)
    merged = set(load_bursts(wh)[1]["merged"])
    assert merged and set(names) - merged, "merged and unmerged experiments both"
    for name in names:
        windows.clear()
        _, out = predict(wh, name, trained.model_id, store=False, now=now)
        assert len(windows) >= 3 and max(windows) <= 40, (name, windows)
        assert_frame_equal(out, whole[name].select(out.columns))
        assert out.height == whole[name].height and out["predicted"].is_not_null().any()


def test_an_experiment_over_the_training_cap_is_sampled_a_window_at_a_time(merged_lulesh, tmp_path):
    """Attack 11 E8: ``train`` read every burst of every experiment whole (4.7 M bursts of one 2 GB run: past 5 GB,
    aborted under a 4 GB limit). An experiment over the cap gives a sample, read a window at a time, whose rows are
    the whole read's rows of the same bursts (counters, the DRAM counts apportioned from uncore samples included):
    a merged experiment, and one run with uncore samples."""
    from synthtrace.pipelines.cli import main
    from testing.traces import LULESH_A, copy_trace

    copy_trace(LULESH_A, tmp_path / "one")
    assert main(["ingest", str(tmp_path / "one"), "--experiment", "one", "-w", str(tmp_path / "wh")]) == 0
    keys = ["appl", "task", "thread", "burst_seq"]
    for wh, name in ((merged_lulesh, "lulesh-8r"), (tmp_path / "wh", "one")):
        whole, _ = load_bursts(Warehouse(wh), [name])
        part, info = load_bursts(Warehouse(wh), [name], max_per_experiment=500)
        stride = round(1 / info["sampled"][name])
        assert stride == -(-whole.height // 500) and 250 <= part.height <= 1000, (stride, part.height)
        assert info["merged"] == ([name] if name == "lulesh-8r" else [])
        expected = whole.filter(pl.struct(*keys).hash(seed=0) % stride == 0)
        if name == "one":
            assert "DRAM_CAS" in part.columns and part["DRAM_CAS"].null_count() == 0
        cols = [c for c in expected.columns if c != "run_id"]
        assert part.select(cols).sort(keys).equals(expected.select(cols).sort(keys)), name
