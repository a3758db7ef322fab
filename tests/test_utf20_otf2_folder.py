"""An OTF2 archive under a folder whose name is not UTF-8, named by an absolute path (attack 20 F2): refused as
"not a readable OTF2 archive (argument 1: UnicodeEncodeError ...)", the wheel passing the path to libotf2 as UTF-8
text, while the same archive named relative to a cwd inside that folder ingested. Now it ingests as from a UTF-8
folder."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.sql import query
from testing.traces import TRACES

PING_PONG = TRACES / "otf2" / "ping-pong-otf2"


def _copy(folder: Path) -> Path:
    shutil.copytree(PING_PONG, folder / "pp")
    return folder / "pp" / "traces.otf2"


@pytest.mark.real_traces
def test_an_otf2_archive_under_a_folder_not_utf8_ingests(tmp_path, run_cli):
    latin = Path(os.fsdecode(os.fsencode(tmp_path) + b"/src\xff"))
    counts = []
    for folder in (tmp_path / "plain", latin):
        wh = folder.parent / f"wh{len(counts)}"
        code, out, err = run_cli("ingest", _copy(folder).resolve(), "-w", wh)
        assert code == 0, err
        assert "not a readable OTF2 archive" not in err and "ingested as pp" in out, (out, err)
        counts.append(query(Warehouse(wh), "SELECT n_bursts, n_mpi_calls FROM runs").to_pylist())
    assert counts[0] == counts[1] and counts[0][0]["n_bursts"] > 0, counts
    assert not [fd for fd in os.listdir("/proc/self/fd")
                if os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(latin / "pp")], "a descriptor left open"
