"""Simulated multi-run counter campaigns for the archetype benchmark and acceptance test.

Built on the simulator's counter model (:mod:`synthtrace.simulator.counter_model`) and PMU constraint
(:mod:`synthtrace.simulator.pmu`): every kernel of the simulated applications runs as bursts of many sizes; each
logical burst is executed in ``n_runs`` runs (independent run-to-run noise), and each run records the fixed
counters plus its own programmable group. Ground truth is what the rules say on the burst's noise-free counters
(the simulator's convention: its labels are the rules applied to its counters, with margins built in).

Counter sets compared:

- ``full``: the reference run's every counter (what no real PMU can record at once);
- ``merged``: each counter from the run that recorded it (the reference run's own counters, the others
  transferred from their run: an ideal one-to-one match, so only run-to-run noise separates it from ``full``);
- ``run k``: run k's own counters only.

A burst whose counters cannot decide it is ``insufficient_counters``: an error for the F1 score.
"""
from __future__ import annotations

import numpy as np
import polars as pl
from sklearn.metrics import f1_score

from synthtrace.models.archetype_discovery import ArchetypeDiscovery
from synthtrace.models.archetypes import BURST_ARCHETYPES, INSUFFICIENT, ArchetypeRules
from synthtrace.tracelib.domain.counters import resolve
from synthtrace.tracelib.domain.machine import Machine, load_machine
from synthtrace.tracelib.domain.metrics import burst_metrics
from synthtrace.simulator.counter_model import COUNTERS, CounterModel, draw_noise_sizes
from synthtrace.simulator.kernels import KERNELS
from synthtrace.simulator.pmu import assign_counter_sets, runs_needed

RANKS_PER_SOCKET = 56.0


def _frame(counts: np.ndarray, dur: np.ndarray, keep: list[str] | None = None) -> pl.DataFrame:
    cols = {"run_id": "sim", "appl": 1, "task": 1, "thread": 1}
    df = pl.DataFrame({"burst_seq": np.arange(len(dur), dtype=np.int64), "start_ns": np.cumsum(dur) - dur,
                       "duration_ns": dur.astype(np.int64)}).with_columns(
        *[pl.lit(v).alias(k) for k, v in cols.items()])
    df = df.with_columns(
        pl.col("start_ns").cast(pl.Int64), (pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns")
    )
    names = keep if keep is not None else list(COUNTERS)
    return df.with_columns(pl.Series(n, counts[:, COUNTERS.index(n)]) for n in names)


def classify(frame: pl.DataFrame, machine: Machine) -> pl.Series:
    """Rule archetypes of a simulated bursts frame."""
    rules = ArchetypeRules(machine, ranks_per_socket=RANKS_PER_SOCKET, counter_map=resolve(frame)).fit()
    return rules.classify_bursts(burst_metrics(frame, machine, ranks_per_socket=RANKS_PER_SOCKET))["archetype"]


def macro_f1(truth: pl.Series, pred: pl.Series) -> float:
    labels = sorted(set(truth.to_list()) - {INSUFFICIENT})
    return float(f1_score(truth.to_list(), pred.fill_null(INSUFFICIENT).to_list(), labels=labels, average="macro",
                          zero_division=0))


def simulate(n_per_kernel: int = 400, seed: int = 0, slots: int = 4, machine: Machine | None = None) -> dict:
    """One campaign: truth labels, and per counter set (full, merged, run k) the frame to classify."""
    machine = machine or load_machine()
    rng = np.random.default_rng(seed)
    n_runs = runs_needed(slots)
    kernel = np.repeat(np.array([i for i, k in enumerate(KERNELS) if k.name != "mpi"]), n_per_kernel)  # not MPI's code
    ins = np.exp(rng.uniform(np.log(2e3), np.log(3e7), kernel.size))
    share = machine.dram_share(RANKS_PER_SOCKET)
    clean_model = CounterModel(machine, share, machine.frequency_ghz * 1e9, np.zeros(len(COUNTERS)))
    clean, clean_dur = clean_model.counts(kernel, ins, None)
    runs = []
    for _ in range(n_runs):
        freq = machine.frequency_ghz * 1e9 * (1 + rng.normal(0, 0.004))
        model = CounterModel(machine, share, freq, draw_noise_sizes(rng))
        runs.append(model.counts(kernel, ins, rng))
    sets = assign_counter_sets(n_runs, slots, rng)
    ref_counts, ref_dur = runs[0]
    merged = ref_counts.copy()
    for r in range(1, n_runs):  # counters the reference did not record come from the run that did
        for name in sets[r]:
            if name not in sets[0]:
                merged[:, COUNTERS.index(name)] = runs[r][0][:, COUNTERS.index(name)]
    recorded = sorted({c for s in sets for c in s}, key=COUNTERS.index)
    frames = {"full": _frame(ref_counts, ref_dur), "merged": _frame(merged, ref_dur, recorded)}
    for r in range(n_runs):
        frames[f"run {r}"] = _frame(runs[r][0], runs[r][1], sets[r])
    truth = classify(_frame(clean, clean_dur), machine)
    return {"truth": truth, "frames": frames, "sets": sets, "machine": machine,
            "intent": intended(kernel, clean[:, COUNTERS.index("PAPI_TOT_INS")], clean_dur),
            "kernel": [KERNELS[k].name for k in kernel]}


#: typical real counter sets (issue 15): what Extrae/PAPI campaigns record in one run
SUBSETS: dict[str, tuple[str, ...]] = {
    "full": COUNTERS,
    "IPC + caches + branches": ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_L3_TCM",
                                "PAPI_BR_INS", "PAPI_BR_MSP"),
    "cycles + LLC only": ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L3_TCM"),
}


