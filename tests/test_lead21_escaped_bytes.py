"""Attack 21 F8: a message naming a file under a folder whose name is not UTF-8 printed Python's surrogate escape
(``d\\udcff``) where the stored text (runs.source_path, warnings) says ``d\\xff``: one spelling of an undecodable byte
everywhere, so a user can match the message with what `sql` shows."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthtrace.tracelib.printable import escaped
from testing.traces import JACOBI, copy_trace


def test_an_undecodable_byte_is_escaped_as_the_stored_text_spells_it():
    assert escaped("nu" + os.fsdecode(b"\xff") + "\nx") == "nu\\xff\\nx"
    assert escaped("a\x1bb\u2028") == "a\\x1bb\\u2028"  # other non-printables as before


@pytest.mark.real_traces
def test_the_cli_names_a_folder_not_utf8_as_the_runs_table_stores_it(tmp_path, run_cli):
    folder = os.fsdecode(os.fsencode(tmp_path) + b"/d\xff")
    os.mkdir(folder)
    trace = copy_trace(JACOBI, Path(folder))
    trace.with_suffix(".pcf").unlink()  # the reader warns, naming the file
    code, out, err = run_cli("ingest", trace, "-w", tmp_path / "wh")
    assert code == 0, err
    assert "/d\\xff/jacobi-2d-imper_v0.prv" in err, err
    assert "\\udcff" not in err + out, (out, err)
