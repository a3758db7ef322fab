"""Nothing a trace records is lost or trusted blindly: counters measured inside MPI calls are kept and exported,
every other event is queryable, and impossible counter values are reported and treated as missing (issue 24
items 2-4). The oracle for sums and counts is a plain line-by-line reading of the .prv."""
from __future__ import annotations

import json
import re
import warnings
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from testing.traces import LULESH_A, LULESH_B, PRIME, copy_trace

pytestmark = pytest.mark.real_traces

TOT_INS = 42_000_050
KEYS = ["appl", "task", "thread"]


def _naive_sums(prv: Path, event_type: int) -> Counter:
    """Sum of every value of ``event_type`` per (appl, task, thread), as paramedir adds a counter up."""
    sums: Counter = Counter()
    with open(prv) as fh:
        for line in fh:
            f = line.rstrip("\n").split(":")
            if f[0] != "2":
                continue
            for i in range(6, len(f) - 1, 2):
                if int(f[i]) == event_type:
                    sums[(int(f[2]), int(f[3]), int(f[4]))] += int(f[i + 1])
    return sums


def _naive_count(prv: Path, lo: int, hi: int) -> int:
    """Events (type:value pairs) with a type in [lo, hi]."""
    n = 0
    with open(prv) as fh:
        for line in fh:
            f = line.rstrip("\n").split(":")
            if f[0] == "2":
                n += sum(lo <= int(t) <= hi for t in f[6::2])
    return n


def _read(prv: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ParaverTrace(prv).read_tables("r")


def _per_thread(frame: pl.DataFrame, column: str) -> dict:
    return {k: v for *k, v in frame.group_by(KEYS).agg(pl.col(column).sum()).iter_rows() for k in [tuple(k)]}


@pytest.mark.parametrize("prv", [LULESH_A, LULESH_B, PRIME], ids=lambda p: p.stem)
def test_every_counter_value_is_in_a_burst_a_call_or_an_event(prv):
    """Extrae reads the counters at MPI entry (the burst's) and exit (the call's): per thread, bursts + calls (+
    the few samples neither holds, as events) add up to every PAPI_TOT_INS value in the file."""
    bursts, calls, summary = _read(prv)
    assert "PAPI_TOT_INS" in calls.columns and calls["PAPI_TOT_INS"].is_not_null().any()
    loose = summary.events.filter(pl.col("type") == TOT_INS).rename({"value": "PAPI_TOT_INS"})
    got: Counter = Counter()
    for frame in (bursts, calls, loose):
        got.update(_per_thread(frame, "PAPI_TOT_INS"))
    want = _naive_sums(prv, TOT_INS)
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}
    inside = _per_thread(calls, "PAPI_TOT_INS")
    assert sum(inside.values()) > 0.01 * sum(want.values())  # LULESH spends 1-18 % of its instructions in MPI


def test_counters_inside_calls_survive_a_chunk_boundary_between_exit_and_counters(tmp_path):
    """An exit and its counters on two records at one time, cut apart by a chunk boundary, still meet."""
    bursts, calls, _ = _read(LULESH_A)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b2, c2, _ = ParaverTrace(LULESH_A, chunk_bytes=4096).read_tables("r")
    assert c2.select(pl.col("PAPI_TOT_INS").sum()).item() == calls.select(pl.col("PAPI_TOT_INS").sum()).item()
    assert c2.drop("run_id").equals(calls.drop("run_id")) and b2.drop("run_id").equals(bursts.drop("run_id"))


@pytest.mark.parametrize("reference", [LULESH_A, LULESH_B], ids=["4+4", "7+1"])
def test_exported_merged_lulesh_keeps_every_thread_s_instructions(tmp_path, run_cli, reference):
    """The merged trace, exported as Paraver, adds up to the reference run's PAPI_TOT_INS per thread (within
    0.5 %, as paramedir sums it): the counters measured inside MPI calls are written back on the calls' exits,
    and those of bursts cut off by the trace's chop (samples no burst or call holds) as events."""
    wh, out = tmp_path / "wh", tmp_path / "merged"
    code, _, err = run_cli("ingest", LULESH_A, LULESH_B, "--experiment", "lulesh", "-w", wh)
    assert code == 0, err
    code, _, err = run_cli("merge", "lulesh", "-w", wh, "--reference", reference.stem, "--export-prv", out)
    assert code == 0, err
    original, exported = _naive_sums(reference, TOT_INS), _naive_sums(out.with_suffix(".prv"), TOT_INS)
    for thread, total in original.items():
        if total:
            assert exported[thread] == pytest.approx(total, rel=0.005), thread
    assert _naive_count(out.with_suffix(".prv"), 70_000_002, 70_000_003) == _naive_count(reference, 70_000_002,
                                                                                          70_000_003)