def intended(kernel: np.ndarray, instructions: np.ndarray, duration_ns: np.ndarray) -> list[str | None]:
    """The simulator's own truth per burst: the archetype its kernel is built to show, ``fine_grain`` when the
    burst is shorter than 10 µs or 1e4 instructions (DESIGN §7), independent of how the rules decide. Long bursts
    of kernels built only as glue (intent ``fine_grain``: poll, pack, dot) have no intended class: None."""
    short = (duration_ns < 10_000) | (instructions < 1e4)
    out = [("fine_grain" if s else KERNELS[k].intent) for k, s in zip(kernel, short)]
    return [None if (not s and i == "fine_grain") else i for i, s in zip(out, short)]


def cascade(frame: pl.DataFrame, machine: Machine) -> pl.Series:
    """The first-match cascade these rules replaced (baseline): rules 1–9 in order, the first that holds wins,
    ``insufficient_counters`` as soon as a rule before it is undecided; nearest by margin when none holds."""
    from synthtrace.models.archetypes import burst_rules
    rules = ArchetypeRules(machine, ranks_per_socket=RANKS_PER_SOCKET).fit()
    bm = burst_metrics(frame, machine, ranks_per_socket=RANKS_PER_SOCKET)
    label = pl.when(pl.lit(False)).then(pl.lit(None, pl.String))
    for r in burst_rules(rules.thresholds_, rules.ridge_):
        h = r.condition.holds()
        label = label.when(h.is_null()).then(pl.lit(INSUFFICIENT)).when(h).then(pl.lit(r.archetype))
    nearest = rules.classify_bursts(bm)["archetype"]  # all decided and none holds: both pick the nearest rule
    return bm.select(label.alias("a"))["a"].fill_null(nearest.alias("a")).alias("archetype")


def agreement(n_per_kernel: int = 200, seeds: tuple[int, ...] = (0, 1, 2)) -> pl.DataFrame:
    """Agreement with the simulator's truth (:func:`intended`) per counter subset, scored rules vs cascade.

    Rows: seed, counter_set, classifier (``evidence`` / ``cascade``), accuracy (duration-weighted and per
    burst), macro_f1, insufficient (share of burst time), branchy (share of the mispredicting kernel's long
    bursts labelled bad_speculation)."""
    rows = []
    for seed in seeds:
        camp = simulate(n_per_kernel=n_per_kernel, seed=seed)
        m, full = camp["machine"], camp["frames"]["full"]
        scored = pl.Series(camp["intent"]).is_not_null()
        full = full.filter(scored)
        truth = pl.Series(camp["intent"]).filter(scored)
        branchy = (pl.Series(camp["kernel"]).filter(scored) == "branchy_mispredict") & (truth != "fine_grain")
        w = full["duration_ns"].cast(pl.Float64)
        for name, keep in SUBSETS.items():
            frame = full.select(*[c for c in full.columns if c not in COUNTERS or c in keep])
            for clf, pred in (("evidence", classify(frame, m)), ("cascade", cascade(frame, m))):
                ok = (pred == truth)
                rows.append({"seed": seed, "counter_set": name, "classifier": clf,
                             "accuracy_time": float((w * ok).sum() / w.sum()), "accuracy": float(ok.mean()),
                             "macro_f1": macro_f1(truth, pred),
                             "insufficient": float((w * (pred == INSUFFICIENT)).sum() / w.sum()),
                             "branchy": float((pred.filter(branchy) == "bad_speculation").mean())})
    return pl.DataFrame(rows)


