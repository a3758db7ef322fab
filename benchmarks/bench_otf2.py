"""OTF2 reading speed (issue 8): our reader against a plain loop over the ``otf2`` wheel's events, same trace.

Writes a Score-P-like trace with the ``otf2`` writer in a temporary folder (ranks in a ring: compute kernel,
Isend/Irecv/Waitall, an Allreduce every 10 steps; three PAPI metrics at every Enter/Leave, like
SCOREP_METRIC_PAPI), then times, each in a fresh subprocess (so its peak RSS is its own):

- ``synthtrace``: ``Otf2Trace.read`` over the whole trace, streamed as ingest consumes it (without
  writing Parquet): bursts with their counters, MPI calls with collective sizes, matched messages;
- ``plain loop``: ``for location, event in otf2.reader.open(...).events`` counting events (no analysis at all),
  with the default batch of 100 events and with 100 000;
- ``raw callbacks``: only the ctypes callbacks that feed our reader (no conversion), to split the cost between
  the bindings and our vectorised conversion.

    python benchmarks/bench_otf2.py [--events 5000000] [--ranks 8] [--repeat 1] [--keep DIR]

Writes benchmarks/results/otf2.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.results_io import emit  # noqa: E402

CHILD_OURS = """
import json, resource, sys, time
from synthtrace.tracelib.formats.otf2 import Otf2Trace
t = time.perf_counter()
trace = Otf2Trace(sys.argv[1])
stream = trace.read("bench")
bursts = sum(part.frame.height for part in stream)  # streamed, as ingest consumes it
summary = stream.summary
calls = summary.calls.collect().height  # the calls with their messages attached
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "events": trace.n_events, "bursts": bursts, "calls": calls,
                  "messages": summary.messages.height, "message_bytes": int(summary.messages["size"].sum()),
                  "counters": list(summary.counters), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                  / 1024}))
"""

CHILD_PLAIN = """
import json, resource, sys, time
import otf2
t = time.perf_counter()
n = 0
with otf2.reader.open(sys.argv[1], batch_events=int(sys.argv[2])) as tr:
    for location, event in tr.events:
        n += 1
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "events": n, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss /
1024}))
"""

CHILD_RAW = """
import json, resource, sys, time
import _otf2
from synthtrace.tracelib.formats.otf2 import Otf2Trace
from synthtrace.tracelib.formats.otf2.events import _EventBuffer, _clear
from synthtrace.tracelib.formats.otf2.library import _callback_setter
t = time.perf_counter()
trace = Otf2Trace(sys.argv[1])
import otf2
reader = otf2.reader.Reader(str(trace.path))
h = reader.handle
trace._read_local_definitions(_otf2, h, [], lambda: None)
n = 0
for loc in trace.defs.locations:
    buf = _EventBuffer()
    ptrs = buf.callbacks()
    er = _otf2.Reader_GetEvtReader(h, loc.ref)
    cbs = _otf2.EvtReaderCallbacks_New()
    for name, fp in ptrs.items():
        _callback_setter(name)(cbs, fp)
    _otf2.Reader_RegisterEvtCallbacks(h, er, cbs, None)
    _otf2.EvtReaderCallbacks_Delete(cbs)
    while True:
        k = _otf2.Reader_ReadLocalEvents(h, er, 500000)
        n += k
        _clear(buf)
        if k < 500000:
            break
    _otf2.Reader_CloseEvtReader(h, er)
