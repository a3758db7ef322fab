"""Generates one experiment: the runs of one application instance, streamed block by block to Paraver and Parquet.

All runs of an experiment advance together, one block of iterations at a time: the block's logical program
(work sizes, heavy ranks) is drawn once from the experiment seed, each run adds its own variation (placement,
clock, counter noise, OS noise, polling, housekeeping), its pairs become Paraver records (written up to a
watermark time, so the file stays globally time-sorted with bounded memory) and ground-truth rows. Fixed seed
and configuration give byte-identical traces.
"""
from __future__ import annotations

import math
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.domain.machine import Machine, load_machine
from synthtrace.tracelib.domain.metrics import burst_metrics, mpi_metrics, phase_metrics, ranks_per_socket
from synthtrace.tracelib.formats.paraver.counter_types import catalogue
from synthtrace.tracelib.formats.paraver.writer import (
    CallSites,
    Communicator,
    PcfSpec,
    ParaverWriter,
    TraceMeta,
    mpi_call_ids,
    mpi_kind_of,
    mpi_state_of,
)
from synthtrace.simulator.builder import CALLS, ROLES, BlockBuilder, PairBlock, RunContext, logical_id
from synthtrace.simulator.io_split import split_by_writes
from synthtrace.simulator.written import writing
from synthtrace.simulator.counter_model import COUNTERS, NOISE_CLASS, CounterModel, draw_noise_sizes
from synthtrace.simulator.kernels import KERNEL_INDEX, KERNELS, MPI_KERNEL, PARAMS, SHARED_KERNELS, Kernel, base_kernel
from synthtrace.simulator.network import Network
from synthtrace.simulator.patterns import PATTERNS, AppParams
from synthtrace.simulator.patterns.base import WORLD_COMM, epilogue, prologue
from synthtrace.simulator.pmu import DEFAULT_SLOTS, assign_counter_sets, runs_needed
from synthtrace.simulator.records import RecordTables, pair_records
from synthtrace.simulator.truth import OracleAccumulator, TruthStore
from synthtrace.simulator.variation import Variation, node_count, place, run_clock

DEFAULT_DATE = datetime(2026, 1, 5, 2, 0)


#: iterations per run at most: a run of 2 ranks writes about 23 kB of trace per iteration, so a million iterations
#: of 8 ranks is already some 100 GB (the simulator streams, so memory stays flat; the disk does not)
MAX_ITERATIONS = 1_000_000
#: the largest --scale (problem size factor): the largest counter of a burst is about 2.4e7 at scale 1 and an
#: iteration lasts up to about 2.5e6 ns, so at this scale a burst's counters (2.4e13) and a run of MAX_ITERATIONS
#: (2.5e18 ns) stay in a signed 64-bit integer (9.2e18); at 1e300 they wrapped into negative counts (attack 10)
MAX_SCALE = 1e6


