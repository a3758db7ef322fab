"""Program identity of the warehouse's runs (issue 28 item 3): runs of one program are one program whatever their
file names or scales.

At ingest a run's :class:`~synthtrace.tracelib.formats.program.ProgramSymbols` (its binary and its own symbols) are
compared with the programs already in the warehouse:

- the same binary name is the same program, a different binary name a different one;
- without a binary name, or with one that many programs share (:func:`shared_binary`: ``a.out``, ``python3``, an
  interpreter or launcher; attack 12 F4: every ``a.out`` was one app), symbol sets that overlap by
  :data:`SAME_PROGRAM_JACCARD` or more (Jaccard) are one program; fewer than :data:`MIN_SYMBOLS` symbols say nothing
  (the run is its own program, named as before; a shared binary name stays the program then, nothing else tells).

The run's program key is stored beside it (``program.json``); :func:`run_programs` reads them back for the folds of
every evaluation on unseen programs, and :func:`choose_program` gives the default app when ``--app`` is not given:
the binary's name, else the app of the matching program's first run, else the name from the file.

Matching a run against the stored ones reads an index (:data:`PROGRAM_INDEX`: one small file per distinct symbol
set, with its program key and the first run that had it), not every stored run's ``program.json``: ingest cost does
not grow with the number of runs stored (issue 26 item 6), only with the number of distinct symbol-identified
programs. An entry whose run was removed since is noticed when it matches, and the index is then rebuilt once.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import uuid
import warnings
from dataclasses import dataclass, replace
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from synthtrace.tracelib.atomic_file import write_atomically
from synthtrace.tracelib.folder_tree import remove_tree
from synthtrace.tracelib.formats.program import ProgramSymbols
from synthtrace.warehouse.index_files import not_linked
from synthtrace.warehouse.layout import Warehouse, read_record  # [helper security]
from synthtrace.warehouse.names import name_from_folder, name_problem, one_spelling

PROGRAM_FILE = "program.json"
#: index of the symbol-identified programs: ``<symbol set hash>.json`` = {key, symbols, run_id, binary}, and
#: :data:`INDEX_COMPLETE` once every stored run is in it (a warehouse written before the index is indexed on its
#: first ingest)
PROGRAM_INDEX = Path(".index") / "programs"
#: the index's completeness mark; ``.complete`` marked an index without the runs of shared binary names (before
#: attack 12 F4), rebuilt once like a missing one
INDEX_COMPLETE = ".complete-2"
#: symbol sets at least this similar (Jaccard) are one program (runs of one binary at other scales share ~0.9;
#: kernels of one benchmark suite sharing its harness ~0.6)
SAME_PROGRAM_JACCARD = 0.8
#: fewer of the program's own symbols than this do not identify it
MIN_SYMBOLS = 3
#: executable file names that many unrelated programs share (compared in lower case; a version suffix such as
#: ``python3.11`` or ``java17`` too): the compilers' default output, interpreters and the launchers a job runs a
#: program under, each of which Score-P or Extrae may record as the program
SHARED_BINARIES = frozenset({
    "a.out", "a.exe", "b.out", "main", "main.exe", "app", "exe", "run", "program", "prog", "test",
    "python", "python2", "python3", "pypy", "pypy3", "ipython", "ipython3", "jupyter", "julia", "r", "rscript",
    "octave", "octave-cli", "matlab", "java", "node", "perl", "ruby", "lua", "luajit", "tclsh", "php", "dotnet",
    "mono", "bash", "sh", "dash", "zsh", "ksh", "tcsh", "csh", "env", "time", "nohup", "taskset", "numactl",
    "mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun", "srun", "aprun", "jsrun", "ibrun", "orted",
    "hydra_pmi_proxy", "valgrind", "gdb", "apptainer", "singularity", "charliecloud", "podman", "docker",
    "shifter", "nsys", "ncu", "scorep", "extrae"})
_VERSIONED = re.compile(r"(?P<name>.+?)[-_]?\d+(\.\d+)*[a-z]?")


@dataclass(frozen=True)
class Program:
    """A run's program: its ``key`` (None: unidentified), the ``app`` to default to (None: from the file name), and
    what it was identified from."""

    key: str | None
    app: str | None
    symbols: ProgramSymbols

    def write(self, run_dir: Path) -> None:
        """Store the identity beside a run (its staged directory)."""
        (run_dir / PROGRAM_FILE).write_text(json.dumps({
            "key": self.key, "binary": self.symbols.binary, "symbols": sorted(self.symbols.symbols)}))


def shared_binary(binary: str) -> bool:
    """Whether the executable file name ``binary`` is one many programs share (:data:`SHARED_BINARIES`, also with a
    version number: ``python3.11``, ``java17``): no identity on its own."""
    name = binary.lower()
    return name in SHARED_BINARIES or bool((m := _VERSIONED.fullmatch(name)) and m["name"] in SHARED_BINARIES)


def _names_program(binary: str | None) -> bool:
    """Whether a run's recorded ``binary`` is its program's identity (else its symbols are)."""
    return bool(binary) and not shared_binary(binary)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def _symbol_hash(symbols: frozenset[str]) -> str:
    return hashlib.sha256("\n".join(sorted(symbols)).encode()).hexdigest()[:16]


def _symbol_key(symbols: frozenset[str]) -> str:
    return "symbols:" + _symbol_hash(symbols)


def _stored(wh: Warehouse) -> list[tuple[str, dict]]:
    """(run_id, stored identity) of every run that has one, by run id (reads every stored run: for the folds of an
    evaluation and to build the index once, never per ingest)."""
    if not wh.runs_dir.is_dir():
        return []
    out = []
    for f in sorted(wh.runs_dir.glob(f"*/{PROGRAM_FILE}")):
        try:
            out.append((f.parent.name, read_record(f)))  # [helper security] F14: no FIFO or /dev/zero link
        except (OSError, ValueError):
            continue  # a damaged identity file only loses the match
    return out


def _index_entry(index: Path, key: str, symbols: frozenset[str], run_id: str, binary: str | None) -> None:
    """Index the symbol set of run ``run_id`` (its shared ``binary`` name, or None) under program ``key``, unless
    that set is indexed already (the first run with a set names it; two ingests adding the same set at once each
    write a valid entry, one wins)."""
    entry = index / f"{_symbol_hash(symbols)}.json"
    if not entry.is_file():
        body = json.dumps({"key": key, "symbols": sorted(symbols), "run_id": run_id, "binary": binary})
        write_atomically(entry, lambda tmp: tmp.write_text(body))


def _program_index(wh: Warehouse) -> Path:
    """The folder of :data:`PROGRAM_INDEX`, built from every stored ``program.json`` when it is not complete (a
    warehouse written before it, or one whose indexed run was removed). It is built aside and renamed into place, so
    a concurrent ingest sees the old index or the whole new one."""
    index = not_linked(wh, wh.root / PROGRAM_INDEX)  # never through a link (attack 20 F5)
    if (index / INDEX_COMPLETE).is_file():
        return index
    index.parent.mkdir(parents=True, exist_ok=True)
    built = index.with_name(f".{index.name}.{uuid.uuid4().hex[:8]}.{os.getpid()}")
    built.mkdir()
    for run_id, stored in _stored(wh):
        if stored.get("key") and not _names_program(stored.get("binary")):
            _index_entry(built, stored["key"], frozenset(stored.get("symbols", ())), run_id, stored.get("binary"))
    (built / INDEX_COMPLETE).touch()
    old = index.with_name(built.name + ".old")
    with contextlib.suppress(FileNotFoundError):
        os.rename(index, old)
    try:
        os.rename(built, index)
    except OSError:  # another ingest put its index in place meanwhile: use that one
        remove_tree(built, ignore_errors=True)
    remove_tree(old, ignore_errors=True)
    return index


def _indexed(index: Path) -> list[dict]:
    """The entries of the index, in file-name order (a damaged entry only loses its match)."""
    out = []
    for f in sorted(index.glob("*.json")):
        try:
            out.append(read_record(f))  # [helper security] F14: no FIFO or /dev/zero link
        except (OSError, ValueError):
            continue
    return out


def _candidates(wh: Warehouse, *, scan: bool) -> list[dict]:
    """The symbol-identified programs to match against, as index entries: from the index when it is complete and
    ``scan`` is False, else from every stored run's identity (a warehouse written before the index; an index that
    names a removed run, until the next commit rebuilds it). Writes nothing: a refused ingest leaves no trace."""
    index = wh.root / PROGRAM_INDEX
    if not scan and (index / INDEX_COMPLETE).is_file():
        return _indexed(index)
    return [{"key": stored["key"], "symbols": stored.get("symbols", ()), "run_id": run_id,
             "binary": stored.get("binary")}
            for run_id, stored in _stored(wh) if stored.get("key") and not _names_program(stored.get("binary"))]


def _best_match(symbols: frozenset[str], candidates: list[dict]) -> dict | None:
    """The candidate (an index entry) whose symbols are the most like ``symbols``, at least
    :data:`SAME_PROGRAM_JACCARD`; None when none is."""
    best: tuple[float, dict] | None = None
    for stored in candidates:
        score = jaccard(symbols, frozenset(stored.get("symbols", ())))
        if score >= SAME_PROGRAM_JACCARD and (best is None or score > best[0]):
            best = (score, stored)
    return None if best is None else best[1]


def _spelled(symbols: ProgramSymbols) -> ProgramSymbols:
    """``symbols`` with its binary's name in its one spelling (:func:`~synthtrace.warehouse.names.one_spelling`,
    NFC): a binary a Mac's file system named ``café`` (NFD) and the same binary built elsewhere are one program and
    one app, as the names from the traces' file names are."""
    return symbols if symbols.binary is None else replace(symbols, binary=one_spelling(symbols.binary))


