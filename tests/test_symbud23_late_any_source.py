"""symbud23 (mergeattack21 M7): a rank whose trace began late, in a trace without caller events. Its partners'
calls that posted the messages lost before it was traced are counted at the site of the channel's first recorded
end (``messages.lost_at_start``: the call, its caller and communicator); a trace without caller events has no
caller (NULL), and a join on NULL matched nothing: no loss was counted, the late rank's channels kept the
records' own numbering (three iterations off) and the merge followed those names. With ``MPI_ANY_SOURCE``
receives and ``MPI_Waitany`` (mergeattack21's ``rank_traced_late_any``) the merge was ``bad`` at 88 % right. The
campaign here: the simulator's ``late_trace`` program without caller events (``Shape.sites="none"``), its halo
receives posted for ANY_SOURCE too."""
from __future__ import annotations

from dataclasses import replace

import pytest

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.merge.messages import logical_messages, lost_at_start
from testing.simulator_campaigns import merge_campaign


def _spec(recv_any: bool, late: tuple[int, ...] = (1, 7, 2)) -> mech.CampaignSpec:
    spec = mech.campaign("late_trace", 0)
    return replace(spec, late_trace=late, shape=replace(spec.shape, sites="none", recv_any=recv_any))


def _calls_and_messages(prv):
    _, calls, summary = ParaverTrace(prv).read_tables(prv.stem)
    return calls, logical_messages(calls, summary.messages)


@pytest.mark.parametrize("recv_any", [False, True])
def test_messages_lost_at_a_late_start_are_counted_without_caller_events(tmp_path, recv_any):
    """Run 1's task 8 traced from outer iteration 2, no caller events: every channel of task 8 lost the messages
    its partners posted before, and run 1 names every message as run 0 does."""
    c = mech.simulate(tmp_path, _spec(recv_any))
    (_, run0), (calls, run1) = (_calls_and_messages(prv) for prv in c.traces)
    lost = lost_at_start(calls, run1)
    assert lost.height and lost.get_column("lost").min() > 0
    assert all(8 in pair for pair in lost.select("sender", "receiver").iter_rows())
    ids = ["appl", "comm", "sender", "receiver", "tag", "k"]
    assert run1.select(*ids).join(run0.select(*ids), on=ids, how="anti").height == 0


@pytest.mark.parametrize("late", [(1, 7, 2), (0, 7, 2)])
def test_a_rank_traced_late_with_any_source_and_no_callers_is_merged_right(tmp_path, late):
    """The late rank in the other run or in the reference, ANY_SOURCE receives, no caller events: merged as the
    same cut with receives from named sources and callers is (placed right, not ``bad``)."""
    o = merge_campaign(mech.simulate(tmp_path, _spec(True, late)))
    assert o.verdict not in ("refused", "bad"), (o.verdict, o.message)
    assert o.right >= 0.995, (o.right, o.verdict)
