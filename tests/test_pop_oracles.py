"""The POP table against the real clients (issue 25 item 4): paramedir for the whole-run sums (useful time,
instructions and cycles over useful bursts, per thread, as BSC's modelfactors asks it), Dimemas for the ideal-network
replay. Each part skips, saying why, where its client is not built (SYNTHTRACE_PARAMEDIR / SYNTHTRACE_DIMEMAS, see
/work/coord/TOOLS.md or benchmarks/results/pop.md for the build)."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.tracelib.domain.pop import pop_metrics, pop_of_run
from testing.paramedir import paramedir_view
from testing.pop_oracles import (
    counter_type,
    dimemas_ideal_runtime,
    find_dimemas,
    find_paramedir,
    paramedir_useful_counter,
)
from testing.traces import ALL_PARAVER, LULESH_A, LULESH_B, PRIME

PARAMEDIR = find_paramedir()
DIMEMAS = find_dimemas()
pytestmark = pytest.mark.real_traces
needs_paramedir = pytest.mark.skipif(PARAMEDIR is None, reason="paramedir not found (SYNTHTRACE_PARAMEDIR or PATH)")
needs_dimemas = pytest.mark.skipif(DIMEMAS is None, reason="Dimemas/prv2dim not found (SYNTHTRACE_DIMEMAS or PATH)")


def _ours(prv):
    from synthtrace.tracelib.formats.source import open_trace

    src = open_trace(prv)
    bursts, calls, summary = src.read_tables("r")
    run = pop_of_run(bursts, calls if calls.height else None, summary.messages)
    runs = pl.DataFrame([{"run_id": "r", "run_name": prv.stem, "app": "a", "experiment": "a",
                          "runtime_ns": src.resources["duration_ns"], "ideal_runtime_ns": run.ideal_runtime_ns}])
    return run, pop_metrics(run.threads, runs).row(0, named=True)


@needs_paramedir
@pytest.mark.parametrize("prv", ALL_PARAVER, ids=lambda p: p.stem.split("_")[0])
def test_whole_run_sums_equal_paramedirs(prv, tmp_path):
    run, ours = _ours(prv)
    useful = paramedir_view(PARAMEDIR, prv, tmp_path).running_ns
    threads = {k: v for k, v in useful.items() if k[0] == 1 and v > 0}  # appl 1's computing threads
    values = list(threads.values())
    assert ours["useful_sum_ns"] == sum(values)
    assert ours["useful_max_ns"] == max(values)
    assert ours["load_balance"] == pytest.approx(sum(values) / len(values) / max(values), rel=1e-12)
    for name, col in (("PAPI_TOT_INS", "useful_instructions"), ("PAPI_TOT_CYC", "useful_cycles")):
        code = counter_type(prv.with_suffix(".pcf"), name)
        pmd = paramedir_useful_counter(PARAMEDIR, prv, code, tmp_path)
        total = sum(v for k, v in pmd.items() if k in threads)
        assert ours[col] == pytest.approx(total, rel=1e-12), name
    # and so the factors modelfactors derives from them
    assert ours["ipc"] == pytest.approx(ours["useful_instructions"] / ours["useful_cycles"], rel=1e-12)


@needs_dimemas
@pytest.mark.parametrize("prv", [LULESH_A, LULESH_B, PRIME], ids=lambda p: p.stem.split("_")[0] + p.stem[6:10])
def test_the_ideal_replay_agrees_with_dimemas(prv, tmp_path):
    run, ours = _ours(prv)
    dimemas, prv2dim = DIMEMAS
    n_tasks = run.threads.select(pl.struct("appl", "task").n_unique()).item()
    theirs = dimemas_ideal_runtime(dimemas, prv2dim, prv, n_tasks, tmp_path)
    # measured: +0.02 % (LULESH 4+4), +0.12 % (LULESH 7+1), +0.0003 % (prime)
    assert ours["ideal_runtime_ns"] == pytest.approx(theirs, rel=0.005)
    # serialization (max useful / ideal runtime) within half a percentage point of Dimemas'
    assert ours["serialization_efficiency"] == pytest.approx(ours["useful_max_ns"] / theirs, abs=0.005)


@needs_dimemas
@pytest.mark.parametrize("latency_us, bandwidth_gbs", [(5.0, 1.0), (50.0, 0.1)])
def test_the_replay_on_a_network_agrees_with_dimemas_without_link_contention(latency_us, bandwidth_gbs, tmp_path):
    """The what-if network: latency + bytes / bandwidth per message, as Dimemas models it when a node's links do
    not serialise its messages (synthtrace models no contention: with one link per node Dimemas is slower on a slow
    network, 571 vs 560 ms for LULESH 7+1 at 50 us and 0.1 GB/s)."""
    from synthtrace.tracelib.domain.replay import Network
    from synthtrace.tracelib.formats.source import open_trace
    from testing.pop_oracles import dimemas_runtime

    bursts, calls, summary = open_trace(LULESH_B).read_tables("r")
    ours = pop_of_run(bursts, calls, summary.messages, Network.of(latency_us, bandwidth_gbs)).ideal_runtime_ns
    theirs = dimemas_runtime(*DIMEMAS, LULESH_B, 8, tmp_path, latency_us=latency_us, bandwidth_gbs=bandwidth_gbs,
                             links=64)
    assert ours == pytest.approx(theirs, rel=0.005)
    ideal = pop_of_run(bursts, calls, summary.messages).ideal_runtime_ns
    assert ours > ideal  # and the network costs something
