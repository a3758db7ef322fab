"""Shared fixtures: the real traces in ../shared/traces, copies to break, and the CLI run in-process."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from testing.traces import LULESH_A, LULESH_B, PARAVER, ROOT, TRACES, copy_trace

# The processes a test starts (CLI commands, nights, workers) import this checkout, as the tests themselves do
# (synthtrace/__init__.py), never an installed copy of it that may be older than the code under test.
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

# Prefect must never write to the user's home, phone home, or chat on the console during tests.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="synthtrace-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

# pytest-xdist runs one worker per core: an OpenMP pool per worker (scikit-learn's fits) of one thread per core
# oversubscribes the cores, and the pools' threads cost CPU waiting for each other (a quarter of the model tests'
# CPU on 2 cores: benchmarks/results/test_time.md). Each worker, and every process it starts, one OpenMP thread;
# a user's own setting wins.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs):
    """Before the pytest-xdist workers start: compile the Numba kernels once into their on-disk cache, which the
    workers and the CLI processes the tests start then load (testing/kernels.py)."""
    from testing.kernels import warm_kernel_cache

    warm_kernel_cache()


#: the files of the longest slow tests, longest first (minutes each on 2 cores: benchmarks/results/test_time.md)
LONGEST_FIRST = ("test_readme.py", "test_archetypes_sim.py", "test_demo.py", "test_crash_safety.py",
                 "test_serve_e2e.py", "test_nightly_flow.py", "test_fuzz_ingest.py", "test_night_server.py")


def _run_order(item: pytest.Item) -> tuple[bool, int]:
    """Slow tests first, the longest of them first; the rest keep their order."""
    name = item.path.name
    return "slow" not in item.keywords, LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    # pytest-xdist (--dist load) hands tests out in order as workers finish: with the longest tests at the head, the
    # run does not end on one long test while the other worker idles
    items.sort(key=_run_order)
    if not PARAVER.is_dir():
        skip = pytest.mark.skip(reason=f"real traces not found at {TRACES}")
        for item in items:
            if "real_traces" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def run_cli(capsys) -> Callable[..., tuple[int, str, str]]:
    """Run ``synthtrace ARGS`` in-process; returns (exit code, stdout, stderr)."""
    from synthtrace.pipelines.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect backend (a server process on 127.0.0.1, its database in a temp dir) per xdist worker
    for every flow test of the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def prefect_api(prefect_harness) -> str:
    """The API URL of that same server, for tests that run nights as processes: each night then skips the
    ephemeral server's start-up (testing/prefect_server.py), and the session starts one server, not two."""
    from prefect.settings import PREFECT_API_URL

    api = PREFECT_API_URL.value()
    assert api and api.startswith("http://127.0.0.1:"), api
    return api


@pytest.fixture(scope="session")
def big_lulesh(tmp_path_factory) -> Path:
    """The real LULESH 4+4 trace tiled in time to ~130 MB (2140 x 150 bursts), so that an ingest or a night takes
    a few seconds and can be killed half-way: ``DIR/exp/lulesh.big.prv``; shared by the tests of a session (tiled
    once per worker), so copy it before changing it."""
    from testing.paraver_tile import tile_trace

    return tile_trace(LULESH_A, tmp_path_factory.mktemp("big") / "exp" / "lulesh.big.prv", 150)


@pytest.fixture(scope="session")
def merged_lulesh(tmp_path_factory) -> Path:
    """The two LULESH runs ingested as experiment ``lulesh-8r`` and merged through the CLI; shared by the tests
    of a session, so copy it before changing it."""
    from synthtrace.pipelines.cli import main

    root = tmp_path_factory.mktemp("merged-lulesh")
    for prv in (LULESH_A, LULESH_B):
        copy_trace(prv, root / "lulesh")
    w = root / "wh"
    assert main(["ingest", str(root / "lulesh"), "--experiment", "lulesh-8r", "-w", str(w)]) == 0
    assert main(["merge", "lulesh-8r", "-w", str(w)]) == 0
    return w


@pytest.fixture
def detect_reads_any_history(monkeypatch) -> None:
    """``detect`` reads the history of an app of any number of nights (it reads none below the nights a detection
    needs: attack 11 E7), for the tests of what it does with the stored files it reads (one LULESH night)."""
    from types import SimpleNamespace

    from synthtrace.models import regression

    monkeypatch.setattr(regression, "DetectorParams", lambda: SimpleNamespace(min_before=1, min_after=0))
