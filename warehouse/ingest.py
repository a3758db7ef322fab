"""Ingest one trace into the warehouse: atomic per run, idempotent by content hash (DESIGN §5, §11)."""
from __future__ import annotations

import contextlib
import itertools
import math
import os
import shlex  # [helper security]
import shutil
import warnings
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import polars as pl
import xxhash

from synthtrace.tracelib.errors import BadInputError, RecordsOutOfOrderError, TraceChangedError
from synthtrace.tracelib.formats.heap import release_free_heap
from synthtrace.tracelib.formats.part_source import lazy_parts
from synthtrace.tracelib.formats.row_order import stable_order
from synthtrace.tracelib.formats.source import (ContentHasher, ReadSummary, TraceSource, open_trace, stem_program,
                                                trace_stem)
from synthtrace.tracelib.schema import EVENT_SCHEMA, RUN_SCHEMA
from synthtrace.tracelib.formats.program import ProgramSymbols, program_symbols  # issue 28 (models helper)
from synthtrace.tracelib.printable import storable, unprintable, utf8_path, utf8_text
from synthtrace.warehouse.checksums import content_damage
from synthtrace.warehouse.errors import WarehouseError
from synthtrace.warehouse import folder_index
from synthtrace.warehouse.index_files import mark_file, not_linked
from synthtrace.warehouse.programs import (INDEX_COMPLETE, PROGRAM_INDEX, Program, choose_program, program_identity,
                                           program_keys, remember_program, shared_binary, shown_name, stored_programs)
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.experiment import COMMUNICATORS
from synthtrace.warehouse.names import (InvalidNameError, check_name, file_name, legacy_folder_names,
                                        name_from_folder, one_spelling)
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.stored import Folder, damaged_runs, refuse_foreign

RUN_ID_CHARS = 16  # hex characters of the xxh3-128 hash of the trace's files kept as run_id
#: how a run's big tables are written: zstd level 1 stores them as small as the default level 3 (within 0.5 % on
#: bursts and calls) for 20-25 % less CPU time; statistics let DuckDB skip row groups
TABLE_PARQUET = {"compression": "zstd", "compression_level": 1, "statistics": True}
#: a table of mpi_calls.parquet with more columns than this (thousands of counter types) is written by
#: :func:`_write_wide_calls`; a narrower one (every real trace) by Polars' sink, in Polars' own row groups
WIDE_CALLS_COLUMNS = 256
#: a wide calls table's row groups have about sqrt(this x calls) rows: what the writer holds is the row group's
#: cells (at most 8 bytes each: rows x columns x 8) plus ~1 KB of footer state per column chunk until the file
#: ends (groups x columns x 1 KB); their sum is least for groups of sqrt(calls x 1 KB / 8 B) rows, whatever the
#: width (issue 23: 1 M calls of 4,096 counter types, ~11,000-row groups)
CALL_GROUP_ROWS_PER_CALL = 128
#: up to this many point-to-point messages, their tables are written while the calls stream to Parquet
CONCURRENT_MESSAGES = 1_000_000
#: up to this many messages, mpi_messages.parquet is numbered at once; more are numbered and written
#: NUMBERED_SLICE of their time order at a time (issue 23: the whole numbered table, ~92 bytes a message, beside the
#: summary's messages and their ends, ~100 bytes a message, was the peak of a 2 GB OTF2 ingest). Below it the whole
#: numbering (~140 bytes a message at its peak) holds no more than the slices the sink takes ahead (about four)
NUMBERED_AT_ONCE = 1_000_000
NUMBERED_SLICE = 250_000


@dataclass
class IngestResult:
    """What happened to one trace."""

    path: Path
    run_id: str
    run_name: str
    experiment: str
    status: str  # "ingested" | "already" (also when a concurrent ingest of the same content committed first)
    n_bursts: int = 0
    n_mpi_calls: int = 0
    warnings: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # run_ids of the same trace ingested before its .pcf
    notes: list[str] = field(default_factory=list)  # what the user should know of the run's experiment


class RunConflictError(BadInputError):
    """A trace is already in the warehouse under another experiment or app than the one asked for."""


class RunStoreError(WarehouseError):
    """A run could not be written (disk full, quota, permissions); nothing was committed (exit code 2)."""

    exit_code = 2


def run_identity(source: TraceSource) -> str:
    """The run_id: a hash of the bytes of the trace's files (so renames and re-drops are recognised); see
    :class:`~synthtrace.tracelib.formats.source.ContentHasher`."""
    return ContentHasher.of_files(source.content_files())[:RUN_ID_CHARS]


class ContentId(NamedTuple):
    """A trace's run_id as hashed once (by the night's discovery), with its files' (size, mtime) then, as one digest
    (:func:`stat_digest`): an ingest trusts it while the files are unchanged since, so a night hashes each trace once
    (arch, issue 26 item 6)."""

    run_id: str
    signature: str


def content_id(source: TraceSource) -> ContentId:
    """The :class:`ContentId` of ``source`` now (its files stat'ed before they are hashed)."""
    signature = _stat_signature(source.content_files())
    return ContentId(run_identity(source), signature)


def default_names(path: Path, experiment: str | None, app: str | None) -> tuple[str, str, str]:
    """(run_name, app, experiment) per DESIGN §3: the trace's stem, the stem up to its first dot (leading dots aside:
    :func:`~synthtrace.tracelib.formats.source.stem_program`), the folder
    holding the trace (:func:`~synthtrace.warehouse.names.name_from_folder`). An OTF2 archive is a folder of its own
    (``<run>/traces.otf2``): its run name is that folder's name and its experiment the folder holding the archive.
    The run name is in Unicode NFC (attack 14 F9: ``runs rm café.run1`` typed did not find the run a Mac named)."""
    run_name, folder = _trace_names(path)
    run_name = one_spelling(run_name)
    return run_name, app or stem_program(run_name), experiment or name_from_folder(folder)


