"""Several applications per pattern (``synthtrace simulate --apps-per-pattern``): deterministic kernel variants that
keep the physics valid, visible in the ingested counters, recorded in the ground truth, composed with injected
regressions; the default output unchanged; bad values refused."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from synthtrace.simulator import PATTERNS, variant_kernels
from synthtrace.simulator.kernels import KERNEL_INDEX, KERNELS, SHARED_KERNELS
from synthtrace.simulator.variants import DEFAULT_SPREAD, MAX_SPREAD
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.runs import run_bursts, runs_table

BASE = {k.name: k for k in KERNELS}


def _files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.*"))
            if p.suffix in (".prv", ".pcf", ".row")}


def test_variants_are_deterministic_and_only_the_apps_own_kernels_vary():
    a = variant_kernels(7, "halo_2", "halo", DEFAULT_SPREAD)
    assert a == variant_kernels(7, "halo_2", "halo", DEFAULT_SPREAD)
    assert set(a) == set(PATTERNS["halo"].kernels) and not set(a) & set(SHARED_KERNELS)
    assert a != variant_kernels(8, "halo_2", "halo", DEFAULT_SPREAD)
    assert a != variant_kernels(7, "halo_1", "halo", DEFAULT_SPREAD)
    assert variant_kernels(7, "halo_2", "halo", 0.0) == {}
    # a smaller spread moves the same kernel the same way, less
    small = variant_kernels(7, "halo_2", "halo", DEFAULT_SPREAD / 2)["stencil_boundary"]
    big, base = a["stencil_boundary"], BASE["stencil_boundary"]
    assert np.sign(small.cpi_base - base.cpi_base) == np.sign(big.cpi_base - base.cpi_base)
    assert abs(np.log(small.cpi_base / base.cpi_base)) == pytest.approx(abs(np.log(big.cpi_base / base.cpi_base)) / 2)


@pytest.mark.parametrize("spread", [DEFAULT_SPREAD, MAX_SPREAD])
def test_variants_keep_the_physics(spread):
    ks = [k for i in range(60) for p in PATTERNS for k in variant_kernels(i, f"{p}_{i}", p, spread).values()]
    f = pl.DataFrame([k.__dict__ for k in ks])
    num = f.drop("name", "intent")
    assert num.select(pl.all().is_finite().all()).row(0) == (True,) * num.width
    checks = f.select(
        (pl.col("l1_mpki") >= pl.col("l2_mpki")).all().alias("l1>=l2"),
        (pl.col("l2_mpki") >= pl.col("l3_mpki")).all().alias("l2>=l3"), (pl.col("l3_mpki") > 0).all().alias("l3>0"),
        (pl.col("l1_mpki") <= 1000 * (pl.col("ld") + pl.col("sr")) + 1e-9).all().alias("l1<=accesses"),
        (pl.col("ld") + pl.col("sr") + pl.col("br") <= 0.95 + 1e-12).all().alias("mix"),
        (pl.col("fp") + pl.col("br") <= 0.95 + 1e-12).all().alias("fp"),
        *[pl.col(c).is_between(0, 1).all().alias(c) for c in ("vec", "fma", "br_misp", "stream_eff")],
        (pl.col("mlp") >= 1).all().alias("mlp"), (pl.col("cpi_base") > 0).all().alias("cpi"))
    assert all(checks.row(0)), checks
    # the spread is what it says: log-ratio standard deviation of an unconstrained miss rate, and of the base CPI
    pre = f.filter(pl.col("name") == "precond")
    b = BASE["precond"]
    assert np.log(pre["l1_mpki"].to_numpy() / b.l1_mpki).std() == pytest.approx(spread, rel=0.25)
    assert np.log(pre["cpi_base"].to_numpy() / b.cpi_base).std() == pytest.approx(spread / 5, rel=0.25)


@pytest.fixture(scope="module")
def halo_apps(tmp_path_factory):
    """Two halo applications (4 ranks, 4 iterations, every counter recorded by some run), ingested."""
    from synthtrace.pipelines.cli import main

    root = tmp_path_factory.mktemp("variants")
    sim, wh = root / "sim", root / "wh"
    assert main(["simulate", str(sim), "--pattern", "halo", "--apps-per-pattern", "2", "--ranks", "4",
                 "--iterations", "4", "--seed", "5", "--no-labels"]) == 0
    assert main(["ingest", str(sim), "-w", str(wh)]) == 0
    return sim, wh


def test_apps_of_one_pattern_differ_in_their_ingested_counters(halo_apps):
    sim, wh = halo_apps
    gt = sim / "ground_truth"
    kernels = pl.read_parquet(gt / "kernels.parquet")
    truth = pl.read_parquet(gt / "bursts").select("run_name", "appl", "task", "thread", "burst_seq", "kernel")
    runs = runs_table(Warehouse(wh))
    assert sorted(runs["app"].unique()) == ["halo_1", "halo_2"]
    mpki = {}
    for app in ("halo_1", "halo_2"):
        for counter, param in (("PAPI_L1_DCM", "l1_mpki"), ("PAPI_L3_TCM", "l3_mpki"), ("PAPI_BR_INS", "br")):
            run = runs.filter((pl.col("app") == app) & pl.col("counters").list.contains(counter)).row(0, named=True)
            b = (run_bursts(Warehouse(wh), run["run_id"]).with_columns(pl.lit(run["run_name"]).alias("run_name"))
                 .join(truth, on=["run_name", "appl", "task", "thread", "burst_seq"])
                 .filter(pl.col("kernel") == "stencil_interior"))
            assert b.height > 0
            measured = float((b[counter].sum() / b["PAPI_TOT_INS"].sum()) * (1000 if param.endswith("mpki") else 1))
            simulated = kernels.filter((pl.col("app") == app) & (pl.col("kernel") == "stencil_interior"))[param][0]
            assert measured == pytest.approx(simulated, rel=0.05), (app, counter)
            mpki[app, param] = measured
    assert abs(np.log(mpki["halo_1", "l1_mpki"] / mpki["halo_2", "l1_mpki"])) > 0.1
    assert abs(np.log(mpki["halo_1", "l3_mpki"] / mpki["halo_2", "l3_mpki"])) > 0.1
    exp = pl.read_parquet(gt / "experiments.parquet").sort("experiment")
    assert exp["variant_kernels"].to_list() == [sorted(PATTERNS["halo"].kernels)] * 2
    own = kernels.filter(pl.col("own"))
    assert own["variant"].all() and not own["injected"].any()
    assert not kernels.filter(~pl.col("own"))["variant"].any()


def test_same_seed_same_apps_and_default_unchanged(tmp_path, run_cli):
    args = ["--pattern", "wavefront", "--ranks", "3", "--iterations", "2", "--runs", "2", "--no-labels"]
    for name, extra in (("a", ["--apps-per-pattern", "2"]), ("b", ["--apps-per-pattern", "2"]),
                        ("c", ["--apps-per-pattern", "2", "--seed", "1"]), ("d", []),
                        ("e", ["--apps-per-pattern", "1", "--kernel-spread", "0"])):
        code, _, err = run_cli("simulate", tmp_path / name, *args, *extra)
        assert code == 0, err
    a, b, c = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert a == b and sorted({k.split("/")[0] for k in a}) == ["wavefront_1", "wavefront_2"]
    assert a["wavefront_1/wavefront_1.run0.prv"] != c["wavefront_1/wavefront_1.run0.prv"]
    ka, kc = (pl.read_parquet(tmp_path / x / "ground_truth" / "kernels.parquet") for x in ("a", "c"))
    assert ka.equals(pl.read_parquet(tmp_path / "b" / "ground_truth" / "kernels.parquet"))
    assert not ka["l1_mpki"].equals(kc["l1_mpki"])
    # one app per pattern (the default) runs the base kernels, and asking for it explicitly changes nothing
    d = _files(tmp_path / "d")
    assert d == _files(tmp_path / "e") and {k.split("/")[0] for k in d} == {"wavefront"}
    kd = pl.read_parquet(tmp_path / "d" / "ground_truth" / "kernels.parquet")
    assert not kd["variant"].any()
    assert kd.filter(pl.col("kernel") == "sweep_chunk")["l1_mpki"][0] == KERNELS[KERNEL_INDEX["sweep_chunk"]].l1_mpki
    assert pl.read_parquet(tmp_path / "d" / "ground_truth" / "experiments.parquet")["variant_kernels"].is_null().all()


def test_injected_regression_acts_on_the_variant_kernels(tmp_path, run_cli):
    code, _, err = run_cli("simulate", tmp_path / "c", "--pattern", "cg", "--apps-per-pattern", "2", "--ranks", "3",
                           "--iterations", "3", "--runs", "2", "--nights", "3", "--inject",
                           "worse_locality:cg_2:1:0.5", "--no-labels")
    assert code == 0, err
    gt = tmp_path / "c" / "ground_truth"
    k = pl.read_parquet(gt / "kernels.parquet").filter(pl.col("kernel") == "spmv").sort("app", "night")
    l1 = {(a, n): v for a, n, v in k.select("app", "night", "l1_mpki").iter_rows()}
    assert l1["cg_1", 0] == l1["cg_1", 1] == l1["cg_1", 2] != l1["cg_2", 0]  # an app keeps its kernels every night
    assert l1["cg_2", 0] != KERNELS[KERNEL_INDEX["spmv"]].l1_mpki
    assert l1["cg_2", 1] == pytest.approx(1.5 * l1["cg_2", 0]) and l1["cg_2", 2] == l1["cg_2", 1]
    assert k.filter(pl.col("injected")).select("app", "night").rows() == [("cg_2", 1), ("cg_2", 2)]
    # the traces' counters follow: spmv L1 misses per instruction of cg_2's reference run, night 1 over night 0
    def measured(day: str) -> float:
        b = pl.read_parquet(gt / "bursts" / f"cg_2_{day}.parquet").filter(
            (pl.col("kernel") == "spmv") & (pl.col("run_name") == "cg_2.run0"))
        return float(b["PAPI_L1_DCM"].sum() / b["PAPI_TOT_INS"].sum() * 1000)
    assert measured("20260106") / measured("20260105") == pytest.approx(1.5, rel=0.05)
    assert measured("20260105") == pytest.approx(l1["cg_2", 0], rel=0.05)
    assert pl.read_parquet(gt / "regressions.parquet")["app"].to_list() == ["cg_2"]


@pytest.mark.parametrize("args, needle", [(["--apps-per-pattern", "0"], "--apps-per-pattern"),
                                          (["--kernel-spread", "-0.1"], "--kernel-spread"),
                                          (["--apps-per-pattern", "3", "--kernel-spread", "9"], "--kernel-spread"),
                                          (["--kernel-spread", "nan"], "--kernel-spread")])
def test_bad_values_are_refused(tmp_path, run_cli, args, needle):
    code, _, err = run_cli("simulate", tmp_path / "x", "--pattern", "cg", *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()
