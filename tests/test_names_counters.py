"""Counter names that differ only in letter case (attack 14 F17): SQL's names ignore case, so two such counters were
one column to a query, and asking for the second by the name ``runs.counters`` lists answered with the first's
values, without a word at ingest. The later one is renamed, with a warning, as a name colliding with a key column."""
from __future__ import annotations

from pathlib import Path

import pytest
from otf2.enums import MetricMode, MetricOccurrence, RecorderKind, Type

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.otf2_variants import _Archive
from testing.traces import PRIME, copy_trace


def _sums(wh: Path, sql: str) -> dict:
    return query(Warehouse(wh), sql).to_pylist()[0]


@pytest.mark.real_traces
def test_pcf_counters_differing_only_in_case_keep_their_own_values(tmp_path, run_cli):
    """PAPI_TOT_CYC labelled ``papi_tot_ins`` beside PAPI_TOT_INS: the view showed it as ``papi_tot_ins_1`` and
    ``sum(papi_tot_ins)`` summed the instructions."""
    from synthtrace import read_trace

    prv = copy_trace(PRIME, tmp_path / "case")
    pcf = prv.with_suffix(".pcf")
    pcf.write_text(pcf.read_text().replace("42000059 PAPI_TOT_CYC", "42000059 papi_tot_ins"))
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0, err
    assert "counter names 'PAPI_TOT_INS' (event type 42000050) and 'papi_tot_ins' (event type 42000059) differ " \
           "only in letter case, one column to SQL: the second read as 'papi_tot_ins_42000059'" in err, err
    counters = _sums(wh, "SELECT counters FROM runs")["counters"]
    assert "PAPI_TOT_INS" in counters and "papi_tot_ins_42000059" in counters and "papi_tot_ins" not in counters
    bursts, _ = read_trace(PRIME)
    got = _sums(wh, 'SELECT sum("PAPI_TOT_INS") AS ins, sum(papi_tot_ins_42000059) AS cyc FROM bursts')
    assert (got["ins"], got["cyc"]) == (bursts["PAPI_TOT_INS"].sum(), bursts["PAPI_TOT_CYC"].sum())


def _two_cased_metrics(root: Path) -> Path:
    """One rank whose burst [0, 100] (up to an MPI_Barrier) counts 10 PAPI_TOT_INS and 3 ``papi_tot_ins`` (another
    metric)."""
    a = _Archive(root, ranks=1, threads=1)
    a.mpi("MPI_Barrier")
    other = a.d.metric_class([a.member("papi_tot_ins", MetricMode.ACCUMULATED_START, Type.UINT64)],
                             MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    e = a.events(0)
    e.program_begin(0, "cased", [])
    e.enter(0, "main")
    e.ev.metric(a.ticks(100), other, [3])
    e.enter(100, "MPI_Barrier", ins=10)
    e.leave(200, "MPI_Barrier", ins=40)
    e.leave(300, "main")
    e.program_end(300, 0)
    return a.close()


def test_otf2_metrics_differing_only_in_case_keep_their_own_values(tmp_path, run_cli):
    anchor = _two_cased_metrics(tmp_path / "archive")
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", anchor, "-w", wh)
    assert code == 0, err
    assert "metrics 'PAPI_TOT_INS' and 'papi_tot_ins' differ only in letter case" in err, err
    counters = _sums(wh, "SELECT counters FROM runs")["counters"]
    renamed = [c for c in counters if c.startswith("papi_tot_ins_metric")]
    assert "PAPI_TOT_INS" in counters and len(renamed) == 1 and "papi_tot_ins" not in counters, counters
    got = _sums(wh, f'SELECT "PAPI_TOT_INS" AS ins, "{renamed[0]}" AS other FROM bursts WHERE end_ns = 100')
    assert (got["ins"], got["other"]) == (10, 3)
