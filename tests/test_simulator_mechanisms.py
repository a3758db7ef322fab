"""The simulator's issue-22 mechanisms (synthtrace.simulator.mechanisms): each is a real run-to-run difference, the
traces read back as the truth says, and the truth is what a perfect merge would be scored right against."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.simulator.mechanisms import MECHANISMS, campaign, simulate
from synthtrace.simulator.mpi_exec import ANY, NO_MATCH_BIT, Call, Executor, Timing
from testing.simulator_campaigns import mechanism_score, read_campaign

import numpy as np


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    """One small campaign per mechanism, simulated once."""
    out = tmp_path_factory.mktemp("mech")
    cache = {}

    def get(name: str, **sizes):
        key = (name, tuple(sorted(sizes.items())))
        if key not in cache:
            cache[key] = simulate(out / f"{name}{len(cache)}", campaign(name, 3, **sizes))
        return cache[key]
    return get


def _oracle(truth: pl.DataFrame, ref: str, other: str) -> pl.DataFrame:
    """merge_matches rows a perfect merge would write: every reference burst to its true logical burst."""
    o = truth.filter(pl.col("run_name") == other).unique("logical_id", keep="first").select(
        "logical_id", pl.col("task").alias("other_task"), pl.col("thread").alias("other_thread"),
        pl.col("burst_seq").alias("other_burst_seq"))
    return (truth.filter(pl.col("run_name") == ref).select("task", "thread", "burst_seq", "logical_id")
            .join(o, on="logical_id", how="left").with_columns(pl.lit(other).alias("other_run_id")))


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_traces_read_back_as_the_truth_says(sims, name):
    c = sims(name, ranks=4, iterations=6)
    runs = read_campaign(c)
    for r in runs:
        t = c.truth.filter(pl.col("run_name") == r.run_id)
        j = r.bursts.join(t, on=["task", "thread", "burst_seq"], how="full")
        assert j.height == r.bursts.height == t.height
        assert (j["duration_ns"] == j["duration_ns_right"]).all()
        assert (j["mpi_call"].fill_null("-") == j["mpi_call_right"].fill_null("-")).all()
    # a perfect merge scores 100 %, a merge shifted by one burst does not
    ref, other = runs[0].run_id, runs[1].run_id
    perfect = _oracle(c.truth, ref, other)
    assert mechanism_score(c.truth, ref, other, perfect)[0] == 1.0
    shifted = perfect.with_columns(pl.col("other_burst_seq") + 1)
    assert mechanism_score(c.truth, ref, other, shifted)[0] < 0.5


def test_a_piece_is_right_within_its_unit_only(sims):
    """A burst cut by a tracer flush (no counterpart of its own) matched many-to-one to the other run's burst of its
    unit is right (DESIGN §6); the same piece matched to the burst after that unit is wrong."""
    c = sims("flush_all", ranks=4, iterations=6)
    runs = read_campaign(c)
    ref, other = runs[0].run_id, runs[1].run_id
    t = c.truth.sort("run_name", "task", "thread", "burst_seq").with_columns(
        pl.when((pl.col("logical_id") & NO_MATCH_BIT) != 0).then(None).otherwise(pl.col("logical_id"))
        .backward_fill().over("run_name", "task", "thread").alias("unit"))
    units = t.filter(pl.col("run_name") == other).unique("logical_id").select(
        pl.col("logical_id").alias("unit"), pl.col("task").alias("u_task"), pl.col("thread").alias("u_thread"),
        pl.col("burst_seq").alias("u_seq"))
    pieces = (t.filter((pl.col("run_name") == ref) & ((pl.col("logical_id") & NO_MATCH_BIT) != 0)
                       & (pl.col("duration_ns") >= 10_000))
              .join(units, on="unit").select("task", "thread", "burst_seq", "u_task", "u_thread", "u_seq"))
    assert pieces.height > 0
    perfect = _oracle(c.truth, ref, other)

    def matched(shift: int) -> pl.DataFrame:
        j = perfect.join(pieces, on=["task", "thread", "burst_seq"], how="left")
        return j.with_columns(pl.coalesce("u_task", "other_task").alias("other_task"),
                              pl.coalesce("u_thread", "other_thread").alias("other_thread"),
                              pl.coalesce(pl.col("u_seq") + shift, "other_burst_seq").alias("other_burst_seq")
                              ).drop("u_task", "u_thread", "u_seq")
    assert mechanism_score(c.truth, ref, other, matched(0))[0] == 1.0
    scored = mechanism_score(c.truth, ref, other, matched(1))
    assert scored[0] == pytest.approx(1 - pieces.height / scored[2])


def _calls(c, run: int) -> pl.DataFrame:
    return read_campaign(c)[run].mpi_calls


def test_completion_calls_complete_what_arrived(sims):
    """Testsome calls complete 0-3 receives by arrival: the same logical call completes different numbers of
    requests in the two runs; the number of Waitany calls after them differs too."""
    c = sims("completion_at_wait", ranks=8, iterations=20)
    per_run = []
    for r in (0, 1):
        calls = _calls(c, r).filter(pl.col("mpi_call") == "MPI_Testsome")
        per_run.append(calls.select("task", "call_seq", pl.col("n_messages").fill_null(0)))
        assert set(calls["n_messages"].fill_null(0).unique().to_list()) >= {0, 1, 2}
    t = c.truth.filter(pl.col("mpi_call") == "MPI_Testsome").select("run_name", "task", "burst_seq", "logical_id")
    runs = read_campaign(c)
    got = []
    for r, run in enumerate(runs):
        calls = run.mpi_calls.filter(pl.col("mpi_call") == "MPI_Testsome").with_columns(
            pl.int_range(pl.len()).over("task").alias("k"))
        lids = t.filter(pl.col("run_name") == run.run_id).sort("task", "burst_seq").with_columns(
            pl.int_range(pl.len()).over("task").alias("k"))
        got.append(calls.join(lids, on=["task", "k"]).select("logical_id", pl.col("n_messages").fill_null(0)
                                                             .alias(f"n{r}")))
    both = got[0].join(got[1], on="logical_id")
    assert both.height > 100
    assert (both["n0"] != both["n1"]).mean() > 0.05
    waitany = [_calls(c, r).filter(pl.col("mpi_call") == "MPI_Waitany").height for r in (0, 1)]
    assert waitany[0] != waitany[1]


def test_polling_counts_differ_and_reach_hundreds(sims):
    c = sims("polling", ranks=8, iterations=10)
    polls = c.truth.filter(pl.col("role") == "poll").group_by("run_name", "iteration").len()
    assert polls["len"].max() >= 200
    a = polls.filter(pl.col("run_name") == "mech.run0").sort("iteration")["len"]
    b = polls.filter(pl.col("run_name") == "mech.run1").sort("iteration")["len"]
    assert (a != b).any()


def test_any_source_order_and_farm_assignment_follow_arrivals(sims):
    """The master receives results in another order in each run; workers get other numbers of tasks; the truth
    follows the messages: a burst id of the master names the worker whose result it processes."""
    c = sims("master_worker", ranks=6, iterations=40)
    order = []
    for r in (0, 1):
        calls = read_campaign(c)[r].mpi_calls
        order.append(calls.filter((pl.col("task") == 1) & (pl.col("mpi_call") == "MPI_Recv"))["peer"].to_list())
    assert order[0] != order[1]
    work = c.truth.filter((pl.col("task") > 1) & (pl.col("mpi_call") == "MPI_Send")).group_by(
        "run_name", "task", "iteration").len()
    wide = work.pivot(on="run_name", index=["task", "iteration"], values="len")
    assert (wide["mech.run0"] != wide["mech.run1"]).any()
    assert c.spec.iterations >= 40


@pytest.mark.parametrize("name, delta", [("extra_inner", 1), ("missing_inner", -1), ("repeated", None),
                                         ("checkpoint", None)])
def test_one_run_does_more_or_less(sims, name, delta):
    c = sims(name, ranks=4, iterations=8)
    n = c.truth.filter(pl.col("role") != "housekeeping").group_by("run_name").len().sort("run_name")["len"]
    assert n[0] != n[1]
    ids = [set(c.truth.filter(pl.col("run_name") == f"mech.run{r}")["logical_id"]) for r in (0, 1)]
    only = ids[1] - ids[0] if (delta or 1) > 0 else ids[0] - ids[1]
    assert only
    span = c.truth.filter(pl.col("span").is_not_null())
    assert (span.height > 0) == (name != "checkpoint")


def test_rotation_symmetric_topologies_exchange_the_same_messages(sims):
    for name in ("ring", "torus"):
        c = sims(name, ranks=4 if name == "ring" else 16, iterations=6)
        calls = read_campaign(c)[0].mpi_calls.filter(pl.col("mpi_call") == "MPI_Isend")
        per_rank = calls.group_by("task").agg(pl.col("bytes_sent").sum(), pl.len())
        assert per_rank["bytes_sent"].n_unique() == 1 and per_rank["len"].n_unique() == 1


def test_call_site_modes(sims):
    none = read_campaign(sims("no_callers", ranks=4, iterations=6))[0]
    assert none.mpi_calls["call_site"].null_count() == none.mpi_calls.height
    one = read_campaign(sims("one_site", ranks=4, iterations=6))[0]
    assert one.mpi_calls["call_site"].n_unique() == 1


def test_counter_pairs_and_single_counters(sims):
    pairs = sims("pairs8", ranks=4, iterations=4)
    assert len(pairs.traces) == 8 and all(len(s) == 2 for s in pairs.counters)
    single = sims("single10", ranks=4, iterations=4)
    assert len(single.traces) == 10 and all(len(s) == 1 for s in single.counters)
    assert not set.intersection(*(set(s) for s in single.counters))


def test_varying_rates_change_between_iterations(sims):
    c = sims("varying_rates", ranks=4, iterations=8)
    t = c.truth.filter((pl.col("run_name") == "mech.run0") & (pl.col("mpi_call") == "MPI_Testsome")).with_columns(
        (pl.col("PAPI_L1_DCM") / pl.col("PAPI_TOT_INS")).alias("rate"))
    per_it = t.group_by("iteration").agg(pl.col("rate").median()).sort("iteration")["rate"]
    assert (per_it.shift(1) / per_it - 1).abs().drop_nulls().min() > 0.05


def _timing(n: int) -> Timing:
    return Timing(np.full(40, 0.5), 0.0, lambda a, b: 1000.0, lambda a, b: 10.0, np.ones(n), os_noise_p=0.0)


def test_non_overtaking_and_any_source():
    """Two messages on one channel arrive in send order even when the second is smaller; an ANY_SOURCE receive
    takes the first to arrive."""
    def sender(big: int, delay: float):
        yield Call("MPI_Send", 0, delay, 1, peer=2, tag=5, size=big)
        yield Call("MPI_Send", 0, 10.0, 2, peer=2, tag=5, size=8)
        yield Call("END", 0, 10.0, 3)

    got = []

    def receiver():
        for i in range(4):
            src, size = yield Call("MPI_Recv", 0, 10.0, 10 + i, peer=ANY, tag=5)
            got.append((src, size))
        yield Call("END", 0, 10.0, 20)

    Executor([sender(10_000_000, 10.0), sender(80, 1e5), receiver()], _timing(3), np.zeros(3)).run()
    # rank 1's messages come first; rank 0's small message waits behind its big one
    assert got == [(1, 80), (1, 8), (0, 10_000_000), (0, 8)]


def _sender(delay: float, tag: int):
    """Rank 0 or 1 of a three-rank test: one 100-byte MPI_Send to rank 2 after ``delay`` instructions."""
    yield Call("MPI_Send", 0, delay, 1, peer=2, tag=tag, size=100)
    yield Call("END", 0, 10.0, 2)


def test_completion_calls_complete_by_arrival():
    """Testsome completes the receives that have arrived when it is called; Waitany the first one to arrive;
    a Recv from a given source takes that sender's messages in order."""
    seen = {}

    def receiver():
        a = yield Call("MPI_Irecv", 0, 10.0, 10, peer=0, tag=1)
        b = yield Call("MPI_Irecv", 0, 10.0, 11, peer=1, tag=2)
        seen["early"] = yield Call("MPI_Testsome", 0, 100.0, 12, reqs=(a, b))  # at ~0.1 us: nothing yet
        seen["mid"] = yield Call("MPI_Testsome", 0, 8000.0, 13, reqs=(a, b))  # at ~4 us: rank 0's message only
        seen["any"] = yield Call("MPI_Waitany", 0, 10.0, 14, reqs=(b,))
        yield Call("END", 0, 10.0, 15)

    # rank 0 sends at 0.5 us (arrives ~1.5 us), rank 1 at 20 us (arrives ~21 us)
    Executor([_sender(1000.0, 1), _sender(40_000.0, 2), receiver()], _timing(3), np.zeros(3)).run()
    assert seen["early"] == () and seen["mid"] == (0,) and seen["any"] == 1


