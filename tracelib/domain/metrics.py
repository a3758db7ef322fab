"""Roofline, Ridgeline and POP metrics of bursts, MPI calls and phases (DESIGN §7).

Every function takes a bursts-like Polars frame — one run's ``bursts`` or an experiment's ``merged_bursts`` —
whose counter columns may or may not be there (and may be NULL on some rows of a merged frame). Counters are
found through :mod:`synthtrace.tracelib.domain.counters`; a metric whose counters are missing is NULL, never a guess.
Estimates
are flagged (``dram_bytes_estimated``, ``flops_estimated``).

Units: times in ns on input, seconds in ``*_s`` columns; rates per second (FLOP/s, bytes/s); MPKI = misses
per 1000 instructions; intensities in FLOP (or instructions) per byte.
"""
from __future__ import annotations

import math

import polars as pl

from synthtrace.tracelib.domain.counter_sanity import without_anomalies
from synthtrace.tracelib.domain.counters import CounterMap, resolve
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.schema import OTHER_STATE, UNTRACED_AFTER
from synthtrace.tracelib.domain.machine import Machine
from synthtrace.tracelib.domain.sums import float_sum

#: identity columns carried from the input into the metric frames when present
BURST_ID_COLUMNS = ("experiment", "run_id", "appl", "task", "thread", "burst_seq", "cpu", "start_ns", "end_ns",
                    "duration_ns", "mpi_call", "call_site", "match_score", "phase")
#: per-burst quality flags a merged (or ingested) bursts table may carry, passed through to the metrics so a
#: metric computed from estimated values, another machine state's values or a burst before an untraced gap says so
BURST_FLAG_COLUMNS = ("estimated", UNTRACED_AFTER, OTHER_STATE)
CALL_ID_COLUMNS = ("experiment", "run_id", "appl", "task", "thread", "call_seq", "mpi_call", "mpi_kind", "start_ns",
                   "end_ns", "duration_ns", "comm", "peer", "root", "call_site", "phase")
#: columns that identify one trace inside a frame holding several (a merged experiment, or runs of one)
SOURCE_KEYS = ("experiment", "run_id")
#: roles whose absence :func:`burst_metrics` records per burst in ``missing_roles``
MISSING_ROLES = ("ins", "cyc", "l1_dcm", "l2_dcm", "l3_tcm", "l1_icm", "itlb_miss", "br_ins", "br_msp", "fp_ins",
                 "vec_ins", "flops", "dram")


class MetricsInputError(BadInputError):
    """A frame given to the metrics lacks the columns they need (times, keys)."""


def _cols(df: pl.DataFrame | pl.LazyFrame) -> list[str]:
    return df.collect_schema().names() if isinstance(df, pl.LazyFrame) else df.columns


def source_keys(df: pl.DataFrame | pl.LazyFrame) -> list[str]:
    """The columns among ``experiment``, ``run_id`` that a frame has (its traces are grouped by them)."""
    names = _cols(df)
    return [c for c in SOURCE_KEYS if c in names]


def _require(df: pl.DataFrame | pl.LazyFrame, needed: list[str], what: str) -> None:
    missing = [c for c in needed if c not in _cols(df)]
    if missing:
        raise MetricsInputError(f"{what}: missing column(s) {', '.join(missing)}")


