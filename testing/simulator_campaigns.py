"""The merge's stress conditions in the project's simulator (issue 12): two runs of 4 ranks per condition, written
as Paraver traces and read back, with the simulator's ground-truth logical ids in the convention of
:func:`testing.merge_campaigns.score` (used by tests/test_merge_stress.py and benchmarks/bench_merge_stress.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.simulator import ExperimentSpec, TruthStore, Variation, simulate_experiment
from synthtrace.simulator.counter_model import COUNTERS
from synthtrace.simulator.mpi_exec import NO_MATCH_BIT
from synthtrace.tracelib.merge.merge_runs import RunTables
from synthtrace.tracelib.formats.otf2 import Otf2Trace
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from testing.merge_campaigns import SynthRun

KEYS = ["appl", "task", "thread", "burst_seq"]


#: the stress conditions in the project's simulator: 4 ranks, 2 runs (``ExperimentSpec`` fields over these)
SIM_CONDITIONS: dict[str, dict] = {
    "sim: halo, p2p only (no world collective)": dict(pattern="halo", iterations=400, coll_every=0),
    "sim: halo, Allreduce every 100 iterations": dict(pattern="halo", iterations=400, coll_every=100),
    "sim: master-worker, ANY_SOURCE, Iprobe polling": dict(pattern="master_worker", iterations=300),
    "sim: halo, ranks renumbered in run 1": dict(pattern="halo", iterations=200, coll_every=0, renumbered_run=1),
    "sim: halo, work per burst differs (sigma 0.3)": dict(pattern="halo", iterations=200,
                                                          variation=Variation(work_sigma=0.3)),
    "sim: halo, long Testall polling": dict(pattern="halo", iterations=200, variation=Variation(poll_ins=60.0)),
    "sim: halo p2p only, OS noise and clock jitter": dict(pattern="halo", iterations=400, coll_every=0,
                                                          variation=Variation(os_noise_p=0.05, freq_jitter=0.03)),
    "sim: wavefront (serialised Send/Recv pipeline)": dict(pattern="wavefront", iterations=200),
    "sim: halo p2p only, progress writes split compute bursts": dict(
        pattern="halo", iterations=400, coll_every=0, variation=Variation(io_every_ns=3e6)),
}

#: same program or not: run 1 simulated with these ``ExperimentSpec`` changes over run 0's (same seed, so the same
#: logical program and the same run-to-run variation otherwise); the halo's main kernel is ``stencil_interior``
SAME_PROGRAM_BASE = dict(pattern="halo", iterations=300, coll_every=0)
SAME_PROGRAM: dict[str, dict] = {
    "sim: same program and input": {},
    "sim: two code versions (main kernel +25 % instructions)": dict(work={"stencil_interior": 1.25}),
    "sim: another input deck (problem size x1.5)": dict(scale=1.5),
    "sim: one run half as long (half the iterations)": dict(iterations=150),
}


def simulated_runs(kw: dict, seed: int, out: Path, run1: dict | None = None) -> list[SynthRun]:
    """Two runs of 4 ranks simulated into ``out``, read back from their Paraver traces, with the simulator's truth
    (its ``logical_id`` renumbered densely x 1000, + 999 for the first piece of a burst a progress write split:
    the logical-id convention of ``merge_campaigns.score``). ``run1``: run 1 comes from the same experiment with
    these spec changes (another code version, input or length: :data:`SAME_PROGRAM`)."""
    spec = ExperimentSpec(app="sim", ranks=4, runs=2, seed=seed, truth_counters="all", **kw)
    specs = [spec] if run1 is None else [spec, replace(spec, **run1)]
    traces, truths = [], []
    for k, sp in enumerate(specs):
        d = out / f"exp{k}"
        store = TruthStore(d / "ground_truth")
        traces.append(simulate_experiment(d, sp, store).traces)
        store.close()
        truths.append(pl.read_parquet(d / "ground_truth" / "bursts" / f"{sp.name}.parquet"))
    traces = traces[0] if run1 is None else [traces[0][0], traces[1][1]]
    truth = pl.concat([truths[0].filter(pl.col("run_name") == traces[0].stem),
                       truths[-1].filter(pl.col("run_name") == traces[1].stem)]).with_columns(
        (pl.col("logical_id").abs().rank("dense").cast(pl.Int64) * 1000
         + pl.when(pl.col("logical_id") < 0).then(999).otherwise(0)).alias("logical"))
    runs = []
    for k, prv in enumerate(traces):
        run_id = f"sim{k}"
        bursts, calls, _ = ParaverTrace(prv).read_tables(run_id)
        t = truth.filter(pl.col("run_name") == prv.stem).select(
            *[pl.col(c).cast(bursts.schema[c]) for c in KEYS], "logical", "duration_ns", *COUNTERS)
        r = RunTables(run_id, prv.stem, bursts, calls)
        runs.append(SynthRun(run_id, prv.stem, bursts, calls, t, r.counters))
    return runs


# ------------------------------------------------------------------------------------------------ issue 22
#: the verdicts in order of gravity
VERDICTS = ("ok", "suspect", "bad")


@dataclass
class MechanismOutcome:
    """A merge of one campaign of :mod:`synthtrace.simulator.mechanisms`, scored against its truth.

    ``right``: over every non-reference run, the smallest share of reference bursts >= 10 us matched to their
    true logical burst (or left unmatched when that run has none); ``right_span``: the same where a burst of an
    undecidable span (see the simulator's ``span``) is also right when matched to an interchangeable burst of the
    span; ``in_span``: how many scored bursts lie in such a span; ``verdict``: the gravest verdict over the
    merge's counters (``refused`` when the merge refused, with ``message``); ``span_marked``: share of the span's
    scored bursts the merge marked ambiguous (NULL when the merge has no such mark or there is no span);
    ``moved``: share of the scored bursts matched to a burst of another task (a rank renumbering the merge chose)."""

    mechanism: str
    seed: int
    ranks: int
    iterations: int
    runs: int
    right: float | None
    right_span: float | None
    scored: int
    in_span: int
    verdict: str
    span_marked: float | None
    moved: float | None
    message: str
    sim_s: float
    merge_s: float

    @property
    def honest(self) -> bool:
        """Never ``ok`` below 99 % right (a refusal or a non-ok verdict is honest)."""
        return self.verdict != "ok" or (self.right is not None and self.right >= 0.99)

    @property
    def accepted(self) -> bool:
        """The acceptance rule of issue 22: >= 99.5 % right, or the undecidable span marked and the verdict not
        ``ok`` (and >= 99.5 % right when the span's interchangeable bursts count as right)."""
        if self.verdict == "refused" or self.right is None:
            return False
        if self.right >= 0.995:
            return True
        return (self.in_span > 0 and self.verdict != "ok" and (self.span_marked or 0.0) > 0.5
                and (self.right_span or 0.0) >= 0.995)


def plain_size(seed: int) -> tuple[int, int]:
    """(ranks, iterations) of plain campaign ``seed`` in the benchmark and tests: 4-16 ranks, 8-60 iterations."""
    rng = np.random.default_rng([seed, 22])
    return int(rng.integers(4, 17)), int(rng.integers(8, 61))


def read_campaign(c) -> list[RunTables]:
    """The runs of a simulated campaign (:class:`synthtrace.simulator.mechanisms.Campaign`) read back from their
    Paraver traces or OTF2 archives, run 0 first (run_id = the trace's stem, an archive's folder name), with the
    traces' communication records when the merge takes them (as the warehouse gives them to ``synthtrace
    merge``)."""
    from dataclasses import fields
    takes_messages = "messages" in {f.name for f in fields(RunTables)}  # the merge of issue 22 reads them
    out = []
    for path in c.traces:
        name = path.parent.name if path.suffix == ".otf2" else path.stem  # an OTF2 run is its archive's folder
        reader = Otf2Trace(path) if path.suffix == ".otf2" else ParaverTrace(path)
        bursts, calls, summary = reader.read_tables(name)
        extra = {"messages": summary.messages, "communicators": summary.communicators} if takes_messages else {}
        out.append(RunTables(name, name, bursts, calls, **extra))
    return out


def ingested(traces: list[Path], root: Path, experiment: str) -> Path:
    """``traces`` (Paraver traces with their .pcf/.row, OTF2 archives' anchor files) copied into one campaign folder
    under ``root`` and ingested as ``experiment`` into the warehouse ``root / "wh"``, which is returned."""
    import shutil

    from synthtrace.pipelines.cli import main
    camp = root / experiment
    camp.mkdir(parents=True)
    for t in traces:
        if t.suffix == ".otf2":
            shutil.copytree(t.parent, camp / t.parent.name)
        else:
            for suffix in (".prv", ".pcf", ".row"):
                shutil.copy(t.with_suffix(suffix), camp)
    w = root / "wh"
    if main(["ingest", str(camp), "--experiment", experiment, "-w", str(w)]) != 0:
        raise RuntimeError(f"ingest of {camp} failed")
    return w


def mechanism_score(truth: pl.DataFrame, ref: str, other: str, matches: pl.DataFrame,
                    min_ns: int = 10_000) -> tuple[float, float, int, int, float | None, float]:
    """(right, right_span, scored, in_span, span_marked, moved) of the reference run ``ref``'s bursts against run
    ``other`` from the merge's ``matches`` (columns appl, task, thread, burst_seq, other_run_id, other_task,
    other_thread, other_burst_seq; a column whose name holds ``ambig`` (boolean, or non-null and non-zero) marks a
    match the merge could not place). A burst is right when matched to the burst of the same logical id (same task,
    thread and burst_seq there), or left unmatched when ``other`` has none. A **piece** (a burst cut by something
    that is no MPI call: a tracer flush, a lock wait; logical id with ``NO_MATCH_BIT``) is also right when matched
    within its **unit** (the work up to its thread's next MPI call, named by the next burst without the bit): the
    merge matches a phase split in one run and whole in the other many-to-one (DESIGN §6). A piece matched to a
    burst of another unit is wrong."""
    if "thread" not in truth.columns:
        truth = truth.with_columns(pl.lit(1, pl.Int32).alias("thread"))
    if "other_thread" not in matches.columns:
        matches = matches.with_columns(pl.lit(1, pl.Int32).alias("other_thread"))
    piece = (pl.col("logical_id") & NO_MATCH_BIT) != 0
    unit = (pl.when(piece).then(None).otherwise(pl.col("logical_id")).backward_fill()
            .over("run_name", "task", "thread", order_by="burst_seq"))
    t = truth.select("run_name", "task", "thread", "burst_seq", "logical_id", "span", "span_class", "duration_ns",
                     piece.alias("piece"), unit.alias("unit"))
    r = t.filter((pl.col("run_name") == ref) & (pl.col("duration_ns") >= min_ns)).drop("run_name")
    o = (t.filter(pl.col("run_name") == other).unique("logical_id", keep="first")
         .select(pl.col("logical_id"), pl.col("task").alias("true_task"), pl.col("thread").alias("true_thread"),
                 pl.col("burst_seq").alias("true_seq")))
    got = (t.filter(pl.col("run_name") == other)
           .select(pl.col("task").alias("other_task"), pl.col("thread").alias("other_thread"),
                   pl.col("burst_seq").alias("other_burst_seq"), pl.col("span_class").alias("got_class"),
                   pl.col("unit").alias("got_unit")))
    cols = ["task", "thread", "burst_seq", "other_task", "other_thread", "other_burst_seq"]
    mark = next((c for c in matches.columns if "ambig" in c), None)
    flag = mark is not None
    marked = ((pl.col(mark) if matches.schema[mark] == pl.Boolean else pl.col(mark).is_not_null() & (pl.col(mark) != 0))
              .fill_null(False).alias("ambiguous") if flag else None)
    m = (matches.filter(pl.col("other_run_id") == other)
         .select(*[pl.col(c).cast(pl.Int64) for c in cols], *([marked] if flag else [])))
    j = (r.with_columns(pl.col("task", "thread").cast(pl.Int64)).join(o, on="logical_id", how="left")
         .join(m, on=["task", "thread", "burst_seq"], how="left")
         .join(got.with_columns(pl.col("other_task", "other_thread").cast(pl.Int64)),
               on=["other_task", "other_thread", "other_burst_seq"], how="left"))
    exact = ((pl.col("true_seq").is_null() & pl.col("other_burst_seq").is_null())
             | ((pl.col("true_task") == pl.col("other_task")) & (pl.col("true_thread") == pl.col("other_thread"))
                & (pl.col("true_seq") == pl.col("other_burst_seq"))))
    exact = (exact | (pl.col("piece") & (pl.col("got_unit") == pl.col("unit")))).fill_null(False)
    swap = (pl.col("span").is_not_null() & (pl.col("got_class") == pl.col("span_class"))).fill_null(False)
    s = j.select(exact.mean().alias("right"), (exact | swap).mean().alias("span"),
                 pl.col("span").is_not_null().sum().alias("in_span"),
                 *([pl.col("ambiguous").filter(pl.col("span").is_not_null()).cast(pl.Float64).mean().alias("mark")]
                   if flag else [pl.lit(None, pl.Float64).alias("mark")]),
                 (pl.col("other_task") != pl.col("task")).fill_null(False).mean().alias("moved")).row(0)
    return float(s[0]), float(s[1]), j.height, int(s[2]), s[3], float(s[4])


def merge_campaign(c, merge=None) -> MechanismOutcome:
    """Merge the runs of campaign ``c`` with the library's merge (``merge(runs) -> MergeResult``, default
    :func:`synthtrace.tracelib.merge.merge_runs.merge_runs` with default options, as ``synthtrace merge``) and
    score it."""
    from synthtrace.tracelib.errors import SynthtraceError
    from synthtrace.tracelib.merge.merge_runs import merge_runs
    runs = read_campaign(c)
    spec = c.spec
    base = dict(mechanism=spec.mechanism, seed=spec.seed, ranks=spec.ranks, iterations=spec.iterations,
                runs=spec.runs, sim_s=getattr(c, "seconds", 0.0))
    t0 = time.perf_counter()
    try:
        res = (merge or merge_runs)(runs)
    except SynthtraceError as e:
        return MechanismOutcome(**base, right=None, right_span=None, scored=0, in_span=0, verdict="refused",
                                span_marked=None, moved=None, message=str(e)[:200], merge_s=time.perf_counter() - t0)
    dt = time.perf_counter() - t0
    ref = res.reference_run_id
    scores = [mechanism_score(c.truth, ref, r.run_id, res.matches) for r in runs if r.run_id != ref]
    worst = min(scores, key=lambda x: x[0])
    q = res.quality
    if "method" in q.columns:
        q = q.filter(pl.col("method") != "recorded")
    verdicts = set(q.get_column("verdict").drop_nulls().to_list()) if "verdict" in q.columns else set()
    verdict = max(verdicts, key=VERDICTS.index) if verdicts else "ok"
    return MechanismOutcome(**base, right=worst[0], right_span=min(x[1] for x in scores), scored=worst[2],
                            in_span=worst[3], verdict=verdict, span_marked=worst[4], moved=worst[5],
                            message=" / ".join(res.warnings)[:200], merge_s=dt)


def simulated(name: str, seed: int, out: Path, cache: Path | None = None, **sizes):
    """The campaign of mechanism ``name`` (``sizes``: ranks, iterations, runs), simulated into ``out``, or read
    from ``cache`` when the same generator (same source of simulator/mechanisms.py and mpi_exec.py) wrote it
    there before (else simulated into the cache)."""
    import hashlib

    import synthtrace.simulator.mechanisms as mech
    import synthtrace.simulator.mpi_exec as exe
    spec = mech.campaign(name, seed, **sizes)
    t0 = time.perf_counter()
    if cache is None:
        c = mech.simulate(out, spec)
    else:
        code = hashlib.sha1(b"".join(Path(m.__file__).read_bytes() for m in (mech, exe))).hexdigest()[:10]
        d = Path(cache) / f"{spec.name}_{spec.ranks}x{spec.iterations}x{spec.runs}_{code}"
        truth = d / spec.name / "truth.parquet"
        traces = [d / spec.name / f"{spec.app}.run{r}.prv" for r in range(spec.runs)]
        if truth.is_file() and all(t.is_file() for t in traces):
            c = mech.Campaign(spec, traces, pl.read_parquet(truth), [])
        else:
            c = mech.simulate(d, spec)
    c.seconds = time.perf_counter() - t0
    return c


def run_mechanism(name: str, seed: int, out: Path, merge=None, cache: Path | None = None,
                  **sizes) -> MechanismOutcome:
    """Simulate mechanism ``name`` (``sizes``: ranks, iterations, runs) into ``out`` (or take it from ``cache``,
    see :func:`simulated`), merge and score it."""
    return merge_campaign(simulated(name, seed, out, cache, **sizes), merge)
