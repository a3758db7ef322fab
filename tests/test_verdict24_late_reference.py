"""verdict24: a reference rank whose trace began late is no other arrival order (note23 "Open" 5, mergeattack21
``rank_traced_late_ref``).

A communication record needs both ends traced, so a channel into a rank whose trace began late, or from one, lacks
its first messages (the merge numbers its records from the run's start: their ``k`` begins above 0). The receiver's
first completions on such a channel then hold only the recorded part of what they completed: the burst after the
first ``MPI_Waitall`` of task 5 was "opened by the messages from task 4" where the other run's was opened by those
from tasks 4 and 6, and the merge said the runs' messages arrived in another order (``suspect`` at 100 % right).
Completions up to a lost channel's first record are now left out of the opening-message check."""
from __future__ import annotations

import polars as pl

from synthtrace.tracelib.merge.checks import opened_by
from synthtrace.tracelib.merge.messages import LOGICAL_MESSAGE_SCHEMA

ITERATIONS = 6


def _run(lost: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Task 5's bursts, calls and logical messages: every iteration two ``MPI_Irecv`` (from tasks 4 and 6), one
    ``MPI_Waitall`` completing both, the burst after it working on them. ``lost``: task 6's first messages no
    record holds (its channel's ``k`` begins there)."""
    calls, msgs = [], []
    for i in range(ITERATIONS):
        seq = 3 * i
        calls += [(seq, "MPI_Irecv", 100 * seq + 10), (seq + 1, "MPI_Irecv", 100 * seq + 20),
                  (seq + 2, "MPI_Waitall", 100 * seq + 90)]
        for sender, post in ((4, seq), (6, seq + 1)):
            if sender == 6 and i < lost:
                continue
            msgs.append((1, 1, sender, 5, 7, i, 64, 1, 0, 0, 1, post, 0, seq + 2))
    c = pl.DataFrame([(1, 5, 1, s, name, end, "halo.c:1") for s, name, end in calls], orient="row",
                     schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "call_seq": pl.Int64,
                             "mpi_call": pl.String, "end_ns": pl.Int64, "call_site": pl.String})
    b = c.filter(pl.col("mpi_call") == "MPI_Waitall").select(
        "appl", "task", "thread", pl.int_range(pl.len(), dtype=pl.Int64).alias("burst_seq"),
        pl.col("end_ns").alias("start_ns"))
    return b, c, pl.DataFrame(msgs, schema=LOGICAL_MESSAGE_SCHEMA, orient="row")


def _senders(opened: pl.DataFrame) -> dict[int, list[int]]:
    return {s: g.get_column("sender").sort().to_list() for (s,), g in opened.group_by("burst_seq")}


def test_a_completion_before_a_late_channel_s_first_record_is_not_checked():
    """Task 6's first two messages unrecorded (its trace began in iteration 2): the bursts after the first two
    Waitalls (opened by task 4's message alone as recorded) and after the one completing task 6's first recorded
    message (it might have completed an earlier one too) are not checked; the later ones are, with both senders.
    Failed first: bursts 0 and 1 'opened by the messages from task 4' only."""
    got = _senders(opened_by(*_run(lost=2)))
    assert sorted(got) == list(range(3, ITERATIONS)), got
    assert all(v == [4, 6] for v in got.values()), got


def test_every_completion_of_a_whole_trace_is_checked():
    """Control: every message recorded: every burst after a Waitall is opened by both senders' messages."""
    got = _senders(opened_by(*_run(lost=0)))
    assert sorted(got) == list(range(ITERATIONS)) and all(v == [4, 6] for v in got.values()), got