@dataclass(frozen=True)
class ExperimentSpec:
    """One application instance and its runs. ``app_kernels``: the application's own kernel behaviour where it
    differs from :data:`~.kernels.KERNELS` (variants, :mod:`.variants`). Regressions act through ``work``
    (kernel -> instruction factor), ``kernels`` (replacement kernel behaviour, over ``app_kernels``),
    ``msg_scale``, ``imbalance`` (task index, factor) and ``net_slowdown``. Stress options for the merge (off by
    default): ``coll_every`` (a world reduction every k-th iteration only, 0: none; see :class:`AppParams`) and
    ``renumbered_run`` (that run numbers its tasks by a random permutation: the truth keeps the logical ids, its
    keys follow the trace's numbering)."""

    app: str
    pattern: str
    ranks: int = 8
    iterations: int = 20
    runs: int | None = None  # None: enough runs to record every counter once
    seed: int = 0
    counters_per_run: int = DEFAULT_SLOTS
    machine: str | None = None  # machine profile preset or TOML path (None: the default preset)
    ranks_per_node: int | None = None  # None: as many as the node has cores
    started_at: datetime = DEFAULT_DATE
    experiment: str | None = None  # folder of the traces (default: the app name)
    night: int = 0
    scale: float = 1.0
    work: dict[str, float] = field(default_factory=dict)
    kernels: dict[str, Kernel] = field(default_factory=dict)
    msg_scale: float = 1.0
    imbalance: tuple[int, float] | None = None
    net_slowdown: float = 1.0
    variation: Variation = field(default_factory=Variation)
    block_pairs: int = 40_000  # about this many bursts per block and run
    truth_counters: str = "reference"  # counters in the bursts truth: "reference" run only, or "all" runs
    app_kernels: dict[str, Kernel] = field(default_factory=dict)
    coll_every: int = 1
    renumbered_run: int | None = None

    @property
    def name(self) -> str:
        return self.experiment or self.app

    def app_kernel(self, name: str) -> Kernel:
        """The application's own kernel ``name`` (its variant, else the base kernel), before any regression."""
        return self.app_kernels.get(name) or base_kernel(name)

    def kernel(self, name: str) -> Kernel:
        """Kernel ``name`` as this experiment runs it: a regression's replacement, else the application's own."""
        return self.kernels.get(name) or self.app_kernel(name)

    def n_runs(self) -> int:
        return self.runs if self.runs is not None else runs_needed(self.counters_per_run)

    def validate(self) -> None:
        if self.pattern not in PATTERNS:
            raise BadInputError(f"unknown pattern {self.pattern!r} (known: {', '.join(PATTERNS)})")
        if not 1 <= self.ranks <= (most := PATTERNS[self.pattern].max_ranks):
            raise BadInputError(f"--ranks must be between 1 and {most} for the {self.pattern} pattern "
                                f"(got {self.ranks})")
        if not 1 <= self.iterations <= MAX_ITERATIONS:
            raise BadInputError(f"--iterations must be between 1 and {MAX_ITERATIONS:,} (got {self.iterations})")
        if not (math.isfinite(self.scale) and 0 < self.scale <= MAX_SCALE):
            raise BadInputError(f"--scale must be a positive number at most {MAX_SCALE:g}, which keeps every counter "
                                f"and time of a run in a signed 64-bit integer (got {self.scale:g})")
        if not self.app or "." in self.app or "/" in self.app:
            raise BadInputError(f"app name {self.app!r} must be non-empty without '.' or '/'")
        if self.ranks_per_node is not None and self.ranks_per_node < 1:  # 0 was taken for "as many as cores"
            raise BadInputError(f"--ranks-per-node must be at least 1 (got {self.ranks_per_node})")
        if self.counters_per_run < 1 or self.n_runs() < 1:  # n_runs divides by counters_per_run
            raise BadInputError("--runs and --counters-per-run must be at least 1")
        if self.coll_every < 0:
            raise BadInputError(f"coll_every must be >= 0 (got {self.coll_every})")
        if self.renumbered_run is not None and not 0 <= self.renumbered_run < self.n_runs():
            raise BadInputError(f"renumbered run {self.renumbered_run} is not one of the {self.n_runs()} runs")
        if self.truth_counters not in ("reference", "all"):
            raise BadInputError(f"truth counters must be 'reference' or 'all' (got {self.truth_counters!r})")
        unknown = sorted((set(self.kernels) | set(self.app_kernels)) - set(KERNEL_INDEX))
        if unknown:
            raise BadInputError(f"unknown kernel(s) {', '.join(unknown)} (known: {', '.join(KERNEL_INDEX)})")

    def block_iterations(self) -> int:
        probe = PATTERNS[self.pattern](AppParams(self.ranks), np.random.default_rng(0))
        return max(1, self.block_pairs // max(1, probe.pairs_per_iteration()))

    def n_blocks(self) -> int:
        """Blocks per run (prologue and epilogue included): the unit of progress."""
        return 2 + math.ceil(self.iterations / self.block_iterations())


@dataclass(frozen=True)
class Labeller:
    """Archetype rules supplied by a higher layer (tracelib does not know them). Each callable takes the metric
    frame of :mod:`synthtrace.tracelib.domain.metrics` (bursts / MPI calls / phases, with a ``_row`` column) and
    returns it
    with an
    ``archetype`` column; calls and phases may come back with fewer rows (units the rules do not cover)."""

    bursts: Callable[[pl.DataFrame], pl.DataFrame]
    calls: Callable[[pl.DataFrame], pl.DataFrame]
    phases: Callable[[pl.DataFrame], pl.DataFrame]


#: builds the :class:`Labeller` for a machine and the ranks sharing one socket (its DRAM share)
LabellerFactory = Callable[[Machine, float], Labeller]


@dataclass
class ExperimentResult:
    experiment: str
    app: str
    traces: list[Path]
    bytes: int
    seconds: float
    n_bursts: list[int]


def _seed(*parts: int | str) -> np.random.Generator:
    return np.random.default_rng([p if isinstance(p, int) else zlib.crc32(p.encode()) for p in parts])


@dataclass
class _Run:
    """State of one run while its blocks are generated."""

    index: int
    name: str
    counters: list[str]
    ctx: RunContext
    writer: ParaverWriter
    tables: RecordTables
    placement: object
    freq_hz: float
    t0: float = 0.0
    start: np.ndarray | None = None
    burst_seq: np.ndarray | None = None
    call_seq: np.ndarray | None = None
    phase: np.ndarray | None = None
    n_bursts: int = 0
    n_polls: int = 0
    n_housekeeping: int = 0
    n_outliers: int = 0


def simulate_experiment(out_dir: str | Path, spec: ExperimentSpec, truth: TruthStore, *,
                        labeller: Labeller | LabellerFactory | None = None,
                        progress: Callable[[int], None] | None = None) -> ExperimentResult:
    """Write ``OUT_DIR/<experiment>/<app>.run<k>.prv/.pcf/.row`` for every run and the experiment's ground truth.

    ``labeller``: the archetype rules (a :class:`Labeller`, or a factory taking the machine and the ranks per
    socket); without one the truth's ``archetype`` columns are NULL. ``progress`` gets 1 per block and run.
    """
    spec.validate()
    began = time.perf_counter()
    machine: Machine = load_machine(spec.machine)
    P, n_runs = spec.ranks, spec.n_runs()
    rpn = spec.ranks_per_node if spec.ranks_per_node is not None else min(P, machine.cores_per_node)
    n_nodes = node_count(P, rpn)
    units = pl.DataFrame({"appl": [1] * P, "task": list(range(1, P + 1)), "thread": [1] * P})
    rps = ranks_per_socket(units, machine, n_nodes)
    share = machine.dram_share(rps)
    exp_rng = _seed(spec.seed, spec.app, "experiment")
    sigma = draw_noise_sizes(exp_rng, spec.variation.noise_scale)
    counter_sets = assign_counter_sets(n_runs, spec.counters_per_run, exp_rng)
    kernels = tuple(spec.kernel(k.name) for k in KERNELS)
    params = AppParams(P, scale=spec.scale, work=dict(spec.work), msg_scale=spec.msg_scale, imbalance=spec.imbalance,
                       coll_every=spec.coll_every)
    pattern = PATTERNS[spec.pattern](params, _seed(spec.seed, spec.app, "setup"))
    infos = catalogue(COUNTERS)
    ctype = {c.name: c.event_type for c in infos}
    ids = mpi_call_ids([(mpi_kind_of(n), n) for n in CALLS])
    sites = CallSites(binary=spec.app)
    site_names = [f"{f} ({file}:{line})" for f, file, line in pattern.all_sites()]
    sites.add(site_names)
    site_ids = np.array([sites.ids(s) for s in site_names], dtype=np.int64)
    exp_dir = Path(out_dir) / spec.name
    exp_dir.mkdir(parents=True, exist_ok=True)

    tables = {"call_type": np.array([ids[(mpi_kind_of(n), n)][0] for n in CALLS]),
              "call_value": np.array([ids[(mpi_kind_of(n), n)][1] for n in CALLS]),
              "call_state": np.array([mpi_state_of(n) for n in CALLS]), "site_func": site_ids[:, 0],
              "site_line": site_ids[:, 1]}
    runs = [_new_run(spec, r, machine, rpn, CounterModel(machine, share, 0.0, sigma, kernels), counter_sets[r], ctype,
                     tables, exp_dir) for r in range(n_runs)]

    perm = task_permutation(P, _seed(spec.seed, spec.app, "renumber"))
    oracle = OracleAccumulator(n_runs)
    b_it = spec.block_iterations()
    blocks = [(-1, 1, "prologue")] + [
        (i, min(b_it, spec.iterations - i), "body") for i in range(0, spec.iterations, b_it)
    ]
    blocks.append((spec.iterations, 1, "epilogue"))
    if labeller is not None and not isinstance(labeller, Labeller):
        labeller = labeller(machine, rps)
    labels = _Labels(machine, rps, labeller)
    buffer = _TruthBuffer(truth, spec.name, None if spec.truth_counters == "all" else runs[0].name, labels)
    try:
        for bi, (it0, n_it, kind) in enumerate(blocks):
            ref_ids = ref_counters = ref_ns = None
            for run in runs:
                base = _seed(spec.seed, spec.app, "block", bi)
                b = BlockBuilder(it0, n_it, P, run.ctx, _seed(spec.seed, spec.app, spec.night, run.index, "block", bi),
                                 run.t0, run.start)
                if kind == "prologue":
                    prologue(b, base, params)
                elif kind == "epilogue":
                    epilogue(b, base, params)
                else:
                    pattern.block(b, base)
                begin = np.rint(run.start).astype(np.int64) if kind == "prologue" else None
                pb, run.t0, run.start = b.finish()
                ids_run = logical_id(pb.cols["it"], pb.cols["task"] + 1, pb.cols["slot"], pb.cols["sub"])
                if spec.variation.io_every_ns:
                    pb, ids_run = split_by_writes(pb, ids_run, spec.variation,
                                                  _seed(spec.seed, spec.app, spec.night, run.index, "io", bi))
                if run.index == spec.renumbered_run:
                    pb, ids_run = renumbered(pb, ids_run, perm)
                    begin = None if begin is None else begin[np.argsort(perm)]
                records = pair_records(pb, run.tables, begin=begin)
                last = np.zeros(P, np.int64)
                np.maximum.at(last, pb.cols["task"], pb.cols["c_exit"])
                watermark = None if kind == "epilogue" else int(last.min())
                with writing(run.writer.prv):
                    run.writer.add(records, watermark)
                if run.index == 0:
                    ref_ids, ref_counters, ref_ns = ids_run, pb.counters, pb.cols["b_end"] - pb.cols["b_start"]
                else:
                    oracle.add(run.index, ref_ids, ref_counters, ref_ns, ids_run, pb.counters)
                _truth_block(buffer, spec, run, pb, ids_run, pattern.all_sites(), kernels, labels)
                if progress:
                    progress(1)
    except BaseException:
        buffer.stop()  # the truth thread drops its batch while the writers' files are removed
        for run in runs:
            run.writer.abort()
        buffer.abort()
        truth.close_experiment(spec.name)
        raise
    buffer.close()
    mpi_values: dict[int, dict[int, str]] = {}
    for (_, n), (t, v) in ids.items():
        mpi_values.setdefault(t, {})[v] = n
    funcs, lines = sites.pcf_labels()
    traces, total = [], 0
    for run in runs:
        pcf = PcfSpec(mpi_values=mpi_values, counters=[i for i in infos if i.name in run.counters], callers=funcs,
                      caller_lines=lines, application_events=True)
        with writing(run.writer.prv):
            traces.append(run.writer.close(pcf))
        total += traces[-1].stat().st_size
    truth.close_experiment(spec.name)
    _truth_tables(truth, spec, runs, traces, machine, rps, sigma, oracle)
    return ExperimentResult(spec.name, spec.app, traces, total, time.perf_counter() - began, [r.n_bursts for r in runs])


def _new_run(spec: ExperimentSpec, r: int, machine: Machine, rpn: int, model: CounterModel, counters: list[str],
             ctype: dict[str, int], tables: dict[str, np.ndarray], exp_dir: Path) -> _Run:
    """Run ``r``: its placement, clock, network, counter set, Paraver writer and start times."""
    P = spec.ranks
    rng = _seed(spec.seed, spec.app, spec.night, r, "run")
    placement = place(P, rpn, machine.cores_per_node, rng)
    model.freq_hz = run_clock(machine.frequency_ghz * 1e9, spec.variation.freq_jitter, rng)
    net = Network.from_machine(machine, placement.node_of_task, spec.net_slowdown)
    meta = TraceMeta(cpus_per_node=placement.cpus_per_node, threads_per_task=(tuple([1] * P),),
                     node_of_task=(tuple(int(n) + 1 for n in placement.node_of_task),), started_at=spec.started_at,
                     communicators=(Communicator(1, WORLD_COMM, tuple(range(1, P + 1))),
                                    *[Communicator(1, WORLD_COMM + 1 + i, (i + 1,)) for i in range(P)]),
                     node_names=placement.node_names, binary=spec.app)
    name = f"{spec.app}.run{r}"
    idx = np.array([COUNTERS.index(c) for c in counters], dtype=np.int64)
    rec = RecordTables(**tables, counter_idx=idx, counter_types=tuple(ctype[c] for c in counters),
                       mpi_rates=model.mpi_rates(MPI_KERNEL)[idx], cpu_of_task=placement.cpu_of_task)
    begin = rng.uniform(5_000, 80_000, size=P)  # processes start at slightly different times (ns)
    return _Run(
        r,
        name,
        counters,
        RunContext(r, model, net, spec.variation),
        ParaverWriter(exp_dir / name, meta),
        rec,
        placement,
        model.freq_hz,
        0.0,
        begin,
        np.zeros(P, np.int64),
        np.zeros(P, np.int64),
        np.zeros(P, np.int64),
    )


def task_permutation(n_tasks: int, rng: np.random.Generator) -> np.ndarray:
    """A random renumbering of ``n_tasks`` tasks (trace task index per program task index), never the identity
    when there are two tasks or more."""
    perm = np.arange(n_tasks)
    while n_tasks > 1 and (perm == np.arange(n_tasks)).all():
        perm = rng.permutation(n_tasks)
    return perm


def renumbered(pb: PairBlock, ids: np.ndarray, perm: np.ndarray) -> tuple[PairBlock, np.ndarray]:
    """Block ``pb`` (and its bursts' logical ``ids``) with program task ``i`` written as trace task ``perm[i]``:
    tasks, peers, roots and message ends renumbered, rows sorted again by (task, start)."""
    c = dict(pb.cols)
    c["task"] = perm[c["task"]]
    for k in ("peer", "root"):
        c[k] = np.where(c[k] >= 0, perm[np.maximum(c[k], 0)], c[k])
    order = np.lexsort((c["b_start"], c["task"]))
    msgs = {k: perm[v] if k in ("s_task", "r_task") else v for k, v in pb.messages.items()}
    out = PairBlock({k: v[order] for k, v in c.items()}, pb.counters[order], msgs, pb.outlier[order],
                    pb.world[order], pb.n_polls)
    return out, ids[order]


def _first_of_task(task: np.ndarray) -> np.ndarray:
    """Index of each task's first row in a task-sorted array."""
    return np.flatnonzero(np.r_[True, task[1:] != task[:-1]])


def _cum_within(values: np.ndarray, task: np.ndarray) -> np.ndarray:
    """Exclusive cumulative sum of ``values`` within each task's rows (rows sorted by task)."""
    if task.size == 0:
        return values.copy()
    cs = np.cumsum(values) - values
    firsts = _first_of_task(task)
    first_of_row = np.repeat(firsts, np.diff(np.r_[firsts, task.size]))
    return cs - cs[first_of_row]


class _Labels:
    """Archetype labels of truth rows from the metrics of :mod:`synthtrace.tracelib.domain.metrics` and a
    :class:`Labeller`."""

    def __init__(self, machine: Machine, rps: float, labeller: Labeller | None):
        self.machine, self.rps, self.labeller = machine, rps, labeller

    def bursts(self, frame: pl.DataFrame) -> pl.Series:
        if self.labeller is None:
            return pl.Series("archetype", [None] * frame.height, pl.String)
        # every counter is known here: without missing_roles the rules skip naming missing counters (costly)
        m = burst_metrics(frame, self.machine, ranks_per_socket=self.rps).drop("missing_roles").with_row_index("_row")
        return self.labeller.bursts(m).sort("_row").get_column("archetype")

    def calls(self, calls: pl.DataFrame) -> pl.Series:
        if self.labeller is None or calls.height == 0:
            return pl.Series("archetype", [None] * calls.height, pl.String)
        m = mpi_metrics(calls, self.machine).with_row_index("_row")
        lab = self.labeller.calls(m).select("_row", "archetype")
        return m.select("_row").join(lab, on="_row", how="left").sort("_row").get_column("archetype")

    def phases(self, bursts: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
        p = phase_metrics(bursts, calls, self.machine, ranks_per_socket=self.rps)
        if self.labeller is None:
            return p.with_columns(pl.lit(None, pl.String).alias("archetype"))
        m = p.with_row_index("_row")
        lab = self.labeller.phases(m).select("_row", "archetype")
        return m.join(lab, on="_row", how="left").sort("_row").drop("_row")


def _names(names: list[str | None], codes: np.ndarray) -> pl.Series:
    """Strings by code (``codes`` index ``names``), without Python objects per row."""
    return pl.Series(names, dtype=pl.String).gather(codes)


def _truth_block(buffer: _TruthBuffer, spec: ExperimentSpec, run: _Run, pb: PairBlock, ids: np.ndarray,
                 sites: list[tuple[str, str, int]], kernels: tuple[Kernel, ...], labels: _Labels) -> None:
    """Ground-truth rows of one block of one run (bursts, MPI calls), handed to ``buffer``."""
    c = pb.cols
    P = spec.ranks
    task = c["task"]
    has_call = c["call"] >= 0  # an MPI call (not a progress write, nor the end of the thread)
    burst_seq = run.burst_seq[task] + _cum_within(np.ones(pb.n, np.int64), task)
    run.burst_seq += np.bincount(task, minlength=P)
    call_seq = run.call_seq[task[has_call]] + _cum_within(np.ones(int(has_call.sum()), np.int64), task[has_call])
    run.call_seq += np.bincount(task[has_call], minlength=P)
    world = pb.world.astype(np.int64)
    phase = run.phase[task] + _cum_within(world, task)
    run.phase += np.bincount(task, weights=world, minlength=P).astype(np.int64)
    run.n_bursts += pb.n
    run.n_polls += int((c["role"] == 1).sum())
    run.n_housekeeping += int((c["role"] == 2).sum())
    run.n_outliers += int(pb.outlier.sum())

    site_str = [f"{f} ({file}:{line})" for f, file, line in sites]
    call_codes = np.where(has_call, c["call"], len(CALLS))
    ones = np.ones(pb.n, np.int32)
    b = pl.DataFrame([
        pl.Series("run_name", [run.name]).gather(np.zeros(pb.n, np.int64)), pl.Series("appl", ones),
        pl.Series("task", (task + 1).astype(np.int32)), pl.Series("thread", ones), pl.Series("burst_seq", burst_seq),
        pl.Series("logical_id", ids), pl.Series("iteration", c["it"]), pl.Series("slot", c["slot"]),
        pl.Series("sub", c["sub"]), _names(list(ROLES), c["role"]).alias("role"),
        _names([k.name for k in kernels], c["kernel"]).alias("kernel"),
        _names([k.intent for k in kernels], c["kernel"]).alias("intent"), pl.Series("phase", phase),
        pl.Series("os_noise", pb.outlier), pl.Series("start_ns", c["b_start"]), pl.Series("end_ns", c["b_end"]),
        pl.Series("duration_ns", c["b_end"] - c["b_start"]), _names([*CALLS, None], call_codes).alias("mpi_call"),
        _names([*site_str, None], np.where(has_call, c["site"], len(site_str))).alias("call_site"),
    ])
    counters = pl.DataFrame(pb.counters, schema=list(COUNTERS), orient="row")
    x = pb.counters
    work = pl.DataFrame({"flops": x[:, COUNTERS.index("PAPI_DP_OPS")].astype(np.float64),
                         "instructions": x[:, COUNTERS.index("PAPI_TOT_INS")].astype(np.float64),
                         "dram_bytes": x[:, COUNTERS.index("PAPI_L3_TCM")] * float(labels.machine.line_bytes)})

    sel = has_call
    n = int(sel.sum())
    coll = c["coll_send"] >= 0
    kinds = sorted({mpi_kind_of(x) for x in CALLS})
    kind_code = np.array([kinds.index(mpi_kind_of(x)) for x in CALLS])
    calls = pl.DataFrame(
        [
            pl.Series("run_name", [run.name]).gather(np.zeros(n, np.int64)),
            pl.Series("appl", np.ones(n, np.int32)),
            pl.Series("task", (task[sel] + 1).astype(np.int32)),
            pl.Series("thread", np.ones(n, np.int32)),
            pl.Series("call_seq", call_seq),
            pl.Series("logical_id", ids[sel]),
            _names(list(CALLS), c["call"][sel]).alias("mpi_call"),
            _names(kinds, kind_code[c["call"][sel]]).alias("mpi_kind"),
            pl.Series("start_ns", c["b_end"][sel]),
            pl.Series("end_ns", c["c_exit"][sel]),
            pl.Series("duration_ns", (c["c_exit"] - c["b_end"])[sel]),
            pl.Series("bytes_sent", (np.where(coll, c["coll_send"], 0) + c["bytes_sent"])[sel]),
            pl.Series("bytes_recv", (np.where(coll, c["coll_recv"], 0) + c["bytes_recv"])[sel]),
            pl.Series("peer", np.where(c["peer"] >= 0, c["peer"] + 1, -1)[sel]),
            pl.Series("n_messages", c["n_msgs"][sel].astype(np.int32)),
            pl.Series("comm", np.where(coll, c["comm"], -1)[sel]),
            pl.Series("root", np.where(coll & (c["root"] >= 0), c["root"], -1)[sel]),
            pl.Series("tag", c["tag"][sel]),
            _names(site_str, c["site"][sel]).alias("call_site"),
            pl.Series("phase", phase[sel]),
            pl.Series("_world", pb.world[sel]),
        ]
    )
    calls = calls.with_columns(
        [pl.when(pl.col(k) >= 0).then(pl.col(k)).alias(k) for k in ("peer", "comm", "root", "tag")]
    )
    calls = calls.with_columns(pl.col("peer").cast(pl.Int32), pl.col("root").cast(pl.Int32))
    buffer.add(pl.concat([b, counters, work], how="horizontal"), calls)


#: truth rows labelled at once (the rules are row-wise): an abort waits for one slice at most (~0.3 s of work;
#: 20,000 cost 30 % more CPU over a run, each call of the rules plans ~0.1 s)
LABEL_ROWS = 50_000


class _TruthBuffer:
    """Truth rows waiting to be labelled (the rules cost per call, so rows of several blocks and runs go together).

    Labelling and Parquet writing run on one background thread (Polars and Arrow release the GIL), overlapping
    the generation of the next blocks; :meth:`close` waits for them and re-raises their errors. :meth:`abort` (a
    Ctrl-C or SIGTERM, an error) tells the batch in flight to stop at its next slice of :data:`LABEL_ROWS` rows
    or step: a whole batch took 3-4 s at load 18, which the command's stop waited for (note26).
    """

    def __init__(self, truth: TruthStore, experiment: str, reference: str | None, labels: _Labels,
                 max_rows: int = 150_000):
        self.truth, self.experiment, self.reference, self.labels, self.max_rows = (
            truth,
            experiment,
            reference,
            labels,
            max_rows,
        )
        self.bursts: list[pl.DataFrame] = []
        self.calls: list[pl.DataFrame] = []
        self.rows = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="truth")
        self._pending: Future | None = None
        self._stop = threading.Event()  # set by abort: the batch in flight is dropped at its next check

    def add(self, bursts: pl.DataFrame, calls: pl.DataFrame) -> None:
        self.bursts.append(bursts)
        self.calls.append(calls)
        self.rows += bursts.height
        if self.rows >= self.max_rows:
            self.flush()

    def flush(self) -> None:
        """Hand the pending rows (blocks hold whole phases) to the background writer (one batch in flight)."""
        if not self.bursts:
            return
        b, c = pl.concat(self.bursts), pl.concat(self.calls)
        self.bursts, self.calls, self.rows = [], [], 0
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(self._write, b, c)

    def close(self) -> None:
        """Write what is left and wait for the background writer."""
        try:
            self.flush()
            if self._pending is not None:
                self._pending.result()
        except BaseException:  # a Ctrl-C or SIGTERM while waiting: the batch in flight is dropped too
            self.stop()
            raise
        finally:
            self._pool.shutdown(wait=True)

    def stop(self) -> None:
        """Tell the batch in flight to stop at its next check (:meth:`abort` then waits for it)."""
        self._stop.set()

    def abort(self) -> None:
        """Drop what is pending (after an error elsewhere): stop the writer, wait for it, ignore its outcome."""
        self.stop()
        self.bursts, self.calls, self.rows = [], [], 0
        if self._pending is not None:
            self._pending.exception()
        self._pool.shutdown(wait=True)

    def _sliced(self, frame: pl.DataFrame, label: Callable[[pl.DataFrame], pl.Series]) -> pl.Series | None:
        """``label`` (a row-wise rule) of ``frame``'s rows, :data:`LABEL_ROWS` at a time; None once aborted."""
        parts = []
        for first in range(0, frame.height, LABEL_ROWS):
            if self._stop.is_set():
                return None
            parts.append(label(frame.slice(first, LABEL_ROWS)))
        return pl.concat(parts) if parts else label(frame)

    def _write(self, b: pl.DataFrame, c: pl.DataFrame) -> None:
        """Label a batch and append it to the truth tables (nothing more once aborted: the output is dropped)."""
        archetype = self._sliced(b, self.labels.bursts)
        if archetype is None:
            return
        b = b.with_columns(archetype.alias("archetype"))
        ref = pl.lit(True) if self.reference is None else pl.col("run_name") == self.reference
        out = b.select(
            *[x for x in b.columns if x not in COUNTERS and x not in ("flops", "instructions", "dram_bytes")],
            *[pl.when(ref).then(pl.col(n)).alias(n) for n in COUNTERS],
        )
        self.truth.append("bursts", self.experiment, out)
        calls = c.drop("_world")
        archetype = self._sliced(calls, self.labels.calls)
        if archetype is None:
            return
        self.truth.append("mpi_calls", self.experiment, calls.with_columns(archetype.alias("archetype")))
        if self._stop.is_set():
            return
        ph = self.labels.phases(
            b.select(
                pl.col("run_name").alias("run_id"),
                "appl",
                "task",
                "thread",
                "phase",
                "start_ns",
                "end_ns",
                "duration_ns",
                "flops",
                "instructions",
                "dram_bytes",
            ),
            calls.rename({"run_name": "run_id"}),
        )
        closed = (
            c.filter(pl.col("_world"))
            .select(pl.col("run_name").alias("run_id"), "appl", "phase")
            .unique()
            .with_columns(pl.lit(True).alias("closed"))
        )
        ph = (
            ph.join(closed, on=["run_id", "appl", "phase"], how="left", maintain_order="left")
            .with_columns(pl.col("closed").fill_null(False))
            .rename({"run_id": "run_name"})
            .with_columns(pl.lit(self.experiment).alias("experiment"))
        )
        self.truth.append("phases", self.experiment, ph)


def _truth_tables(truth: TruthStore, spec: ExperimentSpec, runs: list[_Run], traces: list[Path], machine: Machine,
                  rps: float, sigma: np.ndarray, oracle: OracleAccumulator) -> None:
    name = spec.name
    truth.add("experiments", pl.DataFrame([{
        "experiment": name, "app": spec.app, "pattern": spec.pattern, "ranks": spec.ranks,
        "iterations": spec.iterations, "runs": len(runs), "seed": spec.seed, "counters_per_run": spec.counters_per_run,
        "night": spec.night, "started_at": spec.started_at, "machine": machine.name, "ranks_per_socket": rps,
        "dram_share_bytes_per_s": machine.dram_share(rps), "reference_run": runs[0].name,
        "scale": spec.scale, "msg_scale": spec.msg_scale, "net_slowdown": spec.net_slowdown,
        "work_factors": str(dict(spec.work)) if spec.work else None,
        "imbalance": str(spec.imbalance) if spec.imbalance else None,
        "changed_kernels": sorted(spec.kernels) or None,
        "variant_kernels": sorted(k for k, v in spec.app_kernels.items() if v != base_kernel(k)) or None,
    }]))
    truth.add("kernels", _kernel_rows(spec))
    truth.add("runs", pl.DataFrame([{
        "experiment": name, "run_name": r.name, "run_index": r.index, "is_reference": r.index == 0,
        "trace": str(t), "trace_bytes": t.stat().st_size, "counters": r.counters, "freq_hz": r.freq_hz,
        "node_names": list(r.placement.node_names), "cpu_of_task": r.placement.cpu_of_task.tolist(),
        "node_of_task": (r.placement.node_of_task + 1).tolist(), "n_bursts": r.n_bursts, "n_polls": r.n_polls,
        "n_housekeeping": r.n_housekeeping, "n_os_noise": r.n_outliers,
    } for r, t in zip(runs, traces)]))
    truth.add("noise", pl.DataFrame({"experiment": name, "counter": list(COUNTERS),
                                     "noise_class": [NOISE_CLASS[c] for c in COUNTERS], "sigma": sigma}))
    truth.add("oracle", oracle.frame(name, [r.name for r in runs], [r.counters for r in runs]))

def _kernel_rows(spec: ExperimentSpec) -> pl.DataFrame:
    """One row per kernel the experiment's application runs: its parameters as simulated, whether it is the
    application's own code (else MPI's or the runtime's, never varied), a variant of the base kernel, or changed
    by an injected regression."""
    names = [*PATTERNS[spec.pattern].kernels, *SHARED_KERNELS]
    used = [spec.kernel(n) for n in names]
    n = len(names)
    return pl.DataFrame({
        "experiment": [spec.name] * n, "app": [spec.app] * n, "pattern": [spec.pattern] * n,
        "night": pl.Series("night", [spec.night] * n, pl.Int64), "kernel": names,
        "intent": [k.intent for k in used], "own": [n not in SHARED_KERNELS for n in names],
        "variant": [spec.app_kernel(n) != base_kernel(n) for n in names],
        "injected": [k != spec.app_kernel(n) for n, k in zip(names, used)],
        **{p: pl.Series(p, [float(getattr(k, p)) for k in used], pl.Float64) for p in PARAMS},
    })