# ------------------------------------------------------------------------------------------ later mechanisms
#: mechanisms whose runs execute the same logical program (no extra, missing or repeated work in one run)
SAME_PROGRAM = ("waitsome", "sendrecv", "persistent", "nb_collective", "sub_comms", "amr", "clock_offsets", "layout",
                "flush", "flush_all", "hybrid", "hybrid_locks", "completion", "placement", "irecv_any", "noisy")


def _logical_messages(run) -> pl.DataFrame:
    """(sender, receiver, tag, k, bytes) of every message of a run read back, k its order on its channel by the
    sender's clock, with the receiver's physical receive time."""
    return (run.messages.sort("s_time_ns")
            .with_columns(pl.int_range(pl.len()).over("s_task", "r_task", "tag").alias("k")))


@pytest.mark.parametrize("name", SAME_PROGRAM)
def test_logical_messages_are_the_same_in_every_run(sims, name):
    """Whatever the timing (completion order, clocks, layout, flushes, threads), a deterministic program sends the
    same messages: (sender, receiver, tag, k) -> bytes is identical across runs (MPI's non-overtaking rule)."""
    c = sims(name, iterations=8)
    msgs = [_logical_messages(r).select("s_task", "r_task", "tag", "k", "size") for r in read_campaign(c)]
    assert msgs[0].height > 50
    for m in msgs[1:]:
        assert m.sort(m.columns).equals(msgs[0].sort(m.columns))


