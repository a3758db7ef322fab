"""The POP efficiency model per run and per scaling series, as the POP Centre of Excellence and BSC's modelfactors
define it (frames in, frames out).

Per run, from its computation threads:

- useful time = time in the Running state (the bursts); ``useful_sum/mean/max`` over the threads (ns);
- runtime = the trace's span (ns); ``ideal_runtime`` = the run replayed on an ideal network
  (:mod:`synthtrace.tracelib.domain.replay`);
- load balance = mean / max useful; communication efficiency = max useful / runtime = serialization x transfer,
  serialization = max useful / ideal runtime, transfer = ideal runtime / runtime; parallel efficiency = load
  balance x communication efficiency (= mean useful / runtime);
- instructions and cycles each summed over the useful bursts that carry it (a counter-set campaign's single run
  often records one of them only); IPC = instructions / cycles over the bursts that carry both; frequency (GHz) =
  cycles / the useful time (ns) of the bursts that carry them;
- hybrid MPI+OpenMP runs (more than one thread per rank) add the MPI terms, from each rank's time outside MPI
  (runtime minus the MPI time of its thread that spends most in MPI): MPI load balance = mean / max, MPI
  communication efficiency = max / runtime, MPI parallel efficiency = their product, and the OpenMP (thread)
  parallel efficiency = parallel efficiency / MPI parallel efficiency.

Per scaling series (the runs of one application, the one with the fewest cores, ranks x threads, as reference):
speedup = runtime_ref / runtime, computation scalability = useful_sum_ref / useful_sum, instruction scalability =
instructions_ref / instructions, IPC and frequency scalability = IPC (frequency) / the reference's, global
efficiency = parallel efficiency x computation scalability. Weak scaling multiplies speedup, computation and
instruction scalability by cores / cores_ref (each core's share of the work stays the same).

Efficiencies are fractions (0-1); NULL where an input is missing (no counters: no IPC, frequency, instruction or
IPC scalability; no replay: no serialization or transfer), never a guess.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import polars as pl

from synthtrace.tracelib.domain.counters import resolve
from synthtrace.tracelib.domain.metrics import ratios, safe_div
from synthtrace.tracelib.domain.replay import Network, replay, replay_calls
from synthtrace.tracelib.domain.sums import as_int, exact_sum, float_sum
from synthtrace.tracelib.thread_key import thread_key
from synthtrace.tracelib.errors import BadInputError

Scaling = Literal["strong", "weak"]
THREAD = ["appl", "task", "thread"]

#: per-thread inputs of :func:`pop_metrics` (times in ns as float sums: a thread's overlapping bursts pass int64)
THREAD_USEFUL_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(), "appl": pl.Int32(), "task": pl.Int32(), "thread": pl.Int32(),
    "useful_ns": pl.Float64(), "instructions": pl.Float64(), "instructions_ns": pl.Float64(),
    "cycles": pl.Float64(), "cycles_ns": pl.Float64(), "paired_instructions": pl.Float64(),
    "paired_cycles": pl.Float64(), "counted_ns": pl.Float64(), "mpi_ns": pl.Float64(),
}
#: one row per run (the ``pop_metrics`` view)
POP_METRICS_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(), "run_name": pl.String(), "app": pl.String(), "experiment": pl.String(),
    "n_ranks": pl.Int32(), "n_threads": pl.Int32(), "runtime_ns": pl.Int64(), "ideal_runtime_ns": pl.Int64(),
    "useful_sum_ns": pl.Int64(), "useful_mean_ns": pl.Float64(), "useful_max_ns": pl.Int64(),
    "useful_instructions": pl.Float64(), "useful_cycles": pl.Float64(), "ipc": pl.Float64(),
    "frequency_ghz": pl.Float64(), "load_balance": pl.Float64(), "communication_efficiency": pl.Float64(),
    "serialization_efficiency": pl.Float64(), "transfer_efficiency": pl.Float64(),
    "parallel_efficiency": pl.Float64(), "mpi_load_balance": pl.Float64(),
    "mpi_communication_efficiency": pl.Float64(), "mpi_parallel_efficiency": pl.Float64(),
    "openmp_parallel_efficiency": pl.Float64(), "counter_coverage": pl.Float64(),
}
#: one row per run of a series (the ``pop_scaling`` view)
POP_SCALING_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(), "run_name": pl.String(), "app": pl.String(), "n_ranks": pl.Int32(),
    "n_threads": pl.Int32(), "reference_run_id": pl.String(), "scaling": pl.String(), "speedup": pl.Float64(),
    "computation_scalability": pl.Float64(), "ipc_scalability": pl.Float64(),
    "instruction_scalability": pl.Float64(), "frequency_scalability": pl.Float64(),
    "global_efficiency": pl.Float64(),
}
#: share of useful time whose bursts must carry a counter (instructions, cycles; both for IPC) for the metrics
#: computed from it to be given
MIN_COUNTER_COVERAGE = 0.95


class PopInputError(BadInputError):
    """The frames given to the POP model lack what it needs."""


def thread_useful(bursts: pl.DataFrame | pl.LazyFrame, calls: pl.DataFrame | pl.LazyFrame | None) -> pl.DataFrame:
    """Per computation thread of a run (THREAD_USEFUL_SCHEMA): useful time (sum of its Running bursts, ns);
    instructions and cycles, each summed over the bursts that carry it (NULL without the counter), with those
    bursts' useful time (``instructions_ns``, ``cycles_ns``); the two summed over the bursts that carry both
    (``paired_*``) and those bursts' useful time (``counted_ns``); ``mpi_ns`` (time in MPI calls). Computation
    threads are those of the appls that have bursts (an uncore-reading appl has none)."""
    lf = bursts.lazy()
    names = lf.collect_schema().names()
    missing = [c for c in ("run_id", *THREAD, "duration_ns") if c not in names]
    if missing:
        raise PopInputError(f"bursts lack column(s) {', '.join(missing)}")
    cmap = resolve(names)
    ins, cyc = cmap.expr("ins").cast(pl.Float64), cmap.expr("cyc").cast(pl.Float64)
    both = ins.is_not_null() & cyc.is_not_null()
    dur = pl.col("duration_ns")
    per = lf.group_by("run_id", *THREAD).agg(
        float_sum(dur).alias("useful_ns"),
        ins.sum().alias("instructions"), float_sum(pl.when(ins.is_not_null()).then(dur).otherwise(0))
        .alias("instructions_ns"),
        cyc.sum().alias("cycles"), float_sum(pl.when(cyc.is_not_null()).then(dur).otherwise(0)).alias("cycles_ns"),
        pl.when(both).then(ins).sum().alias("paired_instructions"),
        pl.when(both).then(cyc).sum().alias("paired_cycles"),
        float_sum(pl.when(both).then(dur).otherwise(0)).alias("counted_ns"),
    )
    if calls is not None:
        mpi = calls.lazy().group_by("run_id", *THREAD).agg(float_sum(pl.col("duration_ns")).alias("mpi_ns"))
        appls = per.select("run_id", "appl").unique()
        mpi = mpi.join(appls, on=["run_id", "appl"], how="semi")
        per = per.join(mpi, on=["run_id", *THREAD], how="full", coalesce=True)
    else:
        per = per.with_columns(pl.lit(0.0).alias("mpi_ns"))
    # streamed: a stored run's bursts and calls are never held (sums of whole numbers below 2^53: exact in any
    # order)
    out = per.with_columns(pl.col("useful_ns", "instructions_ns", "cycles_ns", "counted_ns", "mpi_ns")
                           .fill_null(0)).collect(engine="streaming")
    return out.select([pl.col(c).cast(t) for c, t in THREAD_USEFUL_SCHEMA.items()]).sort("run_id", *THREAD)


def pop_metrics(threads: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """The POP table of each run (POP_METRICS_SCHEMA, one row per run).

    ``threads``: :func:`thread_useful` of the runs; ``runs``: run_id, run_name, app, experiment, runtime_ns (the
    trace's span) and ideal_runtime_ns (NULL: not replayed)."""
    need = ["run_id", "run_name", "app", "experiment", "runtime_ns", "ideal_runtime_ns"]
    if missing := [c for c in need if c not in runs.columns]:
        raise PopInputError(f"runs lack column(s) {', '.join(missing)}")
    per_run = threads.group_by("run_id").agg(
        pl.struct("appl", "task").n_unique().cast(pl.Int32).alias("n_ranks"),
        pl.len().alias("_n_units"),
        exact_sum(pl.col("useful_ns")).alias("useful_sum_ns"), float_sum(pl.col("useful_ns")).alias("_useful"),
        pl.col("useful_ns").mean().alias("useful_mean_ns"),
        pl.col("useful_ns").max().alias("_useful_max"),
        pl.col("instructions").sum().alias("_ins"), float_sum(pl.col("instructions_ns")).alias("_ins_ns"),
        pl.col("cycles").sum().alias("_cyc"), float_sum(pl.col("cycles_ns")).alias("_cyc_ns"),
        pl.col("paired_instructions").sum().alias("_pins"), pl.col("paired_cycles").sum().alias("_pcyc"),
        float_sum(pl.col("counted_ns")).alias("_counted"),
    )
    threads_per_rank = threads.group_by("run_id", "appl", "task").agg(pl.len().alias("_k"), pl.col("mpi_ns").max())
    hybrid = threads_per_rank.group_by("run_id").agg(pl.col("_k").max().cast(pl.Int32).alias("n_threads"),
                                                      pl.col("mpi_ns").alias("_rank_mpi"))
    df = (runs.select(need).join(per_run, on="run_id", how="inner").join(hybrid, on="run_id", how="left"))
    # ratios of the float sums (attack 19 F8: a stored total NULL past int64 emptied coverage and instructions)
    def covered(ns: str) -> pl.Expr:  # the counter's bursts hold enough of the useful time
        return safe_div(pl.col(ns), pl.col("_useful")) >= MIN_COUNTER_COVERAGE

    coverage = safe_div(pl.col("_counted"), pl.col("_useful"))  # of the bursts with both
    df = df.with_columns(
        coverage.alias("counter_coverage"),
        pl.when(covered("_ins_ns") & (pl.col("_ins") > 0)).then(pl.col("_ins")).alias("useful_instructions"),
        pl.when(covered("_cyc_ns") & (pl.col("_cyc") > 0)).then(pl.col("_cyc")).alias("useful_cycles"),
        pl.when(covered("_counted") & (pl.col("_pins") > 0) & (pl.col("_pcyc") > 0))
        .then(pl.col("_pins") / pl.col("_pcyc")).alias("ipc"),
        pl.when(covered("_cyc_ns") & (pl.col("_cyc") > 0))
        .then(pl.col("_cyc") / pl.col("_cyc_ns")).alias("frequency_ghz"),
        (pl.col("runtime_ns") - pl.col("_rank_mpi").list.max()).alias("_out_min"),
        (pl.col("runtime_ns") - pl.col("_rank_mpi").list.min()).alias("_out_max"),
        (pl.col("runtime_ns") - pl.col("_rank_mpi").list.mean()).alias("_out_mean"),
        as_int(pl.col("_useful_max")).alias("useful_max_ns"),
    )
    # not clipped, as modelfactors: serialization x transfer = communication efficiency always (a transfer
    # above 1 says the replay waited longer than the run did: blocking sends replayed as rendezvous)
    df = df.with_columns(ratios({
        "load_balance": ("useful_mean_ns", "_useful_max"),
        "communication_efficiency": ("_useful_max", "runtime_ns"),
        "serialization_efficiency": ("_useful_max", "ideal_runtime_ns"),
        "transfer_efficiency": ("ideal_runtime_ns", "runtime_ns"),
        "parallel_efficiency": ("useful_mean_ns", "runtime_ns"),
    }))
    is_hybrid = pl.col("n_threads") > 1
    df = df.with_columns(
        pl.when(is_hybrid).then(safe_div(pl.col("_out_mean"), pl.col("_out_max"))).alias("mpi_load_balance"),
        pl.when(is_hybrid).then(safe_div(pl.col("_out_max"), pl.col("runtime_ns")))
        .alias("mpi_communication_efficiency"),
        pl.when(is_hybrid).then(safe_div(pl.col("_out_mean"), pl.col("runtime_ns"))).alias("mpi_parallel_efficiency"),
    ).with_columns(
        pl.when(is_hybrid).then(safe_div(pl.col("parallel_efficiency"), pl.col("mpi_parallel_efficiency")))
        .alias("openmp_parallel_efficiency"))
    return df.select([pl.col(c).cast(t) for c, t in POP_METRICS_SCHEMA.items()]).sort("app", "n_ranks", "run_name")


def cores() -> pl.Expr:
    """Cores of a run: ranks x threads per rank."""
    return pl.col("n_ranks").cast(pl.Int64) * pl.col("n_threads").fill_null(1).cast(pl.Int64)


def useful_total() -> pl.Expr:
    """A run's useful time over its threads (ns, float) from its POP_METRICS_SCHEMA row, for ratios: the stored
    ``useful_sum_ns``, else (NULL: past int64) the mean x ranks when every rank has one thread; NULL for a hybrid
    run's (its thread count is not stored)."""
    return pl.coalesce(pl.col("useful_sum_ns").cast(pl.Float64), pl.when(pl.col("n_threads").fill_null(1) == 1)
                       .then(pl.col("useful_mean_ns") * pl.col("n_ranks")))


def pop_scaling(metrics: pl.DataFrame, scaling: Scaling = "strong") -> pl.DataFrame:
    """The scalability factors of every run against its application's reference run (the one with the fewest
    cores; ties: first by name). POP_SCALING_SCHEMA, one row per run; an application with one scale gives its
    reference's row only (all factors 1), see :func:`single_scale_apps`."""
    if scaling not in ("strong", "weak"):
        raise PopInputError(f"scaling must be 'strong' or 'weak', not {scaling!r}")
    m = metrics.with_columns(cores().alias("_cores"), useful_total().alias("_useful")).sort(
        "app", "_cores", "run_name", "run_id")
    ref_cols = ["run_id", "_cores", "runtime_ns", "_useful", "ipc", "useful_instructions", "frequency_ghz"]
    ref = m.group_by("app", maintain_order=True).first().select("app", *[pl.col(c).alias(f"_ref_{c}")
                                                                           for c in ref_cols])
    m = m.join(ref, on="app")
    ratio = (pl.col("_cores") / pl.col("_ref__cores")) if scaling == "weak" else pl.lit(1.0)
    out = m.with_columns(
        pl.col("_ref_run_id").alias("reference_run_id"), pl.lit(scaling).alias("scaling"),
        (safe_div(pl.col("_ref_runtime_ns"), pl.col("runtime_ns")) * ratio).alias("speedup"),
        (pl.when((pl.col("run_id") == pl.col("_ref_run_id")) & (pl.col("useful_mean_ns") > 0)).then(1.0)
         .otherwise(safe_div(pl.col("_ref__useful"), pl.col("_useful"))) * ratio).alias("computation_scalability"),
        safe_div(pl.col("ipc"), pl.col("_ref_ipc")).alias("ipc_scalability"),
        (safe_div(pl.col("_ref_useful_instructions"), pl.col("useful_instructions")) * ratio)
        .alias("instruction_scalability"),
        safe_div(pl.col("frequency_ghz"), pl.col("_ref_frequency_ghz")).alias("frequency_scalability"),
    ).with_columns((pl.col("parallel_efficiency") * pl.col("computation_scalability")).alias("global_efficiency"))
    return out.select([pl.col(c).cast(t) for c, t in POP_SCALING_SCHEMA.items()])


def single_scale_apps(metrics: pl.DataFrame) -> list[str]:
    """Applications whose runs are all at one scale: their scalability factors say nothing (they need two)."""
    n = metrics.with_columns(cores().alias("_cores")).group_by("app").agg(pl.col("_cores").n_unique().alias("n"))
    return sorted(n.filter(pl.col("n") < 2)["app"].to_list())


def missing_columns(metrics: pl.DataFrame) -> dict[str, str]:
    """Column -> why it is empty, for the POP columns NULL in every run of ``metrics`` (bad input, said once)."""
    why: dict[str, str] = {}
    if metrics.height == 0:
        return why
    empty = {k: metrics[c].is_null().all() for k, c in (("instructions", "useful_instructions"),
                                                          ("cycles", "useful_cycles"), ("ipc", "ipc"))}
    enough = f"on {MIN_COUNTER_COVERAGE:.0%} of the useful time at least"
    if all(empty.values()) and metrics["counter_coverage"].fill_null(0.0).max() == 0:
        both = "the runs record no instructions (PAPI_TOT_INS) or cycles (PAPI_TOT_CYC)"
        reasons = dict.fromkeys(("instructions", "cycles", "ipc"), both)
    else:  # attack 13 F7: a run with cycles alone lost its frequency too, said as "no instructions or cycles"
        reasons = {"instructions": f"no run records instructions (PAPI_TOT_INS) {enough}",
                   "cycles": f"no run records cycles (PAPI_TOT_CYC) {enough}",
                   "ipc": f"no run records instructions and cycles on the same bursts {enough}"}
    source = {"useful_instructions": "instructions", "useful_cycles": "cycles", "ipc": "ipc",
              "frequency_ghz": "cycles", "ipc_scalability": "ipc", "instruction_scalability": "instructions",
              "frequency_scalability": "cycles"}
    why.update({c: reasons[k] for c, k in source.items() if empty[k]})
    if metrics["ideal_runtime_ns"].is_null().all():
        for c in ("ideal_runtime_ns", "serialization_efficiency", "transfer_efficiency"):
            why[c] = "the runs were not replayed (no MPI calls stored)"
    return why


# ============================================================================ one run, end to end
@dataclass(frozen=True)
class RunPop:
    """What :func:`pop_of_run` derives from one run: its per-thread useful figures (THREAD_USEFUL_SCHEMA), its
    ideal runtime (ns; None without MPI calls to replay) and the replay's dependencies released for want of a
    partner."""

    threads: pl.DataFrame
    ideal_runtime_ns: int | None
    n_released: int
    last_end_ns: int | None = None  # the end of the last burst or MPI call of a computation thread (ns)

    def runtime_ns(self, duration_ns: int) -> int:
        """The run's span (ns): the trace's duration (its header's), or the end of its last burst or MPI call when
        records lie past it (Paraver keeps them; edges21: pop's efficiencies went above 100 %)."""
        return max(int(duration_ns), self.last_end_ns or 0)


def thread_ends(bursts: pl.DataFrame | pl.LazyFrame, calls: pl.DataFrame | pl.LazyFrame | None,
                threads: pl.DataFrame) -> pl.DataFrame:
    """The end of each computation thread's activity (its last burst or MPI call, ns): where its replay ends."""
    parts = [bursts.lazy().select(*THREAD, "end_ns")]
    if calls is not None:
        parts.append(calls.lazy().select(*THREAD, "end_ns"))
    return (pl.concat(parts, how="vertical_relaxed").group_by(THREAD).agg(pl.col("end_ns").max())
            .join(threads.lazy().select(THREAD), on=THREAD, how="semi").collect(engine="streaming"))


def pop_of_run(bursts: pl.DataFrame | pl.LazyFrame, calls: pl.DataFrame | pl.LazyFrame | None,
               messages: pl.DataFrame | None, network: Network | None = None) -> RunPop:
    """Per-thread useful figures of one run and its runtime replayed on ``network`` (default: the ideal one).
    ``bursts`` and ``calls`` may be lazy scans: only the replay's columns of the calls are held
    (:func:`~synthtrace.tracelib.domain.replay.replay_calls`)."""
    threads = thread_useful(bursts, calls)
    if calls is None or calls.lazy().select(pl.len()).collect().item() == 0:
        return RunPop(threads, None, 0, _last_end(thread_ends(bursts, None, threads)))
    keys = threads.select(thread_key().alias("k")).get_column("k")
    mine = replay_calls(calls.lazy().filter(thread_key().is_in(keys.implode())))  # computation threads only
    ends = thread_ends(bursts, mine, threads)
    res = replay(mine, messages, ends, network, replayed_calls=False)
    return RunPop(threads, res.runtime_ns, res.n_released, _last_end(ends))


def _last_end(ends: pl.DataFrame) -> int | None:
    """The latest of the threads' ends (:func:`thread_ends`, ns); None for no thread."""
    last = ends.get_column("end_ns").max()
    return None if last is None else int(last)
