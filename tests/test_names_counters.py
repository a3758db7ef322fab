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


def _ingested_relabelled(tmp_path: Path, run_cli, labels: dict[str, str]) -> tuple[Path, str]:
    """PRIME ingested (exit 0) with its .pcf's counter lines relabelled (``"type OLD": "type NEW"``): the warehouse
    and what the ingest said on stderr."""
    prv = copy_trace(PRIME, tmp_path / "relabelled")
    pcf = prv.with_suffix(".pcf")
    text = pcf.read_text()
    for old, new in labels.items():
        text = text.replace(old, new)
    pcf.write_text(text)
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0, err
    return wh, err


@pytest.mark.real_traces
def test_pcf_counters_differing_only_in_case_keep_their_own_values(tmp_path, run_cli):
    """PAPI_TOT_CYC labelled ``papi_tot_ins`` beside PAPI_TOT_INS: the view showed it as ``papi_tot_ins_1`` and
    ``sum(papi_tot_ins)`` summed the instructions."""
    from synthtrace import read_trace

    wh, err = _ingested_relabelled(tmp_path, run_cli, {"42000059 PAPI_TOT_CYC": "42000059 papi_tot_ins"})
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


@pytest.mark.real_traces
def test_pcf_renamed_counter_never_takes_another_counters_column(tmp_path, run_cli):
    """Attack 16 F7: PAPI_TOT_CYC labelled ``papi_tot_ins`` (a case twin, renamed ``papi_tot_ins_42000059``) beside
    PAPI_BR_INS labelled ``papi_tot_ins_42000059``: one column held branches + cycles, not a word said."""
    from synthtrace import read_trace

    wh, err = _ingested_relabelled(tmp_path, run_cli, {"42000059 PAPI_TOT_CYC": "42000059 papi_tot_ins",
                                                        "42000055 PAPI_BR_INS": "42000055 papi_tot_ins_42000059"})
    assert "the second read as 'papi_tot_ins_42000059_2' ('papi_tot_ins_42000059' being event type 42000055's " \
           "column)" in err, err
    counters = _sums(wh, "SELECT counters FROM runs")["counters"]
    assert {"PAPI_TOT_INS", "papi_tot_ins_42000059", "papi_tot_ins_42000059_2"} <= set(counters), counters
    assert len({c.lower() for c in counters}) == len(counters), counters
    bursts, _ = read_trace(PRIME)
    got = _sums(wh, "SELECT sum(papi_tot_ins_42000059) AS br, sum(papi_tot_ins_42000059_2) AS cyc FROM bursts")
    assert (got["br"], got["cyc"]) == (bursts["PAPI_BR_INS"].sum(), bursts["PAPI_TOT_CYC"].sum())


@pytest.mark.parametrize(("labels", "columns"), [
    # a key column's new name taken by a later counter: the later renamed
    ({42000050: "task", 42000059: "task_42000050"}, ["task_42000050", "task_42000050_42000059"]),
    # ... by an earlier counter, in another letter case: the key column's counter renamed again
    ({42000050: "TASK_42000059", 42000059: "task"}, ["TASK_42000059", "task_42000059_2"]),
    # a case twin of a renamed counter's column
    ({42000050: "x", 42000051: "X", 42000052: "x_42000051"}, ["x", "X_42000051", "x_42000051_42000052"]),
    # an unusable name's column (escaped) taken by an earlier counter
    ({42000050: "a\\x01", 42000051: "a\x01"}, ["a\\x01", "a\\x01_42000051"]),
    # a counter's relative and absolute types of one name still share its column
    ({42000050: "PAPI_TOT_INS", 43000050: "PAPI_TOT_INS"}, ["PAPI_TOT_INS", "PAPI_TOT_INS"]),
])
def test_pcf_counter_columns_unique_in_letter_case(labels, columns):
    """Attack 16 F7: every rename (case twin, key column, unusable name) is checked against the other columns."""
    from synthtrace.tracelib.formats.paraver.pcf import parse_pcf

    text = "EVENT_TYPE\n" + "".join(f"7 {t} {name}\n" for t, name in labels.items())
    cat = parse_pcf(text.encode(), "t.pcf")
    assert [cat.counter_name(t) for t in labels] == columns, cat.renamed_lines
    said = " ".join(text for _, text in cat.renamed_lines)
    assert all(f"read as {c!r}" in said for c, n in zip(columns, labels.values(), strict=True) if c != n), said


def _same_named_metrics(root: Path, second: str) -> Path:
    """One rank whose burst [0, 100] counts 10 PAPI_TOT_INS and 3 of another member named ``second``; a third
    metric named ``papi_tot_ins_metric<ref of the second>`` counts 5."""
    a = _Archive(root, ranks=1, threads=1)
    a.mpi("MPI_Barrier")
    other = a.member(second, MetricMode.ACCUMULATED_START, Type.UINT64, unit="other")  # its own member: the
    # writer gives a definition alike in every field the same reference (one member, recorded by two classes)
    third = a.member(f"papi_tot_ins_metric{other._ref}", MetricMode.ACCUMULATED_START, Type.UINT64)
    cls = a.d.metric_class([other, third], MetricOccurrence.SYNCHRONOUS_STRICT, RecorderKind.CPU)
    e = a.events(0)
    e.program_begin(0, "same", [])
    e.enter(0, "main")
    e.ev.metric(a.ticks(100), cls, [3, 5])
    e.enter(100, "MPI_Barrier", ins=10)
    e.leave(200, "MPI_Barrier", ins=40)
    e.leave(300, "main")
    e.program_end(300, 0)
    return a.close()


@pytest.mark.parametrize("second", ["PAPI_TOT_INS", "papi_tot_ins"])
def test_otf2_metric_columns_unique_in_letter_case(tmp_path, run_cli, second):
    """Attack 16 F7b: a member named exactly like an earlier one fed its column (107,000 'instructions'); F7: a
    case twin's new name ``papi_tot_ins_metric<ref>`` may be a later member's own name."""
    anchor = _same_named_metrics(tmp_path / "archive", second)
    wh = tmp_path / "wh"
    code, _, err = run_cli("ingest", anchor, "-w", wh)
    assert code == 0, err
    assert "the second read as 'papi_tot_ins_metric" in err, err
    counters = _sums(wh, "SELECT counters FROM runs")["counters"]
    assert len(counters) == 3 and len({c.lower() for c in counters}) == 3, counters
    got = _sums(wh, "SELECT " + ", ".join(f'"{c}"' for c in counters) + " FROM bursts WHERE end_ns = 100")
    assert sorted(got.values()) == [3, 5, 10], (got, err)
    assert got["PAPI_TOT_INS"] == 10, got
