"""Counter catalogue, machine profiles and the roofline / Ridgeline / POP metrics on hand-made data."""
from __future__ import annotations

import math

import polars as pl
import pytest

from testing.analysis_cases import RPS, TEST_MACHINE, bursts, calls, two_rank_program
from synthtrace.tracelib.domain import counters
from synthtrace.tracelib.domain.machine import MachineProfileError, load_machine, machine_from_dict, presets
from synthtrace.tracelib.domain.metrics import (
    MetricsInputError,
    assign_phases,
    burst_metrics,
    mpi_metrics,
    phase_metrics,
    ranks_per_socket,
)


# ------------------------------------------------------------------ counter catalogue
def test_aliases_name_the_same_quantity():
    assert counters.same_quantity("PAPI_L3_TCM", "LONGEST_LAT_CACHE:MISS")
    assert counters.canonical("PAPI_TOT_INS") == "ins"
    assert counters.canonical("skx_unc_imc3::UNC_M_CAS_COUNT:WR:cpu=16") == "dram_cas"
    assert counters.canonical("NOT_A_COUNTER") is None
    assert not counters.same_quantity("PAPI_L1_DCM", "PAPI_L2_DCM")


def test_resolve_prefers_presets_and_sums_uncore():
    cmap = counters.resolve(["LONGEST_LAT_CACHE:MISS", "PAPI_L3_TCM", "skx_unc_imc0::UNC_M_CAS_COUNT:RD:cpu=0",
                             "skx_unc_imc1::UNC_M_CAS_COUNT:WR:cpu=0"])
    assert cmap.columns["l3_tcm"] == ["PAPI_L3_TCM"]
    assert len(cmap.columns["dram_cas"]) == 2
    df = pl.DataFrame({"skx_unc_imc0::UNC_M_CAS_COUNT:RD:cpu=0": [10, None, None],
                       "skx_unc_imc1::UNC_M_CAS_COUNT:WR:cpu=0": [5, 7, None]})
    got = df.select(counters.resolve(df).expr("dram_cas"))["dram_cas"].to_list()
    assert got == [15.0, 7.0, None]


# ------------------------------------------------------------------ machine profiles
def test_presets_load_with_expected_roofs():
    assert {"marenostrum5-gpp", "generic"} <= set(presets())
    mn5 = load_machine("marenostrum5-gpp")
    assert mn5.cores_per_node == 112
    assert mn5.peak_flops_core() == pytest.approx(64e9)  # 32 DP FLOP/cycle x 2 GHz (AVX-512)
    assert mn5.peak_flops_core("scalar") < mn5.peak_flops_core("avx2") < mn5.peak_flops_core("avx512")
    assert mn5.link_bw() == pytest.approx(25e9)  # NDR200
    assert mn5.dram_share() == pytest.approx(mn5.dram_bw_socket() / 56)


