"""The merge's stress conditions in the project's simulator (issue 12): two runs of 4 ranks per condition, written
as Paraver traces and read back, with the simulator's ground-truth logical ids in the convention of
:func:`testing.merge_campaigns.score` (used by tests/test_merge_stress.py and benchmarks/bench_merge_stress.py)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl

from synthtrace.simulator import ExperimentSpec, TruthStore, Variation, simulate_experiment
from synthtrace.simulator.counter_model import COUNTERS
from synthtrace.tracelib.merge.merge_runs import RunTables
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
