"""Ingest throughput and peak memory (issue 2), against a straightforward line-by-line Python parser.

Inputs are a real trace (LULESH, Extrae + PAPI + uncore) tiled in time to the requested sizes, so the record
mix stays real. Each measurement runs in a fresh subprocess, so its peak RSS and CPU time are its own; the
1-minute load average before and after each one is recorded (the machine is shared).

    python benchmarks/bench_ingest.py [--sizes-mb 500 1000 2000] [--compare-mb 500] [--memory-mb 2000]
                                      [--phases-mb 1000] [--before-rev REV]

The comparison with the line-by-line parser runs on the ``--compare-mb`` trace (issue 2: a trace of at least
500 MB).

``--dense-mb N`` instead compares records-dense traces (``benchmarks/dense_traces.py``: a 64-rank ring, an
OpenMP shape) and the LULESH tiling, each against a plain scan and paramedir (issue 27), written to ``--out``.

``--startup-rounds N --before-rev REV`` compares the start-up of a command that reads a trace (imports, Numba
kernels) with that of REV, N interleaved runs each (issue 27 item 2).

``--before-rev`` also ingests the smallest trace with the code of an earlier commit (exported with
``git archive`` to a temp dir), for a before/after row measured in the same run.

Writes benchmarks/results/ingest.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import machine_description  # noqa: E402

SOURCE = ROOT.parent / "shared" / "traces" / "paraver" / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
SMALL = ROOT.parent / "shared" / "traces" / "paraver" / "prime_v0.prv"

_USAGE = """
import os, resource
def usage(t0):
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/stat") as f:  # the process's start, in clock ticks since boot
        started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as f:
        process = float(f.read().split()[0]) - started
    return {"seconds": time.perf_counter() - t0, "process_seconds": process, "cpu": r.ru_utime + r.ru_stime,
            "peak_rss_mb": r.ru_maxrss / 1024}
"""

# End to end, as `synthtrace ingest` does it: hash, parse, bursts and calls, Parquet commit.
CHILD_INGEST = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.ingest import ingest_trace
""" + _USAGE + """
t0 = time.perf_counter()
res = ingest_trace(Warehouse(sys.argv[2]), sys.argv[1])
print(json.dumps({**usage(t0), "bursts": res.n_bursts, "calls": res.n_mpi_calls}))
"""

# The reader alone: parse, bursts and calls in memory, no hash and no Parquet (what the baseline does too).
CHILD_READ = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
""" + _USAGE + """
t0 = time.perf_counter()
stream = ParaverTrace(sys.argv[1]).read("bench")
n_b = sum(part.frame.height for part in stream if part.table == "bursts")
calls = stream.summary.calls.collect()
print(json.dumps({**usage(t0), "bursts": n_b, "calls": calls.height}))
"""

# Where the time of an ingest goes: the same steps as warehouse/ingest.py, timed one by one.
CHILD_PHASES = (
    """
import json, sys, time, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from synthtrace.tracelib.formats.source import open_trace
from synthtrace.warehouse.ingest import PartWriter, run_identity
"""
    + _USAGE
    + """
out = Path(sys.argv[2]); (out / "bursts").mkdir(parents=True); (out / "uncore").mkdir(); (out / "events").mkdir()
ph = {}
t0 = time.perf_counter()
t = time.perf_counter(); source = open_trace(Path(sys.argv[1])); run_id = run_identity(source)
ph["hash the files (xxh3-128; Numba kernels load meanwhile)"] = time.perf_counter() - t
write, inline = 0.0, PartWriter(background=False)
t = time.perf_counter()
stream = source.read(run_id, spill=out / "_calls")
for i, part in enumerate(stream):
    tw = time.perf_counter()
    inline.write(part.frame, out / part.table / f"part-{i:05d}.parquet", statistics=True)
    write += time.perf_counter() - tw
