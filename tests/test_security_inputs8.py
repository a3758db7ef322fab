"""Inputs of attack 8 (issue 23, B5, B7, B8, B10): a model artifact that inflates to gigabytes, OTF2 names holding
control characters, OTF2 events files moved between locations, a Paraver header date that is no date. Each is
refused in one line or read with a warning that says what was done."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testing.traces import PRIME, TRACES, copy_trace

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


# ------------------------------------------------------------------------------ B7: OTF2 names with control characters
PING_PONG_PAPI = TRACES / "otf2" / "ping-pong-otf2-papi"


def _archive_copy(dest: Path) -> Path:
    """A copy of the ping-pong-otf2-papi archive (4 files per location, 2 ranks)."""
    shutil.copytree(PING_PONG_PAPI, dest)
    return dest


def _replace_in(path: Path, old: bytes, new: bytes) -> None:
    """The first ``old`` replaced by ``new`` of the same length (an OTF2 string definition keeps its size)."""
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))


def test_otf2_names_with_control_characters_are_stored_escaped_and_said(tmp_path, run_cli):
    """A region named ``\\u202eX\\x1b[2J`` instead of MPI_Send was stored raw, and ``sql --format csv`` cleared the
    terminal; a metric name likewise. Both are kept escaped (as the .row and .pcf names), with one warning naming
    the definitions file."""
    archive = _archive_copy(tmp_path / "pp")
    _replace_in(archive / "traces.def", b"MPI_Send", "\u202eX\x1b[2J".encode())
    _replace_in(archive / "traces.def", b"PAPI_TOT_CYC", b"\x1b]0;T\x07PAPI_C")
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", archive, "-w", wh)
    assert code == 0, err
    assert f"{archive / 'traces.def'}: name holds control characters: kept escaped (2 names)" in err
    code, out, err = run_cli("sql", "SELECT DISTINCT mpi_call FROM mpi_calls ORDER BY 1", "-w", wh, "-f", "csv")
    assert code == 0 and "\x1b" not in out + err and "\u202e" not in out
    assert '"\\u202eX\\x1b[2J"' in out.splitlines()
    code, out, err = run_cli("sql", "SELECT column_name FROM (DESCRIBE bursts)", "-w", wh, "-f", "csv")
    assert code == 0 and '"\\x1b]0;T\\x07PAPI_C"' in out.splitlines() and "\x1b" not in out
    (run,) = _runs(run_cli, wh, "warnings")
    assert any("kept escaped (2 names)" in w for w in run["warnings"])
