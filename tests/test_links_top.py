"""A linked ``models/`` or ``predictions/`` top folder (attack 19 F12): ``synthtrace models`` said "no models in
L (train one ...)" and sql "no model has been trained yet" / "nothing has been predicted yet", the link unnamed,
while ``runs`` names a linked ``runs/`` and train/predict refuse the link. Each now names it in one line."""
from __future__ import annotations

import os

import pytest

from synthtrace.warehouse import Warehouse


def _linked_top(tmp_path, top: str):
    wh = Warehouse(tmp_path / "wh").ensure()
    outside = tmp_path / f"outside-{top}"
    outside.mkdir()
    (wh.root / top).mkdir(exist_ok=True)
    (wh.root / top).rmdir()
    os.symlink(outside, wh.root / top)
    return wh, outside


def _names_the_link(code: int, err: str, wh: Warehouse, top: str, outside) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"{wh.root / top}: not read (a symbolic link to {str(outside)!r}" in lines[0], err
    assert "replace it with a folder" in lines[0], err


def test_models_names_a_linked_models_folder(tmp_path, run_cli):
    wh, outside = _linked_top(tmp_path, "models")
    code, out, err = run_cli("models", "-w", wh.root)
    _names_the_link(code, err, wh, "models", outside)  # was rc 0: "no models in ... (train one ...)"
    assert "no models" not in out


@pytest.mark.parametrize(("top", "view"), [("models", "models"), ("predictions", "predictions")])
def test_sql_names_a_linked_top_folder_not_an_empty_view(tmp_path, run_cli, top, view):
    wh, outside = _linked_top(tmp_path, top)
    code, out, err = run_cli("sql", f"SELECT count(*) FROM {view}", "-w", wh.root)
    _names_the_link(code, err, wh, top, outside)  # was "no model has been trained yet" / "nothing ... predicted"
