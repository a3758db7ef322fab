"""Which files below the warehouse are its stored data: those its commits wrote (issue 23, attack 8 B1, B2).

Each committed folder (a run, an experiment, a model, ...) holds its manifest (:data:`~synthtrace.warehouse.layout.
MANIFEST`, :mod:`~synthtrace.warehouse.checksums`), written by its commit: the statement of what the folder holds.
Every reader that lists files (the query snapshots, :mod:`~synthtrace.warehouse.snapshot` and
:func:`~synthtrace.warehouse.catalog.view_files`; a run's parts, :mod:`~synthtrace.warehouse.runs`) asks here:

- a file its folder's manifest does not list (``part-00000 (copy).parquet`` beside the parts) is not stored data:
  it is left out;
- a file the manifest lists that is missing is a copy cut short (an rsync killed part way): one line naming it
  (:class:`~synthtrace.warehouse.errors.DamagedPartError`, with the remedy for a damaged file), never an answer
  without it;
- a folder whose manifest was written for another name (``runs/<id>.bak``, ``experiments/x.old``: someone's
  copy) is not stored data: left out whole, and ``synthtrace runs`` says so once (:func:`foreign_folders`).

A folder stored before manifests (none), or before they named their folder, reads the files it has; it is judged by
its own stored table instead: a run folder must be named by the ``run_id`` of its ``run.parquet`` (read only when
the name is not one ingest makes, 16 hex characters, or the folder has no manifest at all), an experiment folder by
the ``experiment`` of its ``experiment.json`` (one with neither that nor a manifest is no commit's), else (an
analysis without a merge) by the ``experiment`` its stored tables hold (attack 12 F1: a copy was adopted). A damaged
manifest vouches for nothing: the folder reads as before, and every read of one of its files is refused
(:mod:`~synthtrace.warehouse.parts`).
"""
from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from synthtrace.warehouse.checksums import Manifest, folder_manifest
from synthtrace.warehouse.errors import DamagedPartError, ForeignFolderError
from synthtrace.warehouse.layout import MANIFEST, MAX_RECORD_BYTES, is_own_file, read_record
from synthtrace.warehouse.names import name_problem

#: the top folders whose entries are stored folders of their own name (a run id, an experiment, a model id, ...)
NAMED_TOPS = ("runs", "experiments", "models", "predictions")
#: a run id as ingest makes them (:data:`~synthtrace.warehouse.ingest.RUN_ID_CHARS` hex characters of a hash)
_RUN_ID = re.compile(r"[0-9a-f]{16}")
#: what a missing listed file is called (the reason in its one line)
MISSING = f"listed in its folder's {MANIFEST}: a copy cut short?"


@dataclass(frozen=True)
class Folder:
    """The verdict on one stored folder: its manifest (None: none; text: why it cannot be read), why it is not
    the stored folder its name says (None: it is) and why its commit is not whole (None: it is; a run whose
    manifest does not list its ``run.parquet``: :func:`incomplete`). Either way none of its files is read."""

    manifest: Manifest | str | None
    foreign: str | None
    incomplete: str | None = None

    @classmethod
    def of(cls, folder: Path) -> Folder:
        """What the stored ``folder`` (a path) holds by its manifest, its name unjudged (a writer's own folder)."""
        return cls(folder_manifest(str(folder)), None)

    @classmethod
    def at(cls, folder: Path) -> Folder:
        """The verdict on ``folder`` by its place: judged (:func:`judge`) when it is an entry of a named top folder
        (``runs/<id>``, ``experiments/<name>``, ...), its manifest alone otherwise (a writer's staging folder)."""
        if folder.parent.name in NAMED_TOPS:
            return judge(folder.parent.parent, (folder.parent.name, folder.name))
        return cls.of(folder)

    def lists(self, rel: str) -> bool:
        """Whether the file ``rel`` (``/``-separated, below the folder) is stored data of it."""
        return (self.foreign is None and self.incomplete is None
                and (not isinstance(self.manifest, Manifest) or rel in self.manifest.files))

    def holds(self, rel: str) -> bool:
        """Whether the sub-folder ``rel`` (``/``-separated) holds stored data of it: a file its manifest lists is
        below it (True for a folder stored without a readable manifest: nothing to judge by)."""
        if not isinstance(self.manifest, Manifest):
            return True
        return rel in _listed_folders(self.manifest.files)

    def missing(self, patterns: Iterable[Sequence[str]], present: Iterable[str]) -> list[str]:
        """The files (``/``-separated, sorted) its manifest lists that match one of ``patterns`` (path parts below
        the folder, glob patterns) but are not in ``present``."""
        if self.foreign is not None or self.incomplete is not None or not isinstance(self.manifest, Manifest):
            return []
        files, have, out = self.manifest.files, set(present), set()
        for pattern in patterns:  # a query checks every run: a name is looked up, a glob matched against the few
            if not _is_glob(tuple(pattern)):  # files that are not there
                rel = "/".join(pattern)
                if rel in files and rel not in have:
                    out.add(rel)
            else:
                out.update(rel for rel in files if rel not in have and rel.count("/") == len(pattern) - 1
                           and _matches(rel.split("/"), list(pattern)))
        return sorted(out)