def program_keys(wh: Warehouse | None, runs: Sequence[ProgramSymbols]) -> list[str | None]:
    """The program key each of ``runs`` (traces not stored yet) is given by :func:`choose_program` when they are
    ingested one after the other into ``wh`` (None: an empty warehouse): a binary name that names a program is the
    key; runs of a shared binary name (or none) are matched by their symbols against the warehouse's programs and
    against each other (two runs of one ``a.out`` at two scales are one program before either is stored). What
    places traces in experiments (:func:`~synthtrace.warehouse.ingest.experiment_names`); writes nothing."""
    known = _candidates(wh, scan=False) if wh is not None and wh.runs_dir.is_dir() else []
    keys: list[str | None] = []
    for symbols in map(_spelled, runs):
        if _names_program(symbols.binary) or len(symbols.symbols) < MIN_SYMBOLS:
            keys.append(symbols.binary)
            continue
        if (best := _best_match(symbols.symbols, known)) is None:
            best = {"key": _symbol_key(symbols.symbols), "symbols": symbols.symbols, "binary": symbols.binary}
            known.append(best)
        keys.append(best["key"])
    return keys


def program_identity(key: str | None, stem_app: str) -> str:
    """What tells a run's program from another's where runs are placed in experiments: its program ``key`` (the
    binary's name, or its symbols' program), else the app its file name gives (``stem_app``, in Unicode NFC: attack
    14 F9, a Mac's ``café`` and the typed one were two apps), never a name the user chose with ``--app`` (attack 12
    F11)."""
    return key or one_spelling(stem_app)


