"""`synthtrace export`: Perfetto JSON structure, a Pipit-style table pandas can load, plain CSV."""
from __future__ import annotations

import json

import polars as pl
import pytest

from tests.conftest import PRIME, copy_trace

pytestmark = pytest.mark.real_traces


@pytest.fixture
def wh(tmp_path, run_cli):
    copy_trace(PRIME, tmp_path / "prime-exp")
    w = tmp_path / "wh"
    assert run_cli("ingest", tmp_path / "prime-exp", "-w", w)[0] == 0
    return w


def test_perfetto_json_structure(tmp_path, wh, run_cli):
    out = tmp_path / "t.json"
    code, _, err = run_cli("export", "prime-exp", "--format", "perfetto", "--output", out, "-w", wh)
    assert code == 0, err
    trace = json.loads(out.read_text())
    events = trace["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    bursts = [e for e in events if e["ph"] == "X" and e["cat"] == "burst"]
    mpi = [e for e in events if e["ph"] == "X" and e["cat"] == "mpi"]
    assert len(meta) == 16  # one process (track group) per rank
    assert len(bursts) == 704 and len(mpi) == 672
    for e in bursts + mpi:
        assert {"name", "pid", "tid", "ts", "dur", "args"} <= e.keys() and e["dur"] >= 0
    first = min((e for e in bursts if e["pid"] == 100001), key=lambda e: e["ts"])
    assert first["ts"] == pytest.approx(15144.257) and "PAPI_TOT_INS" in next(e for e in bursts if e["args"].get("mpi_call") == "MPI_Init")["args"]


def test_pipit_table_loads_with_pandas(tmp_path, wh, run_cli):
    pd = pytest.importorskip("pandas")
    out = tmp_path / "events.csv"
    assert run_cli("export", "prime-exp", "-f", "pipit", "-o", out, "-w", wh)[0] == 0
    df = pd.read_csv(out)
    assert list(df.columns[:5]) == ["Timestamp (ns)", "Event Type", "Name", "Thread", "Process"]
    assert set(df["Event Type"]) == {"Enter", "Leave"}
    assert (df["Event Type"] == "Enter").sum() == (df["Event Type"] == "Leave").sum() == 704 + 672
    assert df["Timestamp (ns)"].is_monotonic_increasing
    comp = df[(df["Name"] == "Computation") & (df["Event Type"] == "Leave")]
    from synthtrace.warehouse.sql import query
    assert comp["PAPI_TOT_INS"].sum() == query(wh, "SELECT sum(PAPI_TOT_INS) FROM bursts").column(0)[0].as_py()


def test_csv_and_unknown_experiment(tmp_path, wh, run_cli):
    out = tmp_path / "b.csv"
    assert run_cli("export", "prime-exp", "-f", "csv", "-o", out, "-w", wh)[0] == 0
    assert pl.read_csv(out).height == 704
    code, _, err = run_cli("export", "nope", "-o", out, "-w", wh)
    assert code == 2 and "no experiment 'nope'" in err
