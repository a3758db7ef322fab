"""`synthtrace runs rm` / `runs move`: runs put right on the real LULESH pair, atomically, and no view ever shows a
merge of runs that are no longer there."""
from __future__ import annotations

import shutil

import pytest

from synthtrace.warehouse import Warehouse
from testing.traces import LULESH_A, LULESH_B, PRIME, copy_trace, tree_digest

pytestmark = pytest.mark.real_traces


@pytest.fixture
def wh(tmp_path, merged_lulesh):
    """A fresh copy of the merged LULESH pair (experiment lulesh-8r)."""
    w = tmp_path / "wh"
    shutil.copytree(merged_lulesh, w)
    return w


def _sql(wh, statement: str) -> list[dict]:
    from synthtrace.warehouse.sql import query

    return query(Warehouse(wh), statement).to_pylist()


def _runs(wh) -> dict[str, dict]:
    return {r["run_name"]: r for r in _sql(wh, "SELECT run_id, run_name, experiment, n_bursts FROM runs")}


def test_rm_removes_the_run_and_the_stale_merge(wh, run_cli):
    before = _runs(wh)
    gone, kept = before[LULESH_B.stem], before[LULESH_A.stem]
    code, out, err = run_cli("runs", "rm", gone["run_id"][:8], "-w", wh)  # a unique id prefix names a run
    assert code == 0, err
    assert f"removed run {gone['run_id']}" in out and "experiment lulesh-8r: merged data" in out
    assert set(_runs(wh)) == {LULESH_A.stem}
    assert _sql(wh, f"SELECT count(*) AS n FROM bursts WHERE run_id = '{gone['run_id']}'") == [{"n": 0}]
    assert _sql(wh, f"SELECT count(*) AS n FROM bursts WHERE run_id = '{kept['run_id']}'") == [{"n": kept["n_bursts"]}]
    assert not (wh / "experiments" / "lulesh-8r").exists()
    code, _, err = run_cli("sql", "SELECT * FROM merged_bursts", "-w", wh)
    assert code == 2 and "merged_bursts" in err  # the view is gone with the merge, not showing a removed run


def test_move_reassigns_and_keeps_the_data(wh, run_cli):
    b = _runs(wh)[LULESH_B.stem]
    bursts_before = tree_digest(wh / "runs" / b["run_id"] / "bursts")
    code, out, err = run_cli("runs", "move", LULESH_B.stem, "--experiment", "lulesh-7+1", "-w", wh)  # by run name
    assert code == 0, err
    assert "from experiment lulesh-8r to lulesh-7+1" in out
    after = _runs(wh)
    assert after[LULESH_B.stem]["experiment"] == "lulesh-7+1" and after[LULESH_A.stem]["experiment"] == "lulesh-8r"
    assert tree_digest(wh / "runs" / b["run_id"] / "bursts") == bursts_before
    assert not (wh / "experiments" / "lulesh-8r").exists()  # its merge used the run that left
    assert not list((wh / ".staging").iterdir())
    code, out, _ = run_cli("runs", "move", LULESH_B.stem, "-e", "lulesh-7+1", "-w", wh)
    assert code == 0 and "nothing to move" in out


def test_a_move_into_a_copied_folders_name_is_refused_and_the_copy_kept(wh, run_cli):
    """Attack 10 D8: ``runs move RUN --experiment lulesh-8r.old``, where ``lulesh-8r.old`` is a user's copy of an
    experiment folder (``runs`` says so: not read, move it out), deleted the copy as 'merged data and analysis
    removed', exit 0. A writer never removes a folder no commit wrote."""
    copy = wh / "experiments" / "lulesh-8r.old"
    shutil.copytree(wh / "experiments" / "lulesh-8r", copy)
    before, runs = tree_digest(copy), _runs(wh)
    code, out, err = run_cli("runs", "move", LULESH_B.stem, "--experiment", "lulesh-8r.old", "-w", wh)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "lulesh-8r.old" in lines[0] and "copy" in lines[0], (out, err)
    assert tree_digest(copy) == before and _runs(wh) == runs
    code, out, err = run_cli("runs", "rm", LULESH_B.stem, "-w", wh)  # the real experiment's merge goes, the copy stays
    assert code == 0 and not (wh / "experiments" / "lulesh-8r").exists() and tree_digest(copy) == before, err


