"""Transfer choices the lead and review23 found wrong. A unit cut in pieces by the tracer (a buffer flush) at
another point in every run is apportioned by work: right only where the unit runs at one rate. Where the
reference's own common counters show its pieces ran at other rates (a flush between two kernels), no piece is given
its share of the other run's unit (mergeattack23 P1: `ok` at 91-96 % right, the wrong bursts exactly the flushed
pieces). A count of time goes per ns only when compared with a kind tested on the common counts of time."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.tracelib.merge.pieces import expand, units

INS, CYC = "PAPI_TOT_INS", "PAPI_TOT_CYC"


def _bursts(rows: list[tuple[int, int, int, str | None, int, int]]) -> pl.DataFrame:
    return pl.DataFrame([{"appl": 1, "task": 1, "thread": 1, "burst_seq": seq, "start_ns": s, "end_ns": e,
                          "duration_ns": e - s, "mpi_call": call, INS: ins, CYC: cyc}
                         for seq, s, e, call, ins, cyc in rows])


def _expanded(piece_cycles: tuple[int, int], min_duration_ns: int = 0) -> pl.DataFrame:
    # the reference's unit 1 is cut by a flush at 300..350 ns into two pieces of equal instructions; the other run
    # reads it whole
    ref = _bursts([(0, 0, 100, "MPI_Init", 500, 900), (1, 100, 300, None, 10_000, piece_cycles[0]),
                   (2, 350, 1_000, "MPI_Waitall", 10_000, piece_cycles[1])])
    other = _bursts([(0, 0, 100, "MPI_Init", 500, 900), (1, 100, 1_000, "MPI_Waitall", 20_000, 20_000)])
    unit_matches = pl.DataFrame({"other_row": [0, 1], "match_score": [1.0, 1.0], "same_sig": [True, True],
                                 "same_iter": [True, True], "msg_agree": [True, True],
                                 "msg_misaligned": [False, False], "msg_consistent": [True, True],
                                 "ambiguous_span": [False, False], "message_absent": [False, False]})
    ex = expand(ref, units(ref), other, units(other), unit_matches, [INS, CYC], min_duration_ns)
    return ex.matches.with_columns(ex.share)


def test_pieces_of_one_rate_take_their_share_of_the_other_unit():
    m = _expanded((10_000, 10_000))
    assert m.get_column("other_row").to_list() == [0, 1, 1]
    assert m.get_column("share").to_list() == pytest.approx([1.0, 0.5, 0.5])


def test_pieces_of_other_rates_take_nothing_of_the_other_unit():
    """Cycles apportioned by instructions give each piece 10,000 where it recorded 5,000 and 15,000: the pieces ran
    two kernels, and a cache counter apportioned the same way would be as far off. The unit's pieces are left
    unmatched (NULL, or estimated with --estimate-unmatched); the burst before them keeps its match."""
    m = _expanded((5_000, 15_000))
    assert m.get_column("other_row").to_list() == [0, None, None]
    assert m.get_column("other_seq").to_list() == [0, None, None]


def test_pieces_too_short_to_judge_keep_their_share():
    """Pieces shorter than the merge's error threshold (here 200 and 650 ns against 10 us) are not judged: a short
    piece next to a flush runs the tracer's probe and cold caches (review23), and its rates say little."""
    m = _expanded((5_000, 15_000), min_duration_ns=10_000)
    assert m.get_column("other_row").to_list() == [0, 1, 1]


def test_a_count_of_time_goes_per_ns_only_when_compared_with_a_kind_tested_on_it():
    """Rescaling chosen on cache counters but never tested on core cycles: per ns, worse than per instruction on
    cycles (5 % against 1 %), is not taken for reference cycles as if nothing spoke against it (review23)."""
    from synthtrace.tracelib.merge.transfer import Choice

    tested = {"verbatim": {CYC: (0.02, 0.03), "PAPI_L1_DCM": (0.05, 0.08)},
              "per_ins": {CYC: (0.01, 0.02), "PAPI_L1_DCM": (0.03, 0.05)},
              "rescaled": {"PAPI_L1_DCM": (0.02, 0.03)}, "per_ns": {CYC: (0.05, 0.08)}}
    choice = Choice(INS, True, tested)
    few = _bursts([(0, 0, 100, "MPI_Init", 500, 900)])  # too few bursts to rescale anything by
    plan = choice.plan(few, "PAPI_REF_CYC", [INS, CYC, "PAPI_L1_DCM"])
    assert not plan.per_ns and plan.work == INS
