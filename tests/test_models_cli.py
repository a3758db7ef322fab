"""``synthtrace train / models / predict / detect`` on small simulated warehouses, bad input, and the nightly steps."""
from __future__ import annotations

import shutil
from datetime import datetime

import numpy as np
import polars as pl
import pytest

from synthtrace.pipelines.jobs import detect as detect_step
from synthtrace.pipelines.jobs import retrain as retrain_step
from testing.traces import tree_digest
from testing.model_campaigns import (
    ALL_COUNTERS, predictor_campaign, random_app, regression_campaign, simulate_run, write_run)
from synthtrace.warehouse.errors import QueryError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.model_store import models_dir, read_models
from synthtrace.warehouse.sql import query


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-base")
    predictor_campaign(root, n_apps=3, n_kernels=4, n_iters=3, seed=5)
    regression_campaign(root, n_apps=2, n_nights=14, n_kernels=3, n_iters=3, first_night=8, p_regression=1.0,
                        kinds=("more_instructions",), seed=5)
    return root


@pytest.fixture
def wh(base, tmp_path):
    root = tmp_path / "wh"
    shutil.copytree(base, root)
    return root


def sql(root, text: str) -> pl.DataFrame:
    return pl.from_arrow(query(Warehouse(root), text))


def test_train_models_predict(run_cli, wh):
    code, out, err = run_cli("train", "--target", "ipc", "--model", "linear", "--experiments", "app0-exp,app1-exp",
                             "--experiments", "app2-exp", "--seed", "3", "--compare", "-w", wh)
    assert code == 0, err
    assert "MAPE (unseen apps)" in out and "best single" in out
    models = sql(wh, "SELECT model_id, target, kind, seed, experiments, n_rows, cv_mape FROM models")
    assert models.height == 1 and models["kind"][0] == "linear" and models["seed"][0] == 3
    assert sorted(models["experiments"][0]) == ["app0-exp", "app1-exp", "app2-exp"]
    mid = models["model_id"][0]
    code, out, _ = run_cli("models", "-w", wh)
    assert code == 0 and mid[:7] in out
    code, out, err = run_cli("predict", "--experiment", "app1-exp", "-w", wh)
    assert code == 0, err
    assert "MAPE" in out
    p = sql(wh, f"SELECT count(*) AS n, count(predicted) AS k FROM predictions WHERE model_id = '{mid}'")
    assert p["n"][0] == p["k"][0] > 0
    # a second target and an explicit model id
    assert run_cli("train", "--target", "tpi", "--model", "rf", "--experiments", "app0-exp,app1-exp,app2-exp",
                   "--folds", "2", "-w", wh)[0] == 0
    assert run_cli("predict", "--experiment", "app0-exp", "--model", mid, "-w", wh)[0] == 0
    assert sql(wh, "SELECT DISTINCT target FROM models ORDER BY 1")["target"].to_list() == ["ipc", "tpi"]
    # issue 28: that random forest (2 folds) is not 20 % better than the training mean on unseen programs: rejected,
    # so a tpi prediction needs a model that is
    code, _, err = run_cli("predict", "--experiment", "app0-exp", "--target", "tpi", "-w", wh)
    assert code == 2 and "rejected" in err
    assert run_cli("train", "--target", "tpi", "--experiments", "app0-exp,app1-exp,app2-exp", "-w", wh)[0] == 0
    assert run_cli("predict", "--experiment", "app0-exp", "--target", "tpi", "-w", wh)[0] == 0
    assert sql(wh, "SELECT DISTINCT target FROM predictions ORDER BY 1")["target"].to_list() == ["ipc", "tpi"]


def test_detect_writes_the_regressions_view(run_cli, wh):
    code, out, err = run_cli("detect", "-w", wh)
    assert code == 0, err
    alerts = sql(wh, "SELECT app, call_site, changed_at, run_id, magnitude, score, explained_by, signals, "
                     "archetype_before, archetype_after FROM regressions ORDER BY app")
    assert alerts["app"].to_list() == ["app000", "app001"]
    assert all("instructions" in e for e in alerts["explained_by"].to_list())
    assert alerts["changed_at"].dt.day().to_list() == [9, 9]  # night 8 of a campaign starting on the 1st
    assert alerts["signals"][0][0]["name"] == "time_ns"
    assert "2 regression(s)" in out
    code, out, _ = run_cli("detect", "--app", "app0", "-w", wh)  # a predictor app: one night, too short to judge
    assert code == 0 and "app0: 1 night(s) of history; detecting a regression needs at least 7" in out
    assert "no regressions" not in out
    code, _, err = run_cli("detect", "--app", "app00", "-w", wh)  # a misspelt name: the closest ones
    assert code == 2 and "did you mean app000 or app001" in err
    assert sql(wh, "SELECT count(*) AS n FROM regressions")["n"][0] == 2


