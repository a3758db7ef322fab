"""Alignment and merge of multi-run traces (DESIGN §6, issue 4): edge cases, real LULESH runs, CLI, bad input."""
from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from synthtrace.tracelib.merge.align import AlignConfig, align_runs, sequence_table
from synthtrace.tracelib.merge.merge_runs import (
    MergeOptions,
    NoCommonCounterError,
    NotSameProgramError,
    RunTables,
    TimingOnlyWarning,
    TooFewRunsError,
    UnknownReferenceError,
    merge_runs,
)
from synthtrace.warehouse import Warehouse

from testing.merge_campaigns import make_runs, true_matches
from testing.traces import LULESH_A, LULESH_B, PRIME

DROPPED = ["PAPI_REF_CYC", "LONGEST_LAT_CACHE:MISS"]
KEYS = ["appl", "task", "thread", "burst_seq"]
real = pytest.mark.skipif(not LULESH_A.is_file(), reason="real traces not found")


# ----------------------------------------------------------------------------------------------- helpers
def thread_tables(spec: list[tuple[str, int | None, float]], run_id: str = "r", gap_ns: int = 2_000
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Bursts and calls of one thread: ``spec`` = [(closing call, peer, instructions)], 1 ns per instruction.

    Call sites: one per call name (a loop calls MPI_Test or MPI_Recv from one place).
    """
    n = len(spec)
    ins = np.array([s[2] for s in spec], dtype=np.int64)
    dur = np.maximum(ins, 100)
    start = np.cumsum(np.r_[0, (dur + gap_ns)[:-1]]) + 1_000
    end = start + dur
    names = [c for c, _, _ in spec]
    kind = ["collective" if c == "MPI_Allreduce" else "point_to_point" for c in names]
    site = [f"f (x.c:{sorted(set(names)).index(c)})" for c in names]
    one = pl.Series([1] * n, dtype=pl.Int32)
    keys = {"run_id": [run_id] * n, "appl": one, "task": one, "thread": one}
    bursts = pl.DataFrame({**keys, "burst_seq": np.arange(n), "cpu": one, "start_ns": start, "end_ns": end,
                           "duration_ns": end - start, "mpi_call": names, "call_site": site,
                           "PAPI_TOT_INS": ins, "PAPI_TOT_CYC": (ins * 1.5).astype(np.int64)})
    calls = pl.DataFrame({**keys, "call_seq": np.arange(n), "cpu": one, "mpi_call": names, "mpi_kind": kind,
                          "start_ns": end, "end_ns": end + gap_ns, "duration_ns": np.full(n, gap_ns),
                          "bytes_sent": np.zeros(n, np.int64), "bytes_recv": np.zeros(n, np.int64),
                          "peer": pl.Series([p for _, p, _ in spec], dtype=pl.Int32),
                          "n_messages": pl.Series([1] * n, dtype=pl.Int32),
                          "comm": pl.Series([1 if k == "collective" else None for k in kind], dtype=pl.Int64),
                          "root": pl.Series([None] * n, dtype=pl.Int32), "tag": pl.Series([None] * n, dtype=pl.Int64),
                          "call_site": site})
    return bursts, calls


def align_pair(ref_spec, other_spec) -> list[int | None]:
    """other burst_seq matched to each reference burst."""
    rb, rc = thread_tables(ref_spec, "ref")
    ob, oc = thread_tables(other_spec, "oth")
    feats = ["PAPI_TOT_INS", "PAPI_TOT_CYC"]
    m = align_runs(sequence_table(rb, rc, feats), sequence_table(ob, oc, feats), feats)
    return m.get_column("other_seq").to_list()


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


def run_cli(capsys, *args) -> tuple[int, str, str]:
    from synthtrace.pipelines.cli import main
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def read_lulesh(path: Path, run_id: str) -> RunTables:
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
    b, c, _ = ParaverTrace(path).read_tables(run_id)
    return RunTables(run_id, path.stem, b, c)


# ----------------------------------------------------------------------------------------------- alignment edge cases
def test_identical_sequences_align_one_to_one():
    spec = [("MPI_Irecv", 2, 5_000), ("MPI_Isend", 2, 90_000), ("MPI_Allreduce", None, 400_000)] * 3
    assert align_pair(spec, spec) == list(range(len(spec)))


def test_polling_loop_of_other_length_keeps_compute_bursts_paired():
    # ref polls 4 times after the compute burst, other once; the compute bursts (50k ins) must pair up
    ref = [("MPI_Irecv", 2, 3_000), ("MPI_Test", None, 50_000), *[("MPI_Test", None, 900)] * 4,
           ("MPI_Waitall", None, 20_000), ("MPI_Allreduce", None, 300_000)]
    oth = [("MPI_Irecv", 2, 3_000), ("MPI_Test", None, 50_000), ("MPI_Test", None, 900),
           ("MPI_Waitall", None, 20_000), ("MPI_Allreduce", None, 300_000)]
    m = align_pair(ref, oth)
    assert m[0] == 0 and m[1] == 1 and m[6] == 3 and m[7] == 4
    assert sum(x is not None for x in m[2:6]) == 1  # one polling burst pairs with the single one of the other run


def test_polling_loop_longer_in_other_run():
    ref = [("MPI_Test", None, 70_000), ("MPI_Test", None, 800), ("MPI_Send", 3, 40_000)] * 2
    oth = [("MPI_Test", None, 70_000), *[("MPI_Test", None, 800)] * 5, ("MPI_Send", 3, 40_000)] * 2
    m = align_pair(ref, oth)
    assert [m[0], m[2], m[3], m[5]] == [0, 6, 7, 13]


def test_any_source_order_swapped_pairs_by_position():
    # the two receives of an ANY_SOURCE loop get their messages in the other order: same loose signature
    ref = [("MPI_Recv", 2, 60_000), ("MPI_Recv", 3, 61_000), ("MPI_Allreduce", None, 200_000)]
    oth = [("MPI_Recv", 3, 60_000), ("MPI_Recv", 2, 61_000), ("MPI_Allreduce", None, 200_000)]
    assert align_pair(ref, oth) == [0, 1, 2]


def test_missing_and_extra_bursts():
    ref = [("MPI_Isend", 2, 10_000), ("MPI_Iprobe", None, 30_000), ("MPI_Isend", 3, 80_000),
           ("MPI_Allreduce", None, 500_000)]
    oth = [("MPI_Isend", 2, 10_000), ("MPI_Isend", 3, 80_000), ("MPI_Comm_rank", None, 7_000),
           ("MPI_Allreduce", None, 500_000)]
    assert align_pair(ref, oth) == [0, None, 1, 3]


def test_implausible_pair_is_rejected():
    # same call, but 100x the instructions: leave it unmatched rather than guess
    ref = [("MPI_Send", 2, 10_000), ("MPI_Send", 2, 2_000_000), ("MPI_Allreduce", None, 300_000)]
    oth = [("MPI_Send", 2, 10_000), ("MPI_Send", 2, 20_000), ("MPI_Allreduce", None, 300_000)]
    assert align_pair(ref, oth) == [0, None, 2]


def test_windows_that_start_at_different_iterations():
    it = [("MPI_Irecv", 2, 2_000), ("MPI_Isend", 2, 150_000), ("MPI_Wait", None, 40_000),
          ("MPI_Allreduce", None, 900_000)]
    ref = it[2:] + it * 2  # starts mid-iteration
    oth = it * 4
    m = align_pair(ref, oth)
    assert m == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


# ----------------------------------------------------------------------------------------------- synthetic campaign
@pytest.fixture(scope="module")
def campaign():
    runs = make_runs(n_tasks=6, n_iters=30, n_runs=4, seed=3, max_polls=6, p_swap=0.5, p_missing=0.05,
                     p_extra=0.01)
    res = merge_runs([RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs])
    return runs, res


def test_synthetic_campaign_matches_true_logical_bursts(campaign):
    runs, res = campaign
    ref = runs[0]
    for other in runs[1:]:
        truth = true_matches(ref, other)
        j = (res.matches.filter(pl.col("other_run_id") == other.run_id)
             .join(truth, on=KEYS).filter((pl.col("duration_ns") >= 10_000) & pl.col("true_seq").is_not_null()))
        correct = (j.get_column("other_burst_seq") == j.get_column("true_seq")).fill_null(False).mean()
        assert correct >= 0.995, (other.run_id, correct)
        # bursts the other run does not have are left unmatched, not paired with a neighbour
        lone = res.matches.filter(pl.col("other_run_id") == other.run_id).join(truth, on=KEYS).filter(
            (pl.col("duration_ns") >= 10_000) & pl.col("true_seq").is_null())
        assert lone.get_column("other_burst_seq").is_not_null().mean() <= 0.5 if lone.height else True


def test_synthetic_campaign_errors_close_to_oracle(campaign):
    runs, res = campaign
    ref = runs[0]
    by_id = {r.run_id: r for r in runs}
    transferred = res.quality.filter(pl.col("method") != "recorded")
    assert transferred.height == 6
    for q in transferred.iter_rows(named=True):
        c, src = q["counter"], by_id[q["source_run_id"]]
        oracle = true_matches(ref, src).join(
            src.bursts.select("appl", "task", "thread", pl.col("burst_seq").alias("true_seq"), pl.col(c).alias("_o")),
            on=["appl", "task", "thread", "true_seq"], how="left")
        j = (res.merged.select(*KEYS, c).join(ref.truth.select(*KEYS, pl.col(c).alias("_t")), on=KEYS)
             .join(oracle.select(*KEYS, "_o", "duration_ns"), on=KEYS)
             .filter((pl.col("duration_ns") >= 10_000) & (pl.col("_t") > 0) & pl.col("_o").is_not_null()))
        err = ((pl.col(c) - pl.col("_t")).abs() / pl.col("_t"))
        oerr = ((pl.col("_o") - pl.col("_t")).abs() / pl.col("_t"))
        s = j.select(err.median().alias("m"), err.quantile(0.95).alias("p"), oerr.median().alias("om"),
                     oerr.quantile(0.95).alias("op"), pl.col(c).is_not_null().mean().alias("cov")).row(0, named=True)
        assert s["cov"] >= 0.99, (c, s)
        assert s["m"] <= 1.1 * s["om"] + 1e-4, (c, s)
        assert s["p"] <= 1.5 * s["op"] + 1e-4, (c, s)
        # the leave-one-out estimate is in the right range of the true error
        assert q["estimated_error"] is not None and q["estimated_error"] < 10 * max(s["m"], 0.01)


def test_merged_frame_shape(campaign):
    runs, res = campaign
    m = res.merged
    assert m.height == runs[0].bursts.height
    for c in ["PAPI_TOT_INS", "PAPI_L1_DCM", "PAPI_L3_TCM", "PAPI_FP_OPS", "PAPI_LD_INS"]:
        assert c in m.columns
    assert m.get_column("match_score").drop_nulls().is_between(0, 1).all()
    assert not m.get_column("estimated").any()
    # unmatched bursts carry NULL (never a silent guess) and a NULL match score
    un = m.filter(pl.col("PAPI_L3_TCM").is_null())
    assert un.height > 0 and un.get_column("match_score").is_null().all()
    # here the per-burst rates are random: nothing co-varies, so no counter is rescaled by another; the plan
    # chosen by leave-one-out copies values or follows the instructions
    assert set(res.quality.get_column("method")) <= {"recorded", "transferred", "transferred_per_ins"}
    assert set(res.quality.get_column("verdict")) == {"ok"}


def test_estimates_are_flagged():
    runs = make_runs(n_tasks=2, n_iters=10, n_runs=2, seed=5, p_missing=0.3)
    tables = [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]
    plain = merge_runs(tables)
    est = merge_runs(tables, MergeOptions(estimate_unmatched=True))
    c = "PAPI_L3_TCM"
    was_null = plain.merged.get_column(c).is_null()
    assert was_null.any()
    assert est.merged.filter(was_null).get_column("estimated").all()
    assert not est.merged.filter(~was_null).get_column("estimated").any()
    assert est.merged.get_column(c).null_count() < plain.merged.get_column(c).null_count()
    assert est.quality.filter(pl.col("counter") == c).get_column("estimated_share").item() > 0


def test_rescaling_both_ways():
    runs = make_runs(n_tasks=2, n_iters=10, n_runs=2, seed=6)
    tables = [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]
    on = merge_runs(tables, MergeOptions(rescale=True)).quality.filter(pl.col("method") != "recorded")
    off = merge_runs(tables, MergeOptions(rescale=False)).quality.filter(pl.col("method") != "recorded")
    # rescaling only where a counter's rate co-varies with a reference counter's (here the per-burst rates are
    # random, so possibly nowhere); what is picked is named with its exponent
    picked = on.filter(pl.col("method") == "transferred_rescaled")
    assert all(re.fullmatch(r"PAPI_TOT_INS\^\d\.\d\d x PAPI_TOT_CYC\^\d\.\d\d", x)
               for x in picked.get_column("rescaled_by"))
    # without rescaling a counter is copied or follows the work (instructions ratio), never a co-varying counter
    assert off.get_column("method").is_in(["transferred", "transferred_per_ins"]).all()
    assert off.filter(pl.col("method") == "transferred_per_ins").get_column("rescaled_by").eq("PAPI_TOT_INS").all()


# ----------------------------------------------------------------------------------------------- simulated experiments
# Acceptance of issue 4 on `synthtrace simulate` output: every pattern, >= 4 runs, the simulator's default variation
# (polling loops whose length differs between runs, MPI_ANY_SOURCE arrival order, housekeeping bursts present in
# some runs only, OS noise), ingested and merged through the CLI, scored against the ground truth.
SIM_PATTERNS = ["halo", "cg", "master_worker", "wavefront", "transpose"]
SIM_ARGS = {"--ranks": 6, "--iterations": 10, "--runs": 4, "--seed": 6}
MIN_LONG_NS = 10_000  # bursts of at least 10 us are scored (the oracle's min_duration_ns)
MIN_MATCHED_RIGHT = 0.995
MIN_COVERAGE = 0.99
MAX_MEDIAN_VS_ORACLE = 1.1
MAX_P95_VS_ORACLE = 1.5


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> tuple[Path, Path]:
    """(simulation folder with ground_truth/, warehouse) for all patterns, every trace ingested."""
    from synthtrace.pipelines.cli import main
    root = tmp_path_factory.mktemp("simulated")
    sim, wh = root / "sim", root / "wh"
    assert main(["simulate", str(sim), "--no-labels", *[str(x) for kv in SIM_ARGS.items() for x in kv]]) == 0
    assert main(["ingest", str(sim), "-w", str(wh)]) == 0  # one experiment per folder: the pattern's name
    return sim, wh


def _logical_ids(truth: pl.DataFrame, run_name: str, seq: str = "burst_seq", lid: str = "logical_id") -> pl.DataFrame:
    """appl, task, thread, ``seq``, ``lid``: the logical burst of each burst of one run."""
    return truth.filter(pl.col("run_name") == run_name).select(
        "appl", "task", "thread", pl.col("burst_seq").alias(seq), pl.col("logical_id").alias(lid))


@pytest.mark.parametrize("pattern", SIM_PATTERNS)
def test_simulated_experiment_meets_acceptance(simulated, pattern, capsys):
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.runs import experiment_runs, run_bursts
    sim, wh = simulated
    code, _, err = run_cli(capsys, "merge", pattern, "-w", wh)
    assert code == 0, err
    exp_dir = wh / "experiments" / pattern
    merged = pl.read_parquet(exp_dir / "merged_bursts.parquet")
    quality = pl.read_parquet(exp_dir / "merge_quality.parquet")
    matches = pl.read_parquet(exp_dir / "merge_matches.parquet")
    truth = pl.read_parquet(sim / "ground_truth" / "bursts" / f"{pattern}.parquet")
    oracle = pl.read_parquet(sim / "ground_truth" / "oracle.parquet").filter(pl.col("experiment") == pattern)
    runs = pl.read_parquet(sim / "ground_truth" / "runs.parquet").filter(pl.col("experiment") == pattern)
    ref = quality.get_column("reference_run")[0]
    assert runs.height >= 4
    assert ref == runs.filter(pl.col("is_reference")).get_column("run_name").item()  # true counters are the ref's
    ref_truth = truth.filter(pl.col("run_name") == ref)
    long_ref = ref_truth.filter(pl.col("duration_ns") >= MIN_LONG_NS).select(*KEYS, "logical_id")

    # 1. alignment: long reference bursts that have a counterpart in the other run are matched to it
    right, scored = 0, 0
    for other in runs.filter(~pl.col("is_reference")).get_column("run_name"):
        counterpart = _logical_ids(truth, other).select("logical_id").unique()
        m = (
            long_ref.join(counterpart, on="logical_id", how="semi")
            .join(
                matches.filter(pl.col("other_run") == other).select(
                    *KEYS, pl.col("other_burst_seq").alias("other_seq")
                ),
                on=KEYS,
                how="left",
            )
            .join(
                _logical_ids(truth, other, "other_seq", "matched_id"),
                on=["appl", "task", "thread", "other_seq"],
                how="left",
            )
        )
        scored += m.height
        right += int((m.get_column("matched_id") == m.get_column("logical_id")).fill_null(False).sum())
    assert scored > 0
    assert right / scored >= MIN_MATCHED_RIGHT, (pattern, right, scored)

    # 2. every transferred counter against the truth and against the oracle (the source run's own value of the
    # same logical burst: what a perfect alignment would transfer)
    run_ids = dict(experiment_runs(Warehouse(wh), pattern).select("run_name", "run_id").iter_rows())
    transferred = quality.filter(pl.col("method") != "recorded")
    assert transferred.height > 0
    for q in transferred.iter_rows(named=True):
        c, src = q["counter"], q["source_run"]
        row = oracle.filter((pl.col("counter") == c) & (pl.col("run_name") == src))
        assert row.get_column("recorded").item(), (c, src)  # transferred from a run that recorded it
        src_values = (run_bursts(Warehouse(wh), run_ids[src]).select(*KEYS, pl.col(c).alias("_oracle"))
                      .join(_logical_ids(truth, src), on=KEYS).select("logical_id", "_oracle"))
        j = (long_ref.join(ref_truth.select(*KEYS, pl.col(c).alias("_true")), on=KEYS)
             .join(src_values, on="logical_id")  # inner join: bursts with a counterpart in the source run
             .join(merged.select(*KEYS, pl.col(c).alias("_merged")), on=KEYS))
        coverage = j.get_column("_merged").is_not_null().mean()
        assert coverage >= MIN_COVERAGE, (c, coverage)
        scored_c = j.filter((pl.col("_true") > 0) & (pl.col("_oracle") > 0))
        oracle_err = ((pl.col("_oracle") - pl.col("_true")).abs() / pl.col("_true")).cast(pl.Float64)
        # the oracle rebuilt here is the ground truth's (same bursts, same mean error)
        assert scored_c.height == row.get_column("n_bursts").item()
        if scored_c.height == 0:  # a counter that stays 0 (e.g. no vector work in this app): transferred as 0
            assert (j.get_column("_merged").drop_nulls() == 0).all(), c
            continue
        assert scored_c.select(oracle_err.mean()).item() == pytest.approx(
            row.get_column("mean_abs_rel_error").item(), rel=1e-9, abs=1e-12)
        merge_err = ((pl.col("_merged") - pl.col("_true")).abs() / pl.col("_true")).cast(pl.Float64)
        e = scored_c.filter(pl.col("_merged").is_not_null()).select(
            merge_err.median().alias("med"), merge_err.quantile(0.95).alias("p95"),
            oracle_err.median().alias("o_med"), oracle_err.quantile(0.95).alias("o_p95")).row(0, named=True)
        assert e["med"] <= MAX_MEDIAN_VS_ORACLE * e["o_med"] + 1e-12, (c, e)
        assert e["p95"] <= MAX_P95_VS_ORACLE * e["o_p95"] + 1e-12, (c, e)


# ----------------------------------------------------------------------------------------------- errors (pure)
def test_bad_input_errors_pure():
    runs = make_runs(n_tasks=3, n_iters=4, n_runs=2, seed=1)
    t = [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls) for r in runs]
    with pytest.raises(TooFewRunsError):
        merge_runs(t[:1])
    with pytest.raises(UnknownReferenceError):
        merge_runs(t, MergeOptions(reference="nope"))
    fewer = make_runs(n_tasks=2, n_iters=4, n_runs=1, seed=1)[0]
    with pytest.raises(NotSameProgramError, match="2 vs 3 tasks|3 vs 2 tasks"):
        merge_runs([t[0], RunTables("x", "x", fewer.bursts, fewer.mpi_calls)])
    renamed = t[1].bursts.rename({c: f"OTHER_{c}" for c in runs[1].counters})
    no_common = RunTables("y", "y", renamed, t[1].mpi_calls)
    # no counter in common and no point-to-point message to check the match by (calls without partners): refused
    mute = [RunTables(r.run_id, r.run_name, r.bursts, r.mpi_calls.with_columns(pl.lit(None, pl.Int32).alias("peer")))
            for r in (t[0], no_common)]
    with pytest.raises(NoCommonCounterError, match="'synth.run0' .* and 'y' .* no counter in common and no point"):
        merge_runs(mute)
    with pytest.warns(TimingOnlyWarning):
        res = merge_runs(mute, MergeOptions(allow_timing_only=True))
    assert res.matches.get_column("score").drop_nulls().max() <= AlignConfig().timing_only_factor
    assert set(res.quality.filter(pl.col("method") != "recorded").get_column("verdict")) == {"suspect"}
    # issue 22: the logical messages (timing-free) check the match instead: merged, not refused
    with pytest.warns(TimingOnlyWarning):
        res = merge_runs([t[0], no_common])
    assert res.matches.get_column("score").drop_nulls().max() <= AlignConfig().timing_only_factor
    # a different program: same tasks, unrelated MPI structure
    other = t[1].bursts.with_columns(
        pl.lit("MPI_Bcast").alias("mpi_call"), pl.lit("elsewhere (y.c:1)").alias("call_site")
    )
    calls = t[1].mpi_calls.with_columns(
        pl.lit("MPI_Bcast").alias("mpi_call"), pl.lit("elsewhere (y.c:1)").alias("call_site")
    )
    with pytest.raises(NotSameProgramError, match="align by MPI structure"):
        merge_runs([t[0], RunTables("z", "z", other, calls)])


# ----------------------------------------------------------------------------------------------- real data
@real
def test_lulesh_merge_recovers_dropped_counters():
    """7+1 run without REF_CYC and LLC misses, merged from the 4+4 run; compared with what 7+1 really recorded."""
    full = read_lulesh(LULESH_B, "B")
    other = read_lulesh(LULESH_A, "A")
    dropped = RunTables("B", full.run_name, full.bursts.drop(DROPPED), full.mpi_calls)
    res = merge_runs([other, dropped], MergeOptions(reference=full.run_name), experiment="lulesh")
    q = {r["counter"]: r for r in res.quality.iter_rows(named=True)}
    truth = full.bursts.select(*KEYS, "duration_ns", *[pl.col(c).alias(f"true_{c}") for c in DROPPED])
    j = res.merged.join(truth, on=KEYS).filter(pl.col("duration_ns") >= 10_000)
    # the matching itself: the cross-run difference of a counter both runs recorded
    cross_ins = q["PAPI_TOT_INS"]["cross_run_diff"]
    cross_cyc = q["PAPI_TOT_CYC"]["cross_run_diff"]
    assert cross_ins < 0.01  # instructions are deterministic: matched bursts are the same code
    lines = [
        f"cross-run difference (median, bursts >= 10 us): PAPI_TOT_INS {cross_ins:.2%}, PAPI_TOT_CYC {cross_cyc:.2%}"
    ]
    for c in DROPPED:
        err = ((pl.col(c) - pl.col(f"true_{c}")).abs() / pl.col(f"true_{c}"))
        ok = j.filter(pl.col(f"true_{c}") > 0)
        med = ok.select(err.median()).item()
        p95 = ok.select(err.quantile(0.95)).item()
        # what the counter itself differs by between the runs on the same matched bursts (no merge could beat the
        # natural run-to-run variation by much without rescaling; with it, it must not be worse)
        raw = merge_runs([other, dropped], MergeOptions(reference=full.run_name, rescale=False)).merged
        raw_med = raw.join(truth, on=KEYS).filter((pl.col("duration_ns") >= 10_000) & (pl.col(f"true_{c}") > 0)).select(
            err.median()).item()
        lines.append(f"{c}: source {q[c]['source_run']}, coverage {q[c]['coverage']:.1%}, median error {med:.2%} "
                     f"(p95 {p95:.2%}), without rescaling {raw_med:.2%}, estimated {q[c]['estimated_error']:.2%}")
        assert q[c]["coverage"] >= 0.95
        assert med <= raw_med + 1e-9
        # rescaling by the cycles ratio (off by default) must help the time-like counter on this real pair
        if c == "PAPI_REF_CYC":
            resc = merge_runs([other, dropped], MergeOptions(reference=full.run_name, rescale=True)).merged
            resc_med = resc.join(truth, on=KEYS).filter((pl.col("duration_ns") >= 10_000) & (pl.col(f"true_{c}") > 0)
                                                        ).select(err.median()).item()
            lines.append(f"{c} rescaled by the cycles ratio: median error {resc_med:.2%}")
            assert resc_med < raw_med
        assert med <= 0.25 and p95 <= 1.5  # typical merged values are close to what the run recorded
        assert q[c]["estimated_error"] <= 5 * med + 0.05 and med <= 5 * q[c]["estimated_error"] + 0.05
    print("\n".join(lines))


@real
def test_lulesh_reference_with_more_iterations_covers_only_the_overlap():
    a, b = read_lulesh(LULESH_A, "A"), read_lulesh(LULESH_B, "B")
    res = merge_runs([a, RunTables("B", b.run_name, b.bursts.drop(DROPPED), b.mpi_calls)],
                     MergeOptions(reference=a.run_name))
    # the reference records everything; nothing is transferred and nothing is lost
    assert (res.quality.get_column("method") == "recorded").all()
    # the 7+1 run covers ~2 of the 5 iterations: its matches cover at most its own bursts
    matched = res.matches.get_column("other_burst_seq").is_not_null().sum()
    assert 0.9 * b.bursts.height <= matched <= b.bursts.height


# ----------------------------------------------------------------------------------------------- CLI and warehouse
@pytest.fixture
def lulesh_wh(tmp_path, capsys):
    wh = tmp_path / "wh"
    code, _, err = run_cli(capsys, "ingest", LULESH_A, LULESH_B, "--experiment", "lulesh", "-w", wh)
    assert code == 0, err
    return wh


@real
def test_cli_merge_writes_views_and_remerge_replaces(lulesh_wh, capsys):
    code, out, err = run_cli(capsys, "merge", "lulesh", "-w", lulesh_wh, "--reference", LULESH_B.stem)
    assert code == 0, err
    assert "PAPI_TOT" in out and "100.0%" in out  # the quality table
    assert re.search(r"^verdict for lulesh: (ok|suspect|bad)", out, re.M)  # one verdict per experiment
    from synthtrace.warehouse.sql import query
    # provenance: one row per (reference burst, other run), in the other run's own numbering
    prov = query(Warehouse(lulesh_wh), "select * from merge_matches").to_pylist()
    assert list(prov[0]) == ["experiment", "appl", "task", "thread", "burst_seq", "other_run", "other_run_id",
                             "other_task", "other_thread", "other_burst_seq", "score", "ambiguous", "msg_mismatch",
                             "share"]
    assert len(prov) == 848 and {r["other_run"] for r in prov} == {LULESH_A.stem}
    # issue 22: ambiguous marks a pair whose bracketing logical messages disagree; never on an unmatched burst
    assert all(r["ambiguous"] in (False, True) for r in prov)
    assert not any(r["ambiguous"] and r["other_burst_seq"] is None for r in prov)
    assert all((r["other_burst_seq"] is None) == (r["score"] is None) for r in prov)
    verdicts = query(Warehouse(lulesh_wh), "select verdict from merge_quality").column("verdict").to_pylist()
    assert set(verdicts) <= {"ok", "suspect", "bad"} and verdicts
    n = query(Warehouse(lulesh_wh), "select count(*) as n, min(match_score) as s from merged_bursts").to_pylist()[0]
    assert n["n"] == 848 and n["s"] == 1.0  # the reference recorded every counter
    qual = query(
        Warehouse(lulesh_wh), "select counter, source_run, coverage, estimated_error from merge_quality"
    ).to_pylist()
    # DRAM_CAS: the node's memory-controller samples apportioned to the bursts (tracelib.domain.uncore)
    assert {r["counter"] for r in qual} == {
        "PAPI_TOT_INS",
        "PAPI_TOT_CYC",
        "PAPI_REF_CYC",
        "LONGEST_LAT_CACHE:MISS",
        "DRAM_CAS",
    }
    # re-merging with the other reference replaces the merged data whole
    code, _, err = run_cli(capsys, "merge", "lulesh", "-w", lulesh_wh)
    assert code == 0, err
    n2 = query(Warehouse(lulesh_wh), "select count(*) as n, any_value(run_name) as r from merged_bursts").to_pylist()[0]
    assert n2["n"] == 2140 and n2["r"] == LULESH_A.stem
    assert not list((lulesh_wh / ".staging").iterdir())


@real
def test_cli_export_round_trip(lulesh_wh, capsys, tmp_path):
    out = tmp_path / "exp" / "merged"  # the folder does not exist yet: the export creates it
    code, _, err = run_cli(capsys, "merge", "lulesh", "-w", lulesh_wh, "--reference", LULESH_B.stem,
                           "--export-prv", out)
    assert code == 0, err
    assert out.with_suffix(".prv").is_file() and out.with_suffix(".pcf").is_file() and out.with_suffix(".row").is_file()
    merged = pl.read_parquet(lulesh_wh / "experiments" / "lulesh" / "merged_bursts.parquet")
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
    back, _, summary = ParaverTrace(out.with_suffix(".prv")).read_tables("x")
    counters = [c for c in merged.columns if c.startswith(("PAPI_", "LONGEST"))]
    assert set(counters) <= set(summary.counters)
    j = merged.select(*KEYS, "start_ns", "end_ns", *counters).join(
        back.select(*KEYS, "start_ns", "end_ns", *counters), on=KEYS, suffix="_x")
    assert j.height == merged.height
    for c in [*counters, "start_ns", "end_ns"]:
        assert (j.get_column(c) == j.get_column(f"{c}_x")).all(), c


def renamed_copy(trace: Path, folder: Path) -> Path:
    """A copy of ``trace`` (with .pcf/.row) in ``folder`` whose .pcf names every counter differently."""
    d = folder / "renamed"
    d.mkdir()
    for suffix in (".prv", ".pcf", ".row"):
        shutil.copyfile(trace.with_suffix(suffix), d / f"{trace.stem}_renamed{suffix}")
    pcf = d / f"{trace.stem}_renamed.pcf"
    text = re.sub(r"(\d+ +\d+ +)(PAPI_|LONGEST_LAT|RESOURCE_STALLS)", r"\1OTHER_\2", pcf.read_text())
    pcf.write_text(text.replace("UNC_M_CAS_COUNT", "OTHER_CAS_COUNT"))  # no DRAM CAS to apportion either
    return d / f"{trace.stem}_renamed.prv"


@real
def test_cli_merge_without_common_counter_checked_by_messages(tmp_path, capsys):
    """Two LULESH runs that share no counter (issue 22): their logical messages, timing-free, check the match, so
    the merge is made instead of refused; the copy's counters are the original's, so the transferred values are
    the reference's own within the runs' natural variation."""
    wh = tmp_path / "wh"
    code, _, err = run_cli(capsys, "ingest", LULESH_B, renamed_copy(LULESH_B, tmp_path), "--experiment", "exp",
                           "-w", wh)
    assert code == 0, err
    code, out, err = run_cli(capsys, "merge", "exp", "-w", wh, "--reference", LULESH_B.stem)
    assert code == 0, err
    merged = pl.read_parquet(Warehouse(wh).experiment_dir("exp") / "merged_bursts.parquet")
    long = merged.filter(pl.col("duration_ns") >= 10_000)
    e = long.select(((pl.col("OTHER_PAPI_TOT_INS") - pl.col("PAPI_TOT_INS")).abs() / pl.col("PAPI_TOT_INS"))
                    .median()).item()
    assert e < 1e-9  # the same run: matched one to one
    q = pl.read_parquet(Warehouse(wh).experiment_dir("exp") / "merge_quality.parquet")
    assert set(q.get_column("verdict")) == {"ok"}, q.select("counter", "verdict", "verdict_reason").rows()


@real
@pytest.mark.parametrize("case", ["tasks", "one_run", "no_common"])
def test_cli_bad_input_exit_2_and_warehouse_unchanged(case, tmp_path, capsys):
    wh = tmp_path / "wh"
    if case == "tasks":
        files = [LULESH_B, PRIME]
    elif case == "one_run":
        files = [LULESH_B]
    else:  # a copy of the prime run whose .pcf names every counter differently: collectives only, no message
        files = [PRIME, renamed_copy(PRIME, tmp_path)]
    code, _, err = run_cli(capsys, "ingest", *files, "--experiment", "exp", "-w", wh)
    assert code == 0, err
    before = tree_digest(wh)
    code, out, err = run_cli(capsys, "merge", "exp", "-w", wh)
    assert code == 2
    assert err.startswith("error:") and "Traceback" not in err
    expected = {"tasks": "not the same program", "one_run": "at least two", "no_common": "no counter in common"}
    assert expected[case] in err.replace("\n", " ")
    assert tree_digest(wh) == before


def test_cli_unknown_experiment(tmp_path, capsys):
    Warehouse(tmp_path / "wh").ensure()
    code, _, err = run_cli(capsys, "merge", "nothing", "-w", tmp_path / "wh")
    assert code == 2 and "no experiment" in err
    code, _, err = run_cli(capsys, "merge", "nothing", "-w", tmp_path / "typo")  # a mistyped warehouse
    assert code == 2 and "no such warehouse" in err and not (tmp_path / "typo").exists()


@real
@pytest.mark.slow
def test_export_takes_resources_from_a_gzipped_reference_trace(tmp_path, capsys):
    """A run ingested from ``.prv.gz`` still gives the export its trace's date, resources and ``.row`` names."""
    import gzip
    src = tmp_path / "gz"
    src.mkdir()
    for prv in (LULESH_A, LULESH_B):
        for suffix in (".pcf", ".row"):
            shutil.copyfile(prv.with_suffix(suffix), src / f"{prv.stem}{suffix}")
        with open(prv, "rb") as fin, gzip.open(src / f"{prv.stem}.prv.gz", "wb") as fout:
            shutil.copyfileobj(fin, fout)
    wh = tmp_path / "wh"
    code, _, err = run_cli(capsys, "ingest", src, "--experiment", "lulesh", "-w", wh)
    assert code == 0, err
    out = tmp_path / "merged"
    code, _, err = run_cli(capsys, "merge", "lulesh", "-w", wh, "--reference", LULESH_B.stem, "--export-prv", out)
    assert code == 0, err
    def date(line: str) -> str:  # "#Paraver (31/01/2022 at 11:46):..." -> "31/01/2022 at 11:46"
        return re.match(r"#Paraver \(([^)]*)\)", line).group(1)

    # the trace's date, written as Extrae and Paraver write it (four-digit year, as in the source trace)
    assert date(out.with_suffix(".prv").open().readline()) == date(LULESH_B.open().readline()) == "31/01/2022 at 11:46"
    assert "epeec04" in out.with_suffix(".row").read_text()  # the node names of the trace's .row