ph["parse + bursts + calls (read, parsing one chunk ahead in a 2nd thread; calls spilled uncompressed)"] =
time.perf_counter() - t - write
ph["write burst and uncore parts (Parquet, zstd); ingest does it in a 3rd thread"] = write
t = time.perf_counter()
stream.summary.calls.sink_parquet(out / "mpi_calls.parquet", statistics=True)
ph["attach messages to calls and write mpi_calls.parquet (streamed)"] = time.perf_counter() - t
print(json.dumps({**usage(t0), "phases": ph}))
"""
)

# The baseline: what one writes first — read each line, split it, keep Running intervals, sum counter values
# into the burst that ends at their time, pair MPI entries with exits. Pure Python, one pass.
CHILD_BASELINE = """
import json, sys, time
""" + _USAGE + """
t0 = time.perf_counter()
bursts, calls = {}, {}
open_burst, open_call, pending = {}, {}, {}
with open(sys.argv[1]) as fh:
    fh.readline()
    for line in fh:
        if line[0] in "#c":
            continue
        f = line.rstrip("\\n").split(":")
        key = (int(f[2]), int(f[3]), int(f[4]))
        if f[0] == "1":
            if f[7] == "1":
                open_burst[key] = [int(f[5]), int(f[6]), {}]
                bursts.setdefault(key, []).append(open_burst[key])
        elif f[0] == "2":
            t_ev = int(f[5])
            b = open_burst.get(key)
            for i in range(6, len(f), 2):
                typ, val = int(f[i]), int(f[i + 1])
                if 42000000 <= typ < 48000000 and b is not None and b[0] < t_ev <= b[1]:
                    b[2][typ] = b[2].get(typ, 0) + val
                elif 50000001 <= typ <= 50000005:
                    if val:
                        open_call[key] = [typ, val, t_ev]
                    elif key in open_call:
                        c = open_call.pop(key)
                        calls.setdefault(key, []).append((c[1], c[2], t_ev))
print(json.dumps({**usage(t0), "bursts": sum(map(len, bursts.values())), "calls": sum(map(len, calls.values()))}))
"""

# First call of the reader in a process: Numba kernels compiled (empty cache) or loaded from the cache.
CHILD_FIRST_READ = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
t0 = time.perf_counter()
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace, _warm_up
t1 = time.perf_counter()
_warm_up()
t2 = time.perf_counter()
ParaverTrace(sys.argv[1]).read_tables("bench")
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "kernels": t2 - t1, "read": t3 - t2}))
"""

# Start-up of a command that reads a trace (issue 27 item 2): the ingest module's imports, then the reader's Numba
# kernels loaded from the cache by the warm-up thread opening a trace starts.
CHILD_STARTUP = """
import json, time
""" + _USAGE + """
t0 = time.perf_counter()
from synthtrace.warehouse.ingest import ingest_trace  # noqa: F401
from synthtrace.tracelib.formats.paraver import reader
t1 = time.perf_counter()
reader.start_warm_up()
reader._warm_up_thread.join()
print(json.dumps({**usage(t0), "import": t1 - t0, "kernels": time.perf_counter() - t1}))
"""


def _run(code: str, *args: str, env: dict | None = None, root: Path = ROOT) -> dict:
    """Run ``code`` in a fresh interpreter with ``root`` first on the path; its last stdout line is JSON.
    Adds the 1-min load average around it."""
    before = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root), **(env or {})}, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["load"] = (before, os.getloadavg()[0])
    return res


CHILD_WHERE = """
import json
import synthtrace.tracelib.formats.source as source
import synthtrace.warehouse.ingest as ingest
print(json.dumps({"tracelib": source.__file__, "warehouse": ingest.__file__}))
"""


def exported(rev: str, dest: Path) -> Path:
    """The whole tree of commit ``rev`` (``git archive``) in ``dest``, checked to be what a child run with it as its
    root imports (the ``synthtrace/`` folder that maps the layers is part of it: without it the installed code was
    imported), and run once on a small trace so that its Numba kernels are compiled before anything is timed."""
    dest.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    where = _run(CHILD_WHERE, root=dest)
    for layer in ("tracelib", "warehouse"):
        if not Path(where[layer]).resolve().is_relative_to(dest.resolve()):
            raise SystemExit(f"the code of {rev} in {dest} imports {layer} from {where[layer]}, not from its own tree")
    _run(CHILD_INGEST, str(SMALL), str(dest / ".warm-up-warehouse"), root=dest)
    shutil.rmtree(dest / ".warm-up-warehouse", ignore_errors=True)
    return dest


def _best(repeat: int, code: str, trace: Path, out: Path | None = None) -> dict:
    """The fastest of ``repeat`` runs of ``code`` on ``trace`` (each ingest into a fresh folder under ``out``):
    the shared machine only ever adds time, so the minimum is the closest to the code's own cost."""
    runs = []
    for k in range(repeat):
        args = [str(trace)] + ([str(out / f"try-{k}")] if out is not None else [])
        runs.append(_run(code, *args))
        print(f"  {Path(trace).name}: {runs[-1]['seconds']:.2f} s", file=sys.stderr)
        if out is not None:
            shutil.rmtree(out / f"try-{k}", ignore_errors=True)
    return min(runs, key=lambda r: r["seconds"])


