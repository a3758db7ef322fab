"""`synthtrace predict` racing `runs rm` / `runs move` (attack 20 F7): the predictions of a run that left the
experiment while they were computed are never committed."""
from __future__ import annotations

import fcntl
import os
import shutil

import polars as pl
import pytest

from synthtrace.pipelines import jobs
from synthtrace.warehouse import run_admin
from synthtrace.warehouse.errors import QueryError, RunsChangedError
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.sql import query
from testing.model_campaigns import predictor_campaign


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("races20-predict") / "wh"
    predictor_campaign(root, n_apps=3, n_kernels=4, n_iters=3, seed=5)
    jobs.train(Warehouse(root), "ipc", "linear", experiments=["app0-exp", "app1-exp"], n_splits=2)
    return root


@pytest.fixture
def wh(trained, tmp_path):
    return Warehouse(shutil.copytree(trained, tmp_path / "wh"))


def _sql(wh: Warehouse, text: str) -> pl.DataFrame:
    return pl.from_arrow(query(wh, text))


def _in_the_window(monkeypatch, act) -> None:
    """Run ``act()`` after predict computed its frame and before it commits it (the window of the race)."""
    from synthtrace.models import registry

    computed = registry.window_predictions

    def then_act(*a, **k):
        out = computed(*a, **k)
        act()
        return out

    monkeypatch.setattr(registry, "window_predictions", then_act)


def _predicted(wh: Warehouse, experiment: str) -> int:
    """Rows of ``experiment`` in the predictions view (0 when nothing has been predicted at all)."""
    try:
        return _sql(wh, f"SELECT count(*) AS n FROM predictions WHERE experiment = '{experiment}'")["n"][0]
    except QueryError as exc:
        assert "nothing has been predicted" in str(exc)
        return 0


@pytest.mark.parametrize("change", ["rm", "move", "join"])
def test_a_run_that_changes_the_experiment_while_predicted_commits_nothing(wh, monkeypatch, change):
    """Attack 20 F7: `runs rm` (or `runs move`) of a run between predict's read and its commit: the predictions
    view kept the run's rows (2,140 of a run that was gone), or rows of a merge that included it. The commit is
    refused in one line (RunsChangedError: run it again), nothing written; run again, it stores the runs there are.
    A run moved INTO the experiment meanwhile is refused alike (the predictions would leave it out). Fails on the
    old code for rm and move (the run's rows are stored)."""
    runs = _sql(wh, "SELECT run_id, experiment FROM runs ORDER BY run_id")
    mine = runs.filter(pl.col("experiment") == "app0-exp")["run_id"].to_list()
    other = runs.filter(pl.col("experiment") == "app1-exp")["run_id"][0]
    act = {"rm": lambda: run_admin.remove_runs(wh, [mine[0]]),
           "move": lambda: run_admin.move_runs(wh, [mine[0]], "elsewhere"),
           "join": lambda: run_admin.move_runs(wh, [other], "app0-exp")}[change]
    _in_the_window(monkeypatch, act)
    with pytest.raises(RunsChangedError, match="app0-exp.*while it was predicted.*nothing was committed"):
        jobs.predict(wh, "app0-exp")
    assert _predicted(wh, "app0-exp") == 0
    monkeypatch.undo()
    _, out = jobs.predict(wh, "app0-exp")  # again: the runs there are now
    stored = _sql(wh, "SELECT DISTINCT run_id FROM predictions")["run_id"].to_list()
    assert _predicted(wh, "app0-exp") == out.height > 0
    if change != "join":
        assert mine[0] not in stored


def test_predictions_are_committed_under_the_experiments_writers_lock(wh, monkeypatch):
    """The other order of the race: `runs rm|move` hold the experiment's writers' lock while they change its runs
    and remove its predictions; predict's commit holds it too, so neither lands inside the other. Checked by
    trying the lock from another descriptor while the predictions' stage is written. Fails on the old code."""
    from synthtrace.warehouse import model_store

    restaged, tried = model_store._restaged, []

    def restaged_locked(wh_, target, without):
        lock = wh_.journal_dir / "experiments.app0-exp.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            tried.append("free")
        except BlockingIOError:
            tried.append("held")
        finally:
            os.close(fd)
        return restaged(wh_, target, without)

    monkeypatch.setattr(model_store, "_restaged", restaged_locked)
    jobs.predict(wh, "app0-exp")
    assert tried == ["held"]
