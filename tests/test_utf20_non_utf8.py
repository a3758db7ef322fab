"""Texts of a run whose folder's name is not UTF-8 (attack 20 F1, F3): a reader's warning naming the file raised
UnicodeEncodeError when the runs row was written (only ``source_path`` was escaped), and the escaping was not one to
one: a folder ``d`` + byte 0xFF and a folder literally named ``d\\xff`` stored the same ``source_path``."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthtrace.tracelib.printable import storable, utf8_bytes, utf8_text
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.traces import JACOBI, PRIME, copy_trace


def _folder(tmp_path, raw: bytes):
    folder = os.fsdecode(os.fsencode(tmp_path) + b"/" + raw)
    os.mkdir(folder)
    return folder


@pytest.mark.real_traces
def test_a_warning_quoting_a_folder_not_utf8_is_stored_escaped(tmp_path, run_cli):
    trace = copy_trace(JACOBI, Path(_folder(tmp_path, b"d\xff")))
    trace.with_suffix(".pcf").unlink()  # the reader warns, naming the file
    code, out, err = run_cli("ingest", trace, "-w", tmp_path / "wh")
    assert code == 0, err
    assert "Traceback" not in err and "ingested as jacobi-2d-imper_v0" in out, (out, err)
    row = query(Warehouse(tmp_path / "wh"), "SELECT source_path, warnings FROM runs").to_pylist()[0]
    assert row["source_path"].endswith("/d\\xff/jacobi-2d-imper_v0.prv"), row
    assert any("/d\\xff/jacobi-2d-imper_v0.prv" in w and "no .pcf file" in w for w in row["warnings"]), row


@pytest.mark.real_traces
def test_a_byte_and_its_escape_spelled_out_are_two_folders(tmp_path, run_cli):
    wh = tmp_path / "wh"
    byte = copy_trace(JACOBI, Path(_folder(tmp_path, b"d\xff")))
    spelled = copy_trace(PRIME, Path(_folder(tmp_path, b"d\\xff")))
    for trace in (byte, spelled):
        code, _, err = run_cli("ingest", trace, "-w", wh)
        assert code == 0, err
    stored = {r["run_name"]: r["source_path"]
              for r in query(Warehouse(wh), "SELECT run_name, source_path FROM runs").to_pylist()}
    assert os.path.dirname(stored["jacobi-2d-imper_v0"]) != os.path.dirname(stored["prime_v0"]), stored
    assert stored["jacobi-2d-imper_v0"].endswith("/d\\xff/jacobi-2d-imper_v0.prv"), stored
    assert stored["prime_v0"].endswith("/d\\\\xff/prime_v0.prv"), stored
    for trace, text in ((byte, stored["jacobi-2d-imper_v0"]), (spelled, stored["prime_v0"])):
        assert utf8_bytes(text) == os.fsencode(trace.resolve())


def test_a_utf8_path_without_a_backslash_is_stored_as_before():
    assert utf8_text("/data/café/run 1.prv".encode()) == "/data/café/run 1.prv"
    assert storable("plain café") == "plain café"
    assert storable("d\udcff/x") == "d\\xff/x"
