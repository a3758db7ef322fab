"""Attack 21 F6: DuckDB expands ``*``, ``?`` and ``[`` in a file's path as a pattern. A warehouse whose own path
holds one was read together with a sibling folder the pattern matched (``wh*`` read ``whA``'s runs too), or failed
every query when a sibling's name the pattern had to look at is not UTF-8. Each stored file is read as itself."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from testing.stored_runs import warehouse_with_runs

pytestmark = pytest.mark.real_traces

COUNTS = "SELECT (SELECT count(*) FROM runs) AS r, (SELECT count(*) FROM bursts) AS b"


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """A warehouse of one stored run of the real jacobi trace, and its counts as ``sql --format csv`` says them."""
    from synthtrace.warehouse.sql import query_rows

    wh = warehouse_with_runs(tmp_path_factory.mktemp("one") / "wh", 1)
    return wh.root, [str(v) for v in query_rows(wh, COUNTS)[1][0]]


@pytest.mark.parametrize("by_path", [False, True], ids=["linked", "by-path"])
@pytest.mark.parametrize(("name", "sibling"), [("w[1]", "w1"), ("w*", "wA"), ("w?", "wB"), ("w{1}", "w1")])
def test_a_warehouse_whose_path_holds_a_glob_character_is_read_as_itself(one_run, tmp_path, run_cli, monkeypatch,
                                                                         name, sibling, by_path):
    from synthtrace.warehouse import snapshot

    src, counts = one_run
    if by_path:  # as without write access to .staging
        monkeypatch.setattr(snapshot, "_links_folder", lambda *_: None)
    wh = tmp_path / name
    shutil.copytree(src, wh)
    shutil.copytree(src, tmp_path / sibling)  # what the pattern would match: another warehouse, the same run id
    os.mkdir(os.fsencode(tmp_path) + b"/w\xff")  # a name that is not UTF-8, beside them
    code, out, err = run_cli("sql", "-w", wh, COUNTS, "--format", "csv")
    assert (code, out.split()[-1].split(",")) == (0, counts), (out, err)
    code, out, err = run_cli("runs", "-w", wh)
    assert code == 0 and "jacobi" in out and not err, (out, err)
