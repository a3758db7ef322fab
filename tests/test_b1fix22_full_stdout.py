"""Attack 21 F9: a command whose standard output cannot be written (``> /dev/full``: a full disk or quota under a
redirection) says which output in one line, exit 2; it said "[Errno 28] No space left on device" (``--help``: a
traceback)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testing.stored_runs import warehouse_with_runs

FULL = Path("/dev/full")
LINE = "error: standard output: cannot write it (No space left on device)\n"

pytestmark = [pytest.mark.real_traces, pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    """A warehouse of one stored run of the real jacobi trace."""
    return warehouse_with_runs(tmp_path_factory.mktemp("one") / "wh", 1).root


def _into_full(*args: str | Path) -> subprocess.CompletedProcess:
    with FULL.open("w") as out:
        return subprocess.run([sys.executable, "-m", "synthtrace.pipelines.cli", *map(str, args)], stdout=out,
                              stderr=subprocess.PIPE, text=True, timeout=300)


@pytest.mark.parametrize("args", [
    ("sql", "SELECT * FROM bursts", "--format", "csv"),
    ("sql", "SELECT 1 AS one", "--format", "json"),
    ("sql", "SELECT * FROM bursts LIMIT 5"),
    ("runs",),
], ids=["sql-csv", "sql-json-one-row", "sql-table", "runs"])
def test_a_command_whose_standard_output_is_full_says_so_in_one_line(warehouse, args):
    p = _into_full(*args, "-w", warehouse)
    assert (p.returncode, p.stderr) == (2, LINE)


@pytest.mark.parametrize("args", [("--help",), ("--version",)])
def test_help_into_a_full_standard_output_is_one_line(args):
    p = _into_full(*args)
    assert (p.returncode, p.stderr) == (2, LINE)