def run_campaign(quick: bool = False, seed: int = 0) -> tuple[list[dict], dict]:
    """Scores for the benchmark: one row per campaign seed, and discovery figures on the full counters."""
    rows = []
    disc: dict = {}
    for s in ([seed] if quick else [seed, seed + 1, seed + 2]):
        camp = simulate(n_per_kernel=150 if quick else 400, seed=s)
        m = camp["machine"]
        truth = camp["truth"]
        scores = {name: macro_f1(truth, classify(f, m)) for name, f in camp["frames"].items()}
        rows.append({"app": f"kernels (seed {s})", "units": truth.len(), "merged": scores["merged"],
                     "full": scores["full"], "single": [scores[k] for k in scores if k.startswith("run ")],
                     "labels": sorted(set(truth.to_list()) & set(BURST_ARCHETYPES))})
        if not disc:
            bm = burst_metrics(camp["frames"]["full"], m, ranks_per_socket=RANKS_PER_SOCKET)
            d = ArchetypeDiscovery(n_clusters=24, machine=m, ranks_per_socket=RANKS_PER_SOCKET,
                                   n_bootstrap=3 if quick else 10, random_state=s).fit(bm)
            disc = d.summary()
    return rows, disc


# ------------------------------------------------------------------------------------------- end to end
def _pairs(truth_b: pl.DataFrame, truth_c: pl.DataFrame, truth_p: pl.DataFrame,
           arch: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """(unit, truth, pred) for every burst, MPI call and phase the truth or the prediction labels (``arch``: the
    analysis' archetypes, in memory or as the committed scan ``jobs.analyse`` hands back)."""
    arch = arch.collect() if isinstance(arch, pl.LazyFrame) else arch
    kb, kc = ["task", "thread", "burst_seq"], ["task", "thread", "call_seq"]
    b = truth_b.select(*kb, pl.col("archetype").alias("truth")).join(
        arch.filter(pl.col("unit") == "burst").select(*kb, pl.col("archetype").alias("pred")), on=kb, how="left")
    c = (
        truth_c.filter(pl.col("archetype").is_not_null())
        .select(*kc, pl.col("archetype").alias("truth"))
        .join(
            arch.filter(pl.col("unit") == "mpi").select(*kc, pl.col("archetype").alias("pred")),
            on=kc,
            how="full",
            coalesce=True,
        )
    )
    p = truth_p.select("phase", pl.col("archetype").alias("truth")).join(
        arch.filter(pl.col("unit") == "phase").select("phase", pl.col("archetype").alias("pred")), on="phase",
        how="full", coalesce=True)
    return pl.concat([b.select(pl.lit("burst").alias("unit"), "truth", "pred"),
                      c.select(pl.lit("mpi").alias("unit"), "truth", "pred"),
                      p.select(pl.lit("phase").alias("unit"), "truth", "pred")])


def f1_13(pairs: pl.DataFrame) -> float:
    """Macro-F1 over the 13 archetypes present in the truth (missing and undecided predictions are errors)."""
    from synthtrace.models.archetypes import ARCHETYPES
    t = pairs["truth"].fill_null("none").to_list()
    labels = sorted(set(t) & set(ARCHETYPES))
    return float(
        f1_score(t, pairs["pred"].fill_null("none").to_list(), labels=labels, average="macro", zero_division=0)
    )


def pipeline_campaign(root: str, patterns: tuple[str, ...] = ("halo", "cg", "master_worker", "wavefront", "transpose"),
                      ranks: int = 8, iterations: int = 4, seed: int = 1) -> dict:
    """Simulate Paraver traces of several apps (simulator with these rules as labeller), ingest them, merge
    each experiment, classify, and score against the ground truth.

    Returns ``{"pairs": {counter set: frame of (unit, truth, pred)}, "n_runs": runs per app}``; counter sets are
    ``merged``, ``full`` (the reference run's every counter, from the ground truth) and ``run k``.
    """
    from pathlib import Path

    from synthtrace.models.analysis import analyse
    from synthtrace.pipelines.jobs import analyse as analyse_experiment
    from synthtrace.pipelines.jobs import merge_experiment
    from synthtrace.models.archetypes import simulator_labeller
    from synthtrace.simulator.engine import ExperimentSpec, simulate_experiment
    from synthtrace.simulator.truth import TruthStore
    from synthtrace.simulator.variation import node_count
    from synthtrace.tracelib.domain.metrics import ranks_per_socket
    from synthtrace.warehouse.runs import runs_table
    from synthtrace.warehouse.ingest import ingest_trace
    from synthtrace.warehouse.layout import Warehouse

    base = Path(root)
    m = load_machine()
    units = pl.DataFrame({"appl": [1] * ranks, "task": list(range(1, ranks + 1)), "thread": [1] * ranks})
    rps = ranks_per_socket(units, m, node_count(ranks, min(ranks, m.cores_per_node)))
    labeller = simulator_labeller(m, ranks_per_socket=rps)
    truth = TruthStore(base / "sim" / "ground_truth")
    wh = Warehouse(base / "wh")
    results = {}
    for pat in patterns:
        results[pat] = simulate_experiment(base / "sim", ExperimentSpec(app=pat, pattern=pat, ranks=ranks,
                                           iterations=iterations, seed=seed), truth, labeller=labeller)
    truth.close()
    pairs: dict[str, list[pl.DataFrame]] = {}
    gt = base / "sim" / "ground_truth"
    n_runs = 0
    for pat, res in results.items():
        for f in res.traces:
            ingest_trace(wh, f, experiment=pat)
        merge_experiment(wh.experiment(pat))
        tb = pl.read_parquet(gt / "bursts" / f"{pat}.parquet")
        tc = pl.read_parquet(gt / "mpi_calls" / f"{pat}.parquet")
        tp = pl.read_parquet(gt / "phases" / f"{pat}.parquet")
        runs = runs_table(wh).filter(pl.col("experiment") == pat).sort("run_name")
        n_runs = max(n_runs, runs.height)
        ref = runs["run_name"][0]
        sel = lambda df, name: df.filter(pl.col("run_name") == name)  # noqa: E731
        merged = analyse_experiment(wh.experiment(pat), discover=False).result
        pairs.setdefault("merged", []).append(_pairs(sel(tb, ref), sel(tc, ref), sel(tp, ref), merged.archetypes))
        # the reference run with every counter it would have recorded with an unlimited PMU
        ref_calls = pl.read_parquet(wh.run_dir(runs["run_id"][0]) / "mpi_calls.parquet")
        full_b = sel(tb, ref).drop("archetype", "phase").with_columns(pl.lit(runs["run_id"][0]).alias("run_id"))
        full = analyse(full_b, ref_calls, machine=m, discover=False)
        pairs.setdefault("full", []).append(_pairs(sel(tb, ref), sel(tc, ref), sel(tp, ref), full.archetypes))
        for i, (rid, name) in enumerate(zip(runs["run_id"].to_list(), runs["run_name"].to_list())):
            rb = pl.concat([pl.read_parquet(p) for p in sorted((wh.run_dir(rid) / "bursts").glob("*.parquet"))],
                           how="diagonal_relaxed")
            rc = pl.read_parquet(wh.run_dir(rid) / "mpi_calls.parquet")
            single = analyse(rb, rc, machine=m, discover=False)
            pairs.setdefault(f"run {i}", []).append(
                _pairs(sel(tb, name), sel(tc, name), sel(tp, name), single.archetypes)
            )
    return {"pairs": {k: pl.concat(v) for k, v in pairs.items()}, "n_runs": n_runs}
