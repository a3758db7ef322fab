"""The 13 archetype rules, their thresholds, insufficient counters, discovery, and the real traces."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tests.analysis_helpers import BASE, CASES, RPS, TEST_MACHINE, bursts, calls, case_bursts
from tests.conftest import JACOBI, LULESH_A, PRIME
from tests.test_metrics import _two_rank_program
from synthtrace.models.analysis import analyse, analyse_experiment, mix
from synthtrace.models.archetype_discovery import ArchetypeDiscovery, DiscoveryError
from synthtrace.models.archetypes import (ARCHETYPES, BALANCED, INSUFFICIENT, ArchetypeRules, Thresholds, ThresholdsError)
from synthtrace.tracelib.counters import resolve
from synthtrace.tracelib.metrics import assign_phases, burst_metrics, mpi_metrics, phase_metrics


def classify(b: pl.DataFrame, thresholds: Thresholds | None = None) -> pl.DataFrame:
    rules = ArchetypeRules(TEST_MACHINE, thresholds, ranks_per_socket=RPS, counter_map=resolve(b)).fit()
    return rules.classify_bursts(burst_metrics(b, TEST_MACHINE, ranks_per_socket=RPS))


def test_thirteen_archetypes():
    assert len(ARCHETYPES) == 13 and len(set(ARCHETYPES)) == 13


def test_each_burst_rule_fires_on_its_burst():
    b, expected = case_bursts()
    out = classify(b)
    assert out["archetype"].to_list() == expected
    assert (out["confidence"] >= 0.5).all()
    for ev, name in zip(out["evidence"].to_list(), expected):
        assert name in ev and "rule" in ev


def test_no_rule_fired_gives_nearest_with_low_confidence():
    out = classify(bursts([{}]))  # IPC 1.2, few misses: no rule applies
    assert out["archetype"][0] in ARCHETYPES[:9]
    assert out["confidence"][0] < 0.5
    assert "no rule fired" in out["evidence"][0]


@pytest.mark.parametrize("change, expected", [
    ({"duration_ns": 9_999}, "fine_grain"),
    ({"duration_ns": 10_000, "PAPI_TOT_CYC": 2_000_000}, "core_bound"),  # exactly 10 µs is not fine-grained
    ({"PAPI_TOT_INS": 9_999, "PAPI_TOT_CYC": 8_000}, "fine_grain"),
    ({"PAPI_TOT_CYC": 1_000_000 / 1.5}, "compute_scalar"),  # IPC exactly 1.5
    ({"PAPI_TOT_CYC": 1_000_000 / 1.49}, None),  # just below: not compute_scalar
    ({"PAPI_L1_DCM": 20_000}, "cache_bound"),  # L1 MPKI exactly 20
    ({"PAPI_L1_DCM": 19_999}, None),
    ({"PAPI_L2_DCM": 5_000}, "cache_bound"),  # L2 MPKI exactly 5
    ({"PAPI_L3_TCM": 31_250}, "dram_bandwidth"),  # exactly 50 % of the 4 GB/s rank share
    ({"PAPI_L3_TCM": 18_750}, "dram_latency"),  # 30 % is not < 30 %: between the two rules -> nearest
    ({"PAPI_L3_TCM": 18_749}, "dram_latency"),
    ({"PAPI_BR_MSP": 5_000}, "bad_speculation"),  # 5 % mispredicted
    ({"PAPI_TLB_IM": 5_000}, "frontend_bound"),  # iTLB MPKI exactly 5
])
def test_threshold_edges(change, expected):
    out = classify(bursts([change]))
    if expected is None:
        assert out["archetype"][0] != "compute_scalar" or out["confidence"][0] < 0.5
        assert out["archetype"][0] != "cache_bound" or out["confidence"][0] < 0.5
    else:
        assert out["archetype"][0] == expected


def test_edge_between_dram_rules_is_low_confidence():
    out = classify(bursts([{"PAPI_L3_TCM": 18_750}]))
    assert out["confidence"][0] < 0.5  # neither 'bandwidth' (>= 50 %) nor 'latency' (< 30 %) fired


def test_thresholds_are_configurable(tmp_path):
    core = bursts([CASES["core_bound"]])
    assert classify(core)["archetype"][0] == "core_bound"
    strict = classify(core, Thresholds(core_max_ipc=0.4))  # IPC 0.5 no longer fires rule 4: only nearest
    assert strict["confidence"][0] < 0.5 and "no rule fired" in strict["evidence"][0]
    f = tmp_path / "t.toml"
    f.write_text("[thresholds]\nfine_grain_max_us = 2000.0\n")
    assert classify(core, Thresholds.from_toml(f))["archetype"][0] == "fine_grain"
    f.write_text("no_such_threshold = 1\n")
    with pytest.raises(ThresholdsError, match="no_such_threshold"):
        Thresholds.from_toml(f)


def test_insufficient_counters_name_what_would_decide():
    b = bursts([{"PAPI_FP_INS": 500_000, "PAPI_VEC_INS": 400_000}, CASES["fine_grain"]])
    out = classify(b.drop("PAPI_VEC_INS"))
    assert out["archetype"].to_list()[:2] == [INSUFFICIENT, "fine_grain"]  # size decides without FP counters
    assert out["missing_counters"][0].to_list() == ["PAPI_VEC_INS"]
    assert "needs PAPI_VEC_INS" in out["evidence"][0]
    assert out["confidence"][0] == 0.0
    # FP share known < 0.2 decides "not compute_vector" without the vector counter (three-valued logic)
    integer = classify(bursts([CASES["compute_scalar"]]).drop("PAPI_VEC_INS"))
    assert integer["archetype"][0] == "compute_scalar"


def test_merged_frame_with_nulls_decides_row_by_row():
    b, expected = case_bursts()
    b = b.with_columns(pl.when(pl.col("burst_seq") == 0).then(None).otherwise(pl.col("PAPI_L1_DCM")).alias("PAPI_L1_DCM"))
    out = classify(b)
    got = out["archetype"].to_list()
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e or (b["burst_seq"][i] == 0 and g == INSUFFICIENT)
    assert INSUFFICIENT in got
    assert all(m.to_list() == ["PAPI_L1_DCM"] for a, m in zip(got, out["missing_counters"]) if a == INSUFFICIENT)


def test_mpi_rules():
    c = calls([{"bytes_sent": 1024, "duration_ns": 100_000},  # 1 KiB in 100 µs: latency
               {"bytes_sent": 1 << 20, "duration_ns": 100_000},  # 1 MiB at ~10 GB/s: bandwidth
               {"bytes_sent": 40_000, "duration_ns": 10_000},  # in between: nearest, low confidence
               {"mpi_call": "MPI_Wait", "bytes_sent": 0},  # a wait moves nothing: not an MPI unit
               {"mpi_call": "MPI_Barrier", "mpi_kind": "collective", "n_messages": 0}])
    rules = ArchetypeRules(TEST_MACHINE).fit()
    out = rules.classify_mpi(mpi_metrics(c, TEST_MACHINE))
    assert out["mpi_call"].to_list() == ["MPI_Send", "MPI_Send", "MPI_Send", "MPI_Barrier"]
    assert out["archetype"].to_list()[:2] == ["comm_latency", "comm_bandwidth"]
    assert out["confidence"][2] < 0.5
    assert out["archetype"][3] == "comm_latency"


def test_phase_rules():
    b, c = _two_rank_program()
    bp, cp = assign_phases(burst_metrics(b, TEST_MACHINE), c)
    out = ArchetypeRules(TEST_MACHINE).fit().classify_phases(phase_metrics(bp, cp, TEST_MACHINE)).sort("phase")
    assert out["archetype"].to_list() == ["load_imbalance", "serialization", BALANCED]


def test_analyse_builds_the_archetypes_view():
    b, c = _two_rank_program()
    res = analyse(b, c, machine=TEST_MACHINE, discover=False)
    a = res.archetypes
    assert set(a["unit"].unique()) == {"burst", "mpi", "phase"}
    for col in ("experiment", "appl", "task", "thread", "burst_seq", "unit", "phase", "archetype", "confidence", "evidence"):
        assert col in a.columns
    assert a.filter(pl.col("unit") != "burst")["burst_seq"].null_count() == a.filter(pl.col("unit") != "burst").height
    assert a.filter(pl.col("unit") == "phase")["task"].null_count() == 3
    m = mix(a)
    assert m.filter(pl.col("unit") == "burst")["time_share"].sum() == pytest.approx(1.0)


# ------------------------------------------------------------------ discovery
def _population(n_per: int = 60, seed: int = 0) -> pl.DataFrame:
    """Bursts of five archetypes with lognormal noise on every counter and on durations."""
    rng = np.random.default_rng(seed)
    rows = []
    for name in ("compute_scalar", "core_bound", "cache_bound", "dram_latency", "bad_speculation"):
        for _ in range(n_per):
            r = {**BASE, **CASES[name]}
            r = {k: (int(v * rng.lognormal(0, 0.08)) if k not in ("PAPI_FP_INS", "PAPI_VEC_INS") else v) for k, v in r.items()}
            r["duration_ns"] = int(1_000_000 * rng.lognormal(0, 0.05))
            r["PAPI_TOT_INS"] = 1_000_000
            rows.append(r)
    return bursts(rows)


def test_discovery_agrees_with_rules_and_is_stable():
    b = _population()
    bm = burst_metrics(b, TEST_MACHINE, ranks_per_socket=RPS)
    rules = ArchetypeRules(TEST_MACHINE, ranks_per_socket=RPS).fit()
    y = rules.classify_bursts(bm)["archetype"]
    d = ArchetypeDiscovery(n_clusters=8, machine=TEST_MACHINE, ranks_per_socket=RPS, n_bootstrap=4).fit(bm, y)
    assert d.kappa_ >= 0.8
    assert d.stability_ari_ >= 0.8
    pred = d.predict(bm)
    assert pred.len() == bm.height and pred.null_count() == 0
    assert (pred == y).mean() >= 0.85
    s = d.summary()
    assert set(s) >= {"kappa", "stability_ari", "cluster_archetypes", "features"}


def test_discovery_refuses_when_nothing_to_cluster():
    bm = burst_metrics(bursts([CASES["fine_grain"]] * 3), TEST_MACHINE)
    with pytest.raises(DiscoveryError):
        ArchetypeDiscovery(machine=TEST_MACHINE).fit(bm)


# ------------------------------------------------------------------ real traces lacking counters
@pytest.fixture(scope="module")
def real_warehouse(tmp_path_factory):
    from synthtrace.warehouse.ingest import ingest_trace
    from synthtrace.warehouse.layout import Warehouse
    root = tmp_path_factory.mktemp("wh")
    wh = Warehouse(root)
    for prv, exp in ((JACOBI, "jacobi"), (PRIME, "prime"), (LULESH_A, "lulesh")):
        ingest_trace(wh, prv, experiment=exp)
    return root


@pytest.mark.real_traces
@pytest.mark.parametrize("experiment", ["jacobi", "prime", "lulesh"])
def test_real_traces_get_insufficient_counters_not_a_crash(real_warehouse, experiment):
    inp, res = analyse_experiment(str(real_warehouse), experiment, discover=False)
    a = res.archetypes
    bursts_ = a.filter(pl.col("unit") == "burst")
    assert bursts_.height == inp.bursts.height
    insuff = bursts_.filter(pl.col("archetype") == INSUFFICIENT)
    assert insuff.height > 0  # none of these traces recorded FP and vector instructions
    named = set(insuff.explode("missing_counters")["missing_counters"].drop_nulls())
    assert {"PAPI_FP_INS", "PAPI_VEC_INS"} <= named
    assert set(bursts_["archetype"]) <= {*ARCHETYPES, INSUFFICIENT}
    assert insuff["provisional"].null_count() == 0
    for name in ("burst_metrics", "mpi_metrics", "phase_metrics", "archetypes"):
        assert (real_warehouse / "experiments" / experiment / f"{name}.parquet").is_file()


@pytest.mark.real_traces
def test_archetypes_view_and_cli(real_warehouse, run_cli):
    code, out, err = run_cli("archetypes", "prime", "--warehouse", str(real_warehouse), "--no-discover")
    assert code == 0, err
    assert "insufficient_counters" in out and "PAPI_FP_INS" in out
    code, out, _ = run_cli("sql", "select unit, count(*) as n from archetypes where experiment = 'prime' group by unit order by unit",
                           "--warehouse", str(real_warehouse), "--format", "csv")
    assert code == 0 and out.splitlines()[1].replace('"', "").startswith("burst,")
    code, _, err = run_cli("archetypes", "nope", "--warehouse", str(real_warehouse))
    assert code == 2 and "nope" in err
    code, _, err = run_cli("archetypes", "prime", "--warehouse", str(real_warehouse), "--machine", "/no/such.toml")
    assert code == 2 and "machine profile" in err


def test_merged_experiment_is_analysed_and_merge_files_kept(tmp_path):
    from synthtrace.warehouse.analysis import load_experiment, read_analysis
    from synthtrace.warehouse.layout import Warehouse
    wh = Warehouse(tmp_path).ensure()
    b, expected = case_bursts()
    d = wh.experiment_dir("m")
    d.mkdir(parents=True)
    b.with_columns(pl.lit("m").alias("experiment"), pl.lit(0.9).alias("match_score")).write_parquet(d / "merged_bursts.parquet")
    pl.DataFrame({"counter": ["PAPI_L1_DCM"], "coverage": [1.0]}).write_parquet(d / "merge_quality.parquet")
    before = (d / "merge_quality.parquet").read_bytes()
    assert load_experiment(wh, "m").source == "merged"
    for _ in range(2):  # re-analysing replaces the analysis, never the merge's files
        _, res = analyse_experiment(str(tmp_path), "m", machine=TEST_MACHINE, discover=False)
    assert (d / "merge_quality.parquet").read_bytes() == before and (d / "merged_bursts.parquet").is_file()
    stored = read_analysis(wh, "m", "archetypes").filter(pl.col("unit") == "burst").sort("task", "burst_seq")
    assert stored["experiment"].unique().to_list() == ["m"] and stored["run_id"].unique().to_list() == ["r0"]
    assert sorted(stored["archetype"].to_list()) != [] and (d / "archetype_discovery.json").is_file()
    assert not list(wh.staging_dir.iterdir())
