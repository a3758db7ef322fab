"""OTF2 archives laid out as Score-P writes them (``testing/otf2_variants.py``): OpenMP threads with Score-P location
ids, CUDA and metric locations, several metric classes and value modes, sub-communicators, non-blocking and
persistent requests, other timers. Each is read back against the truth of its script and, where Pipit is installed,
against Pipit's reading of the same archive."""
from __future__ import annotations

import gc
import json
import re
import warnings
from pathlib import Path

import polars as pl
import pytest

from synthtrace.tracelib.formats.otf2 import Otf2Trace
from testing import otf2_variants as ov

VARIANTS = {
    "hybrid": ov.hybrid,
    "metrics": ov.metrics,
    "mpi": ov.mpi,
    "clock_2_5GHz_tsc": lambda root: ov.clock(root, 2_500_000_000, 3 * 10**14),  # a TSC after a day and a half
    "clock_1MHz": lambda root: ov.clock(root, 10**6, 1_700_000_000 * 10**6),  # gettimeofday in us since the epoch
    "clock_offsets": ov.clock_offsets,
    "unwinding": ov.unwinding,
    "measurement": ov.measurement,
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, ov.Variant]:
    root = tmp_path_factory.mktemp("otf2_variants")
    return {name: write(root / name) for name, write in VARIANTS.items()}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_reads_back_its_truth(variants, name):
    v = variants[name]
    trace = Otf2Trace(v.anchor)
    bursts, calls, summary = trace.read_tables("r")
    assert (trace.resources["n_tasks"], trace.resources["n_threads"]) == (v.n_tasks, v.n_threads)
    keys = ["task", "thread", "start_ns", "end_ns", "mpi_call"]
    if v.bursts:
        assert sorted(bursts.select(keys).rows(), key=str) == sorted(v.bursts, key=str)
        for key, counts in v.bursts.items():
            row = bursts.filter(*(pl.col(k) == x if x is not None else pl.col(k).is_null()
                                  for k, x in zip(keys, key))).row(0, named=True)
            for counter in summary.counters:  # every count the script fixes, NULL where it fixes none
                assert row[counter] == counts.get(counter), (key, counter)
    got_calls = calls.select("task", "thread", "mpi_call", "start_ns", "end_ns", "comm", "root", "bytes_sent",
                             "bytes_recv").rows()
    for call in v.calls:
        assert (call if len(call) == 9 else (call[0], 1, *call[1:])) in got_calls
    assert sorted(summary.messages.select("s_task", "r_task", "size", "tag").rows()) == sorted(v.messages)


def test_openmp_threads_with_scorep_location_ids(variants):
    """Thread t of rank r is location (t << 32) | r; its events are in that file; it is thread t + 1 of task r + 1.
    GPU streams (in the rank's group and in an accelerator group) and the metric recorder have no rank."""
    v = variants["hybrid"]
    trace = Otf2Trace(v.anchor)
    locs = {(loc.task, loc.thread): loc.ref for loc in trace.defs.locations}
    assert locs == {(r + 1, t + 1): ov.scorep_location_id(r, t) for r in range(2) for t in range(2)}
    assert all(trace.defs.locations[i].evt_file.name == f"{ref}.evt" for i, ref in enumerate(locs.values()))
    _, _, summary = trace.read_tables()
    assert any("skipped 3 non-CPU locations (GPU, METRIC" in w for w in summary.warnings)
    assert any("metric power (LOCATION_GROUP scope) is recorded on 'power plugin', a METRIC location: not read" in w
               for w in summary.warnings)



def test_absolute_metric_is_a_level_not_a_count(variants):
    """Power in W (ABSOLUTE_POINT) cannot be summed over bursts: it is left out, with a warning naming it. Before
    the fix, any archive with an absolute metric was refused (the warning's formatting raised)."""
    _, _, summary = Otf2Trace(variants["metrics"].anchor).read_tables()
    assert set(summary.counters) == {"PAPI_TOT_INS", "TSC", "energy", "ru_utime", "PAPI_L3_TCM"}
    assert any("metric power (W) is an absolute value (ABSOLUTE_POINT)" in w for w in summary.warnings)
    # a per-process counter recorded by the master: kept as that thread's counter, and said so
    assert any("metric PAPI_L3_TCM counts a whole LOCATION_GROUP; it is read as a counter of the thread that "
               "records it ('Master thread')" in w for w in summary.warnings)