def _trace_names(path: Path) -> tuple[str, str]:
    """The run name and the name of the folder that names the experiment of the trace at ``path``, as its path
    spells them (:func:`default_names`)."""
    path = path.resolve()
    holder = path.parent
    run_name = trace_stem(path)
    if path.suffix == ".otf2":
        run_name, holder = (path.parent.name, path.parent.parent) if path.stem == "traces" else (path.stem, path.parent)
    return run_name, holder.name


def _older_folder_names(path: Path) -> list[str]:
    """The names older code filed the folder of the trace at ``path`` under in the folder index
    (:func:`~synthtrace.warehouse.names.legacy_folder_names`): looked up too, so that a folder already ingested
    keeps going to its experiment."""
    return legacy_folder_names(_trace_names(path)[1])


def _adopt_older_identity(stored: dict[str, str], identity: str, path: Path, key: str | None) -> None:
    """File under ``identity`` (a program identity as its file name) the experiment that ``stored`` (identity ->
    experiment, :func:`_folder_experiments`) holds under the identity older code gave the trace at ``path`` of
    program ``key``: without a key, its stem's app as its file name spells it, not NFC (attack 14 F9). A folder of
    such traces ingested before stays one program, in its experiment."""
    stem_app = _trace_names(path)[0].split(".")[0]
    older = None if key else file_name(stem_app)
    if older is not None and older != identity and older in stored and identity not in stored:
        stored[identity] = stored.pop(older)


def experiment_names(paths: list[Path], wh: Warehouse | None = None) -> tuple[dict[Path, str], list[str]]:
    """Default experiment of each trace, and a note per folder that holds traces of several programs.

    A folder of one program's runs is one experiment (named by the folder, DESIGN §3). Unrelated traces in one
    folder must not become one experiment (merge would mix programs): when a folder holds several programs, each
    program's traces become an experiment named by the program. A trace's program is what identifies it
    (:func:`~synthtrace.warehouse.programs.program_keys`: the binary Extrae's ``.pcf`` or Score-P's definitions
    name, matched by its symbols when many programs share that name, ``a.out``, ``python3``: attack 12 F4), else
    its stem up to the first dot; it is read only in a folder whose stems differ (attack 10 D7: runs of one binary
    named ``lulesh_4+4...`` and ``lulesh_7+1...`` were split), whose stem is such a shared name, or that earlier runs
    of ``wh`` came from. A trace goes where its folder's earlier runs of its program went, and their programs count
    among the folder's (attack 11 E6); they are matched by the program identity stored with each run, never by its
    app, a name ``--app`` may have chosen (attack 12 F11: the next run of the binary went to another experiment),
    and looked up in the index of their folder (:mod:`~synthtrace.warehouse.folder_index`), never the whole runs
    table (attack 12 F12). A trace that does not open (its ingest says why) counts for none.
    """
    named = {p: default_names(p, None, None) for p in paths}  # (run name, app from the stem, folder)
    stems = _apps_by_folder(named.values())
    older: dict[str, set[str]] = {folder: set() for folder in stems}  # folder -> the names older code gave it
    for p, (_, _, folder) in named.items():
        older[folder].update(_older_folder_names(p))
    earlier = _folder_experiments(wh, older) if wh is not None else {}
    opened = {p: _recorded_program(p) for p, (_, stem_app, folder) in named.items()
              if len(stems[folder]) > 1 or earlier.get(folder) or shared_binary(stem_app)}
    readable = [p for p, symbols in opened.items() if symbols is not None]
    keys = dict(zip(readable, program_keys(wh, [opened[p] for p in readable])))
    program: dict[Path, tuple[str, str, str]] = {}  # trace -> (identity's file name, shown name, folder)
    for p, (_, stem_app, folder) in named.items():
        if opened.get(p, True) is None:
            continue  # does not open: no program of the folder's
        symbols = opened.get(p)
        identity = file_name(program_identity(keys.get(p), stem_app))
        _adopt_older_identity(earlier.get(folder, {}), identity, p, keys.get(p))
        program[p] = (identity, shown_name(symbols, keys.get(p), stem_app), folder)
    programs: dict[str, dict[str, str]] = {}  # folder -> identity's file name -> its name in the note
    for identity, shown, folder in program.values():
        programs.setdefault(folder, {})[identity] = shown
    for folder, stored in earlier.items():
        for identity, experiment in stored.items():
            programs.setdefault(folder, {}).setdefault(identity, experiment)
    mixed = {folder: sorted(set(names.values())) for folder, names in programs.items() if len(names) > 1}
    notes = [f"folder {folder} holds traces of {len(programs[folder])} applications ({', '.join(names)}), told "
             "apart by the program each trace records: each becomes an experiment named by its program "
             "(--experiment NAME puts them all in one)" for folder, names in mixed.items()]
    out = {}
    for p, (_, stem_app, folder) in named.items():
        identity, shown, _ = program.get(p, (None, shown_name(None, None, stem_app), folder))
        out[p] = _placed_in(folder, identity, shown, earlier.get(folder, {}), folder in mixed)
    return out, notes


def _placed_in(folder: str, identity: str | None, shown: str, stored: dict[str, str], mixed: bool) -> str:
    """The default experiment of a trace from the folder that gives the name ``folder``, of program ``identity`` (as
    its file name) shown as ``shown`` (:func:`~synthtrace.warehouse.programs.shown_name`), where ``stored`` (identity
    -> experiment) says where the folder's earlier runs went: with its program's earlier runs; else, in a folder of
    several programs (``mixed``), one named by its program; else the folder's (:func:`experiment_names`)."""
    return stored.get(identity or "") or (shown if mixed else folder)


