"""The Paraver writer: read -> write -> read gives identical tables on every real trace; Extrae's conventions."""
from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from testing.traces import ALL_PARAVER, LULESH_A, PRIME
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.formats.paraver.counter_types import PAPI_CODE, catalogue, extrae_type
from synthtrace.tracelib.formats.paraver.pcf import read_pcf
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.formats.paraver.writer import TraceMeta, WriterError, write_paraver


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    """Equal tables: every column except run_id, compared by name (counter column order may differ)."""
    a, b = a.drop("run_id"), b.drop("run_id")
    assert sorted(a.columns) == sorted(b.columns)
    assert a.equals(b.select(a.columns)), a.select(a.columns).join(b, on=a.columns, how="anti").head()


def _round_trip(prv, tmp_path, **kw):
    trace = ParaverTrace(prv)
    bursts, calls, summary = trace.read_tables("src")
    out = write_paraver(tmp_path / f"{prv.stem}.copy", bursts, calls, TraceMeta.from_trace(trace), **kw,
                        **({} if "messages" in kw else {"messages": summary.messages}))
    return (bursts, calls), ParaverTrace(out).read_tables("copy")[:2], out


@pytest.mark.real_traces
@pytest.mark.parametrize("prv", ALL_PARAVER, ids=lambda p: p.stem)
@pytest.mark.parametrize("rows_per_window", [500_000, 97])
def test_read_write_read_gives_identical_tables(prv, rows_per_window, tmp_path):
    (b1, c1), (b2, c2), _ = _round_trip(prv, tmp_path, rows_per_window=rows_per_window)
    _same(b1, b2)
    _same(c1, c2)


@pytest.mark.real_traces
@pytest.mark.parametrize("prv", [LULESH_A, PRIME], ids=lambda p: p.stem)
def test_messages_rebuilt_from_calls_round_trip(prv, tmp_path):
    (b1, c1), (b2, c2), _ = _round_trip(prv, tmp_path, messages=None)
    _same(b1, b2)
    _same(c1, c2)


@pytest.mark.real_traces
def test_extrae_conventions(tmp_path):
    (bursts, calls), _, out = _round_trip(LULESH_A, tmp_path)
    lines = out.read_text().splitlines()
    assert lines[0].startswith("#Paraver (21/01/2022 at 16:37):") and "_ns:" in lines[0] and lines[0].endswith(",14")
    assert sum(ln.startswith("c:") for ln in lines[1:16]) == 14 and "c:1:14:8:1:2:3:4:5:6:7:8" in lines
    body = [ln for ln in lines if ln[:2] in ("1:", "2:", "3:")]
    times = [int(ln.split(":")[5]) for ln in body if not ln.startswith("3:")]
    assert times == sorted(times)
    # the burst closed by task 1's first Isend: counters and callers on the MPI entry record
    b = bursts.filter((pl.col("task") == 1) & (pl.col("mpi_call") == "MPI_Isend")).row(0, named=True)
    entry = next(ln for ln in body if ln.startswith(f"2:{b['cpu']}:1:1:1:{b['end_ns']}:"))
    f = entry.split(":")[6:]
    pairs = dict(zip(map(int, f[::2]), map(int, f[1::2])))
    assert (
        pairs[50_000_001] == 3
        and pairs[42_000_050] == b["PAPI_TOT_INS"]
        and 70_000_001 in pairs
        and 80_000_001 in pairs
    )
    # the exit is its own record; the state inside the call is Immediate Send (10)
    call = calls.filter((pl.col("task") == 1) & (pl.col("start_ns") == b["end_ns"])).row(0, named=True)
    assert f"2:{call['cpu']}:1:1:1:{call['end_ns']}:50000001:0" in lines
    assert f"1:{call['cpu']}:1:1:1:{call['start_ns']}:{call['end_ns']}:10" in lines
    # a collective entry carries its sizes and communicator
    coll = next(ln for ln in body if ":50000002:10:" in ln)
    assert ":50100001:8:50100002:8:50100004:14:" in coll
    # communication record: logical send = the Isend's entry, physical send = its exit
    comm = [ln.split(":") for ln in body if ln.startswith("3:")]
    isend = calls.filter(pl.col("mpi_call") == "MPI_Isend").select("task", "start_ns", "end_ns").rows()
    spans = {(t, s): e for t, s, e in isend}
    assert len(comm) == 484 and all(spans.get((int(c[3]), int(c[5]))) == int(c[6]) for c in comm)
    # the .pcf names the counters (Extrae label style) and the calls
    pcf = read_pcf(out.with_suffix(".pcf"))
    assert pcf.counter_name(42_000_050) == "PAPI_TOT_INS" and "[Instr completed]" in pcf.event_labels[42_000_050]
    assert pcf.value_name(50_000_002, 10) == "MPI_Allreduce"


