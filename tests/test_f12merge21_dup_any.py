"""Attack 20 F12 rebuilt: a program that exchanges its halo on the world and on a duplicate of it (``MPI_Comm_dup``),
every receive posted for ``MPI_ANY_SOURCE`` (the simulator's ``late_trace`` program, every rank traced whole:
``Shape.dup_comm``, ``Shape.recv_any``), merged 98.98 % right with the verdict ``ok`` (seed 1, OTF2 and Paraver).

Traced: the 1.02 % were 14 bursts of task 4, each unpacking a face after an ``MPI_Waitany``, in 7 crossed pairs.
The merge paired each with the burst that unpacks the same message in the other run (DESIGN §6: a receive posted
for ANY_SOURCE takes the identity of the send it matched, and the burst after the call completing it works on it);
the simulator named them by the index of the request that completed, which for an ANY_SOURCE receive says nothing
about what came into it (its own module docstring says such a burst takes the message's identity), and sized
their work by that request's nominal face. Named and sized by their message, as a real program's unpacking is (it
learns the source from the status), those pairs are right: 99.93 %.
"""
from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge.checks import opened_by
from synthtrace.tracelib.merge.messages import logical_messages
from testing.simulator_campaigns import merge_campaign, read_campaign

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _any_source(seed: int, dup: bool = True, fmt: str = "otf2") -> mech.CampaignSpec:
    """late_trace's program, every rank traced from its start, its halo receives posted for ANY_SOURCE, also
    exchanged on a duplicate of the world when ``dup``."""
    spec = mech.campaign("late_trace", seed)
    return replace(spec, shape=replace(spec.shape, dup_comm=dup, recv_any=True), trace_format=fmt, late_trace=())


def test_the_burst_after_a_waitany_is_the_message_it_unpacks(tmp_path):
    """In both runs, the bursts opened by an ``MPI_Waitany`` that completed one ANY_SOURCE receive: the same
    logical burst unpacks the same message (communicator, sender, receiver, k), and the same message's unpacking is
    the same logical burst. Before: the truth named the burst by the request's index, so 14 bursts of task 4 (seed
    1) had the logical id of the other run's unpacking of another neighbour's face."""
    c = mech.simulate(tmp_path, _any_source(1))
    unpacked = []
    for run in read_campaign(c):
        messages = logical_messages(run.mpi_calls, run.messages)
        opened = (opened_by(run.bursts, run.mpi_calls, messages)
                  .filter(pl.col("site").str.starts_with("MPI_Waitany"))
                  .filter(pl.len().over("task", "burst_seq") == 1))
        truth = c.truth.filter(pl.col("run_name") == run.run_name).select(
            pl.col("task").cast(pl.Int32), "burst_seq", "logical_id")
        unpacked.append(opened.join(truth, on=["task", "burst_seq"])
                        .select("logical_id", "comm", "sender", "receiver", "k"))
    assert min(u.height for u in unpacked) > 100
    by_burst = unpacked[0].join(unpacked[1], on="logical_id", suffix="_1")
    assert by_burst.height > 80
    assert by_burst.filter((pl.col("sender") != pl.col("sender_1")) | (pl.col("k") != pl.col("k_1"))
                           | (pl.col("comm") != pl.col("comm_1")) | (pl.col("receiver") != pl.col("receiver_1"))
                           ).height == 0
    by_message = unpacked[0].join(unpacked[1], on=["comm", "sender", "receiver", "k"], suffix="_1")
    assert (by_message.get_column("logical_id") == by_message.get_column("logical_id_1")).all()


@pytest.mark.parametrize("fmt", ["otf2", "prv"])
def test_the_f12_campaign_is_placed_right(fmt, tmp_path):
    """F12 (seed 1): 98.98 % right and ``ok`` against the request-index truth; 99.93 % against the message's."""
    o = merge_campaign(mech.simulate(tmp_path, _any_source(1, fmt=fmt)))
    assert o.verdict != "refused", o.message
    assert o.right >= 0.995 or o.verdict != "ok", (o.right, o.verdict)