@pytest.mark.parametrize("name", ["sendrecv", "waitsome", "clock_offsets", "layout"])
def test_messages_on_a_channel_are_received_in_send_order(sims, name):
    """Non-overtaking: on one (sender, receiver, tag) channel the k-th message completes no later than the
    (k+1)-th, on the receiver's clock."""
    c = sims(name, iterations=8)
    for run in read_campaign(c):
        m = _logical_messages(run).sort("s_task", "r_task", "tag", "k")
        back = m.with_columns((pl.col("r_time_ns").diff().over("s_task", "r_task", "tag") < 0).alias("back"))
        assert back["back"].fill_null(False).sum() == 0


def _physical_times(prv) -> pl.DataFrame:
    """Physical send and receive times of the trace's ``3:`` records."""
    rows = [line.split(":") for line in prv.read_text().splitlines() if line.startswith("3:")]
    return pl.DataFrame({"send": [int(r[6]) for r in rows], "recv": [int(r[12]) for r in rows]})


def test_clock_offsets_put_some_receives_before_their_sends(sims):
    """Node clocks that disagree by tens of us: some messages arrive (receiver's clock) before they left (sender's
    clock), as in real traces from unsynchronised nodes; with one clock none does."""
    skewed = [_physical_times(p) for p in sims("clock_offsets", iterations=8).traces]
    assert any((t["recv"] < t["send"]).any() for t in skewed)
    one_clock = [_physical_times(p) for p in sims("layout", iterations=8).traces]
    assert not any((t["recv"] < t["send"]).any() for t in one_clock)


