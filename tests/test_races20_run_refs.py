"""`synthtrace runs rm REF` where REF is both one run's name and the prefix of another run's id (attack 20 F14)."""
from __future__ import annotations

import shutil

import pytest

from synthtrace.warehouse import Warehouse
from testing.traces import LULESH_A, PRIME, copy_trace, tree_digest

pytestmark = pytest.mark.real_traces


def _runs(wh) -> dict[str, dict]:
    from synthtrace.warehouse.sql import query

    rows = query(Warehouse(wh), "SELECT run_id, run_name FROM runs").to_pylist()
    return {r["run_name"]: r for r in rows}


def test_a_name_that_is_another_runs_id_prefix_is_refused_as_ambiguous(tmp_path, merged_lulesh, run_cli):
    """Attack 20 F14: a run NAMED ``d46a`` and another run whose id starts with ``d46a``: ``runs rm d46a`` removed
    the named run without a word, though the user may have typed the other run's id prefix (as ``runs`` shows ids).
    It is refused as ambiguous, naming both runs, and nothing changes. Fails on the old code (rc 0, run removed)."""
    wh = shutil.copytree(merged_lulesh, tmp_path / "wh")
    a = _runs(wh)[LULESH_A.stem]["run_id"]
    ref = a[:6]
    copy_trace(PRIME, tmp_path / "other", stem=ref)  # a run named as the prefix of run a's id
    assert run_cli("ingest", tmp_path / "other", "--experiment", "other", "-w", wh)[0] == 0
    named = _runs(wh)[ref]["run_id"]
    assert not named.startswith(ref)
    before = tree_digest(wh)
    code, out, err = run_cli("runs", "rm", ref, "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "ambiguous" in lines[0], (out, err)
    assert a in lines[0] and named in lines[0]
    assert tree_digest(wh) == before
    code, out, err = run_cli("runs", "rm", named, "-w", wh)  # its whole id still names it
    assert code == 0 and f"removed run {named}" in out, err
