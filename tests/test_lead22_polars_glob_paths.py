"""Polars reads a file path as a glob pattern unless told otherwise (``glob=True`` is its default, and
``read_parquet_schema`` always globs): under a warehouse whose path holds ``[``, ``*`` or ``?`` (b1fix22 fixed
DuckDB's side, attack 21 F6; attack 22 F2), a fresh ``ingest`` into ``x[2]`` stored the run but said "already
ingested", and ``merge``, ``pop`` and ``runs rm`` called a sound file damaged (advising to remove the run); a merge
in ``x*`` or ``x?`` read a sibling warehouse's runs too (every burst twice). Every stored file is read as itself."""
from __future__ import annotations

import json
import shutil

import pytest

from testing.traces import LULESH_A, LULESH_B, copy_trace

pytestmark = pytest.mark.real_traces


def _count(run_cli, wh, query: str) -> int:
    code, out, err = run_cli("sql", query, "-w", wh, "--format", "json")
    assert code == 0, err
    return next(iter(json.loads(out)[0].values()))


@pytest.fixture(scope="module")
def lulesh(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traces") / "lulesh"
    for i, prv in enumerate((LULESH_A, LULESH_B)):
        copy_trace(prv, folder, f"lulesh.run{i}")
    return folder


def test_a_fresh_ingest_under_a_bracket_is_stored_and_said(tmp_path, run_cli, lulesh):
    wh = tmp_path / "x[2]"
    (tmp_path / "x2").mkdir()  # what the pattern would match
    code, out, err = run_cli("ingest", lulesh, "-w", wh, "--experiment", "lulesh")
    assert code == 0, err
    assert out.count(": ingested as ") == 2 and "already ingested" not in out, out
    assert _count(run_cli, wh, "SELECT count(*) AS n FROM runs") == 2


@pytest.mark.parametrize(("name", "sibling"), [("x[2]", "x2"), ("x*", "xA"), ("x?", "xB")])
def test_a_merge_under_a_glob_character_reads_its_own_runs_only(tmp_path, run_cli, lulesh, name, sibling):
    plain = tmp_path / "plain"
    code, _, err = run_cli("ingest", lulesh, "-w", plain, "--experiment", "lulesh")
    assert code == 0, err
    shutil.copytree(plain, tmp_path / name)
    shutil.copytree(plain, tmp_path / sibling)  # another warehouse the pattern matches, the same runs
    for wh in (plain, tmp_path / name):
        code, _, err = run_cli("merge", "lulesh", "-w", wh)
        assert code == 0, err
    merged = "SELECT count(*) AS n FROM merged_bursts"
    assert _count(run_cli, tmp_path / name, merged) == _count(run_cli, plain, merged) > 0
    code, _, err = run_cli("pop", "-w", tmp_path / name)
    assert code == 0, err
