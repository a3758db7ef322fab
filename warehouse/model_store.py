"""Storage of trained models and their predictions (DESIGN §5, §8).

::

    WAREHOUSE/models/<model_id>/model.parquet          one row of the ``models`` view (what the model saw, metrics)
    WAREHOUSE/models/<model_id>/model.skops            the fitted estimator (skops format; never pickle)
    WAREHOUSE/predictions/<model_id>/<experiment>.parquet  one row per burst of the experiment

A model directory appears whole (written in staging, renamed in one step) and is never rewritten: every
trained version stays. The artifact's SHA-256 is recorded in ``model.parquet`` and checked before the artifact
is read; reading it with an explicit list of trusted types is the job of :mod:`synthtrace.models.registry`.
A model's predictions directory is rebuilt in staging (other experiments' files hard-linked in) and swapped in
by one rename, so a reader sees an experiment's old predictions or its new ones, never a mix.

This module also reads what training needs: the application of each experiment and its merged bursts
(which bursts to learn from is :mod:`synthtrace.models.training_data`'s choice).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import re
import struct
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import polars as pl

from synthtrace.warehouse.analysis_store import MERGED_FILE, experiments
from synthtrace.warehouse.runs import runs_table
from synthtrace.warehouse.stored import stored_file, stored_folders, top_link_line
from synthtrace.warehouse.errors import ForeignFolderError, UnknownExperimentError, WarehouseError
from synthtrace.warehouse.layout import Warehouse, is_own_file, link_or_copy
from synthtrace.warehouse.names import file_name, name_problem
from synthtrace.warehouse.checksums import content_damage

ARTIFACT = "model.skops"
RECORD = "model.parquet"

#: columns of the ``models`` view (lists and JSON documents where a model has many values)
MODEL_SCHEMA: dict[str, pl.DataType] = {
    "model_id": pl.String(), "target": pl.String(), "kind": pl.String(), "seed": pl.Int64(),
    "created_at": pl.Datetime("us", "UTC"), "experiments": pl.List(pl.String()), "apps": pl.List(pl.String()),
    "run_ids": pl.List(pl.String()), "n_rows": pl.Int64(), "data_hash": pl.String(),
    "features": pl.List(pl.String()), "counters": pl.List(pl.String()),
    "cv_r2": pl.Float64(), "cv_mape": pl.Float64(), "cv_folds": pl.Int64(), "train_r2": pl.Float64(),
    "train_mape": pl.Float64(), "metrics": pl.String(), "params": pl.String(), "library_versions": pl.String(),
    "artifact": pl.String(), "artifact_sha256": pl.String(), "fingerprint": pl.String(), "status": pl.String(),
}
#: ``status`` of a model: ``ok``; ``rejected`` (not clearly better than the training mean on unseen programs: R² < 0.3
#: or MAPE not 20 % below the mean predictor's, models.registry.model_status; not used unless asked for by id);
#: ``unevaluated`` (fewer than two applications to test it on unseen ones)
STATUSES: tuple[str, ...] = ("ok", "rejected", "unevaluated")
PREDICTION_SCHEMA: dict[str, pl.DataType] = {
    "model_id": pl.String(), "target": pl.String(), "experiment": pl.String(), "run_id": pl.String(),
    "appl": pl.Int32(), "task": pl.Int32(), "thread": pl.Int32(), "burst_seq": pl.Int64(),
    "predicted": pl.Float64(), "actual": pl.Float64(), "predicted_at": pl.Datetime("us", "UTC"),
}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class UnknownModelError(UnknownExperimentError):
    """A model id that is not in the registry (or no model at all)."""


class ArtifactIntegrityError(WarehouseError):
    """A model artifact is missing, altered since it was written, or holds types outside the trusted list."""


def models_dir(wh: Warehouse) -> Path:
    return wh.root / "models"


def predictions_dir(wh: Warehouse) -> Path:
    return wh.root / "predictions"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_model(wh: Warehouse, record: dict, artifact: bytes) -> Path:
    """Commit a new model version (record row + artifact) in one rename; returns its directory.

    ``record`` holds the :data:`MODEL_SCHEMA` columns except ``artifact``/``artifact_sha256``, filled in here.
    """
    model_id = record["model_id"]
    if not _ID.match(model_id):
        raise WarehouseError(f"invalid model id {model_id!r}")
    wh.ensure()
    target = models_dir(wh) / model_id
    if target.exists():
        raise WarehouseError(f"model {model_id} already exists in {wh.root}")
    row = {**record, "artifact": ARTIFACT, "artifact_sha256": sha256(artifact)}
    with wh.staged(target) as stage:
        (stage / ARTIFACT).write_bytes(artifact)
        pl.DataFrame([row], schema=MODEL_SCHEMA).write_parquet(stage / RECORD)
    return target


#: an artifact larger than this is not one synthtrace wrote (its models are kilobytes to megabytes), bytes
MAX_ARTIFACT_BYTES = 1 << 30
#: the zip directory of an artifact, bytes: ~70 per member (hgb models have ~1,000 members: 65 kB); a longer one
#: would have Python's zipfile build a ZipInfo object for each of millions of entries before any check
MAX_DIRECTORY_BYTES = 8 << 20
#: the ``schema.json`` member skops parses whole into Python objects, bytes (hgb models: ~1.2 MB)
MAX_SCHEMA_BYTES = 64 << 20
_END_OF_DIRECTORY = struct.Struct("<4s4H2LH")  # the zip's end-of-central-directory record (APPNOTE 4.3.16)


def _read_record(path: Path) -> pl.DataFrame:
    try:
        if reason := content_damage(path):  # [helper integrity] issue 23: a damaged page is not read as a record
            raise OSError(reason)
        return pl.read_parquet(path, glob=False)
    except (OSError, pl.exceptions.PolarsError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ArtifactIntegrityError(f"{path}: the model record cannot be read (altered or damaged: {reason}); "
                                     "remove its folder or train again") from None


def read_models(wh: Warehouse) -> pl.DataFrame:
    """The models view as a frame, oldest first (empty, typed, when no model was trained). Only regular files
    reached through no link count (a FIFO or a link planted in ``models/`` is not a record: reading it could hang
    or leave the warehouse), and only in the folders the commits wrote (a copy ``models/<id>.bak``, whose manifest
    names another folder, is not a model: attack 11 E5 listed one model three times); a record that cannot be read
    raises ArtifactIntegrityError."""
    root = models_dir(wh)
    if (line := top_link_line(wh.root, root.name)) is not None:  # attack 19 F12: was "no models", the link unnamed
        raise ForeignFolderError(line)
    files = [f for name in stored_folders(wh.root, root.name)
             if is_own_file(root, f := root / name / RECORD)] if root.is_dir() else []
    if not files:
        return pl.DataFrame(schema=MODEL_SCHEMA)
    out = pl.concat([_read_record(f) for f in files], how="diagonal_relaxed").sort("created_at", "model_id")
    if "status" not in out.columns:  # versions written before models had a status
        out = out.with_columns(pl.lit(None, pl.String).alias("status"))
    return out


def model_record(wh: Warehouse, model_id: str | None = None, target: str | None = None) -> dict:
    """One model's row: ``model_id`` (whatever its status), else the newest model that is not ``rejected`` (of
    ``target`` if given); raises UnknownModelError."""
    models = read_models(wh)
    if model_id is not None:
        hit = models.filter(pl.col("model_id") == model_id)
        if hit.height == 0:
            known = models["model_id"].to_list()[-5:]
            raise UnknownModelError(f"no model {model_id!r} in {wh.root}"
                                    + (f" (newest: {', '.join(known)})" if known else " (no model trained yet)"))
        return hit.row(0, named=True)
    if target is not None:
        models = models.filter(pl.col("target") == target)
    what = f" for target {target!r}" if target else ""
    if models.height == 0:
        raise UnknownModelError(f"no model{what} in {wh.root} (train one with `synthtrace train`)")
    usable = models.filter(pl.col("status").fill_null("ok") != "rejected")
    if usable.height == 0:
        newest = models.row(models.height - 1, named=True)
        # models (issue 28 wording): the rejection rule is R² < 0.3 or MAPE not 20 % below the mean predictor's
        mape = f", MAPE {newest['cv_mape']:.1%}" if newest.get("cv_mape") is not None else ""
        raise UnknownModelError(f"no usable model{what} in {wh.root}: every one is rejected (the newest, "
                                f"{newest['model_id']}, is not clearly better than the training mean on unseen "
                                f"programs: R² {newest['cv_r2']:.3f}{mape}); pass --model ID to use one anyway")
    return usable.row(usable.height - 1, named=True)


def read_artifact(wh: Warehouse, record: dict) -> bytes:
    """The artifact bytes of a model, after checking their SHA-256 against the record. The artifact is the
    regular file ``models/<model_id>/model.skops`` reached through no link, at most :data:`MAX_ARTIFACT_BYTES`: a
    record naming another path, or a link, FIFO or device in its place, is refused before anything is read."""
    folder = models_dir(wh) / str(record["model_id"])
    path = folder / ARTIFACT
    if record["artifact"] != ARTIFACT or folder.parent != models_dir(wh) or not is_own_file(models_dir(wh), path):
        raise ArtifactIntegrityError(f"{path}: the model artifact is not the regular file its record names "
                                     f"({record['artifact']!r}); refusing to load it")
    try:
        if path.stat().st_size > MAX_ARTIFACT_BYTES:
            raise ArtifactIntegrityError(f"{path}: the model artifact is larger than {MAX_ARTIFACT_BYTES >> 20} MiB: "
                                         "not one synthtrace wrote; refusing to load it")
        data = path.read_bytes()
    except OSError as exc:
        raise ArtifactIntegrityError(f"{path}: cannot read the model artifact ({exc.strerror})") from None
    if sha256(data) != record["artifact_sha256"]:
        raise ArtifactIntegrityError(f"{path}: artifact does not match its recorded SHA-256 (altered since it was "
                                     "written); refusing to load it")
    check_members(data, f"model {record['model_id']} ({path})")
    return data


def check_members(data: bytes, what: str) -> None:
    """Refuse an artifact whose members could take more memory or time to read than its own bytes (``what``
    names it in the error): synthtrace writes skops archives with every member stored, not compressed (skops'
    default), so each member's uncompressed size in the zip directory is its stored size, and all of them fit in
    the archive. A deflated member (a 5.7 MB archive whose one ``.npy`` inflated to 3 GiB took 3.4 GB and 9 min,
    deaf to SIGTERM), a directory entry whose sizes disagree (a lying entry), members overlapping to more bytes
    than the archive holds, a zip directory over :data:`MAX_DIRECTORY_BYTES` or a ``schema.json`` over
    :data:`MAX_SCHEMA_BYTES` are refused before skops reads anything (security, attack 8 B5). Raises
    ArtifactIntegrityError."""
    def refused(why: str) -> ArtifactIntegrityError:
        return ArtifactIntegrityError(f"{what}: {why}: not an artifact synthtrace wrote; refusing to load it")

    end = data.rfind(b"PK\x05\x06", max(0, len(data) - (1 << 16) - _END_OF_DIRECTORY.size))
    if end < 0 or len(data) - end < _END_OF_DIRECTORY.size:
        raise refused("no zip directory")
    *_, n_members, directory_bytes, _offset, _comment = _END_OF_DIRECTORY.unpack_from(data, end)
    if n_members == 0xFFFF or directory_bytes > MAX_DIRECTORY_BYTES:  # 0xFFFF: a zip64 directory
        raise refused(f"its zip directory holds {'more than 65,534' if n_members == 0xFFFF else n_members} members "
                      f"in {directory_bytes:,} bytes (at most {MAX_DIRECTORY_BYTES:,})")
    try:
        members = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, NotImplementedError, struct.error) as exc:
        raise refused(f"its zip directory cannot be read ({exc})") from None
    for m in members:
        if m.compress_type != zipfile.ZIP_STORED:
            raise refused(f"member {m.filename!r} is compressed (method {m.compress_type}) to inflate to "
                          f"{m.file_size:,} bytes")
        if m.file_size != m.compress_size or m.header_offset + m.compress_size > len(data):
            raise refused(f"member {m.filename!r} declares {m.file_size:,} bytes stored as {m.compress_size:,} at "
                          f"byte {m.header_offset:,} of {len(data):,}")
        if m.filename == "schema.json" and m.file_size > MAX_SCHEMA_BYTES:
            raise refused(f"member 'schema.json' holds {m.file_size:,} bytes (at most {MAX_SCHEMA_BYTES:,})")
    if (total := sum(m.file_size for m in members)) > len(data):
        raise refused(f"its {len(members)} members hold {total:,} bytes, more than the archive's {len(data):,} "
                      "(members overlap)")


def write_predictions(wh: Warehouse, model_id: str, experiment: str, frame: pl.DataFrame, *,
                      check: Callable[[], None] | None = None) -> Path:
    """Replace one experiment's predictions of a model atomically; returns the file. The commit holds the
    experiment's writers' lock, which ``runs rm|move`` hold while they change its runs and remove its predictions
    (:func:`remove_predictions`); ``check()`` runs first under it and raises to refuse the commit (the runs the
    frame was computed from have changed: attack 20 F7, the view kept 2,140 rows of a run removed meanwhile)."""
    wh.ensure()
    target = predictions_dir(wh) / model_id
    name = f"{file_name(experiment)}.parquet"
    # a name no experiment may have (no run is in it, no admin locks it) has no folder to lock
    locked = wh.writers_lock(wh.experiment_dir(experiment)) if name_problem(experiment) is None \
        else contextlib.nullcontext()
    with locked:
        if check is not None:
            check()
        with _restaged(wh, target, {name}) as stage:
            frame.select(list(PREDICTION_SCHEMA)).cast(PREDICTION_SCHEMA).write_parquet(stage / name)
    return target / name


def remove_predictions(wh: Warehouse, experiments: Iterable[str]) -> list[str]:
    """Remove every model's predictions of ``experiments`` (their runs changed: attack 19 F14, the view gave rows
    of removed runs), each model's folder in one commit; returns the experiments that had some, in name order."""
    root = predictions_dir(wh)
    files = {f"{file_name(e)}.parquet": e for e in experiments}
    had: set[str] = set()
    for model in stored_folders(wh.root, root.name) if root.is_dir() else []:
        target = root / model
        if gone := {n for n in files if is_own_file(target, target / n)}:
            with _restaged(wh, target, gone):
                pass
            had.update(files[n] for n in gone)
    return sorted(had)


