"""What Paraver's paramedir loads, synthtrace loads too; what is truly broken is one line, exit 2, warehouse unchanged.

Every case is a crafted copy of a real trace in ../shared/traces (the originals are never edited). The variants
follow what paraver-kernel's parsers accept (``utils/traceparser/tracebodyio_v1.cpp``, ``pcffileparser.cpp``,
``traceheader.h``, ``processmodel.cpp``): blank lines anywhere in the body, any ``.pcf`` section, ``PRECISION``
lines, comments, tabs and odd spacing, a header of any length, gzip-compressed traces.
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
import warnings
from dataclasses import asdict
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.paraver.header import PARAVER_UNITS
from testing.paraver_variants import CYC, INSTR, ITERATIONS, variants, write, write_many_tasks
from testing.traces import JACOBI, LULESH_A, PRIME, copy_trace, tree_digest

pytestmark = pytest.mark.real_traces


def _runs(run_cli, wh: Path) -> list[dict]:
    code, out, err = run_cli(
        "sql",
        "SELECT run_id, run_name, experiment, app, n_tasks, n_bursts, n_mpi_calls, counters "
        "FROM runs ORDER BY run_name",
        "-w",
        wh,
        "-f",
        "json",
    )
    assert code == 0, err
    return json.loads(out)


def _ingest_one(run_cli, prv: Path, wh: Path, *extra: str) -> dict:
    code, out, err = run_cli("ingest", prv, "-w", wh, *extra)
    assert code == 0, err
    (row,) = [r for r in _runs(run_cli, wh) if r["run_name"] == prv.name.split(".prv")[0]]
    return row


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, dict]:
    """The runs of the unmodified LULESH and prime traces (what every tolerated variant must give)."""
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.ingest import ingest_trace

    wh = Warehouse(tmp_path_factory.mktemp("ref") / "wh")
    out = {}
    for prv in (LULESH_A, PRIME):
        res = ingest_trace(wh, prv)
        out[prv.name] = {"n_bursts": res.n_bursts, "n_mpi_calls": res.n_mpi_calls, "run_id": res.run_id}
    return out


# --------------------------------------------------------------------------- accepted as paramedir accepts
def test_blank_lines_in_the_body_are_skipped(tmp_path, run_cli, reference):
    prv = copy_trace(LULESH_A, tmp_path / "blank")
    lines = prv.read_text().splitlines(keepends=True)
    middle = len(lines) // 2
    lines[middle:middle] = ["\n", "   \t\n", "\r\n"]
    prv.write_text("".join(lines) + "\n\n")  # trailing empty lines, as test1.prv of the issue ends
    row = _ingest_one(run_cli, prv, tmp_path / "wh")
    ref = reference[LULESH_A.name]
    assert (row["n_bursts"], row["n_mpi_calls"]) == (ref["n_bursts"], ref["n_mpi_calls"])


def test_pcf_precision_comments_tabs_and_spacing(tmp_path, run_cli, reference):
    prv = copy_trace(PRIME, tmp_path / "pcf")
    pcf = prv.with_suffix(".pcf")
    text = pcf.read_text()
    # PROFET writes a PRECISION line inside EVENT_TYPE blocks; Paraver also skips '#' comments, trims lines and
    # reads tabs as spaces
    text = re.sub(r"(EVENT_TYPE\n)(\S+\s+42000050[^\n]*\n)", r"\1\2PRECISION 2\n", text, count=1)
    text = "# written by a tool\n" + text.replace("EVENT_TYPE\n", "  EVENT_TYPE\t\n# a comment\n")
    text = re.sub(r"\n(\d+)\s+(420000\d\d)\s+", lambda m: f"\n\t{m[1]}\t  {m[2]}   ", text)
    pcf.write_text(text)
    assert "PRECISION 2" in text
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and "skipped" not in err, err
    (row,) = _runs(run_cli, wh)
    assert {"PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_L2_DCM"} <= set(row["counters"])
    assert (row["n_bursts"], row["n_mpi_calls"]) == (reference[PRIME.name]["n_bursts"],
                                                     reference[PRIME.name]["n_mpi_calls"])

    from synthtrace.tracelib.formats.paraver.pcf import read_pcf
    assert read_pcf(pcf).event_precision[42000050] == 2


def test_pcf_lines_paraver_skips_are_skipped_with_a_warning(tmp_path, run_cli):
    prv = copy_trace(PRIME, tmp_path / "odd")
    pcf = prv.with_suffix(".pcf")
    pcf.write_text(
        "garbage before any section\n" + pcf.read_text().replace("EVENT_TYPE\n", "EVENT_TYPE\nnot a type\n", 1)
    )
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0, err
    assert f"{pcf}:1: skipped:" in err and "(2 lines skipped)" in err


def test_garbage_pcf_is_a_warning_and_counters_keep_numbers(tmp_path, run_cli):
    prv = copy_trace(PRIME, tmp_path / "garbage")
    prv.with_suffix(".pcf").write_bytes(bytes(range(1, 256)) * 8)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and "not a .pcf file" in err, err
    assert "42000050" in _runs(run_cli, wh)[0]["counters"]


def test_header_of_1500_tasks(tmp_path, run_cli, reference):
    """A header line of ~6 KB (1,500 tasks): the 16 tasks with records plus 1,484 idle ones."""
    prv = copy_trace(PRIME, tmp_path / "wide")
    prv.with_suffix(".row").unlink()  # its THREAD level names 16 threads
    lines = prv.read_text().splitlines(keepends=True)
    head, _, rest = lines[0].rpartition(":16(")
    tasks = rest.split(")")[0] + "".join(f",1:{1 + k % 4}" for k in range(1484))
    lines[0] = f"{head}:1500({tasks}){rest.split(')', 1)[1]}"
    assert len(lines[0]) > 6000
    prv.write_text("".join(lines))
    row = _ingest_one(run_cli, prv, tmp_path / "wh")
    assert row["n_tasks"] == 1500 and row["n_bursts"] == reference[PRIME.name]["n_bursts"]


def test_gzip_compressed_trace_is_the_same_run(tmp_path, run_cli, reference):
    prv = copy_trace(PRIME, tmp_path / "gz")
    gz = prv.with_name(prv.name + ".gz")
    with open(prv, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    prv.unlink()  # only prime_v0.prv.gz, prime_v0.pcf, prime_v0.row remain
    row = _ingest_one(run_cli, gz, tmp_path / "wh")
    assert row["run_name"] == "prime_v0" and row["app"] == "prime_v0"
    assert row["run_id"] == reference[PRIME.name]["run_id"]  # content identity: the decompressed bytes
    assert row["n_bursts"] == reference[PRIME.name]["n_bursts"] and "PAPI_TOT_INS" in row["counters"]


def test_truncated_gzip_is_one_line(tmp_path, run_cli):
    prv = copy_trace(PRIME, tmp_path / "gzcut")
    gz = prv.with_name(prv.name + ".gz")
    gz.write_bytes(gzip.compress(prv.read_bytes())[:20_000])
    prv.unlink()
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", gz, "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{gz}" in err and "gzip" in err, err
    assert not list((wh / "runs").glob("*"))


# --------------------------------------------------------------------------- refused: one line, exit 2
def _header(prv: Path, new: str) -> None:
    lines = prv.read_text().splitlines(keepends=True)
    prv.write_text(new + "\n" + "".join(lines[1:]))


PRIME_HEADER = "#Paraver (25/10/2018 at 14:04):1871482775_ns:4(13,1,1,1):1:16({tasks}),17"
PRIME_TASKS = "1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:2,1:3,1:4"
HEADERS = {
    "duration_above_int64": (
        PRIME_HEADER.replace("1871482775_ns", "9" * 30 + "_ns"),
        "does not fit in a signed 64-bit",
    ),
    "duration_31_digits": (PRIME_HEADER.replace("1871482775_ns", "9" * 31 + "_ns"), "more than 30 digits"),
    "cpu_count_30_digits": (PRIME_HEADER.replace("4(13,", "4(" + "9" * 30 + ","), "cpus (expected 0 to 2147483647)"),
    "node_beyond_declared": (PRIME_HEADER.format(tasks=PRIME_TASKS.replace("1:4", "1:5")), "header declares 4 nodes"),
    "node_above_int32": (PRIME_HEADER.format(tasks=PRIME_TASKS.replace("1:4", "1:" + "9" * 12)), "node 9999"),
    "threads_50M": (PRIME_HEADER.format(tasks=PRIME_TASKS.replace("1:4", "50000000:4")), "declares 50000000 threads"),
    "threads_beyond_the_file": (
        PRIME_HEADER.format(tasks=PRIME_TASKS.replace("1:4", "2000000:4")),
        "header declares 2000015 threads, more than a file of",
    ),
    "no_tasks": (PRIME_HEADER.replace("16({tasks})", "0()"), "declares 0 tasks"),
    "threads_beyond_keys": (
        PRIME_HEADER.format(tasks=PRIME_TASKS.replace("1:4", "3000000:4")),
        "expected 1 to 2097151",
    ),
}


@pytest.mark.parametrize("kind", sorted(HEADERS))
def test_broken_header_is_one_line(tmp_path, run_cli, kind):
    header, reason = HEADERS[kind]
    prv = copy_trace(PRIME, tmp_path / kind)
    _header(prv, header.format(tasks=PRIME_TASKS) if "{tasks}" in header else header)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {prv}:1: broken Paraver header") and reason in err, err
    assert not list((wh / "runs").glob("*"))


def test_more_threads_than_the_reader_takes_is_one_line_before_anything_is_allocated(tmp_path, run_cli):
    """Attack 17: the reader keeps ~0.7 kB per declared thread, so a 115 MB trace declaring 7.2 M threads (room for
    them: 16 bytes a thread) took over 3.5 GB. A trace declaring more than MAX_THREADS (2^20) threads is refused in
    one line saying the reader's limit, nothing stored; a file with room for them (its size here is a hole)."""
    from synthtrace.tracelib.formats.paraver.reader import MAX_THREADS

    n = MAX_THREADS + 1
    prv = copy_trace(PRIME, tmp_path / "wide")
    _header(prv, PRIME_HEADER.format(tasks=PRIME_TASKS.replace("1:4", f"{n - 15}:4")))
    with prv.open("r+b") as f:
        f.truncate(32 * n)
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0] == (f"error: {prv}:1: header declares {n:,} threads (tasks x threads), more than this reader "
                        f"takes ({MAX_THREADS:,}: it keeps ~0.7 kB per declared thread)"), err
    assert not (tmp_path / "wh" / "runs").exists() or not list((tmp_path / "wh" / "runs").iterdir())


