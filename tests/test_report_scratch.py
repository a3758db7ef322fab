"""`report`'s analysis of an experiment not analysed yet keeps its part files in the warehouse's scratch
(``.staging``, as archetypes and merge do), not in ``$TMPDIR``: a report killed while it analyses (fault-injected:
SIGKILL right after its first part file is written) leaves nothing in ``$TMPDIR``, and the next report clears what
it left in the warehouse. A warehouse the report cannot write keeps them in a locked folder of ``$TMPDIR``, which
the next report clears after a kill (issue 23; attack 9: a kill -9 left $TMPDIR/synthtrace-analysis-* for good)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testing.traces import PRIME

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
_REPORT = """
import os, signal, sys
from pathlib import Path
from synthtrace.pipelines import cli
from synthtrace.warehouse import analysis_store

fault, ro, wh, out = sys.argv[1:5]
if ro == "ro":
    from testing.read_only import read_only
    read_only(Path(wh), setattr)
if fault == "kill":
    add = analysis_store.AnalysisParts.add

    def add_then_die(self, name, df):
        i = add(self, name, df)
        os.kill(os.getpid(), signal.SIGKILL)  # killed mid-report, its first part file written

    analysis_store.AnalysisParts.add = add_then_die
sys.exit(cli.main(["report", "-w", wh, "-o", out]))
"""


@pytest.fixture(scope="module")
def unanalysed(tmp_path_factory) -> Path:
    """A warehouse holding one run (the prime trace) whose experiment was never analysed."""
    from synthtrace.pipelines.cli import main

    wh = tmp_path_factory.mktemp("report") / "wh"
    assert main(["ingest", str(PRIME), "-w", str(wh), "--experiment", "prime"]) == 0
    return wh


def _report(fault: str, ro: str, wh: Path, out: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", _REPORT, fault, ro, str(wh), str(out)], capture_output=True,
                          text=True, timeout=600, env=env, check=False)


def _staging(wh: Path) -> list[str]:
    return sorted(p.name for p in (wh / ".staging").iterdir()) if (wh / ".staging").is_dir() else []


@pytest.mark.parametrize("ro", ["rw", "ro"])
def test_a_killed_report_leaves_nothing_the_next_one_does_not_clear(unanalysed, tmp_path, ro):
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(unanalysed, wh)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    killed = _report("kill", ro, wh, tmp_path / "r.html", tmp)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (tmp_path / "r.html").exists()
    if ro == "rw":  # the parts were in the warehouse's scratch, never in $TMPDIR
        assert os.listdir(tmp) == [] and any(n.startswith("report-") for n in _staging(wh)), _staging(wh)
    else:  # a warehouse it cannot write: a locked folder of $TMPDIR, the warehouse untouched
        assert [n.startswith("synthtrace-report.") for n in os.listdir(tmp)] == [True], os.listdir(tmp)
        assert _staging(wh) == []
    done = _report("none", ro, wh, tmp_path / "r.html", tmp)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.html").stat().st_size > 0
    assert os.listdir(tmp) == [] and _staging(wh) == []  # what the kill left is cleared