@pytest.mark.parametrize("name", ["metrics", "mpi", "hybrid", "measurement"])
def test_chunking_changes_nothing(variants, name):
    ref = Otf2Trace(variants[name].anchor).read_tables("r")
    for chunk in (1, 3, 7):
        got = Otf2Trace(variants[name].anchor, chunk_events=chunk).read_tables("r")
        assert got[0].rows() == ref[0].select(got[0].columns).rows()
        assert got[1].rows() == ref[1].rows() and got[2].messages.rows() == ref[2].messages.rows()


# ---------------------------------------------------------------------------------------------- against Pipit
def _pipit_events(anchor: Path):
    pipit = pytest.importorskip("pipit")
    with warnings.catch_warnings():  # Pipit leaves its process pool to the garbage collector
        warnings.simplefilter("ignore", ResourceWarning)
        events = pipit.Trace.from_otf2(str(anchor.parent), num_processes=1).events
        gc.collect()
    return events


def _pipit_mpi_calls(events) -> list[tuple[int, str, int, int]]:
    """Outermost MPI regions per Pipit process: (task, name, start ns, end ns)."""
    out, depth, open_ = [], {}, {}
    for row in events.itertuples(index=False):
        kind, name, proc = row[1], str(row[2]), int(row[4])
        if not name.startswith("MPI_") or kind not in ("Enter", "Leave"):
            continue
        d = depth.get(proc, 0)
        if kind == "Enter":
            if d == 0:
                open_[proc] = (name, row[0])
            depth[proc] = d + 1
        else:
            depth[proc] = d - 1
            if d == 1:
                out.append((proc + 1, open_[proc][0], int(open_[proc][1]), int(row[0])))
    return sorted(out)


# Pipit 0.1 reads only the first metric class of an archive: on "metrics" (three classes) it fails (KeyError); it
# keeps calling-context events as instants, so with unwinding it finds no region at all
@pytest.mark.parametrize("name", [n for n in VARIANTS if n not in ("metrics", "unwinding")])
def test_mpi_calls_times_and_messages_agree_with_pipit(variants, name):
    """Pipit's process is the location group (the rank here, as Score-P defines groups in rank order); its times
    are ns from the global offset as floats, ours floor them (equal on these timers)."""
    v = variants[name]
    events = _pipit_events(v.anchor)
    _, calls, summary = Otf2Trace(v.anchor).read_tables()
    assert calls.select("task", "mpi_call", "start_ns", "end_ns").sort(pl.all()).rows() == _pipit_mpi_calls(events)
    sends = events[events["Name"].isin(["MpiSend", "MpiIsend"])]
    theirs = sorted((int(p) + 1, a["msg_length"], a["msg_tag"]) for p, a in zip(sends["Process"], sends["Attributes"]))
    assert summary.messages.filter(pl.col("s_task").is_not_null()).select("s_task", "size", "tag").sort(
        pl.all()).rows() == theirs


@pytest.mark.parametrize("name", ["hybrid", "clock_2_5GHz_tsc"])
def test_counters_agree_with_pipit_readings(variants, name):
    """Pipit keeps the raw PAPI_TOT_INS readings at each Enter/Leave; a master thread's burst counts what the
    reading at its closing Enter adds to the one at its opening Leave (0 before the first)."""
    v = variants[name]
    events = _pipit_events(v.anchor)
    bursts, _, _ = Otf2Trace(v.anchor).read_tables()
    readings = events[events["Event Type"].isin(["Enter", "Leave"]) & (events["Thread"] == 0)]
    for task in bursts["task"].unique():
        mine = bursts.filter((pl.col("task") == task) & (pl.col("thread") == 1) & pl.col("mpi_call").is_not_null())
        r = readings[(readings["Process"] == task - 1) & readings["Name"].str.startswith("MPI_")]
        enter = r[r["Event Type"] == "Enter"]["PAPI_TOT_INS"].tolist()
        leave = r[r["Event Type"] == "Leave"]["PAPI_TOT_INS"].tolist()
        assert mine["PAPI_TOT_INS"].to_list() == [int(e - s) for e, s in zip(enter, [0.0, *leave])][: mine.height]