def test_merged_style_input_float_counters_and_extra_columns(tmp_path):
    bursts = pl.DataFrame(
        {
            "appl": [1, 1, 1, 1],
            "task": [1, 1, 2, 2],
            "thread": [1, 1, 1, 1],
            "burst_seq": [0, 1, 0, 1],
            "cpu": [1, 1, 2, 2],
            "start_ns": [0, 2_000, 0, 2_500],
            "end_ns": [1_000, 3_000, 1_500, 3_000],
            "mpi_call": ["MPI_Allreduce", None, "MPI_Allreduce", None],
            "call_site": ["solve (cg.c:12)", None, "solve (cg.c:12)", None],
            "PAPI_TOT_INS": [1000.4, 2000.0, 1500.0, None],
            "MY_NATIVE:EVENT": [5, 6, None, 8],
            "match_score": [1.0, 0.9, 1.0, 0.5],
        }
    )
    calls = pl.DataFrame({
        "appl": [1, 1], "task": [1, 2], "thread": [1, 1], "call_seq": [0, 0], "cpu": [1, 2],
        "mpi_call": ["MPI_Allreduce"] * 2, "mpi_kind": ["collective"] * 2, "start_ns": [1_000, 1_500],
        "end_ns": [2_000, 2_500], "duration_ns": [1_000, 1_000], "bytes_sent": [8, 8], "bytes_recv": [8, 8],
        "peer": [None, None], "n_messages": [0, 0], "comm": [1, 1], "root": [None, None], "tag": [None, None],
        "call_site": ["solve (cg.c:12)"] * 2,
    })
    meta = TraceMeta.simple(2, started_at=datetime(2026, 1, 2, 3, 4), binary="cg")
    out = write_paraver(tmp_path / "merged", bursts, calls, meta, counters=["PAPI_TOT_INS", "MY_NATIVE:EVENT"])
    b, c, _ = ParaverTrace(out).read_tables("x")
    assert b.get_column("PAPI_TOT_INS").to_list() == [1000, 2000, 1500, None]
    assert b.get_column("MY_NATIVE:EVENT").to_list() == [5, 6, None, 8]
    assert b.get_column("call_site").to_list() == ["solve (cg.c:12)", None, "solve (cg.c:12)", None]
    _same(calls.with_columns(pl.lit("x").alias("run_id")).cast(c.drop("run_id").schema | {"run_id": pl.String}), c)
    assert ParaverTrace(out).started_at == datetime(2026, 1, 2, 3, 4)


def test_bad_counters_are_refused(tmp_path):
    bursts = pl.DataFrame({"appl": [1], "task": [1], "thread": [1], "cpu": [1], "start_ns": [0], "end_ns": [10],
                           "PAPI_TOT_INS": [-5]})
    empty = pl.DataFrame()
    with pytest.raises(WriterError, match="negative"):
        write_paraver(tmp_path / "neg", bursts, empty, TraceMeta.simple(1))
    with pytest.raises(BadInputError, match="whitespace"):
        write_paraver(
            tmp_path / "ws",
            bursts.rename({"PAPI_TOT_INS": "MY COUNTER"}).with_columns(pl.lit(1).alias("MY COUNTER")),
            empty,
            TraceMeta.simple(1),
        )
    assert not (tmp_path / "neg.prv").exists()


def test_counter_types():
    assert extrae_type("PAPI_TOT_INS") == 42_000_050 and extrae_type("PAPI_TOT_CYC") == 42_000_059
    assert extrae_type("PAPI_L1_DCM") == 42_000_000 and extrae_type("PAPI_REF_CYC") == 42_000_107
    assert PAPI_CODE["PAPI_BR_MSP"] == 46 and PAPI_CODE["PAPI_L3_TCM"] == 8
    native = extrae_type("LONGEST_LAT_CACHE:MISS")
    assert 44_000_000 <= native < 45_000_000 and native == extrae_type("LONGEST_LAT_CACHE:MISS")
    assert 46_000_000 <= extrae_type("skx_unc_imc0::UNC_M_CAS_COUNT:RD") < 47_000_000
    infos = catalogue(["A:B", "PAPI_TOT_INS"], overrides={"A:B": 42_000_050 + 1})
    assert len({i.event_type for i in infos}) == 2
