"""The whole-run merge reads only the columns it uses (issue 23: ``merge`` held both runs' MPI calls with their
counters, kind, cpu, root, duration and run id, and the bursts' run id, ~1 kB per burst of the pair at its peak):
the runs it is handed carry the calls' :data:`CALL_COLUMNS` alone, and its merge (merged bursts, matches, quality,
warnings) is the merge of the whole tables, on the real LULESH and OTF2 pairs."""
from __future__ import annotations

import gc
import inspect
import re
import warnings
import weakref
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import synthtrace
import synthtrace.tracelib.merge.merge_runs as merge_runs_module
from synthtrace.tracelib.merge import align as align_module
from synthtrace.tracelib.merge import anchors
from synthtrace.tracelib.merge.merge_runs import CALL_COLUMNS, MergeOptions, MergeResult, RunTables, merge_runs
from synthtrace.warehouse import merged as merged_module
from synthtrace.warehouse.layout import Warehouse
from testing.kernels import OTF2_PAIR
from testing.stored_runs import whole_run_tables
from testing.traces import LULESH_A, LULESH_B, copy_trace


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def _stored(tmp: Path, traces: list[Path], experiment: str = "pair"):
    """The experiment of ``traces`` ingested into the warehouse ``tmp/wh``."""
    for t in traces:
        synthtrace.ingest(str(tmp / "wh"), str(t), experiment=experiment)
    return Warehouse(tmp / "wh").experiment(experiment)


def _spied_and_whole(exp, monkeypatch: pytest.MonkeyPatch,
                     options: MergeOptions = MergeOptions()) -> tuple[MergeResult, MergeResult]:
    """The merge ``merge_stored`` commits with the spies set on ``monkeypatch`` (undone after it), and the merge of
    the experiment's whole tables."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = merged_module.merge_stored(exp, options)
        monkeypatch.undo()
        whole = merge_runs(whole_run_tables(exp), options, experiment=exp.name)
    return got, whole


def _assert_committed_is_whole(exp, got: MergeResult, whole: MergeResult) -> None:
    """The committed merge tables and warnings are those of the merge of the whole tables."""
    for name, frame in (("merged_bursts", whole.merged), ("merge_matches", whole.matches),
                        ("merge_quality", whole.quality)):
        committed = pl.read_parquet(exp.dir / f"{name}.parquet")
        assert committed.schema == frame.schema
        assert _sorted(committed).equals(_sorted(frame)), name
    assert got.warnings == whole.warnings


def _assert_slim_merge_is_the_whole_merge(tmp: Path, traces: list[Path], options: MergeOptions,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    exp = _stored(tmp, traces)
    seen: list[list[RunTables]] = []

    def spy(runs, *args, **kwargs):
        seen.append(list(runs))
        return merge_runs(runs, *args, **kwargs)

    monkeypatch.setattr(merged_module, "merge_runs", spy)
    got, whole = _spied_and_whole(exp, monkeypatch, options)
    (runs,) = seen
    for r in runs:  # what the merge holds: the calls' columns it reads, no run id
        names = r.mpi_calls.collect_schema().names()
        assert names == [c for c in CALL_COLUMNS if c in names]
        assert "run_id" not in r.bursts.lazy().collect_schema().names()
        assert r.mpi_calls.lazy().select(pl.len()).collect().item() > 0
    _assert_committed_is_whole(exp, got, whole)


def test_otf2_merge_of_the_columns_it_reads_is_the_whole_merge(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The real OTF2 ping-pong pair (no common counter: matched by structure and timing)."""
    _assert_slim_merge_is_the_whole_merge(tmp_path, OTF2_PAIR, MergeOptions(allow_timing_only=True), monkeypatch)