@pytest.mark.parametrize("args", [
    ["rm", "no-such-run"],
    ["rm", LULESH_A.stem, "no-such-run"],          # one bad name: nothing at all is removed
    ["move", "no-such-run", "-e", "x"],
    ["move", LULESH_A.stem, "-e", "../escape"],
    ["move", LULESH_A.stem, "-e", "a/b"],
])
def test_bad_reference_changes_nothing(wh, run_cli, args):
    before = tree_digest(wh)
    code, _, err = run_cli("runs", *args, "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert tree_digest(wh) == before


def test_ambiguous_run_name_is_refused(wh, run_cli, tmp_path):
    """Two runs of one name (other content, other experiment) must be told apart by id."""
    a = _runs(wh)[LULESH_A.stem]
    copy_trace(PRIME, tmp_path / "other", stem=LULESH_A.stem)  # other content, same run name
    assert run_cli("ingest", tmp_path / "other", "--experiment", "other", "-w", wh)[0] == 0
    before = tree_digest(wh)
    code, _, err = run_cli("runs", "rm", LULESH_A.stem, "-w", wh)
    assert code == 2 and "ambiguous" in err and a["run_id"] in err
    assert tree_digest(wh) == before


def test_a_whole_run_id_names_its_run_even_when_another_run_is_named_so(wh, run_cli, tmp_path):
    """Attack 11 (tiny): ``runs rm <a whole run id>`` where another run's trace was named that id said 'is
    ambiguous ...; name it by run id', though it was one. A whole id wins over a name."""
    a = _runs(wh)[LULESH_A.stem]
    copy_trace(PRIME, tmp_path / "other", stem=a["run_id"])  # a trace whose name is the other run's id
    assert run_cli("ingest", tmp_path / "other", "--experiment", "other", "-w", wh)[0] == 0
    code, out, err = run_cli("runs", "rm", a["run_id"], "-w", wh)
    assert code == 0 and f"removed run {a['run_id']}" in out, err
    assert a["run_id"] in {r["run_name"] for r in _runs(wh).values()} and LULESH_A.stem not in _runs(wh)


def test_failed_move_leaves_the_run_as_it_was(wh, monkeypatch):
    """The new run.parquet is written aside: a failure while writing leaves the old directory untouched."""
    import polars as pl

    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.run_admin import move_runs

    run_id = _runs(wh)[LULESH_B.stem]["run_id"]
    before = tree_digest(wh / "runs")

    def disk_full(self, file, *a, **k):  # half a file written, then the disk is full
        open(file, "wb").write(b"PAR1")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", disk_full)
    with pytest.raises(OSError):
        move_runs(Warehouse(wh), [run_id], "elsewhere")
    monkeypatch.undo()
    assert tree_digest(wh / "runs") == before
    assert _runs(wh)[LULESH_B.stem]["experiment"] == "lulesh-8r"


@pytest.mark.parametrize("change", ["rm", "move"])
def test_a_run_that_leaves_during_the_merge_is_not_committed(wh, change):
    """`runs rm|move` while a merge of the experiment runs (a user beside the nightly flow): the merge, computed
    from a run that has left, commits nothing and says so; it is never stored as if the run were still there."""
    from synthtrace.pipelines import jobs
    from synthtrace.warehouse.errors import RunsChangedError
    from synthtrace.warehouse.run_admin import move_runs, remove_runs

    w = Warehouse(wh)
    leaving = _runs(wh)[LULESH_B.stem]["run_id"]
    steps: list[str] = []

    def change_once(what: str, total: int) -> None:  # the merge's own step hook: the runs were read, it goes on
        if not steps:
            remove_runs(w, [leaving]) if change == "rm" else move_runs(w, [leaving], "elsewhere")
        steps.append(what)

    with pytest.raises(RunsChangedError, match=f"run\\(s\\) {leaving} left it while it merged"):
        jobs.merge_experiment(w.experiment("lulesh-8r"), on_step=change_once)
    assert steps, "the merge never reached a step: the run did not leave during it"
    assert not (wh / "experiments" / "lulesh-8r").exists()
    assert not list((wh / ".staging").iterdir())


def test_a_run_that_joins_during_the_merge_is_not_committed(wh, run_cli, tmp_path):
    """[helper edges] `runs move` INTO an experiment while its merge runs: the move removed the experiment's merged
    data, and the merge, computed without the run that joined, stored a merged trace omitting it (only runs that
    left were checked). It now commits nothing and says so in one line, as for a run that leaves."""
    from synthtrace.pipelines import jobs
    from synthtrace.warehouse.errors import RunsChangedError
    from synthtrace.warehouse.run_admin import move_runs

    copy_trace(PRIME, tmp_path / "other")
    assert run_cli("ingest", tmp_path / "other", "--experiment", "other", "-w", wh)[0] == 0
    w = Warehouse(wh)
    joining = _runs(wh)[PRIME.stem]["run_id"]
    steps: list[str] = []

    def move_in_once(what: str, total: int) -> None:  # the merge's own step hook: the runs were read, it goes on
        if not steps:
            move_runs(w, [joining], "lulesh-8r")
        steps.append(what)

    with pytest.raises(RunsChangedError, match=f"run\\(s\\) {joining} joined it while it merged") as raised:
        jobs.merge_experiment(w.experiment("lulesh-8r"), on_step=move_in_once)
    assert steps and len(str(raised.value).splitlines()) == 1
    assert not (wh / "experiments" / "lulesh-8r").exists()  # no merge of two of its three runs
    assert not list((wh / ".staging").iterdir())
    assert _runs(wh)[PRIME.stem]["experiment"] == "lulesh-8r"


def test_a_run_that_leaves_during_the_analysis_is_not_committed(wh):
    """The same for `archetypes`: its metrics of a merge whose run was removed meanwhile are not stored."""
    from synthtrace.pipelines import jobs
    from synthtrace.warehouse.errors import RunsChangedError
    from synthtrace.warehouse.run_admin import remove_runs

    leaving = _runs(wh)[LULESH_B.stem]["run_id"]
    steps: list[str] = []

    def remove_once_analysed(what: str) -> None:  # the analysis's own step hook: analysed, not yet stored
        steps.append(what)
        if what.endswith("analysed"):
            remove_runs(Warehouse(wh), [leaving])

    with pytest.raises(RunsChangedError, match="left it while it was analysed"):
        jobs.analyse(Warehouse(wh).experiment("lulesh-8r"), discover=False, on_step=remove_once_analysed)
    assert any(w.endswith("analysed") for w in steps), "the run did not leave during the analysis"
    assert not (wh / "experiments" / "lulesh-8r").exists()


def test_rm_waits_for_a_writer_of_the_experiment(wh):
    """`runs rm` takes the experiment's writers' lock: while a merge or an analysis holds it (here the test, from
    another open file, as another process would), the run stays; once it is released, the removal goes through."""
    import threading

    from synthtrace.warehouse.run_admin import remove_runs

    w = Warehouse(wh)
    leaving = _runs(wh)[LULESH_B.stem]["run_id"]
    with w.writers_lock(w.experiment_dir("lulesh-8r")):
        rm = threading.Thread(target=remove_runs, args=(w, [leaving]), daemon=True)
        rm.start()
        rm.join(timeout=10)  # without the lock it ends in milliseconds
        assert rm.is_alive() and (wh / "runs" / leaving).is_dir()
    rm.join(timeout=300)
    assert not rm.is_alive() and not (wh / "runs" / leaving).exists()


def test_the_move_hint_of_a_conflicting_ingest_pastes_into_a_shell(tmp_path, run_cli):
    """Session 6 item 3: the hint `synthtrace runs move ID --experiment NAME` was not shell-quoted: a name with a
    blank or a quote, pasted, moved the run elsewhere (or ran something else)."""
    import shlex

    drop = copy_trace(PRIME, tmp_path / "drop").parent
    assert run_cli("ingest", drop, "-w", tmp_path / "w")[0] == 0
    name = "prime it's; x"
    code, _, err = run_cli("ingest", drop, "-w", tmp_path / "w", "--experiment", name)
    assert code == 2 and "to move it: " in err, err
    hint = shlex.split(err.split("to move it: ", 1)[1].strip())
    assert hint[:3] == ["synthtrace", "runs", "move"] and hint[-2:] == ["--experiment", name], hint


@pytest.mark.parametrize("change", ["move", "rm"])
def test_a_run_moved_by_another_admin_after_the_resolve_invalidates_where_it_is(wh, monkeypatch, tmp_path, change):
    """Attack 6 F9: two `runs move` (or a move and an rm) of one run at once. The second resolved the run in
    experiment q, then paused; meanwhile the first moved it into lulesh-8r and lulesh-8r was merged with it. The
    second must invalidate lulesh-8r (where the run is when it changes it), not q (where its resolve saw it): no view
    may show a merge of a run that is no longer in the experiment."""
    from synthtrace.warehouse import run_admin

    w = Warehouse(wh)
    run_id = _runs(wh)[LULESH_B.stem]["run_id"]
    merge_with_b = shutil.copytree(wh / "experiments" / "lulesh-8r", tmp_path / "merge_with_b")
    run_admin.move_runs(w, [run_id], "q")  # where the paused admin will see it
    resolve = run_admin.resolve_runs
    paused: list[str] = []

    def resolve_then_pause(wh_: Warehouse, refs):
        seen = resolve(wh_, refs)
        if not paused:  # while this admin is paused: the run goes back and lulesh-8r is merged with it again
            paused.append("moved")
            run_admin.move_runs(w, [run_id], "lulesh-8r")
            shutil.copytree(merge_with_b, wh / "experiments" / "lulesh-8r")
        return seen

    monkeypatch.setattr(run_admin, "resolve_runs", resolve_then_pause)
    res = run_admin.move_runs(w, [run_id], "y") if change == "move" else run_admin.remove_runs(w, [run_id])
    assert paused and "lulesh-8r" in res.invalidated
    assert not (wh / "experiments" / "lulesh-8r").exists()  # its merge holds a run that left it
    assert res.runs.get_column("experiment").to_list() == ["lulesh-8r"]  # the row as it was when changed
    assert {r["run_name"]: r["experiment"] for r in _runs(wh).values()}.get(LULESH_B.stem) == \
        ("y" if change == "move" else None)