def test_header_only_trace_is_refused(tmp_path, run_cli):
    prv = copy_trace(PRIME, tmp_path / "empty")
    prv.write_text(prv.read_text().split("\n1:", 1)[0] + "\n")
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 2 and "no records after the header" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("offset", [2**62, 2**63 - 1 - 1871482775 - 10], ids=["2^62", "near-2^63"])
def test_times_far_from_zero_keep_every_burst(tmp_path, run_cli, reference, offset):
    """A trace whose times all lie far from 0 (a clock that counts from another epoch) keeps every burst: on the
    code before, each thread's last burst (after MPI_Finalize, up to the trace's end) was dropped, silently, once
    it ended at or past 2^62 ns (attack 6 F8: 704 -> 688 bursts, exit 0)."""
    prv = copy_trace(PRIME, tmp_path / "far")
    fields = {"1": (5, 6), "2": (5,), "3": (5, 6, 11, 12)}  # the time fields of states, events, communications
    lines = prv.read_text().splitlines()
    for k, line in enumerate(lines):
        f = line.split(":")
        for i in fields.get(f[0], ()) if k else ():
            f[i] = str(int(f[i]) + offset)
        lines[k] = ":".join(f)
    end = re.search(r":(\d+)_ns:", lines[0])
    lines[0] = lines[0].replace(end.group(0), f":{int(end.group(1)) + offset}_ns:")
    prv.write_text("\n".join(lines) + "\n")
    row = _ingest_one(run_cli, prv, tmp_path / "wh")
    ref = reference[PRIME.name]
    assert (row["n_bursts"], row["n_mpi_calls"]) == (ref["n_bursts"], ref["n_mpi_calls"])


