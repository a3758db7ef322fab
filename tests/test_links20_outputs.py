"""Outputs by the outputs' rule (issue 23 items 1-2), attack 20.

F4: every ``--output``/``--out`` whose folder's name is not UTF-8 was refused as "the warehouse's path holds a byte
that is not UTF-8": only a warehouse's path must be UTF-8 (its Parquet reader and writer), an output's need not."""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from synthtrace.warehouse import Warehouse

LATIN1 = os.fsdecode(b"out\xff")  # a folder name of one Latin-1 byte, not UTF-8


@pytest.fixture
def empty_wh(tmp_path) -> Path:
    Warehouse(tmp_path / "wh").ensure()
    return tmp_path / "wh"


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_an_output_in_a_folder_whose_name_is_not_utf8_is_written(empty_wh, tmp_path, run_cli, fmt):
    folder = tmp_path / LATIN1
    folder.mkdir()
    out = folder / f"r.{fmt}"
    code, _, err = run_cli("sql", "-w", empty_wh, "--format", fmt, "--output", out, "SELECT 7 AS x")
    assert code == 0, err  # was rc 2 "the warehouse's path holds a byte that is not UTF-8"
    if fmt == "parquet":  # pyarrow takes a path as UTF-8 text: the file is opened by Python
        with out.open("rb") as fh:
            assert pq.read_table(fh).column("x").to_pylist() == [7]
    else:
        assert "7" in out.read_text()


def test_a_report_in_a_folder_whose_name_is_not_utf8_is_written(empty_wh, tmp_path, run_cli):
    out = tmp_path / LATIN1 / "r.html"
    out.parent.mkdir()
    code, _, err = run_cli("report", "-w", empty_wh, "--out", out)
    assert code == 0 and out.read_text().startswith("<!DOCTYPE html>"), err