def _folder_experiments(wh: Warehouse, folders: Mapping[str, Collection[str]]) -> dict[str, dict[str, str]]:
    """Trace folder name -> program identity (as its file name) -> the experiment of its first stored run (by run
    id) from that folder, for each of ``folders`` (folder name -> the names older code gave it, looked up after it,
    :func:`~synthtrace.warehouse.names.legacy_folder_names`): from the index
    (:mod:`~synthtrace.warehouse.folder_index`), a run read per program, an entry whose run is gone skipped (nothing
    written: a refused ingest changes nothing), a damaged run skipped (its ingest replaces it); from the runs table
    while the warehouse is not indexed yet (written before the index: its next commit indexes it)."""
    out: dict[str, dict[str, str]] = {}
    if not wh.runs_dir.is_dir():
        return out
    if not folder_index.complete(wh):
        for folder, identity, _, experiment in _placed_runs(wh):
            if folder in folders:
                out.setdefault(folder, {}).setdefault(file_name(identity), experiment)
        return out
    for folder, older in folders.items():
        for key in (folder, *sorted(older)):
            for program, run_ids in folder_index.folder_runs(wh, key).items():
                for run_id in run_ids if program not in out.get(folder, {}) else ():
                    if (row := existing_run(wh, run_id)) is not None:
                        out.setdefault(folder, {})[program] = row["experiment"]
                        break
    return out


def _placed_runs(wh: Warehouse) -> Iterator[tuple[str, str, str, str]]:
    """(trace folder name, program identity, run id, experiment) of every stored run, by run id, from the runs table
    and each run's ``program.json`` (a run stored before those files is known by its app, as the rule then was):
    reads every stored run, only for a warehouse written before the folder index."""
    stored = stored_programs(wh)
    runs = runs_table(wh, leave_out=damaged_runs(wh.root))  # a damaged run is replaced by its ingest, not read
    for run_id, run_name, app_name, source, experiment in runs.sort("run_id").select(
            "run_id", "run_name", "app", "source_path", "experiment").iter_rows():
        if source and experiment:
            stem = stem_program(run_name)
            identity = (program_identity(stored[run_id].get("key"), stem) if run_id in stored
                        else program_identity(None, app_name or stem))
            yield default_names(utf8_path(source), None, None)[2], identity, run_id, experiment


def _index_folders(wh: Warehouse) -> None:
    """Index every stored run by its trace folder and program (:mod:`~synthtrace.warehouse.folder_index`): once, at
    the first commit into a warehouse written before the index."""
    for folder, identity, run_id, _ in _placed_runs(wh):
        folder_index.remember(wh, folder, identity, run_id)
    folder_index.mark_complete(wh)


def _apps_by_folder(names: Iterable[tuple[str, str, str]]) -> dict[str, set[str]]:
    """Folder -> the apps of its traces, from (run_name, app, folder) triples (:func:`default_names`)."""
    folders: dict[str, set[str]] = {}
    for _, app_name, folder in names:
        folders.setdefault(folder, set()).add(app_name)
    return folders


def _recorded_program(path: Path) -> ProgramSymbols | None:
    """What the trace at ``path`` records of its program (:func:`~synthtrace.tracelib.formats.program.
    program_symbols`; without a binary when that cannot be read); None when it does not open (it is named by its
    stem; its ingest reports why)."""
    try:
        source = open_trace(path)
    except Exception:
        return None
    try:
        return program_symbols(source)
    except Exception:
        return ProgramSymbols(None, frozenset())


class PartWriter:
    """Writes Parquet parts of a run being staged, in one background thread (Polars releases the GIL while it
    encodes) so the reading thread goes on with the next chunk. At most ``backlog`` frames wait (bounded memory);
    a failed write is raised by the next :meth:`write` or by :meth:`close`. ``background=False`` writes inline."""

    def __init__(self, backlog: int = 3, background: bool = True):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="synthtrace-part-writer") if background else None
        self._pending: deque[Future] = deque()
        self._backlog = backlog

    def write(self, frame: pl.DataFrame, path: Path, **options) -> None:
        self.submit(frame.write_parquet, path, **options)

    def submit(self, fn: Callable[..., object], *args, **kwargs) -> None:
        """Run ``fn(*args, **kwargs)`` in the writer's thread (inline without one), after the writes before it."""
        if self._pool is None:
            fn(*args, **kwargs)
            return
        while len(self._pending) >= self._backlog:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, *args, **kwargs))

    def close(self) -> None:
        """Wait for every write; raise the first failure."""
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        for f in self._pending:  # the staging folder is about to go: let the writes end, their errors matter less
            f.exception()
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def existing_run(wh: Warehouse, run_id: str) -> dict | None:
    """The stored runs row of ``run_id``; None when there is none, when its folder is none a reader reads (a link,
    a copy, an incomplete commit: :func:`~synthtrace.warehouse.stored.judge`; attack 18 F5: a linked run was
    "already ingested" and read nowhere; the writer then refuses a link or a copy, and replaces an incomplete
    commit) or when its ``run.parquet`` is damaged (the run is then ingested again, replacing the damaged
    directory)."""
    f = wh.run_dir(run_id) / "run.parquet"
    if not f.is_file() or not Folder.at(f.parent).lists(f.name):
        return None
    try:
        if content_damage(f) is not None:  # [helper integrity] issue 23: damaged though it decodes
            return None
        return pl.read_parquet(f, glob=False).row(0, named=True)
    except (OSError, pl.exceptions.PolarsError, IndexError):
        return None


