"""One experiment of the warehouse as an object (DESIGN §3, §5): its runs, read from the runs table once, their
tables, its trace as the stages read it, its record, and the atomic commit of what a stage computed from it.

::

    WAREHOUSE/experiments/<name>/experiment.json       the merge's reference run and options (written by the merge)
    WAREHOUSE/experiments/<name>/merged_bursts.parquet  ... and the other files the stages commit

Open one with :meth:`Warehouse.experiment <synthtrace.warehouse.layout.Warehouse.experiment>`. Every stage commits
through :meth:`Experiment.commit`: the experiment folder is rebuilt in staging (files other stages wrote are
hard-linked in unchanged) and swapped in by one rename, under the experiment's writers' lock, after checking that
the runs it was computed from are still the experiment's, and that no run joined it meanwhile (``synthtrace runs
rm|move`` take the same lock); what was computed from its merge, that the merge is still the one it read
(:class:`MergeStamp`).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from synthtrace.tracelib.printable import utf8_path
from synthtrace.warehouse.checksums import Recorded, recorded
from synthtrace.warehouse.errors import RunsChangedError, UnknownExperimentError, WarehouseError
from synthtrace.warehouse.layout import read_record
from synthtrace.warehouse.night_state import RECORD as NIGHT_RECORD
from synthtrace.warehouse.night_state import record_without
from synthtrace.warehouse.parts import read_part, schema_of
from synthtrace.warehouse.runs import check_runs_still_in, run_bursts, run_calls, run_folders, runs_table
from synthtrace.warehouse.stale_stages import MERGE_INVALIDATES
from synthtrace.warehouse.stored import stored_file

if TYPE_CHECKING:
    from synthtrace.tracelib.domain.machine import Machine
    from synthtrace.tracelib.merge.merge_runs import MergeOptions, MergeResult
    from synthtrace.warehouse.layout import Warehouse

#: the experiment's record: ``experiments/<name>/experiment.json``
RECORD = "experiment"
MERGED_FILE = "merged_bursts.parquet"
#: the files of an experiment's analysis (the archetypes stage), computed from its merged bursts (or its runs'):
#: a merge's commit removes them (attack 11 E2: a merge with another reference kept the old one's archetypes, and
#: export labelled the new bursts with them)
ANALYSIS_FILES = ("burst_metrics.parquet", "mpi_metrics.parquet", "phase_metrics.parquet", "archetypes.parquet",
                  "archetype_discovery.json")
#: the files the merge commits together
MERGE_FILES: tuple[str, ...] = ("merged_bursts", "merge_quality", "merge_matches")
#: the logical messages ingest stored (one row per message, both ends placed: what the merge works from)
LOGICAL_MESSAGES = "mpi_messages.parquet"
#: the trace's communication records (the merge numbers them into logical messages itself)
MESSAGE_RECORDS = "messages.parquet"
#: the members of the communicators the trace declares (COMMUNICATOR_SCHEMA); a run stored without it: none known
COMMUNICATORS = "communicators.parquet"


def message_table(run_dir: Path) -> Path | None:
    """The file the merge takes a stored run's messages from: its logical messages when ingest stored them with
    each receive's completing call (``c_call_seq``), else its communication records (runs ingested before the
    logical messages, or before their completing call, were kept: the merge numbers them again); None when the
    run has neither (the merge reads the messages from the calls). Only files the run's commit wrote
    (:func:`~synthtrace.warehouse.stored.stored_file`: one its manifest lists that is missing is damage)."""
    logical = stored_file(run_dir, LOGICAL_MESSAGES)
    if logical is not None and "c_call_seq" in schema_of(logical):
        return logical
    return stored_file(run_dir, MESSAGE_RECORDS)


def communicator_table(run_dir: Path) -> pl.DataFrame | None:
    """The members of a stored run's communicators (COMMUNICATOR_SCHEMA), None when it has none stored (a run
    ingested before they were kept, or whose trace declares none: the merge then compares communicator ids)."""
    path = stored_file(run_dir, COMMUNICATORS)
    return read_part(path) if path is not None else None


def merged_run_ids(folder: Path) -> set[str] | None:
    """The runs the merge stored in the experiment ``folder`` was computed from, as its record names them; None when
    it holds no merge, or one stored before the record named its runs."""
    if stored_file(folder, MERGED_FILE) is None:
        return None
    try:
        ids = read_record(folder / f"{RECORD}.json").get("run_ids")
    except (OSError, ValueError):
        return None
    return set(ids) if isinstance(ids, list) else None


@dataclass(frozen=True)
class MergeStamp:
    """Which merge an experiment's folder holds (:meth:`Experiment.merge_stamp`): whether it holds one, when it was
    committed (``experiment.json``'s ``merged_at``; None for a merge stored before the record) and the merged
    file's digest as its folder's manifest records it (None: stored before manifests). Two merges of the same runs
    differ in both."""

    merged: bool
    merged_at: str | None = None
    digest: str | None = None


@dataclass(frozen=True)
class ExperimentTrace:
    """An experiment's trace, read by :meth:`Experiment.trace`: the **merged** bursts with the MPI calls of the
    merge's reference run (the merged bursts are that run's bursts), or, before a merge, every **single run**'s own
    bursts and calls, told apart by ``run_id``. The frames are as stored; :meth:`labelled` adds what the analysis
    keys its outputs by."""

    experiment: str
    source: str  # "merged" | "runs"
    bursts: pl.DataFrame
    calls: pl.DataFrame | None  # None: no MPI calls
    reference_run_id: str | None = None  # merged: the run the bursts are of
    run_names: dict[str, str] = field(default_factory=dict)  # run_id -> run_name
    n_nodes: dict[str, int] = field(default_factory=dict)  # run_id -> nodes

    def labelled(self) -> ExperimentTrace:
        """The same trace with an ``experiment`` column on bursts and calls and, merged, ``run_id`` the
        reference run's on every burst (appended last)."""
        name = pl.lit(self.experiment).alias("experiment")
        bursts = self.bursts
        if self.source == "merged":
            bursts = bursts.drop("run_id", strict=False).with_columns(
                name, pl.lit(self.reference_run_id, pl.String).alias("run_id"))
        else:
            bursts = bursts.with_columns(name)
        calls = self.calls.with_columns(name) if self.calls is not None else None
        return replace(self, bursts=bursts, calls=calls)