def _with_memory_metrics(src: Path, dest: Path) -> Path:
    """A copy of ``src`` carrying PROFET-style memory metrics (event types 94000001-9, defined in the .pcf) on the
    records of the uncore reader threads (appl 2), as PROFET writes its output trace."""
    prv = copy_trace(src, dest)
    lines = prv.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("2:") and line.split(":")[2] == "2":
            lines[i] = line.rstrip("\n") + "".join(f":{94_000_000 + k}:{i * 10 + k}" for k in range(1, 10)) + "\n"
    prv.write_text("".join(lines))
    pcf = prv.with_suffix(".pcf")
    pcf.write_text(pcf.read_text() + "\n\nEVENT_TYPE\n" + "".join(
        f"0   {94_000_000 + k}    Memory metric {k}\n" for k in range(1, 10)) + "\n")
    return prv


def test_events_view_holds_every_other_event(tmp_path, run_cli):
    """Events that are neither bursts, calls nor counters (PROFET's memory metrics, callers beyond level 1,
    sampled functions) are rows of ``events`` with their .pcf names; every one of them is there."""
    prv = _with_memory_metrics(LULESH_B, tmp_path / "profet")
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0, err
    code, out, err = run_cli("sql", "SELECT type, any_value(type_name) AS name, count(*) AS n FROM events "
                             "WHERE type BETWEEN 94000001 AND 94000009 GROUP BY type ORDER BY type", "-w", wh,
                             "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["type"] for r in rows] == list(range(94_000_001, 94_000_010))
    assert sum(r["n"] for r in rows) == _naive_count(prv, 94_000_001, 94_000_009) > 0
    assert rows[0]["name"] == "Memory metric 1"
    code, out, err = run_cli("sql", "SELECT count(*) AS n FROM events WHERE type BETWEEN 70000002 AND 70000003",
                             "-w", wh, "-f", "json")
    assert json.loads(out)[0]["n"] == _naive_count(prv, 70_000_002, 70_000_003) > 0


def test_events_and_anomaly_views_exist_before_any_row(tmp_path, run_cli):
    from synthtrace.warehouse import Warehouse

    Warehouse(tmp_path / "wh").ensure()
    for view in ("events", "counter_anomalies"):
        code, out, err = run_cli("sql", f"SELECT count(*) AS n FROM {view}", "-w", tmp_path / "wh", "-f", "json")
        assert code == 0 and json.loads(out)[0]["n"] == 0, err


def _garbage(src: Path, dest: Path) -> Path:
    """A copy of a real trace with the kinds of counter garbage real OpenMP traces hold, in the bursts' counters
    (the values on MPI entry records): an L3 miss count gone negative, one wrapped past 2**62, more branches than
    instructions, cycles at 40 GHz, instructions at 30 per cycle."""
    prv = copy_trace(src, dest)
    lines = prv.read_text().splitlines(keepends=True)
    bad = {42_000_008: [2**64 - 5, 8_100_000_000_000_000_000], 42_000_055: [7 * 10**10]}  # L3_TCM, BR_INS
    entries = [i for i, ln in enumerate(lines) if re.match(r"2:.*:5000000[1-3]:[1-9].*:42000008:", ln)]
    for i, (etype, values) in zip(entries[5::7], [(t, v) for t, vs in bad.items() for v in vs]):
        f = lines[i].rstrip("\n").split(":")
        f[f.index(str(etype), 6) + 1] = str(values)
        lines[i] = ":".join(f) + "\n"
    prv.write_text("".join(lines))
    return prv


def test_impossible_counter_values_are_said_listed_and_missing_to_metrics(tmp_path, run_cli):
    from synthtrace.tracelib.domain.machine import load_machine
    from synthtrace.tracelib.domain.metrics import burst_metrics
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.sql import query

    prv = _garbage(PRIME, tmp_path / "garbage")
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0, err
    said = [ln for ln in err.splitlines() if "impossible values" in ln]
    assert any("PAPI_L3_TCM" in ln and "1 negative" in ln and "1 beyond 2^62" in ln for ln in said), err
    assert any("PAPI_BR_INS" in ln and "more than the instructions" in ln for ln in said), err
    rows = query(Warehouse(wh), "SELECT counter, rule, n_values, example FROM counter_anomalies").to_pylist()
    got = {(r["counter"], r["rule"]): r["n_values"] for r in rows}
    assert got[("PAPI_L3_TCM", "negative")] == 1 and got[("PAPI_L3_TCM", "beyond_2^62")] == 1
    assert got[("PAPI_BR_INS", "above_instructions")] >= 1
    assert all(r["example"] for r in rows)
    # kept as recorded
    raw = query(Warehouse(wh), "SELECT min(PAPI_L3_TCM) AS lo, max(PAPI_L3_TCM) AS hi FROM bursts").to_pylist()[0]
    assert raw["lo"] == -5 and raw["hi"] == 8_100_000_000_000_000_000
    bursts = pl.from_arrow(query(Warehouse(wh), "SELECT * FROM bursts"))
    m = burst_metrics(bursts, load_machine())
    for col in ("l1_mpki", "l2_mpki", "l3_mpki", "br_mpki"):
        assert m.select(pl.col(col).drop_nulls().is_between(0, 1000).all()).item(), col
    assert m.select((pl.col("ipc").drop_nulls() <= 10).all()).item()


def test_cycles_beyond_10ghz_and_ipc_beyond_16_are_anomalies():
    from synthtrace.tracelib.domain.counter_sanity import AnomalyTally, without_anomalies

    frame = pl.DataFrame({"appl": [1, 1, 1], "task": [1, 1, 1], "thread": [1, 1, 1], "burst_seq": [0, 1, 2],
                          "duration_ns": [10_000, 10_000, 10],
                          "PAPI_TOT_CYC": [400_000, 20_000, 9_000], "PAPI_TOT_INS": [30_000, 600_000, 9_000]})
    tally = AnomalyTally()
    tally.add(frame, "burst")
    assert tally.counts == {("PAPI_TOT_CYC", "above_10ghz"): 1, ("PAPI_TOT_INS", "ipc_above_16"): 1}
    clean = without_anomalies(frame)
    assert clean["PAPI_TOT_CYC"].to_list() == [None, 20_000, 9_000]  # a 10 ns burst is judged over 1 µs
    assert clean["PAPI_TOT_INS"].to_list() == [30_000, None, 9_000]


def test_otf2_user_regions_are_events_in_extrae_s_convention():
    """OTF2 regions that are not MPI calls (user functions) become ``events`` rows as Extrae writes user functions
    (type 60000019, region at Enter, 0 at Leave): one per Enter/Leave the archive holds."""
    otf2 = pytest.importorskip("otf2")
    from synthtrace.tracelib.formats.source import open_trace
    from testing.traces import TRACES

    anchor = TRACES / "otf2" / "ping-pong-otf2-papi" / "traces.otf2"
    want = Counter()
    with otf2.reader.open(str(anchor)) as trace:
        for _, event in trace.events:
            if isinstance(event, otf2.events.Enter | otf2.events.Leave) and not event.region.name.startswith("MPI_"):
                want[(type(event).__name__, event.region.name)] += 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, _, summary = open_trace(anchor).read_tables("r")
    ev = summary.events
    assert set(ev["type"].to_list()) == {60_000_019}
    got = Counter((("Enter", n) if v else ("Leave", None)) for v, n in ev.select("value", "value_name").iter_rows())
    assert sum(want.values()) == ev.height > 0
    assert {k: c for k, c in got.items() if k[0] == "Enter"} == {k: c for k, c in want.items() if k[0] == "Enter"}