@contextlib.contextmanager
def _restaged(wh: Warehouse, target: Path, without: set[str]) -> Iterator[Path]:
    """A stage of ``target`` holding its files but those named in ``without``; committed in one rename on exit.
    Commits of one ``target`` take turns (its writers' lock, taken after any experiment's): each rebuilds the whole
    folder, so one made meanwhile would be lost (another experiment's predictions) or undone (a removal)."""
    with wh.writers_lock(target), wh.staged(target, replace=True) as stage:
        if target.is_dir():
            for entry in target.iterdir():
                if entry.name not in without and entry.is_file():
                    link_or_copy(entry, stage / entry.name)
        yield stage


# ------------------------------------------------------------------------------------------ training data
def experiment_apps(wh: Warehouse) -> dict[str, str]:
    """experiment -> application (the app of its first run by name; the experiment name if it has no runs)."""
    runs = runs_table(wh)
    out: dict[str, str] = {}
    if runs.height and "app" in runs.columns:
        for exp, app in runs.sort("run_name").select("experiment", "app").iter_rows():
            out.setdefault(exp, app or exp)
    for name in experiments(wh):  # a copied experiment folder is no application (attack 10 D2)
        out.setdefault(name, name)
    return out


def merged_bursts_file(folder: Path) -> Path | None:
    """The merged bursts' file of the experiment ``folder``, or None when it was not merged (or is no commit's)."""
    return stored_file(folder, MERGED_FILE) if folder.is_dir() else None
