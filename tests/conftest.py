"""Shared fixtures: the real traces in ../shared/traces, copies to break, and the CLI run in-process."""
from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import tempfile

import pytest

# Prefect must never write to the user's home, phone home, or chat on the console during tests.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="synthtrace-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("SYNTHTRACE_TRACES", ROOT.parent / "shared" / "traces"))
PARAVER = TRACES / "paraver"
LULESH_A = PARAVER / "lulesh_4+4_with_uncores_sockets1+2.chop_5it.prv"
LULESH_B = PARAVER / "lulesh_7+1_with_uncores_sockets1+2.chop8.prv"
PRIME = PARAVER / "prime_v0.prv"
JACOBI = PARAVER / "jacobi-2d-imper_v0.prv"
ALL_PARAVER = [LULESH_A, LULESH_B, PRIME, JACOBI]


def pytest_collection_modifyitems(config, items):
    # the slow tests first, so that the workers (pytest-xdist) do not end on one long test while the other idles
    items.sort(key=lambda item: "slow" not in item.keywords)
    if not PARAVER.is_dir():
        skip = pytest.mark.skip(reason=f"real traces not found at {TRACES}")
        for item in items:
            if "real_traces" in item.keywords:
                item.add_marker(skip)


def copy_trace(prv: Path, dest: Path, stem: str | None = None) -> Path:
    """Copy a .prv with its .pcf/.row into ``dest`` (optionally renamed); returns the new .prv path."""
    dest.mkdir(parents=True, exist_ok=True)
    stem = stem or prv.stem
    for suffix in (".prv", ".pcf", ".row"):
        src = prv.with_suffix(suffix)
        if src.exists():
            shutil.copyfile(src, dest / f"{stem}{suffix}")
    return dest / f"{stem}.prv"


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a hash of its bytes (to prove a warehouse is unchanged)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


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