#: where the runs ingested without their ``.pcf`` are indexed by source path (``<key>/<run_id>``, empty files), so
#: that a later ingest of the same trace with its ``.pcf`` finds the runs it replaces without reading every stored run
WITHOUT_PCF_INDEX = Path(".index") / "without_pcf"
#: the file in :data:`WITHOUT_PCF_INDEX` saying that every stored run is in it (a warehouse written before the index
#: is indexed once, when it is missing)
WITHOUT_PCF_COMPLETE = WITHOUT_PCF_INDEX / ".complete"


def _runs_without_pcf(wh: Warehouse, source: TraceSource, path: Path, run_id: str) -> list[str]:
    """Runs of this very trace ingested before its ``.pcf`` was beside it (same source path and .prv/.row bytes,
    no .pcf then): the run ``run_id``, just committed from it, supersedes them. Called after the commit: a run
    committed without a .pcf is indexed instead. Cost independent of the number of stored runs (one folder of the
    index per source path; an index missing from an older warehouse is built once)."""
    files = source.content_files()
    if source.format != "paraver":
        return []
    src = source_text(path)
    entry = not_linked(wh, _without_pcf_index(wh) / _source_key(src))
    if not any(f.suffix == ".pcf" for f in files):
        mark_file(wh, entry, run_id)
        return []
    size_without_pcf = sum(f.stat().st_size for f in files if f.suffix != ".pcf")
    found = []
    for old in sorted(entry.iterdir()) if entry.is_dir() else []:
        row = existing_run(wh, old.name) if old.name != run_id else None
        if (row and row["source_path"] == src and row["source_bytes"] == size_without_pcf
                and any("no .pcf file" in w for w in row["warnings"] or [])):
            found.append(row["run_id"])
        elif row is None:  # removed or moved away since: forget it
            old.unlink(missing_ok=True)
    return found


def source_text(path: Path) -> str:
    """The resolved path of the trace at ``path`` as its run's ``source_path`` stores it: a byte of a folder's name
    that is not UTF-8 (a cluster's folder named in Latin-1) as ``\\xNN``, as ``ls -b`` shows it (Parquet holds
    UTF-8 text only: attack 19 F1), a backslash as ``\\\\`` (one path, one text: attack 20 F3;
    :func:`~synthtrace.tracelib.printable.utf8_text`); every other character as it is (a terminal is shown it
    escaped: the CLI's outputs)."""
    return utf8_text(os.fsencode(path.resolve()))


def _source_key(source_path: str) -> str:
    """The index key of a trace's ``source_path`` (:func:`source_text`; a hash: paths may be long or hold any
    character)."""
    return xxhash.xxh3_64_hexdigest(source_path.encode())


def _without_pcf_index(wh: Warehouse) -> Path:
    """The folder of :data:`WITHOUT_PCF_INDEX`; a warehouse written before it existed is indexed once (every run
    whose row says it was read without a .pcf)."""
    index, complete = wh.root / WITHOUT_PCF_INDEX, wh.root / WITHOUT_PCF_COMPLETE
    if not complete.is_file():
        for run_file in wh.runs_dir.glob("*/run.parquet"):
            row = existing_run(wh, run_file.parent.name)
            if row and row["source_path"] and any("no .pcf file" in w for w in row["warnings"] or []):
                mark_file(wh, index / _source_key(row["source_path"]), row["run_id"])
        mark_file(wh, index, complete.name)
    return not_linked(wh, index)


def _check_same_place(row: dict, experiment: str | None, app: str | None, path: Path) -> None:
    """An explicit ``--experiment``/``--app`` that differs from where the trace already is: refuse, saying how to
    move the run (silently ignoring the request would leave the user's experiment without it)."""
    asked = {"experiment": experiment, "app": app}
    for key, value in asked.items():
        if value is not None and value != row[key]:
            raise RunConflictError(
                f"{path}: already ingested as {row['run_name']} (run {row['run_id']}) in {key} {row[key]!r}, not "
                f"{value!r}; to move it: synthtrace runs move {row['run_id']} --{key} "
                f"{shlex.quote(value)}")  # [helper security] a name with a blank or a quote, pasted into a shell