reader.close()
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "events": n, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss /
1024}))
"""


def write_trace(root: Path, n_events: int, ranks: int) -> tuple[Path, int]:
    """A ring-exchange trace of about ``n_events`` events; returns (anchor, events written)."""
    import otf2
    from otf2.enums import (Base, CollectiveOp, GroupType, LocationGroupType, LocationType, MetricMode,
                            MetricOccurrence, MetricType, Paradigm, RecorderKind, RegionRole, Type)

    per_step = 19.6  # events per rank and step, see the loop below
    steps = int(n_events / ranks / per_step) + 1
    written = 0
    with otf2.writer.open(str(root), timer_resolution=2_400_000_000) as w:
        d = w.definitions
        node = d.system_tree_node("node0")
        groups = [d.location_group(f"MPI Rank {r}", location_group_type=LocationGroupType.PROCESS,
                                   system_tree_parent=node) for r in range(ranks)]
        locs = [d.location("Master thread", type=LocationType.CPU_THREAD, group=g) for g in groups]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locs)
        world = d.comm("MPI_COMM_WORLD", d.group("", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI,
                                                  members=list(range(ranks))))
        reg = {
            name: d.region(name, region_role=role, paradigm=par)
            for name, role, par in (
                ("main", RegionRole.FUNCTION, Paradigm.COMPILER),
                ("kernel", RegionRole.FUNCTION, Paradigm.COMPILER),
                ("MPI_Isend", RegionRole.POINT2POINT, Paradigm.MPI),
                ("MPI_Irecv", RegionRole.POINT2POINT, Paradigm.MPI),
                ("MPI_Waitall", RegionRole.POINT2POINT, Paradigm.MPI),
                ("MPI_Allreduce", RegionRole.COLL_ALL2ALL, Paradigm.MPI),
            )
        }
        papi = d.metric_class(
            [
                d.metric_member(n, "", MetricType.PAPI, MetricMode.ACCUMULATED_START, Type.UINT64, Base.DECIMAL, 0, "#")
                for n in ("PAPI_TOT_CYC", "PAPI_L2_TCM", "PAPI_BR_MSP")
            ],
            MetricOccurrence.SYNCHRONOUS_STRICT,
            RecorderKind.CPU,
        )
        for r, loc in enumerate(locs):
            ev = w.event_writer_from_location(loc)
            t, cyc, l2, br = 1_000_000, 0, 0, 0
            right, left = (r + 1) % ranks, (r - 1) % ranks

            def mark(kind, region, dt, ev=ev):
                nonlocal t, cyc, l2, br
                t += dt
                cyc += dt
                l2 += dt // 97
                br += dt // 211
                ev.metric(t, papi, [cyc, l2, br])
                getattr(ev, kind)(t, reg[region])

            ev.program_begin(t, "bench", [])
            mark("enter", "main", 100)
            written += 3
            for s in range(steps):
                mark("enter", "kernel", 2400 + 13 * (s % 7))
                mark("leave", "kernel", 24000 + 101 * ((s + r) % 5))
                mark("enter", "MPI_Isend", 300)
                ev.mpi_isend(t + 10, right, world, s % 1000, 8192, s)
                mark("leave", "MPI_Isend", 600)
                mark("enter", "MPI_Irecv", 200)
                ev.mpi_irecv_request(t + 10, 1_000_000 + s)
                mark("leave", "MPI_Irecv", 400)
                mark("enter", "MPI_Waitall", 200)
                ev.mpi_irecv(t + 10, left, world, s % 1000, 8192, 1_000_000 + s)
                mark("leave", "MPI_Waitall", 2000)
                written += 19
                if s % 10 == 9:
                    mark("enter", "MPI_Allreduce", 500)
                    ev.mpi_collective_begin(t + 5)
                    ev.mpi_collective_end(t + 900, CollectiveOp.ALLREDUCE, world, 0xFFFFFFFF, 8, 8)
                    mark("leave", "MPI_Allreduce", 1200)
                    written += 6
            mark("leave", "main", 100)
            ev.program_end(t + 50, 0)
            written += 3
    return root / "traces.otf2", written


def run_child(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import otf2
    import polars
    return (f"{os.cpu_count()} cores (nproc), {model}, {platform.system()} {platform.release()}; Python "
            f"{platform.python_version()}, otf2 {otf2.__version__}, polars {polars.__version__}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=5_000_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per reader (the best is reported)")
    ap.add_argument("--keep", type=Path, help="write the trace here instead of a temporary folder")
    ap.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "otf2.md")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "bench"
        t = time.perf_counter()
        anchor, written = write_trace(root, args.events, args.ranks)
        t_write = time.perf_counter() - t
        size_mb = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20
        print(f"wrote {written} events ({size_mb:.0f} MiB) in {t_write:.1f} s", flush=True)
        readers = (("synthtrace Otf2Trace.read", CHILD_OURS, ()),
                   ("raw ctypes callbacks only (our access path, no conversion)", CHILD_RAW, ()),
                   ("plain loop over otf2 reader events (batch_events=100, default)", CHILD_PLAIN, ("100",)),
                   ("plain loop over otf2 reader events (batch_events=100000)", CHILD_PLAIN, ("100000",)))
        runs: dict[str, list[dict]] = {name: [] for name, _, _ in readers}
        load = []
        for _ in range(args.repeat):  # interleaved, so a busy moment of a shared machine hits every reader
            for name, code, extra in readers:
                load.append(os.getloadavg()[0])
                runs[name].append(run_child(code, str(anchor), *extra))
                r = runs[name][-1]
                print(f"{name}: {r['events'] / r['seconds']:,.0f} events/s ({r['seconds']:.1f} s, "
                      f"peak RSS {r['peak_rss_mb']:.0f} MiB)", flush=True)
        results = {name: min(rs, key=lambda r: r["seconds"]) for name, rs in runs.items()}

    ours = results["synthtrace Otf2Trace.read"]
    plain = results["plain loop over otf2 reader events (batch_events=100, default)"]
    lines = [
        "# OTF2 reading speed (issue 8)",
        "",
        f"Reproduce: `python benchmarks/bench_otf2.py --events {args.events} --ranks {args.ranks}"
        f" --repeat {args.repeat}`",
        "",
        f"Machine: {machine()}.",
        "",
        f"Trace: written by the `otf2` writer, {written:,} events, {args.ranks} ranks, {size_mb:.0f} MiB "
        f"(ring Isend/Irecv/Waitall, Allreduce every 10 steps, 3 PAPI metrics at every Enter/Leave); "
        f"writing took {t_write:.1f} s. Each reader runs in a fresh process; events/s = events in the trace / wall "
        f"time of the whole read (definitions included); best of {args.repeat} interleaved runs (1-min load average "
        f"during the runs {min(load):.1f}-{max(load):.1f}: the machine is shared, so compare the rows of one run).",
        "",
        "| reader | events/s (best) | every run (events/s) | wall (s) | peak RSS (MiB) | vs plain loop |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        rate = r["events"] / r["seconds"]
        every = ", ".join(f"{x['events'] / x['seconds']:,.0f}" for x in runs[name])
        lines.append(f"| {name} | {rate:,.0f} | {every} | {r['seconds']:.1f} | {r['peak_rss_mb']:.0f} | "
                     f"{rate / (plain['events'] / plain['seconds']):.2f}x |")
    ours_name, plain_name = (
        "synthtrace Otf2Trace.read",
        "plain loop over otf2 reader events (batch_events=100, default)",
    )
    ratios = [
        o["events"] / o["seconds"] / (p["events"] / p["seconds"]) for o, p in zip(runs[ours_name], runs[plain_name])
    ]
    lines += [
        "",
        "Ours / plain loop (default batch) in each interleaved round: " + ", ".join(f"{x:.2f}x" for x in ratios) + ".",
        "",
        f"Our reader produced {ours['bursts']:,} bursts with counters {', '.join(ours['counters'])}, "
        f"{ours['calls']:,} MPI calls and {ours['messages']:,} matched messages ({ours['message_bytes']:,} bytes); "
        "the plain loop only counts events. Target (issue 8): >= 150,000 events/s on 2 cores (the issue quotes "
        "Pipit's `from_otf2` at about 73,000 events/s on this class of machine; not measured here).",
        "",
        "Memory: events are read and converted per location in chunks of 200,000 (`chunk_events`), so the tables' "
        "memory is bounded by the chunk; the point-to-point records are kept until every location is read (a "
        "message's halves live on two locations), like the Paraver reader's communication records, so that part "
        "grows with the number of messages (about 60 bytes per record, plus polars' sort/join working memory at "
        "the end).",
        "",
        "Where the time goes: the `otf2` wheel's event iterator builds a Python event object, an attribute list and "
        "a location lookup for every event (plus ctypes argument conversion in a generic wrapper), which is what the "
        "plain loop measures. Our reader registers its own minimal ctypes callbacks directly on the C event reader "
        "(one per event type we need; others are skipped inside the C library), appending plain integers to "
        "`array` columns per location, then converts each chunk with numpy/polars. The `raw ctypes callbacks` row "
        "is that access path alone: the ctypes callback per event is the floor of any pure-Python use of these "
        "bindings; going lower would need a compiled extension or our own `.evt` decoder.",
        "",
    ]
    emit("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