def _tiled(tmp: Path, mb: int) -> Path:
    from testing.paraver_tile import tile_trace
    copies = max(1, round(mb * 1e6 / SOURCE.stat().st_size))
    trace = tile_trace(SOURCE, tmp / f"lulesh.x{copies}.prv", copies)
    os.sync()  # the tiled file's write-back must not run during the measurements
    return trace


def _load(r: dict) -> str:
    return f"{r['load'][0]:.1f}-{r['load'][1]:.1f}"


def cpu_comparison(mb: int, repeat: int, out: Path) -> None:
    """CPU seconds (user + system, all threads) of ingest end to end, of the reader alone on the ``.prv`` and on
    the same trace gzip-compressed (``.prv.gz``), and of the line-by-line parser, on one tiled trace: on a
    shared machine CPU time stays meaningful when wall time does not."""
    import gzip
    with tempfile.TemporaryDirectory(prefix="bench-ingest-cpu-") as tmp:
        tmp = Path(tmp)
        trace = _tiled(tmp, mb)
        gz = trace.with_name(trace.name + ".gz")
        with open(trace, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        size = trace.stat().st_size / 1e6

        def best_cpu(code: str, path: Path, wh: bool) -> dict:
            runs = [_run(code, str(path), *([str(tmp / f"wh-{k}")] if wh else [])) for k in range(repeat)]
            for k in range(repeat):
                shutil.rmtree(tmp / f"wh-{k}", ignore_errors=True)
            return min(runs, key=lambda r: r["cpu"])

        rows = [("synthtrace end to end (.prv)", best_cpu(CHILD_INGEST, trace, True)),
                ("synthtrace reader only (.prv)", best_cpu(CHILD_READ, trace, False)),
                ("synthtrace reader only (.prv.gz)", best_cpu(CHILD_READ, gz, False)),
                ("line-by-line Python (.prv)", best_cpu(CHILD_BASELINE, trace, False))]
    base = rows[-1][1]["cpu"]
    lines = [
        f"## Ingest CPU time ({size:.0f} MB trace, {gz.name.split('.')[0]} tiled; gzip {size:.0f} MB -> compressed)",
        "",
        f"Machine: {machine_description()}. Command: `python benchmarks/bench_ingest.py --cpu-mb {mb}`; "
        f"the lowest CPU time of {repeat} runs each, in one run of the script.",
        "",
        "| what | CPU time | wall time | ratio to line-by-line (CPU) | load avg |",
        "|---|---|---|---|---|",
    ]
    for name, r in rows:
        lines.append(f"| {name} | {r['cpu']:.1f} s | {r['seconds']:.1f} s | x{base / r['cpu']:.1f} | "
                     f"{r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def startup_comparison(rounds: int, before_rev: str) -> None:
    """Start-up of this checkout against ``before_rev`` (exported whole with ``git archive``), ``rounds`` times each,
    interleaved (after one unmeasured run each, which fills the Numba cache of the exported copy); prints the
    medians of wall time (imports, kernels) and CPU time."""
    with tempfile.TemporaryDirectory(prefix="bench-ingest-startup-") as tmp:
        old = exported(before_rev, Path(tmp))
        sides = {before_rev: old, "this checkout": ROOT}
        for root in sides.values():
            _run(CHILD_STARTUP, root=root)
        runs: dict[str, list[dict]] = {name: [] for name in sides}
        for _ in range(rounds):
            for name, root in sides.items():
                runs[name].append(_run(CHILD_STARTUP, root=root))
    print(f"| code | imports (wall) | kernels loaded (wall) | CPU | load | ({rounds} interleaved runs, medians)")
    for name, rs in runs.items():
        med = {k: _median([r[k] for r in rs]) for k in ("import", "kernels", "cpu")}
        load = f"{min(min(r['load']) for r in rs):.0f}-{max(max(r['load']) for r in rs):.0f}"
        print(f"| {name} | {med['import']:.2f} s | {med['kernels']:.2f} s | {med['cpu']:.2f} s | {load} |")


def _paramedir_seconds(trace: Path, tmp: Path) -> dict | None:
    """Wall and CPU time of paramedir computing per-thread Running statistics of ``trace`` (its loader reads the
    whole trace), when it is built (``$SYNTHTRACE_PARAMEDIR`` or on PATH); None otherwise."""
    from testing.paramedir import find_paramedir, paramedir_view
    exe = find_paramedir()
    if exe is None:
        return None
    before = os.getloadavg()[0]
    r0 = os.times()
    t0 = time.perf_counter()
    paramedir_view(exe, trace, tmp)
    r1 = os.times()
    return {"seconds": time.perf_counter() - t0, "cpu": (r1.children_user - r0.children_user)
            + (r1.children_system - r0.children_system), "load": (before, os.getloadavg()[0])}


DENSE_SHAPES = {
    "ring": "ring (64 ranks, short bursts, 3 MPI calls per burst, a message each)",
    "openmp": "openmp (4 ranks x 16 threads, OpenMP events)",
    "collective": "collective (256 ranks on 4 nodes, a burst and an MPI_Allreduce)",
    "lulesh": "LULESH tiled (real; events-dense, uncore readers)",
}


def _commit() -> str:
    """The short commit of this checkout, ``+`` when its tracked files differ from it; "not a git checkout" for a
    copy outside git (e.g. a ``git archive`` export: its commit is for the reader of the table to say)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        return "not a git checkout"
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0
    return head.stdout.strip() + ("+" if dirty else "")


def _median(values: list[float]) -> float:
    return statistics.median(values)


def dense_comparison(mb: int, repeat: int, shapes: list[str], paramedir_rounds: int, out: Path) -> None:
    """Records-dense shapes (issue 27) and the events-dense LULESH tiling: ingest end to end, a plain Python line
    scan and paramedir (when built) on each, interleaved round by round (``repeat`` rounds; paramedir in the first
    ``paramedir_rounds``, it is slow), medians kept; each round's ratio is taken within the round, so a load change
    between rounds moves both sides. Rows accumulate in ``out`` with a ``.json`` beside it, one per shape, so that
    shapes can be measured in separate short runs."""
    from benchmarks.dense_traces import write_dense
    store = out.with_suffix(".json")
    rows = json.loads(store.read_text()) if store.is_file() else {}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-dense-") as tmp:
        tmp = Path(tmp)
        _run(CHILD_INGEST, str(SMALL), str(tmp / "wh"))  # unmeasured: compiles the kernels if this checkout's code
        shutil.rmtree(tmp / "wh", ignore_errors=True)  # has no Numba cache yet
        for shape in shapes:
            trace = _tiled(tmp, mb) if shape == "lulesh" else write_dense(shape, tmp / f"{shape}.prv", mb)
            os.sync()
            size = trace.stat().st_size / 1e6
            rounds = []
            for k in range(repeat):
                ours = _run(CHILD_INGEST, str(trace), str(tmp / "wh"))
                shutil.rmtree(tmp / "wh", ignore_errors=True)
                ours["startup_cpu"] = _run(CHILD_INGEST, str(SMALL), str(tmp / "wh"))["cpu"]  # the same steps on a
                shutil.rmtree(tmp / "wh", ignore_errors=True)  # 0.3 MB trace: imports, kernels, a commit
                scan = _run(CHILD_BASELINE, str(trace))
                para = _paramedir_seconds(trace, tmp / "paramedir") if k < paramedir_rounds else None
                rounds.append({"ours": ours, "scan": scan, "para": para})
                print(f"  {shape} round {k + 1}: ingest {ours['seconds']:.1f} s, scan {scan['seconds']:.1f} s, "
                      f"paramedir {para['seconds'] if para else float('nan'):.1f} s, load {_load(ours)}",
                      file=sys.stderr)
            trace.unlink()
            ours_s = _median([r["ours"]["seconds"] for r in rounds])
            para_s = [r["para"]["seconds"] for r in rounds if r["para"]]
            rows[shape] = {
                "size_mb": size, "rounds": repeat, "paramedir_rounds": len(para_s),
                "bytes_per_record": size * 1e6 / max(rounds[0]["ours"]["bursts"] + rounds[0]["ours"]["calls"], 1),
                "ingest_s": ours_s, "ingest_cpu_s": _median([r["ours"]["cpu"] for r in rounds]),
                "process_s": _median([r["ours"]["process_seconds"] for r in rounds]),
                "startup_cpu_s": _median([r["ours"]["startup_cpu"] for r in rounds]),
                "peak_rss_mb": max(r["ours"]["peak_rss_mb"] for r in rounds),
                "scan_s": _median([r["scan"]["seconds"] for r in rounds]),
                "scan_cpu_s": _median([r["scan"]["cpu"] for r in rounds]),
                "scan_ratio": _median([r["scan"]["seconds"] / r["ours"]["seconds"] for r in rounds]),
                "scan_cpu_ratio": _median([r["scan"]["cpu"] / r["ours"]["cpu"] for r in rounds]),
                "paramedir_s": _median(para_s) if para_s else None,
                "paramedir_ratio": _median([r["para"]["seconds"] / r["ours"]["seconds"] for r in rounds
                                            if r["para"]]) if para_s else None,
                "paramedir_cpu_ratio": _median([r["para"]["cpu"] / r["ours"]["cpu"] for r in rounds
                                                if r["para"]]) if para_s else None,
                "commit": _commit(),
                "command": _command(),
                "load": [min(min(r[k]["load"]) for r in rounds for k in ("ours", "scan")),
                         max(max(r[k]["load"]) for r in rounds for k in ("ours", "scan"))],
                "machine": machine_description(),
            }
            store.write_text(json.dumps(rows, indent=1))
    _write_dense_table(rows, out)


def _write_dense_table(rows: dict, out: Path) -> None:
    """The issue-27 table of every shape measured so far (``rows``: :func:`dense_comparison`'s store)."""
    commands = list(dict.fromkeys(r.get("command", "python benchmarks/bench_ingest.py --dense-mb MB ...")
                                  for r in rows.values()))
    lines = [
        "## Ingest of records-dense traces (issue 27)", "",
        f"Machine: {next(iter(rows.values()))['machine']}, shared with other sessions: the 1-minute load average "
        "over each shape's rounds is in the table (2 cores; at load L a process gets about 2/L of a core, and "
        "wall times grow while ratios within a round hold better).",
        f"Command{'s' if len(commands) > 1 else ''}: {', '.join(f'`{c}`' for c in commands)}. Traces from "
        "`benchmarks/dense_traces.py` (Extrae's layout) and the real LULESH trace tiled in time. Each round runs, "
        "each in a fresh process: `ingest_trace` end to end (hash, parse, bursts, calls, messages, Parquet commit "
        "into a fresh warehouse), the plain line-by-line Python scan above, then paramedir computing per-thread "
        "Running statistics (it loads the whole trace). Times are medians over the rounds; a ratio is the median of "
        "the rounds' own ratios (paramedir's: within its rounds). \"start-up CPU\" is the CPU of the same ingest of a "
        "0.3 MB trace (prime_v0) in each round: imports, Numba kernels loaded, a commit; \"work CPU\" is ingest CPU "
        "less it, per 100 MB. \"ingest wall\" is timed from after the ingest module's imports (as in earlier tables); "
        "\"whole process\" from the interpreter's start to the run committed (imports included), 10-15 ms of "
        "clock-tick resolution.", "",
        "| trace | size | bytes per burst+call | ingest wall (median) | MB/s (wall) | whole process (MB/s) | "
        "ingest CPU | MB per CPU-s | start-up CPU | work CPU per 100 MB | peak RSS | plain scan wall | ratio (wall) | "
        "ratio (CPU) | paramedir wall | ratio (wall) | ratio (CPU) | load | code |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape, r in rows.items():
        p = (f"{r['paramedir_s']:.1f} s ({r['paramedir_rounds']} runs) | x{r['paramedir_ratio']:.1f} | "
             f"x{r['paramedir_cpu_ratio']:.1f}" if r.get("paramedir_cpu_ratio") else
             f"{r['paramedir_s']:.1f} s ({r['paramedir_rounds']} runs) | x{r['paramedir_ratio']:.1f} | -"
             if r["paramedir_s"] else "not run | - | -")
        lines.append(
            f"| {DENSE_SHAPES[shape]} | {r['size_mb']:.0f} MB | {r['bytes_per_record']:.0f} | {r['ingest_s']:.2f} s "
            f"| {r['size_mb'] / r['ingest_s']:.0f} | {_process(r)} | {r['ingest_cpu_s']:.2f} s | "
            f"{r['size_mb'] / r['ingest_cpu_s']:.0f} | {_startup(r)} | {r['peak_rss_mb']:.0f} MB | "
            f"{r['scan_s']:.1f} s | "
            f"x{r['scan_ratio']:.1f} | x{r['scan_cpu_ratio']:.1f} | "
            f"{p} | {r['load'][0]:.0f}-{r['load'][1]:.0f} | {r.get('commit', '?')} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _command() -> str:
    """This run's command line as measured: the paramedir it used, nice, and the arguments."""
    exe = os.environ.get("SYNTHTRACE_PARAMEDIR")
    nice = os.nice(0)
    return " ".join([*([f"SYNTHTRACE_PARAMEDIR={exe}"] if exe else []), *([f"nice -n {nice}"] if nice else []),
                     "python", "benchmarks/bench_ingest.py", *sys.argv[1:]])


def _process(r: dict) -> str:
    """The whole-process cell of a row of :func:`dense_comparison` (rows stored before it existed: -)."""
    return f"{r['process_s']:.2f} s ({r['size_mb'] / r['process_s']:.0f})" if r.get("process_s") else "-"


def _startup(r: dict) -> str:
    """The start-up and work CPU cells of a row of :func:`dense_comparison` (rows stored before they existed: -)."""
    if r.get("startup_cpu_s") is None:
        return "- | -"
    work = (r["ingest_cpu_s"] - r["startup_cpu_s"]) * 100 / r["size_mb"]
    return f"{r['startup_cpu_s']:.2f} s | {work:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument(
        "--compare-mb",
        type=int,
        default=500,
        help="size of the trace compared with the line-by-line parser (one of --sizes-mb)",
    )
    ap.add_argument(
        "--also-compare-mb",
        type=int,
        nargs="*",
        default=[1000],
        help="further sizes (of --sizes-mb) where the line-by-line parser runs too",
    )
    ap.add_argument("--memory-mb", type=int, default=2000, help="size of the trace for the peak-memory run (0: skip)")
    ap.add_argument(
        "--phases-mb", type=int, default=1000, help="size of the trace for the per-phase breakdown (0: skip)"
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per measurement; the fastest is reported (all parsers alike)"
    )
    ap.add_argument("--before-rev", help="also ingest the smallest trace with the code of this commit")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ingest.md")
    ap.add_argument("--cpu-mb", type=int, default=0, help="only compare CPU times on a trace of this size "
                                                            "(.prv, .prv.gz, line-by-line), written to --out")
    ap.add_argument("--dense-mb", type=int, default=0, help="only compare records-dense traces of this size with "
                                                              "a plain scan and paramedir, written to --out")
    ap.add_argument("--shapes", nargs="+", choices=sorted(DENSE_SHAPES), default=list(DENSE_SHAPES),
                    help="with --dense-mb: the trace shapes to measure")
    ap.add_argument("--paramedir-rounds", type=int, default=1, help="with --dense-mb: rounds that run paramedir too")
    ap.add_argument("--startup-rounds", type=int, default=0, help="only compare the start-up (imports, Numba "
                    "kernels) of this checkout with --before-rev, this many interleaved runs each")
    args = ap.parse_args()
    if args.startup_rounds:
        startup_comparison(args.startup_rounds, args.before_rev or "HEAD")
        return
    if args.dense_mb:
        dense_comparison(args.dense_mb, args.repeat, args.shapes, args.paramedir_rounds, args.out)
        return
    if args.cpu_mb:
        cpu_comparison(args.cpu_mb, args.repeat, args.out)
        return
    rows, memory, phases, before = [], None, None, None
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        tmp = Path(tmp)
        cold = _run(CHILD_FIRST_READ, str(SMALL), env={"NUMBA_CACHE_DIR": str(tmp / "numba-cache")})
        warm = _run(CHILD_FIRST_READ, str(SMALL), env={"NUMBA_CACHE_DIR": str(tmp / "numba-cache")})
        print(f"first read: kernels compiled {cold['kernels']:.1f} s, loaded from the cache {warm['kernels']:.2f} s")
        if args.compare_mb not in args.sizes_mb:
            ap.error("--compare-mb must be one of --sizes-mb")
        sizes = sorted(
            set(args.sizes_mb)
            | ({args.memory_mb} if args.memory_mb else set())
            | ({args.phases_mb} if args.phases_mb else set())
        )
        base, more = None, []
        for size in sizes:
            trace = _tiled(tmp, size)
            mb = trace.stat().st_size / 1e6
            if size in args.sizes_mb or size == args.memory_mb:
                r = _best(args.repeat, CHILD_INGEST, trace, tmp / f"wh-{size}")
                print(f"{mb:.0f} MB: {r['seconds']:.1f} s, {mb / r['seconds']:.1f} MB/s, cpu {r['cpu']:.1f} s, "
                      f"peak RSS {r['peak_rss_mb']:.0f} MB, load {_load(r)}")
                if size == args.memory_mb:
                    memory = (mb, r, _best(args.repeat, CHILD_READ, trace))
                if size in args.sizes_mb:
                    rows.append((mb, r))
            if size == args.compare_mb:
                ours = next(r for m, r in rows if m == mb)
                read = _best(args.repeat, CHILD_READ, trace)
                line = _best(args.repeat, CHILD_BASELINE, trace)
                assert read["bursts"] == line["bursts"] == ours["bursts"], (read, line, ours)
                base = (mb, ours, read, line)
                if args.before_rev:
                    old = exported(args.before_rev, tmp / "before")
                    before = _run(CHILD_INGEST, str(trace), str(tmp / "wh-before"), root=old)
                    print(f"before ({args.before_rev}) {mb:.0f} MB: {mb / before['seconds']:.1f} MB/s")
                print(
                    f"baseline {mb:.0f} MB: line-by-line {mb / line['seconds']:.1f} MB/s, ours end-to-end "
                    f"x{line['seconds'] / ours['seconds']:.1f}, ours reader only "
                    f"x{line['seconds'] / read['seconds']:.1f}"
                )
            if size in args.also_compare_mb and size in args.sizes_mb:
                ours = next(r for m, r in rows if m == mb)
                more.append((mb, ours, _best(args.repeat, CHILD_BASELINE, trace)))
                print(f"baseline {mb:.0f} MB: ours end-to-end x{more[-1][2]['seconds'] / ours['seconds']:.1f}")
            if size == args.phases_mb:
                phases = (mb, _run(CHILD_PHASES, str(trace), str(tmp / f"phases-{size}")))
                print(f"phases {mb:.0f} MB:", {k: round(v, 2) for k, v in phases[1]["phases"].items()})
            trace.unlink()

    lines = [
        "## Ingest (issue 2)", "",
        f"Machine: {machine_description()}, shared with other sessions (the 1-minute load average before-after "
        "each run is in the tables; above 2 the runs compete for the two cores).",
        "Command: `python benchmarks/bench_ingest.py`. Input: the real LULESH trace (Extrae, 8 ranks + 12 uncore "
        "readers) tiled in time. End to end = `ingest_trace`: hash, parse, bursts and MPI calls, Parquet commit into "
        "a fresh warehouse; each run in its own process (Numba kernels loaded from the cache); every time is the "
        f"fastest of {args.repeat} runs, for the line-by-line parser too.", "",
        "| trace size | time | throughput | CPU time (all threads) | peak RSS | bursts | MPI calls | load avg |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {mb:.0f} MB | {r['seconds']:.1f} s | {mb / r['seconds']:.1f} MB/s | {r['cpu']:.1f} s | "
          f"{r['peak_rss_mb']:.0f} MB | {r['bursts']:,} | {r['calls']:,} | {_load(r)} |" for mb, r in rows],
    ]
    if base:
        mb, ours, read, line = base
        lines += [
            "", f"Against a line-by-line pure-Python parser on the same {mb:.0f} MB trace, same run:", "",
            "| parser | time | throughput | ratio | load avg |", "|---|---|---|---|---|",
            f"| synthtrace end to end (hash, parse, bursts, calls, Parquet commit) | {ours['seconds']:.1f} s | "
            f"{mb / ours['seconds']:.1f} MB/s | x{line['seconds'] / ours['seconds']:.1f} | {_load(ours)} |",
            f"| synthtrace reader only (parse, bursts, calls in memory) | {read['seconds']:.1f} s | "
            f"{mb / read['seconds']:.1f} MB/s | x{line['seconds'] / read['seconds']:.1f} | {_load(read)} |",
            f"| line-by-line Python (parse, bursts and calls in dicts, no output) | {line['seconds']:.1f} s | "
            f"{mb / line['seconds']:.1f} MB/s | x1.0 | {_load(line)} |",
        ]
    if before:
        mb, ours, _, line = base
        lines.insert(
            len(lines) - 1,  # above the line-by-line row
            f"| synthtrace before this work (commit {args.before_rev}, Polars CSV reader), end to end | "
            f"{before['seconds']:.1f} s | {mb / before['seconds']:.1f} MB/s | "
            f"x{line['seconds'] / before['seconds']:.1f} | "
            f"{_load(before)} |",
        )
    if more:
        lines += [
            "",
            "The same end-to-end comparison on larger traces (fastest of the same number of runs each):",
            "",
            "| trace size | synthtrace end to end | line-by-line Python | ratio |",
            "|---|---|---|---|",
            *[
                f"| {mb:.0f} MB | {o['seconds']:.1f} s | {ln['seconds']:.1f} s | x{ln['seconds'] / o['seconds']:.1f} |"
                for mb, o, ln in more
            ],
        ]
    if rows:
        sizes = [mb for mb, _ in rows]
        secs = [r["seconds"] for _, r in rows]
        n = len(sizes)
        mx, my = sum(sizes) / n, sum(secs) / n
        slope = sum((x - mx) * (y - my) for x, y in zip(sizes, secs)) / max(sum((x - mx) ** 2 for x in sizes), 1e-9)
        fixed = my - slope * mx
        why = ("fixed part: Numba initialising its type system and loading the cached kernels on the first call, "
               "about 0.3 s, interpreter-side set-up, Parquet footers" if fixed >= 0.1 else
               "the fixed part, about 0.3 s of Numba start-up, is within the noise of the shared machine here")
        lines += ["", f"Time grows linearly with the size: least squares over the sizes above give "
                  f"{fixed:.2f} s + {1000 * slope:.2f} ms per MB ({why})."]
    if phases:
        mb, r = phases
        total = sum(r["phases"].values())
        lines += ["", f"Where the time of an ingest goes ({mb:.0f} MB, the steps of `warehouse/ingest.py` timed one "
                  f"by one; {total:.1f} s in all, {mb / total:.0f} MB/s, load avg {_load(r)}):", "",
                  "| step | time | share |", "|---|---|---|",
                  *[f"| {k} | {v:.2f} s | {100 * v / total:.0f} % |" for k, v in r["phases"].items()]]
    if memory:
        mb, r, read = memory
        lines += ["", f"Peak memory on a {mb:.0f} MB trace: {r['peak_rss_mb']:.0f} MB for the whole ingest "
                  f"({r['seconds']:.1f} s, {mb / r['seconds']:.0f} MB/s, load avg {_load(r)}); the reader alone "
                  f"(parse, bursts, calls) peaks at {read['peak_rss_mb']:.0f} MB ({mb / read['seconds']:.0f} MB/s): "
                  "it holds a few 32 MiB chunks and the per-thread tails, plus, called without a sink as here, every "
                  "uncore sample of the trace (the tiled LULESH trace has 4.2 M per GB; an ingest streams them to "
                  "Parquet parts instead). The ingest's own peak comes from its last step, which keeps the time span "
                  f"and the point-to-point columns of every MPI call ({r['calls']:,} calls, about 60 bytes each) to "
                  "place the messages, then streams the calls into `mpi_calls.parquet`."]
    lines += ["", f"Numba kernels (tokenizer, burst assembly, MPI pairing): compiled on first use in "
              f"{cold['kernels']:.1f} s (empty cache), then loaded from Numba's cache in {warm['kernels']:.2f} s "
              "per process. Opening a trace starts that in a background thread, so it overlaps the hashing of the "
              "trace's files.", ""]
    targets = []
    if rows:
        worst = min(mb / r["seconds"] for mb, r in rows)
        targets.append(
            f"end to end >= 150 MB/s: {'met' if worst >= 150 else 'not met'} (slowest size {worst:.0f} MB/s)"
        )
    if base:
        mb, ours, read, line = base
        e2e, rd = line["seconds"] / ours["seconds"], line["seconds"] / read["seconds"]
        targets.append(f">= 10x the line-by-line parser: end to end x{e2e:.1f} ({'met' if e2e >= 10 else 'not met'}); "
                       f"the reader alone, which does what the line-by-line parser does, x{rd:.1f} "
                       f"({'met' if rd >= 10 else 'not met'})")
    if memory:
        mb, r, read = memory
        targets.append(f"peak memory <= 1.5 GB on a {mb / 1000:.1f} GB trace: "
                       f"{'met' if r['peak_rss_mb'] <= 1536 else 'not met'} ({r['peak_rss_mb']:.0f} MB; the reader "
                       f"alone {read['peak_rss_mb']:.0f} MB, see below)")
    if targets:
        at = next(i for i, ln in enumerate(lines) if ln.startswith("| trace size"))
        lines[at:at] = ["Targets of issue 2:", "", *[f"- {t}" for t in targets], ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