def stat_digest(entries: Iterable[tuple[str | int, ...]]) -> str:
    """One digest of files' stat entries (size, mtime in ns, ...), in order: equal digests mean unchanged files. 32
    characters however many files: it travels in a night's task parameters, where the entries of a 10k-rank OTF2
    archive (20k files) passed Prefect's limit on a flow's parameters (attack 22 F3)."""
    digest = xxhash.xxh3_128()
    for entry in entries:
        digest.update(repr(tuple(entry)).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _stat_signature(files: list[Path]) -> str:
    return stat_digest((st.st_size, st.st_mtime_ns) for st in map(Path.stat, files))


def ingest_trace(wh: Warehouse, path: str | Path, *, experiment: str | None = None, app: str | None = None,
                 date: datetime | None = None, salvage: bool = False,
                 progress: Callable[[int], None] | None = None,
                 default_experiment: str | None = None, known: ContentId | None = None) -> IngestResult:
    """Read a trace and commit it as one run directory. Re-ingesting the same content does nothing.

    ``experiment`` is the user's choice (a trace already in another experiment is refused); without it the run
    goes to ``default_experiment`` (see :func:`experiment_names`), else to the folder holding the trace.

    Raises :class:`~synthtrace.tracelib.errors.TraceFormatError` for a broken trace (and
    :class:`~synthtrace.tracelib.errors.TraceChangedError` for one that changed while it was read: the run
    stored is always the content its run_id names), :class:`RunConflictError` when the trace is already in
    another experiment than ``experiment``; the warehouse is then unchanged. ``known``: the trace's id as discovery
    hashed it, used instead of hashing the files again while they are unchanged since.
    """
    path, app = Path(path), None if app is None else one_spelling(app)  # as --app is (a Mac's NFD name, tidy16)
    source = open_trace(path, salvage=salvage)
    signature = _stat_signature(source.content_files())
    trusted = known is not None and known.signature == signature
    run_id = known.run_id if trusted else run_identity(source)
    run_name, app_name, exp_name = default_names(path, experiment or default_experiment, app)
    program = choose_program(wh, program_symbols(source))  # issue 28 (models helper): program identity ...
    app_name = app or program.app or app_name  # ... is the default app: runs of one binary are one app
    exp_name = check_name(exp_name)  # NFC: a folder a Mac named gives the name typed on Linux
    refuse_foreign(wh.experiment_dir(exp_name), "nothing was ingested")  # attack 11 E1: its writers would adopt it
    if (what := unprintable(run_name)) is not None:  # a newline or an escape sequence would forge output lines
        raise InvalidNameError(f"{str(path)!r}: the trace's name holds {what}; rename the file")
    if not run_name.replace(".", "").strip():  # attack 16: ``..prv``, `` .prv``: a blank run and app name
        raise InvalidNameError(f"{str(path)!r}: the trace's name is blank (nothing but dots and blanks before its "
                               "suffix); rename the file")
    wh.ensure()
    if (row := existing_run(wh, run_id)) is not None:
        _check_same_place(row, experiment, app, path)
        return IngestResult(path, run_id, row["run_name"], row["experiment"], "already",
                            row["n_bursts"], row["n_mpi_calls"])
    ingested_at = datetime.now(UTC)
    _, stem_app, folder = default_names(path, None, None)
    placed = (folder, program_identity(program.key, stem_app), run_id)  # attack 12 F11/F12: its folder's index
    plan = _Placement(path, run_id, ingested_at, folder, _older_folder_names(path), stem_app, program, app_name,
                      exp_name, chosen=experiment is not None, app_chosen=app is not None, indexed=placed[1])
    try:
        with (folder_index.committing(wh, *placed),
              wh.staged(wh.run_dir(run_id), replace=wh.run_dir(run_id).exists(),
                        commit=lambda stage: plan.decided_at_commit(wh, stage)) as stage):
            reported = _Reported(progress)
            try:
                summary = _write_run(source, run_id, stage, reported)
            except RecordsOutOfOrderError as exc:  # Paraver sorts such a trace on load: so do we, from scratch
                for entry in stage.iterdir():
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
                source = source.time_sorted(exc)
                summary = _write_run(source, run_id, stage, reported.again())
            if (summary.content_hash or run_id)[:RUN_ID_CHARS] != run_id or \
                    _stat_signature(source.content_files()) != signature:
                raise TraceChangedError(path, None, "the trace changed while it was read (a job still writing it, a "
                                        "copy in progress?); nothing stored: ingest it again once it is complete")
            program.write(stage)  # issue 28 (models helper): the run's program, for unseen-program folds
            res = source.resources
            plan.row = {
                "run_id": run_id,
                "run_name": run_name,
                "experiment": exp_name,
                "app": app_name,
                "started_at": date or source.started_at,
                "format": source.format,
                "source_path": source_text(path),
                "source_bytes": sum(f.stat().st_size for f in source.content_files()),
                "n_appl": res["n_appl"],
                "n_tasks": res["n_tasks"],
                "n_threads": res["n_threads"],
                "n_nodes": res["n_nodes"],
                "duration_ns": res["duration_ns"],
                "counters": summary.counters,
                "n_bursts": summary.n_bursts,
                "n_mpi_calls": summary.n_calls,
                "warnings": summary.warnings,
                "ingested_at": ingested_at,
            }
            plan.write_row(stage)
    except (OSError, pl.exceptions.ComputeError) as exc:  # disk full, quota, permissions: nothing was committed
        reason = getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0]
        raise RunStoreError(
            f"{wh.root}: cannot store the run of {path} ({reason}); the warehouse is unchanged"
        ) from None
    row = existing_run(wh, run_id)
    exp_name = plan.experiment
    if not _ours(row, ingested_at):
        # another ingest of the same content committed first: it is that one's run, refused as when that one had
        # finished before this one began (attack 8 B4: a racing ingest into another experiment said "already", exit 0)
        if row is not None:
            _check_same_place(row, experiment, app, path)
        return IngestResult(path, run_id, row["run_name"] if row else run_name, row["experiment"] if row else exp_name,
                            "already", summary.n_bursts, summary.n_calls)
    try:
        superseded = _runs_without_pcf(wh, source, path, run_id)
    except (OSError, MemoryError) as exc:  # attack 16 F5, attack 20 F8: the run is stored; this was "error: ..."
        superseded = []
        _unindexed(wh, path, run_id, exp_name, exc)
    for old in superseded:
        wh.remove(wh.run_dir(old))
        (wh.root / WITHOUT_PCF_INDEX / _source_key(source_text(path)) / old).unlink(missing_ok=True)
    return IngestResult(path, run_id, run_name, exp_name, "ingested", summary.n_bursts, summary.n_calls,
                        list(summary.warnings), superseded, [*plan.notes, *_merge_notes(wh, exp_name, run_id)])


def _ours(row: dict | None, ingested_at: datetime) -> bool:
    """Whether the stored runs ``row`` is the one this ingest, begun at ``ingested_at``, committed (not a concurrent
    ingest's of the same content)."""
    return row is not None and row["ingested_at"] in (ingested_at.replace(tzinfo=None), ingested_at)


