"""What `synthtrace ingest` loads before it reads (issue 27 item 2): only what reading and storing a trace need.

Numba's first kernel call imports its NumPy extensions, whose BLAS probe imports SciPy's linear algebra (0.2-0.6 s
of every ingest on the shared machine) and cffi; the kernels use neither. Each case runs in a fresh interpreter,
since what a process imported is the behaviour under test.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "paraver"

_PROBE = """
import json, sys
from synthtrace.pipelines.cli import main
code = main(["ingest", sys.argv[1], "-w", sys.argv[2]])
loaded = sorted(sys.modules)
import scipy.linalg  # a later user of SciPy in the same process still gets it whole
from scipy.optimize import linear_sum_assignment
print(json.dumps({"code": code, "modules": loaded, "blas": hasattr(scipy.linalg, "cython_blas"),
                  "lsa": linear_sum_assignment([[1, 0], [0, 1]])[1].tolist()}))
"""
#: what an ingest never needs: linear algebra, cffi, the learning and orchestration layers, the simulator
_NEVER = ("scipy.linalg", "scipy.optimize", "cffi", "sklearn", "prefect", "synthtrace.models", "synthtrace.simulator")


def test_ingest_loads_no_linear_algebra_and_scipy_works_after(tmp_path):
    p = subprocess.run([sys.executable, "-c", _PROBE, str(TRACES / "prime_v0.prv"), str(tmp_path / "wh")],
                       capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["code"] == 0, p.stderr
    assert [m for m in report["modules"] if m.startswith(_NEVER)] == []
    assert "synthtrace.tracelib.formats.paraver.tokenizer" in report["modules"]  # it did read with the kernels
    assert report["blas"] and report["lsa"] == [1, 0]


def test_a_process_that_loaded_scipy_first_reads_as_well(tmp_path):
    """SciPy's linear algebra already loaded (a night that merged before it ingests): nothing is held back, and
    the trace reads to the same tables."""
    code = """
import json, sys
import scipy.linalg
import synthtrace
bursts, calls = synthtrace.read_trace(sys.argv[1])
import numba.np.arraymath as arraymath
print(json.dumps({"bursts": bursts.height, "calls": calls.height, "blas": arraymath._HAVE_BLAS}))
"""
    p = subprocess.run([sys.executable, "-c", code, str(TRACES / "prime_v0.prv")], capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"bursts": 704, "calls": 672, "blas": True}



_FULL_COLLECTIONS = """
import gc, json, sys
import numpy, polars  # noqa: F401  (loaded before, as by any caller)
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.ingest import ingest_trace
result = ingest_trace(Warehouse(sys.argv[2]), sys.argv[1])
from synthtrace.tracelib.formats.paraver import reader
reader._warm_up_thread.join()  # its pause ends with it; on a loaded machine it may outlive the ingest
print(json.dumps({"bursts": result.n_bursts, "full": len(full), "enabled": gc.isenabled()}))
"""


def test_loading_numba_walks_the_process_objects_in_no_full_collection(tmp_path):
    """Importing Numba and loading the reader's kernels make ~85,000 long-lived objects; with Python's collector
    on, two full collections walked every object of the process meanwhile (~0.07 s of CPU of every command that
    reads a trace, serial). The collector is paused there, and on again after."""
    p = subprocess.run([sys.executable, "-c", _FULL_COLLECTIONS, str(TRACES / "prime_v0.prv"), str(tmp_path / "wh")],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"bursts": 704, "full": 0, "enabled": True}


_CLI_FULL_COLLECTIONS = """
import gc, json, sys
from synthtrace.pipelines.cli import main
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
code = main(["ingest", sys.argv[1], "-w", sys.argv[2]])
from synthtrace.tracelib.formats.paraver import reader
reader._warm_up_thread.join()  # its pause ends with it; on a loaded machine it may outlive the ingest
print(json.dumps({"code": code, "full": len(full), "enabled": gc.isenabled()}))
"""


def test_a_cli_ingest_walks_the_process_objects_in_no_full_collection(tmp_path):
    """``synthtrace ingest`` imports NumPy and Polars after the command line's own modules, and the first full
    collection due after Numba's import (paused) walked every object of the process: ~0.05 s of serial CPU. The
    modules' objects are frozen once Numba and the kernels are loaded (no collection walks them again)."""
    p = subprocess.run([sys.executable, "-c", _CLI_FULL_COLLECTIONS, str(TRACES / "prime_v0.prv"),
                        str(tmp_path / "wh")], capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"code": 0, "full": 0, "enabled": True}


def test_a_pause_of_the_collector_ends_with_the_last_and_leaves_it_as_the_caller_had_it():
    import gc
    import threading

    from synthtrace.tracelib.jit import gc_paused

    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with gc_paused():
        t.start()
        inside.wait(10)
    assert not gc.isenabled()  # the other thread's pause goes on
    release.set()
    t.join()
    assert gc.isenabled()
    gc.disable()  # a caller that runs without the collector keeps it off
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
