"""Inputs built to break synthtrace, and disks that fill up (issue 23 items 7-10, 12, 13): each is refused in one
line or read correctly, and nothing stored is lost."""
from __future__ import annotations

import io
import resource
import signal
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from synthtrace.warehouse import Warehouse
from testing import hostile_otf2
from testing.traces import LULESH_A, LULESH_B, PRIME, copy_trace, tree_digest

pytestmark = pytest.mark.real_traces


def _with_header(dest: Path, old: bytes, new: bytes) -> Path:
    """A copy of PRIME whose header has ``old`` replaced by ``new``."""
    prv = copy_trace(PRIME, dest)
    data = prv.read_bytes()
    header, _, body = data.partition(b"\n")
    assert old in header
    prv.write_bytes(header.replace(old, new, 1) + b"\n" + body)
    return prv


# ------------------------------------------------------------------------------ item 8: counts out of range
@pytest.mark.parametrize(("old", "new", "reason"), [
    (b"4(13,1,1,1)", b"4(13,-1,1,1)", "node 2 declares -1 cpus"),
    (b"4(13,1,1,1)", b"4(99999999999999999999,1,1,-99999999999999999990)", "cpus (expected 0 to"),
    (b",17", b",99999999999999999999", "communicators declared"),
])
def test_paraver_header_counts_out_of_range_are_refused(tmp_path, run_cli, old, new, reason):
    """A negative cpu count (`1(-1)`) was accepted; counts past 64 bits (summing to a small number) reached Numba."""
    prv = _with_header(tmp_path / "t", old, new)
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 2 and reason in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


ARABIC_INDIC = str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")
PRIME_HEADER = ("#Paraver (25/10/2018 at 14:04):1871482775_ns:4(13,1,1,1):1:16(1:1,1:1,1:1,1:1,1:1,1:1,1:1,1:1,"
                "1:1,1:1,1:1,1:1,1:1,1:2,1:3,1:4),17")


@pytest.mark.parametrize(("old", "new"), [
    ("1871482775_ns", "1_871_482_775_ns"),  # was read as 1 us, with "_871_482_775_ns" as its unit
    ("1871482775_ns", "1871482775".translate(ARABIC_INDIC) + "_ns"),
    ("4(13,1,1,1)", "4(13,1,1,1)".translate(ARABIC_INDIC)),
    ("4(13,1,1,1)", "4(1_3,1,1,1)"),
    ("4(13,1,1,1)", "4(+13,1,1,1)"),
    (":1:16(", ":" + "1".translate(ARABIC_INDIC) + ":16("),
    (":1:16(", ":1:1\u0666("),
    ("1:2,1:3", "1:\u0662,1:3"),
    ("1:2,1:3", "1:2,1_0:3"),
    ("),17", ")," + "17".translate(ARABIC_INDIC)),
])
def test_paraver_header_numbers_are_ascii_digits_only(old, new):
    """Session 6 item 3: Python's int() and \\d take Unicode digits, '+' and '_' grouping; Paraver's stream does not.
    Each such header number is refused (the first as the unit is no unit: digits after its underscore)."""
    from synthtrace.tracelib.errors import TraceFormatError
    from synthtrace.tracelib.formats.paraver.header import parse_header

    assert parse_header(PRIME_HEADER).duration_ns == 1871482775
    with pytest.raises(TraceFormatError, match="broken Paraver header"):
        parse_header(PRIME_HEADER.replace(old, new, 1))