@pytest.mark.slow
def test_lulesh_merge_of_the_columns_it_reads_is_the_whole_merge(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The real LULESH pair (uncore readers: DRAM_CAS apportioned; unmatched bursts estimated, which aligns each
    run's calls again)."""
    _assert_slim_merge_is_the_whole_merge(tmp_path, [LULESH_A, LULESH_B], MergeOptions(estimate_unmatched=True),
                                          monkeypatch)


# ------------------------------------------------------------------ what the alignment holds (issue 23, step 2)
def _pair_runs(merged_lulesh: Path) -> list[RunTables]:
    """The LULESH pair's merge inputs, read from the session's ingested warehouse (reading writes nothing there)."""
    return merged_module.merge_inputs(Warehouse(merged_lulesh).experiment("lulesh-8r"))


def _merge(runs: list[RunTables], options: MergeOptions) -> MergeResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return merge_runs(runs, options, experiment="pair")


def test_join_by_threads_is_the_join() -> None:
    """Joined a group of threads at a time, two tables' keys give the rows of the whole join; the groups keep
    every thread whole and within the rows asked for (a thread longer than that alone)."""
    left = pl.DataFrame({"_tid": [3, 3, 3, 1, 1, 7, 9, 9], "k": [0, 1, 2, 0, 1, 0, 0, 1], "_row": range(8)})
    right = pl.DataFrame({"_tid": [1, 3, 3, 7, 7, 9, 4], "k": [1, 2, 0, 0, 0, 5, 0], "_orow": range(7)})
    groups = anchors.thread_groups(left.get_column("_tid"), 3)
    assert [g.to_list() for g in groups] == [[1], [3], [7, 9]]
    whole = left.join(right, on=["_tid", "k"])
    for rows in (1, 2, 3, 100):
        got = anchors.join_by_threads(left, right, ["_tid", "k"], rows)
        assert _sorted(got).equals(_sorted(whole)), rows


def test_lulesh_alignment_a_thread_at_a_time_is_the_whole(
        merged_lulesh: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real LULESH pair merged with the runs' keys joined one thread at a time gives the merge of the whole
    joins (every table, every column; the warnings), and the sequence tables carry the counters the alignment
    compares only (2 of the reference's 5: one Float64 column per burst each)."""
    runs = _pair_runs(merged_lulesh)
    whole = _merge(runs, MergeOptions())
    seqs: list[pl.DataFrame] = []
    groups: list[int] = []
    sequence_table, thread_groups = merge_runs_module.sequence_table, anchors.thread_groups

    def spy_seq(*args, **kwargs):
        seqs.append(sequence_table(*args, **kwargs))
        return seqs[-1]

    def spy_groups(*args, **kwargs):
        groups.append(len(thread_groups(*args, **kwargs)))
        return thread_groups(*args, **kwargs)

    monkeypatch.setattr(merge_runs_module, "sequence_table", spy_seq)
    monkeypatch.setattr(anchors, "thread_groups", spy_groups)
    monkeypatch.setattr(anchors, "JOIN_ROWS", 1)
    parted = _merge(runs, MergeOptions())
    assert max(groups) >= 8  # one group per thread of the 8 ranks (and the uncore readers')
    for name in ("merged", "matches", "quality"):
        a, b = getattr(parted, name), getattr(whole, name)
        assert a.schema == b.schema
        assert _sorted(a).equals(_sorted(b)), name
    assert parted.warnings == whole.warnings
    assert len(seqs) == 2
    assert runs[0].counters and len(runs[0].counters) > 2
    for seq in seqs:
        assert [c for c in seq.columns if c.startswith("f_")] == ["f_PAPI_TOT_INS", "f_PAPI_TOT_CYC"]


# ------------------------------------------------------------------ the runs' calls during the alignment (issue 23)
def _calls_alive() -> list[pl.DataFrame]:
    """The MPI calls tables alive in the process (frames with ``call_seq`` and ``mpi_call``, rows)."""
    return [o for o in gc.get_objects() if isinstance(o, pl.DataFrame) and o.height
            and {"call_seq", "mpi_call"} <= set(o.columns)]


def test_no_run_calls_held_while_aligning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real OTF2 pair: while the other run is aligned, neither run's MPI calls are held (what the
    checks read of them, call structure and opening messages, was derived before), and the merge committed is the
    merge of the whole tables."""
    alive: list[int] = []
    align_runs = merge_runs_module.align_runs

    def spy(*args, **kwargs):
        gc.collect()
        alive.append(len(_calls_alive()))
        return align_runs(*args, **kwargs)

    monkeypatch.setattr(merge_runs_module, "align_runs", spy)
    _assert_slim_merge_is_the_whole_merge(tmp_path, OTF2_PAIR, MergeOptions(allow_timing_only=True), monkeypatch)
    assert alive == [0]  # the whole-run merge of merge_stored (the spies are undone before the whole tables')


# ------------------------------------------------------------------ a campaign's runs one at a time (issue 23, F8)
def _another_day(prv: Path, dest: Path, day: int) -> Path:
    """A copy of the Paraver trace ``prv`` (with its .pcf and .row) whose header says it ran on ``day`` of its
    month: another run of the same program."""
    copy = copy_trace(prv, dest, f"{prv.stem}.day{day}")
    head, rest = copy.read_bytes().split(b"\n", 1)
    copy.write_bytes(re.sub(rb"^#Paraver \(\d\d/", b"#Paraver (%02d/" % day, head) + b"\n" + rest)
    return copy


def test_a_campaign_s_runs_are_let_go_once_aligned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of a 3-run campaign of the real LULESH traces (the 4+4 run, the same on another day, the 7+1 run):
    while a run is aligned, nothing of the run aligned before it is alive (its bursts, its match table, the
    bursts its values come from): memory does not grow with the number of runs (attack 12 F8: 7 runs of 270 MB
    needed 2.66 GB, 2 of them 1.07 GB); and the merge committed is the merge of the whole tables (every table and
    column, the warnings)."""
    exp = _stored(tmp_path, [LULESH_A, _another_day(LULESH_A, tmp_path / "traces", 22), LULESH_B], "three")
    assert len(exp.run_ids) == 3
    runs: list[list[weakref.ref]] = []  # per other run aligned, its frames
    alive: list[int] = []
    align_other, align_runs = merge_runs_module._align_other, merge_runs_module.align_runs

    def spy_other(ref, o, *args, **kwargs):
        info = align_other(ref, o, *args, **kwargs)
        runs.append([weakref.ref(f) for f in (o.bursts, info.run.bursts, info.matches, info.source)
                     if isinstance(f, pl.DataFrame)])  # a stored run's bursts are a lazy scan, read when needed
        return info

    def spy_align(*args, **kwargs):
        gc.collect()
        alive.append(sum(f() is not None for frames in runs for f in frames))
        return align_runs(*args, **kwargs)

    monkeypatch.setattr(merge_runs_module, "_align_other", spy_other)
    monkeypatch.setattr(merge_runs_module, "align_runs", spy_align)
    got, whole = _spied_and_whole(exp, monkeypatch)
    assert alive == [0, 0]
    _assert_committed_is_whole(exp, got, whole)


# ------------------------------------------------------------------ the 2 x 550 MB peak (issue 23, mergemem14)
def _frames_with(column: str) -> int:
    """How many frames alive in the process have ``column``."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, pl.DataFrame) and column in o.columns)


def test_the_sequence_table_lets_the_calls_copy_go_before_it_grows(merged_lulesh: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``sequence_table`` of the real LULESH pair: once the calls closing and opening each burst are gathered, its
    copy of the calls (``_csig``) and the gathered call columns (``open_peer``, ...) are not alive while the table
    takes its message ends, hosts and features (``host_rows``: the step after), and the merge is the whole one."""
    runs = _pair_runs(merged_lulesh)
    whole = _merge(runs, MergeOptions())
    seen: list[tuple[int, int]] = []
    host_rows = align_module.host_rows

    def spy(*args, **kwargs):
        seen.append((_frames_with("_csig"), _frames_with("open_peer")))
        return host_rows(*args, **kwargs)

    monkeypatch.setattr(align_module, "host_rows", spy)
    got = _merge(runs, MergeOptions())
    assert len(seen) >= 2 and set(seen) == {(0, 0)}  # the reference's table and the other run's
    for name in ("merged", "matches", "quality"):
        a, b = getattr(got, name), getattr(whole, name)
        assert a.schema == b.schema and _sorted(a).equals(_sorted(b)), name


def test_the_other_run_s_sequence_table_is_let_go_before_its_pairs_are_checked(merged_lulesh: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real LULESH pair: once the other run is aligned and its same-program sums taken, its sequence
    table (~290 MB at 550 MB per run) is not alive while its pairs are checked (``_check_opened``: the step that
    peaked at 2 x 550 MB); the reference's is (later runs align to it); the free heap (the table's NumPy-backed
    columns, the alignment's arrays) is handed back before the checks and before each sequence table; the merge is
    the whole one."""
    runs = _pair_runs(merged_lulesh)
    whole = _merge(runs, MergeOptions())
    tables: list[weakref.ref] = []
    alive: list[list[bool]] = []
    sequence_table, check_opened = merge_runs_module.sequence_table, merge_runs_module._check_opened

    steps: list[str] = []  # the sequence tables made, the free heap handed back, the pairs checked, in order
    release = merge_runs_module.release_free_heap

    def spy_seq(*args, **kwargs):
        out = sequence_table(*args, **kwargs)
        tables.append(weakref.ref(out))
        steps.append("table")
        return out

    def spy_check(*args, **kwargs):
        gc.collect()
        alive.append([t() is not None for t in tables])
        steps.append("check")
        return check_opened(*args, **kwargs)

    def spy_release() -> None:
        steps.append("release")
        release()

    monkeypatch.setattr(merge_runs_module, "sequence_table", spy_seq)
    monkeypatch.setattr(merge_runs_module, "_check_opened", spy_check)
    monkeypatch.setattr(merge_runs_module, "release_free_heap", spy_release)
    got = _merge(runs, MergeOptions())
    assert alive == [[True, False]]  # the reference's table, the other run's let go
    # the heap its NumPy columns and the alignment freed is handed back before the pairs are checked, and before
    # each sequence table (what reading the calls freed)
    last = len(steps) - 1 - steps[::-1].index("table")
    assert "release" in steps[last:steps.index("check")]
    assert all(steps[i - 1] == "release" for i, s in enumerate(steps) if s == "table")
    for name in ("merged", "matches", "quality"):
        a, b = getattr(got, name), getattr(whole, name)
        assert a.schema == b.schema and _sorted(a).equals(_sorted(b)), name
    assert got.warnings == whole.warnings


def test_messages_are_numbered_before_their_sorted_copy_is_made(monkeypatch):
    """issue 23 (a 2 GB OTF2 archive's ingest, 6.45 M messages: 1,787 MB at the numbering of ``mpi_messages``):
    ``_numbered`` sorted a copy of the messages by time and ranked them in their channels beside it (the channel
    ids, the order and the rank arrays). The order and ``k`` are now found on the messages as they came, before any
    sorted column exists; the rows come out in the same order with the same ``k``."""
    import numpy as np

    from synthtrace.tracelib.merge import messages

    rng = np.random.default_rng(5)
    n = 500
    m = pl.DataFrame({
        "appl": pl.Series([1] * n, dtype=pl.Int32), "comm": rng.integers(0, 3, n), "sender":
        pl.Series(rng.integers(0, 4, n), dtype=pl.Int32), "receiver": pl.Series(rng.integers(0, 4, n), dtype=pl.Int32),
        "tag": rng.integers(0, 2, n), "bytes": rng.integers(1, 99, n),
        "s_thread": pl.Series([1] * n, dtype=pl.Int32), "s_call_seq": rng.integers(0, 99, n),
        "s_time_ns": rng.permutation(n).astype(np.int64), "r_thread": pl.Series([1] * n, dtype=pl.Int32),
        "r_call_seq": rng.integers(0, 99, n), "r_time_ns": rng.integers(0, 10 * n, n),
        "c_call_seq": rng.integers(0, 9, n)})
    sorted_frames: list[int] = []
    channel_ids = messages._channel_ids

    def watched(frame):
        gc.collect()
        sorted_frames.append(sum(1 for o in gc.get_objects() if isinstance(o, pl.DataFrame) and o.height == n
                                 and "s_time_ns" in o.columns and o["s_time_ns"].is_sorted()))
        return channel_ids(frame)

    monkeypatch.setattr(messages, "_channel_ids", watched)
    out = messages._numbered(m)
    assert sorted_frames == [0]  # when the channels are ranked, no copy sorted by time is alive
    assert out["s_time_ns"].to_list() == list(range(n))
    window = m.sort("s_time_ns").with_columns(pl.int_range(pl.len()).over(messages.CHANNEL).alias("k"))["k"]
    assert out["k"].to_list() == window.to_list()


# ------------------------------------------------------------------ the 2 x 550 MB peak (issue 23, mergemem16)
def test_the_reference_s_sequence_table_is_spilled_while_the_other_run_s_is_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real LULESH pair (``merge_stored``: its scratch folder): the reference's sequence table is
    written there and not alive while the other run's is built (at 2 x 550 MB that step peaked, ~0.25 GB of it the
    reference's table); the alignment gets it back equal (every column, its order and types); each run's calls are
    read once (the rank correspondence and the alignment share the other run's); the tables hold no gap cost column
    (the aligner computes it from the duration); the merge committed is the merge of the whole tables."""
    exp = _stored(tmp_path, [LULESH_A, LULESH_B])
    tables: list[weakref.ref] = []
    alive: list[list[bool]] = []  # at each sequence table's start, whether the tables made before are alive
    columns: list[list[str]] = []
    read: list[int] = []
    same: list[bool] = []
    first = tmp_path / "first-table.parquet"
    sequence_table, align_runs = merge_runs_module.sequence_table, merge_runs_module.align_runs
    calls_of = merge_runs_module.calls_of

    def spy_seq(*args, **kwargs):
        gc.collect()
        alive.append([t() is not None for t in tables])
        out = sequence_table(*args, **kwargs)
        if not tables:
            out.write_parquet(first)
        tables.append(weakref.ref(out))
        columns.append(out.columns)
        return out

    def spy_align(ref, *args, **kwargs):
        made = pl.read_parquet(first)
        same.append(ref.schema == made.schema and ref.equals(made))
        return align_runs(ref, *args, **kwargs)

    def spy_calls(run):
        read.append(1)
        return calls_of(run)

    monkeypatch.setattr(merge_runs_module, "sequence_table", spy_seq)
    monkeypatch.setattr(merge_runs_module, "align_runs", spy_align)
    monkeypatch.setattr(merge_runs_module, "calls_of", spy_calls)
    got, whole = _spied_and_whole(exp, monkeypatch)
    assert alive == [[], [False]]  # the other run's table is built without the reference's alive
    assert same == [True]
    assert len(read) == 2  # the reference's calls, the other run's: once each
    assert all("gap" not in c for c in columns)
    _assert_committed_is_whole(exp, got, whole)


def _bracketed_by_window(thread, agree, matched) -> pl.Series:
    """What ``message_graph.bracketed`` said as a per-thread fill of Polars window expressions."""
    f = pl.DataFrame({"t": thread, "a": agree}).with_columns(pl.when(pl.col("a") >= 0).then(pl.col("a")).alias("a"))
    f = f.with_columns(pl.col("a").forward_fill().over("t").alias("p"),
                       pl.col("a").backward_fill().over("t").alias("n"))
    return f.select(pl.when(~pl.Series(matched) | (pl.col("p").is_null() & pl.col("n").is_null())).then(None)
                    .otherwise((pl.col("p").fill_null(1) == 1) & (pl.col("n").fill_null(1) == 1))
                    .alias("msg_consistent")).to_series()


def test_messages_are_bracketed_by_a_kernel_not_a_window_over_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checked messages around each pair are found in one byte per row (a window expression over a 550 MB run's
    1.3 M rows held several copies of them at the end of the alignment), with the window's answers: threads in
    order or not, threads with no checked message, unmatched rows."""
    import numpy as np

    from synthtrace.tracelib.merge import message_graph

    rng = np.random.default_rng(7)
    cases = []
    for n, threads in ((1, 1), (2, 2), (50, 3), (5000, 9)):
        agree = rng.choice(np.array([-1, -1, -1, 0, 1, 1], np.int8), n)
        matched = rng.random(n) < 0.9
        thread = np.sort(rng.integers(0, threads, n))
        cases += [(thread, agree, matched), (rng.permutation(thread), agree, matched),
                  (thread, np.full(n, -1, np.int8), matched)]
    cases.append((np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, bool)))
    want = [_bracketed_by_window(*c) for c in cases]
    monkeypatch.setattr(pl.Expr, "over", lambda *a, **k: pytest.fail("a window expression over the rows"))
    for c, w in zip(cases, want, strict=True):
        got = message_graph.bracketed(*c)
        assert got.dtype == pl.Boolean and got.name == "msg_consistent"
        assert got.to_list() == w.to_list()


def test_message_pairs_copy_only_the_key_columns_they_read(
        merged_lulesh: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real LULESH pair: the message pairs are joined on copies of the runs' rows that start with a
    message holding only the keys they are joined and ranked on and the row (a copy of every logical key column
    of those rows, ~1 M per 550 MB run, was alive through the join, at ``key_pairs``' peak)."""
    runs = _pair_runs(merged_lulesh)
    join_pairs = anchors._join_pairs
    seen: list[tuple[list[str], list[str]]] = []

    def spy(rk: pl.DataFrame, ok: pl.DataFrame, on: list[str]):
        if "osig" in on:
            seen.append((sorted(rk.columns), sorted(ok.columns)))
        return join_pairs(rk, ok, on)

    monkeypatch.setattr(anchors, "_join_pairs", spy)
    _merge(runs, MergeOptions())
    want = sorted(["_tid", "_it", "_row", "osig", "_mrank"])
    assert seen and all(r == want and o == want for r, o in seen)


# ------------------------------------------------------------------ the runs' bursts through align_runs (issue 23)
def test_the_runs_bursts_are_not_held_through_the_alignment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real LULESH pair (``merge_stored``: the runs' bursts spilled and handed as lazy scans): the
    sequence tables are built from the bursts' columns the steps before the alignment read (no ``cpu``, no counter
    it neither compares nor weighs work by); while ``align_runs`` runs, no frame of either run's bursts is alive
    (they are read again after it: ~0.15 GB at 2 x 550 MB), nor its units' table; ``_align_other`` holds no
    reference to the other run's calls while its sequence table is built (handed over once what the checks read of
    them is derived: they go when the table lets them go, not held after it); the merge committed is the merge of
    the whole tables."""
    exp = _stored(tmp_path, [LULESH_A, LULESH_B])
    columns: list[list[str]] = []
    held: list[bool] = []
    alive: list[tuple[int, int]] = []
    sequence_table, align_runs = merge_runs_module.sequence_table, merge_runs_module.align_runs

    def spy_seq(bursts, calls, *args, **kwargs):
        columns.append(bursts.columns)
        other = inspect.currentframe().f_back.f_code.co_name == "_align_other"
        handed, kept = [calls], weakref.ref(calls)
        del calls  # the spy holds none: the table is handed the only reference the caller gives
        out = sequence_table(bursts, handed.pop(), *args, **kwargs)
        if other:
            gc.collect()
            held.append(kept() is not None)
        return out

    def spy_align(*args, **kwargs):
        alive.append((_frames_with("cpu"), _frames_with("call_site")))
        return align_runs(*args, **kwargs)

    monkeypatch.setattr(merge_runs_module, "sequence_table", spy_seq)
    monkeypatch.setattr(merge_runs_module, "align_runs", spy_align)
    got, whole = _spied_and_whole(exp, monkeypatch)
    assert alive == [(0, 0)]  # neither run's bursts (cpu, call_site), nor calls (call_site)
    assert held == [False]
    assert len(columns) == 2 and not any("cpu" in c for c in columns)
    _assert_committed_is_whole(exp, got, whole)


def test_no_run_s_bursts_are_read_whole_to_estimate_unmatched_bursts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge --estimate-unmatched`` of the real OTF2 pair (``merge_stored``: the runs' bursts handed as lazy scans)
    reads neither run's bursts whole (before session 21: the other run's once after its alignment, the reference's
    for that alignment and for the merged rows and their estimates: the estimates read the runs whole), and the
    merge committed is the merge of the whole tables."""
    exp = _stored(tmp_path, OTF2_PAIR)
    read: list[str] = []
    bursts_of = merge_runs_module.bursts_of

    def spy(run, features=None):
        if features is None:
            read.append(run.run_name)
        return bursts_of(run, features)

    monkeypatch.setattr(merge_runs_module, "bursts_of", spy)
    got, whole = _spied_and_whole(exp, monkeypatch, MergeOptions(allow_timing_only=True, estimate_unmatched=True))
    assert not read, read
    _assert_committed_is_whole(exp, got, whole)


def test_the_alignment_hands_its_pairing_s_arrays_back_before_scoring_and_the_match_table(merged_lulesh: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real LULESH pair: the arrays the aligner's kernels read (signatures, counters, times, gap
    costs of both runs) are dead and the free heap handed back before the pairs are scored, and the scoring's
    arrays are dead and the heap handed back before the match table is made (issue 23: ``align_runs`` held them,
    or what glibc kept of them, while it built the table, its peak at 2 x 550 MB); the merge is the whole one."""
    runs = _pair_runs(merged_lulesh)
    events: list[tuple[str, list[weakref.ref]]] = []
    align_threads, score_kernel, bracketed = (align_module._align_threads, align_module._score_kernel,
                                              align_module.bracketed)

    def arrays(*sides) -> list[weakref.ref]:
        return [weakref.ref(a) for s in sides for a in s if isinstance(a, np.ndarray) and a.size]

    def spy_align(threads, anchor, ref, oth, r_time, o_time, *rest):
        # the positions it writes are the scores' (not copied): every other array
        events.append(("align", arrays(ref._replace(pos=np.zeros(0)), oth._replace(pos=np.zeros(0)), r_time, o_time)))
        return align_threads(threads, anchor, ref, oth, r_time, o_time, *rest)

    def spy_score(out, ref, oth, *rest):
        events.append(("score", arrays(ref._replace(pos=np.zeros(0)), oth._replace(pos=np.zeros(0)))))
        return score_kernel(out, ref, oth, *rest)

    def spy_release() -> None:
        events.append(("release", []))
        for name, refs in events:  # every array seen so far: which are still alive
            if name != "release":
                events[-1][1].append(any(r() is not None for r in refs))

    def spy_bracketed(*args):
        events.append(("table", []))
        return bracketed(*args)

    monkeypatch.setattr(align_module, "_align_threads", spy_align)
    monkeypatch.setattr(align_module, "_score_kernel", spy_score)
    monkeypatch.setattr(align_module, "release_free_heap", spy_release, raising=False)
    monkeypatch.setattr(align_module, "bracketed", spy_bracketed)
    whole = _merge(runs, MergeOptions())
    names = [n for n, _ in events]
    assert names.count("table") == 1
    score, table = names.index("score"), names.index("table")
    # between the pairing and the scores, a hand-back with no array the aligner read alive
    assert any(n == "release" and not any(alive) for n, alive in events[names.index("align"):score])
    # between the scores and the table, a hand-back with no array of the pairing's nor the scoring's alive
    assert any(n == "release" and not any(alive) for n, alive in events[score:table])
    # the same merge, the hand-backs left out
    monkeypatch.undo()
    plain = _merge(runs, MergeOptions())
    for name in ("merged", "matches", "quality"):
        assert _sorted(getattr(whole, name)).equals(_sorted(getattr(plain, name))), name


def test_the_sequence_table_hands_the_call_searches_back_and_joins_message_ends_on_keys_alone(merged_lulesh: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real LULESH pair: each sequence table hands the free heap back after its closing and
    opening calls are found (their sort and search arrays, ~100 MB at 2 x 550 MB, stayed in glibc's arenas while
    Polars' allocator grew for the message ends), and the message ends are joined on copies of the rows' keys and
    row and of the messages' keys and names alone (the joins carried the rows' call names and every message
    column, the sequence table's peak)."""
    runs = _pair_runs(merged_lulesh)
    events: list[str] = []
    joined: list[tuple[set[str], set[str]]] = []
    closing_rows, logical_ends, join = align_module._closing_rows, align_module.logical_ends, pl.DataFrame.join

    def spy_closing(*args):
        events.append("search")
        return closing_rows(*args)

    def spy_join(self, other, *args, **kwargs):
        joined.append((set(self.columns), set(other.columns)))
        return join(self, other, *args, **kwargs)

    def spy_ends(*args):
        events.append("ends")
        with monkeypatch.context() as m:
            m.setattr(pl.DataFrame, "join", spy_join)
            return logical_ends(*args)

    monkeypatch.setattr(align_module, "_closing_rows", spy_closing)
    monkeypatch.setattr(align_module, "logical_ends", spy_ends)
    monkeypatch.setattr(align_module, "release_free_heap", lambda: events.append("release"), raising=False)
    _merge(runs, MergeOptions())
    assert events.count("ends") >= 2
    for i, e in enumerate(events):
        if e == "ends":  # a hand-back after the last search of the calls before these message ends
            before = events[:i]
            assert "release" in before[len(before) - before[::-1].index("search"):], events
    row_keys = {"appl", "task", "thread", "_close_seq", "_open_seq", "_row"}
    message_keys = {"appl", "sender", "receiver", "s_thread", "s_call_seq", "r_thread", "r_call_seq", "c_call_seq",
                    "_msg", "_chan", "_n"}
    assert joined and all(left <= row_keys and right <= message_keys and len(right) <= 7 for left, right in joined)


def test_the_key_pairs_hand_the_heap_back_before_their_joins(
        merged_lulesh: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real LULESH pair: ``key_pairs`` hands the free heap back before the keys' join, before the
    message pairs' and before the arrivals' (what the clocks, offsets, iteration paths and chain freed stayed in
    glibc's arenas while Polars' allocator grew for the joins' hash tables: ``key_pairs``' peak at 2 x 550 MB)."""
    runs = _pair_runs(merged_lulesh)
    events: list[str] = []
    join_pairs, arrival_pairs = anchors._join_pairs, anchors.arrival_pairs

    def spy_join(rk, ok, on):
        events.append("join " + ",".join(on))
        return join_pairs(rk, ok, on)

    def spy_arrivals(*args):
        events.append("arrivals")
        with monkeypatch.context() as m:  # the joins inside are the arrivals' own
            m.setattr(anchors, "_join_pairs", join_pairs)
            return arrival_pairs(*args)

    monkeypatch.setattr(anchors, "_join_pairs", spy_join)
    monkeypatch.setattr(anchors, "arrival_pairs", spy_arrivals)
    monkeypatch.setattr(anchors, "release_free_heap", lambda: events.append("release"), raising=False)
    _merge(runs, MergeOptions())
    steps = [e for e in events if e != "release"][:3]
    assert steps == ["join " + ",".join(anchors.ON), "join _tid,_it,osig,_mrank", "arrivals"], events
    for step in steps:  # each right after a hand-back
        at = events.index(step)
        assert at > 0 and events[at - 1] == "release", events


def test_the_aligner_s_anchors_die_with_its_call_and_the_positions_are_not_copied(merged_lulesh: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge`` of the real LULESH pair (every thread in both runs): the anchors handed to the aligner's kernel
    are dead, and the heap handed back, before the message graph follows the partners' messages, and the pairs
    are scored on the very position arrays the kernel wrote (a copy of both, and the anchors, were held to the
    alignment's end, its peak at 2 x 550 MB)."""
    runs = _pair_runs(merged_lulesh)
    events: list[str] = []
    seen: dict[str, object] = {}
    align_threads, follow, score_kernel = (align_module._align_threads, align_module.follow_messages,
                                           align_module._score_kernel)

    def spy_align(threads, anchor, ref, oth, *rest):
        if "anchor" not in seen:  # the first call: the whole alignment (the others: the re-alignments)
            seen.update(anchor=weakref.ref(anchor), pos=(ref.pos, oth.pos))
        events.append("align")
        return align_threads(threads, anchor, ref, oth, *rest)

    def spy_follow(*args):
        events.append("follow")
        seen["anchor alive"] = seen["anchor"]() is not None
        return follow(*args)

    def spy_score(out, ref, oth, *rest):
        seen["scored on"] = (ref.pos, oth.pos)
        return score_kernel(out, ref, oth, *rest)

    monkeypatch.setattr(align_module, "_align_threads", spy_align)
    monkeypatch.setattr(align_module, "follow_messages", spy_follow)
    monkeypatch.setattr(align_module, "_score_kernel", spy_score)
    monkeypatch.setattr(align_module, "release_free_heap", lambda: events.append("release"), raising=False)
    _merge(runs, MergeOptions())
    assert seen["anchor alive"] is False
    first = events.index("align")
    assert events[first:first + 3] == ["align", "release", "follow"], events
    assert all(a is b for a, b in zip(seen["scored on"], seen["pos"]))
