"""OTF2 ingest memory at the end of a read (issue 23): the messages' numbering for ``mpi_messages.parquet`` a slice
of their time order at a time, and the pairing's sort of the messages without a row-encoded multi-column sort. The
tables stay those of the whole computation; the memory itself is measured by ``benchmarks/bench_otf2_memory.py``."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from testing.traces import TRACES
from synthtrace.tracelib.formats.bursts import MESSAGE_SCHEMA
from synthtrace.tracelib.formats.otf2 import messages as otf2_messages
from synthtrace.tracelib.formats.row_order import stable_order
from synthtrace.tracelib.merge import messages as merge_messages
from synthtrace.warehouse import ingest

PING = TRACES / "otf2" / "ping-pong-otf2-papi" / "traces.otf2"
real = pytest.mark.skipif(not PING.is_file(), reason=f"real OTF2 trace not found: {PING}")


def _column(rng: np.random.Generator, n: int, high: int, dtype: pl.DataType, nulls: float) -> pl.Series:
    """``n`` integers in [0, high) of ``dtype``, a share ``nulls`` of them NULL."""
    values = pl.Series(rng.integers(0, high, n)).cast(dtype)
    return pl.select(pl.when(pl.Series(rng.random(n) < nulls)).then(None).otherwise(values)).to_series()


def _messages_and_ends(rng: np.random.Generator, n: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Communication records (MESSAGE_SCHEMA) with many ties in time, NULL times and ends, few or very many
    channels (tags up to 2^62), and their ends (as a reader places them)."""
    tag_high = 4 if rng.random() < 0.5 else 2**62
    highs = {"s_appl": 2, "s_task": 4, "s_thread": 2, "s_time_ns": n // 3 + 1, "r_appl": 2, "r_task": 4,
             "r_thread": 2, "r_time_ns": 5, "size": 100, "tag": tag_high}
    messages = pl.DataFrame({c: _column(rng, n, highs[c], t, 0.1) for c, t in MESSAGE_SCHEMA.items()})
    ends = pl.DataFrame({c: _column(rng, n, 50, pl.Int64(), 0.2)
                         for c in ("s_call_seq", "s_comm", "r_call_seq", "r_comm", "c_call_seq")})
    return messages, ends


def test_messages_numbered_a_slice_at_a_time_are_the_whole_numbering(monkeypatch):
    """The same rows, in the same order, with the same ``k``, whatever the slice: ties in send time broken by the
    receive time and then the records' order, NULL times last, a channel's messages spread over many slices."""
    rng = np.random.default_rng(23)
    for _ in range(60):
        messages, ends = _messages_and_ends(rng, int(rng.integers(1, 300)))
        monkeypatch.setattr(ingest, "NUMBERED_SLICE", int(rng.integers(1, 40)), raising=False)
        assert_frame_equal(ingest._numbered_in_slices(messages, ends).collect(),
                           merge_messages.logical_messages_at(messages, ends))


@real
def test_an_ingest_numbers_its_messages_a_slice_at_a_time(monkeypatch, tmp_path, run_cli):
    """Past NUMBERED_AT_ONCE messages, no numbering sees more than a slice (a 2 GB OTF2 archive's whole numbered
    table, ~92 bytes a message, was held beside its messages and their ends: 1.5-1.6 GB at 6.45 M messages), and
    mpi_messages.parquet is the one numbered whole."""
    code, _, err = run_cli("ingest", PING, "-w", tmp_path / "whole")
    assert code == 0, err
    seen: list[int] = []
    whole = merge_messages.logical_messages_at

    def spy(records: pl.DataFrame, ends: pl.DataFrame) -> pl.DataFrame:
        seen.append(records.height)
        return whole(records, ends)

    monkeypatch.setattr(merge_messages, "logical_messages_at", spy)
    monkeypatch.setattr(ingest, "NUMBERED_AT_ONCE", 10, raising=False)
    monkeypatch.setattr(ingest, "NUMBERED_SLICE", 3, raising=False)
    code, _, err = run_cli("ingest", PING, "-w", tmp_path / "sliced")
    assert code == 0, err
    assert sum(seen) == 16 and max(seen) <= 3, seen  # the archive's 16 messages, 3 at a time
    stored = [pl.read_parquet(next((tmp_path / wh).glob("runs/*/mpi_messages.parquet"))) for wh in ("whole", "sliced")]
    assert stored[0].height == 16
    assert_frame_equal(*stored)


