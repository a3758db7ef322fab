"""Content checksums of the warehouse's stored files, written when a folder is committed and checked when a file is
read (issue 23: a damaged page behind an intact Parquet footer).

Why a checksum of the whole file, per stored folder: Parquet's own page CRCs would find a damaged page too, but
Polars' writer (``write_parquet``, every stored file) writes none and DuckDB's reader checks none; and a damaged
data page behind an intact footer is otherwise read as garbage without an error (DuckDB decoded a damaged bursts
page to nonsense numbers: ``sql`` answered from them, ``detect`` failed later in Polars). So each committed folder
(a run, an experiment, a model, the regressions, ...) holds :data:`MANIFEST`: for every regular file below it, its
xxh3-128 digest, size and modification time (ns). It is written inside the staged folder, before the folder is
renamed into place (:meth:`Warehouse.staged <synthtrace.warehouse.layout.Warehouse.staged>`), so a folder and its
checksums appear together. Files kept by :meth:`~synthtrace.warehouse.layout.Warehouse.update_dir` (hard links)
keep the digest written when they were first stored: a file damaged meanwhile is not blessed by a rewrite.

How it is checked (:func:`content_damage`), two ways by cost:

- ``thorough`` (every Polars read, :mod:`~synthtrace.warehouse.parts`; ``merge --export-prv``'s inputs before the
  merge): the file is hashed whole (xxh3 runs at several GB/s, far faster than the Parquet decoding that follows;
  a file hashed once in a process is not hashed again while its (device, inode, size, mtime, ctime) is unchanged).
  Finds any change of content: an edit, a page overwritten, bit rot.
- fast (DuckDB's reads: ``sql`` and every query; :meth:`Snapshot.checked
  <synthtrace.warehouse.snapshot.Snapshot.checked>`): a file whose size and mtime (ns) are still those recorded
  at the commit is trusted without being read; any other is hashed. A query over a 100 GB warehouse so reads no
  byte more than it did. Found: every edit through ``write()`` (it sets the mtime), a file cut short or grown,
  a file replaced by another copy. Not found until a thorough reader reads the file: bit rot (the mtime stays),
  and an edit that puts the old mtime back (``touch -r``, ``cp -p`` of a same-sized file). The ctime, which such an
  edit cannot put back, cannot be the key: every query's hard link to a file (its snapshot) and every writer's
  kept link changes it. A warehouse copied without its mtimes (``cp -r``; ``cp -a`` and ``rsync -a`` keep them)
  reads correctly but hashes every file each query reads, in every query, until its folders are rewritten.

What a checksum does not do: stop someone who may write the stored folders (they can rewrite the manifest too); it
finds damage, not tampering. A folder stored before this (no manifest) is checked by its Parquet frame as before
(:func:`~synthtrace.warehouse.parts.frame_damage`, pages on a reader's failure); it gains checksums when a writer
next rewrites it (a run removed and ingested again, an experiment merged or analysed again).

The manifest is also the statement of what the folder holds (attack 8 B1, B2; :mod:`~synthtrace.warehouse.stored`):
a file it does not list (``part-00000 (copy).parquet`` put beside the parts) is not read as stored data, one it
lists that is missing is a copy cut short, and it names the folder it was written for (``folder``), so that a copy
of the folder under another name (``runs/<id>.bak``) is not read as one more run.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import xxhash

from synthtrace.tracelib.folder_tree import walk
from synthtrace.warehouse.layout import MANIFEST, MARKER, read_record
from synthtrace.warehouse.night_lock import file_kind

ALGORITHM = "xxh3_128"
#: the largest manifest read, bytes (about 100 bytes a file)
MAX_MANIFEST_BYTES = 64 << 20
#: how far above a stored file its folder's manifest may be (runs/<id>/bursts/part.parquet: two folders up)
_MAX_DEPTH = 3
_CHUNK = 4 << 20


@dataclass(frozen=True)
class Manifest:
    """A stored folder's manifest: what its commit recorded for each file (path relative to the folder, ``/``
    separated), and the name of the folder it was written for (None: written before that was recorded)."""

    files: dict[str, Recorded]
    folder: str | None


@dataclass(frozen=True)
class Recorded:
    """What the commit recorded for one stored file: its digest, size (bytes) and modification time (ns)."""

    digest: str
    size: int
    mtime_ns: int


def file_digest(path: str | os.PathLike) -> str:
    """The xxh3-128 digest (hex) of the file ``path``, read in chunks of 4 MiB."""
    h = xxhash.xxh3_128()
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(stage: Path, previous: Path | None = None, folder: str | None = None) -> None:
    """Write ``stage``/:data:`MANIFEST` for every regular file below ``stage``, naming ``folder`` (the name the
    stage is committed under; None: not named). A file that is the same file (a hard link) as the one at its place
    in ``previous`` (the folder ``stage`` replaces) keeps what that folder's manifest recorded, unread: writers never
    change a stored file in place, so if it changed since, it is damaged, and hashing it now would bless the
    damage."""
    before = _manifest(str(previous / MANIFEST)) if previous is not None else None
    files: dict[str, list] = {}
    for dirpath, _, names in walk(stage):  # any depth (issue 23: os.walk recursed per level)
        for name in names:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, stage)
            st = os.lstat(path)
            if rel == MANIFEST or not stat.S_ISREG(st.st_mode):
                continue
            old = before.files.get(rel) if isinstance(before, Manifest) else None
            if old is not None and _same_file(st, previous / rel):
                files[rel] = [old.digest, old.size, old.mtime_ns]  # changed since? then damaged, and still found
            else:
                files[rel] = [file_digest(path), st.st_size, st.st_mtime_ns]
    (stage / MANIFEST).unlink(missing_ok=True)  # never written through a link into another folder's copy
    doc = {"algorithm": ALGORITHM, **({"folder": folder} if folder is not None else {}), "files": files}
    (stage / MANIFEST).write_text(json.dumps(doc))


def _same_file(st: os.stat_result, other: Path) -> bool:
    try:
        o = os.lstat(other)
    except OSError:
        return False
    return (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino)


_MANIFESTS: dict[tuple, Manifest | str | None] = {}  # (path, dev, inode, size, mtime) -> what it lists
_VERIFIED: dict[tuple[int, int, int, int, int], str] = {}  # (dev, inode, size, mtime, ctime) -> digest hashed
_ABSENT = object()


def _manifest(path: str) -> Manifest | str | None | object:
    """The manifest ``path`` (cached while it is unchanged); :data:`_ABSENT` when there is none;
    why it cannot be read when it is damaged (then no file of its folder can be vouched for: each read of one is
    refused, and the folder's remedy rewrites it); None for one of another algorithm (a later version's: its
    files are checked by their frames, as a folder stored before)."""
    try:
        st = os.lstat(path)
    except OSError:
        return _ABSENT
    key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _MANIFESTS:
        try:
            if not stat.S_ISREG(st.st_mode):
                raise ManifestShapeError(f"it is {file_kind(st.st_mode)}, not a file")
            if st.st_size > MAX_MANIFEST_BYTES:
                raise ManifestShapeError(f"{st.st_size} bytes, more than a manifest's {MAX_MANIFEST_BYTES}")
            _MANIFESTS[key] = parse_manifest(read_record(Path(path), limit=MAX_MANIFEST_BYTES))
        except ManifestShapeError as exc:
            _MANIFESTS[key] = f"its folder's {MANIFEST} is damaged: {exc}"
        except OSError as exc:
            _MANIFESTS[key] = f"its folder's {MANIFEST} cannot be read ({exc.strerror or type(exc).__name__})"
        except ValueError as exc:  # no JSON (cut short, overwritten), no UTF-8
            why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            _MANIFESTS[key] = f"its folder's {MANIFEST} is damaged: not JSON ({why})"
    return _MANIFESTS[key]


class ManifestShapeError(ValueError):
    """A manifest that is JSON but not of a manifest's shape: says what is wrong and under which key."""