#: the runs row's columns that hold a list of texts
_TEXT_LISTS = ("counters", "warnings")


@dataclass
class _Placement:
    """Where an ingest puts its run: its program, app and experiment, chosen before the trace is read and decided
    again at the commit (:meth:`decided_at_commit`), with the runs committed meanwhile in view."""

    path: Path
    run_id: str
    ingested_at: datetime
    folder: str  # the name of the trace's folder, as the folder index keys it
    older: list[str]  # the names older code indexed that folder under (names.legacy_folder_names)
    stem_app: str  # the app the trace's file name gives
    program: Program
    app: str
    experiment: str
    chosen: bool  # --experiment given: the experiment is the user's
    app_chosen: bool  # --app given
    indexed: str  # the program identity its folder's entry was written under before the commit
    row: dict = field(default_factory=dict)  # the runs row staged
    notes: list[str] = field(default_factory=list)

    def write_row(self, stage: Path) -> None:
        """Stage the runs row, every text in it as a stored table holds it (a reader's warning quoting a path whose
        folder is not UTF-8 raised UnicodeEncodeError: attack 20 F1)."""
        row = {k: [storable(t) for t in v] if k in _TEXT_LISTS and v is not None else
               storable(v) if isinstance(v, str) else v for k, v in self.row.items()}
        pl.DataFrame([row], schema=RUN_SCHEMA).write_parquet(stage / "run.parquet")

    @contextlib.contextmanager
    def decided_at_commit(self, wh: Warehouse, stage: Path) -> Iterator[bool]:
        """The commit of the run staged in ``stage`` (:meth:`Warehouse.staged`'s ``commit``), under the folder index's
        writers' lock, held until the run is indexed: its program, app and default experiment are chosen again as
        they would be had every run committed so far been there when the ingest began. Two ingests of two programs
        from one folder at the same moment each chose the folder's experiment before the other had committed, and
        landed in one (attack 13 F5): the second to commit now sees the first's program, and goes apart as it would
        after it. Yields whether the staged run changed (its ``run.parquet``, ``program.json``)."""
        with wh.writers_lock(folder_index.index_root(wh)):
            changed = self._decide_again(wh, stage)
            yield changed
            if _ours(existing_run(wh, self.run_id), self.ingested_at):
                try:
                    self._index(wh)
                except (OSError, MemoryError) as exc:  # attack 16 F5, 20 F8: committed, so never said failed
                    _unindexed(wh, self.path, self.run_id, self.experiment, exc)

    def _decide_again(self, wh: Warehouse, stage: Path) -> bool:
        """Choose the program, app and experiment again (the rules of :func:`~synthtrace.warehouse.programs.
        choose_program` and :func:`experiment_names`, with the runs now stored); rewrite what changed in ``stage``."""
        with warnings.catch_warnings(record=True) as said:  # said already at the first choice, unless it changes
            warnings.simplefilter("always")
            program = choose_program(wh, self.program.symbols)
        app = self.app if self.app_chosen else program.app or self.stem_app
        experiment, why = (self.experiment, "") if self.chosen else self._default_experiment(wh, program)
        if (program.key, app, experiment) == (self.program.key, self.app, self.experiment):
            return False
        if app != self.app:
            for w in said:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if experiment != self.experiment:
            experiment = check_name(experiment)
            refuse_foreign(wh.experiment_dir(experiment), "nothing was ingested")
            self.notes.append(f"{self.path}: while it was read, {why}: it goes to experiment {experiment} "
                              "(--experiment NAME chooses one)")
        if program.key != self.program.key:
            program.write(stage)
        self.program, self.app, self.experiment = program, app, experiment
        self.row.update(app=app, experiment=experiment)
        self.write_row(stage)
        return True

    def _default_experiment(self, wh: Warehouse, program: Program) -> tuple[str, str]:
        """The experiment :func:`experiment_names` gives the trace now: where its folder's stored runs of its program
        went; else, when the folder's stored runs are of other programs, one named by its program, unless it was
        placed apart from the folder's name already. With what, stored meanwhile, decides it (for its note)."""
        stored = _folder_experiments(wh, {self.folder: self.older}).get(self.folder, {})
        identity = file_name(program_identity(program.key, self.stem_app))
        _adopt_older_identity(stored, identity, self.path, program.key)
        placed = _placed_in(self.folder, identity, shown_name(self.program.symbols, program.key, self.stem_app),
                            stored, mixed=bool(stored))
        if identity in stored:
            return placed, f"runs of its program from a folder named {self.folder} were stored in experiment {placed}"
        if stored and self.experiment == check_name(self.folder):
            others = ", ".join(sorted(set(stored.values())))
            return placed, (f"runs of another program from a folder named {self.folder} were stored (experiment "
                            f"{others}), and a folder of several programs gives an experiment per program, named by "
                            "it")
        return self.experiment, ""

    def _index(self, wh: Warehouse) -> None:
        """Index the run just committed: its program (:func:`~synthtrace.warehouse.programs.remember_program`) and
        its folder's entry under the program decided at the commit (the entry written before it, when the program
        changed, goes); a warehouse written before the folder index is indexed whole, once."""
        remember_program(wh, self.program, self.run_id)  # issue 26 item 6: the next ingest matches it, no scan
        if not folder_index.complete(wh):  # the first commit into a warehouse written before the index (or a new one)
            _index_folders(wh)
            return
        identity = program_identity(self.program.key, self.stem_app)
        folder_index.remember(wh, self.folder, identity, self.run_id)
        if self.indexed != identity:
            folder_index.forget(wh, self.folder, file_name(self.indexed), self.run_id)


