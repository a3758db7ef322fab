"""An OTF2 archive defining more metric members than one trace may hold counters is refused in one line (attack
17 F4, tracelib/formats/otf2/definitions.py): each member is a counter summed per burst and MPI call, and the
Paraver reader caps counter types at MAX_COUNTERS (tokenizer MAX_SLOTS), but OTF2 had no cap: a 2.1 MB archive of
10,000 one-member metric classes ran past 4 GB."""
from __future__ import annotations

from pathlib import Path

from otf2.enums import MetricMode, MetricOccurrence, RecorderKind, Type

from synthtrace.tracelib.formats.counter_columns import MAX_COUNTERS
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.otf2_variants import _Archive


def _members(root: Path, n: int) -> Path:
    """One rank; ``n`` metric classes of one member each (PAPI_TOT_INS besides), two barriers each read by one."""
    a = _Archive(root, ranks=1, threads=1)
    a.mpi("MPI_Barrier")
    classes = [a.d.metric_class([a.member(f"m{i}", MetricMode.ACCUMULATED_START, Type.UINT64)],
                                MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU) for i in range(n - 1)]
    e = a.events(0)
    e.program_begin(0, "wide", [])
    e.enter(0, "main")
    for k, cls in enumerate(classes[:2]):
        t = 100 + 200 * k
        e.ev.metric(a.ticks(t), cls, [1])
        e.enter(t, "MPI_Barrier")
        e.ev.metric(a.ticks(t + 100), cls, [5])
        e.leave(t + 100, "MPI_Barrier")
    e.leave(1000, "main")
    e.program_end(1000, 0)
    return a.close()


def test_more_metric_members_than_counters_a_trace_holds_are_refused(tmp_path, run_cli):
    anchor = _members(tmp_path / "archive", MAX_COUNTERS + 1)
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", anchor, "-w", wh)
    lines = [x for x in err.strip().splitlines() if not x.startswith("warning:")]
    assert code == 2 and len(lines) == 1, err
    assert str(anchor) in lines[0] and f"{MAX_COUNTERS + 1} metric members" in lines[0], err
    assert not wh.exists()


def test_as_many_metric_members_as_the_cap_are_read(tmp_path, run_cli):
    """The cap is Paraver's: MAX_COUNTERS members are read, the barriers with their counts."""
    anchor = _members(tmp_path / "archive", MAX_COUNTERS)
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", anchor, "-w", wh)
    assert code == 0, err
    calls = query(Warehouse(wh), "SELECT start_ns, m0, m1 FROM mpi_calls ORDER BY start_ns").to_pylist()
    assert calls == [{"start_ns": 100, "m0": 4, "m1": None}, {"start_ns": 300, "m0": None, "m1": 4}], calls