def _listed_folders(files: Iterable[str]) -> frozenset[str]:
    """Every folder (``/``-separated) that holds one of ``files`` (``/``-separated), at any depth."""
    return frozenset("/".join(parts[:depth]) for rel in files for parts in [rel.split("/")]
                     for depth in range(1, len(parts)))


@functools.cache
def _is_glob(pattern: tuple[str, ...]) -> bool:
    return any(c in part for part in pattern for c in "*?[")


def _matches(parts: list[str], pattern: list[str]) -> bool:
    return len(parts) == len(pattern) and all(fnmatch.fnmatchcase(a, p) for a, p in zip(parts, pattern))


def unit_of(rel: Sequence[str]) -> tuple[str, ...]:
    """The stored folder (path parts below the root) that the file ``rel`` (path parts below the root) belongs to:
    its second level (``runs/<id>``, ``experiments/<name>``), or its top folder for a file right in one
    (``regressions/<app>.parquet``, ``pop/pop_scaling.parquet``)."""
    return tuple(rel[:2]) if len(rel) > 2 else tuple(rel[:1])


def judge(root: str | os.PathLike, unit: Sequence[str]) -> Folder:
    """The verdict on the stored folder ``unit`` (path parts below the warehouse ``root``)."""
    folder = os.path.join(os.fspath(root), *unit)
    named = len(unit) == 2 and unit[0] in NAMED_TOPS
    if named and (why := _linked(os.fspath(root), unit)) is not None:
        return Folder(None, why)
    manifest = folder_manifest(folder)
    foreign = _foreign(folder, unit, manifest) if named else None
    return Folder(manifest, None if foreign is None else f"{foreign}: a copy no commit wrote",
                  incomplete(unit, manifest))


def _linked(root: str, unit: Sequence[str]) -> str | None:
    """Why the entry ``unit`` of a named top folder is read nowhere because it or its top folder is a symbolic link
    (attack 17 F6, attack 18 F3: the query snapshots open folders without following links; the other readers and
    the writers ask here), whatever it points to; None when neither is."""
    entry = os.path.join(root, *unit)
    if os.path.islink(entry):
        return f"a symbolic link to {os.readlink(entry)!r}, not a folder the warehouse wrote"
    return None if (why := _top_link(root, unit[0])) is None else f"in {unit[0]}/, {why}"


def _top_link(root: str | os.PathLike, top: str) -> str | None:
    """Why the top folder ``top`` of the warehouse ``root`` is read nowhere (a symbolic link), or None."""
    folder = os.path.join(os.fspath(root), top)
    return f"a symbolic link to {os.readlink(folder)!r}, not a folder the warehouse wrote" if os.path.islink(folder) \
        else None


def top_link_line(root: str | os.PathLike, top: str) -> str | None:
    """The one line for the top folder ``top`` of the warehouse ``root`` when it is a symbolic link (read nowhere:
    attack 18 F3 for ``runs/``, attack 19 F12 for ``models/`` and ``predictions/``), or None."""
    if (linked := _top_link(root, top)) is None:
        return None
    return f"{os.path.join(os.fspath(root), top)}: not read ({linked}); replace it with a folder"


