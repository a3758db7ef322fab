"""A run's manifest (``checksums.json``) edited by hand or damaged (issue 23, attack 9 C8): a run whose manifest
does not list its record is left out of every view and named with its remedy, and a manifest not of a manifest's
shape is one line saying what is wrong with it and under which key, never Python's own words. Cases on the two
LULESH runs (the session's ``merged_lulesh``), copied per case."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

RUN_A, RUN_B = "d12d9ce89c673a43", "113698729df2a852"  # 2,140 and 848 bursts


def _copy(merged_lulesh: Path, tmp_path: Path) -> Path:
    wh = tmp_path / "wh"
    shutil.copytree(merged_lulesh, wh, symlinks=True)
    return wh


def _csv_row(run_cli, wh: Path, query: str) -> list[str]:
    code, out, err = run_cli("sql", query, "-w", wh, "-f", "csv")
    assert code == 0, err
    return [cell.strip('"') for cell in out.splitlines()[1].split(",")]


def _edit(wh: Path, edit) -> Path:
    manifest = wh / "runs" / RUN_A / "checksums.json"
    doc = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(edit(doc)))
    return manifest


@pytest.mark.real_traces
@pytest.mark.parametrize("reader", ["linked", "read-by-path"])
def test_a_run_whose_manifest_does_not_list_its_record_is_in_no_view(merged_lulesh, tmp_path, run_cli, reader,
                                                                     monkeypatch):
    """Attack 9 C8 (a): with run.parquet dropped from a run's manifest, ``runs`` listed one run while ``bursts``
    and ``mpi_calls`` kept the other run's rows (bursts without their runs row). Such a run is an incomplete commit:
    no view reads it, ``runs`` names it with its remedy, and the remedy works. ``read-by-path``: as a reader who
    cannot write the warehouse's .staging binds the files (catalog.view_files)."""
    from synthtrace.warehouse import snapshot

    if reader == "read-by-path":
        monkeypatch.setattr(snapshot, "_links_folder", lambda *_: None)
    wh = _copy(merged_lulesh, tmp_path)
    _edit(wh, lambda d: {**d, "files": {k: v for k, v in d["files"].items() if k != "run.parquet"}})
    assert _csv_row(run_cli, wh, "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM bursts), "
                                 "(SELECT count(DISTINCT run_id) FROM mpi_calls), (SELECT count(DISTINCT run_id) "
                                 "FROM events)") == ["1", "848", "1", "1"]
    code, out, err = run_cli("runs", "-w", wh)
    said = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and RUN_B in out and RUN_A not in out, (out, err)
    assert len(said) == 1 and str(wh / "runs" / RUN_A) in said[0] and "does not list" in said[0], err
    assert f"synthtrace runs rm {RUN_A}" in said[0], said
    code, out, err = run_cli("runs", "rm", RUN_A, "-w", wh)
    assert code == 0 and f"removed run {RUN_A}" in out and not (wh / "runs" / RUN_A).exists(), (out, err)


@pytest.mark.real_traces
@pytest.mark.parametrize(("edit", "said"), [
    (lambda d: {**d, "files": []}, 'key "files": an array, not an object of file -> [digest, size'),
    (lambda d: {**d, "files": {**d["files"], "run.parquet": "x"}}, "key \"files\", file 'run.parquet': \"x\", not"),
    (lambda d: {**d, "files": {**d["files"], "run.parquet": ["x", 1]}},
     "key \"files\", file 'run.parquet': [\"x\", 1], not"),
    (lambda d: {}, 'key "algorithm": missing, not a string'),
    (lambda d: {"algorithm": d["algorithm"]}, 'key "files": missing, not an object'),
    (lambda d: {**d, "folder": 5}, 'key "folder": a number, not a string'),
    (lambda d: [d], "an array, not a JSON object"),
    ("folder", "it is a folder, not a file"),
    ("socket", "it is a socket, not a file"),  # was "a special file": named as the night lock names it (tidy16)
], ids=["files-list", "entry-string", "entry-short", "empty", "no-files", "folder-int", "array", "a-folder",
        "a-socket"])
def test_a_manifest_not_of_its_shape_is_one_line_naming_the_key(merged_lulesh, tmp_path, run_cli, edit, said,
                                                                monkeypatch):
    """Attack 9 C8 (b): a damaged manifest was said in Python's words ("'list' object has no attribute 'items'",
    "string index out of range", "[Errno 21] Is a directory: 9", "cannot be read: 'files'")."""
    import socket

    wh = _copy(merged_lulesh, tmp_path)
    if edit in ("folder", "socket"):
        manifest = wh / "runs" / RUN_A / "checksums.json"
        manifest.unlink()
        if edit == "folder":
            manifest.mkdir()
        else:  # bound by its relative name: a socket's path is at most 108 bytes
            monkeypatch.chdir(manifest.parent)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(manifest.name)
            monkeypatch.chdir(tmp_path)
    else:
        _edit(wh, edit)
    code, _, err = run_cli("sql", "SELECT count(*) FROM bursts", "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(wh / "runs" / RUN_A) in lines[0] and "checksums.json is damaged: " + said in lines[0], err
    assert f"synthtrace runs rm {RUN_A}" in lines[0], err