def test_communication_beyond_the_trace_end_is_kept_with_a_warning(tmp_path, run_cli):
    """paramedir loads a trace whose communication times pass the header's end: kept, and said once."""
    prv = copy_trace(LULESH_A, tmp_path / "comm")
    lines = prv.read_text().splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if ln.startswith("3:"))
    f = lines[i].split(":")
    f[12] = "99999999999"  # physical receive time, beyond the header's 1616378951 ns
    lines[i] = ":".join(f)
    prv.write_text("".join(lines))
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0 and f"{prv}: 1 records have times beyond the trace end" in err, err
    f[12] = "9" * 19  # beyond int64 once in ns: refused
    lines[i] = ":".join(f)
    prv.write_text("".join(lines))
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh2")
    assert code == 2 and f"{prv}:{i + 1}: field 13 time" in err, err


def test_unreadable_pcf_is_one_line(tmp_path, run_cli, monkeypatch):
    prv = copy_trace(PRIME, tmp_path / "perm")
    pcf = prv.with_suffix(".pcf")
    real = Path.open  # [helper security2] companions are read through Path.open now (size-capped, issue 23 F5)

    def opened(self, *args, **kwargs):  # the tests run as root, where chmod 000 does not stop a read
        if self == pcf:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", opened)
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 2 and err.strip() == f"error: {pcf}: cannot be read (Permission denied)"


