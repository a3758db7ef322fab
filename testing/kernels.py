"""Fill Numba's on-disk cache before a parallel test run, so that the kernels are compiled once, not once per process.

On a fresh checkout every process that reads or merges a trace compiles the kernels it calls (~100 s of CPU for
the Paraver reader, the OTF2 reader and the aligner together) until one of them has written the cache; a test run
starts two workers and dozens of CLI processes at once, which all compile the same kernels side by side. With the
cache filled first they load it instead (a few seconds). A warm cache costs one ingest and one merge of the small
real traces.

``python -m testing.kernels paraver|otf2 WORKDIR`` runs one job; :func:`warm_kernel_cache` runs both side by side.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from testing.traces import LULESH_A, LULESH_B, ROOT, TRACES

OTF2_PAIR = [TRACES / "otf2" / name / "traces.otf2" for name in ("ping-pong-otf2", "ping-pong-otf2-papi")]
#: the CLI calls of each job: (reader and aligner kernels of) a Paraver pair, and an OTF2 pair
JOBS = {
    "paraver": [["ingest", str(LULESH_A), str(LULESH_B), "--experiment", "warm"], ["merge", "warm"]],
    "otf2": [["ingest", *map(str, OTF2_PAIR), "--experiment", "warm"], ["merge", "warm", "--allow-timing-only"]],
}


def run_job(name: str, workdir: Path) -> None:
    """Run one job's CLI calls on a warehouse in ``workdir``."""
    from synthtrace.pipelines.cli import main

    for args in JOBS[name]:
        main([*args, "--warehouse", str(workdir / "wh")])


def warm_kernel_cache(timeout_s: float = 900) -> None:
    """Run the jobs side by side, each in a process of its own; a job that fails (no real traces here, say) only
    leaves its kernels to be compiled by the tests that need them."""
    with tempfile.TemporaryDirectory(prefix="synthtrace-warm-") as tmp:
        procs = []
        for name in JOBS:
            workdir = Path(tmp) / name
            workdir.mkdir()
            procs.append(subprocess.Popen([sys.executable, "-m", "testing.kernels", name, str(workdir)], cwd=ROOT,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for proc in procs:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    run_job(sys.argv[1], Path(sys.argv[2]))
