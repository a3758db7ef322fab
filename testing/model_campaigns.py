"""Small synthetic campaigns written straight into a warehouse, for the predictor and regression tests/benchmarks.

Until the project's simulator (``simulator``, issue 3) can write nightly histories, these generators
write what ingest would (``runs/<id>/run.parquet``, ``bursts/part-00000.parquet``, ``mpi_calls.parquet``) for SPMD
applications made of a few *kernels*, each closed by one MPI call at its own call site. Everything is
vectorised numpy and seeded.

Counter model of one kernel (per instruction; consistent across counters):

- misses per 1000 instructions at L1 >= L2 >= L3, branches and mispredictions, FP share and vector share,
  i-cache misses; cycles per instruction = a core part (FP/vector mix) + a stall part per miss level, per
  mispredicted branch and per i-cache miss (fixed penalties, L3 misses overlapped by memory-level parallelism);
- noise: instructions 0.2 %, cycles 1.5 % per burst, misses 3 %; duration = cycles / 2.2 GHz, now and then a
  burst (0.5 %) stretched by OS noise (its counts unchanged);
- MPI: each call costs latency + bytes / bandwidth + the wait for the slowest rank (every call synchronises its
  ranks), with 5 % noise.

``regression_campaign`` adds nightly histories: per night the same input, two runs recorded with different
counter sets (``DETECT_PLAN``), night-to-night machine noise, now and then a disturbed night (OS noise or network
contention on every call site, counts unchanged), and for some apps one injected regression of a known kind,
size and night in one kernel. The labels say which (app, call site) series changed when.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.schema import BURST_SCHEMA, MPI_CALL_SCHEMA, RUN_SCHEMA
from synthtrace.warehouse.layout import Warehouse

GHZ = 2.2
VECTOR_LANES = 8
ALL_COUNTERS = ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_L3_TCM", "PAPI_BR_INS",
                "PAPI_BR_MSP", "PAPI_FP_INS", "PAPI_VEC_INS", "PAPI_L1_ICM"]
#: three runs, two programmable counters each (+ the fixed instructions and cycles): the predictor campaigns
PREDICT_PLAN = [["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM", "PAPI_L2_DCM"],
                ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L3_TCM", "PAPI_BR_MSP"],
                ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_FP_INS", "PAPI_VEC_INS"]]
#: two runs per night, four programmable counters each: the nightly histories
DETECT_PLAN = [["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_L3_TCM", "PAPI_BR_MSP"],
               ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_FP_INS", "PAPI_VEC_INS", "PAPI_BR_INS", "PAPI_L1_ICM"]]
CALLS = [("MPI_Allreduce", "collective"), ("MPI_Sendrecv", "point_to_point"), ("MPI_Alltoall", "collective"),
         ("MPI_Waitall", "point_to_point"), ("MPI_Bcast", "collective"), ("MPI_Recv", "point_to_point")]
KINDS = ("more_instructions", "lost_vectorisation", "worse_locality", "more_mpi_bytes", "new_imbalance",
         "network_slowdown")


@dataclass(frozen=True)
class Kernel:
    """One kernel: instructions per burst, per-instruction behaviour, its closing MPI call."""

    name: str
    call_site: str
    mpi_call: str
    mpi_kind: str
    ins: float  # instructions per burst
    fp: float  # FP instructions / instruction
    vec: float  # vector share of FP instructions
    l1: float  # L1 misses per 1000 instructions
    l2: float
    l3: float
    br: float  # branches / instruction
    misp: float  # mispredicted / branches
    icm: float  # i-cache misses per 1000 instructions
    bytes: float  # bytes per MPI call and rank
    imbalance: float = 0.0  # extra work of the last rank (fraction)
    bw_gbs: float = 6.0  # bandwidth of the call (GB/s)

    def cpi(self) -> float:
        """Cycles per instruction of the kernel (no noise)."""
        core = 0.28 + 0.45 * self.fp * (1 - self.vec) + 0.9 * self.fp * self.vec
        stalls = (self.l1 * 5 + self.l2 * 14 + self.l3 * 180 / 3.0 + self.br * self.misp * 1000 * 16
                  + self.icm * 9) / 1000
        return core + stalls


def random_kernel(rng: np.random.Generator, app: str, i: int) -> Kernel:
    """A kernel with random (but physically ordered) behaviour."""
    l1 = float(np.exp(rng.uniform(np.log(0.5), np.log(60))))
    l2 = l1 * float(rng.uniform(0.05, 0.5))
    l3 = l2 * float(rng.uniform(0.02, 0.6))
    call, kind = CALLS[i % len(CALLS)]
    vec = float(rng.uniform(0.6, 0.95)) if rng.random() < 0.4 else float(rng.uniform(0.0, 0.4))
    return Kernel(name=f"k{i}", call_site=f"{app}_k{i} ({app}.c:{100 + 10 * i})", mpi_call=call, mpi_kind=kind,
                  ins=float(10 ** rng.uniform(5.0, 6.8)), fp=float(rng.uniform(0.0, 0.6)), vec=vec,
                  l1=l1, l2=l2, l3=l3, br=float(rng.uniform(0.02, 0.2)),
                  misp=float(np.exp(rng.uniform(np.log(0.002), np.log(0.08)))),
                  icm=float(np.exp(rng.uniform(np.log(0.05), np.log(6)))),
                  bytes=float(10 ** rng.uniform(2, 6.5)))


def random_app(rng: np.random.Generator, name: str, n_kernels: int = 6) -> list[Kernel]:
    return [random_kernel(rng, name, i) for i in range(n_kernels)]


@dataclass(frozen=True)
class NightNoise:
    """Conditions of one night: machine speed, OS-noise stretch of durations, network contention."""

    speed: float = 1.0  # cycles multiplier for every burst
    stretch: float = 1.0  # duration multiplier (OS noise; counts unchanged)
    net: float = 1.0  # MPI time multiplier (contention)


def simulate_run(kernels: list[Kernel], rng: np.random.Generator, *, run_id: str, counters: list[str],
                 n_ranks: int = 4, n_iters: int = 5, noise: NightNoise = NightNoise(),
                 kernel_jitter: float = 0.12, structure_seed: int | None = None
                 ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """One run: (bursts with ``counters``, MPI calls, truth with every counter).

    Each rank runs ``n_iters`` iterations of the kernels in order; each burst's rates vary around its kernel's
    by ``kernel_jitter`` (lognormal), so bursts of one kernel differ (what a per-burst predictor can learn).
    That variation belongs to the program and its input: it is drawn from ``structure_seed`` when given (the
    same in every run of the program), else from ``rng``; measurement noise always comes from ``rng``.
    """
    nk = len(kernels)
    rank = np.repeat(np.arange(1, n_ranks + 1), n_iters * nk)
    it = np.tile(np.repeat(np.arange(n_iters), nk), n_ranks)
    k = np.tile(np.arange(nk), n_ranks * n_iters)
    n = k.size
    attr = {f: np.array([getattr(kk, f) for kk in kernels])[k] for f in
            ("ins", "fp", "vec", "l1", "l2", "l3", "br", "misp", "icm", "bytes", "imbalance", "bw_gbs")}
    srng = rng if structure_seed is None else np.random.default_rng(structure_seed)
    jit = lambda: np.exp(srng.normal(0, kernel_jitter, n))  # noqa: E731
    ins = attr["ins"] * jit() * np.where(rank == n_ranks, 1 + attr["imbalance"], 1.0) * np.exp(rng.normal(0, 0.002, n))
    fp = np.clip(attr["fp"] * jit(), 0, 0.9)
    vec = np.clip(attr["vec"] * jit(), 0, 1)
    l1, l2, l3 = attr["l1"] * jit(), attr["l2"] * jit(), attr["l3"] * jit()
    l2, l3 = np.minimum(l2, l1), np.minimum(l3, l2 * 0.999)
    br, misp, icm = np.clip(attr["br"] * jit(), 0, 0.5), np.clip(attr["misp"] * jit(), 0, 0.5), attr["icm"] * jit()
    cpi = (0.28 + 0.45 * fp * (1 - vec) + 0.9 * fp * vec
           + (l1 * 5 + l2 * 14 + l3 * 60 + br * misp * 1000 * 16 + icm * 9) / 1000)
    cyc = ins * cpi * noise.speed * np.exp(rng.normal(0, 0.015, n))
    dur = cyc / GHZ * noise.stretch
    os_noise = rng.random(n) < 0.005
    dur = np.where(os_noise, dur * rng.uniform(1.5, 4.0, n), dur)
    miss = lambda x: ins * x / 1000 * np.exp(rng.normal(0, 0.03, n))  # noqa: E731
    values = {"PAPI_TOT_INS": ins, "PAPI_TOT_CYC": cyc, "PAPI_L1_DCM": miss(l1), "PAPI_L2_DCM": miss(l2),
              "PAPI_L3_TCM": miss(l3), "PAPI_BR_INS": ins * br * np.exp(rng.normal(0, 0.003, n)),
              "PAPI_BR_MSP": ins * br * misp * np.exp(rng.normal(0, 0.03, n)),
              "PAPI_FP_INS": ins * fp * np.exp(rng.normal(0, 0.003, n)),
              "PAPI_VEC_INS": ins * fp * vec * np.exp(rng.normal(0, 0.003, n)), "PAPI_L1_ICM": miss(icm)}
    # MPI: every call synchronises the ranks of its iteration and kernel: wait for the slowest
    frame = pl.DataFrame({"rank": rank, "it": it, "k": k, "dur": dur})
    slowest = frame.with_columns(pl.col("dur").max().over("it", "k").alias("mx"))["mx"].to_numpy()
    nbytes = attr["bytes"] * np.where(rank == n_ranks, 1.0, 1.0)
    transfer = 5e3 + nbytes / attr["bw_gbs"]  # ns: latency + bytes / (GB/s = bytes/ns)
    call_dur = (transfer * np.exp(rng.normal(0, 0.05, n)) * noise.net + (slowest - dur)).astype(np.int64) + 1
    dur_i = np.maximum(dur.astype(np.int64), 1)
    step = dur_i + call_dur
    order = np.lexsort((k, it, rank))  # per rank: iteration, then kernel
    rank, it, k = rank[order], it[order], k[order]
    dur_i, call_dur, step, nbytes = dur_i[order], call_dur[order], step[order], nbytes[order]
    values = {c: v[order] for c, v in values.items()}
    first = np.r_[0, np.flatnonzero(np.diff(rank)) + 1]
    cum = np.cumsum(step)
    start = cum - step - np.repeat(cum[first] - step[first], np.diff(np.r_[first, n])) + 1000
    seq = np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))
    end = start + dur_i
    site = np.array([kk.call_site for kk in kernels], dtype=object)[k].astype(str)
    call = np.array([kk.mpi_call for kk in kernels], dtype=object)[k].astype(str)
    kind = np.array([kk.mpi_kind for kk in kernels], dtype=object)[k].astype(str)
    keys = {"appl": np.ones(n, np.int32), "task": rank.astype(np.int32), "thread": np.ones(n, np.int32)}
    bursts = pl.DataFrame({"run_id": [run_id] * n, **keys, "burst_seq": seq, "cpu": rank.astype(np.int32),
                           "start_ns": start, "end_ns": end, "duration_ns": dur_i, "mpi_call": call,
                           "call_site": site, **{c: np.round(values[c]).astype(np.int64) for c in counters}})
    bursts = bursts.cast({c: t for c, t in BURST_SCHEMA.items() if c in bursts.columns})
    b = np.round(nbytes).astype(np.int64)
    calls = pl.DataFrame({"run_id": [run_id] * n, **keys, "call_seq": seq, "cpu": rank.astype(np.int32),
                          "mpi_call": call, "mpi_kind": kind, "start_ns": end, "end_ns": end + call_dur,
                          "duration_ns": call_dur, "bytes_sent": b, "bytes_recv": b,
                          "peer": pl.Series([None] * n, dtype=pl.Int32), "n_messages": np.ones(n, np.int32),
                          "comm": np.ones(n, np.int64), "root": pl.Series([None] * n, dtype=pl.Int32),
                          "tag": pl.Series([None] * n, dtype=pl.Int64), "call_site": site})
    calls = calls.cast(MPI_CALL_SCHEMA)
    truth = pl.DataFrame({**keys, "burst_seq": seq, "kernel": k, "duration_ns": dur_i,
                          **{c: np.round(v).astype(np.int64) for c, v in values.items()}})
    return bursts, calls, truth


def write_run(wh: Warehouse, *, run_id: str, run_name: str, experiment: str, app: str, started_at: datetime,
              bursts: pl.DataFrame, calls: pl.DataFrame) -> None:
    """Commit one run as ingest would (run row, bursts part, MPI calls)."""
    wh.ensure()
    counters = sorted(c for c in bursts.columns if c not in BURST_SCHEMA)
    row = {
        "run_id": run_id,
        "run_name": run_name,
        "experiment": experiment,
        "app": app,
        "started_at": started_at.replace(tzinfo=None),
        "format": "paraver",
        "source_path": f"/synthetic/{run_name}.prv",
        "source_bytes": 0,
        "n_appl": 1,
        "n_tasks": int(bursts["task"].max()),
        "n_threads": int(bursts["task"].max()),
        "n_nodes": 1,
        "duration_ns": int(calls["end_ns"].max()),
        "counters": counters,
        "n_bursts": bursts.height,
        "n_mpi_calls": calls.height,
        "warnings": [],
        "ingested_at": datetime(2026, 1, 1, tzinfo=UTC),
    }
    with wh.staged(wh.run_dir(run_id), replace=True) as stage:
        (stage / "bursts").mkdir()
        pl.DataFrame([row], schema=RUN_SCHEMA).write_parquet(stage / "run.parquet")
        bursts.write_parquet(stage / "bursts" / "part-00000.parquet")
        calls.write_parquet(stage / "mpi_calls.parquet")


def write_merged(wh: Warehouse, experiment: str, run_id: str, run_name: str, bursts: pl.DataFrame,
                 truth: pl.DataFrame) -> None:
    """An experiment's merged bursts as a perfect merge would give them (the reference run's bursts, every counter)."""
    base = bursts.select(*[c for c in BURST_SCHEMA if c != "run_id"])
    counters = truth.select("appl", "task", "thread", "burst_seq", *[c for c in ALL_COUNTERS if c in truth.columns])
    merged = base.join(counters, on=["appl", "task", "thread", "burst_seq"], how="left").select(
        pl.lit(experiment).alias("experiment"), pl.lit(run_id).alias("run_id"), pl.lit(run_name).alias("run_name"),
        pl.all(), pl.lit(1.0).alias("match_score"), pl.lit(False).alias("estimated"))
    target = wh.experiment_dir(experiment)
    with wh.staged(target, replace=True) as stage:
        if target.is_dir():
            for f in target.iterdir():
                if f.name != "merged_bursts.parquet":
                    (stage / f.name).write_bytes(f.read_bytes())
        merged.write_parquet(stage / "merged_bursts.parquet")


def predictor_campaign(root: str | Path, *, n_apps: int = 6, n_kernels: int = 6, n_ranks: int = 4, n_iters: int = 5,
                       seed: int = 0, merge: str = "truth", plan: list[list[str]] | None = None) -> list[str]:
    """Experiments of ``n_apps`` applications, each recorded in ``len(plan)`` runs with different counter sets.

    ``merge="truth"`` writes the merged bursts a perfect merge would give; ``"real"`` runs the project's merge;
    ``"none"`` leaves the runs unmerged. Returns the experiment names.
    """
    wh = Warehouse(root).ensure()
    plan = plan or PREDICT_PLAN
    names = []
    for a in range(n_apps):
        rng = np.random.default_rng([seed, a])
        app = f"app{a}"
        kernels = random_app(rng, app, n_kernels)
        exp = f"{app}-exp"
        ref = None
        for r, counters in enumerate(plan):
            run_id = f"{app}r{r}s{seed}"
            bursts, calls, truth = simulate_run(kernels, np.random.default_rng([seed, a, r]), run_id=run_id,
                                                counters=counters, n_ranks=n_ranks, n_iters=n_iters,
                                                structure_seed=seed * 100_003 + a)
            write_run(wh, run_id=run_id, run_name=f"{app}.run{r}", experiment=exp, app=app,
                      started_at=datetime(2026, 1, 1, 2, r), bursts=bursts, calls=calls)
            if r == 0:
                ref = (run_id, f"{app}.run{r}", bursts, truth)
        if merge == "truth":
            write_merged(wh, exp, *ref)
        elif merge == "real":
            from synthtrace.pipelines.jobs import merge_experiment
            merge_experiment(wh.experiment(exp))
        names.append(exp)
    return names


# ------------------------------------------------------------------------------------ nightly histories
@dataclass(frozen=True)
class Injection:
    """A regression injected into one kernel of one app from ``night`` on."""

    app: str
    kernel: int
    call_site: str
    kind: str
    night: int
    size: float  # the kind's knob (see :func:`inject`)


def inject(k: Kernel, kind: str, size: float) -> Kernel:
    """The kernel after a regression of ``kind``: ``size`` is the relative change of the kind's knob."""
    if kind == "more_instructions":
        return replace(k, ins=k.ins * (1 + size))
    if kind == "lost_vectorisation":  # part of the vector FP work done by scalar code: lanes x more FP instructions
        lost = size * k.vec
        fp_vec, fp_scal = k.fp * (k.vec - lost), k.fp * (1 - k.vec) + k.fp * lost * VECTOR_LANES
        grow = 1 - k.fp + fp_vec + fp_scal
        return replace(k, ins=k.ins * grow, fp=(fp_vec + fp_scal) / grow, vec=fp_vec / (fp_vec + fp_scal),
                       l1=k.l1 / grow, l2=k.l2 / grow, l3=k.l3 / grow, br=k.br / grow, icm=k.icm / grow)
    if kind == "worse_locality":
        return replace(k, l1=k.l1 * (1 + size), l2=k.l2 * (1 + size), l3=k.l3 * (1 + 1.5 * size))
    if kind == "more_mpi_bytes":
        return replace(k, bytes=k.bytes * (1 + size))
    if kind == "new_imbalance":
        return replace(k, imbalance=k.imbalance + size)
    if kind == "network_slowdown":
        return replace(k, bw_gbs=k.bw_gbs / (1 + size))
    raise ValueError(kind)