def _unindexed(wh: Warehouse, path: Path, run_id: str, experiment: str, exc: OSError | MemoryError) -> None:
    """Say that run ``run_id``, committed, is stored though the indexes written after its commit (folders, programs,
    runs read without a .pcf) could not be (a full disk or inode table: attack 16 F5 said "the warehouse is
    unchanged", or gave a bare path, while the run was there; memory running out: attack 20 F8 said "error: out of
    memory", exit 1, the run stored whole and unindexed); their completeness marks go, so the next ingest rebuilds
    them from the stored runs, this one with them (removing a file needs no space)."""
    for mark in (folder_index.index_root(wh) / folder_index.COMPLETE, wh.root / PROGRAM_INDEX / INDEX_COMPLETE,
                 wh.root / WITHOUT_PCF_COMPLETE):
        with contextlib.suppress(OSError):  # never through a link (attack 20 F5): a file of its target is not ours
            not_linked(wh, mark.parent)
            mark.unlink(missing_ok=True)
    reason = "out of memory" if isinstance(exc, MemoryError) else exc.strerror or str(exc)
    warnings.warn(f"{path}: stored as run {run_id} (experiment {experiment}), but the warehouse's indexes could not "
                  f"be written after it ({reason}): the next ingest rebuilds them from the stored runs", stacklevel=3)


def _merge_notes(wh: Warehouse, experiment: str, run_id: str) -> list[str]:
    """The note for a run ingested into an experiment merged without it (attack 12 F9: its merge was then analysed
    and exported without a word; the night merges it again, a user must be told)."""
    from synthtrace.warehouse.experiment import merged_run_ids

    try:
        merged = merged_run_ids(wh.experiment_dir(experiment))
    except WarehouseError:  # a damaged merge: its readers say so
        return []
    if merged is None or run_id in merged:
        return []
    return [f"experiment {experiment} was merged without this run: run `synthtrace merge {experiment}` to take it in"]


class _Reported:
    """A progress callback (bytes consumed) that, over a second pass of the same trace, reports only the bytes
    beyond those the first pass reported, so that a bar reaches its end once."""

    def __init__(self, progress: Callable[[int], None] | None):
        self.progress, self.total, self.skip = progress, 0, 0

    def __call__(self, n_bytes: int) -> None:
        if self.progress is None:
            return
        used = min(n_bytes, self.skip)
        self.skip -= used
        if n_bytes > used:
            self.total += n_bytes - used
            self.progress(n_bytes - used)

    def again(self) -> _Reported:
        self.skip = self.total
        return self


def _write_logical_messages(stage: Path, run_id: str, summary: ReadSummary) -> None:
    """mpi_messages.parquet: one row per point-to-point message with its logical identity and both ends' thread,
    call_seq and time (:func:`synthtrace.tracelib.merge.messages.logical_messages`): from the ends the reader placed
    in their calls (issue 27: once, for the calls' message columns too; more than :data:`NUMBERED_AT_ONCE`
    messages a slice at a time, :func:`_numbered_in_slices`), else from the stored calls (then after
    mpi_calls.parquet is written)."""
    from synthtrace.tracelib.merge.messages import CALL_COLUMNS, logical_messages, logical_messages_at

    if summary.message_ends is None:
        calls = pl.read_parquet(stage / "mpi_calls.parquet", columns=list(CALL_COLUMNS), glob=False)
        logical = logical_messages(calls, summary.messages, from_run_start=False).lazy()  # numbered so when read
    elif summary.messages.height > NUMBERED_AT_ONCE:
        logical = _numbered_in_slices(summary.messages, summary.message_ends)
    else:
        logical = logical_messages_at(summary.messages, summary.message_ends).lazy()
    # streamed by row groups: an eager write of a 2 GB trace's 2.7 M messages held their encoded pages too (issue 27)
    logical.select(pl.lit(run_id).alias("run_id"), pl.all()).sink_parquet(stage / "mpi_messages.parquet",
                                                                          **TABLE_PARQUET)


def _numbered_in_slices(messages: pl.DataFrame, ends: pl.DataFrame) -> pl.LazyFrame:
    """:func:`~synthtrace.tracelib.merge.messages.logical_messages_at` of ``messages`` and their ``ends``, the
    same rows in the same order, as a lazy source that numbers :data:`NUMBERED_SLICE` messages at a time (issue
    23): the slices are consecutive runs of the numbering's order (send time, then receive time, NULLs last, ties
    in the messages' order), so each slice comes out of it in the order it went in, and a message's ``k`` is its
    rank in its channel within its slice plus the messages its channel had in the slices before (one row per
    channel carried from slice to slice)."""
    from synthtrace.tracelib.merge.messages import CHANNEL, LOGICAL_MESSAGE_SCHEMA, logical_messages_at

    order = stable_order(messages, ["s_time_ns", "r_time_ns"])  # _numbered's order

    def slices() -> Iterator[pl.DataFrame]:
        before = pl.DataFrame(schema={**{c: LOGICAL_MESSAGE_SCHEMA[c] for c in CHANNEL}, "_n": pl.Int64})
        for at in range(0, order.size, NUMBERED_SLICE):
            rows = order[at: at + NUMBERED_SLICE]
            part = logical_messages_at(messages[rows], ends[rows])
            part = (part.join(before, on=CHANNEL, how="left", nulls_equal=True, maintain_order="left")
                    .with_columns(pl.col("k") + pl.col("_n").fill_null(0)).drop("_n"))
            counts = part.group_by(CHANNEL).agg(pl.len().cast(pl.Int64).alias("_n"))
            before = pl.concat([before, counts]).group_by(CHANNEL).agg(pl.col("_n").sum())
            yield part

    return lazy_parts(slices, LOGICAL_MESSAGE_SCHEMA)


