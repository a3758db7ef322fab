"""A unit cut in pieces by the tracer (a buffer flush) at another point in every run is apportioned by work: right
only where the unit runs at one rate. Where the reference's own common counters show its pieces ran at other rates
(a flush between two kernels), no piece is given its share of the other run's unit (mergeattack23 P1: `ok` at
91-96 % right, the wrong bursts exactly the flushed pieces)."""
from __future__ import annotations

import polars as pl
import pytest

from synthtrace.tracelib.merge.pieces import expand, units

INS, CYC = "PAPI_TOT_INS", "PAPI_TOT_CYC"


def _bursts(rows: list[tuple[int, int, int, str | None, int, int]]) -> pl.DataFrame:
    return pl.DataFrame([{"appl": 1, "task": 1, "thread": 1, "burst_seq": seq, "start_ns": s, "end_ns": e,
                          "duration_ns": e - s, "mpi_call": call, INS: ins, CYC: cyc}
                         for seq, s, e, call, ins, cyc in rows])


def _expanded(piece_cycles: tuple[int, int]) -> pl.DataFrame:
    # the reference's unit 1 is cut by a flush at 300..350 ns into two pieces of equal instructions; the other run
    # reads it whole
    ref = _bursts([(0, 0, 100, "MPI_Init", 500, 900), (1, 100, 300, None, 10_000, piece_cycles[0]),
                   (2, 350, 1_000, "MPI_Waitall", 10_000, piece_cycles[1])])
    other = _bursts([(0, 0, 100, "MPI_Init", 500, 900), (1, 100, 1_000, "MPI_Waitall", 20_000, 20_000)])
    unit_matches = pl.DataFrame({"other_row": [0, 1], "match_score": [1.0, 1.0], "same_sig": [True, True],
                                 "same_iter": [True, True], "msg_agree": [True, True],
                                 "msg_misaligned": [False, False], "msg_consistent": [True, True],
                                 "ambiguous_span": [False, False], "message_absent": [False, False]})
    ex = expand(ref, units(ref), other, units(other), unit_matches, [INS, CYC])
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