def incomplete(unit: Sequence[str], manifest: Manifest | str | None) -> str | None:
    """Why the stored folder ``unit`` (path parts below the root) with ``manifest`` is not a whole commit, or
    None: a run folder whose manifest does not list its record, ``run.parquet`` (attack 9 C8: a hand-edited
    manifest gave a ``runs`` view without the run and ``bursts`` with its rows). Every commit of a run lists it,
    so such a folder is no run: none of its files is read, and ``synthtrace runs`` names it (:func:`damaged_runs`)."""
    if len(unit) == 2 and unit[0] == "runs" and isinstance(manifest, Manifest) and "run.parquet" not in manifest.files:
        return "it does not list the run's record, run.parquet: an incomplete commit (edited or damaged)"
    return None


def _foreign(folder: str, unit: Sequence[str], manifest: Manifest | str | None) -> str | None:
    """Why the folder ``unit`` is not the stored folder of its name, or None."""
    top, name = unit
    if isinstance(manifest, Manifest) and manifest.folder is not None:
        return None if manifest.folder == name else f"its {MANIFEST} was written for {top}/{manifest.folder}"
    if name_problem(name) is not None:
        return f"its name {name_problem(name)}"
    if top == "runs":
        if _RUN_ID.fullmatch(name) and manifest is not None:
            return None  # what every ingest names a run (a hash): trusted unread, so a query reads no more files
        # attack 9 C1: a copy without its manifest, under another run's name, was read as that run
        own = _stored_run_id(os.path.join(folder, "run.parquet"))
        return None if own in (None, name) else f"its run.parquet is run {own}"
    if top == "experiments":
        record = Path(folder) / "experiment.json"
        if manifest is None and not record.is_file():  # attack 9 C1: parquet files copied into a new folder
            return f"it has neither {MANIFEST} nor experiment.json: no commit wrote it"
        try:
            own = read_record(record).get("experiment")
        except (OSError, ValueError, AttributeError):
            own = None
        if isinstance(own, str):
            return None if own == name else f"its experiment.json is of {own!r}"
        # attack 12 F1: no experiment.json naming it (an analysis without a merge; a manifest written before it named
        # its folder): judged by the experiment its stored tables hold
        held = _held_experiment(folder, manifest)
        if held is None or held[1] == {name}:
            return None
        return f"its {held[0]} holds the rows of experiment {', '.join(map(repr, sorted(held[1])))}"
    return None


def _held_experiment(folder: str, manifest: Manifest | str | None) -> tuple[str, set[str]] | None:
    """(file, experiment) of the first Parquet file right in the experiment ``folder`` (those its manifest lists,
    else those there) that has rows and an ``experiment`` column, with the names that column holds (from its footer's
    statistics, else read). None when no such file tells (nothing to judge by)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = sorted(manifest.files) if isinstance(manifest, Manifest) else sorted(os.listdir(folder))
    except OSError:
        return None
    for name in (n for n in names if n.endswith(".parquet") and "/" not in n):
        path = os.path.join(folder, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue  # a link, a FIFO, a device: never opened
            with pq.ParquetFile(path) as table:
                if "experiment" not in table.schema_arrow.names or not table.metadata.num_rows:
                    continue
                column = table.schema_arrow.names.index("experiment")
                seen: set[str] = set()
                for group in range(table.metadata.num_row_groups):
                    stats = table.metadata.row_group(group).column(column).statistics
                    if stats is None or not stats.has_min_max:
                        seen.update(table.read_row_group(group, columns=["experiment"]).column(0).to_pylist())
                    else:
                        seen.update((stats.min, stats.max))
        except (pa.ArrowException, OSError, ValueError):
            continue  # a damaged file tells nothing here; its read says why
        seen = {e.decode() if isinstance(e, bytes) else e for e in seen if e is not None}
        if seen:
            return name, seen
    return None


def _stored_run_id(path: str) -> str | None:
    """The ``run_id`` a run's ``run.parquet`` holds; None when it cannot be read (its damage is reported where it
    is read). pyarrow, never Polars: a query's forked child calls this (a folder stored before manifests named it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RECORD_BYTES:
            return None  # a link, a FIFO (opening it would block the query), a device: no run's record, not read
        ids = pq.read_table(path, columns=["run_id"]).column("run_id").to_pylist()
    except (pa.ArrowException, OSError, KeyError):
        return None
    return ids[0] if len(ids) == 1 and isinstance(ids[0], str) else None


