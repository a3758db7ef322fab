"""`synthtrace ingest`, `runs` and `sql` as a user runs them, including every kind of bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from testing.traces import ALL_PARAVER, LULESH_A, LULESH_B, PRIME, copy_trace, tree_digest

pytestmark = pytest.mark.real_traces


@pytest.fixture
def warehouse(tmp_path, run_cli) -> Path:
    """A warehouse holding the prime trace."""
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", PRIME, "--warehouse", wh)
    assert code == 0, err
    return wh


def test_ingest_all_real_traces_and_list_them(tmp_path, run_cli):
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", PRIME.parent, "-w", wh, "--experiment", "real")
    assert code == 0, err
    assert out.count("ingested as") == len(ALL_PARAVER)
    code, out, _ = run_cli(
        "sql", "SELECT run_name, experiment, app, n_bursts FROM runs ORDER BY run_name", "-w", wh, "-f", "json"
    )
    rows = json.loads(out)
    assert [r["run_name"] for r in rows] == sorted(p.stem for p in ALL_PARAVER)
    assert {r["experiment"] for r in rows} == {"real"}
    # issue 28: the app is the program the trace names (both LULESH runs: the binary lulesh2.0), else the stem
    assert {r["app"] for r in rows} == {"prime_v0", "jacobi-2d-imper_v0", "lulesh2.0"}
    code, out, _ = run_cli("runs", "-w", wh)
    assert code == 0 and "prime_v0" in out


def test_reingest_is_idempotent_even_when_renamed(tmp_path, warehouse, run_cli):
    before = tree_digest(warehouse)
    renamed = copy_trace(PRIME, tmp_path / "drop", "prime_again")
    code, out, _ = run_cli("ingest", renamed, "-w", warehouse)
    assert code == 0 and "already ingested as prime_v0" in out
    assert tree_digest(warehouse) == before


def test_experiment_defaults_to_folder_and_app_to_stem(tmp_path, run_cli):
    prv = copy_trace(LULESH_B, tmp_path / "lulesh-exp", "lulesh.run1")
    wh = tmp_path / "wh"
    assert run_cli("ingest", prv, "-w", wh, "--date", "2024-03-01T02:00:00")[0] == 0
    code, out, _ = run_cli("sql", "SELECT experiment, app, run_name, started_at FROM runs", "-w", wh, "-f", "csv")
    # issue 28: the app is the binary the .pcf names (lulesh2.0), whatever the file is called
    assert out.splitlines()[1] == '"lulesh-exp","lulesh2.0","lulesh.run1",2024-03-01 02:00:00.000000'


def test_sql_formats(tmp_path, warehouse, run_cli):
    q = "SELECT task, count(*) AS n, sum(PAPI_TOT_INS) AS ins FROM bursts GROUP BY task ORDER BY task"
    code, out, _ = run_cli("sql", q, "-w", warehouse, "--format", "csv")
    assert code == 0 and out.splitlines()[0] == '"task","n","ins"' and len(out.splitlines()) == 17
    code, out, _ = run_cli("sql", q, "-w", warehouse, "--format", "json")
    assert len(json.loads(out)) == 16
    code, out, _ = run_cli("sql", q, "-w", warehouse)
    assert code == 0 and "ins" in out
    target = tmp_path / "out.parquet"
    code, _, _ = run_cli("sql", q, "-w", warehouse, "--format", "parquet", "--output", target)
    assert code == 0 and pq.read_table(target).num_rows == 16
    code, _, err = run_cli("sql", q, "-w", warehouse, "--format", "parquet")
    assert code == 2 and "--output" in err


@pytest.mark.parametrize("statement", [
    "DROP VIEW bursts", "CREATE TABLE t AS SELECT 1", "DELETE FROM bursts", "INSERT INTO bursts SELECT * FROM bursts",
    "UPDATE bursts SET task = 0", "COPY bursts FROM 'x.csv'", "COPY (SELECT 1) TO 'x.csv'", "ATTACH 'x.db' AS x",
    "SELECT 1; DROP VIEW runs", "INSTALL httpfs", "EXPORT DATABASE 'dump'",
])
def test_sql_refuses_writes(tmp_path, warehouse, run_cli, statement, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = tree_digest(warehouse)
    code, out, err = run_cli("sql", statement, "-w", warehouse)
    assert code == 2
    assert "read-only" in err and len(err.strip().splitlines()) == 1
    assert tree_digest(warehouse) == before
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "dump").exists()


def test_sql_error_is_one_line(warehouse, run_cli):
    code, _, err = run_cli("sql", "SELECT nope FROM bursts", "-w", warehouse)
    assert code == 2 and "query failed" in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- bad input
def _edit(prv: Path, fn) -> None:
    lines = prv.read_text().splitlines(keepends=True)
    prv.write_text("".join(fn(lines)))


def _body_index(lines: list[str], prefix: str = "1:") -> int:
    return next(i for i, ln in enumerate(lines) if ln.startswith(prefix))


def _replace_field(k: int, value: str, prefix: str = "1:"):
    def fn(lines):
        i = _body_index(lines, prefix)
        f = lines[i].rstrip("\n").split(":")
        f[k] = value
        lines[i] = ":".join(f) + "\n"
        return lines
    return fn


def _insert_line(text: str):
    def fn(lines):
        i = _body_index(lines)
        return lines[: i + 1] + [text + "\n"] + lines[i + 1:]
    return fn


def _swap_same_thread(lines):
    i = _body_index(lines, "1:1:1:1:1:")
    j = next(k for k in range(len(lines) - 1, i, -1) if lines[k].startswith("1:1:1:1:1:"))
    lines[i], lines[j] = lines[j], lines[i]
    return lines


BAD = {
    "non_numeric_field": (_replace_field(5, "12a4"), "is not a non-negative integer"),
    "unknown_record_type": (_insert_line("7:1:1:1:1:100:200:1"), "unknown record type"),
    "task_outside_model": (_replace_field(3, "99"), "outside the header's resource model"),
    "thread_outside_model": (_replace_field(4, "3"), "outside the header's resource model"),
    "cpu_outside_model": (_replace_field(1, "999"), "cpu 999 outside"),
    "record_too_short": (_insert_line("1:1:1:1:1:100"), "record too short"),
    "empty_field": (_insert_line("2:1:1:1:1::42000050:5"), "is empty"),
    "no_header": (lambda lines: lines[1:], "no Paraver header"),
    "broken_header": (
        lambda lines: ["#Paraver (21/01/22 at 16:37):abc_ns:1(20):2:8(1:1)\n"] + lines[1:],
        "broken Paraver header",
    ),
    "truncated_mid_record": (lambda lines: lines[:-1] + [lines[-1][: len(lines[-1]) // 2]], "cut off mid-record"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_trace_is_refused_with_file_line_reason(tmp_path, warehouse, run_cli, kind):
    edit, reason = BAD[kind]
    prv = copy_trace(LULESH_A, tmp_path / "bad")
    _edit(prv, edit)
    before = tree_digest(warehouse)
    code, out, err = run_cli("ingest", prv, "-w", warehouse)
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    assert f"{prv}:" in lines[0] and reason in lines[0]
    if kind not in ("no_header", "broken_header"):
        assert f"{prv}:1:" not in lines[0]  # names the offending record's line, not the header
    assert tree_digest(warehouse) == before
    assert not list((warehouse / ".staging").iterdir())


#: what Paraver loads although it is no trace as Extrae writes one: a thread's records out of time order (sorted
#: on load) and a time past the header's end (kept); tests/test_paramedir.py checks these against paramedir itself
PARAVER_LOADS = {
    "out_of_time_order": (_swap_same_thread, "the records were sorted by time before reading"),
    "beyond_trace_end": (_insert_line("2:1:1:1:1:99999999999:42000050:1"), "1 records have times beyond the trace end"),
}


@pytest.mark.parametrize("kind", sorted(PARAVER_LOADS))
def test_records_paraver_sorts_or_keeps_are_read_as_in_order(tmp_path, run_cli, kind):
    import synthtrace

    edit, warning = PARAVER_LOADS[kind]
    prv = copy_trace(LULESH_A, tmp_path / "t")
    _edit(prv, edit)
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0 and warning in err, err
    # sorted back (and the late sample past every burst), the bursts are those of the trace as recorded
    assert synthtrace.read_trace(prv)[0].drop("run_id").equals(synthtrace.read_trace(LULESH_A)[0].drop("run_id"))


def test_broken_record_after_the_disorder_names_its_line_in_the_file(tmp_path, warehouse, run_cli):
    """The records are sorted before the broken one is reached: the error still names its line in the file, and a
    trace cut mid-record is still said to be cut (and --salvage still keeps its complete records)."""
    prv = copy_trace(LULESH_A, tmp_path / "bad")
    lines = prv.read_text().splitlines(keepends=True)
    # thread 1's last state moved to the top of the body: in the sorted copy every line in between moves up one
    last = max(k for k, ln in enumerate(lines) if ln.startswith("1:1:1:1:1:"))
    lines.insert(_body_index(lines), lines.pop(last))
    target = len(lines) - 40
    assert target < last
    f = lines[target].split(":")
    f[1] = "x"
    lines[target] = ":".join(f)
    prv.write_text("".join(lines))
    before = tree_digest(warehouse)
    code, _, err = run_cli("ingest", prv, "-w", warehouse)
    assert code == 2 and f"{prv}:{target + 1}: field 2 'x'" in err, err
    assert tree_digest(warehouse) == before
    del lines[target]
    prv.write_text("".join(lines)[:-25])
    code, _, err = run_cli("ingest", prv, "-w", warehouse)
    assert code == 2 and f"{prv}:{len(lines)}: trace cut off mid-record" in err, err
    code, _, err = run_cli("ingest", prv, "-w", warehouse, "--salvage")
    assert code == 0 and "sorted by time" in err and "dropped the incomplete last record" in err, err


def test_error_names_the_exact_line(tmp_path, warehouse, run_cli):
    prv = copy_trace(LULESH_A, tmp_path / "bad")
    lines = prv.read_text().splitlines(keepends=True)
    target = len(lines) - 40
    f = lines[target].split(":")
    f[1] = "x"
    lines[target] = ":".join(f)
    prv.write_text("".join(lines))
    code, _, err = run_cli("ingest", prv, "-w", warehouse)
    assert code == 2 and f"{prv}:{target + 1}: field 2 'x'" in err


@pytest.mark.parametrize("content,reason", [(b"", "empty file"), (b"\x00\x01\x02PK\x03\x04" * 100, "binary file")])
def test_empty_and_binary_files(tmp_path, warehouse, run_cli, content, reason):
    prv = tmp_path / "x.prv"
    prv.write_bytes(content)
    before = tree_digest(warehouse)
    code, _, err = run_cli("ingest", prv, "-w", warehouse)
    assert code == 2 and reason in err and str(prv) in err
    assert tree_digest(warehouse) == before


def test_salvage_keeps_complete_records(tmp_path, run_cli):
    prv = copy_trace(LULESH_A, tmp_path / "cut")
    data = prv.read_bytes()
    prv.write_bytes(data[: len(data) // 2])  # a killed job: cut in the middle of a line
    wh = tmp_path / "wh"
    assert run_cli("ingest", prv, "-w", wh)[0] == 2
    code, out, err = run_cli("ingest", prv, "-w", wh, "--salvage")
    assert code == 0 and "incomplete last record" in err
    code, out, _ = run_cli("sql", "SELECT n_bursts FROM runs", "-w", wh, "-f", "csv")
    assert 0 < int(out.splitlines()[1]) < 2140


def test_row_contradicting_prv(tmp_path, warehouse, run_cli):
    """Paraver never refuses a .row (names are labels it looks up): a misfit level is one warning, exit 0."""
    prv = copy_trace(LULESH_A, tmp_path / "bad")
    row = prv.with_suffix(".row")
    row.write_text(row.read_text().replace("LEVEL CPU SIZE 20", "LEVEL CPU SIZE 19").replace("20.epeec04\n", ""))
    code, _, err = run_cli("ingest", prv, "-w", warehouse)
    assert code == 0 and f"{row}:1: LEVEL CPU lists 19 names but the .prv header has 20" in err


def test_pcf_contradicting_prv(tmp_path, warehouse, run_cli):
    prv = copy_trace(PRIME, tmp_path / "bad")
    pcf = prv.with_suffix(".pcf")
    pcf.write_text(pcf.read_text().replace("31   MPI_Init\n", ""))
    code, _, err = run_cli("ingest", prv, "-w", warehouse)
    assert code == 2 and "MPI call id 31 of event type 50000003 is not listed in the .pcf" in err


def test_missing_pcf_and_row_is_a_warning(tmp_path, run_cli):
    prv = copy_trace(PRIME, tmp_path / "bare")
    prv.with_suffix(".pcf").unlink()
    prv.with_suffix(".row").unlink()
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and "no .pcf file" in err and "no .row file" in err
    code, out, _ = run_cli("sql", 'SELECT sum("42000050") AS ins, count(mpi_call) FROM bursts', "-w", wh, "-f", "csv")
    assert int(out.splitlines()[1].split(",")[0]) > 0


def test_one_bad_file_does_not_stop_the_others(tmp_path, run_cli):
    drop = tmp_path / "drop"
    copy_trace(PRIME, drop)
    bad = copy_trace(LULESH_A, drop)
    _edit(bad, _replace_field(3, "99"))
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", drop, "-w", wh)
    assert code == 2 and "ingested as prime_v0" in out and str(bad) in err
    code, out, _ = run_cli("sql", "SELECT count(*) FROM runs", "-w", wh, "-f", "csv")
    assert out.splitlines()[1] == "1"


def test_missing_path_is_bad_input(tmp_path, run_cli):
    code, _, err = run_cli("ingest", tmp_path / "nope.prv", "-w", tmp_path / "wh")
    assert code == 2 and "no such file" in err


def test_part_writer_raises_a_failed_background_write(tmp_path):
    """Parts are written in a background thread: a write that fails must not be lost (ingest then leaves no run)."""
    import polars as pl

    from synthtrace.warehouse.ingest import PartWriter

    frame = pl.DataFrame({"a": [1, 2, 3]})
    writer = PartWriter(backlog=1)
    writer.write(frame, tmp_path / "ok.parquet")
    writer.write(frame, tmp_path / "missing" / "part.parquet")
    with pytest.raises(OSError):
        writer.write(frame, tmp_path / "later.parquet")  # the backlog waits on the failed write
        writer.close()
    assert pl.read_parquet(tmp_path / "ok.parquet").equals(frame)


def test_python_api_names_experiments_as_the_command_does(tmp_path):
    """``synthtrace.ingest(wh, folder)`` puts the traces of a folder that mixes applications into one experiment
    per application, as ``synthtrace ingest`` does (one rule for the command, the API and the nightly flow)."""
    import synthtrace
    from testing.traces import JACOBI

    copy_trace(PRIME, tmp_path / "mixed")
    copy_trace(JACOBI, tmp_path / "mixed")
    results = synthtrace.ingest(tmp_path / "wh", tmp_path / "mixed")
    assert {(r.run_name, r.experiment) for r in results} == {("prime_v0", "prime_v0"), (JACOBI.stem, JACOBI.stem)}


def test_two_counter_types_of_one_name_keep_two_columns(tmp_path, run_cli):
    """A .pcf giving one name to two counter types (as Paraver loads it, by type): the second type's column is
    NAME_TYPE, with one warning; neither counter is lost or folded into the other."""
    from synthtrace import read_trace
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.sql import query

    prv = copy_trace(PRIME, tmp_path / "twice")
    pcf = prv.with_suffix(".pcf")
    pcf.write_text(PRIME.with_suffix(".pcf").read_text().replace("PAPI_L2_DCM", "PAPI_L1_DCM"))
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0, err
    assert f"{pcf}:145: counter name 'PAPI_L1_DCM' given to event types 42000000 and 42000002: the second read " \
           "as 'PAPI_L1_DCM_42000002'" in err
    got = query(Warehouse(tmp_path / "wh"), "SELECT sum(PAPI_L1_DCM) AS l1, sum(PAPI_L1_DCM_42000002) AS l2 "
                                            "FROM bursts").to_pylist()[0]
    bursts, _ = read_trace(PRIME)  # the trace with its own .pcf
    assert (got["l1"], got["l2"]) == (bursts["PAPI_L1_DCM"].sum(), bursts["PAPI_L2_DCM"].sum())
    assert got["l1"] != got["l2"]