def _pick(rng: np.random.Generator, kernels: list[Kernel], kind: str) -> int:
    """The kernel a regression of ``kind`` plausibly hits (vectorised code for lost vectorisation, ...)."""
    if kind == "lost_vectorisation":
        return int(np.argmax([kk.fp * kk.vec for kk in kernels]))
    if kind in ("more_mpi_bytes", "network_slowdown"):
        comm = np.array([5e3 + kk.bytes / kk.bw_gbs for kk in kernels]) / np.array(
            [kk.ins * kk.cpi() / GHZ for kk in kernels]
        )
        cand = np.flatnonzero(comm >= np.sort(comm)[-3])
        return int(rng.choice(cand))
    return int(rng.integers(len(kernels)))


_SIZES = {"more_instructions": (0.06, 0.3), "lost_vectorisation": (0.3, 0.9), "worse_locality": (0.4, 2.0),
          "more_mpi_bytes": (0.5, 3.0), "new_imbalance": (0.08, 0.4), "network_slowdown": (0.5, 2.5)}


def regression_campaign(root: str | Path, *, n_apps: int = 8, n_nights: int = 30, n_kernels: int = 6,
                        n_ranks: int = 4, n_iters: int = 4, seed: int = 0, p_regression: float = 0.75,
                        kinds: tuple[str, ...] = KINDS, first_night: int | None = None,
                        p_bad_night: float = 0.05, night_sigma: float = 0.015, min_effect: float = 0.03,
                        plan: list[list[str]] | None = None) -> pl.DataFrame:
    """Nightly histories of ``n_apps`` apps written into a warehouse; returns the labels.

    A regression's kernel and size are drawn until its true effect on the site's time per visit is between
    ``min_effect`` and 50 % (a communication site is made heavier when needed).
    Labels: one row per (app, call_site) series with kind (NULL = unchanged), night (index of the first night
    after the change), changed_at (started_at of that night's first run), size, and effect (true relative
    change of the series' time per visit, from the noise-free model).
    """
    wh = Warehouse(root).ensure()
    plan = plan or DETECT_PLAN
    rows = []
    t0 = datetime(2026, 1, 1, 2, 0)
    for a in range(n_apps):
        rng = np.random.default_rng([seed, 7, a])
        app = f"app{a:03d}"
        kernels = random_app(rng, app, n_kernels)
        inj = None
        if rng.random() < p_regression:
            kind = kinds[int(rng.integers(len(kinds)))]
            night = first_night if first_night is not None else int(rng.integers(n_nights // 2, n_nights - 6))
            lo, hi = _SIZES[kind]
            for _ in range(200):  # a regression worth reporting: its true effect on the site's time is 3-50 %
                ki = _pick(rng, kernels, kind)
                size = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
                eff = _visit_time(inject(kernels[ki], kind, size), n_ranks) / _visit_time(kernels[ki], n_ranks) - 1
                if min_effect <= eff <= 0.5:
                    break
                if kind in ("more_mpi_bytes", "network_slowdown"):  # make the site communication-heavy enough
                    kernels[ki] = replace(kernels[ki], bytes=kernels[ki].bytes * 3)
            inj = Injection(app, ki, kernels[ki].call_site, kind, night, size)
        after = [inject(kk, inj.kind, inj.size) if inj and i == inj.kernel else kk for i, kk in enumerate(kernels)]
        for night in range(n_nights):
            nrng = np.random.default_rng([seed, 11, a, night])
            bad = nrng.random() < p_bad_night
            noise = NightNoise(speed=float(np.exp(nrng.normal(0, night_sigma))),
                               stretch=float(nrng.uniform(1.05, 1.3)) if bad and nrng.random() < 0.5 else 1.0,
                               net=float(nrng.uniform(1.3, 2.5)) if bad else 1.0)
            ks = after if inj and night >= inj.night else kernels
            for r, counters in enumerate(plan):
                run_id = f"{app}n{night:03d}r{r}s{seed}"
                bursts, calls, _ = simulate_run(ks, np.random.default_rng([seed, 13, a, night, r]), run_id=run_id,
                                                counters=counters, n_ranks=n_ranks, n_iters=n_iters, noise=noise,
                                                structure_seed=seed * 100_003 + a)
                write_run(wh, run_id=run_id, run_name=f"{app}.n{night:03d}.run{r}", experiment=f"{app}.n{night:03d}",
                          app=app, started_at=t0 + timedelta(days=night, minutes=r), bursts=bursts, calls=calls)
        for i, kk in enumerate(kernels):
            hit = inj is not None and i == inj.kernel
            effect = None
            if hit:
                effect = _visit_time(after[i], n_ranks) / _visit_time(kk, n_ranks) - 1
            rows.append({"app": app, "call_site": kk.call_site, "kind": inj.kind if hit else None,
                         "night": inj.night if hit else None,
                         "changed_at": t0 + timedelta(days=inj.night) if hit else None,
                         "size": inj.size if hit else None, "effect": effect})
    return pl.DataFrame(rows, schema={"app": pl.String, "call_site": pl.String, "kind": pl.String,
                                      "night": pl.Int64, "changed_at": pl.Datetime("us"), "size": pl.Float64,
                                      "effect": pl.Float64})


def _visit_time(k: Kernel, n_ranks: int) -> float:
    """Noise-free time per visit of a kernel's call site (compute of the slowest rank + transfer), ns."""
    compute = k.ins * k.cpi() / GHZ
    return compute * (1 + k.imbalance) + 5e3 + k.bytes / k.bw_gbs


# ------------------------------------------------------------------------------------ polling at the kernel's site
#: two runs a night, different programmable counters (instructions and cycles fixed)
POLLING_PLAN = [["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM", "PAPI_L2_DCM"],
                ["PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L3_TCM", "PAPI_BR_MSP"]]
#: region -> (instructions per visit, IPC, L1/L2/L3 MPKI, branch MPKI, closing call, call time ns)
_REGIONS = {"solve": (3.6e6, 2.6, 4.0, 1.0, 0.1, 0.5, "MPI_Test", 1_000.0),
            "poll": (2.0e3, 0.8, 2.0, 0.5, 0.02, 1.0, "MPI_Test", 1_000.0),
            "update": (6.0e6, 1.9, 8.0, 2.0, 0.3, 0.8, "MPI_Allreduce", 20_000.0)}


def polling_history(root: str | Path, *, n_nights: int = 14, change_night: int = 8, n_ranks: int = 4,
                    n_iters: int = 20, night_sigma: float = 0.03, seed: int = 0,
                    apps: tuple[str, ...] = ("stepapp", "control")) -> pl.DataFrame:
    """Issue 15's nightly history: per iteration a kernel (``solve``: 3.6M instructions at IPC 2.6) closed by
    ``MPI_Test`` at its site, then a polling loop of 2.5 µs bursts closed by more ``MPI_Test`` calls at the same
    site (Poisson, a different mean each night), then ``update`` closed by ``MPI_Allreduce``. From
    ``change_night`` on, the first app's kernel needs 25 % more instructions at IPC 2.0 (4.5M); the others are
    controls. ``night_sigma`` is the night-to-night speed noise. Two runs a night (:data:`POLLING_PLAN`).

    Returns the labels: app, call_site of the kernel, night of the change (NULL for controls).
    """
    wh = Warehouse(root).ensure()
    t0 = datetime(2026, 3, 1, 2, 0)
    site = {"solve": "solve (step.c:120)", "poll": "solve (step.c:120)", "update": "update (step.c:200)"}
    labels = []
    for a, app in enumerate(apps):
        for night in range(n_nights):
            nrng = np.random.default_rng([seed, 17, a, night])
            speed = float(np.exp(nrng.normal(0, night_sigma)))
            mean_polls = float(np.exp(nrng.uniform(np.log(0.3), np.log(3.0))))
            regs = dict(_REGIONS)
            if a == 0 and night >= change_night:
                regs["solve"] = (4.5e6, 2.0, *_REGIONS["solve"][2:])
            for r, counters in enumerate(POLLING_PLAN):
                rng = np.random.default_rng([seed, 19, a, night, r])
                rows = []
                for task in range(1, n_ranks + 1):
                    polls = rng.poisson(mean_polls, n_iters)
                    seq = np.concatenate([["solve"] + ["poll"] * int(p) + ["update"] for p in polls])
                    rows.append(pl.DataFrame({"task": np.full(seq.size, task, np.int32), "region": seq}))
                f = pl.concat(rows)
                p = {name: pl.col("region").replace_strict({k: v[i] for k, v in regs.items()}, return_dtype=pl.Float64)
                     for i, name in enumerate(("ins", "ipc", "l1", "l2", "l3", "br", "call", "call_ns"))
                     if name not in ("call",)}
                n = f.height
                def noise(s: float, rng: np.random.Generator = rng, n: int = n) -> np.ndarray:
                    return np.exp(rng.normal(0, s, n))

                f = f.with_columns(
                    (p["ins"] * noise(0.002)).alias("ins"),
                    pl.col("region").replace_strict({k: v[6] for k, v in regs.items()}).alias("mpi_call"),
                    pl.col("region").replace_strict(site).alias("call_site"), p["call_ns"].alias("call_ns"),
                    *[p[k].alias(f"_{k}") for k in ("ipc", "l1", "l2", "l3", "br")])
                cyc = f["ins"].to_numpy() / f["_ipc"].to_numpy() * speed * noise(0.01)
                dur = np.maximum(cyc / GHZ, 1).astype(np.int64)
                call_dur = (f["call_ns"].to_numpy() * noise(0.05)).astype(np.int64) + 1
                ins = f["ins"].to_numpy()
                values = {"PAPI_TOT_INS": ins, "PAPI_TOT_CYC": cyc,
                          **{c: ins * f[f"_{k}"].to_numpy() / 1000 * noise(0.03)
                             for c, k in (("PAPI_L1_DCM", "l1"), ("PAPI_L2_DCM", "l2"), ("PAPI_L3_TCM", "l3"),
                                          ("PAPI_BR_MSP", "br"))}}
                task = f["task"].to_numpy()
                first = np.r_[0, np.flatnonzero(np.diff(task)) + 1]
                counts = np.diff(np.r_[first, n])
                step = dur + call_dur
                cum = np.cumsum(step)
                start = cum - step - np.repeat(cum[first] - step[first], counts) + 1000
                seqno = np.arange(n) - np.repeat(first, counts)
                run_id = f"{app}n{night:03d}r{r}s{seed}"
                keys = {"appl": np.ones(n, np.int32), "task": task, "thread": np.ones(n, np.int32)}
                bursts = pl.DataFrame({"run_id": [run_id] * n, **keys, "burst_seq": seqno, "cpu": task,
                                       "start_ns": start, "end_ns": start + dur, "duration_ns": dur,
                                       "mpi_call": f["mpi_call"], "call_site": f["call_site"],
                                       **{c: np.round(values[c]).astype(np.int64) for c in counters}})
                bursts = bursts.cast({c: t for c, t in BURST_SCHEMA.items() if c in bursts.columns})
                zero = np.zeros(n, np.int64)
                calls = pl.DataFrame(
                    {
                        "run_id": [run_id] * n,
                        **keys,
                        "call_seq": seqno,
                        "cpu": task,
                        "mpi_call": f["mpi_call"],
                        "mpi_kind": np.where(
                            f["mpi_call"].to_numpy() == "MPI_Allreduce", "collective", "point_to_point"
                        ),
                        "start_ns": start + dur,
                        "end_ns": start + dur + call_dur,
                        "duration_ns": call_dur,
                        "bytes_sent": np.where(f["mpi_call"].to_numpy() == "MPI_Allreduce", 8, 0).astype(np.int64),
                        "bytes_recv": zero,
                        "peer": pl.Series([None] * n, dtype=pl.Int32),
                        "n_messages": np.ones(n, np.int32),
                        "comm": np.ones(n, np.int64),
                        "root": pl.Series([None] * n, dtype=pl.Int32),
                        "tag": pl.Series([None] * n, dtype=pl.Int64),
                        "call_site": f["call_site"],
                    }
                ).cast(MPI_CALL_SCHEMA)
                write_run(wh, run_id=run_id, run_name=f"{app}.n{night:03d}.run{r}", experiment=f"{app}.n{night:03d}",
                          app=app, started_at=t0 + timedelta(days=night, minutes=r), bursts=bursts, calls=calls)
        labels.append({"app": app, "call_site": site["solve"], "night": change_night if a == 0 else None})
    return pl.DataFrame(labels, schema={"app": pl.String, "call_site": pl.String, "night": pl.Int64})
