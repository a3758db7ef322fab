"""The POP efficiency model (issue 25 items 2 and 6): per-run factors on the real traces, scaling factors as BSC's
modelfactors defines them, and what a user is told when the input cannot give them all."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.tracelib.domain.pop import (
    POP_METRICS_SCHEMA,
    PopInputError,
    missing_columns,
    pop_metrics,
    pop_of_run,
    pop_scaling,
    single_scale_apps,
    thread_useful,
)
from testing.traces import JACOBI, LULESH_A, LULESH_B, PRIME, TRACES

PINGPONG = TRACES / "otf2" / "ping-pong-otf2" / "traces.otf2"
real_traces = pytest.mark.real_traces


def _run(path, run_id: str, app: str = "app") -> tuple[pl.DataFrame, pl.DataFrame]:
    """(threads, runs) inputs of pop_metrics for one real trace, replayed on the ideal network."""
    from synthtrace.tracelib.formats.source import open_trace

    src = open_trace(path)
    bursts, calls, summary = src.read_tables(run_id)
    run = pop_of_run(bursts, calls if calls.height else None, summary.messages)
    threads, ideal = run.threads, run.ideal_runtime_ns
    runs = pl.DataFrame([{"run_id": run_id, "run_name": path.stem, "app": app, "experiment": app,
                          "runtime_ns": src.resources["duration_ns"], "ideal_runtime_ns": ideal}],
                        schema={"run_id": pl.String, "run_name": pl.String, "app": pl.String,
                                "experiment": pl.String, "runtime_ns": pl.Int64, "ideal_runtime_ns": pl.Int64})
    return threads, runs


@pytest.fixture(scope="module")
def real():
    return {p.stem.split("_")[0]: _run(p, p.stem[:8]) for p in (LULESH_A, LULESH_B, PRIME, JACOBI)}


@real_traces
def test_per_run_factors_follow_the_pop_definitions_on_real_traces(real):
    for name, (threads, runs) in real.items():
        m = pop_metrics(threads, runs).row(0, named=True)
        useful = threads["useful_ns"]
        assert m["useful_sum_ns"] == useful.sum() and m["useful_max_ns"] == useful.max(), name
        assert m["load_balance"] == pytest.approx(useful.mean() / useful.max()), name
        assert m["communication_efficiency"] == pytest.approx(useful.max() / m["runtime_ns"]), name
        assert m["parallel_efficiency"] == pytest.approx(m["load_balance"] * m["communication_efficiency"]), name
        assert m["ipc"] == pytest.approx(threads["paired_instructions"].sum() / threads["paired_cycles"].sum()), name
        assert 0 < m["parallel_efficiency"] <= 1, name
        if m["ideal_runtime_ns"] is not None:  # serialization x transfer = communication efficiency
            assert m["serialization_efficiency"] * m["transfer_efficiency"] == pytest.approx(
                m["communication_efficiency"]), name


@real_traces
def test_ranks_threads_and_hybrid_terms(real):
    lulesh = pop_metrics(*real["lulesh"]).row(0, named=True)
    assert (lulesh["n_ranks"], lulesh["n_threads"]) == (8, 1)  # the 12 uncore readers (appl 2) are no ranks
    assert lulesh["openmp_parallel_efficiency"] is None  # pure MPI: no hybrid terms
    jacobi = pop_metrics(*real["jacobi-2d-imper"]).row(0, named=True)
    assert jacobi["n_ranks"] == 1 and jacobi["n_threads"] > 1
    # no MPI: all of the rank's time is outside MPI, so the thread-level parallel efficiency is all OpenMP's
    assert jacobi["mpi_parallel_efficiency"] == pytest.approx(1.0)
    assert jacobi["openmp_parallel_efficiency"] == pytest.approx(jacobi["parallel_efficiency"])


def _series(*rows: dict) -> pl.DataFrame:
    base = dict.fromkeys(POP_METRICS_SCHEMA)
    return pl.DataFrame([base | r for r in rows], schema=POP_METRICS_SCHEMA)


def test_strong_and_weak_scaling_factors_against_the_smallest_run():
    s = _series(
        {"run_id": "b", "run_name": "x.16", "app": "x", "n_ranks": 16, "n_threads": 1, "runtime_ns": 30,
         "useful_sum_ns": 400, "useful_instructions": 1100.0, "ipc": 1.5, "frequency_ghz": 2.0,
         "parallel_efficiency": 0.8},
        {"run_id": "a", "run_name": "x.4", "app": "x", "n_ranks": 4, "n_threads": 1, "runtime_ns": 100,
         "useful_sum_ns": 360, "useful_instructions": 1000.0, "ipc": 2.0, "frequency_ghz": 2.5,
         "parallel_efficiency": 0.9},
    )
    strong = pop_scaling(s).sort("n_ranks")
    assert strong["reference_run_id"].to_list() == ["a", "a"]
    big = strong.row(1, named=True)
    assert big["speedup"] == pytest.approx(100 / 30)
    assert big["computation_scalability"] == pytest.approx(360 / 400)
    assert big["instruction_scalability"] == pytest.approx(1000 / 1100)
    assert big["ipc_scalability"] == pytest.approx(1.5 / 2.0)
    assert big["frequency_scalability"] == pytest.approx(2.0 / 2.5)
    assert big["global_efficiency"] == pytest.approx(0.8 * 360 / 400)
    assert strong.row(0, named=True)["speedup"] == 1.0
    weak = pop_scaling(s, "weak").sort("n_ranks").row(1, named=True)
    assert weak["speedup"] == pytest.approx(100 / 30 * 4)
    assert weak["computation_scalability"] == pytest.approx(360 / 400 * 4)
    assert weak["ipc_scalability"] == pytest.approx(1.5 / 2.0)  # rates do not scale with the work
    with pytest.raises(PopInputError, match="scaling"):
        pop_scaling(s, "linear")


@real_traces
def test_a_series_with_one_scale_is_said_to_need_two(real):
    threads, runs = real["prime"]
    m = pop_metrics(threads, runs)
    assert single_scale_apps(m) == ["app"]
    assert pop_scaling(m).row(0, named=True)["speedup"] == 1.0


@real_traces
def test_a_run_without_counters_gives_the_time_factors_and_says_which_columns_are_empty():
    threads, runs = _run(PINGPONG, "pp")
    m = pop_metrics(threads, runs)
    row = m.row(0, named=True)
    assert row["load_balance"] is not None and row["parallel_efficiency"] is not None
    assert row["ipc"] is None and row["useful_instructions"] is None
    why = missing_columns(m)
    assert set(why) >= {"ipc", "useful_instructions", "frequency_ghz", "ipc_scalability"}
    assert "no instructions" in why["ipc"]


@real_traces
@pytest.mark.parametrize("recorded", ["cyc", "ins"])
def test_a_run_recording_one_of_instructions_and_cycles_gives_what_that_counter_gives(recorded):
    """Attack 13 F7: a run of a counter-set campaign that records cycles but not instructions (or the reverse) got
    no useful cycles and no frequency, "the runs record no instructions or cycles". Each counter's metrics come
    from its own bursts now (frequency from cycles alone), IPC from the bursts that carry both; the line names the
    counter that is missing. A real LULESH run with one of its two counters left out."""
    from synthtrace.tracelib.domain.counters import resolve
    from synthtrace.tracelib.formats.source import open_trace

    src = open_trace(LULESH_A)
    bursts, calls, summary = src.read_tables("la")
    roles = resolve(bursts.columns).columns
    whole = pop_metrics(*_run(LULESH_A, "la")).row(0, named=True)
    dropped = "ins" if recorded == "cyc" else "cyc"
    one = pop_of_run(bursts.drop(roles[dropped]), calls, summary.messages)
    runs = pl.DataFrame([{"run_id": "la", "run_name": "a", "app": "app", "experiment": "app",
                          "runtime_ns": src.resources["duration_ns"], "ideal_runtime_ns": one.ideal_runtime_ns}])
    m = pop_metrics(one.threads, runs)
    row, why = m.row(0, named=True), missing_columns(m)
    assert row["ipc"] is None and why["ipc"].startswith("no run records instructions and cycles on the same bursts")
    kept = ("useful_cycles", "frequency_ghz") if recorded == "cyc" else ("useful_instructions",)
    lost = ("useful_instructions",) if recorded == "cyc" else ("useful_cycles", "frequency_ghz")
    for c in kept:
        assert row[c] == pytest.approx(whole[c]) and c not in why, c
    missing = "instructions (PAPI_TOT_INS)" if recorded == "cyc" else "cycles (PAPI_TOT_CYC)"
    for c in lost:
        assert row[c] is None and why[c].startswith(f"no run records {missing} on 95%"), (c, why)
    assert 0.5 < whole["frequency_ghz"] < 6  # GHz: cycles per ns of the bursts that carry them


def test_bursts_without_their_columns_are_refused():
    with pytest.raises(PopInputError, match="duration_ns"):
        thread_useful(pl.DataFrame({"run_id": ["r"], "appl": [1], "task": [1], "thread": [1]}), None)


@real_traces
@pytest.mark.parametrize("path", [LULESH_A, LULESH_B, PINGPONG], ids=["lulesh_4+4", "lulesh_7+1", "pingpong"])
def test_the_replay_holds_its_calls_narrow_and_replays_them_as_given(path):
    """Issue 23: POP held every MPI call of a run with columns its replay never reads, and a sorted copy (2.8 GB at
    2 GB of trace). The replay's calls are now its columns only, in the narrowest exact types and in its order:
    replayed, they give the thread ends, call times and runtime of the calls given whole, or shuffled."""
    from synthtrace.tracelib.domain.pop import thread_ends
    from synthtrace.tracelib.domain.replay import replay, replay_calls
    from synthtrace.tracelib.formats.source import open_trace

    bursts, calls, summary = open_trace(path).read_tables("r")
    ends = thread_ends(bursts, calls, thread_useful(bursts, calls))
    whole = replay(calls, summary.messages, ends)
    narrow = replay_calls(calls.lazy())
    keys = ["appl", "task", "thread", "call_seq"]
    assert narrow["mpi_call"].dtype == pl.Categorical and narrow["call_seq"].dtype in (pl.Int8, pl.Int16, pl.Int32)
    assert narrow.sort(keys).with_columns(pl.col(c).cast(calls.schema[c]) for c in narrow.columns).equals(
        calls.select(narrow.columns).sort(keys))  # exact: the same values
    for given in (narrow, replay_calls(calls.sample(fraction=1.0, shuffle=True, seed=23).lazy())):
        got = replay(given, summary.messages, ends)
        assert (got.runtime_ns, got.n_released, got.n_messages) == (whole.runtime_ns, whole.n_released,
                                                                    whole.n_messages)
        assert got.threads.equals(whole.threads)
        assert got.calls.with_columns(pl.col("mpi_call").cast(pl.String)).sort(keys).equals(whole.calls.sort(keys))
    lean = replay(narrow, summary.messages, ends, replayed_calls=False)
    assert lean.calls is None and lean.runtime_ns == whole.runtime_ns and lean.threads.equals(whole.threads)