def shown_name(symbols: ProgramSymbols | None, key: str | None, stem_app: str) -> str:
    """The experiment name of a program (of ``key``, from ``symbols``; None: not read) where an experiment is named by
    its program: its binary's name when that is a valid experiment name, its shared binary name with the symbols'
    hash (``a.out-1a2b3c4d``, as :func:`choose_program` names a second program under it), else ``stem_app``; made
    valid as a folder's name is (:func:`~synthtrace.warehouse.names.name_from_folder`: ``job[3]`` or a 130-character
    stem refused a sound trace, attack 14 F7)."""
    name = symbols.binary if symbols is not None else None
    if name and key and key.startswith("symbols:"):
        name = f"{name}-{key.removeprefix('symbols:')[:8]}"
    return name_from_folder(name if name and name_problem(name) is None else stem_app)


def _app_of(wh: Warehouse, run_id: str) -> str | None | bool:
    """The stored app of run ``run_id``; False when the run is gone (or its row unreadable)."""
    try:
        return pl.read_parquet(wh.run_dir(run_id) / "run.parquet", columns=["app"], glob=False).get_column("app")[0]
    except (OSError, pl.exceptions.PolarsError, IndexError):
        return False


def choose_program(wh: Warehouse, symbols: ProgramSymbols) -> Program:
    """The program of a run about to be ingested, matched against the programs already in ``wh`` (through the index:
    the cost does not depend on how many runs are stored). A binary name many programs share (:func:`shared_binary`)
    is matched by the symbols as a trace without one; the first such program keeps the name as its app, another one
    under the same name is ``<name>-<its symbols' hash>``, said in a warning (a note of the ingest)."""
    symbols = _spelled(symbols)
    binary = symbols.binary
    if _names_program(binary):
        return Program(binary, binary, symbols)
    if len(symbols.symbols) < MIN_SYMBOLS:
        return Program(binary, binary, symbols)
    namesakes = False  # a program stored under the same shared binary name
    for scan in (False, True):  # a scan when the best entry's run was removed since the index named it
        candidates = _candidates(wh, scan=scan)
        namesakes |= binary is not None and any(stored.get("binary") == binary for stored in candidates)
        if (best := _best_match(symbols.symbols, candidates)) is None:
            break
        app = _app_of(wh, best["run_id"])
        if app is not False:
            return Program(best["key"], app, symbols)
        (wh.root / PROGRAM_INDEX / INDEX_COMPLETE).unlink(missing_ok=True)  # the next commit rebuilds it
    key = _symbol_key(symbols.symbols)
    if binary is None or not namesakes:
        return Program(key, binary, symbols)
    app = f"{binary}-{key.removeprefix('symbols:')[:8]}"
    warnings.warn(f"the program {binary!r} is a name many programs share, and this trace's symbols match none stored "
                  f"under it: a program of its own, app {app!r} (--app NAME names it; --experiment NAME keeps its "
                  "runs apart from the other's)", stacklevel=2)
    return Program(key, app, symbols)


def remember_program(wh: Warehouse, program: Program, run_id: str) -> None:
    """Index the program of run ``run_id``, just committed (called after the commit: a refused ingest indexes
    nothing)."""
    index = _program_index(wh)  # built once whatever the run, so a later match never scans every stored run
    if program.key and not _names_program(program.symbols.binary):
        _index_entry(index, program.key, program.symbols.symbols, run_id, program.symbols.binary)


def stored_programs(wh: Warehouse) -> dict[str, dict]:
    """run_id -> its stored identity (``program.json``: key, binary, symbols), for every run that has one (reads
    every stored run: to index an older warehouse once)."""
    return dict(_stored(wh))


def stored_program(wh: Warehouse, run_id: str) -> dict:
    """The stored identity of run ``run_id`` (``program.json``: key, binary, symbols); empty when it has none (a run
    stored before them) or it cannot be read."""
    try:
        stored = read_record(wh.run_dir(run_id) / PROGRAM_FILE)
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def run_programs(wh: Warehouse) -> dict[str, str]:
    """run_id -> program key, for the runs whose program was identified."""
    return {run_id: s["key"] for run_id, s in _stored(wh) if s.get("key")}
