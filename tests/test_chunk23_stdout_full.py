"""Attack 22 F4: a command whose standard output cannot be written (``> /dev/full``) after it stored its result said
only "standard output: cannot write it", exit 2, so a batch script under ``set -e`` ran the merge again; it says
what was stored, whole. A command's ``--help`` into it said "[Errno 28] No space left on device" (typer prints
the help itself): the one line of any other output that cannot be written."""
from __future__ import annotations

import pytest

from synthtrace.warehouse.model_store import merged_bursts_file
from testing.stored_runs import warehouse_with_runs
from tests.test_b1fix22_full_stdout import FULL, LINE, _into_full

pytestmark = [pytest.mark.real_traces, pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")]


def test_a_merge_stored_before_its_table_could_not_be_printed_says_it_is_stored(tmp_path):
    wh = warehouse_with_runs(tmp_path / "wh", 2)  # two runs of the real jacobi trace, experiment "wh-seed"
    p = _into_full("merge", "wh-seed", "-w", wh.root)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(LINE.rstrip("\n") + "; ") and "stored" in p.stderr and "whole" in p.stderr
    assert merged_bursts_file(wh.experiment_dir("wh-seed")) is not None  # the merge is there


@pytest.mark.parametrize("command", ["sql", "runs", "merge"])
def test_a_commands_help_into_a_full_standard_output_is_one_line(command):
    p = _into_full(command, "--help")
    assert (p.returncode, p.stderr) == (2, LINE)