class Stored:
    """What one reader reads below the warehouse ``root``: each stored folder judged once (:func:`judge`)."""

    def __init__(self, root: str | os.PathLike):
        self.root = os.fspath(root)
        self._folders: dict[tuple[str, ...], Folder] = {}

    def folder(self, unit: Sequence[str]) -> Folder:
        unit = tuple(unit)
        if unit not in self._folders:
            self._folders[unit] = judge(self.root, unit)
        return self._folders[unit]

    def keep(self, rel: Sequence[str]) -> bool:
        """Whether the file ``rel`` (path parts below the root) is stored data."""
        unit = unit_of(rel)
        return self.folder(unit).lists("/".join(rel[len(unit):]))

    def check_whole(self, unit: Sequence[str], patterns: Iterable[Sequence[str]], present: Iterable[str]) -> None:
        """Raise :class:`DamagedPartError` naming the first file of ``unit`` that its manifest lists, a view
        reads (``patterns``, path parts below it) and that is not ``present`` (``/``-separated, below it): not
        there now either, in the folder still there (not one a writer removed or replaced while it was listed)."""
        if not (missing := self.folder(unit).missing(patterns, present)):
            return
        here = os.path.join(self.root, *unit)
        refuse_linked(here, missing)  # attack 19 F3: a listed file the snapshot left out for being a link
        missing = [m for m in missing if not os.path.lexists(os.path.join(here, m))]
        if missing and os.path.isfile(os.path.join(here, MANIFEST)):
            raise missing_file(os.path.join(here, *missing[0].split("/")), len(missing) - 1)


def member_faults(folder: str | os.PathLike, rels: Iterable[str]) -> tuple[str | None, list[str]]:
    """What is wrong with the files ``rels`` (``/``-separated below the stored ``folder``): the first path among
    them and the folders between that is a symbolic link (None: none; then nothing more is looked at), and the
    files not there (in the order of ``rels``). One ``lstat`` per file and per folder between, each once."""
    here = os.fspath(folder)
    seen: dict[str, bool | None] = {}  # path -> a link (None: not there)
    missing: list[str] = []
    for rel in rels:
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            sub = "/".join(parts[:depth])
            if sub not in seen:
                try:
                    seen[sub] = stat.S_ISLNK(os.lstat(os.path.join(here, sub)).st_mode)
                except OSError:
                    seen[sub] = None  # not there (or not a folder): nothing below it is there either
                if seen[sub]:
                    return sub, []
            if seen[sub] is None:
                missing.append(rel)
                break
    return None, missing


def linked_error(folder: str | os.PathLike, sub: str) -> DamagedPartError:
    """The error for the member ``sub`` (``/``-separated) of the stored ``folder`` that is a symbolic link
    (attack 19 F3): never read through, never left out without a word."""
    from synthtrace.warehouse.parts import damaged

    path = os.path.join(os.fspath(folder), *sub.split("/"))
    try:
        to = f"a symbolic link to {os.readlink(path)!r}"
    except OSError:
        to = "a symbolic link"
    return damaged(path, f"{to}: a stored folder holds its own files, never a link; not read",
                   what="a linked member of a stored folder")


def refuse_linked(folder: str | os.PathLike, rels: Iterable[str]) -> None:
    """Raise :func:`linked_error` when one of the files ``rels`` of the stored ``folder`` is a symbolic link or is
    reached through one below it (:func:`member_faults`)."""
    if (sub := member_faults(folder, rels)[0]) is not None:
        raise linked_error(folder, sub)