def test_sendrecv_and_persistent_calls_carry_both_directions(sims):
    sr = read_campaign(sims("sendrecv", iterations=6))[0].mpi_calls
    both = sr.filter(pl.col("mpi_call").is_in(["MPI_Sendrecv", "MPI_Sendrecv_replace"]))
    assert set(both["mpi_call"]) == {"MPI_Sendrecv", "MPI_Sendrecv_replace"}
    assert (both["bytes_sent"] > 0).all() and (both["bytes_recv"] > 0).all()
    pe = read_campaign(sims("persistent", iterations=6))[0].mpi_calls
    starts = pe.filter(pl.col("mpi_call") == "MPI_Startall")
    assert starts.height == 8 * 6 and (starts["bytes_sent"] > 0).all()
    inits = pe.filter(pl.col("mpi_call").is_in(["MPI_Send_init", "MPI_Recv_init"])).group_by("task", "mpi_call").len()
    assert inits["len"].min() >= 2
    assert pe.filter(pl.col("mpi_call") == "MPI_Isend").height == 0


def test_nonblocking_collective_completes_after_every_rank_posted(sims):
    """The k-th MPI_Wait on an Iallreduce ends after the last rank posted its k-th Iallreduce."""
    c = sims("nb_collective", iterations=6)
    calls = read_campaign(c)[0].mpi_calls
    post = calls.filter(pl.col("mpi_call") == "MPI_Iallreduce").with_columns(pl.int_range(pl.len()).over("task")
                                                                              .alias("k"))
    wait = calls.filter((pl.col("mpi_call") == "MPI_Wait") & (pl.col("call_site").str.contains("solver"))
                        ).with_columns(pl.int_range(pl.len()).over("task").alias("k"))
    assert post.height == wait.height == 8 * 6
    last = post.group_by("k").agg(pl.col("start_ns").max().alias("last"))
    assert (wait.join(last, on="k")["end_ns"] >= wait.join(last, on="k")["last"]).all()
    assert calls.filter(pl.col("mpi_call").is_in(["MPI_Allreduce", "MPI_Barrier"])).height <= 8  # prologue only


