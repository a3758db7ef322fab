"""Shared fixtures: the real traces in ../shared/traces, copies to break, and the CLI run in-process."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from testing.traces import LULESH_A, LULESH_B, PARAVER, TRACES, copy_trace

# Prefect must never write to the user's home, phone home, or chat on the console during tests.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="synthtrace-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs):
    """Before the pytest-xdist workers start: compile the Numba kernels once into their on-disk cache, which the
    workers and the CLI processes the tests start then load (testing/kernels.py)."""
    from testing.kernels import warm_kernel_cache

    warm_kernel_cache()


def pytest_collection_modifyitems(config, items):
    # the slow tests first, so that the workers (pytest-xdist) do not end on one long test while the other idles
    items.sort(key=lambda item: "slow" not in item.keywords)
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
    """One temporary Prefect backend for every flow test of the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


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
