"""Benchmark of the POP analysis (issue 25): ``synthtrace pop`` end to end on a 16-rank .prv.gz of ~2.4 MB (the
simulator's halo exchange), and the replay's throughput in MPI calls per second on a synthetic ring exchange of
~1-2 M calls; baselines on the same machine and run: BSC's own pipeline, prv2dim + Dimemas for the replay and
paramedir for the sums (where built: SYNTHTRACE_DIMEMAS, SYNTHTRACE_PARAMEDIR).

    nice -n 10 python -m benchmarks.bench_pop --out benchmarks/results/pop.md
"""
from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from benchmarks.machine import machine_description
from benchmarks.results_io import emit


def _synthtrace(*args: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``synthtrace`` command in its own process (CPU: user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", *args], check=True, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def warm_numba() -> None:
    """Compile (or load) the replay's Numba kernels once, as an installation does on its first run: the timed
    commands then load them from the cache, as every later run does."""
    code = ("from benchmarks.bench_pop import ring_calls; from synthtrace.tracelib.domain.replay import replay; "
            "c, m, e = ring_calls(4, 20); replay(c, m, e)")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def ring_calls(ranks: int, iterations: int, compute_ns: int = 50_000) -> tuple[pl.DataFrame, pl.DataFrame,
                                                                                 pl.DataFrame]:
    """A synthetic ring exchange: per iteration each rank computes, posts an Irecv from its left and an Isend to its
    right, waits for both, and every 10th iteration all reduce. Returns (calls, messages, thread ends)."""
    rng = np.random.default_rng(0)
    per_iter = ["MPI_Irecv", "MPI_Isend", "MPI_Waitall"]
    names, starts, tasks, seqs = [], [], [], []
    work = rng.integers(compute_ns // 2, compute_ns * 2, size=(ranks, iterations))
    t = np.zeros(ranks, np.int64)
    seq = np.zeros(ranks, np.int64)
    rows = []
    for it in range(iterations):  # building the input, not the measured code
        t += work[:, it]
        calls_here = per_iter + (["MPI_Allreduce"] if it % 10 == 9 else [])
        for name in calls_here:
            rows.append((np.arange(1, ranks + 1), np.full(ranks, name), t.copy(), t + 500, seq.copy()))
            t += 1_000
            seq += 1
    tasks = np.concatenate([r[0] for r in rows])
    names = np.concatenate([r[1] for r in rows])
    starts = np.concatenate([r[2] for r in rows])
    ends = np.concatenate([r[3] for r in rows])
    seqs = np.concatenate([r[4] for r in rows])
    calls = pl.DataFrame({"appl": 1, "task": tasks.astype(np.int32), "thread": 1, "call_seq": seqs,
                          "mpi_call": names, "start_ns": starts, "end_ns": ends}).with_columns(
        pl.col("appl").cast(pl.Int32), pl.col("thread").cast(pl.Int32)).sort("task", "call_seq")  # as stored
    isend = calls.filter(pl.col("mpi_call") == "MPI_Isend").sort("task", "call_seq")
    irecv = calls.filter(pl.col("mpi_call") == "MPI_Irecv").sort("task", "call_seq")
    right = (isend["task"] % ranks) + 1
    recv_of = irecv.with_columns(pl.int_range(pl.len()).over("task").alias("k"))
    send_of = isend.with_columns(pl.int_range(pl.len()).over("task").alias("k"), right.alias("r_task"))
    msgs = send_of.join(recv_of.select(pl.col("task").alias("r_task"), "k", pl.col("start_ns").alias("r_time_ns")),
                        on=["r_task", "k"]).select(
        pl.lit(1, pl.Int32).alias("s_appl"), pl.col("task").alias("s_task"), pl.lit(1, pl.Int32).alias("s_thread"),
        (pl.col("start_ns") + 1).alias("s_time_ns"), pl.lit(1, pl.Int32).alias("r_appl"),
        pl.col("r_task").cast(pl.Int32), pl.lit(1, pl.Int32).alias("r_thread"), (pl.col("r_time_ns") + 1),
        pl.lit(8192, pl.Int64).alias("size"))
    thread_ends = calls.group_by("appl", "task", "thread").agg(pl.col("end_ns").max() + 10_000)
    return calls, msgs, thread_ends


def replay_throughput(ranks: int, iterations: int, repeats: int = 3) -> dict:
    from synthtrace.tracelib.domain.replay import Network, replay

    calls, msgs, ends = ring_calls(ranks, iterations)
    replay(calls.head(1000), None, ends)  # the kernel's compilation (or cache load) is not the replay
    best = {}
    for label, net in (("ideal", None), ("1.5 us, 12.5 GB/s", Network.of(1.5, 12.5))):
        times, cpu = [], []
        for _ in range(repeats):
            t, c = time.perf_counter(), time.process_time()
            res = replay(calls, msgs, ends, net)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        best[label] = (min(times), min(cpu), res.runtime_ns, res.n_released)
    return {"calls": calls.height, "messages": msgs.height, "runs": best}


def pop_end_to_end(work: Path, iterations: int) -> dict:
    sim = work / "sim"
    subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", "simulate", str(sim), "--pattern", "halo",
                    "--ranks", "16", "--runs", "1", "--iterations", str(iterations), "--app", "halo"], check=True,
                   capture_output=True)
    prv = next(sim.rglob("*.prv"))
    gz = prv.with_name(prv.name + ".gz")
    with open(prv, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    plain = prv.with_name("plain.prv")
    prv.rename(plain)
    wh = work / "wh"
    out = {"gz_bytes": gz.stat().st_size, "prv_bytes": plain.stat().st_size,
           "ingest_s": _synthtrace("ingest", str(gz), "-w", str(wh))}
    out["pop_first_s"] = _synthtrace("pop", "-w", str(wh))
    out["pop_again_s"] = _synthtrace("pop", "-w", str(wh))
    out["version_s"] = _synthtrace("--version")
    out["calls"] = pl.read_parquet(next(wh.glob("runs/*/mpi_calls.parquet"))).height
    out["ideal_runtime_ns"] = pl.read_parquet(next(wh.glob("experiments/*/pop_metrics.parquet")))[
        "ideal_runtime_ns"].item()
    out["plain"] = plain
    for suffix in (".pcf", ".row"):
        shutil.copyfile(prv.with_suffix(suffix), plain.with_suffix(suffix))
    return out


def bsc_baseline(plain: Path, work: Path) -> dict:
    """prv2dim + Dimemas (ideal network) and paramedir (three histograms) on the uncompressed trace."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from testing.pop_oracles import (
        counter_type,
        dimemas_ideal_runtime,
        find_dimemas,
        find_paramedir,
        paramedir_useful_counter,
    )

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    out: dict = {}
    dim = find_dimemas()
    if dim:
        t, c = time.perf_counter(), cpu()
        out["dimemas_runtime_ns"] = dimemas_ideal_runtime(*dim, plain, 16, work / "dimemas")
        out["dimemas_s"], out["dimemas_cpu"] = time.perf_counter() - t, cpu() - c
    pmd = find_paramedir()
    if pmd:
        from testing.paramedir import paramedir_view

        t, c = time.perf_counter(), cpu()
        paramedir_view(pmd, plain, work / "pmd")
        for name in ("PAPI_TOT_INS", "PAPI_TOT_CYC"):
            code = counter_type(plain.with_suffix(".pcf"), name)
            if code is not None:
                paramedir_useful_counter(pmd, plain, code, work / "pmd")
        out["paramedir_s"], out["paramedir_cpu"] = time.perf_counter() - t, cpu() - c
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=134, help="halo iterations of the 16-rank trace (~2.4 MB gz)")
    ap.add_argument("--ring-ranks", type=int, default=64)
    ap.add_argument("--ring-iterations", type=int, default=8000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    warm_numba()
    with tempfile.TemporaryDirectory(prefix="bench_pop_") as tmp:
        work = Path(tmp)
        e2e = pop_end_to_end(work, args.iterations)
        base = bsc_baseline(e2e["plain"], work)
        ring = replay_throughput(args.ring_ranks, args.ring_iterations)
    load = os.getloadavg()[0]
    lines = ["# POP analysis: `synthtrace pop` and the ideal-network replay (issue 25)", "",
             f"Machine: {machine_description()}; load average at the end {load:.1f} (2 cores shared by other "
             "sessions: wall times are upper bounds).", "",
             "## `synthtrace pop` on a 16-rank trace (simulator, halo exchange)", "",
             f"Trace: {e2e['gz_bytes'] / 1e6:.2f} MB .prv.gz ({e2e['prv_bytes'] / 1e6:.1f} MB uncompressed), "
             f"{e2e['calls']:,} MPI calls.", "",
             "| step (own process) | wall s | CPU s (user + system) |", "|---|---|---|",
             f"| `synthtrace ingest` | {e2e['ingest_s'][0]:.2f} | {e2e['ingest_s'][1]:.2f} |",
             f"| `synthtrace pop` (computes the table: sums, ideal replay, scaling; prints) | "
             f"{e2e['pop_first_s'][0]:.2f} | {e2e['pop_first_s'][1]:.2f} |",
             f"| `synthtrace pop` again (stored: prints) | {e2e['pop_again_s'][0]:.2f} | "
             f"{e2e['pop_again_s'][1]:.2f} |",
             f"| `synthtrace --version` (the interpreter's start, for scale) | {e2e['version_s'][0]:.2f} | "
             f"{e2e['version_s'][1]:.2f} |"]
    if base:
        lines += ["", "Baseline, BSC's pipeline on the same (uncompressed) trace, same run:", "",
                  "| tool | wall s | CPU s | CPU ratio to `synthtrace pop` |", "|---|---|---|---|"]
        first = e2e["pop_first_s"][1]
        for key, label in (("dimemas", "prv2dim + Dimemas, ideal network"),
                           ("paramedir", "paramedir: useful time, instructions, cycles")):
            if f"{key}_s" in base:
                lines.append(f"| {label} | {base[f'{key}_s']:.2f} | {base[f'{key}_cpu']:.2f} | "
                             f"{base[f'{key}_cpu'] / first:.1f}x |")
        if "dimemas_runtime_ns" in base:
            ours, theirs = e2e["ideal_runtime_ns"], base["dimemas_runtime_ns"]
            lines += ["", f"Ideal runtime of this trace: synthtrace {ours / 1e6:.3f} ms, Dimemas "
                      f"{theirs / 1e6:.3f} ms ({(ours - theirs) / theirs:+.2%})."]
    lines += ["", f"## Replay throughput (synthetic ring, {args.ring_ranks} ranks x {args.ring_iterations} "
              f"iterations: {ring['calls']:,} MPI calls, {ring['messages']:,} messages)", "",
              "| network | replay() wall s (best of 3, with its preparation) | MPI calls/s (wall) | CPU s (all "
              "threads) | MPI calls per CPU s | released |",
              "|---|---|---|---|---|---|"]
    for label, (secs, cpu, _, released) in ring["runs"].items():
        lines.append(f"| {label} | {secs:.2f} | {ring['calls'] / secs / 1e6:.2f} M | {cpu:.2f} | "
                     f"{ring['calls'] / cpu / 1e6:.2f} M | {released} |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
