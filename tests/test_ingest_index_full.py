"""A full disk or inode table met by the index writes that follow an ingest's commit (attack 16 F5): the run is
stored, so the ingest said "the warehouse is unchanged" (an index write inside the commit's lock) or a bare
``.index/without_pcf/.complete: No space left on device`` (exit 2 both) while ``runs`` listed the run. Now a warning
says the run is stored and the indexes were not written, exit 0, and the next ingest rebuilds them. Memory running
out there (attack 20 F8, under ``prlimit --as`` 680-720 MB) said "error: out of memory", exit 1, over a stored run:
the same now."""
from __future__ import annotations

import errno
import os

import pytest

from synthtrace.warehouse import Warehouse, folder_index
from synthtrace.warehouse import ingest as ingest_module
from synthtrace.warehouse.programs import INDEX_COMPLETE, PROGRAM_INDEX
from synthtrace.warehouse.sql import query
from testing.traces import JACOBI, PRIME, copy_trace


def _full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "wh/.index/without_pcf/.complete")


def _no_memory(*_args, **_kwargs):
    raise MemoryError


@pytest.mark.real_traces
@pytest.mark.parametrize("fails", ["remember_program", "_without_pcf_index"])
@pytest.mark.parametrize(("failure", "said"), [(_full, "No space left on device"), (_no_memory, "out of memory")],
                         ids=["disk-full", "no-memory"])
def test_an_index_write_failing_after_the_commit_says_the_run_is_stored(tmp_path, run_cli, monkeypatch, fails,
                                                                        failure, said):
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    prime = copy_trace(PRIME, drop)
    with monkeypatch.context() as m:
        m.setattr(ingest_module, fails, failure)
        code, out, err = run_cli("ingest", prime, "-w", wh)
    stored = query(Warehouse(wh), "SELECT run_id, n_bursts FROM runs").to_pylist()
    assert len(stored) == 1 and stored[0]["n_bursts"] > 0, stored
    run_id = stored[0]["run_id"]
    assert code == 0, err
    assert f"stored as run {run_id} (experiment drop), but the warehouse's indexes could not be written after it " \
           f"({said}): the next ingest rebuilds them from the stored runs" in err, err
    assert "unchanged" not in err and "error" not in err and f"ingested as prime_v0 (run {run_id}" in out, (out, err)
    code, _, err = run_cli("ingest", copy_trace(JACOBI, drop), "-w", wh)  # room again
    assert code == 0 and "could not be written" not in err, err
    assert (wh / PROGRAM_INDEX / INDEX_COMPLETE).is_file()
    assert (wh / ingest_module.WITHOUT_PCF_COMPLETE).is_file()
    assert folder_index.complete(Warehouse(wh))
    assert run_id in {p.name for p in folder_index.index_root(Warehouse(wh)).rglob("*")}
