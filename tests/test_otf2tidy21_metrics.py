"""A metric member recorded by two OTF2 metrics is one counter (session 21, F7b and fixwide17): the writer defines
identical members once, so a cycle counter read by a class of its own at MPI calls and by a second class (or an
instance of it) elsewhere is one running total sampled at both places, its counts the differences of consecutive
readings whichever metric took them."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.tracelib.formats.otf2 import Otf2Trace


@pytest.mark.parametrize("recorder", ["class", "instance"])
def test_a_member_of_two_metrics_counts_from_the_readings_of_both(tmp_path, recorder):
    """Before: the second metric's members, not contiguous in definition order, were copied to new member ids (one
    copy per metric), so CYC was two counters of one name, each counting from its own readings: 400 over [200, 400]
    (its first reading through the second metric counted from 0) and 100 over [500, 600], where 150 and 70 are
    right."""
    from testing.otf2_variants import shared_member

    v = shared_member(tmp_path / recorder, recorder)
    trace = Otf2Trace(v.anchor)
    bursts, _, summary = trace.read_tables("r")
    assert sorted(summary.counters) == ["CYC", "L2"]  # the counters read (PAPI_TOT_INS is defined, never read)
    assert len(trace.defs.member_names) == 3  # one id per member, no copies
    keys = ["task", "thread", "start_ns", "end_ns", "mpi_call"]
    got = {row[:5]: dict(zip(("CYC", "L2"), row[5:])) for row in bursts.select(*keys, "CYC", "L2").rows()}
    assert got == {key: {"CYC": counts.get("CYC"), "L2": counts.get("L2")} for key, counts in v.bursts.items()}
    assert not summary.warnings


def test_readings_through_two_metrics_sum_to_the_counter_total(tmp_path):
    """The counts of one member add up to its last reading (ACCUMULATED_START: from 0), whichever metrics read it,
    but for what the MPI calls hold: 150 - 100 in [100, 200] and 330 - 300 in [400, 500]."""
    from testing.otf2_variants import shared_member

    bursts, _, _ = Otf2Trace(shared_member(tmp_path / "c", "class").anchor).read_tables("r")
    assert bursts.select(pl.col("CYC").sum()).item() == 400 - 50 - 30
