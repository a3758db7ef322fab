"""Ground truth of a simulation as Parquet (layout in :mod:`synthtrace.simulator`'s docstring).

Per-row tables (``bursts``, ``mpi_calls``, ``phases``) are streamed one file per experiment, one row group per
block; the small tables (experiments, kernels, runs, noise, oracle, regressions) are collected and written at the end.
:class:`OracleAccumulator` measures, per counter, how much the same logical burst differs between a run and
the reference run — the error no merge can beat on average.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from synthtrace.simulator.counter_model import COUNTERS
from synthtrace.simulator.written import writing

TRUTH_DIR = "ground_truth"
STREAMED = ("bursts", "mpi_calls", "phases")
SMALL = ("experiments", "kernels", "runs", "noise", "oracle", "regressions")


class TruthStore:
    """Writes the ground-truth tables under ``root`` (``OUT_DIR/ground_truth``)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._writers: dict[tuple[str, str], tuple[pq.ParquetWriter, pa.Schema]] = {}
        self._small: dict[str, list[pl.DataFrame]] = {name: [] for name in SMALL}

    def append(self, table: str, experiment: str, df: pl.DataFrame) -> None:
        """Append rows of a streamed table (``bursts``, ``mpi_calls``, ``phases``) of one experiment."""
        if df.height == 0:
            return
        key = (table, experiment)
        path = self.root / table / f"{experiment}.parquet"
        with writing(path):
            if key not in self._writers:
                path.parent.mkdir(parents=True, exist_ok=True)
                arrow = df.to_arrow()
                strings = [f.name for f in arrow.schema
                           if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
                self._writers[key] = (pq.ParquetWriter(path, arrow.schema, compression="lz4",
                                                       use_dictionary=strings), arrow.schema)
            writer, schema = self._writers[key]
            writer.write_table(df.to_arrow().cast(schema))

    def close_experiment(self, experiment: str) -> None:
        for key in [k for k in self._writers if k[1] == experiment]:
            with writing(self.root / key[0] / f"{experiment}.parquet"):
                self._writers.pop(key)[0].close()

    def add(self, table: str, df: pl.DataFrame) -> None:
        """Collect rows of a small table (written by :meth:`close`)."""
        self._small[table].append(df)

    def close(self, machine: dict | None = None) -> None:
        for experiment in {e for _, e in self._writers}:
            self.close_experiment(experiment)
        for name, frames in self._small.items():
            if frames:
                with writing(self.root / f"{name}.parquet"):
                    pl.concat(frames, how="diagonal_relaxed").write_parquet(self.root / f"{name}.parquet")
        if machine is not None:
            with writing(self.root / "machine.json"):
                (self.root / "machine.json").write_text(json.dumps(machine, indent=2, sort_keys=True) + "\n")


ORACLE_MIN_NS = 10_000  # bursts shorter than this (fine-grain, counts of a few units) are left out of the oracle


class OracleAccumulator:
    """Per (run, counter): mean absolute and RMS relative difference to the reference run's same logical burst,
    over the logical bursts that last at least :data:`ORACLE_MIN_NS` in the reference run."""

    def __init__(self, n_runs: int):
        c = len(COUNTERS)
        self.n = np.zeros((n_runs, c))
        self.abs = np.zeros((n_runs, c))
        self.sq = np.zeros((n_runs, c))
        self.log = np.zeros((n_runs, c))
        self.log2 = np.zeros((n_runs, c))

    def add(self, run: int, ref_ids: np.ndarray, ref: np.ndarray, ref_ns: np.ndarray, ids: np.ndarray,
            x: np.ndarray) -> None:
        """Match a run's bursts (logical ids, counters) with the reference's (ids, counters, durations in ns) and
        accumulate the differences."""
        long = ref_ns >= ORACLE_MIN_NS
        ref_ids, ref = ref_ids[long], ref[long]
        _, i_ref, i_run = np.intersect1d(ref_ids, ids, assume_unique=True, return_indices=True)
        a, b = ref[i_ref].astype(np.float64), x[i_run].astype(np.float64)
        ok = (a > 0) & (b > 0)
        rel = np.where(ok, np.abs(b - a) / np.where(ok, a, 1.0), 0.0)
        lr = np.where(ok, np.log(np.where(ok, b, 1.0) / np.where(ok, a, 1.0)), 0.0)
        self.n[run] += ok.sum(axis=0)
        self.abs[run] += rel.sum(axis=0)
        self.sq[run] += (rel ** 2).sum(axis=0)
        self.log[run] += lr.sum(axis=0)
        self.log2[run] += (lr ** 2).sum(axis=0)

    def frame(self, experiment: str, run_names: list[str], recorded: list[list[str]]) -> pl.DataFrame:
        rows = []
        for r, name in enumerate(run_names[1:], start=1):
            for j, counter in enumerate(COUNTERS):
                n = self.n[r, j]
                mean_log = self.log[r, j] / n if n else None
                rows.append({
                    "experiment": experiment, "counter": counter, "run_name": name, "recorded": counter in recorded[r],
                    "min_duration_ns": ORACLE_MIN_NS,
                    "n_bursts": int(n), "mean_abs_rel_error": self.abs[r, j] / n if n else None,
                    "rms_rel_error": float(np.sqrt(self.sq[r, j] / n)) if n else None,
                    "log_ratio_std": float(np.sqrt(max(self.log2[r, j] / n - mean_log ** 2, 0.0))) if n else None,
                })
        return pl.DataFrame(
            rows,
            schema={
                "experiment": pl.String,
                "counter": pl.String,
                "run_name": pl.String,
                "recorded": pl.Boolean,
                "min_duration_ns": pl.Int64,
                "n_bursts": pl.Int64,
                "mean_abs_rel_error": pl.Float64,
                "rms_rel_error": pl.Float64,
                "log_ratio_std": pl.Float64,
            },
        )