# ------------------------------------------------------------------------------------------ lost and empty locations
def test_location_without_events_or_files_is_an_idle_thread(tmp_path):
    """A location that recorded nothing (its definitions announce 0 events) may have no files at all: it is read
    as a thread without bursts, not refused."""
    a = ov._Archive(tmp_path / "idle", ranks=1, threads=2)
    a.mpi("MPI_Barrier")
    e = a.events(0)
    e.program_begin(0, "idle", [])
    e.enter(10, "MPI_Barrier", ins=70)
    e.leave(20, "MPI_Barrier")
    e.program_end(30, 0)
    anchor = a.close()
    worker = ov.scorep_location_id(0, 1)
    for suffix in (".evt", ".def"):
        (anchor.with_suffix("") / f"{worker}{suffix}").unlink(missing_ok=True)
    bursts, calls, summary = Otf2Trace(anchor).read_tables()
    assert bursts.select("thread", "start_ns", "end_ns", "PAPI_TOT_INS").rows() == [(1, 0, 10, 70), (1, 20, 30, None)]
    assert calls.height == 1 and Otf2Trace(anchor).resources["n_threads"] == 2


def test_lost_event_file_is_refused_or_salvaged(tmp_path, run_cli):
    """A run whose event file of one rank is gone: one line naming the file and what the definitions announce,
    exit 2, nothing stored; ``--salvage`` keeps the other ranks (their messages to it stay as halves)."""
    v = ov.mpi(tmp_path / "p")
    (v.anchor.with_suffix("") / "2.evt").unlink()
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", v.anchor, "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(r"2\.evt: missing events file of location 2 \(rank 2, thread 1\) \(\d+ events announced\)", err)
    assert not (wh / "runs").exists() or not list((wh / "runs").iterdir())
    bursts, calls, summary = Otf2Trace(v.anchor, salvage=True).read_tables()
    assert sorted(set(calls["task"])) == [1, 2, 4] and 3 not in bursts["task"].to_list()
    assert any("read without its events (--salvage)" in w for w in summary.warnings)
    # rank 2's send to rank 0 is gone; rank 0's receive of it stays, without its sender's time
    assert summary.messages.filter(pl.col("r_task") == 1).select("s_time_ns", "size", "tag").rows() == [(None, 32, 4)]
    code, out, err = run_cli("ingest", v.anchor, "-w", wh, "--salvage")
    assert code == 0, err


def test_truncated_event_file_is_refused_or_salvaged(tmp_path):
    """A rank's event file cut short (a killed job): refused with the file, the byte where it ends and the events
    whole of those announced (found before the C library reads it: tests/test_otf2_cut.py), or with ``--salvage``
    its complete events are kept."""
    from synthtrace.tracelib.errors import TruncatedTraceError

    v = ov.mpi(tmp_path / "p")
    f = v.anchor.with_suffix("") / "1.evt"
    f.write_bytes(f.read_bytes()[: f.stat().st_size * 2 // 3])
    with pytest.raises(TruncatedTraceError, match=r"1\.evt: cut short, no end-of-file record \(\d+ bytes\).*; "
                       r"\d+ of the \d+ events the definitions announce are whole"):
        Otf2Trace(v.anchor).read_tables()
    _, calls, summary = Otf2Trace(v.anchor, salvage=True).read_tables()
    kept = calls.filter(pl.col("task") == 2).select("mpi_call", "start_ns", "end_ns").rows()
    assert kept[:3] == [("MPI_Irecv", 100, 110), ("MPI_Irecv", 120, 150), ("MPI_Waitall", 200, 260)]
    assert ("MPI_Finalize", 700, 710) not in kept  # after the cut
    assert any("kept the events before the cut" in w for w in summary.warnings)


def test_ingest_of_a_hybrid_run_keeps_ranks_threads_and_warnings(variants, tmp_path, run_cli):
    """Through the warehouse: 2 tasks x 2 threads (Score-P ids 2^32 apart), the workers' bursts without their
    idle gap, the skipped non-CPU locations in the run's warnings."""
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", variants["hybrid"].anchor, "-w", wh, "--experiment", "hybrid")
    assert code == 0, err
    code, out, _ = run_cli("sql", "SELECT n_tasks, n_threads, warnings FROM runs", "-w", wh, "-f", "json")
    (run,) = json.loads(out)
    assert (run["n_tasks"], run["n_threads"]) == (2, 4)
    assert any("skipped 3 non-CPU locations" in w for w in run["warnings"])
    code, out, _ = run_cli("sql", "SELECT task, thread, count(*) AS n, sum(duration_ns) AS ns, "
                           "sum(PAPI_TOT_INS) AS ins FROM bursts GROUP BY ALL ORDER BY ALL", "-w", wh, "-f", "csv")
    assert out.splitlines()[1:] == ["1,1,5,740,68500", "1,2,2,330,35000", "2,1,5,740,68500", "2,2,2,330,35000"]