def test_stable_order_is_polars_stable_sort_nulls_last():
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = int(rng.integers(0, 200))
        frame = pl.DataFrame({"a": _column(rng, n, 3, pl.Int32(), 0.2), "b": _column(rng, n, 2**62, pl.Int64(), 0.0),
                              "c": _column(rng, n, 3, pl.Int64(), 0.3)})
        by = list(rng.permutation(["a", "b", "c"])[: int(rng.integers(1, 4))])
        expected = frame.select(pl.arg_sort_by(*by, nulls_last=True, maintain_order=True)).to_series().to_numpy()
        assert stable_order(frame, by).tolist() == expected.tolist()


def test_the_pairing_sorts_the_messages_without_a_multi_column_polars_sort(monkeypatch):
    """The messages of a spilled read are sorted by one NumPy lexsort (Polars' multi-column ``arg_sort_by``
    row-encodes its keys: 525 MB more at 6.45 M messages, the peak of a 2 GB OTF2 archive's pairing), in the order
    of the in-memory read's sort."""
    rng = np.random.default_rng(7)
    messages, _ = _messages_and_ends(rng, 500)
    expected = otf2_messages._sorted(messages)

    def refused(*_args, **_kwargs):
        raise AssertionError("a multi-column Polars sort of the messages")

    monkeypatch.setattr(pl, "arg_sort_by", refused)
    assert_frame_equal(otf2_messages._sorted_by_columns([messages[:200], messages[200:]]), expected)


def _ring_records(ranks: int = 4, steps: int = 60) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Point-to-point records of ``ranks`` ranks in a ring (per step an Isend to the right, an Irecv request and
    its completion from the left), in read order, and the communicator's ranks."""
    from synthtrace.tracelib.formats.otf2.events import _IRECV, _IRECV_REQ, _ISEND

    rows = []
    for task in range(ranks):
        for k in range(steps):
            t = 1_000 * k + task
            rows += [(task, 1, _ISEND, t, 3 * k, (task + 1) % ranks, 0, 5, 64, 0),
                     (task, 1, _IRECV_REQ, t + 1, 3 * k + 1, 0, 0, 0, 0, k),
                     (task, 1, _IRECV, t + 500, 3 * k + 2, (task - 1) % ranks, 0, 5, 64, k)]
    p2p = pl.DataFrame(rows, schema=otf2_messages._P2P_SCHEMA, orient="row")
    comm_ranks = pl.DataFrame({"comm": [0] * ranks, "rank": list(range(ranks)), "task": list(range(ranks))},
                              schema={"comm": pl.Int64, "rank": pl.Int64, "task": pl.Int32})
    return p2p, comm_ranks


@pytest.mark.parametrize("how", ["grouped", "parted"])
def test_each_record_s_receiving_task_is_found_once(how, monkeypatch, tmp_path):
    """The task a record's message goes to was looked up (``peer_tasks``) as the records came, to judge and bucket
    them, and again for every record when its bucket was grouped (``_paired``) or parted a frame at a time
    (``_paired_apart``): now once, kept with the records. Only the resolved receives' senders are looked up later
    (a receive's sender, known once its request or probe is resolved). The messages are those of the whole
    pairing."""
    p2p, comm_ranks = _ring_records()
    whole = otf2_messages.match_messages(p2p, comm_ranks, set(), group_rows=p2p.height)
    assert whole.height == 4 * 60
    received = p2p.height // 4  # each task receives the same number of records
    monkeypatch.setattr(otf2_messages, "P2P_HOLD_BYTES", 1)  # every chunk spilled
    if how == "grouped":  # one bucket of four receiving tasks, paired in groups of whole tasks
        monkeypatch.setattr(otf2_messages, "P2P_BUCKETS", 1)
        monkeypatch.setattr(otf2_messages, "MATCH_ROWS", received + received // 2)
    else:  # every task a big receiver: its bucket parted a frame at a time
        monkeypatch.setattr(otf2_messages, "MATCH_ROWS", received // 4)
    looked_up: list[int] = []
    real_peer_tasks = otf2_messages.peer_tasks

    def spy(frame: pl.DataFrame, *args) -> np.ndarray:
        if "req_ns" not in frame.columns:  # not a resolved receive's sender
            looked_up.append(frame.height)
        return real_peer_tasks(frame, *args)

    monkeypatch.setattr(otf2_messages, "peer_tasks", spy)
    records = otf2_messages.P2pRecords(comm_ranks, set(), tmp_path / "a.otf2", tmp_path / "p2p")
    for _key, chunk in p2p.group_by("task", pl.col("pos") // 30, maintain_order=True):  # as a reader does
        records.add(chunk)
    assert_frame_equal(records.matched(), whole)
    assert sum(looked_up) == p2p.height, looked_up