def _write_message_tables(writer: PartWriter, stage: Path, run_id: str, summary: ReadSummary) -> None:
    """messages.parquet (pop, issue 25: the point-to-point messages the replay pairs calls by) and, when the reader
    placed their ends in calls, mpi_messages.parquet (merge-core, issue 22: the mpi_messages view), by ``writer``."""
    if not summary.messages.height:
        return
    writer.write(summary.messages, stage / "messages.parquet", **TABLE_PARQUET)
    if summary.n_calls and summary.message_ends is not None:
        writer.submit(_write_logical_messages, stage, run_id, summary)


def _sink_calls(calls: pl.LazyFrame, path: Path, n_calls: int) -> None:
    """mpi_calls.parquet from the ``n_calls`` calls' lazy source, streamed: by Polars' sink, or by
    :func:`_write_wide_calls` when the table has more than :data:`WIDE_CALLS_COLUMNS` columns."""
    if len(calls.collect_schema()) > WIDE_CALLS_COLUMNS:
        _write_wide_calls(calls, path, max(1, math.isqrt(CALL_GROUP_ROWS_PER_CALL * n_calls)))
    else:
        calls.sink_parquet(path, **TABLE_PARQUET)


def _write_wide_calls(calls: pl.LazyFrame, path: Path, rows: int) -> None:
    """The calls' table, of thousands of columns, written to ``path`` with :data:`TABLE_PARQUET`'s compression and
    statistics in row groups of ``rows`` rows, by pyarrow's writer (:func:`~synthtrace.tracelib.merge.blocks.
    written`): Polars 2.1's sink keeps ~4 KB of footer state per column chunk until the file ends (issue 23: 1 M
    calls x 4,115 columns in 62 row groups, ~1 GB), pyarrow's ~0.8 KB. A column NULL throughout a part of the source
    is one shared NULL array, not a dense one."""
    import pyarrow as pa

    from synthtrace.tracelib.merge.blocks import written

    schema = pl.DataFrame(schema=calls.collect_schema()).to_arrow().schema
    nulls: dict[tuple[int, pa.DataType], pa.Array] = {}

    def null_column(n: int, kind: pa.DataType) -> pa.Array:
        if (n, kind) not in nulls:
            nulls[n, kind] = pa.nulls(n, kind)
        return nulls[n, kind]

    def arrow(part: pl.DataFrame) -> pa.Table:
        empty = {c for c, n in zip(part.columns, part.null_count().row(0)) if n == part.height}
        present = part.drop(empty).to_arrow()
        return pa.Table.from_arrays([null_column(part.height, f.type) if f.name in empty
                                     else present.column(f.name) for f in schema], schema=schema)

    written((arrow(part) for part in calls.collect_batches()), path, rows,
            compression=TABLE_PARQUET["compression"], compression_level=TABLE_PARQUET["compression_level"],
            write_statistics=TABLE_PARQUET["statistics"])


def _write_run(source: TraceSource, run_id: str, stage: Path,
               progress: Callable[[int], None] | None) -> ReadSummary:
    """Read ``source`` into the staging directory of its run: bursts, uncore and events parts as they come, then
    mpi_calls.parquet (streamed from the calls the reader spilled under ``_calls/``, messages attached) and
    messages.parquet (the communication records, MESSAGE_SCHEMA)."""
    tables = ("bursts", "uncore", "events")
    for sub in tables:
        (stage / sub).mkdir()
    stream = source.read(run_id, progress=progress, spill=stage / "_calls")
    with PartWriter() as writer:
        numbers = {table: itertools.count() for table in tables}
        for part in stream:
            writer.write(part.frame, stage / part.table / f"part-{next(numbers[part.table]):05d}.parquet",
                         **TABLE_PARQUET)
    summary = stream.summary
    del stream  # from here on the summary is the one holder of the calls, released once they are written
    if summary.messages.height <= CONCURRENT_MESSAGES:  # the messages' tables in a second thread meanwhile
        with PartWriter() as writer:
            _write_message_tables(writer, stage, run_id, summary)
            if summary.n_calls:
                _sink_calls(summary.calls, stage / "mpi_calls.parquet", summary.n_calls)
    else:  # many messages: one table at a time, the calls first, whose per-call message columns (about 40 bytes
        # per call) are then released before the messages are numbered (issue 27: memory of a 2 GB trace)
        if summary.n_calls:
            _sink_calls(summary.calls, stage / "mpi_calls.parquet", summary.n_calls)
        summary = replace(summary, calls=pl.LazyFrame())
        release_free_heap()  # what writing the calls freed, before the messages are numbered
        with PartWriter(background=False) as writer:
            _write_message_tables(writer, stage, run_id, summary)
    if summary.messages.height and summary.n_calls and summary.message_ends is None:
        _write_logical_messages(stage, run_id, summary)
    shutil.rmtree(stage / "_calls")
    if summary.n_uncore:  # memory-controller samples: per-burst DRAM traffic is derived on read
        summary.thread_nodes.write_parquet(stage / "threads.parquet")
    else:
        (stage / "uncore").rmdir()
    # events and counter_anomalies are written even when empty: their views then bind files, and `sql`/`runs`
    # never build an empty view's types through polars (the fast path imports no frame library)
    if not summary.n_events:
        pl.DataFrame(schema=EVENT_SCHEMA).write_parquet(stage / "events" / "part-00000.parquet")
    summary.anomalies.write_parquet(stage / "counter_anomalies.parquet")
    if summary.communicators.height:  # the merge maps communicators across runs by them (ids are per-run handles)
        summary.communicators.write_parquet(stage / COMMUNICATORS)
    return summary
