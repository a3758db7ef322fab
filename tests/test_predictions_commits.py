"""Two experiments' predictions of one model share its folder (``predictions/<model>/<experiment>.parquet``), which
every commit rebuilds whole (review 20): a predict of E2 committing while a predict of E1 (or a ``runs rm`` removing
E1's predictions) had copied the folder lost E2's file, or brought E1's removed one back. Commits of one model's
folder now take turns."""
from __future__ import annotations

import threading

import polars as pl

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import model_store
from synthtrace.warehouse.model_store import PREDICTION_SCHEMA, write_predictions


def _frame(experiment: str, rows: int) -> pl.DataFrame:
    frame = pl.DataFrame({c: [None] * rows for c in PREDICTION_SCHEMA}, schema=PREDICTION_SCHEMA)
    return frame.with_columns(pl.lit(experiment).alias("experiment"))


def test_two_experiments_predicted_at_once_keep_both_files(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path / "wh")
    write_predictions(wh, "m1", "e0", _frame("e0", 1))
    inside, go_on = threading.Event(), threading.Event()
    real_copy = model_store.link_or_copy

    def held_copy(src, dst):  # the first commit pauses once it has copied the folder's other files
        real_copy(src, dst)
        if threading.current_thread().name == "first":
            inside.set()
            go_on.wait(30)

    monkeypatch.setattr(model_store, "link_or_copy", held_copy)
    errors: list[BaseException] = []

    def predict(experiment: str) -> None:
        try:
            write_predictions(wh, "m1", experiment, _frame(experiment, 2))
        except BaseException as exc:
            errors.append(exc)

    first = threading.Thread(target=predict, args=("e1",), name="first")
    second = threading.Thread(target=predict, args=("e2",), name="second")
    first.start()
    assert inside.wait(30)
    second.start()
    second.join(2)  # it waits for the first commit (before: committed at once, then overwritten by the first)
    go_on.set()
    first.join(30)
    second.join(30)
    assert not errors, errors
    stored = pl.read_parquet(wh.root / "predictions" / "m1" / "*.parquet")
    assert stored.group_by("experiment").len().sort("experiment").rows() == [("e0", 1), ("e1", 2), ("e2", 2)]