def missing_file(path: str | os.PathLike, more: int = 0) -> DamagedPartError:
    """The error for the stored file ``path`` that its folder's manifest lists and that is missing (``more``: how
    many more of that folder are missing too)."""
    from synthtrace.warehouse.parts import damaged

    also = f"; {more} more of its folder too" if more else ""
    return damaged(path, MISSING + also, what="a stored file that is missing")


def stored_parts(folder: Path, pattern: str, verdict: Folder | None = None) -> list[Path]:
    """The files of the stored ``folder`` matching ``pattern`` (a glob below it: ``bursts/*.parquet``), sorted:
    those its manifest lists (a file it lists that is missing is :class:`DamagedPartError`), or, for a folder stored
    without one, those there. Empty for a folder that is not there (the caller tells a removed run) and for a copy
    no commit wrote (attack 10 D1: ``experiments/x.old`` was analysed and trained on). ``verdict``: the folder's,
    when the caller has it (its manifest read once for several patterns; default: judged now, :meth:`Folder.at`)."""
    verdict = Folder.at(folder) if verdict is None else verdict
    if verdict.incomplete is not None:
        raise incomplete_commit(folder, verdict.incomplete)
    found = sorted(p for p in folder.glob(pattern) if verdict.lists(p.relative_to(folder).as_posix()))
    refuse_linked(folder, (p.relative_to(folder).as_posix() for p in found))  # attack 19 F3: glob follows links
    if missing := verdict.missing([pattern.split("/")], (p.relative_to(folder).as_posix() for p in found)):
        raise missing_file(folder / missing[0], len(missing) - 1)
    return found


def incomplete_commit(folder: str | os.PathLike, why: str) -> DamagedPartError:
    """The error for the stored ``folder`` whose commit is not whole (``why``: :func:`incomplete`): one line
    naming its manifest, with the remedy (for a run, ``synthtrace runs rm`` and ingest again)."""
    from synthtrace.warehouse.parts import damaged

    return damaged(os.path.join(folder, MANIFEST), why, what="a manifest that vouches for no stored run")


def stored_file(folder: Path, name: str) -> Path | None:
    """``folder/name`` when the stored ``folder`` holds it (:func:`stored_parts`), None when it does not; a file
    its manifest lists that is missing is :class:`DamagedPartError`."""
    return next(iter(stored_parts(folder, name)), None)


def _folders(root: str | os.PathLike, top: str, links: bool = False) -> list[str]:
    """The names of the folders in ``root/top``, sorted: not links, unless ``links`` (then also every link there)."""
    try:
        with os.scandir(os.path.join(os.fspath(root), top)) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) or (links and e.is_symlink()))
    except OSError:
        return []


def stored_folders(root: str | os.PathLike, top: str) -> list[str]:
    """The names (sorted) of the folders in ``root/top`` that are the stored folders their names say: those a
    reader lists (experiments to analyse or train on, runs), neither copies (:func:`foreign_folders`) nor
    incomplete commits."""
    return [name for name in _folders(root, top)
            if (verdict := judge(root, (top, name))).foreign is None and verdict.incomplete is None]


def refuse_foreign(folder: Path, what: str = "nothing was written") -> None:
    """Raise :class:`ForeignFolderError` when ``folder`` (an entry of a named top folder: ``experiments/<name>``)
    is there and is not the stored folder of its name: a writer must neither commit into a user's copy (its files
    would become stored data: attack 11 E1) nor replace it (attack 10 D8). ``what``: what the refusal left undone."""
    if (folder.is_dir() or folder.is_symlink()) and (why := Folder.at(folder).foreign) is not None:
        remedy = ("remove the link itself (what it points to is not touched)" if folder.is_symlink() else
                  "move that folder out of the warehouse, or choose another name")
        raise ForeignFolderError(f"{folder}: not a folder of the warehouse ({why}); {what}: {remedy}")


def foreign_folders(root: str | os.PathLike) -> list[str]:
    """One line for each folder in ``runs/`` and ``experiments/`` that no reader reads because it is not the stored
    folder its name says (:func:`judge`): what ``synthtrace runs`` warns about."""
    out = []
    for top in ("runs", "experiments"):
        folder = os.path.join(os.fspath(root), top)
        if (line := top_link_line(root, top)) is not None:  # attack 18 F3: one line for the top folder, not one per
            out.append(line)  # entry
            continue
        out += [f"{os.path.join(folder, name)}: not read ({why}); move it out of the warehouse"
                for name in _folders(root, top, links=True) if (why := judge(root, (top, name)).foreign) is not None]
    return out