def test_sub_communicator_collectives_synchronise_their_members_only(sims):
    c = sims("sub_comms", iterations=6)
    calls = read_campaign(c)[0].mpi_calls.filter(pl.col("mpi_call") == "MPI_Allreduce")
    assert set(calls["comm"].unique()) == set(range(2, 10))  # 4 rows, 4 columns of a 4x4 grid
    per = calls.with_columns(pl.int_range(pl.len()).over("task", "comm").alias("k")).group_by("comm", "k").agg(
        pl.len().alias("n"), pl.col("start_ns").max().alias("last_in"), pl.col("end_ns").min().alias("first_out"))
    assert (per["n"] == 4).all() and (per["first_out"] >= per["last_in"]).all()
    # rows do not wait for each other: some row's reduction ends before another row's starts
    k0 = per.filter(pl.col("k") == 0)
    assert k0["first_out"].min() < k0["last_in"].max()


def test_amr_changes_sizes_and_neighbours(sims):
    c = sims("amr", iterations=24)
    m = _logical_messages(read_campaign(c)[0])
    assert m.group_by("s_task", "r_task").agg(pl.col("size").n_unique())["size"].max() > 3
    pairs = [set(zip(*m.filter(pl.col("s_time_ns").is_between(lo, hi)).select("s_task", "r_task")))
             for lo, hi in ((0, m["s_time_ns"].quantile(0.3)), (m["s_time_ns"].quantile(0.7), 2**62))]
    assert pairs[0] != pairs[1]


def test_flushes_cut_bursts_in_the_flushing_run_only(sims):
    c = sims("flush", iterations=8)
    runs = read_campaign(c)
    no_call = [r.bursts.filter(pl.col("mpi_call").is_null()).height for r in runs]
    assert no_call[1] > no_call[0] + 5
    cut = pl.col("logical_id").and_(NO_MATCH_BIT) != 0
    flush = c.truth.filter(cut)
    assert set(flush["run_name"]) == {"mech.run1"}
    all_runs = sims("flush_all", iterations=8).truth.filter(cut)
    assert set(all_runs["run_name"]) == {"mech.run0", "mech.run1"}


def test_hybrid_worker_threads_run_inside_their_regions(sims):
    """4 threads per rank; worker threads make no MPI call and each worker burst lies inside the master's burst
    of the same parallel region; with locks the number of pieces per region differs between runs."""
    c = sims("hybrid", iterations=6)
    run = read_campaign(c)[0]
    assert set(run.bursts["thread"].unique()) == {1, 2, 3, 4}
    assert run.bursts.filter(pl.col("thread") > 1)["mpi_call"].null_count() == (run.bursts["thread"] > 1).sum()
    t = c.truth.filter(pl.col("run_name") == "mech.run0")
    region = (pl.col("logical_id") & ((1 << 58) - 1)).alias("region")
    master = t.filter(pl.col("thread") == 1).select("task", region, pl.col("start_ns").alias("m0"),
                                                     (pl.col("start_ns") + pl.col("duration_ns")).alias("m1"))
    w = t.filter(pl.col("thread") > 1).select("task", region, "start_ns", "duration_ns").join(
        master, on=["task", "region"])
    assert w.height == 3 * master.join(w.select("task", "region").unique(), on=["task", "region"]).height
    assert ((w["start_ns"] >= w["m0"]) & (w["start_ns"] + w["duration_ns"] <= w["m1"])).all()
    # as Extrae writes them: a region opens on the master (60000001), each worker runs the outlined function
    # (60000018) and enters the join barrier (60000005) at its burst's end
    lines = c.traces[0].read_text().splitlines()
    regions = w.select("task", "region").unique().height
    assert sum(":60000001:3" in x for x in lines) == regions
    assert sum(":60000018:3" in x for x in lines) == sum(":60000005:1" in x for x in lines) == 3 * regions
    locks = sims("hybrid_locks", iterations=6).truth.filter(pl.col("thread") > 1)
    pieces = locks.group_by("run_name", "task", "thread").len().pivot(on="run_name", index=["task", "thread"],
                                                                        values="len")
    assert (pieces["mech.run0"] != pieces["mech.run1"]).any()