def test_machine_file_errors(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text("name = 'x'\n[peak_flops_per_cycle]\nscalar = 4\n")
    with pytest.raises(MachineProfileError, match="bandwidth_gbs"):
        load_machine(bad)
    bad.write_text("not toml = = 1")
    with pytest.raises(MachineProfileError, match="not valid TOML"):
        load_machine(bad)
    with pytest.raises(MachineProfileError, match="no such machine profile"):
        load_machine(tmp_path / "missing.toml")
    with pytest.raises(MachineProfileError, match="positive"):
        machine_from_dict(
            {
                "name": "x",
                "sockets": 1,
                "cores_per_socket": 1,
                "frequency_ghz": 1,
                "peak_flops_per_cycle": {"scalar": -1},
                "bandwidth_gbs": {"dram_per_socket": 1, "network_per_link": 1},
            }
        )


# ------------------------------------------------------------------ burst metrics
def test_burst_metrics_values():
    b = bursts([{"PAPI_FP_INS": 500_000, "PAPI_VEC_INS": 400_000, "PAPI_L3_TCM": 1000}])
    m = burst_metrics(b, TEST_MACHINE, ranks_per_socket=RPS).row(0, named=True)
    assert m["ipc"] == pytest.approx(1.2, rel=1e-5)
    assert m["l1_mpki"] == pytest.approx(1.0)
    assert m["l3_mpki"] == pytest.approx(1.0)
    assert m["br_mpki"] == pytest.approx(0.1)
    assert m["br_misp_rate"] == pytest.approx(0.001)
    assert m["fp_share"] == pytest.approx(0.5)
    assert m["vec_share"] == pytest.approx(0.8)
    # 100k scalar + 400k vector x 8 lanes, estimated from instruction counts
    assert m["flops"] == pytest.approx(3.3e6) and m["flops_estimated"]
    assert m["flop_rate"] == pytest.approx(3.3e9)
    assert m["dram_bytes"] == pytest.approx(64_000) and m["dram_bytes_estimated"]
    assert m["dram_bw"] == pytest.approx(64e6)
    assert m["dram_bw_share"] == pytest.approx(64e6 / 4e9)
    assert m["oi_dram"] == pytest.approx(3.3e6 / 64_000)
    # roofs: compute 8 GF/s, DRAM 51.6 x 4e9, L3 3.3e6/6400 x 32e9, L2 3.3e6/64000 x 64e9 -> compute bound
    assert m["bound_by"] == "compute"
    assert m["attainable_flop_rate"] == pytest.approx(8e9)
    assert m["roof_fraction"] == pytest.approx(3.3 / 8)
    assert m["roof_distance"] == pytest.approx(math.log10(8 / 3.3))
    assert m["missing_roles"] == []


def test_cas_counters_give_measured_dram_bytes_and_fp_arith_gives_flops():
    b = bursts([{}]).with_columns(pl.lit(100, pl.Int64).alias("skx_unc_imc0::UNC_M_CAS_COUNT:RD:cpu=0"),
                                  pl.lit(50, pl.Int64).alias("skx_unc_imc0::UNC_M_CAS_COUNT:WR:cpu=0"),
                                  pl.lit(1000, pl.Int64).alias("FP_ARITH_INST_RETIRED:512B_PACKED_DOUBLE"),
                                  pl.lit(10, pl.Int64).alias("FP_ARITH_INST_RETIRED:SCALAR_DOUBLE"))
    m = burst_metrics(b.drop("PAPI_FP_INS", "PAPI_VEC_INS"), TEST_MACHINE).row(0, named=True)
    assert m["dram_bytes"] == 150 * 64 and not m["dram_bytes_estimated"]
    assert m["flops"] == 1000 * 8 + 10 and not m["flops_estimated"]
    assert m["vec_share"] == pytest.approx(1000 / 1010)


def test_missing_counters_give_null_metrics_and_missing_roles():
    b = bursts([{}, {}], drop=("PAPI_L1_DCM", "PAPI_FP_INS", "PAPI_VEC_INS"))
    b = b.with_columns(pl.when(pl.col("task") == 2).then(None).otherwise(pl.col("PAPI_TOT_CYC")).alias("PAPI_TOT_CYC"))
    m = burst_metrics(b, TEST_MACHINE)
    assert m["l1_mpki"].null_count() == 2 and m["flops"].null_count() == 2
    assert m["ipc"].to_list()[1] is None and m["ipc"].to_list()[0] is not None
    assert {"l1_dcm", "fp_ins", "vec_ins", "flops"} <= set(m["missing_roles"][0])
    assert "cyc" in m["missing_roles"][1] and "cyc" not in m["missing_roles"][0]
    with pytest.raises(MetricsInputError):
        burst_metrics(b.drop("duration_ns"), TEST_MACHINE)


def test_ranks_per_socket_from_units_and_nodes():
    b = bursts([{}] * 8)  # 4 tasks
    assert ranks_per_socket(b, TEST_MACHINE) == 4.0
    assert ranks_per_socket(b, TEST_MACHINE, n_nodes=2) == 2.0


# ------------------------------------------------------------------ MPI calls and phases
def test_phases_and_pop_efficiencies():
    b, c = two_rank_program()
    bm = burst_metrics(b, TEST_MACHINE, ranks_per_socket=2)
    bp, cp = assign_phases(bm, c)
    assert bp.sort("task", "burst_seq")["phase"].to_list() == [0, 1, 2, 0, 1, 2]
    # each world collective closes the phase it ends; the point-to-point calls sit in phase 1
    assert cp.filter(pl.col("mpi_kind") == "collective").sort("task", "start_ns")["phase"].to_list() == [
        0,
        1,
        2,
        0,
        1,
        2,
    ]
    pm = phase_metrics(bp, cp, TEST_MACHINE, ranks_per_socket=2).sort("phase")
    lb = pm["load_balance"].to_list()
    assert lb[0] == pytest.approx(6 / 10)
    assert lb[1] == pytest.approx(1.0) and lb[2] == pytest.approx(1.0)
    ce = pm["comm_efficiency"].to_list()
    assert ce[1] == pytest.approx(5 / 10.2, rel=1e-3)  # 5 ms useful in a 10.2 ms phase
    assert ce[2] == pytest.approx(5 / 5.1, rel=1e-3)  # from the end of the previous collective to the end of its own
    assert pm["transfer_efficiency"][1] > 0.99  # 2 KiB do not explain a 5 ms wait
    assert pm["serialization_efficiency"][1] == pytest.approx(ce[1] / pm["transfer_efficiency"][1])
    assert pm["network_bytes"].to_list() == [16.0, 1024 + 16.0, 16.0]


def test_phases_without_mpi_are_one_phase():
    bm = burst_metrics(bursts([{}] * 3), TEST_MACHINE)
    bp, cp = assign_phases(bm, None)
    assert cp is None and bp["phase"].to_list() == [0, 0, 0]
    pm = phase_metrics(bp, None, TEST_MACHINE)
    assert pm.height == 1 and pm["n_ranks"][0] == 3


def test_mpi_metrics_bandwidth_and_comm_intensity():
    b = bursts([{"PAPI_FP_INS": 1000, "PAPI_VEC_INS": 0}])  # task 1, ends at 1 ms
    c = calls([{"start_ns": 1_000_000, "duration_ns": 100_000, "bytes_sent": 1_000_000, "n_messages": 1},
               {"start_ns": 2_000_000, "duration_ns": 100_000, "bytes_sent": 4096, "n_messages": 4}])
    m = mpi_metrics(c, TEST_MACHINE, burst_metrics(b, TEST_MACHINE)).sort("start_ns")
    assert m["bandwidth"][0] == pytest.approx(1e10)
    assert m["link_fraction"][0] == pytest.approx(1.0)
    assert m["mean_message_bytes"].to_list() == [1e6, 1024.0]
    assert m["comm_intensity"][0] == pytest.approx(1000 / 1e6)  # FLOPs of the burst this call closes per byte
    assert m["comm_intensity"][1] is None