# --------------------------------------------------------------------------- ingest semantics
def test_trace_changed_while_read_is_never_stored_under_the_full_id(tmp_path, run_cli, monkeypatch):
    """A trace cut at a line boundary between hashing and parsing: refused; the full trace then ingests."""
    import synthtrace.warehouse.ingest as ingest

    prv = copy_trace(LULESH_A, tmp_path / "growing")
    full = prv.read_bytes()
    cut = full[: full.index(b"\n", len(full) // 2) + 1]
    real = ingest.run_identity

    def identity_then_cut(source):
        run_id = real(source)
        prv.write_bytes(cut)
        return run_id

    monkeypatch.setattr(ingest, "run_identity", identity_then_cut)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 2 and "changed while it was read" in err and len(err.strip().splitlines()) == 1, err
    assert not list((wh / "runs").glob("*"))
    monkeypatch.setattr(ingest, "run_identity", real)
    prv.write_bytes(full)
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and ": ingested as" in out, err


def test_ingest_into_another_experiment_is_refused_with_the_move_command(tmp_path, run_cli):
    wh = tmp_path / "wh"
    assert run_cli("ingest", PRIME, "-w", wh, "--experiment", "first")[0] == 0
    before = tree_digest(wh)
    code, out, err = run_cli("ingest", PRIME, "-w", wh, "--experiment", "second")
    run_id = _runs(run_cli, wh)[0]["run_id"]
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "in experiment 'first', not 'second'" in err and f"synthtrace runs move {run_id} --experiment second" in err
    assert tree_digest(wh) == before
    code, out, err = run_cli("ingest", PRIME, "-w", wh, "--experiment", "first")
    assert code == 0 and "already ingested" in out


def test_pcf_copied_after_the_first_ingest_makes_the_run_named(tmp_path, run_cli):
    prv = copy_trace(PRIME, tmp_path / "late")
    pcf = prv.with_suffix(".pcf")
    pcf.unlink()
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and "no .pcf file" in err and "ingest again" in err
    (bare,) = _runs(run_cli, wh)
    assert "42000050" in bare["counters"]
    shutil.copyfile(PRIME.with_suffix(".pcf"), pcf)
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and f"replaces run {bare['run_id']}" in out, out + err
    (named,) = _runs(run_cli, wh)
    assert named["run_id"] != bare["run_id"] and "PAPI_TOT_INS" in named["counters"]


def test_folder_mixing_apps_makes_one_experiment_per_app(tmp_path, run_cli):
    drop = tmp_path / "mixed"
    copy_trace(PRIME, drop)
    copy_trace(JACOBI, drop)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", drop, "-w", wh)
    assert code == 0 and "note: folder mixed holds traces of 2 applications" in err, err
    assert {(r["run_name"], r["experiment"]) for r in _runs(run_cli, wh)} == {
        ("prime_v0", "prime_v0"), ("jacobi-2d-imper_v0", "jacobi-2d-imper_v0")}


def test_folder_of_one_app_is_one_experiment(tmp_path, run_cli):
    drop = tmp_path / "prime-16r"
    copy_trace(PRIME, drop, "prime.run0")
    copy_trace(PRIME, drop / "more", "prime.run1")  # same bytes: already ingested, same experiment
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", drop / "prime.run0.prv", "-w", wh)
    assert code == 0 and "note:" not in err
    assert _runs(run_cli, wh)[0]["experiment"] == "prime-16r"


def test_damaged_run_file_is_replaced_by_a_fresh_ingest(tmp_path, run_cli):
    wh = tmp_path / "wh"
    assert run_cli("ingest", PRIME, "-w", wh)[0] == 0
    (run_file,) = (wh / "runs").glob("*/run.parquet")
    run_file.write_bytes(b"PAR1 not parquet")
    code, out, err = run_cli("ingest", PRIME, "-w", wh)
    assert code == 0 and ": ingested as" in out, err
    assert _runs(run_cli, wh)[0]["run_name"] == "prime_v0"


def test_disk_full_during_ingest_is_one_line_and_stores_nothing(tmp_path, run_cli, monkeypatch):
    import polars as pl

    import synthtrace.warehouse.ingest as ingest

    def full(*args, **kwargs):
        raise pl.exceptions.ComputeError("failed to write: No space left on device (os error 28)")

    monkeypatch.setattr(ingest.pl.LazyFrame, "sink_parquet", full)  # writing mpi_calls.parquet
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", PRIME, "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "No space left on device" in err, err
    assert not list((wh / "runs").glob("*")) and not list((wh / ".staging").glob("*"))


def test_two_concurrent_ingests_of_one_trace_report_one_ingested(tmp_path, monkeypatch):
    """Another process commits the same content while this ingest is writing: this one says "already"."""
    import synthtrace.warehouse.ingest as ingest
    from synthtrace.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh")
    real = ingest._write_run
    other: list = []

    def write_while_another_commits(source, run_id, stage, progress):
        if not other:  # the other ingest runs (and commits) in the middle of this one's write
            monkeypatch.setattr(ingest, "_write_run", real)
            other.append(ingest.ingest_trace(wh, PRIME))
        return real(source, run_id, stage, progress)

    monkeypatch.setattr(ingest, "_write_run", write_while_another_commits)
    mine = ingest.ingest_trace(wh, PRIME)
    assert [other[0].status, mine.status] == ["ingested", "already"]
    assert mine.run_id == other[0].run_id and len(list(wh.runs_dir.glob("*/run.parquet"))) == 1


# --------------------------------------------------------------------------- forms real tools write (generated)
# Each form of testing/paraver_variants.py must read as the timeline it was written from: every burst's thread,
# times (ns) and counters, and the messages on the MPI calls. tests/test_paramedir.py checks paramedir agrees.
VARIANTS = variants()


def _read(prv: Path) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    import synthtrace

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bursts, calls = synthtrace.read_trace(prv)
    return bursts, calls, [str(w.message) for w in caught]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_generated_forms_read_as_written(tmp_path, name):
    v = VARIANTS[name]
    bursts, calls, said = _read(write(v, tmp_path))
    ins, cyc = ("PAPI_TOT_INS", "PAPI_TOT_CYC") if v.pcf else (str(INSTR), str(CYC))
    got = bursts.select("appl", "task", "thread", "start_ns", "end_ns", pl.col(ins).alias("instructions"),
                        pl.col(cyc).alias("cycles")).sort("appl", "task", "thread", "start_ns")
    want = pl.DataFrame([asdict(b) for b in v.bursts], schema=got.schema).sort("appl", "task", "thread", "start_ns")
    assert_frame_equal(got, want)
    send = calls.filter((pl.col("appl") == 1) & (pl.col("task") == 1) & (pl.col("thread") == 1)).sort("start_ns")
    recv = calls.filter((pl.col("appl") == 1) & (pl.col("task") == 2)).sort("start_ns")
    assert send["mpi_call"].to_list() == ["MPI_Send"] * ITERATIONS or not v.pcf
    assert send["bytes_sent"].to_list() == [4096] * ITERATIONS and send["peer"].to_list() == [2] * ITERATIONS
    assert recv["bytes_recv"].to_list() == [4096] * ITERATIONS and recv["tag"].to_list() == [7, 8, 9]
    assert send["start_ns"].to_list() == [s for s, _ in v.messages]
    assert (any("impossible values" in w and "negative" in w for w in said)) == bool(v.overrides), said
    assert any("is not one Paraver knows" in w for w in said) == (v.form.unit not in PARAVER_UNITS), said


@pytest.mark.parametrize("name", ["row_misfit", "row_all_levels_any_order"])
def test_row_paraver_reads_is_a_warning_not_an_error(tmp_path, run_cli, name):
    """paramedir never refuses a .row (it only looks names up): a .row that does not fit is one warning, exit 0."""
    prv = write(VARIANTS[name], tmp_path / "t")
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0, err
    misfit = [ln for ln in err.splitlines() if ".row:" in ln]
    if name == "row_misfit":
        assert any("LEVEL CPU lists 6 names but the .prv header has 4" in ln for ln in misfit), err
    else:
        assert not misfit, err


def test_negative_counter_delta_is_kept_as_paraver_reads_it_and_said(tmp_path, run_cli):
    """Extrae prints a counter that went backwards as 2**64 - d (``%lu``); Paraver reads it as -d: so does ingest."""
    v = VARIANTS["counter_wrapped_u64"]
    prv = write(v, tmp_path / "t")
    assert f":{2**64 - 5}" in prv.read_text()
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and "counter PAPI_TOT_CYC: impossible values" in err and ": 1 negative" in err, err
    code, out, err = run_cli("sql", "SELECT task, sum(PAPI_TOT_CYC) AS c FROM bursts WHERE appl = 1 GROUP BY task "
                             "ORDER BY task", "-w", wh, "-f", "json")
    by_task = {r["task"]: r["c"] for r in json.loads(out)}
    assert by_task[2] == sum(b.cycles for b in v.bursts if (b.appl, b.task) == (1, 2))
    assert -5 in [b.cycles for b in v.bursts]


def test_extrae_header_without_nodes_reads_without_resources(tmp_path):
    """Extrae writes ``0()`` when it knows no nodes; paramedir reads it as no resource model (records on cpu 0)."""
    from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

    prv = write(VARIANTS["no_resources_extrae"], tmp_path)
    assert ":0():2:" in prv.read_text().splitlines()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no .row
        trace = ParaverTrace(prv)
    assert trace.header.cpus_per_node == () and trace.resources["n_threads"] == 4


def test_bare_node_count_is_nodes_of_one_cpu(tmp_path):
    """``4`` without a cpu list is four nodes of one cpu (paraver-kernel resourcemodel.cpp): a record on cpu 5 is
    outside the model, one line naming it."""
    prv = write(VARIANTS["nodes_without_cpu_list"], tmp_path)
    assert _read(prv)[0].height == 12
    lines = prv.read_text().splitlines(keepends=True)
    k = next(i for i, ln in enumerate(lines) if ln.startswith("1:3:"))
    lines[k] = "1:5:" + lines[k][4:]
    prv.write_text("".join(lines))
    with pytest.raises(TraceFormatError, match=rf"{re.escape(str(prv))}:{k + 1}: cpu 5 outside .* \(4 cpus\)"):
        _read(prv)


#: broken record forms next to the tolerated ones: (edit of one event or state line, reason)
BROKEN_RECORDS = {
    "blank_then_text": (lambda ln: ln.rstrip("\n") + " 7\n", "is not a non-negative integer"),
    "negative_time": (lambda ln: ":".join(ln.split(":")[:5] + ["-" + ln.split(":")[5]] + ln.split(":")[6:]),
                      "field 6 '-"),
    "value_beyond_64_bits": (lambda ln: ln.rstrip("\n").rsplit(":", 1)[0] + f":{2**64}\n", "does not fit in 64 bits"),
    "negative_beyond_int64": (lambda ln: ln.rstrip("\n").rsplit(":", 1)[0] + f":-{2**63 + 1}\n",
                              "does not fit in a signed 64-bit integer"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_RECORDS))
def test_broken_record_forms_stay_refused(tmp_path, run_cli, kind):
    edit, reason = BROKEN_RECORDS[kind]
    wh = tmp_path / "wh"
    assert run_cli("ingest", write(VARIANTS["extrae"], tmp_path / "good"), "-w", wh)[0] == 0
    before = tree_digest(wh)
    prv = write(VARIANTS["extrae"], tmp_path / "t")
    lines = prv.read_text().splitlines(keepends=True)
    k = next(i for i, ln in enumerate(lines) if ln.startswith("2:1:1:1:1:") and f"{INSTR}:" in ln)
    lines[k] = edit(lines[k])
    prv.write_text("".join(lines))
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{prv}:{k + 1}:" in err and reason in err, err
    assert tree_digest(wh) == before


def test_new_format_trace_is_refused_as_paramedir_refuses_it(tmp_path, run_cli):
    """A ``new format`` first line announces paraver-kernel's internal record layout (TraceBodyIO_v2), which
    paramedir does not load (it loads only files starting with ``#Paraver``): one line, exit 2, not a misreading."""
    prv = write(VARIANTS["extrae"], tmp_path / "t")
    prv.write_text("new format\n" + prv.read_text())
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{prv}:1: 'new format' trace" in err, err


def test_very_many_tasks_read_per_task(tmp_path):
    """20,000 tasks on 417 nodes (a header line of 116 KB, no .pcf): every task's times and instructions."""
    prv, running = write_many_tasks(tmp_path, 20_000)
    bursts, _, _ = _read(prv)
    per = bursts.group_by("appl", "task", "thread").agg(pl.col("duration_ns").sum(), pl.col(str(INSTR)).sum())
    got = {(a, t, h): d for a, t, h, d, _ in per.iter_rows()}
    assert got == running
    assert {t: i for _, t, _, _, i in per.iter_rows()} == {t: 3000 + 2 * (t - 1) for t in range(1, 20_001)}