def test_runs_differ_in_iteration_counts_where_the_plan_says(sims):
    tail = sims("tail", iterations=8, runs=3)
    last = tail.truth.filter(pl.col("role") == "work").group_by("run_name").agg(pl.col("iteration").max()).sort(
        "run_name")["iteration"].to_list()
    assert last == [7, 9, 5]
    inner = sims("inner_counts", iterations=8).truth.filter((pl.col("mpi_call") == "MPI_Waitall")
                                                            & (pl.col("task") == 1))
    per_it = inner.group_by("run_name", "iteration").len().pivot(on="run_name", index="iteration", values="len")
    assert (per_it["mech.run0"] != per_it["mech.run1"]).sum() == 3


def test_testany_completes_one_and_waitsome_every_arrived():
    """Two receives arrived: MPI_Testany completes one of them (the first to arrive), MPI_Waitsome the rest;
    a Waitsome called before anything arrived returns with the first arrival only."""
    seen = {}

    def receiver():
        a = yield Call("MPI_Irecv", 0, 10.0, 10, peer=0, tag=1)
        b = yield Call("MPI_Irecv", 0, 10.0, 11, peer=1, tag=2)
        seen["early"] = yield Call("MPI_Waitsome", 0, 10.0, 12, reqs=(a, b))  # rank 0's arrives first
        c = yield Call("MPI_Irecv", 0, 10.0, 13, peer=0, tag=3)
        seen["any"] = yield Call("MPI_Testany", 0, 200_000.0, 14, reqs=(b, c))  # at ~100 us both have arrived
        seen["some"] = yield Call("MPI_Waitsome", 0, 10.0, 15, reqs=(b, c))
        yield Call("END", 0, 10.0, 16)

    def sender2():
        yield Call("MPI_Send", 0, 1000.0, 1, peer=2, tag=1, size=100)
        yield Call("MPI_Send", 0, 20_000.0, 3, peer=2, tag=3, size=100)
        yield Call("END", 0, 10.0, 4)

    Executor([sender2(), _sender(30_000.0, 2), receiver()], _timing(3), np.zeros(3)).run()
    assert seen["early"] == (0,)
    assert seen["any"] == (2,) and seen["some"] == (1,)  # rank 0's second message (21 us) before rank 1's (30 us)


def test_point_to_point_calls_carry_their_messages_bytes(sims):
    """A send records the bytes it sent, a receive those it received, as a tracer writes them: no negative
    collective sizes on point-to-point calls (the writer's 50100001/2 events carry only a collective's sizes)."""
    c = sims("completion", ranks=4, iterations=4)
    run = read_campaign(c)[0]
    sent = run.mpi_calls.filter(pl.col("mpi_call") == "MPI_Isend")
    assert (sent["bytes_sent"] > 0).all() and sent["bytes_sent"].sum() == run.messages["size"].sum()
    assert ":-" not in "".join(line for line in c.traces[0].read_text().splitlines() if line.startswith("2:"))


def test_any_source_irecvs_take_faces_in_arrival_order():
    """Two Irecv(ANY_SOURCE) posted before anything arrived take the messages in the order they arrive (the
    later sender's message first when it is faster), and a Waitall over them ends after both arrived."""
    def sender(delay: float):
        yield Call("MPI_Send", 0, delay, 1, peer=2, tag=7, size=100)
        yield Call("END", 0, 10.0, 2)

    got = {}

    def receiver():
        a = yield Call("MPI_Irecv", 0, 10.0, 10, peer=ANY, tag=7)
        b = yield Call("MPI_Irecv", 0, 10.0, 11, peer=ANY, tag=7)
        got["done"] = yield Call("MPI_Waitall", 0, 10.0, 12, reqs=(a, b))
        yield Call("END", 0, 10.0, 13)

    ex = Executor([sender(60_000.0), sender(2000.0), receiver()], _timing(3), np.zeros(3))
    ex.run()
    first = sorted(ex.messages, key=lambda m: m.r_l)
    assert [m.src for m in ex.messages] == [1, 0] and [m.src for m in first] == [1, 0]
    assert min(m.r_p for m in ex.messages) >= max(m.arrival for m in ex.messages)


