"""mergeattack23 P4: a burst ended by a span its thread's recording was switched off in (Extrae_shutdown: event
40000012 value 0 and the "Tracing Disabled" state; Score-P's MEASUREMENT OFF region) closes its unit as an MPI call
does, and neither it nor the burst after the gap is matched to a burst of a run that recorded the span (the other
run holds the phase whole, with work the reference never recorded): their values are NULL, with a reason."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from synthtrace.tracelib.formats.otf2 import Otf2Trace
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.merge.checks import PairSignals, verdict
from synthtrace.tracelib.merge.pieces import BEGINS_UNTRACED, ENDS_UNTRACED, units, without_untraced
from synthtrace.tracelib.schema import UNTRACED_AFTER
from testing import otf2_variants as ov

pytestmark = pytest.mark.filterwarnings("ignore:.*no .row file")

_PCF = ("EVENT_TYPE\n7  42000050 PAPI_TOT_INS [Instr completed]\n\n"
        "EVENT_TYPE\n9   50000001    MPI Point-to-point\nVALUES\n3   MPI_Isend\n0   Outside MPI\n\n"
        "EVENT_TYPE\n6    40000003    Flushing Traces\nVALUES\n0      End\n1      Begin\n\n"
        "EVENT_TYPE\n6    40000012    Tracing\nVALUES\n0      Disabled\n1      Enabled\n\n")


def _extrae_window(tmp_path: Path) -> Path:
    """One thread, as Extrae records it: a phase cut by a buffer flush (state 12, 40000003) at 10-12 and closed
    by MPI_Isend at 20; a phase cut at 30 by Extrae_shutdown (40000012:0, state 14 "Tracing Disabled" to 60,
    40000012:1), then the phase the restart opened, closed by MPI_Isend at 70. Counters read at every event."""
    prv = tmp_path / "window.prv"
    prv.write_text("#Paraver (01/01/20 at 10:00):100_ns:1(1):1:1(1:1),0\n"
                   "1:1:1:1:1:0:10:1\n2:1:1:1:1:10:40000003:1:42000050:100\n1:1:1:1:1:10:12:12\n"
                   "2:1:1:1:1:12:40000003:0:42000050:7\n1:1:1:1:1:12:20:1\n2:1:1:1:1:20:50000001:3:42000050:80\n"
                   "2:1:1:1:1:25:50000001:0:42000050:5\n1:1:1:1:1:25:30:1\n2:1:1:1:1:30:40000012:0:42000050:50\n"
                   "1:1:1:1:1:30:60:14\n2:1:1:1:1:60:40000012:1:42000050:3\n1:1:1:1:1:60:70:1\n"
                   "2:1:1:1:1:70:50000001:3:42000050:90\n2:1:1:1:1:75:50000001:0:42000050:4\n")
    prv.with_suffix(".pcf").write_text(_PCF)
    return prv


@pytest.mark.parametrize("chunk", [1 << 20, 90, 150])
def test_extrae_shutdown_marks_the_burst_it_cut_and_no_flush_does(tmp_path, chunk):
    bursts, _, _ = ParaverTrace(_extrae_window(tmp_path), chunk_bytes=chunk).read_tables("r")
    assert bursts.select("start_ns", "end_ns", "mpi_call", UNTRACED_AFTER).rows() == [
        (0, 10, None, False), (12, 20, "MPI_Isend", False),  # the flush's pieces: one phase
        (25, 30, None, True),  # cut by Extrae_shutdown: the rest of its phase ran unrecorded
        (60, 70, "MPI_Isend", False)], chunk


def test_score_p_measurement_off_marks_the_burst_it_cut(tmp_path):
    bursts, _, _ = Otf2Trace(ov.measurement(tmp_path).anchor).read_tables("r")
    marked = bursts.filter(UNTRACED_AFTER).select("start_ns", "end_ns").rows()
    assert marked == [(1100, 1200)]  # the flush's cut at 300 is not a gap in the recording


def test_a_unit_ends_where_recording_stops_and_the_phase_after_the_gap_is_its_own(tmp_path):
    bursts, _, _ = ParaverTrace(_extrae_window(tmp_path)).read_tables("r")
    u = units(bursts)
    assert u.unit.tolist() == [0, 0, 1, 2]  # the flush's pieces one unit; none across the gap
    assert u.untraced.tolist() == [0, ENDS_UNTRACED, BEGINS_UNTRACED]


def _matches(other_row: list[int | None]) -> pl.DataFrame:
    n = len(other_row)
    return pl.DataFrame({"other_seq": other_row, "other_row": other_row, "match_score": [1.0] * n},
                        schema={"other_seq": pl.Int64, "other_row": pl.Int64, "match_score": pl.Float64})


def test_units_bordering_an_unrecorded_span_get_no_match(tmp_path):
    ref, _, _ = ParaverTrace(_extrae_window(tmp_path)).read_tables("r")
    whole = ref.with_columns(pl.lit(False).alias(UNTRACED_AFTER))  # a run that recorded everything
    ref_units, o_units = units(ref), units(whole)
    assert o_units.unit.tolist() == [0, 0, 1, 1]  # recorded whole, the cut phase and the next one are one
    # the alignment matched the phase after the gap to the other run's whole one (closed by the same call)
    m, untraced = without_untraced(_matches([0, None, 1]), ref_units, o_units)
    assert m.get_column("other_row").to_list() == [0, None, None] and untraced.tolist() == [False, True, True]
    # the other way round: the reference recorded everything, the other run's unit after its gap is partial
    m, untraced = without_untraced(_matches([0, 2]), o_units, ref_units)
    assert m.get_column("other_row").to_list() == [0, None] and untraced.tolist() == [False, True]
    # two runs that switched their recording off at the same point: the phases on both sides pair as they are
    m, untraced = without_untraced(_matches([0, 1, 2]), ref_units, ref_units)
    assert m.get_column("other_row").to_list() == [0, 1, 2] and not untraced.any()


def test_the_verdict_says_the_recording_was_off():
    sig = PairSignals(0.0, 0.0, 0.9, None, 0, long_matched=90, long_total=100, untraced=10)
    got, why = verdict(sig, timing_only=False)
    assert got == "suspect" and "recording was switched off" in why
    assert verdict(PairSignals(0.0, 0.0, 1.0, None, 0, long_matched=100, long_total=100),
                   timing_only=False)[0] == "ok"
