"""Memory running out in the index writes that follow an ingest's commit (attack 20 F8, found under ``prlimit --as``
680-720 MB): the ingest said "error: out of memory", exit 1, while its run was stored whole; its indexes were not
written and the next ingest of the trace said "already ingested". What a user can rely on now: exit 0, the run is
stored and said so, a warning says the indexes were not written, and the next ingest rebuilds them with this run."""
from __future__ import annotations

import pytest

from synthtrace.warehouse import Warehouse, folder_index
from synthtrace.warehouse import ingest as ingest_module
from synthtrace.warehouse.programs import INDEX_COMPLETE, PROGRAM_INDEX
from synthtrace.warehouse.sql import query
from testing.traces import JACOBI, PRIME, copy_trace


def _no_memory(*_args, **_kwargs):
    raise MemoryError


@pytest.mark.real_traces
@pytest.mark.parametrize("fails", ["remember_program", "_without_pcf_index"])
def test_memory_running_out_after_the_commit_says_the_run_is_stored(tmp_path, run_cli, monkeypatch, fails):
    drop, wh = tmp_path / "drop", tmp_path / "wh"
    prime = copy_trace(PRIME, drop)
    with monkeypatch.context() as m:
        m.setattr(ingest_module, fails, _no_memory)
        code, out, err = run_cli("ingest", prime, "-w", wh)
    stored = query(Warehouse(wh), "SELECT run_id, n_bursts FROM runs").to_pylist()
    assert len(stored) == 1 and stored[0]["n_bursts"] > 0, stored
    run_id = stored[0]["run_id"]
    assert code == 0, err
    assert f"ingested as prime_v0 (run {run_id}" in out, (out, err)
    assert f"stored as run {run_id} (experiment drop), but the warehouse's indexes could not be written after it " \
           "(out of memory): the next ingest rebuilds them from the stored runs" in err, err
    assert "error" not in err, err
    code, _, err = run_cli("ingest", copy_trace(JACOBI, drop), "-w", wh)  # memory again: the indexes are rebuilt
    assert code == 0 and "could not be written" not in err, err
    assert (wh / PROGRAM_INDEX / INDEX_COMPLETE).is_file()
    assert (wh / ingest_module.WITHOUT_PCF_COMPLETE).is_file()
    assert folder_index.complete(Warehouse(wh))
    assert run_id in {p.name for p in folder_index.index_root(Warehouse(wh)).rglob("*")}