def test_detect_reads_no_history_of_an_app_too_short_to_judge(run_cli, wh, monkeypatch):
    """Attack 11 E7: ``detect`` built the history table of every burst and MPI call of an app (2.6 GB over one
    2 GB run, uncapped DuckDB) to say it has one night of history; a DuckDB out-of-memory was a 45-line traceback.
    An app with fewer nights than a detection needs is told from the runs table alone; the history of the others is
    read with the caps of ``synthtrace sql``; DuckDB's out-of-memory is the one out-of-memory line."""
    import duckdb

    from synthtrace.pipelines.address_space import out_of_memory_line
    from synthtrace.warehouse import history

    real, asked = history.site_rank_table, []

    def recorded(w, names=None):
        asked.append(list(names or []))
        return real(w, names)
    monkeypatch.setattr(history, "site_rank_table", recorded)
    code, out, _ = run_cli("detect", "--app", "app0", "-w", wh)
    assert code == 0 and "app0: 1 night(s) of history; detecting a regression needs at least 7" in out
    assert asked == []
    code, out, _ = run_cli("detect", "-w", wh)
    assert code == 0 and "2 regression(s)" in out and asked == [["app000", "app001"]], asked
    line = out_of_memory_line(duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate 262144 bytes"))
    assert line is not None and line.startswith("out of memory (Out of Memory Error")


@pytest.mark.parametrize("args, message", [
    (["train", "--target", "flops"], "unknown target 'flops'"),
    (["train", "--model", "svm"], "unknown model kind 'svm'"),
    (["train", "--experiments", "nope"], "no experiment 'nope'"),
    (["train", "--folds", "1"], "--folds"),
    (["predict", "--experiment", "app0-exp"], "no model"),
    (["predict", "--experiment", "app0-exp", "--target", "foo"], "unknown target"),
    (["detect", "--app", "nope"], "no application 'nope'"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(run_cli, wh, args, message):
    before = tree_digest(wh)
    code, out, err = run_cli(*args, "-w", wh)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (code, err)
    assert tree_digest(wh) == before


def test_empty_warehouse(run_cli, tmp_path):
    assert run_cli("train", "-w", tmp_path / "none")[0] == 2
    assert run_cli("detect", "-w", tmp_path / "none")[0] == 2
    assert run_cli("models", "-w", tmp_path / "none")[0] == 2  # a mistyped --warehouse (issue 16)
    code, out, _ = run_cli("models", "-w", Warehouse(tmp_path / "empty").ensure().root)
    assert code == 0 and "no models" in out


def test_copied_model_folders_are_not_models(run_cli, wh):
    """Attack 11 E5: ``models`` listed a model once per copy of its folder (``models/<id>.bak``, ``models/zz``),
    ``predict --model zz`` took the copy, and with the original moved aside (``old-<id>``: a user retiring it) a
    model that was not there was listed and predicted with. The registry is the folders the commits wrote, as the
    ``models`` view of ``sql`` says."""
    assert run_cli("train", "--model", "linear", "--experiments", "app0-exp,app1-exp", "-w", wh)[0] == 0
    mid = read_models(Warehouse(wh))["model_id"][0]
    root = models_dir(Warehouse(wh))
    for copy in (f"{mid}.bak", "zz"):
        shutil.copytree(root / mid, root / copy)
    assert read_models(Warehouse(wh))["model_id"].to_list() == [mid]
    code, out, err = run_cli("predict", "--experiment", "app0-exp", "--model", "zz", "-w", wh)
    assert code == 2 and "no model 'zz'" in err, err
    (root / mid).rename(root / f"old-{mid}")
    assert read_models(Warehouse(wh)).height == 0
    code, out, err = run_cli("predict", "--experiment", "app0-exp", "--model", mid, "-w", wh)
    assert code == 2 and f"no model {mid!r}" in err, err


def test_predict_refuses_a_tampered_model(run_cli, wh):
    assert run_cli("train", "--model", "linear", "--experiments", "app0-exp,app1-exp", "-w", wh)[0] == 0
    mid = read_models(Warehouse(wh))["model_id"][0]
    art = models_dir(Warehouse(wh)) / mid / "model.skops"
    art.write_bytes(art.read_bytes() + b"\0")
    before = tree_digest(wh)
    code, _, err = run_cli("predict", "--experiment", "app0-exp", "-w", wh)
    assert code == 2 and "SHA-256" in err and "refusing" in err
    assert tree_digest(wh) == before


def test_nightly_steps(wh):
    first = retrain_step(Warehouse(wh), kind="linear")
    assert first is not None and first["target"] == "ipc" and first["n_rows"] > 0
    assert retrain_step(Warehouse(wh), kind="linear") is None  # nothing new since
    new = detect_step(Warehouse(wh))
    assert {a["app"] for a in new} == {"app000", "app001"} and isinstance(new[0]["changed_at"], str)
    assert detect_step(Warehouse(wh)) == []  # the same alerts are not new the next night
    rng = np.random.default_rng(0)  # a new experiment appears
    bursts, calls, _ = simulate_run(random_app(rng, "new", 3), rng, run_id="newrun", counters=ALL_COUNTERS, n_iters=3)
    write_run(Warehouse(wh), run_id="newrun", run_name="new.run0", experiment="new-exp", app="new",
              started_at=datetime(2026, 3, 1), bursts=bursts, calls=calls)
    again = retrain_step(Warehouse(wh), kind="linear")
    assert again is not None and again["new_experiments"] and len(read_models(Warehouse(wh))) == 2


@pytest.mark.slow
def test_simulated_campaign_end_to_end(run_cli, tmp_path):
    """The project's simulator -> ingest -> detect finds the injected regression on its night."""
    sim, w = tmp_path / "sim", tmp_path / "wh"
    code, _, err = run_cli("simulate", sim, "--nights", "10", "--ranks", "4", "--iterations", "4", "--pattern", "cg",
                           "--inject", "more_instructions:cg:6:0.3", "--seed", "1")
    assert code == 0, err
    assert run_cli("ingest", sim, "-w", w)[0] == 0
    code, out, err = run_cli("detect", "-w", w)
    assert code == 0, err
    truth = pl.read_parquet(sim / "ground_truth" / "regressions.parquet")
    alerts = sql(w, "SELECT call_site, changed_at, explained_by FROM regressions ORDER BY score DESC")
    assert alerts.height >= 1
    top = alerts.row(0, named=True)
    assert top["changed_at"].date() == truth["date"][0] and "instructions" in top["explained_by"]


@pytest.mark.real_traces
def test_detect_app_prefix_on_real_traces(run_cli, tmp_path):
    """README: ``detect --app lulesh`` finds the LULESH runs: ingested with ``--app lulesh``, and without it as the
    program their .pcf names (issue 28: the binary lulesh2.0, one application whatever the file names)."""
    from testing.traces import LULESH_A, LULESH_B
    w = tmp_path / "wh"
    assert run_cli("ingest", LULESH_A, LULESH_B, "-w", w)[0] == 0
    code, out, err = run_cli("detect", "--app", "lulesh2.0", "-w", w)
    assert code == 0, err
    assert "lulesh2.0: 2 night(s) of history" in out  # the two runs: two nights of one app
    code, _, err = run_cli("detect", "--app", "lulsh", "-w", w)
    assert code == 2 and "did you mean" in err and "lulesh2.0" in err
    code, out, err = run_cli("detect", "--app", "lulesh", "-w", w)  # attack 10 D7: the prefix the help names
    assert code == 0 and "lulesh2.0: 2 night(s) of history" in out, err
    code, _, err = run_cli("detect", "--app", "lules", "-w", w)  # not at a word's end: no application
    assert code == 2 and "did you mean" in err
    w2 = tmp_path / "wh2"
    assert run_cli("ingest", LULESH_A, LULESH_B, "-w", w2, "--app", "lulesh_8r")[0] == 0
    code, out, err = run_cli("detect", "--app", "lulesh", "-w", w2)
    assert code == 0 and "lulesh_8r: 2 night(s) of history" in out, err


def test_a_model_worse_than_the_mean_on_unseen_apps_is_rejected(run_cli, tmp_path):
    """Issue 16: a model with R² < 0 on unseen applications is registered as rejected and not used by default."""
    from synthtrace.models.registry import model_status
    from synthtrace.warehouse.model_store import model_record
    assert [model_status(r) for r in (0.4, -0.2, None)] == ["ok", "rejected", "unevaluated"]
    w = tmp_path / "wh"
    predictor_campaign(w, n_apps=3, n_kernels=4, n_iters=3, seed=5)
    assert run_cli("train", "--model", "linear", "-w", w)[0] == 0
    models = read_models(Warehouse(w))
    good = models["model_id"][-1]
    assert models["status"][-1] == model_status(models["cv_r2"][-1]) == "ok"
    rec = model_record(Warehouse(w), good)  # a newer version of it, judged worse than the mean on unseen apps
    from synthtrace.warehouse.model_store import MODEL_SCHEMA, models_dir
    bad = {**rec, "model_id": good + "-bad", "cv_r2": -0.5, "status": "rejected",
           "created_at": rec["created_at"].replace(year=rec["created_at"].year + 1)}
    d = models_dir(Warehouse(w))
    shutil.copytree(d / good, d / bad["model_id"])
    pl.DataFrame([bad], schema=MODEL_SCHEMA).write_parquet(d / bad["model_id"] / "model.parquet")
    (d / bad["model_id"] / "checksums.json").unlink()  # [helper integrity] a folder made by hand has no checksums
    assert models.height == 1
    code, out, err = run_cli("predict", "--experiment", "app1-exp", "-w", w)
    assert code == 0 and good in out and "bad" not in out  # the newest usable one
    assert "error against the measured ipc: R²" in out
    code, out, err = run_cli("predict", "--experiment", "app1-exp", "--model", bad["model_id"], "-w", w)
    assert code == 0 and "is rejected" in err
    code, out, _ = run_cli("models", "-w", w)
    assert "rejected" in out and "ok" in out


def test_progress_appears_only_on_long_work(capsys):
    from synthtrace.pipelines.cli_app import StepProgress
    with StepProgress(3, "quick", delay_s=60) as step:
        step("one")
        assert step.bar is None  # a short command prints nothing
    with StepProgress(3, "long", delay_s=0) as step:
        step("one")
        step("two")
        assert (
            step.bar is not None and step.bar.tasks[0].completed == 2 and "long: two" in step.bar.tasks[0].description
        )


@pytest.mark.real_traces
@pytest.mark.slow
def test_predict_scores_the_bursts_the_model_learned_from(run_cli, merged_lulesh, tmp_path):
    """Attack 12: ``predict``'s error line scored every burst, though the model learns only bursts of >= 1e4
    instructions (the short ones' rates are noise): a model trained on the real LULESH pair (training R² 0.998)
    read R² -1.12 on its own bursts. The line scores what training kept, and says how many it left out."""
    import re

    w = tmp_path / "wh"
    shutil.copytree(merged_lulesh, w)
    assert run_cli("train", "--target", "ipc", "-w", w)[0] == 0
    code, out, err = run_cli("predict", "--experiment", "lulesh-8r", "-w", w)
    assert code == 0, err
    m = re.search(r"R² (-?[\d.]+), MAPE [\d.]+% on (\d+) bursts >= 10000 instructions \((\d+) shorter not scored\)",
                  " ".join(out.split()))
    assert m, out
    assert float(m[1]) > 0.5
    n, shorter = int(m[2]), int(m[3])
    stored = sql(w, "SELECT count(*) AS n, count(actual) AS k FROM predictions")
    assert shorter > 0 and n + shorter == stored["k"][0] <= stored["n"][0]  # every burst is still predicted


def test_predictions_of_an_experiment_whose_runs_changed_are_removed_with_them(run_cli, wh):
    """Attack 19 F14: `runs rm` and `runs move` removed an experiment's merge and analysis but not its predictions:
    the predictions view still gave rows of a removed run, and of an experiment left with no run. They are that
    experiment's derived data too: removed (and said) when its runs change; other experiments' predictions stay."""
    assert run_cli("train", "--target", "ipc", "--model", "linear", "--experiments", "app0-exp,app1-exp",
                   "--folds", "2", "-w", wh)[0] == 0
    for experiment in ("app0-exp", "app1-exp"):
        assert run_cli("predict", "--experiment", experiment, "-w", wh)[0] == 0
    runs = sql(wh, "SELECT run_id, experiment FROM runs WHERE experiment IN ('app0-exp', 'app1-exp')")
    gone = runs.filter(pl.col("experiment") == "app0-exp")["run_id"][0]
    moved = runs.filter(pl.col("experiment") == "app1-exp")["run_id"][0]
    kept_before = sql(wh, "SELECT * FROM predictions WHERE experiment = 'app1-exp' ORDER BY ALL")
    code, out, err = run_cli("runs", "rm", gone, "-w", wh)
    assert code == 0 and "experiment app0-exp: predictions removed" in out, (out, err)
    assert sql(wh, "SELECT count(*) AS n FROM predictions WHERE experiment = 'app0-exp'")["n"][0] == 0
    assert sql(wh, "SELECT * FROM predictions WHERE experiment = 'app1-exp' ORDER BY ALL").equals(kept_before)
    code, out, err = run_cli("runs", "move", moved, "--experiment", "elsewhere", "-w", wh)
    assert code == 0 and "experiment app1-exp: predictions removed" in out, (out, err)
    with pytest.raises(QueryError, match="nothing has been predicted yet"):  # no experiment has predictions left
        sql(wh, "SELECT count(*) AS n FROM predictions")
    assert run_cli("predict", "--experiment", "app1-exp", "-w", wh)[0] == 0  # what is left predicts again
    assert sql(wh, "SELECT count(DISTINCT run_id) AS n FROM predictions")["n"][0] >= 1