@pytest.mark.parametrize("defect", hostile_otf2.DEFECTS)
def test_otf2_semantic_defects_are_refused_or_read(tmp_path, run_cli, defect):
    """Timestamps >= 2^63 ticks gave an OverflowError; NaN/inf metrics were stored as INT64_MIN and a send to a
    rank outside the world as peer INT32_MIN, silently. Each is now one error line (as the Paraver reader refuses
    the same); a valid archive on a clock offset beyond 2^63 (a TSC after long uptime) is read."""
    anchor = hostile_otf2.write(tmp_path / "archive", defect)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", anchor, "-w", wh)
    if defect in hostile_otf2.REFUSED:
        assert code == 2 and len(err.strip().splitlines()) == 1 and str(anchor) in err, err
        assert not wh.exists()  # item 13: a refused ingest leaves no empty warehouse behind
        return
    assert code == 0, err
    code, out, err = run_cli("sql", "SELECT task, peer, bytes_sent FROM mpi_calls WHERE peer IS NOT NULL "
                             "ORDER BY task", "-w", wh, "-f", "csv")
    assert out.splitlines()[1:] == ["1,2,64", "2,1,0"]
    if defect == "key_metric":  # item 7: renamed, with a warning, no Polars DuplicateError
        cols = pl.read_parquet(next(wh.glob("runs/*/bursts/*.parquet"))).columns
        assert cols.count("task") == 1 and any(c.startswith("task_metric") for c in cols), cols


# ------------------------------------------------------------------------ item 7: counters named like keys
def test_pcf_counter_named_like_a_key_column_is_renamed(tmp_path, run_cli):
    """A .pcf labelling PAPI_TOT_INS `task` (or `START_NS`: DuckDB's names ignore case) gave a DuplicateError; a
    private name (`_hidden`) a SchemaError."""
    prv = copy_trace(PRIME, tmp_path / "t")
    pcf = prv.with_suffix(".pcf")
    text = pcf.read_text()
    pcf.write_text(text.replace("42000050 PAPI_TOT_INS [Instr completed]", "42000050 task [Instr completed]")
                   .replace("42000059 PAPI_TOT_CYC [Total cycles]", "42000059 START_NS [Total cycles]")
                   .replace("42000055 PAPI_BR_INS [Branches]", "42000055 _hidden [Branches]"))
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0, err
    assert "task_42000050" in err and "START_NS_42000059" in err and "'hidden_42000055'" in err
    code, out, err = run_cli("sql", "SELECT count(*) AS n, sum(task_42000050) > 0 AS counted FROM bursts",
                             "-w", tmp_path / "wh", "-f", "csv")
    assert code == 0 and out.splitlines()[1].endswith(",true"), (out, err)


# ------------------------------------------------------------------ item 9: distinct names, distinct files
def test_distinct_experiment_and_app_names_keep_distinct_files(tmp_path):
    """Predictions of experiments `solver a` and `solver_a` shared one file (822 rows gone); alerts likewise."""
    from synthtrace.warehouse.alert_store import read_alerts, write_alerts
    from synthtrace.warehouse.model_store import PREDICTION_SCHEMA, write_predictions

    wh = Warehouse(tmp_path / "wh")
    names = ["solver a", "solver_a", "solver/a", "..", "_", "x" * 300]
    for k, name in enumerate(names):
        frame = pl.DataFrame({c: [None] * (k + 1) for c in PREDICTION_SCHEMA}, schema=PREDICTION_SCHEMA)
        write_predictions(wh, "m1", name, frame.with_columns(pl.lit(name).alias("experiment")))
        write_alerts(wh, name, pl.DataFrame({"app": [name] * (k + 1), "metric": ["time"] * (k + 1)}))
    stored = pl.read_parquet(wh.root / "predictions" / "m1" / "*.parquet")
    assert stored.group_by("experiment").len().sort("experiment").rows() == \
        sorted((name, k + 1) for k, name in enumerate(names))
    for k, name in enumerate(names):
        assert read_alerts(wh, name).height == k + 1
    assert read_alerts(wh).height == sum(range(1, len(names) + 1))


