"""A trace named with a bare extension, ``.x.prv`` (carried from session 17, tidy17b): its application is its stem
up to the first dot, and ``.x`` up to its first dot is blank; it was stored with a blank app. Leading dots are no
part of the program's name: its app is ``x``."""
from __future__ import annotations

import shutil

import pytest

from testing.traces import PRIME
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from synthtrace.tracelib.formats.paraver.writer import TraceMeta

pytestmark = pytest.mark.real_traces


def test_a_trace_named_dot_x_is_of_application_x(tmp_path, run_cli):
    folder = tmp_path / "bare"
    folder.mkdir()
    shutil.copy(PRIME, folder / ".x.prv")
    shutil.copy(PRIME.with_suffix(".pcf"), folder / ".x.pcf")
    code, _, err = run_cli("ingest", folder / ".x.prv", "-w", tmp_path / "wh")
    assert code == 0, err
    code, out, err = run_cli("sql", "select run_name, app from runs", "-w", tmp_path / "wh", "--format", "csv")
    assert code == 0 and out.splitlines() == ['"run_name","app"', '".x","x"'], (out, err)


def test_the_written_trace_of_dot_x_names_program_x(tmp_path):
    """Without a .pcf naming the binary, a trace's written copy names its program after the trace's stem."""
    shutil.copy(PRIME, tmp_path / ".x.prv")
    assert TraceMeta.from_trace(ParaverTrace(tmp_path / ".x.prv")).binary == "x"
