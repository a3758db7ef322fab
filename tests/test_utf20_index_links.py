"""A symbolic link planted below ``.index/without_pcf`` (attack 20 F5): the next ingest of the trace with its .pcf
listed the link's target folder and deleted every file of it ("removed or moved away since: forget it"), and an
ingest without the .pcf made folders and files through it. Now no index is read or written through a link: the run
is stored, a warning names the link, nothing it points to changes."""
from __future__ import annotations

import pytest

from synthtrace.warehouse import Warehouse
from synthtrace.warehouse import ingest as ingest_module
from synthtrace.warehouse.sql import query
from testing.traces import JACOBI, PRIME, copy_trace


def _victim(folder):
    folder.mkdir(parents=True)
    (folder / "thesis.tex").write_text("important\n")
    (folder / "results.csv").write_text("data\n")
    return {p.name: p.read_text() for p in folder.iterdir()}


def _runs(wh):
    return len(query(Warehouse(wh), "SELECT run_id FROM runs").to_pylist())


@pytest.mark.real_traces
@pytest.mark.parametrize("planted", ["entry", "index"])
@pytest.mark.parametrize("with_pcf", [True, False])
def test_a_link_below_the_without_pcf_index_is_never_followed(tmp_path, run_cli, planted, with_pcf):
    wh, src = tmp_path / "wh", tmp_path / "src"
    assert run_cli("ingest", copy_trace(PRIME, tmp_path / "first"), "-w", wh)[0] == 0  # the index exists
    trace = copy_trace(JACOBI, src)
    if not with_pcf:
        trace.with_suffix(".pcf").unlink()
    key = ingest_module._source_key(ingest_module.source_text(trace))
    index = wh / ingest_module.WITHOUT_PCF_INDEX
    victim = tmp_path / "victim"
    if planted == "entry":
        before = _victim(victim)
        (index / key).symlink_to(victim)
    else:
        before = _victim(victim / key)
        victim_top = sorted(p.name for p in victim.iterdir())
        for p in index.iterdir():
            p.unlink() if p.is_file() else None
        index.rmdir()
        index.symlink_to(victim)
    code, out, err = run_cli("ingest", trace, "-w", wh)
    shown = victim if planted == "entry" else victim / key
    assert {p.name: p.read_text() for p in shown.iterdir()} == before, "files of the link's target changed"
    if planted == "index":
        assert sorted(p.name for p in victim.iterdir()) == victim_top, "written into the link's target"
    assert code == 0, err
    assert "ingested as jacobi-2d-imper_v0" in out, out
    assert "is a symbolic link, not followed" in err, err
    assert _runs(wh) == 2


@pytest.mark.real_traces
@pytest.mark.parametrize("planted", ["folders", "a-folder", "programs"])
def test_a_link_in_the_folder_and_program_indexes_is_never_followed(tmp_path, run_cli, planted):
    """The same for ``.index/folders`` (its whole folder, or one trace folder's entry) and ``.index/programs``:
    the ingest made folders and empty files through the link (and ``runs rm`` removed files named by run ids in
    it). Now nothing of the link's target changes; the ingest refuses or warns naming the link."""
    from synthtrace.warehouse import folder_index
    from synthtrace.warehouse.programs import PROGRAM_INDEX

    wh = tmp_path / "wh"
    assert run_cli("ingest", copy_trace(PRIME, tmp_path / "first"), "-w", wh)[0] == 0  # the indexes exist
    victim = tmp_path / "victim"
    before = _victim(victim)
    index = {"folders": folder_index.index_root(Warehouse(wh)), "programs": wh / PROGRAM_INDEX,
             "a-folder": folder_index.index_root(Warehouse(wh)) / "src"}[planted]
    if index.exists():
        import shutil

        shutil.rmtree(index)
    index.symlink_to(victim, target_is_directory=True)
    code, out, err = run_cli("ingest", copy_trace(JACOBI, tmp_path / "src"), "-w", wh)
    assert {p.name: p.read_text() for p in victim.rglob("*") if p.is_file()} == before, (out, err)
    assert sorted(p.name for p in victim.iterdir()) == sorted(before), "written into the link's target"
    assert "is a symbolic link, not followed" in err, (code, out, err)