# --------------------------------------------------------------------------------- item 10: quarantine
def test_quarantine_takes_a_compressed_trace_whole_and_long_names(tmp_path):
    """A broken .prv.gz went without its .pcf/.row (`with_suffix`); a 236-character name never went at all
    (File name too long), failing every night."""
    import gzip

    from synthtrace.warehouse.drop import QUARANTINE, quarantine

    drop = tmp_path / "drop"
    prv = copy_trace(PRIME, drop, "broken.run1")
    gz = prv.with_name("broken.run1.prv.gz")
    gz.write_bytes(gzip.compress(b"#Paraver (garbage"))
    prv.unlink()
    dest = quarantine(drop, gz, "broken")
    assert sorted(p.name for p in dest.iterdir()) == ["broken.run1.pcf", "broken.run1.prv.gz", "broken.run1.row",
                                                      "reason.txt"]
    long = copy_trace(PRIME, drop, "n" * 232)  # 236 characters with .prv
    dest = quarantine(drop, long, "broken")
    assert dest.parent == drop / QUARANTINE
    assert {p.name for p in dest.iterdir()} == {long.name, long.with_suffix(".pcf").name,
                                               long.with_suffix(".row").name, "reason.txt"}
    assert not list(drop.glob("*.prv")) and not list(drop.glob("*.prv.gz"))


# ----------------------------------------------------------------------------------- item 12: full disk
def _full_disk() -> None:
    """In the child: files stop growing at 16 KB (EFBIG, as ENOSPC for the writer), and no SIGXFSZ."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 14, 1 << 14))


@pytest.fixture(scope="module")
def lulesh_wh(tmp_path_factory) -> Path:
    from synthtrace.pipelines.cli import main

    root = tmp_path_factory.mktemp("full-disk")
    drop = root / "drop"
    copy_trace(LULESH_A, drop)
    copy_trace(LULESH_B, drop)
    assert main(["ingest", str(drop), "-w", str(root / "wh"), "--experiment", "lulesh"]) == 0
    return root / "wh"


@pytest.mark.parametrize("command", [["merge", "lulesh"], ["archetypes"]])
def test_full_disk_in_merge_and_archetypes_is_one_line(lulesh_wh, tmp_path, command):
    """`merge` and `archetypes` ended with a Polars ComputeError traceback when the disk filled (ingest mapped it)."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(lulesh_wh, wh)
    def stored() -> dict[str, str]:  # what the warehouse holds (a writer's lock file aside)
        return {k: v for k, v in tree_digest(wh).items() if not k.startswith(".locks/")}

    before = stored()
    proc = subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", *command, "-w", str(wh)],
                          preexec_fn=_full_disk, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"error: {wh}/experiments/lulesh: File too large"], proc.stderr
    assert stored() == before


def _fill_the_disk(path: Path) -> None:
    path.write_bytes(b"x")
    raise OSError(28, "No space left on device")  # as a write() that fills the disk raises it: naming no file


def test_a_full_disk_names_the_file_or_folder_being_written(tmp_path):
    """Session 6 item 3: `report` and `train` on a full disk said "[Errno 28] No space left on device" (a write()
    names no file): an output file and a warehouse folder being written are named; nothing is left behind."""
    from synthtrace.tracelib.atomic_file import write_atomically

    out = tmp_path / "report.html"
    with pytest.raises(OSError) as raised:
        write_atomically(out, _fill_the_disk)
    assert raised.value.filename == str(out) and raised.value.errno == 28
    wh = Warehouse(tmp_path / "wh").ensure()
    model = wh.root / "models" / "ipc-hgb-1"
    with pytest.raises(OSError) as raised, wh.staged(model) as stage:
        _fill_the_disk(stage / "model.skops")
    assert raised.value.filename == str(model) and raised.value.errno == 28
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"] and not any(wh.staging_dir.iterdir())


def test_a_parquet_write_cut_by_a_full_disk_without_an_errno_is_the_full_disk(tmp_path, monkeypatch):
    """Attack 6 F12: with ~20 kB free, Polars' Parquet writer failed with "Invalid thrift: transport error" (no
    "os error 28"), and `merge` ended with that ComputeError's traceback. A library's failure while the file system
    is full (free space below FULL_FILE_SYSTEM_BYTES) is the full disk, naming the folder being written."""
    from synthtrace.warehouse import layout

    wh = Warehouse(tmp_path / "wh").ensure()
    target = wh.experiments_dir / "pr"

    def stage_fails() -> None:
        with wh.staged(target) as stage:
            (stage / "x").write_bytes(b"x")
            raise pl.exceptions.ComputeError("parquet: File out of specification: Invalid thrift: transport error")

    with pytest.raises(pl.exceptions.ComputeError):  # a disk with room: the library's error as it is
        stage_fails()
    monkeypatch.setattr(layout, "FULL_FILE_SYSTEM_BYTES", 1 << 62)  # every file system is "full"
    with pytest.raises(OSError) as raised:
        stage_fails()
    assert (raised.value.errno, raised.value.filename) == (28, str(target))
    assert not target.exists() and not any(wh.staging_dir.iterdir())


