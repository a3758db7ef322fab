"""A command under an address-space limit below what it needs (attack 18 F4, attack 20 F9): ``prlimit --as=640000000``
(``ulimit -v`` on a login node) made a command die in Polars' or Arrow's allocator (exit 134, no line) or crash at
exit after its out-of-memory line. Such a limit is refused in one line before those libraries load; what fits runs."""
from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from synthtrace.pipelines.address_space import COMMAND_FLOORS_MB, MB

PRIME = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "paraver" / "prime_v0.prv"
CLI = "import sys; from synthtrace.pipelines.cli import main; sys.exit(main(sys.argv[1:]))"


def _run(args: list[str], limit: int) -> subprocess.CompletedProcess:
    """``synthtrace args`` in a fresh interpreter under an address-space limit of ``limit`` bytes."""
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)), check=False)


@pytest.mark.real_traces
def test_an_ingest_below_its_floor_is_refused_in_one_line_and_writes_nothing(tmp_path):
    w = tmp_path / "wh"
    p = _run(["ingest", str(PRIME), "-w", str(w)], 640 * MB)
    floor = COMMAND_FLOORS_MB["ingest"]
    assert p.returncode == 1, p.stderr[-2000:]
    assert p.stderr == (f"error: address-space limit 640 MB (ulimit -v) is below the {floor} MB synthtrace's ingest "
                        f"needs; raise it with ulimit -v {-(-floor * MB // 1024)} (KiB) or more\n")
    assert not w.exists() and p.stdout == ""


@pytest.mark.real_traces
def test_an_ingest_above_its_floor_runs(tmp_path):
    w = tmp_path / "wh"
    p = _run(["ingest", str(PRIME), "-w", str(w)], 1024 * MB)
    assert p.returncode == 0 and "error" not in p.stderr, p.stderr[-2000:]
    assert "ingested as prime_v0" in p.stdout and (w / "runs").is_dir()


def test_help_and_version_that_fit_a_small_limit_still_answer():
    """--version, --help and the help of the commands read without their module fit in 200 MB; a command's help
    that needs its module (merge: Polars, Numba, Arrow) is refused there in one line, not a traceback."""
    for args in (["--version"], ["--help"], ["ingest", "--help"]):
        p = _run(args, 200 * MB)
        assert p.returncode == 0 and p.stderr == "", (args, p.stderr[-2000:])
    p = _run(["merge", "--help"], 200 * MB)
    assert p.returncode == 1 and p.stderr.startswith("error: address-space limit 200 MB (ulimit -v) is below the ")
    assert p.stderr.count("\n") == 1 and "merge --help needs" in p.stderr
