"""What the nightly stages have completed, kept in the warehouse so that a killed night is finished by the next.

Per experiment, ``experiments/<name>/night.json`` records the runs its merge and analysis were computed from
and which of those stages completed; an experiment whose runs differ from the record (or whose record lacks a
stage) is pending until that stage completes. For the warehouse-wide stages (detect, retrain, report),
``WAREHOUSE/night.json`` records the fingerprint of all runs (and of when each experiment's stages last completed)
they last completed on.
"""
from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import xxhash
from synthtrace.warehouse.layout import MANIFEST, Warehouse, read_record
from synthtrace.warehouse.names import name_problem
from synthtrace.warehouse.runs import runs_table

RECORD = "night"  # night.json in an experiment folder and at the warehouse root


@dataclass(frozen=True)
class Pending:
    """An experiment with stages left to do for its current runs."""

    experiment: str
    run_ids: tuple[str, ...]
    stages: tuple[str, ...]


def _read(path: Path) -> dict:
    try:
        return read_record(path)
    except (OSError, ValueError):
        return {}


def experiment_run_ids(wh: Warehouse) -> dict[str, tuple[str, ...]]:
    """Experiment -> its run ids (sorted), from the runs view's files."""
    runs = runs_table(wh).select("experiment", "run_id").drop_nulls()
    grouped = runs.group_by("experiment").agg(pl.col("run_id").sort()).sort("experiment")
    return {e: tuple(ids) for e, ids in grouped.iter_rows()}


def pending(wh: Warehouse, stages: Iterable[str]) -> tuple[list[Pending], list[str]]:
    """(experiments with some of ``stages`` not completed for their current runs, names that cannot be a
    folder and so are never analysed)."""
    stages = tuple(stages)
    todo, invalid = [], []
    for experiment, run_ids in experiment_run_ids(wh).items():
        if name_problem(experiment) is not None:
            invalid.append(experiment)
            continue
        done = _read(wh.experiment_dir(experiment) / f"{RECORD}.json")
        completed = set(done.get("stages", [])) if tuple(done.get("run_ids", [])) == run_ids else set()
        if left := tuple(s for s in stages if s not in completed):
            todo.append(Pending(experiment, run_ids, left))
    return todo, invalid


def record_without(folder: Path, stages: Iterable[str]) -> dict | None:
    """The night record of the experiment ``folder`` with ``stages`` no longer complete (for a commit that makes
    them stale outside a night: a merge by hand), or None when it has no record."""
    done = _read(folder / f"{RECORD}.json")
    if not done:
        return None
    return {**done, "stages": sorted(set(done.get("stages", [])) - set(stages))}


def mark_experiment(wh: Warehouse, item: Pending, completed: Iterable[str], invalidates: Iterable[str] = ()) -> None:
    """Record that ``completed`` stages of ``item.experiment`` ran on ``item.run_ids`` (atomic); stages in
    ``invalidates`` (computed from what was just redone) are no longer complete."""
    target = wh.experiment_dir(item.experiment)
    done = _read(target / f"{RECORD}.json")
    keep = set(done.get("stages", [])) if tuple(done.get("run_ids", [])) == item.run_ids else set()
    keep -= set(invalidates)
    doc = {"run_ids": list(item.run_ids), "stages": sorted(keep | set(completed)), "at": datetime.now(UTC).isoformat()}
    wh.update_dir(target, {}, {RECORD: doc})


def fingerprint(wh: Warehouse) -> str:
    """A hash of every experiment's runs and completed stages, with when they last completed (the record's ``at``),
    and of what its folder holds (its manifest, :data:`~synthtrace.warehouse.layout.MANIFEST`: each file's digest,
    size and time): it changes whenever a run comes, goes or moves, or an experiment's merge or analysis is
    committed, by a night or by hand, a redone one too (attack 12 F3: a stage a merge by hand made stale and the
    night redid gave the same stage names, so the warehouse stages computed from the replaced analysis were counted
    done; a hand ``archetypes``, which writes no night record, left the night's report of the analysis it
    replaced)."""
    h = xxhash.xxh3_64()
    for experiment, run_ids in experiment_run_ids(wh).items():
        folder = None if name_problem(experiment) else wh.experiment_dir(experiment)
        done = _read(folder / f"{RECORD}.json") if folder else {}
        holds = _read(folder / MANIFEST) if folder else {}
        h.update(json.dumps([experiment, run_ids, done.get("run_ids"), done.get("stages"), done.get("at"), holds],
                            sort_keys=True, default=str).encode())
    return h.hexdigest()


def global_stages_left(wh: Warehouse, stages: Iterable[str], state: str) -> list[str]:
    """Which warehouse-wide ``stages`` have not completed on the runs of fingerprint ``state``."""
    done = _read(wh.root / f"{RECORD}.json")
    completed = set(done.get("stages", [])) if done.get("fingerprint") == state else set()
    return [s for s in stages if s not in completed]


def mark_global(wh: Warehouse, state: str, completed: Iterable[str]) -> None:
    """Record warehouse-wide stages completed on fingerprint ``state`` (written aside, renamed into place)."""
    target = wh.root / f"{RECORD}.json"
    done = _read(target)
    keep = set(done.get("stages", [])) if done.get("fingerprint") == state else set()
    doc = {"fingerprint": state, "stages": sorted(keep | set(completed)), "at": datetime.now(UTC).isoformat()}
    with wh.ensure().lease() as owner:  # attack 7 A6: judged by a lease, not a pid
        tmp = wh.staging_dir / f"{RECORD}.json.{uuid.uuid4().hex[:8]}.{owner}"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, target)
