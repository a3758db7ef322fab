"""Tables printed into a pipe or a file are never squeezed to the terminal's width: every value stays whole on one
line, to be read, copied and grepped (``runs``, ``sql``, ``detect``, ...: one printing function)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.sql import query
from testing.model_campaigns import regression_campaign
from testing.traces import LULESH_A, PRIME, copy_trace


def whole_on_a_line(out: str, values: list[str]) -> list[str]:
    """The values that do not appear whole on one line of ``out``."""
    lines = out.splitlines()
    return [v for v in values if not any(v in line for line in lines)]


def test_detect_table_is_not_squeezed(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    regression_campaign(tmp_path / "wh", n_apps=2, n_nights=12, n_kernels=3, n_iters=3, first_night=7,
                        p_regression=1.0, kinds=("more_instructions",), seed=3)
    code, out, err = run_cli("detect", "-w", tmp_path / "wh")
    assert code == 0, err
    alerts = pl.from_arrow(query(Warehouse(tmp_path / "wh"), "SELECT app, call_site FROM regressions"))
    assert alerts.height >= 1
    assert whole_on_a_line(out, alerts["call_site"].to_list() + alerts["app"].to_list()) == []


@pytest.mark.real_traces
def test_runs_and_sql_tables_are_not_squeezed(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    copy_trace(PRIME, tmp_path / "t")
    copy_trace(LULESH_A, tmp_path / "t")
    wh: Path = tmp_path / "wh"
    assert run_cli("ingest", tmp_path / "t", "-w", wh)[0] == 0
    runs = pl.from_arrow(query(Warehouse(wh), "SELECT run_id, run_name, source_path FROM runs"))
    code, out, _ = run_cli("runs", "-w", wh)
    assert code == 0 and whole_on_a_line(out, runs["run_id"].to_list() + runs["run_name"].to_list()) == []
    code, out, _ = run_cli("sql", "SELECT run_name, source_path FROM runs", "-w", wh)
    assert code == 0 and whole_on_a_line(out, runs["source_path"].to_list() + runs["run_name"].to_list()) == []