#: what each file of a manifest's ``files`` maps to: its digest (hex), size (bytes) and mtime (ns)
_ENTRY = "[digest, size (bytes), mtime (ns)]"


def parse_manifest(doc: object) -> Manifest | None:
    """The manifest the JSON document ``doc`` states, or None for one of another algorithm (a later version's, its
    other keys unread); :class:`ManifestShapeError` naming the key (and file) when it is not of the shape
    :func:`write_manifest` writes: ``{"algorithm": str, "folder": str (optional), "files": {relative path:
    [digest str, size int, mtime_ns int]}}`` (attack 9 C8: a hand edit gave Python's own words, "'list' object has
    no attribute 'items'"). Checked by hand, not by a JSON-Schema library: every query reads every run's manifest,
    and ``jsonschema``'s import alone (~180 ms) is more than a query's start."""
    if not isinstance(doc, dict):
        raise ManifestShapeError(f"{_json_type(doc)}, not a JSON object")
    algorithm = doc.get("algorithm", _ABSENT)
    if not isinstance(algorithm, str):
        raise ManifestShapeError(f'key "algorithm": {_json_type(algorithm)}, not a string naming the checksum')
    if algorithm != ALGORITHM:
        return None
    folder, files = doc.get("folder"), doc.get("files", _ABSENT)
    if folder is not None and not isinstance(folder, str):
        raise ManifestShapeError(f'key "folder": {_json_type(folder)}, not a string naming the folder')
    if not isinstance(files, dict):
        raise ManifestShapeError(f'key "files": {_json_type(files)}, not an object of file -> {_ENTRY}')
    out: dict[str, Recorded] = {}
    for rel, entry in files.items():
        if not rel or rel.startswith("/") or any(part in ("", ".", "..") for part in rel.split("/")):
            raise ManifestShapeError(f'key "files", file {rel!r}: not a path below the folder')
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and all(type(n) is int and n >= 0 for n in entry[1:])):
            raise ManifestShapeError(f'key "files", file {rel!r}: {json.dumps(entry)[:60]}, not {_ENTRY}')
        out[rel] = Recorded(*entry)
    return Manifest(out, folder)