class Experiment:
    """An experiment: its runs (sorted by run name, then id) as the runs table held them when it was opened."""

    def __init__(self, wh: Warehouse, name: str, runs: pl.DataFrame, known: Iterable[str] = (),
                 folders: dict[str, tuple[int, int]] | None = None):
        self.wh = wh
        self.name = name
        self.runs = runs
        self._known = sorted(known)
        self._folders = folders  # the run folders before the runs table was read (what a commit checks since)

    @classmethod
    def open(cls, wh: Warehouse, name: str) -> Experiment:
        """Read the runs table (once) and keep the runs of experiment ``name``."""
        folders = run_folders(wh)  # before the table: a run written in between is read again at the commit
        table = runs_table(wh)
        mine = table.filter(pl.col("experiment") == name).sort("run_name", "run_id")
        return cls(wh, name, mine, table.get_column("experiment").drop_nulls().unique().to_list(), folders)

    # ------------------------------------------------------------------ what it holds
    @property
    def dir(self) -> Path:
        """Its folder under ``experiments/`` (its name checked)."""
        return self.wh.experiment_dir(self.name)

    @property
    def run_ids(self) -> list[str]:
        return self.runs.get_column("run_id").to_list()

    @property
    def run_names(self) -> dict[str, str]:
        """run_id -> run_name."""
        return dict(zip(self.run_ids, self.runs.get_column("run_name").to_list()))

    @property
    def n_nodes(self) -> dict[str, int]:
        """run_id -> nodes of the runs that know it."""
        return {r: int(n) for r, n in zip(self.run_ids, self.runs.get_column("n_nodes").to_list()) if n is not None}

    @property
    def source_paths(self) -> list[Path]:
        """Where its runs' traces were read from (what a ``machine.toml`` is looked for beside)."""
        return [utf8_path(text) for text in self.runs.get_column("source_path").drop_nulls().to_list()]

    def machine(self, spec: str | None = None) -> Machine:
        """Its machine profile: ``spec`` (``--machine``: preset or TOML file) when given, else the ``machine.toml``
        beside its traces, else the default preset (:func:`~synthtrace.tracelib.domain.machine.resolve_machine`);
        ``Machine.label`` names it and where it came from."""
        from synthtrace.tracelib.domain.machine import resolve_machine

        return resolve_machine(spec, self.source_paths)

    @property
    def is_merged(self) -> bool:
        """Whether its merge is stored (its merged bursts listed in its folder's manifest and there; listed and
        missing is :class:`~synthtrace.warehouse.errors.DamagedPartError`)."""
        return stored_file(self.dir, MERGED_FILE) is not None

    def merge_stamp(self) -> MergeStamp:
        """Which merge it holds now: take it before reading what a commit is computed from, and give it to
        :meth:`commit` (``merge=``), which refuses if another merge was committed since."""
        if not self.is_merged:
            return MergeStamp(False)
        found = recorded(self.dir / MERGED_FILE)
        return MergeStamp(True, self.record().get("merged_at"), found.digest if isinstance(found, Recorded) else None)

    def runs_not_merged(self) -> list[str]:
        """Names of its runs its stored merge was not computed from (ingested into it since: attack 12 F9, a merge
        of 2 of its 3 runs was analysed and exported without a word); [] when not merged, or merged before the
        record named its runs."""
        merged = merged_run_ids(self.dir)
        return [] if merged is None else [name for rid, name in self.run_names.items() if rid not in merged]

    def merge_coverage_note(self) -> str | None:
        """One line for the readers of its merge (archetypes, export, report) when the merge leaves some of its
        runs out, naming them and the remedy; None when it covers them all or it is not merged."""
        missing = self.runs_not_merged()
        if not missing:
            return None
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return (f"experiment {self.name}: its merge does not cover {len(missing)} of its {len(self.run_ids)} runs "
                f"({shown}, added since it was merged): what is read is the merge of the others; run `synthtrace "
                f"merge {self.name}` to take them in")

    def require_runs(self) -> Experiment:
        """This experiment, after checking it has runs; raises :class:`UnknownExperimentError` naming the others."""
        if self.runs.height == 0:
            known = self._known
            raise UnknownExperimentError(f"no experiment {self.name!r} in {self.wh.root}"
                                         + (f" (experiments: {', '.join(known)})" if known else " (nothing ingested)"))
        return self

    def record(self) -> dict[str, Any]:
        """Its ``experiment.json`` ({} before its first merge, or when unreadable)."""
        try:
            return read_record(self.dir / f"{RECORD}.json")
        except (OSError, ValueError):
            return {}

    def reference_run_id(self, merged: pl.DataFrame | None = None) -> str | None:
        """The run whose bursts the merged trace keeps: as the merge recorded it; for a merge stored before the
        record existed, the one ``run_id`` of its merged bursts (``merged``), else the first run by name."""
        if ref := self.record().get("reference_run_id"):
            return ref
        if merged is not None and "run_id" in merged.columns and merged.get_column("run_id").n_unique() == 1:
            return merged.get_column("run_id")[0]
        return self.run_ids[0] if self.run_ids else None

    # ------------------------------------------------------------------ its tables
    def bursts(self, run_id: str, *, dram_from_uncore: bool = True) -> pl.DataFrame:
        """One run's bursts (see :func:`~synthtrace.warehouse.runs.run_bursts`)."""
        return run_bursts(self.wh, run_id, dram_from_uncore=dram_from_uncore)

    def calls(self, run_id: str) -> pl.DataFrame | None:
        """One run's MPI calls, or None when it has none."""
        return run_calls(self.wh, run_id)

    def trace(self, *, dram_from_uncore: bool = True) -> ExperimentTrace:
        """Its trace: merged when it was merged, else its runs' own bursts and calls (``dram_from_uncore``: with
        the ``DRAM_CAS`` column apportioned from uncore samples). Raises :class:`UnknownExperimentError` when it
        has neither, :class:`WarehouseError` when its runs have no computation bursts."""
        if self.is_merged:
            bursts = read_part(self.dir / MERGED_FILE)
            ref_id = self.reference_run_id(bursts)
            return ExperimentTrace(self.name, "merged", bursts, self.calls(ref_id) if ref_id else None, ref_id,
                                   self.run_names, self.n_nodes)
        self.require_runs()
        parts = [b for b in (self.bursts(r, dram_from_uncore=dram_from_uncore) for r in self.run_ids) if b.height]
        if not parts:
            raise WarehouseError(f"experiment {self.name!r}: its runs have no computation bursts")
        calls = [c for c in (self.calls(r) for r in self.run_ids) if c is not None and c.height]
        return ExperimentTrace(self.name, "runs", pl.concat(parts, how="diagonal_relaxed"),
                               pl.concat(calls, how="diagonal_relaxed") if calls else None, None,
                               self.run_names, self.n_nodes)

    def stored(self, name: str) -> pl.DataFrame | None:
        """One frame a stage committed (``<name>.parquet``), or None when that stage has not run."""
        f = stored_file(self.dir, f"{name}.parquet")
        return read_part(f) if f is not None else None

    # ------------------------------------------------------------------ committing
    def commit(self, frames: dict[str, pl.DataFrame], documents: dict[str, dict] | None = None, *,
               what: str = "it was computed", read: Iterable[str] | None = None, merge: MergeStamp | None = None,
               drop: Iterable[str] = (), again: str = "the command") -> Path:
        """Replace ``<name>.parquet`` per frame and ``<name>.json`` per document of the experiment folder, keeping
        its other files, in one atomic swap; returns the folder. ``read``: the run ids the frames were computed
        from (default: the experiment's runs when opened); if one left the experiment meanwhile, a run joined it
        since it was opened, or (``merge``: the merge the frames were computed from, taken by :meth:`merge_stamp`
        before reading) its merged data was removed or merged again, nothing is written (:class:`RunsChangedError`,
        saying ``while <what>`` and to run ``again`` again; attack 12 F6: an analysis of the merge a merge replaced
        while it ran was committed after it). ``drop``: files of the folder not kept."""
        run_ids = list(self.run_ids if read is None else read)

        def unchanged() -> None:
            check_runs_still_in(self.wh, self.name, run_ids, what, had=self.run_ids, folders=self._folders)
            if merge is None:
                return
            now = self.merge_stamp()
            if merge.merged and not now.merged:
                raise RunsChangedError(f"experiment {self.name!r}: its merged data was removed while {what} (its "
                                       "runs changed); nothing was committed: merge it again")
            if now != merge:
                raise RunsChangedError(f"experiment {self.name!r}: the merge changed while {what}; nothing was "
                                       f"committed: run {again} again")
        return self.wh.update_dir(self.dir, frames, documents, check=unchanged, drop=drop)

    def commit_merge(self, result: MergeResult, options: MergeOptions, read: Iterable[str]) -> Path:
        """Commit a merge (replacing any earlier one) with the experiment's record: the reference run and the
        options it was merged with, so that later stages read the reference, never guess it. The analysis of the
        earlier bursts goes with them (:data:`ANALYSIS_FILES`; the night record no longer counts its stage done)."""
        record = {"experiment": self.name, "reference_run_id": result.reference_run_id,
                  "reference_run": result.reference_run, "run_ids": sorted(read),
                  "merge_options": asdict(options), "merged_at": datetime.now(UTC).isoformat()}
        documents = {RECORD: record}
        if (night := record_without(self.dir, MERGE_INVALIDATES)) is not None:
            documents[NIGHT_RECORD] = night
        return self.commit({"merged_bursts": result.merged, "merge_quality": result.quality,
                            "merge_matches": result.matches}, documents, what="it merged", read=read,
                           drop=ANALYSIS_FILES)
