"""Hand-made bursts, MPI calls and a simple machine for the metrics, archetype and report tests."""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.domain.machine import Machine, machine_from_dict

#: 1 socket x 4 cores at 1 GHz; 8 FLOP/cycle (AVX-512), 1 scalar -> 8 vector lanes; 16 GB/s DRAM per socket
#: -> 4 GB/s per rank with 4 ranks, DRAM ridge 2 FLOP/byte; 10 GB/s network link
TEST_MACHINE: Machine = machine_from_dict({
    "name": "test node", "sockets": 1, "cores_per_socket": 4, "frequency_ghz": 1.0, "line_bytes": 64,
    "peak_flops_per_cycle": {"scalar": 1.0, "avx512": 8.0},
    "bandwidth_gbs": {"dram_per_socket": 16.0, "l2_per_core": 64.0, "l3_per_core": 32.0, "network_per_link": 10.0},
    "network": {"latency_us": 1.0},
})
RPS = 4.0

#: a neutral burst: 1 ms, 1e6 instructions, IPC 1.2, few misses, no FP
BASE = {"duration_ns": 1_000_000, "PAPI_TOT_INS": 1_000_000, "PAPI_TOT_CYC": 833_333, "PAPI_L1_DCM": 1000,
        "PAPI_L2_DCM": 100, "PAPI_L3_TCM": 10, "PAPI_BR_INS": 100_000, "PAPI_BR_MSP": 100, "PAPI_FP_INS": 0,
        "PAPI_VEC_INS": 0, "PAPI_L1_ICM": 100, "PAPI_TLB_IM": 10}

#: archetype -> counter changes from BASE that make exactly that rule fire
CASES: dict[str, dict] = {
    "fine_grain": {"duration_ns": 5_000},
    "compute_vector": {"PAPI_FP_INS": 500_000, "PAPI_VEC_INS": 400_000},
    "compute_scalar": {"PAPI_TOT_CYC": 500_000},
    "core_bound": {"PAPI_TOT_CYC": 2_000_000},
    # memory rules need a stalled core whose misses can account for half its cycles (L3 hits here, DRAM below)
    "cache_bound": {"PAPI_L1_DCM": 30_000, "PAPI_L2_DCM": 20_000, "PAPI_TOT_CYC": 2_000_000},
    "dram_bandwidth": {"PAPI_L3_TCM": 50_000},
    "dram_latency": {"PAPI_L2_DCM": 6_000, "PAPI_L3_TCM": 6_000, "PAPI_TOT_CYC": 2_000_000},
    "frontend_bound": {"PAPI_L1_ICM": 10_000},
    "bad_speculation": {"PAPI_BR_MSP": 10_000},
}


def bursts(rows: list[dict], *, drop: tuple[str, ...] = ()) -> pl.DataFrame:
    """A bursts table: one row per dict (BASE updated by it), one thread per row, counters as Int64 columns."""
    recs = []
    t = 0
    for i, r in enumerate(rows):
        rec = {**BASE, **r}
        recs.append({"run_id": "r0", "appl": 1, "task": 1 + i % 4, "thread": 1, "burst_seq": i // 4,
                     "start_ns": t, "end_ns": t + rec["duration_ns"], "mpi_call": None, "call_site": None, **rec})
        t += rec["duration_ns"] + 1000
    df = pl.DataFrame(recs).with_columns(pl.col("appl", "task", "thread").cast(pl.Int32))
    counters = [c for c in BASE if c != "duration_ns"]
    return df.with_columns(pl.col(c).cast(pl.Int64) for c in counters if c in df.columns).drop(list(drop))


def case_bursts() -> tuple[pl.DataFrame, list[str]]:
    """One burst per burst archetype, and the expected labels."""
    names = list(CASES)
    return bursts([CASES[n] for n in names]), names


def calls(rows: list[dict]) -> pl.DataFrame:
    """An mpi_calls table from dicts (defaults: point-to-point MPI_Send of 0 bytes, 10 µs)."""
    base = {"run_id": "r0", "appl": 1, "task": 1, "thread": 1, "cpu": 1, "mpi_call": "MPI_Send",
            "mpi_kind": "point_to_point", "start_ns": 0, "duration_ns": 10_000, "bytes_sent": 0, "bytes_recv": 0,
            "peer": None, "n_messages": 1, "comm": None, "root": None, "tag": None, "call_site": None}
    recs = [{**base, **r} for r in rows]
    for i, r in enumerate(recs):
        r.setdefault("call_seq", i)
        r["end_ns"] = r["start_ns"] + r["duration_ns"]
    df = pl.DataFrame(recs, schema_overrides={"peer": pl.Int32, "comm": pl.Int64, "root": pl.Int32, "tag": pl.Int64,
                                              "call_site": pl.String, "n_messages": pl.Int32})
    return df.with_columns(pl.col("appl", "task", "thread", "cpu").cast(pl.Int32))


def two_rank_program() -> tuple[pl.DataFrame, pl.DataFrame]:
    """2 ranks, 3 phases closed by MPI_Allreduce on comm 1: imbalanced, serialised, balanced."""
    rows, crow = [], []
    # phase 0: rank 1 computes 10 ms, rank 2 2 ms; allreduce ends at 10.1 ms on both
    # phase 1: pipeline: rank 1 computes 5 ms then sends; rank 2 waits, then computes 5 ms
    # phase 2: both compute 5 ms
    plan = {1: [(0, 10_000_000), (10_100_000, 5_000_000), (20_300_000, 5_000_000)],
            2: [(0, 2_000_000), (15_200_000, 5_000_000), (20_300_000, 5_000_000)]}
    colls = {1: [(10_000_000, 100_000), (20_200_000, 100_000), (25_300_000, 100_000)],
             2: [(2_000_000, 8_100_000), (20_200_000, 100_000), (25_300_000, 100_000)]}
    for task in (1, 2):
        for i, (s, d) in enumerate(plan[task]):
            rows.append({"task": task, "burst_seq": i, "start_ns": s, "end_ns": s + d, "duration_ns": d})
        for i, (s, d) in enumerate(colls[task]):
            crow.append({"task": task, "call_seq": 10 + i, "mpi_call": "MPI_Allreduce", "mpi_kind": "collective",
                         "comm": 1, "start_ns": s, "duration_ns": d, "bytes_sent": 8, "bytes_recv": 8, "n_messages": 0})
    crow.append({"task": 2, "call_seq": 5, "mpi_call": "MPI_Recv", "start_ns": 10_200_000, "duration_ns": 5_000_000,
                 "bytes_recv": 1024})
    crow.append({"task": 1, "call_seq": 5, "mpi_call": "MPI_Send", "start_ns": 15_100_000, "duration_ns": 10_000,
                 "bytes_sent": 1024})
    b = bursts([{k: v for k, v in r.items() if k in ("duration_ns",)} for r in rows])
    b = b.with_columns(pl.Series("task", [r["task"] for r in rows], pl.Int32),
                       pl.Series("burst_seq", [r["burst_seq"] for r in rows], pl.Int64),
                       pl.Series("start_ns", [r["start_ns"] for r in rows], pl.Int64),
                       pl.Series("end_ns", [r["end_ns"] for r in rows], pl.Int64))
    return b, calls(crow)