def _listed_faults(root: str | os.PathLike, top: str, skip: Iterable[str] = ()
                   ) -> Iterable[tuple[str, str, str | None, list[str]]]:
    """(name, path, first linked member, missing files: :func:`member_faults`) of each folder (but ``skip``) in
    ``root/top`` that is the stored folder of its name with a readable manifest, for the files it lists."""
    skip = set(skip)
    for name in _folders(root, top):
        if name in skip:
            continue
        verdict = judge(root, (top, name))
        if verdict.foreign is not None or verdict.incomplete is not None or not isinstance(verdict.manifest, Manifest):
            continue
        here = os.path.join(os.fspath(root), top, name)
        yield name, here, *member_faults(here, sorted(verdict.manifest.files))


def incomplete_runs(root: str | os.PathLike, skip: Iterable[str] = ()) -> dict[str, str]:
    """Run id -> the one line about its first missing file, for each run (but ``skip``) of the warehouse ``root``
    missing a file its manifest lists (a copy cut short, attack 8 B2): ``synthtrace runs`` still lists it (its
    record is sound) and says so, where every read of the missing file is refused; so for a listed file that is a
    symbolic link or reached through one (attack 19 F3: :func:`linked_error`). A ``stat`` per listed file."""
    out: dict[str, str] = {}
    for run_id, here, linked, missing in _listed_faults(root, "runs", skip):
        if linked is not None:  # attack 19 F3
            out[run_id] = str(linked_error(here, linked))
        elif missing and os.path.isfile(os.path.join(here, MANIFEST)):  # not a run removed meanwhile
            out[run_id] = str(missing_file(os.path.join(here, missing[0]), len(missing) - 1))
    return out


def linked_experiment_members(root: str | os.PathLike) -> list[str]:
    """One line for each experiment folder of the warehouse ``root`` that its manifest's files reach through a
    symbolic link (its first such member: :func:`linked_error`), the line every reader of it refuses with (attack
    19 F3): what ``synthtrace runs`` warns about beside the runs' (:func:`incomplete_runs`). A ``stat`` per listed
    file."""
    return [str(linked_error(here, linked)) for _, here, linked, _ in _listed_faults(root, "experiments")
            if linked is not None]


def damaged_runs(root: str | os.PathLike) -> dict[str, str]:
    """Run id -> the one line about it, for each run of the warehouse ``root`` whose record (``run.parquet``) or
    checksums are damaged or missing, or whose manifest does not list its record (:func:`incomplete`): no read of
    the runs view can take it, so ``synthtrace runs`` lists the others
    and this line, and ``synthtrace runs rm`` can still remove it (attack 8 B6). A manifest read and a ``stat`` per
    run (its record hashed only when its size or mtime changed since its commit; a run stored without checksums
    has its record's footer read). A folder that is not the run of its name (:func:`foreign_folders`) is no run."""
    from synthtrace.warehouse.parts import content_check, damaged, frame_damage

    out: dict[str, str] = {}
    for run_id in _folders(root, "runs"):
        verdict = judge(root, ("runs", run_id))
        if verdict.foreign is not None:
            continue
        run_dir = Path(root) / "runs" / run_id
        try:
            if verdict.incomplete is not None:  # attack 9 C8: no view reads it; `runs rm` removes it
                raise incomplete_commit(run_dir, verdict.incomplete)
            if (record := stored_file(run_dir, "run.parquet")) is None or not is_own_file(Path(root), record):
                continue  # no run (a folder left by hand, a run being removed; a link or a FIFO: never read)
            content_check(record, thorough=False)
            if verdict.manifest is None and (why := frame_damage(record)) is not None:
                raise damaged(record, why)
        except DamagedPartError as exc:
            out[run_id] = str(exc)
        except FileNotFoundError:
            continue  # removed meanwhile
    return out
