"""Storage of regression alerts: ``WAREHOUSE/regressions/<app>.parquet``, one file per application (DESIGN §5, §8).

Each detection run replaces the files of the applications it looked at, each in one atomic rename (written in
``.staging/`` first), so a reader sees an application's previous alerts or its new ones, never a mix. An
application without alerts gets an empty file, so alerts that no longer hold disappear.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import polars as pl

from synthtrace.warehouse.layout import Warehouse, os_error_within
from synthtrace.warehouse.names import file_name
from synthtrace.warehouse.parts import read_part


def regressions_dir(wh: Warehouse) -> Path:
    return wh.root / "regressions"


def write_alerts(wh: Warehouse, app: str, alerts: pl.DataFrame) -> Path:
    """Replace the alerts of ``app`` (``alerts`` holds only that app's rows, possibly none); returns the file."""
    wh.ensure()
    target = regressions_dir(wh) / f"{file_name(app)}.parquet"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = wh.staging_dir / f"regressions.{uuid.uuid4().hex[:8]}.{os.getpid()}.parquet"
    try:
        alerts.write_parquet(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except Exception as exc:  # a full disk is one line at the CLI edge
        if (os_error := os_error_within(exc, target)) is not None:
            raise os_error from None
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return target


def read_alerts(wh: Warehouse, app: str | None = None) -> pl.DataFrame:
    """Stored alerts (of ``app`` if given); an empty frame when there are none."""
    d = regressions_dir(wh)
    files = [d / f"{file_name(app)}.parquet"] if app is not None else sorted(d.glob("*.parquet")) if d.is_dir() else []
    parts = [read_part(f) for f in files if f.is_file()]
    return pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()
