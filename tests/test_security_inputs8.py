"""Inputs of attack 8 (issue 23, B5, B7, B8, B10): a model artifact that inflates to gigabytes, OTF2 names holding
control characters, OTF2 events files moved between locations, a Paraver header date that is no date. Each is
refused in one line or read with a warning that says what was done."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from testing.traces import PRIME, copy_trace

pytestmark = pytest.mark.real_traces


def _runs(run_cli, wh: Path, columns: str) -> list[dict]:
    code, out, err = run_cli("sql", f"SELECT {columns} FROM runs", "-w", wh, "-f", "json")
    assert code == 0, err
    return json.loads(out)


# ------------------------------------------------------------------------------ B10: a header date that is no date
def test_an_invalid_paraver_header_date_is_said_and_the_trace_read(tmp_path, run_cli):
    """``#Paraver (31/02/2018 at 25:61)`` was stored as started_at NULL with no warning (the nightly series are
    ordered by started_at): the ingest warns, naming the file, line 1 and the text, and stores the run."""
    prv = copy_trace(PRIME, tmp_path / "t")
    data = prv.read_bytes()
    prv.write_bytes(data.replace(b"#Paraver (25/10/2018 at 14:04)", b"#Paraver (31/02/2018 at 25:61)", 1))
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0, err
    said = f"{prv}:1: header date '31/02/2018 at 25:61' is no date"
    assert said in err
    (run,) = _runs(run_cli, tmp_path / "wh", "started_at, n_bursts, warnings")
    assert run["started_at"] is None and run["n_bursts"] == 704
    assert any(said in w for w in run["warnings"]), run["warnings"]
