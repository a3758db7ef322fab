"""What a read keeps while MPI calls of many counter types stream through it (issue 23: ``ParaverTrace.read`` of
1 M calls each sampling one of 4,096 counter types reached 991 MB, 640 MB at 150,000): the anomaly tally kept the
counting query of every part's schema, ~7 MB each at ~1,000 counter columns, and each part of such calls has a
schema of its own. The queries kept are now bounded in columns, whatever the number of calls and counter types, and
what is judged and stored is unchanged."""
from __future__ import annotations

import numpy as np
import polars as pl

from benchmarks.bench_calls_memory import write_calls_trace
from synthtrace.tracelib.domain import counter_sanity
from synthtrace.tracelib.domain.counter_sanity import AnomalyTally
from synthtrace.tracelib.formats import bursts, call_store, source
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.schema import MPI_CALL_SCHEMA


def _kept_columns(tally: AnomalyTally) -> int:
    return sum(len(schema) for schema in tally._queries)


def _calls_of(counters: list[int], negative: int) -> pl.DataFrame:
    """Two calls sampling ``counters`` (COUNTER_k), the first with ``negative`` of them negative."""
    frame = pl.DataFrame({c: pl.Series(c, [None, None], t) for c, t in MPI_CALL_SCHEMA.items()})
    return frame.with_columns(pl.Series(f"COUNTER_{k:04d}", [-1 if i < negative else 5, 7], pl.Int64)
                              for i, k in enumerate(counters))


def test_the_tally_keeps_queries_of_a_bounded_number_of_columns_and_counts_the_same(monkeypatch):
    """Parts of 60 counters among 600, every part a new set: the queries kept stay within QUERY_COLUMNS (they were
    one per schema seen: 100 x ~80 columns here), and every negative value is still counted."""
    monkeypatch.setattr(counter_sanity, "QUERY_COLUMNS", 300, raising=False)
    rng = np.random.default_rng(7)
    tally = AnomalyTally()
    negatives: dict[str, int] = {}
    for _ in range(100):
        counters = sorted(rng.choice(600, 60, replace=False).tolist())
        tally.add(_calls_of(counters, 3), "MPI call")
        for k in counters[:3]:
            negatives[f"COUNTER_{k:04d}"] = negatives.get(f"COUNTER_{k:04d}", 0) + 1
        assert _kept_columns(tally) <= 300
    tally.add(_calls_of(list(range(10)), 0), "MPI call")  # a schema seen before (and still kept) is reused
    tally.add(_calls_of(list(range(10)), 0), "MPI call")
    assert {c: n for (c, rule), n in tally.counts.items() if rule == "negative"} == negatives


def test_reading_many_calls_of_many_counter_types_keeps_bounded_queries_and_the_same_calls(tmp_path, monkeypatch):
    """3,000 calls each sampling one of 600 counter types, in parts of at most 4,096 cells (64 calls x 64 counters,
    each part a schema of its own; 1 Mi cells in a real read) and spilled: the tally's queries stay within
    QUERY_COLUMNS, and the calls read are those of a read that keeps every query."""
    prv = write_calls_trace(tmp_path / "calls.prv", 3_000, types=600)
    monkeypatch.setattr(bursts, "MAX_PART_CELLS", 4096)
    monkeypatch.setattr(call_store, "HOLD_BYTES", 1 << 16)
    tallies: list[AnomalyTally] = []
    schemas: set[tuple] = set()

    class Watched(AnomalyTally):
        def __init__(self) -> None:
            super().__init__()
            tallies.append(self)

        def add(self, frame: pl.DataFrame, what: str) -> None:
            schemas.add(tuple(frame.columns))
            super().add(frame, what)

    monkeypatch.setattr(source, "AnomalyTally", Watched)

    def read(spill) -> pl.DataFrame:
        stream = ParaverTrace(prv).read("r", spill=spill)
        for _ in stream:
            pass
        return stream.summary.calls.collect()

    monkeypatch.setattr(counter_sanity, "QUERY_COLUMNS", 10**9, raising=False)
    every_query = read(tmp_path / "all")
    monkeypatch.setattr(counter_sanity, "QUERY_COLUMNS", 500, raising=False)
    bounded = read(tmp_path / "bounded")
    assert sum(len(s) for s in schemas) > 3_000, "the parts did not each hold a schema of their own"
    assert _kept_columns(tallies[-1]) <= 500
    assert bounded.columns == every_query.columns and bounded.equals(every_query, null_equal=True)
    assert bounded.height == 3_000 and len(every_query.columns) == len(MPI_CALL_SCHEMA) + 600
