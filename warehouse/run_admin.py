"""Putting runs right: remove runs from the warehouse, or move them to another experiment.

Every run named is resolved before anything changes (an unknown or ambiguous name changes nothing). Each change is
one atomic step, like an ingest: a removed run's directory is renamed into staging and then deleted; a moved run's
directory is rebuilt in staging with its new ``run.parquet`` (the other files hard-linked) and swapped into place.
An experiment whose runs change loses its derived data (merge, metrics, archetypes) first, so no view ever shows a
merge of runs that are no longer there; ``synthtrace merge`` rebuilds it.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import polars as pl
from synthtrace.tracelib.errors import BadInputError
from synthtrace.warehouse import folder_index
from synthtrace.warehouse.errors import DamagedPartError, UnknownExperimentError
from synthtrace.warehouse.model_store import remove_predictions
from synthtrace.warehouse.layout import MAX_RECORD_BYTES, Warehouse, is_own_file, read_record, refuse_linked_members
from synthtrace.warehouse.names import name_problem, one_spelling
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.parts import read_part
from synthtrace.warehouse.stored import damaged_runs, judge, refuse_foreign, stored_folders


@dataclass(frozen=True)
class AdminResult:
    """What changed: the runs acted on (rows of the runs view, before the change) and the experiments whose derived
    data was removed."""

    runs: pl.DataFrame
    invalidated: list[str]
    #: the experiments whose predictions were removed (their runs changed)
    unpredicted: list[str] = field(default_factory=list)


def resolve_runs(wh: Warehouse, refs: Sequence[str]) -> pl.DataFrame:
    """The rows of the runs named by ``refs`` (a run id, a unique prefix of one, or a run name that is unique in the
    warehouse and the prefix of no other run's id); raises :class:`UnknownExperimentError` naming the first
    reference that matches no run or several.
    A run whose record or checksums are damaged (:func:`~synthtrace.warehouse.stored.damaged_runs`) is named by
    its id (or a prefix) only; its row holds the id, the experiment(s) it may be in (:func:`_damaged_run_rows`)
    and, in ``damaged``, the line about it (attack 8 B6: such a run could not be removed)."""
    damaged = damaged_runs(wh.root)
    runs = pl.concat([runs_table(wh, leave_out=damaged), _damaged_run_rows(wh, damaged)], how="diagonal_relaxed")
    picked = []
    for ref in dict.fromkeys(refs):
        hit = runs.filter(pl.col("run_id") == ref)  # a whole id names its run, whatever another run is called
        if hit.height == 0:  # a name as typed matches however it is spelled in Unicode (a Mac's file names: NFD)
            named = runs.filter(pl.col("run_name").str.normalize("NFC") == one_spelling(ref))
            # a name that is also the prefix of another run's id names two runs (attack 20 F14: `runs rm d46a`
            # removed the run named d46a when the user meant the id d46a6b...)
            prefixed = runs.filter(pl.col("run_id").str.starts_with(ref)) if ref else runs.clear()
            hit = pl.concat([named, prefixed]).unique("run_id", keep="first", maintain_order=True) \
                if named.height else prefixed
        if hit.height == 0:
            _refuse_a_link(wh, ref)
            raise UnknownExperimentError(f"no run {ref!r} in {wh.root} (see `synthtrace runs`)")
        if hit.height > 1:
            ids = ", ".join(f"{i} ({e})" for i, e in hit.select("run_id", "experiment").iter_rows())
            raise UnknownExperimentError(f"run {ref!r} is ambiguous: {ids}; name it by run id")
        picked.append(hit)
    return pl.concat(picked).unique("run_id", keep="first", maintain_order=True)


def _refuse_a_link(wh: Warehouse, ref: str) -> None:
    """Raise :class:`ForeignFolderError` when ``ref``, which names no run, is the id (or the one id prefix) of an
    entry of ``runs/`` that is a link: the run listing leaves it out, and it is never followed (attack 16: `runs rm`
    of such a run said "no run")."""
    try:
        linked = [p for p in wh.runs_dir.iterdir() if ref and p.name.startswith(ref) and p.is_symlink()]
    except OSError:
        return
    if len(linked) == 1:
        refuse_foreign(linked[0], "nothing was changed")


def _damaged_run_rows(wh: Warehouse, damaged: dict[str, str]) -> pl.DataFrame:
    """A row per damaged run: its id, what is wrong (``damaged``) and the experiment it is in as far as can be
    told: the one its record still names, if that decodes to an experiment there is, else each experiment whose
    merge record lists the run (``experiment.json``'s ``run_ids``); ``experiment`` is the first, ``experiments``
    all of them (removing the run removes their derived data, as for any run)."""
    rows = []
    for run_id, line in damaged.items():
        places = set()
        record = wh.run_dir(run_id) / "run.parquet"
        with contextlib.suppress(Exception):  # a damaged file may fail any way: then the merge records tell
            if not is_own_file(wh.root, record) or record.stat().st_size > MAX_RECORD_BYTES:
                raise ValueError("not a run record")  # a link, a FIFO (it would block): not read
            own = pl.read_parquet(record, columns=["experiment"], glob=False).item(0, 0)
            if isinstance(own, str) and name_problem(own) is None and wh.experiment_dir(own).is_dir():
                places.add(own)
        if not places:
            places = {name for name in _experiment_names(wh) if run_id in _merged_run_ids(wh, name)}
        rows.append({"run_id": run_id, "experiment": min(places) if places else None,
                     "experiments": sorted(places), "damaged": line})
    return pl.DataFrame(rows, schema={"run_id": pl.String, "experiment": pl.String,
                                      "experiments": pl.List(pl.String), "damaged": pl.String})


def _experiment_names(wh: Warehouse) -> list[str]:
    return [name for name in stored_folders(wh.root, "experiments") if name_problem(name) is None]


def _merged_run_ids(wh: Warehouse, experiment: str) -> list[str]:
    try:
        ids = read_record(wh.experiment_dir(experiment) / "experiment.json").get("run_ids", [])
    except (OSError, ValueError, AttributeError):
        return []
    return ids if isinstance(ids, list) else []


def _experiments_of(runs: pl.DataFrame) -> list[str]:
    """The experiments ``runs`` are in (for a damaged run, each it may be in)."""
    names = runs.get_column("experiment").drop_nulls().to_list()
    if "experiments" in runs.columns:
        names += [e for many in runs.get_column("experiments").drop_nulls().to_list() for e in many]
    return list(dict.fromkeys(names))


def invalidate_experiments(wh: Warehouse, names: Sequence[str]) -> list[str]:
    """Remove the derived data (``experiments/<name>/``) of the experiments named; returns those that had some. A
    folder of that name that no commit wrote (a user's copy: :func:`~synthtrace.warehouse.stored.judge`) is not
    derived data: it is left alone (attack 10 D8)."""
    gone = []
    for name in dict.fromkeys(names):
        target = wh.experiment_dir(name)
        if target.is_dir() and judge(wh.root, ("experiments", name)).foreign is None:
            wh.remove(target)
            gone.append(name)
    return gone


@contextlib.contextmanager
def _experiments_locked(wh: Warehouse, names: Iterable[str]) -> Iterator[None]:
    """Hold the writers' lock of each experiment named (in name order, so that two admins never deadlock): a merge
    or an analysis of them commits before this block or checks its runs after it (``check_runs_still_in``)."""
    with contextlib.ExitStack() as held:
        for name in sorted(set(names)):
            held.enter_context(wh.writers_lock(wh.experiment_dir(name)))
        yield


def _rows_now(wh: Warehouse, runs: pl.DataFrame) -> pl.DataFrame:
    """The stored rows of ``runs`` read again from each run's ``run.parquet`` (a run removed meanwhile is left
    out): where each run is now, not where a resolve made earlier saw it. A damaged run's row is kept as resolved
    (its record cannot be read), while its folder is there."""
    sound = runs.filter(pl.col("damaged").is_null()) if "damaged" in runs.columns else runs
    files = [wh.run_dir(r) / "run.parquet" for r in sound.get_column("run_id")]
    rows = [read_part(f) for f in files if f.is_file()]
    if "damaged" in runs.columns:
        bad = runs.filter(pl.col("damaged").is_not_null())
        rows.append(bad.filter(pl.col("run_id").is_in([r for r in bad.get_column("run_id")
                                                        if wh.run_dir(r).is_dir()])))
    rows = [r for r in rows if r.height]
    return pl.concat(rows, how="diagonal_relaxed") if rows else runs.clear()


@contextlib.contextmanager
def _runs_locked(wh: Warehouse, runs: pl.DataFrame, joined: Iterable[str] = ()) -> Iterator[pl.DataFrame]:
    """Hold the writers' lock of the experiment each of ``runs`` is in, and of ``joined``; yields the runs' rows
    as read under those locks. A run's experiment changes only under its lock, so what is read there holds until
    the block ends; a run that another admin moved between the resolve and the locks has its new experiment's lock
    taken instead (released and taken again in name order, so that two admins never deadlock)."""
    joined = set(joined)
    names = set(_experiments_of(runs)) | joined
    while True:
        with _experiments_locked(wh, names):
            rows = _rows_now(wh, runs)
            now = set(_experiments_of(rows)) | joined
            if now <= names:
                yield rows
                return
        names = now


def remove_runs(wh: Warehouse, refs: Sequence[str]) -> AdminResult:
    """Remove the runs named (see :func:`resolve_runs`) and the derived data of the experiments they are in when
    removed. A run another admin removed meanwhile is left out of the result."""
    with _runs_locked(wh, resolve_runs(wh, refs)) as runs:
        invalidated = invalidate_experiments(wh, _experiments_of(runs))
        unpredicted = remove_predictions(wh, _experiments_of(runs))
        for run_id in runs.get_column("run_id"):
            wh.remove(wh.run_dir(run_id))
        folder_index.forget_runs(wh, runs.get_column("run_id"))
    return AdminResult(runs, invalidated, unpredicted)


def move_runs(wh: Warehouse, refs: Sequence[str], experiment: str) -> AdminResult:
    """Assign the runs named to ``experiment``; the derived data of the experiments they leave (where they are
    when moved) and join is removed. Runs already in ``experiment`` are left alone; a run removed meanwhile changes
    nothing (:class:`UnknownExperimentError`)."""
    _check_experiment_name(wh, experiment)
    resolved = resolve_runs(wh, refs)
    if "damaged" in resolved.columns and (bad := resolved.get_column("damaged").drop_nulls().to_list()):
        raise DamagedPartError(f"{bad[0]}; a run whose record is damaged cannot be moved (or remove it: synthtrace "
                               f"runs rm {resolved.filter(pl.col('damaged').is_not_null()).item(0, 'run_id')})")
    with _runs_locked(wh, resolved, [experiment]) as now:
        if gone := sorted(set(resolved.get_column("run_id")) - set(now.get_column("run_id"))):
            raise UnknownExperimentError(f"run(s) {', '.join(gone)} removed from {wh.root} meanwhile; nothing moved")
        runs = now.filter(pl.col("experiment").ne_missing(experiment))
        if runs.height == 0:
            return AdminResult(runs, [])
        for run_id in runs.get_column("run_id"):  # attack 20 F6: refused before any merge or prediction goes
            refuse_linked_members(wh.run_dir(run_id))
        changed = [*runs.get_column("experiment").drop_nulls().to_list(), experiment]
        invalidated = invalidate_experiments(wh, changed)
        unpredicted = remove_predictions(wh, changed)
        for run_id in runs.get_column("run_id"):
            run_dir = wh.run_dir(run_id)
            row = read_part(run_dir / "run.parquet")
            wh.update_dir(
                run_dir, {"run": row.with_columns(pl.lit(experiment, row.schema["experiment"]).alias("experiment"))}
            )
    return AdminResult(runs, invalidated, unpredicted)


def _check_experiment_name(wh: Warehouse, name: str) -> None:
    """Refuse a name whose folder would not be a direct child of ``experiments/`` (empty, ``.``, ``..``, ``a/b``),
    or whose folder is there and is no commit's (attack 10 D8: ``runs move --experiment lulesh-8r.old`` deleted the
    user's copy that ``runs`` had said to move out of the warehouse)."""
    target = wh.experiment_dir(name)
    if not name or name in (".", "..") or target.parent != wh.experiments_dir or target.name != name:
        raise BadInputError(f"--experiment {name!r}: not a valid experiment name (no path separators, not . or ..)")
    refuse_foreign(target, "nothing moved")