def test_a_detection_that_fails_to_store_changes_no_application_s_alerts(tmp_path):
    """Attack 6 F12: `detect` on a full disk failed at its third application's file after replacing the first
    two. The alerts of every application are replaced in one swap: a failure keeps them all as they were."""
    from synthtrace.warehouse.alert_store import read_alerts, write_alerts, write_all_alerts

    wh = Warehouse(tmp_path / "wh").ensure()
    for app in ("a", "b"):
        write_alerts(wh, app, pl.DataFrame({"app": [app], "metric": ["time"]}))
    before = tree_digest(wh.root / "regressions")
    unwritable = pl.DataFrame({"app": ["b"]}).with_columns(pl.Series("o", [object()], dtype=pl.Object))
    with pytest.raises(pl.exceptions.ComputeError):
        write_all_alerts(wh, {"a": pl.DataFrame({"app": ["a"] * 2, "metric": ["time", "ipc"]}), "b": unwritable})
    assert tree_digest(wh.root / "regressions") == before and read_alerts(wh).height == 2


# ----------------------------------------------------------------------------- item 13: refusals leave nothing
def test_a_refused_ingest_creates_no_warehouse(tmp_path, run_cli):
    prv = _with_header(tmp_path / "t", b"4(13,1,1,1)", b"4(13,-1,1,1)")
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 2 and not (tmp_path / "wh").exists(), err
    (tmp_path / "kept").mkdir()  # a folder that was there stays
    code, _, err = run_cli("ingest", prv, "-w", tmp_path / "kept")
    assert code == 2 and (tmp_path / "kept").is_dir()
    good = copy_trace(PRIME, tmp_path / "good")  # one trace refused, one stored: the warehouse stays whole
    code, _, err = run_cli("ingest", prv, good, "-w", tmp_path / "wh")
    assert code == 2 and {p.name for p in (tmp_path / "wh").iterdir()} >= {"runs", "experiments", ".staging"}