@pytest.mark.parametrize("name", ["renumbered", "renumbered_torus"])
def test_renumbered_run_keeps_the_logical_messages_under_its_permutation(sims, name):
    """Run 1 numbers its ranks by a permutation: its messages are run 0's with the tasks renamed, and the truth
    names the same logical bursts on the renamed tasks."""
    c = sims(name, iterations=6)
    runs = read_campaign(c)
    t0 = c.truth.filter(pl.col("run_name") == "mech.run0").select("logical_id", pl.col("task").alias("t0"))
    t1 = c.truth.filter(pl.col("run_name") == "mech.run1").select("logical_id", pl.col("task").alias("t1"))
    perm = dict(t0.join(t1, on="logical_id").unique(["t0", "t1"]).select("t0", "t1").iter_rows())
    assert len(perm) == c.spec.ranks and perm != {t: t for t in perm}
    m0 = _logical_messages(runs[0]).select(pl.col("s_task").replace_strict(perm), pl.col("r_task").replace_strict(perm),
                                           "tag", "k", "size")
    m1 = _logical_messages(runs[1]).select("s_task", "r_task", "tag", "k", "size")
    assert m0.sort(m0.columns).equals(m1.sort(m0.columns).cast(m0.schema))


def _rows(ex, task: int, call: str) -> list[tuple[float, float]]:
    """(entry, exit) of every ``call`` of ``task`` in an execution."""
    b = ex.bursts
    return [(e, x) for t, c, e, x in zip(b["task"], b["call"], b["end"], b["exit"]) if t == task and c == call]


@pytest.mark.parametrize("blocking", [True, False])
def test_rendezvous_send_waits_for_the_posted_receive(blocking):
    """Above the eager limit a send's data leaves only once the receive is posted: an MPI_Send (or the Wait of an
    Isend) returns after the receiver, busy for 50 us, posts its receive; below it, at once."""
    def sender(size: int):
        if blocking:
            yield Call("MPI_Send", 0, 10.0, 1, peer=1, tag=1, size=size)
        else:
            req = yield Call("MPI_Isend", 0, 10.0, 1, peer=1, tag=1, size=size)
            yield Call("MPI_Wait", 0, 10.0, 2, reqs=(req,))
        yield Call("END", 0, 10.0, 3)

    def receiver():
        yield Call("MPI_Recv", 0, 100_000.0, 10, peer=0, tag=1)  # 50 us of work first
        yield Call("END", 0, 10.0, 11)

    done = "MPI_Send" if blocking else "MPI_Wait"
    for size, waits in ((1 << 20, True), (1 << 10, False)):
        t = _timing(2)
        t.eager_limit = 64 * 1024
        ex = Executor([sender(size), receiver()], t, np.zeros(2)).run()
        (_, sent), = _rows(ex, 0, done)
        (posted, got), = _rows(ex, 1, "MPI_Recv")
        assert bool(sent > posted) == waits
        assert got > posted + (1 << 20) / 10.0 * 0.9 if waits else got < posted + 1000.0 + (1 << 10)
    # the receive side of an ANY_SOURCE receive matches the envelope, then the data comes
    ex_any = []

    def any_receiver():
        src, size = yield Call("MPI_Recv", 0, 100_000.0, 10, peer=ANY, tag=1)
        ex_any.append((src, size))
        yield Call("END", 0, 10.0, 11)
    t = _timing(2)
    t.eager_limit = 64 * 1024
    Executor([sender(1 << 20), any_receiver()], t, np.zeros(2)).run()
    assert ex_any == [(0, 1 << 20)]