def _json_type(value: object) -> str:
    """What JSON calls the type of ``value`` (as :func:`json.loads` gives it), with its article; "missing" for
    :data:`_ABSENT`."""
    if value is _ABSENT:
        return "missing"
    kinds = ((type(None), "null"), (bool, "true/false"), (int, "a number"), (float, "a number"), (str, "a string"),
             (list, "an array"), (dict, "an object"))
    return next((name for t, name in kinds if isinstance(value, t)), type(value).__name__)


def folder_manifest(folder: str) -> Manifest | str | None:
    """The manifest of the stored folder ``folder`` (a path); None when it has none (stored before checksums, or
    by a later version); why it cannot be read when it is damaged."""
    found = _manifest(os.path.join(folder, MANIFEST))
    return None if found is _ABSENT else found  # type: ignore[return-value]


def recorded(place: str | os.PathLike) -> Recorded | str | None:
    """What the commit recorded for the stored file at ``place``: looked up in the manifest of the nearest folder
    above it that has one (below the warehouse root); None for a file stored without checksums; why not, when
    that manifest is damaged."""
    folder, rel = os.path.split(os.fspath(place))  # strings, not Path: a query checks thousands of files
    for _ in range(_MAX_DEPTH):
        files = _manifest(os.path.join(folder, MANIFEST))
        if files is not _ABSENT:
            return files.files.get(rel) if isinstance(files, Manifest) else files
        up, name = os.path.split(folder)
        if up == folder or os.path.exists(os.path.join(folder, MARKER)):
            return None  # the warehouse root: no stored folder above
        folder, rel = up, f"{name}/{rel}"
    return None


def content_damage(path: str | os.PathLike, place: str | os.PathLike | None = None, *,
                   thorough: bool = True) -> str | None:
    """Why the file ``path`` (the stored file at ``place``, default ``path``; a query reads a link to it) is not
    what was stored there, or None when it is (or nothing was recorded for it). ``thorough``: hash it whatever
    its mtime (see the module's docstring)."""
    want = recorded(place if place is not None else path)
    if want is None or isinstance(want, str):
        return want
    st = os.stat(path)
    if st.st_size != want.size:
        return f"{st.st_size} bytes where {want.size} were stored"
    if not thorough and st.st_mtime_ns == want.mtime_ns:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    digest = _VERIFIED.get(key) or file_digest(path)
    if digest != want.digest:
        return f"its content differs from the {ALGORITHM} checksum written when it was stored"
    _VERIFIED[key] = digest
    return None