def test_a_tampered_model_with_an_object_array_is_the_integrity_error(tmp_path):
    """An artifact whose hash was forged along with it, holding an object-dtype .npy (what np.load would unpickle),
    gave skops' ValueError traceback."""
    import skops.io as sio
    from sklearn.linear_model import LinearRegression

    from synthtrace.models.registry import load
    from synthtrace.warehouse.model_store import MODEL_SCHEMA, ArtifactIntegrityError, write_model

    good = sio.dumps(LinearRegression().fit([[0.0], [1.0]], [0.0, 1.0]))
    src, out = zipfile.ZipFile(io.BytesIO(good)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        npy = next(n for n in src.namelist() if n.endswith(".npy"))
        for name in src.namelist():
            data = src.read(name)
            if name == npy:
                buf = io.BytesIO()
                np.save(buf, np.array([1, "x"], dtype=object), allow_pickle=True)
                data = buf.getvalue()
            dst.writestr(name, data)
    record = {c: None for c in MODEL_SCHEMA if c not in ("artifact", "artifact_sha256")}
    record |= {"model_id": "tampered", "target": "ipc", "created_at": datetime.now(UTC), "status": "ok"}
    wh = Warehouse(tmp_path / "wh")
    write_model(wh, record, out.getvalue())
    with pytest.raises(ArtifactIntegrityError, match="cannot be loaded"):
        load(wh, "tampered")


@pytest.mark.parametrize(("latency", "bandwidth"), [(float("nan"), 12.5), (1.5, float("nan")), (1.5, float("inf")),
                                                    (float("inf"), 12.5), (1e308, 12.5), (1.5, 1e-308), (1.5, 0.0),
                                                    (-1.0, 12.5)])
def test_a_what_if_network_with_a_figure_that_is_no_number_is_refused(latency, bandwidth):
    """Attack 6 F20: `pop --network nan:inf` printed a what-if of NaN latency and infinite bandwidth as figures (NaN
    passes `latency >= 0`); attack 7 A23: 1e308 us or 1e-308 GB/s overflowed the replay's int64 ns times and printed
    a negative runtime. A network's figures lie in a range a replay can compute with."""
    from synthtrace.tracelib.domain.replay import Network
    from synthtrace.tracelib.errors import BadInputError

    with pytest.raises(BadInputError, match=r"latency must be 0 to 1e\+06 us and bandwidth 1e-06 to 1e\+06 GB/s"):
        Network.of(latency, bandwidth)


# ----------------------------------------------------------------------------- attack 19 F1: paths not UTF-8
def test_a_trace_under_a_folder_whose_name_is_not_utf8_is_stored_with_the_byte_escaped(tmp_path, run_cli,
                                                                                       monkeypatch):
    """Attack 19 F1: a trace whose file name is UTF-8 under a folder named in Latin-1 (a cluster's folder; or the
    working directory) ended in a UnicodeEncodeError traceback writing the run's row (its ``source_path``: Parquet
    text is UTF-8) and stored nothing. It is ingested now, ``source_path`` holding the byte as ``\\xff``; the same
    trace again is found ingested (the index of runs without a .pcf hashed the path's text too)."""
    import os

    folder = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    copy_trace(PRIME, folder)
    for _ in range(2):
        code, out, err = run_cli("ingest", folder, "-w", tmp_path / "wh")
        assert code == 0 and "Traceback" not in err, err
    assert "already ingested" in out, out
    monkeypatch.chdir(folder)  # the trace named from a working directory not UTF-8, into another warehouse
    code, _, err = run_cli("ingest", next(folder.glob("*.prv")).name, "-w", tmp_path / "wh2")
    assert code == 0, err
    for wh in ("wh", "wh2"):
        code, out, err = run_cli("sql", "SELECT source_path FROM runs", "-w", tmp_path / wh, "-f", "csv")
        assert code == 0 and out.splitlines()[1] == f'"{tmp_path}/caf\\xe9/{next(folder.glob("*.prv")).name}"', out


def test_a_warehouse_whose_path_is_not_utf8_is_refused_in_one_line(tmp_path, run_cli):
    """Attack 19 F1: ``ingest -w $'wh\\xff'`` ended in a 40-line traceback from Polars' Parquet writer (``TypeError:
    Object does not have a .write() method``), which cannot open such a path. One line now, naming the byte and the
    folder (as ``ls -b`` shows it); nothing is made."""
    import os

    wh = Path(os.fsdecode(bytes(tmp_path) + b"/wh\xff"))
    code, out, err = run_cli("ingest", copy_trace(PRIME, tmp_path / "t"), "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and not out, err
    assert lines[0].startswith(f"error: {tmp_path}/wh\\xff: the warehouse's path holds a byte that is not UTF-8 "
                               "(0xFF)"), lines
    assert not wh.exists()


def test_a_warehouse_renamed_to_a_path_that_is_not_utf8_is_refused_by_every_writer(tmp_path, run_cli):
    """Review of attack 19 F1's fix: only ingest checked the warehouse's path, so a warehouse renamed to such a
    path after it was made still gave Polars' TypeError traceback on every command (its readers cannot open it
    either). One line, naming the byte, nothing changed."""
    import os

    made = tmp_path / "wh"
    assert run_cli("ingest", copy_trace(PRIME, tmp_path / "t"), "-w", made)[0] == 0
    wh = Path(os.fsdecode(bytes(tmp_path) + b"/wh\xff"))
    made.rename(wh)
    before = tree_digest(wh)
    code, out, err = run_cli("archetypes", "t", "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "the warehouse's path holds a byte that is not UTF-8 (0xFF)" in lines[0], lines
    assert tree_digest(wh) == before