def test_rendezvous_campaign_makes_the_same_large_sends_in_both_runs(sims):
    """The rendezvous mechanism: both runs send the same messages above the eager limit (the protocol changes when
    a send returns, never which messages there are)."""
    c = sims("rendezvous", ranks=6, iterations=8)
    assert c.spec.eager_limit == 65536
    big = [_calls(c, r).filter(pl.col("bytes_sent") > 65536) for r in range(2)]
    assert big[0].height and big[0].height == big[1].height


def test_any_tag_receives_take_one_source_in_send_order_and_say_the_tag():
    """MPI_ANY_TAG: from one source, messages of any tag are received in the order they were sent (non-overtaking),
    even when a later small one arrives before an earlier large one; the outcome names the tag. From ANY_SOURCE,
    the first to arrive."""
    def sender(delay: float):
        yield Call("MPI_Send", 0, delay, 1, peer=2, tag=7, size=4_000_000)
        yield Call("MPI_Send", 0, 10.0, 2, peer=2, tag=8, size=8)
        yield Call("END", 0, 10.0, 3)

    got = []

    def receiver():
        for i in range(2):
            got.append((yield Call("MPI_Recv", 0, 10.0, 10 + i, peer=0, tag=ANY)))
        for i in range(2):
            got.append((yield Call("MPI_Recv", 0, 10.0, 20 + i, peer=ANY, tag=ANY)))
        yield Call("END", 0, 10.0, 30)

    Executor([sender(10.0), sender(1e6), receiver()], _timing(3), np.zeros(3)).run()
    assert got[:2] == [(0, 4_000_000, 7), (0, 8, 8)]
    assert got[2:] == [(1, 4_000_000, 7), (1, 8, 8)]


def _rank0_lids(programs: list, sources: list[int], steps: list[int]) -> list[list[int]]:
    """Drive the rank-0 programs of several runs in one process, interleaved: ``steps[i]`` is the program to advance
    next by one call; every ``MPI_Iprobe`` finds the next of ``sources`` (per program), every receive takes it.
    Returns each program's logical burst ids in call order."""
    out: list[list[int]] = [[] for _ in programs]
    reply: list = [None] * len(programs)
    nxt = [0] * len(programs)
    ended: set[int] = set()
    for i in steps:
        if i in ended:
            continue
        try:
            c = programs[i].send(reply[i]) if out[i] else next(programs[i])
        except StopIteration:
            ended.add(i)
            continue
        out[i].append(c.lid)
        if c.name == "MPI_Iprobe":
            reply[i] = sources[nxt[i] % len(sources)]
            nxt[i] += 1
        elif c.name == "MPI_Recv":
            reply[i] = (c.peer, c.size)
        else:
            reply[i] = None
    return out


def test_two_runs_generated_at_once_keep_their_own_gather_truth():
    """Rank 0 names the burst that processes a gathered result by the message's k (its source's results so far in
    this run); two runs generated in one process at the same time (a parallel campaign build) must each count their
    own results, so each run's truth is what it is when generated alone."""
    from dataclasses import replace

    from synthtrace.simulator.mechanisms import Logic, RunPlan, Shape, spmd
    spec = replace(campaign("plain", 0, ranks=4, iterations=6),
                   shape=Shape(topology="none", gather=True, coll_every=0, sites="normal"))
    lg = Logic.draw(spec)

    def rank0():
        return spmd(0, lg, RunPlan(), np.random.default_rng(1))
    n = 80  # more calls than a program makes: the prologue, 6 gathers, the epilogue
    alone = _rank0_lids([rank0()], [3, 3, 1, 2], [0] * n)[0]
    # run B is generated whole while run A is in its third round
    together = _rank0_lids([rank0(), rank0()], [3, 3, 1, 2], [0] * 25 + [1] * n + [0] * n)
    assert together[0] == alone
    assert together[1] == alone


@pytest.mark.parametrize("change", [dict(renumber_run=1), dict(mechanism="hybrid")])
def test_an_otf2_campaign_it_cannot_write_is_refused_before_any_run(change, tmp_path):
    """The OTF2 output writes neither renumbered runs nor threads: refused before the first run is simulated
    (tidy19: checked once, no longer inside the loop over runs, after writing the runs before)."""
    from dataclasses import replace

    from synthtrace.tracelib.errors import BadInputError

    spec = campaign(change.pop("mechanism", "late_trace"), 0, ranks=4, iterations=3)
    with pytest.raises(BadInputError, match="neither renumbered runs nor threads"):
        simulate(tmp_path, replace(spec, trace_format="otf2", **change))
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