def safe_div(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    """num / den, NULL where den is 0 or NULL."""
    return pl.when(den > 0).then(num / den)


def ratios(spec: dict[str, tuple[str, str]]) -> list[pl.Expr]:
    """One ``safe_div`` column per entry: ``{name: (numerator column, denominator column)}``."""
    return [safe_div(pl.col(num), pl.col(den)).alias(name) for name, (num, den) in spec.items()]


def ranks_per_socket(bursts: pl.DataFrame | pl.LazyFrame, machine: Machine, n_nodes: int | None = None) -> float:
    """Ranks (task x thread) sharing one socket: all ranks of the trace spread over its nodes' sockets."""
    lf = bursts.lazy()
    if not lf.select(pl.len()).collect().item():
        return float(machine.cores_per_socket)
    keys = [c for c in ("appl", "task", "thread") if c in _cols(lf)]
    n_units = lf.select(pl.struct(*keys).n_unique()).collect().item()
    sockets = max(1, (n_nodes or max(1, math.ceil(n_units / machine.cores_per_node)))) * machine.sockets
    return float(min(machine.cores_per_socket, max(1.0, math.ceil(n_units / sockets))))


# ============================================================================ bursts
def burst_metrics(bursts: pl.DataFrame | pl.LazyFrame, machine: Machine, *, ranks_per_socket: float | None = None,
                  cmap: CounterMap | None = None) -> pl.DataFrame:
    """Per-burst metrics: IPC, MPKI per level, branch, FP/vector shares, FLOP/s, DRAM traffic, roofline position.

    Columns added (NULL where the counters are missing):

    - ``duration_s`` (s), ``instructions``, ``cycles`` (counts), ``ipc``, ``ghz`` (cycles per ns);
    - ``l1_mpki``, ``l2_mpki``, ``l3_mpki``, ``icache_mpki``, ``itlb_mpki``, ``br_mpki`` (per 1000 instructions),
      ``br_misp_rate`` (mispredicted / branches), ``stall_share`` (stalled / total cycles);
    - ``fp_share`` (FP instructions / instructions), ``vec_share`` (vector FP / FP instructions);
    - ``flops`` (FLOP; ``flops_estimated`` when derived from instruction counts x vector lanes), ``flop_rate`` (FLOP/s);
    - ``dram_bytes`` (uncore CAS x line, else LLC misses x line with ``dram_bytes_estimated``), ``dram_bw``
      (bytes/s), ``dram_bw_share`` (fraction of the rank's share of its socket's DRAM bandwidth);
    - ``l2_bytes``/``l3_bytes`` (bytes served by L2 / L3: L1 / L2 misses x line), ``oi_dram``, ``oi_l3``, ``oi_l2``
      (FLOP/byte), ``ins_per_byte`` (instructions per DRAM byte);
    - ``attainable_flop_rate`` (FLOP/s, cache-aware: the lowest roof over the levels measured), ``bound_by``
      (``compute``/``dram``/``l3``/``l2``), ``roof_fraction`` (achieved / attainable) and ``roof_distance``
      (decades below the roof, log10(attainable / achieved));
    - ``missing_roles``: the counter roles (see :mod:`synthtrace.tracelib.domain.counters`) NULL or absent on the burst;
    - the flags of :data:`BURST_FLAG_COLUMNS` the input carries, unchanged (a merged burst's ``estimated``,
      ``other_machine_state``; ``untraced_after``).

    Counter values no PMU can produce (:mod:`synthtrace.tracelib.domain.counter_sanity`) count as missing.
    """
    _require(bursts, ["duration_ns"], "bursts")
    lf = without_anomalies(bursts.lazy())  # impossible counter values are missing values here
    cmap = cmap or resolve(bursts)
    line = float(machine.line_bytes)
    share = machine.dram_share(ranks_per_socket)
    names = _cols(bursts)
    keep = [c for c in BURST_ID_COLUMNS if c in names]
    if "end_ns" not in names and "start_ns" in names:
        lf = lf.with_columns((pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns"))
        keep.insert(keep.index("duration_ns"), "end_ns")
    keep += [c for c in BURST_FLAG_COLUMNS if c in names]

    roles = ["ins", "cyc", "l1_dcm", "l2_dcm", "l3_tcm", "l1_icm", "itlb_miss", "br_ins", "br_msp", "stall_cyc",
             "fp_ins", "vec_ins", "fp_ops", "dram_cas"]
    lf = lf.select(*keep, *[cmap.expr(r).alias(f"_{r}") for r in roles])
    ins = pl.col("_ins")
    per_kins = lambda c: safe_div(pl.col(c) * 1000.0, ins)  # noqa: E731
    # FLOPs: measured ops, else FP instructions with vector ones counted at the machine's lane width
    flops_from_ins = (pl.col("_fp_ins") - pl.col("_vec_ins")).clip(lower_bound=0.0) + pl.col(
        "_vec_ins"
    ) * machine.vector_lanes
    lf = lf.with_columns(
        (pl.col("duration_ns").cast(pl.Float64) * 1e-9).alias("duration_s"),
        ins.alias("instructions"),
        pl.col("_cyc").alias("cycles"),
        safe_div(ins, pl.col("_cyc")).alias("ipc"),
        safe_div(pl.col("_cyc"), pl.col("duration_ns").cast(pl.Float64)).alias("ghz"),
        per_kins("_l1_dcm").alias("l1_mpki"),
        per_kins("_l2_dcm").alias("l2_mpki"),
        per_kins("_l3_tcm").alias("l3_mpki"),
        per_kins("_l1_icm").alias("icache_mpki"),
        per_kins("_itlb_miss").alias("itlb_mpki"),
        per_kins("_br_msp").alias("br_mpki"),
        safe_div(pl.col("_br_msp"), pl.col("_br_ins")).alias("br_misp_rate"),
        safe_div(pl.col("_stall_cyc"), pl.col("_cyc")).alias("stall_share"),
        safe_div(pl.col("_fp_ins"), ins).alias("fp_share"),
        # no FP instruction at all: the burst is integer code, its vector FP share is 0
        pl.when(pl.col("_fp_ins") == 0)
        .then(pl.lit(0.0))
        .otherwise(safe_div(pl.col("_vec_ins"), pl.col("_fp_ins")))
        .alias("vec_share"),
        pl.coalesce(pl.col("_fp_ops"), flops_from_ins).alias("flops"),
        (pl.col("_fp_ops").is_null() & flops_from_ins.is_not_null()).alias("flops_estimated"),
        pl.coalesce(pl.col("_dram_cas") * line, pl.col("_l3_tcm") * line).alias("dram_bytes"),
        (pl.col("_dram_cas").is_null() & pl.col("_l3_tcm").is_not_null()).alias("dram_bytes_estimated"),
        (pl.col("_l1_dcm") * line).alias("l2_bytes"),
        (pl.col("_l2_dcm") * line).alias("l3_bytes"),
    )
    lf = lf.with_columns(ratios({
        "flop_rate": ("flops", "duration_s"), "dram_bw": ("dram_bytes", "duration_s"),
        "oi_dram": ("flops", "dram_bytes"), "oi_l3": ("flops", "l3_bytes"), "oi_l2": ("flops", "l2_bytes"),
        "ins_per_byte": ("instructions", "dram_bytes"),
    })).with_columns((pl.col("dram_bw") / share).alias("dram_bw_share"))

    # cache-aware roof: the lowest of the compute peak and every measured level's bandwidth x intensity
    peak = machine.peak_flops_core()
    roofs = {"compute": pl.when(pl.col("flops").is_not_null()).then(pl.lit(peak)),
             "dram": pl.col("oi_dram") * share}
    for level, col in (("l3", "oi_l3"), ("l2", "oi_l2")):
        bw = machine.cache_bw_core(level)
        if bw is not None:
            roofs[level] = pl.col(col) * bw
    attainable = pl.min_horizontal(*roofs.values())
    bound = pl.lit(None, pl.String)
    for name, expr in reversed(list(roofs.items())):
        bound = pl.when(expr.is_not_null() & (expr <= attainable)).then(pl.lit(name)).otherwise(bound)
    lf = lf.with_columns(attainable.alias("attainable_flop_rate"), bound.alias("bound_by")).with_columns(
        safe_div(pl.col("flop_rate"), pl.col("attainable_flop_rate")).alias("roof_fraction"),
        pl.when(pl.col("flop_rate") > 0)
        .then((pl.col("attainable_flop_rate") / pl.col("flop_rate")).log10())
        .alias("roof_distance"),
    )
    # which counters each burst lacks (roles; ``flops``/``dram`` stand for any way of obtaining them)
    missing = [pl.when(pl.col(f"_{r}").is_null()).then(pl.lit(r)) for r in MISSING_ROLES if r not in ("flops", "dram")]
    missing += [pl.when(pl.col("flops").is_null()).then(pl.lit("flops")),
                pl.when(pl.col("dram_bytes").is_null()).then(pl.lit("dram"))]
    lf = lf.with_columns(pl.concat_list(missing).list.drop_nulls().alias("missing_roles"))
    return lf.drop([f"_{r}" for r in roles]).collect()


def call_bytes() -> pl.Expr:
    """A call's bytes sent + received (float: each fits int64, their sum may not)."""
    return pl.col("bytes_sent").fill_null(0).cast(pl.Float64) + pl.col("bytes_recv").fill_null(0).cast(pl.Float64)


# ============================================================================ phases
def world_collectives(calls: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The collective calls on a world communicator: one whose collectives every task of the appl calls.

    Returns the calls with ``coll_idx`` (1-based order of the world collective on its task). ``calls`` may be a lazy
    scan: only its collectives and its tasks per appl are collected.
    """
    lf = calls.lazy()
    src = source_keys(lf)
    coll = lf.filter(pl.col("mpi_kind") == "collective").with_columns(pl.col("comm").fill_null(-1).alias("_comm"))
    tasks = lf.group_by([*src, "appl"]).agg(pl.col("task").n_unique().alias("_n_tasks"))
    per_comm = coll.group_by([*src, "appl", "_comm"]).agg(pl.col("task").n_unique().alias("_comm_tasks"))
    world = per_comm.join(tasks, on=[*src, "appl"]).filter(pl.col("_comm_tasks") == pl.col("_n_tasks"))
    out = coll.join(world.select(*src, "appl", "_comm"), on=[*src, "appl", "_comm"], how="semi")
    # a task's threads share its collectives; count per task in time order
    return (out.sort([*src, "appl", "task", "end_ns"], maintain_order=True)
            .with_columns(pl.int_range(1, pl.len() + 1).over([*src, "appl", "task"]).alias("coll_idx"))
            .drop("_comm").collect())


def assign_phases(bursts: pl.DataFrame, calls: pl.DataFrame | None, *,
                  world: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Add ``phase`` (0-based, per task: the number of world collectives that ended before) to bursts and calls.

    A world collective belongs to the phase it closes. Without MPI calls everything is phase 0. ``world``: the
    :func:`world_collectives` of the whole trace when ``bursts`` and ``calls`` are one window of it (a phase is
    numbered by every collective before it, in the window or not).
    """
    if world is None and (calls is None or calls.height == 0 or "mpi_kind" not in calls.columns):
        b = bursts.with_columns(pl.lit(0, pl.Int64).alias("phase"))
        return b, (None if calls is None else calls.with_columns(pl.lit(0, pl.Int64).alias("phase")))
    src = source_keys(bursts)
    if calls is not None and source_keys(calls) != src:
        raise MetricsInputError(f"bursts are keyed by {src} but MPI calls by {source_keys(calls)}")
    world = (
        (world if world is not None else world_collectives(calls))
        .select(*src, "appl", "task", pl.col("end_ns").alias("_cend"), "coll_idx").sort("_cend")
    )
    by = [*src, "appl", "task"]

    def tag(df: pl.DataFrame) -> pl.DataFrame:
        j = df.with_row_index("_row").sort("start_ns").join_asof(
            world, left_on="start_ns", right_on="_cend", by=by, strategy="backward", check_sortedness=False)
        return (j.with_columns(pl.col("coll_idx").fill_null(0).cast(pl.Int64).alias("phase"))
                .sort("_row").drop("_row", "_cend", "coll_idx"))

    return tag(bursts), (tag(calls) if calls is not None else None)


#: per phase unit (source, appl, phase, task, thread): what :func:`phase_units` sums (ns, bytes and counts, as float
#: sums: exact in any order below 2^53, so a window's sums add up to the whole trace's; never wrapped past int64),
#: takes the minimum and the maximum of
_UNIT_SUMS = ("useful_ns", "mpi_ns", "network_bytes", "_bytes", "_msgs", "flops", "instructions", "dram_bytes")
_UNIT_MIN, _UNIT_MAX = ("_s", "_cs"), ("_e", "_ce")


def phase_units(bursts: pl.DataFrame, calls: pl.DataFrame | None) -> pl.DataFrame:
    """Per phase unit (source, appl, phase, task, thread) of bursts and calls carrying ``phase``: useful and MPI
    time (ns), first and last instants, work, DRAM and network bytes, transferred bytes and messages. The units of
    several windows of one trace combine into the whole trace's with :func:`combine_phase_units`."""
    src = source_keys(bursts)
    unit = [*src, "appl", "phase", "task", "thread"]
    b_cols = [c for c in ("flops", "instructions", "dram_bytes") if c in bursts.columns]
    b = bursts.group_by(unit).agg(
        float_sum(pl.col("duration_ns")).alias("useful_ns"),
        pl.col("start_ns").min().alias("_s"),
        pl.col("end_ns").max().alias("_e"),
        *[
            float_sum(pl.col(c)).alias(c)
            if c != "flops"
            else pl.when(pl.col(c).is_not_null().any()).then(float_sum(pl.col(c))).alias(c)
            for c in b_cols
        ],
    )
    if calls is not None and calls.height:
        c = calls.with_columns(call_bytes().alias("_bytes"))
        c = c.with_columns(pl.when((pl.col("_bytes") > 0) | (pl.col("mpi_kind") == "collective"))
                           .then(pl.max_horizontal(pl.col("n_messages").fill_null(0), 1)).otherwise(0).alias("_msgs"))
        cagg = c.group_by(unit).agg(
            float_sum(pl.col("duration_ns")).alias("mpi_ns"),
            pl.col("start_ns").min().alias("_cs"), pl.col("end_ns").max().alias("_ce"),
            float_sum(pl.col("bytes_sent").fill_null(0)).alias("network_bytes"),
            float_sum(pl.col("_bytes")), float_sum(pl.col("_msgs")))
        return b.join(cagg, on=unit, how="full", coalesce=True)
    return b.with_columns(pl.lit(None, pl.Float64).alias("mpi_ns"), pl.lit(None, pl.Int64).alias("_cs"),
                          pl.lit(None, pl.Int64).alias("_ce"), pl.lit(None, pl.Float64).alias("network_bytes"),
                          pl.lit(None, pl.Float64).alias("_bytes"), pl.lit(None, pl.Float64).alias("_msgs"))


def combine_phase_units(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The :func:`phase_units` of a whole trace from those of its windows (the same unit in several windows: its
    sums added, NULL where every window's is; its first and last instants)."""
    units = pl.concat(parts, how="diagonal_relaxed")
    unit = [c for c in (*SOURCE_KEYS, "appl", "phase", "task", "thread") if c in units.columns]
    if len(parts) == 1:
        return units
    return units.group_by(unit).agg(
        *[pl.when(pl.col(c).is_not_null().any()).then(float_sum(pl.col(c))).alias(c) for c in _UNIT_SUMS
          if c in units.columns],
        *[pl.col(c).min() for c in _UNIT_MIN], *[pl.col(c).max() for c in _UNIT_MAX])


def phase_metrics(bursts: pl.DataFrame, calls: pl.DataFrame | None, machine: Machine, *,
                  ranks_per_socket: float | None = None) -> pl.DataFrame:
    """POP efficiencies and Ridgeline coordinates per phase (bursts and calls must carry ``phase``): the
    :func:`phase_units_metrics` of their :func:`phase_units`."""
    return phase_units_metrics(phase_units(bursts, calls), machine, ranks_per_socket=ranks_per_socket)


def phase_units_metrics(units: pl.DataFrame, machine: Machine, *, ranks_per_socket: float | None = None
                        ) -> pl.DataFrame:
    """POP efficiencies and Ridgeline coordinates per phase from its units (:func:`phase_units`).

    Per (source, appl, phase): ``n_ranks`` (task x thread units), ``start_ns``/``end_ns``/``elapsed_s``,
    ``useful_max_s``/``useful_mean_s``, ``load_balance`` = mean/max useful time, ``comm_efficiency`` = max useful /
    elapsed, ``transfer_efficiency`` = (elapsed - the largest per-rank transfer time at link bandwidth and latency)
    / elapsed, ``serialization_efficiency`` = comm_efficiency / transfer_efficiency, ``parallel_efficiency`` =
    load_balance x comm_efficiency; work (``flops``, ``instructions``), ``dram_bytes``, ``network_bytes`` (sent),
    ``oi`` (FLOP/DRAM byte), ``ci`` (FLOP/network byte; instructions per byte in ``*_ins`` when no FLOPs),
    ``ridgeline_bound`` (compute/memory/network) and ``attainable_flop_rate`` per rank.
    """
    src = source_keys(units)
    b_cols = [c for c in ("flops", "instructions", "dram_bytes") if c in units.columns]
    link = machine.link_bw()
    lat = machine.network_latency_s
    # the units in one order, whatever the windows: the sums over units below are then the same to the last bit
    u = units.sort([*src, "appl", "phase", "task", "thread"]).with_columns(
        (pl.col("useful_ns").cast(pl.Float64) * 1e-9).alias("useful_s"),
        (pl.col("mpi_ns").cast(pl.Float64) * 1e-9).alias("mpi_s"),
        (pl.col("_bytes") / link + pl.col("_msgs") * lat).alias("transfer_s"))
    u = u.with_columns(pl.min_horizontal("_s", "_cs").alias("_s"), pl.max_horizontal("_e", "_ce").alias("_e"),
                       pl.col("useful_s").fill_null(0.0), pl.col("transfer_s").fill_null(0.0),
                       pl.col("network_bytes").fill_null(0.0), pl.col("mpi_s").fill_null(0.0))
    agg = [pl.len().alias("n_ranks"), pl.col("_s").min().alias("start_ns"), pl.col("_e").max().alias("end_ns"),
           pl.col("useful_s").max().alias("useful_max_s"), pl.col("useful_s").mean().alias("useful_mean_s"),
           pl.col("useful_s").sum().alias("useful_sum_s"), pl.col("mpi_s").sum().alias("mpi_s"),
           pl.col("transfer_s").max().alias("transfer_max_s"), pl.col("network_bytes").sum().alias("network_bytes")]
    agg += [(pl.when(pl.col(c).is_not_null().any()).then(pl.col(c).sum()) if c == "flops" else pl.col(c).sum()).alias(c)
            for c in b_cols]
    p = u.group_by([*src, "appl", "phase"], maintain_order=True).agg(agg).sort([*src, "appl", "phase"])
    for c in ("flops", "instructions", "dram_bytes"):
        if c not in p.columns:
            p = p.with_columns(pl.lit(None, pl.Float64).alias(c))
    elapsed = ((pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64) * 1e-9)
    p = (
        p.with_columns(elapsed.alias("elapsed_s"))
        .with_columns(
            safe_div(pl.col("useful_mean_s"), pl.col("useful_max_s")).alias("load_balance"),
            safe_div(pl.col("useful_max_s"), pl.col("elapsed_s")).clip(upper_bound=1.0).alias("comm_efficiency"),
            safe_div(pl.col("elapsed_s") - pl.col("transfer_max_s"), pl.col("elapsed_s"))
            .clip(0.0, 1.0)
            .alias("transfer_efficiency"),
        )
        .with_columns(
            safe_div(pl.col("comm_efficiency"), pl.col("transfer_efficiency"))
            .clip(upper_bound=1.0)
            .alias("serialization_efficiency"),
            (pl.col("load_balance") * pl.col("comm_efficiency")).alias("parallel_efficiency"),
            safe_div(pl.col("flops"), pl.col("dram_bytes")).alias("oi"),
            safe_div(pl.col("flops"), pl.col("network_bytes")).alias("ci"),
            safe_div(pl.col("instructions"), pl.col("dram_bytes")).alias("oi_ins"),
            safe_div(pl.col("instructions"), pl.col("network_bytes")).alias("ci_ins"),
        )
    )
    # Ridgeline (per rank): attainable = min(peak, OI x DRAM share, CI x link share)
    rps = ranks_per_socket or float(machine.cores_per_socket)
    net_share = machine.link_bw() * machine.links_per_node / (rps * machine.sockets)
    peak, mem = machine.peak_flops_core(), machine.dram_share(ranks_per_socket)
    roofs = {"compute": pl.when(pl.col("flops").is_not_null()).then(pl.lit(peak)), "memory": pl.col("oi") * mem,
             "network": pl.col("ci") * net_share}
    att = pl.min_horizontal(*roofs.values())
    bound = pl.lit(None, pl.String)
    for name, expr in reversed(list(roofs.items())):
        bound = pl.when(expr.is_not_null() & (expr <= att)).then(pl.lit(name)).otherwise(bound)
    return p.with_columns(att.alias("attainable_flop_rate"), bound.alias("ridgeline_bound"),
                          safe_div(pl.col("flops"), pl.col("elapsed_s") * pl.col("n_ranks")).alias("flop_rate"))


# ============================================================================ MPI calls
def mpi_metrics(calls: pl.DataFrame, machine: Machine, bursts: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per MPI call: ``bytes`` (sent + received), ``mean_message_bytes``, ``bandwidth`` (bytes/s), ``link_fraction``
    (of one network link), and the Ridgeline ``comm_intensity``: FLOPs (else ``comm_intensity_ins``: instructions)
    of the computation burst this call closes, per byte communicated.

    ``bursts`` (optional) are burst metrics with ``flops``/``instructions`` and ``end_ns``.
    """
    _require(calls, ["start_ns", "duration_ns", "bytes_sent", "bytes_recv"], "MPI calls")
    keep = [c for c in CALL_ID_COLUMNS if c in calls.columns]
    c = calls.select(*keep, "bytes_sent", "bytes_recv", *([] if "n_messages" not in calls.columns else ["n_messages"]))
    if "n_messages" not in c.columns:
        c = c.with_columns(pl.lit(None, pl.Int32).alias("n_messages"))
    c = c.with_columns(
        call_bytes().alias("bytes"),
        (pl.col("duration_ns").cast(pl.Float64) * 1e-9).alias("duration_s"),
    ).with_columns(
        (pl.col("bytes") / pl.max_horizontal(pl.col("n_messages").fill_null(0), 1)).alias("mean_message_bytes"),
        safe_div(pl.col("bytes"), pl.col("duration_s")).alias("bandwidth"),
    ).with_columns((pl.col("bandwidth") / machine.link_bw()).alias("link_fraction"))
    thread = [k for k in (*source_keys(c), "appl", "task", "thread") if k in c.columns]
    if bursts is not None and bursts.height and "end_ns" in bursts.columns:
        work = [w for w in ("flops", "instructions") if w in bursts.columns]
        prev = bursts.select(*thread, pl.col("end_ns").alias("start_ns"), *[pl.col(w).alias(f"_{w}") for w in work])
        prev = prev.unique(subset=[*thread, "start_ns"], keep="first")
        c = c.join(prev, on=[*thread, "start_ns"], how="left")
        for w in ("flops", "instructions"):
            if f"_{w}" not in c.columns:
                c = c.with_columns(pl.lit(None, pl.Float64).alias(f"_{w}"))
    else:
        c = c.with_columns(pl.lit(None, pl.Float64).alias("_flops"), pl.lit(None, pl.Float64).alias("_instructions"))
    return c.with_columns(
        safe_div(pl.col("_flops"), pl.col("bytes")).alias("comm_intensity"),
        safe_div(pl.col("_instructions"), pl.col("bytes")).alias("comm_intensity_ins"),
    ).drop("_flops", "_instructions")
