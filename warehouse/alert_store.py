"""Storage of regression alerts: ``WAREHOUSE/regressions/<app>.parquet``, one file per application (DESIGN §5, §8).

Each detection run replaces the files of the applications it looked at, all in one atomic swap of the folder
(:meth:`~synthtrace.warehouse.layout.Warehouse.update_dir`), so a reader sees the previous alerts or the new ones,
never a mix, and a failed detection changes none. An
application without alerts gets an empty file, so alerts that no longer hold disappear.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.names import file_name
from synthtrace.warehouse.parts import read_part


def regressions_dir(wh: Warehouse) -> Path:
    return wh.root / "regressions"


def write_alerts(wh: Warehouse, app: str, alerts: pl.DataFrame) -> Path:
    """Replace the alerts of ``app`` (``alerts`` holds only that app's rows, possibly none); returns the file."""
    return write_all_alerts(wh, {app: alerts})[app]


def write_all_alerts(wh: Warehouse, alerts: dict[str, pl.DataFrame]) -> dict[str, Path]:
    """Replace the alerts of every application of ``alerts`` (app -> its rows, possibly none) in one atomic swap of
    the regressions folder, the other applications' files kept: a detection that fails (a full disk) changes
    none of them (attack 6 F12: the applications written before the failure were replaced). Returns app -> file."""
    wh.ensure()
    wh.update_dir(regressions_dir(wh), {file_name(app): frame for app, frame in alerts.items()})
    return {app: regressions_dir(wh) / f"{file_name(app)}.parquet" for app in alerts}


def read_alerts(wh: Warehouse, app: str | None = None) -> pl.DataFrame:
    """Stored alerts (of ``app`` if given); an empty frame when there are none."""
    d = regressions_dir(wh)
    files = [d / f"{file_name(app)}.parquet"] if app is not None else sorted(d.glob("*.parquet")) if d.is_dir() else []
    parts = [read_part(f) for f in files if f.is_file()]
    return pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()
