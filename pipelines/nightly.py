"""The nightly Prefect flow (DESIGN §9): discover new traces, ingest them, merge and analyse the experiments
whose runs changed, detect, retrain, publish a summary and the report.

Every task is a thin wrapper around a plain function (:mod:`synthtrace.pipelines.jobs`); nothing in the inner
loops knows Prefect. A trace still being written waits for a later night (:mod:`synthtrace.warehouse.drop`); a
trace that fails in any way is quarantined with its reason and the night goes on. What
completed is recorded in the warehouse (:mod:`synthtrace.warehouse.night_state`), so a night killed at any
moment is finished by the next one, and a night with nothing new does nothing. Tasks run at most as many at a
time as the machine has cores (:func:`cores`): merges and ingests are CPU-bound.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from prefect import Flow, flow, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.futures import as_completed
from prefect.states import Completed
from prefect.task_runners import ThreadPoolTaskRunner

from synthtrace.pipelines import interrupts, jobs, server_watch
from synthtrace.pipelines.memory_budget import PROCESS_BUDGET, jobs_mb, local_workers, night_memory_mb
from synthtrace.pipelines.prefect_api import PrefectUnavailableError, check_prefect_api
from synthtrace.tracelib.errors import BadInputError, SynthtraceError, TraceChangedError, TruncatedTraceError
from synthtrace.tracelib.read_stop import stop_reads
from synthtrace.tracelib.printable import escaped
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.drop import (
    CUT_GRACE_S,
    DEFAULT_SETTLE_S,
    STILL_WRITTEN,
    FilesState,
    check_drop,
    discover,
    drop_lock,
    files_state,
    is_machine_error,
    is_warehouse_error,
    quarantine,
    unsettled_for,
)
from synthtrace.warehouse.ingest import ContentId
from synthtrace.warehouse.layout import ReadOnlyWarehouseError, close_commits
from synthtrace.warehouse.night_lock import night_lock
from synthtrace.warehouse.night_state import RECORD as NIGHT_RECORD
from synthtrace.warehouse.night_state import (
    Pending,
    fingerprint,
    global_stages_left,
    mark_experiment,
    mark_global,
    pending,
)

FLOW_NAME = "synthtrace-nightly"
DEPLOYMENT_NAME = "nightly"
#: seconds the ephemeral Prefect server gets to start, first try and retry (Prefect's default, 20 s, is too
#: short on a loaded 2-core machine); a larger PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS wins
STARTUP_TIMEOUTS_S = (90, 180)

#: progress callback of a night: (stage, items done, items in the stage)
Progress = Callable[[str, int, int], None]


def cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a batch job's share of the node)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class NightSummary:
    """What one night did; the flow's result and the source of its artifacts."""

    drop: str
    warehouse: str
    ingested: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, str]] = field(default_factory=list)
    waiting: list[dict[str, str]] = field(default_factory=list)  # traces still being written: a later night takes them
    skipped: list[dict[str, str]] = field(default_factory=list)  # traces left with a note (gone, name not UTF-8)
    merged: list[dict[str, Any]] = field(default_factory=list)
    archetypes: dict[str, dict[str, float]] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    report: str | None = None
    skipped_steps: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)  # stages with nothing to do tonight
    errors: list[dict[str, Any]] = field(default_factory=list)

    def record(self, job: jobs.Job, result: Any) -> None:
        """Keep a job's result (experiment scope: experiment -> result) in its field of the summary."""
        if job.summary == "merged":
            self.merged = [m for m in result.values() if m]
        elif job.summary == "alerts":
            self.alerts = list(result or [])
        elif job.summary is not None:
            setattr(self, job.summary, result)

    def message(self) -> str:
        return (f"{len(self.ingested)} runs ingested, {len(self.quarantined)} quarantined, "
                f"{len(self.merged)} experiments merged, "
                # issue 28 (models helper): alerts later nights contradicted are withdrawn, and said so
                f"{sum(a.get('status') != 'withdrawn' for a in self.alerts)} alerts"
                + (f", {n} withdrawn" if (n := sum(a.get("status") == "withdrawn" for a in self.alerts)) else "")
                + (f", {len(self.waiting)} waiting ({STILL_WRITTEN})" if self.waiting else "")
                + (f", {len(self.skipped)} skipped" if self.skipped else "")
                + (f", {len(self.errors)} stage errors" if self.errors else ""))


def _silent(stage: str, done: int, total: int) -> None:
    """The progress of a night nobody watches (a served deployment)."""


def one_line(exc: BaseException) -> str:
    """An exception as one line: our errors as they are, anything else prefixed with its type."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    first = text.splitlines()[0]
    return first if isinstance(exc, SynthtraceError) else f"{type(exc).__name__}: {first}"


# ---------------------------------------------------------------------------------------------- tasks
def discovered(drop: str | Path, wh: Warehouse, settle_s: float = DEFAULT_SETTLE_S) -> list[dict[str, Any]]:
    """The traces of the drop folder (:func:`~synthtrace.warehouse.drop.discover`) as the flow takes them (JSON):
    each new one hashed once (its id and files' stat go to its ingest, ``known``, which then does not hash it again;
    ``files``: its files' state, checked again before the ingest); the others with a ``status`` (``waiting``,
    ``skipped``) and the reason, their path escaped where it is not UTF-8. Each a few hundred bytes however many
    files its trace has (:class:`~synthtrace.warehouse.drop.FilesState`)."""
    found = discover(Path(drop), wh, settle_s)
    return ([{"path": str(d.path), "run_id": d.run_id, "experiment": d.experiment,
              "files": list(d.files) if d.files else None, "known": list(d.known) if d.known else None}
             for d in found.new]
            + [{"path": t.path, "status": "waiting", "reason": t.reason} for t in found.waiting]
            + [{"path": t.path, "status": "skipped", "reason": t.reason} for t in found.skipped])


def _to_ingest(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in found if "status" not in f]


#: the file, in the night's scratch folder under the warehouse's ``.staging``, that lists what discovery found
MANIFEST = "found.jsonl"


def write_manifest(folder: Path, found: list[dict[str, Any]]) -> str:
    """Write ``found`` (:func:`discovered`) into ``folder`` as :data:`MANIFEST`, one JSON line per trace; returns
    its path, which the flow takes as its parameter (:func:`read_manifest`): the list itself as a parameter grows
    with the drop, and Prefect refuses a flow run whose parameters pass 512 KB (attack 22 F3: one 3,000-location
    OTF2 archive under an absolute path, and the night never ran again)."""
    path = folder / MANIFEST
    with path.open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(item) + "\n" for item in found)
    return str(path)


def read_manifest(path: str) -> list[dict[str, Any]]:
    """The traces :func:`write_manifest` wrote into ``path``."""
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


@task(name="discover")
def discover_task(drop: str, wh: Warehouse, settle_s: float) -> list[dict[str, Any]]:
    return discovered(drop, wh.ensure(), settle_s)


#: the note of a trace gone between discovery and its ingest
GONE = "gone since it was found (another night took it, or its owner moved it)"


@task(name="ingest", retries=0)
def ingest_task(item: dict[str, Any], drop: str, wh: Warehouse) -> dict[str, Any]:
    """Ingest one trace. Whatever it raises, the trace is quarantined and the night goes on, unless the failure says
    nothing about the trace: the machine's or the warehouse's (disk full, read-only warehouse, a stage gone: the
    trace stays, a stage error), a trace gone meanwhile (skipped), one whose files changed since discovery (still
    being written: it waits for a later night, and is never quarantined), or a read the stopped night ended."""
    return _ingested(item, drop, wh)


def _ingested(item: dict[str, Any], drop: str, wh: Warehouse) -> dict[str, Any]:
    """:func:`ingest_task`'s work, counted as a running job (:data:`_jobs`) once its estimated working set fits in
    the night's memory budget (:data:`~synthtrace.pipelines.memory_budget.PROCESS_BUDGET`). A module-level function:
    a Dask worker gets the task's function pickled by value with the globals it reads, and a lock cannot be pickled."""
    with PROCESS_BUDGET.held(jobs.ingest_working_mb(Path(item["path"]))), _jobs.running() as may_start:
        return _ingest(item, drop, wh) if may_start else {"status": "failed", "path": item["path"],
                                                          "reason": NOT_STARTED}


def _ingest(item: dict[str, Any], drop: str, wh: Warehouse) -> dict[str, Any]:
    path = Path(item["path"])

    def left(status: str, reason: str) -> dict[str, Any]:
        get_run_logger().info("%s %s: %s", status, path, reason)
        return {"status": status, "path": str(path), "reason": reason}

    changed = f"{STILL_WRITTEN} (its files changed since it was found)"
    if not path.exists():
        return left("skipped", GONE)
    found_state = FilesState(*item["files"]) if item.get("files") else None
    if found_state is not None and files_state(path) != found_state:
        return left("waiting", changed)
    try:
        known = ContentId(*item["known"]) if item.get("known") else None
        res = jobs.ingest(wh, path, default_experiment=item["experiment"], known=known)
    except Exception as exc:  # any failure of one trace, even a bug's, must not end the night
        if interrupts.received is not None:  # the night is stopping: its read was ended, the trace is sound
            raise
        reason = one_line(exc)
        if is_machine_error(exc) or is_warehouse_error(exc, wh):
            get_run_logger().warning("not ingested %s: %s", path, reason)
            return {"status": "failed", "path": str(path), "reason": reason}
        if not path.exists():
            return left("skipped", GONE)
        if isinstance(exc, TraceChangedError) or (found_state is not None and files_state(path) != found_state):
            return left("waiting", changed)
        cut = isinstance(exc, TruncatedTraceError)
        if cut and (age := unsettled_for(files_state(path), CUT_GRACE_S)) is not None:
            return left("waiting", f"{STILL_WRITTEN}? ({reason}; changed {max(age, 0) / 3600:.1f} h ago: a writer "
                                   f"may still hold it; quarantined if still so {CUT_GRACE_S / 3600:g} h after)")
        try:
            where = quarantine(Path(drop), path, reason)
        except OSError as move_exc:  # a read-only drop folder: say so, leave the trace, go on
            return {"status": "failed", "path": str(path), "reason": f"{reason} (and not quarantined: {move_exc})"}
        if where is None:
            return left("skipped", GONE)
        get_run_logger().warning("quarantined %s in %s: %s", escaped(path.name), escaped(str(where)),
                                 escaped(reason))  # attack 18 F6: a name's newline split the log line
        return {"status": "quarantined", "path": str(path), "reason": reason, "to": str(where)}
    return {"status": res.status, "path": str(path), "run_id": res.run_id, "run_name": res.run_name,
            "experiment": res.experiment, "n_bursts": res.n_bursts}


@task(name="stage")
def stage_task(stage: str, wh: Warehouse, args: list[Any], settings: jobs.NightSettings) -> dict[str, Any]:
    """Run one later stage, ``run(wh, *args, settings)`` of its :class:`~synthtrace.pipelines.jobs.Job`:
    ``{"ok": result}``, or ``{"error": ...}`` when it fails (one experiment's failure is reported and retried next
    night, never allowed to end this one)."""
    try:
        return _stage_run(stage, wh, args, settings)
    except Exception as exc:  # reported in the summary; the stage stays pending
        text = one_line(exc)
        get_run_logger().warning("%s %s failed: %s", stage, " ".join(map(str, args)), text)
        return {"error": text, "stage": stage, "args": [str(a) for a in args]}


def _stage_run(stage: str, wh: Warehouse, args: list[Any], settings: jobs.NightSettings) -> dict[str, Any]:
    """:func:`stage_task`'s work, counted as a running job within the memory budget (see :func:`_ingested`); a
    warehouse stage runs alone (no other job runs beside it) and holds the least share (1 MB)."""
    job = jobs.job(stage)
    working_mb = jobs.stage_working_mb(wh, job, args[0]) if job.scope == "experiment" else 0
    with PROCESS_BUDGET.held(working_mb), _jobs.running() as may_start:
        if not may_start:
            return {"error": NOT_STARTED, "stage": stage, "args": [str(a) for a in args]}
        return {"ok": job.run(wh, *args, settings)}


def _experiment_stage(job: jobs.Job, wh: Warehouse, items: list[Pending], settings: jobs.NightSettings,
                      summary: NightSummary, tell: Progress) -> dict[str, Any]:
    """Run ``job`` over ``items`` (mapped tasks); experiment -> result of those that completed."""
    tell(job.name, 0, len(items))
    futures = stage_task.with_options(name=job.name).map(unmapped(job.name), unmapped(wh),
                                                         [[p.experiment] for p in items], unmapped(settings))
    by_future = {f.task_run_id: p.experiment for f, p in zip(futures, items)}
    done: dict[str, Any] = {}
    for n, fut in enumerate(as_completed(futures), 1):
        out = fut.result()
        if "error" in out:
            summary.errors.append(out)
        else:
            done[by_future[fut.task_run_id]] = out["ok"]
        tell(job.name, n, len(items))
    return done


# ---------------------------------------------------------------------------------------------- flow
def night(drop: str, warehouse: str, machine: str | None = None, skip: list[str] | None = None,
          manifest: str | None = None, tell: Progress = _silent,
          settle_s: float = DEFAULT_SETTLE_S, *, locked: bool = False, memory_mb: int | None = None) -> NightSummary:
    """One night, inside a flow: ingest what cluster jobs dropped, then every job of :data:`jobs.JOBS` not in
    ``skip``, in order: an experiment job on the experiments it has not completed on for their current runs (or that
    a job before it redid tonight, see ``Job.invalidates``), skipping an experiment once one of its jobs failed
    tonight; a warehouse job when the warehouse changed since it last completed. ``manifest``: the file listing the
    new traces when the caller has discovered them already (:func:`write_manifest`). ``tell`` hears the progress.
    ``settle_s``: seconds a trace's files must have been unchanged for the night to take it
    (:mod:`synthtrace.warehouse.drop`). The night holds the drop folder's and the warehouse's night locks
    (:func:`~synthtrace.warehouse.drop.drop_lock`, :func:`~synthtrace.warehouse.night_lock.night_lock`; ``locked``:
    the caller holds them already), or stops at once when another night holds one. ``memory_mb``: the night's memory
    target (:func:`~synthtrace.pipelines.memory_budget.night_memory_mb`; None: the environment's or the default):
    its ingests and experiment stages run side by side only while their estimated working sets fit in what the
    process's base leaves of it."""
    if not Path(drop).is_dir():
        raise BadInputError(f"{drop}: the drop folder does not exist (or is not a folder)")
    with contextlib.ExitStack() as held:
        if not locked:
            held.enter_context(drop_lock(Path(drop)))
            held.enter_context(night_lock(Warehouse(warehouse), drop))
        PROCESS_BUDGET.resize(jobs_mb(night_memory_mb(memory_mb)))
        return _night(drop, warehouse, machine, skip, manifest, tell, settle_s)


def _night(drop: str, warehouse: str, machine: str | None, skip: list[str] | None,
           manifest: str | None, tell: Progress, settle_s: float) -> NightSummary:
    """:func:`night`, its lock held."""
    summary = NightSummary(drop=str(drop), warehouse=str(warehouse))
    skipped = set(skip or ())
    summary.skipped_steps = [s for s in jobs.STAGES if s in skipped]
    wh = Warehouse(warehouse)
    settings = jobs.NightSettings(machine=machine)

    tell("discover", 0, 1)
    if manifest is None:
        found = discover_task(drop, wh, settle_s)
    else:
        wh.ensure()
        found = read_manifest(manifest)
    tell("discover", 1, 1)
    _note_left(summary, found)
    new = _to_ingest(found)
    tell("ingest", 0, len(new))
    for n, fut in enumerate(as_completed(ingest_task.map(new, drop=drop, wh=unmapped(wh))), 1):
        r = fut.result()
        if r["status"] in ("waiting", "skipped"):
            _note_left(summary, [r])
        elif r["status"] == "quarantined":
            summary.quarantined.append({"path": r["path"], "reason": r["reason"]})
        elif r["status"] == "failed":
            summary.errors.append({"stage": "ingest", "args": [r["path"]], "error": r["reason"]})
        elif r["status"] == "ingested":
            summary.ingested.append(r)
        tell("ingest", n, len(new))

    per_experiment = [j for j in jobs.JOBS if j.scope == "experiment" and j.name not in skipped]
    todo, invalid = pending(wh, [j.name for j in per_experiment])
    summary.up_to_date = [j.name for j in per_experiment if not any(j.name in p.stages for p in todo)]
    first = next(j.name for j in jobs.JOBS if j.scope == "experiment")
    summary.errors += [{"stage": first, "args": [e], "error": "not a valid experiment name; move its runs to "
                        "another experiment"} for e in invalid]
    stale: dict[str, set[str]] = {}  # experiment -> jobs made stale by a job redone tonight
    failed: set[str] = set()  # experiments one of whose jobs failed tonight: their later jobs wait
    for job in per_experiment:
        items = [p for p in todo if p.experiment not in failed
                 and (job.name in p.stages or job.name in stale.get(p.experiment, ()))]
        done = _experiment_stage(job, wh, items, settings, summary, tell)
        for p in items:
            if p.experiment in done and _recorded(summary, job.name, [p.experiment], functools.partial(
                    mark_experiment, wh, p, [job.name], invalidates=job.invalidates)):
                stale.setdefault(p.experiment, set()).update(job.invalidates)
            else:
                failed.add(p.experiment)
        summary.record(job, done)

    state = fingerprint(wh)
    per_warehouse = [j for j in jobs.JOBS if j.scope == "warehouse" and j.name not in skipped]
    left = global_stages_left(wh, [j.name for j in per_warehouse], state)
    summary.up_to_date += [j.name for j in per_warehouse if j.name not in left]
    completed = []
    for job in (j for j in per_warehouse if j.name in left):
        tell(job.name, 0, 1)
        out = stage_task.with_options(name=job.name)(job.name, wh, [], settings)
        tell(job.name, 1, 1)
        if "error" in out:
            summary.errors.append(out)
            continue
        completed.append(job.name)
        summary.record(job, out["ok"])
    if completed:
        _recorded(summary, ", ".join(completed), [], functools.partial(mark_global, wh, state, completed))
    if summary.report is None and "report" not in skipped and (wh.root / "report.html").is_file():
        summary.report = str(wh.root / "report.html")
    _publish(summary)
    return Completed(message=summary.message(), data=summary)


def _recorded(summary: NightSummary, stage: str, args: list[str], write: Callable[[], None]) -> bool:
    """Write the night's record that ``stage`` is done (for ``args``); a record that cannot be written (a full disk,
    attack 19 F7) is that stage's failure in the summary, as any other: it stays pending and runs again next night,
    and the night goes on. Returns whether the record was written."""
    try:
        write()
    except (OSError, SynthtraceError) as exc:
        text = f"its record of the night could not be written ({one_line(exc)}); it runs again next night"
        get_run_logger().warning("%s %s failed: %s", stage, " ".join(args), text)
        summary.errors.append({"stage": stage, "args": args, "error": text})
        return False
    return True


def _note_left(summary: NightSummary, items: list[dict[str, Any]]) -> None:
    """Keep in the summary the traces of ``items`` the night leaves where they are (waiting, skipped)."""
    for item in items:
        if item.get("status") in ("waiting", "skipped"):
            getattr(summary, item["status"]).append({"path": item["path"], "reason": item["reason"]})


def _flow_options(task_runner: Any = None) -> dict[str, Any]:
    return {"name": FLOW_NAME, "log_prints": False, "validate_parameters": True,
            "task_runner": task_runner or ThreadPoolTaskRunner(max_workers=cores())}


#: the progress callback of the night :func:`run_night` runs (:func:`_watched_night`; per call, so two nights run by
#: two threads each tell their own). Kept out of the flow object: Prefect pickles that object (its function's
#: closure, and a function not its module's by value with the globals it reads) into every task it hands a Dask
#: worker process, and a progress display holds a lock, which ended every ``nightly --runner dask`` on its
#: temporary cluster of processes (attack 14 F15)
_tell: ContextVar[Progress] = ContextVar("synthtrace_night_progress", default=_silent)

def _watched_night(drop: str, warehouse: str, machine: str | None = None, skip: list[str] | None = None,
                   manifest: str | None = None, settle_s: float = DEFAULT_SETTLE_S,
                   memory_mb: int | None = None) -> NightSummary:
    """:func:`nightly_flow` of a night someone watches (:data:`_tell`), run by :func:`run_night`, which holds the
    night's locks. A module-level function: pickled by reference (its module and name), never by value."""
    if _stop_now is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_now)  # Prefect's engine put its own (crash reports) in its place
    return night(drop, warehouse, machine, skip, manifest, _tell.get(), settle_s, locked=True, memory_mb=memory_mb)


def night_flow(task_runner: Any = None) -> Flow:
    """The nightly flow (its name :data:`FLOW_NAME` in Prefect) of a night someone watches: its progress goes to
    :data:`_tell` (:func:`watched`). Run in this process only (:func:`run_night`); the deployed flow is
    :func:`nightly_flow`."""
    return flow(_watched_night, **_flow_options(task_runner), description=nightly_flow.__doc__)


@contextlib.contextmanager
def watched(tell: Progress) -> Iterator[None]:
    """While the block runs, the night of :func:`night_flow` tells its progress to ``tell``."""
    token = _tell.set(tell)
    try:
        yield
    finally:
        _tell.reset(token)


@flow(**_flow_options())
def nightly_flow(drop: str, warehouse: str, machine: str | None = None, skip: list[str] | None = None,
                 manifest: str | None = None, settle_s: float = DEFAULT_SETTLE_S,
                 memory_mb: int | None = None) -> NightSummary:
    """One night: ingest what cluster jobs dropped, merge and analyse what changed (or what a killed night left
    unfinished), publish the results. ``skip`` names later stages not to run tonight; ``manifest``: the file
    listing the new traces, when discovered before the flow started (:func:`write_manifest`; else the flow discovers
    them); ``settle_s``: seconds a trace's files must have been unchanged to be taken tonight; ``memory_mb``: the
    night's memory target (MB; None: SYNTHTRACE_NIGHT_MEMORY_MB or the default). The flow ``synthtrace serve``
    deploys (a module-level function: its entrypoint must import)."""
    return night(drop, warehouse, machine, skip, manifest, settle_s=settle_s, memory_mb=memory_mb)


def _publish(summary: NightSummary) -> None:
    lines = [f"# synthtrace night: {summary.message()}", "",
             f"- drop folder: `{summary.drop}`", f"- warehouse: `{summary.warehouse}`"]
    if summary.report:
        lines.append(f"- report: `{summary.report}`")
    if summary.quarantined:
        lines += ["", "## Quarantined", *[f"- `{q['path']}`: {q['reason']}" for q in summary.quarantined]]
    if summary.waiting:
        lines += ["", "## Waiting for a later night", *[f"- `{q['path']}`: {q['reason']}" for q in summary.waiting]]
    if summary.skipped:
        lines += ["", "## Skipped", *[f"- `{q['path']}`: {q['reason']}" for q in summary.skipped]]
    if summary.archetypes:
        lines += ["", "## Archetype mix (share of time)"]
        for exp, mix in summary.archetypes.items():
            top = ", ".join(f"{k} {v:.0%}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1])[:5])
            lines.append(f"- {exp}: {top}")
    if summary.errors:
        lines += [
            "",
            "## Stage errors",
            *[f"- {e['stage']} {' '.join(e['args'])}: {e['error']}" for e in summary.errors],
        ]
    if summary.skipped_steps:
        lines += ["", f"Stages not run: {', '.join(summary.skipped_steps)}"]
    if summary.up_to_date:
        lines += ["", f"Nothing new for: {', '.join(summary.up_to_date)}"]
    create_markdown_artifact("\n".join(lines), key="night-summary", description="synthtrace nightly summary")
    create_table_artifact(summary.alerts or [{"alert": "none"}], key="night-alerts", description="regression alerts")


#: the handler of a night someone watches that stops it at once (:func:`stopping_at_once`), None when none runs
_stop_now: Callable[[int, Any], None] | None = None
#: the ephemeral Prefect server this process started (:func:`start_prefect`), stopped with a night stopped at once
_server: Any = None


class _RunningJobs:
    """The night's jobs (ingests, stages) running in the task runner's threads, for a stopped night to wait for
    (:func:`stopping_at_once`): a job the stop asked to end removes what it was writing as it ends. A job in the main
    thread is not counted: the stop's handler runs there, in its place."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[bool]:
        """Count the block as a running job; yields whether it may start (not once the night is stopping: the task
        runner starts the jobs it holds while the stop waits for the running ones)."""
        counted = threading.current_thread() is not threading.main_thread()
        with self._changed:
            self._count += counted
        try:
            yield interrupts.received is None
        finally:
            with self._changed:
                self._count -= counted
                self._changed.notify_all()

    def wait_ended(self, timeout_s: float, asking: Callable[[], object]) -> None:
        """Wait at most ``timeout_s`` for the running jobs to end, calling ``asking()`` (which asks them to) every
        :data:`ASK_EVERY_S`: a job that starts another read meanwhile is asked again."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._count and (left := deadline - time.monotonic()) > 0:
                asking()
                self._changed.wait(min(left, ASK_EVERY_S))


_jobs = _RunningJobs()
#: folders of the night's own a stopped night removes before it ends (the process ends without unwinding)
_removed_on_stop: list[Path] = []


@contextlib.contextmanager
def _removed_when_stopped(folder: Path) -> Iterator[Path]:
    """While the block runs, a stopped night removes ``folder`` (its manifest's scratch folder) before it ends."""
    _removed_on_stop.append(folder)
    try:
        yield folder
    finally:
        _removed_on_stop.remove(folder)


#: seconds a stopped night waits for its running jobs to end, each removing what it was writing (an OTF2 read ends at
#: its next location or chunk, :func:`~synthtrace.tracelib.formats.otf2.stop_reads`); a batch system's
#: SIGKILL follows its SIGTERM some 30 s later
STOP_WAIT_S = 5.0
#: seconds between two asks of a stopped night's jobs to end
ASK_EVERY_S = 0.2
#: the reason of a job a stopped night did not start
NOT_STARTED = "not started: the night was stopped"


@contextlib.contextmanager
def stopping_at_once(before_exit: Callable[[], None] = lambda: None) -> Iterator[None]:
    """While the block runs a night in this process, Ctrl-C or SIGTERM (``timeout``, a batch system's ``scancel``
    or time limit, with SIGKILL some 30 s later) ends the process at once: ``before_exit()`` (a progress display put
    away), no commit let in any more (:func:`~synthtrace.warehouse.layout.close_commits`), the running jobs asked to
    stop and waited for at most :data:`STOP_WAIT_S` (each removes what it was
    writing; attack 22 F6: the process ended under a worker thread still writing, its stage left), one line on the
    real stderr saying what the night had stored (:func:`~synthtrace.pipelines.interrupts.stopped_line`), the
    ephemeral server stopped, exit 128 + the signal; a second signal ends it without waiting. Unwinding would
    instead wait for the running stages' threads to finish, and Prefect would report the crash to a server the same
    signal stopped, retrying for a minute with a page of tracebacks. Stopping at any moment leaves the warehouse
    whole: every stage commits by one rename, and the next night finishes what this one left
    (:mod:`~synthtrace.warehouse.night_state`)."""
    global _stop_now
    stopping: list[int] = []
    said_to: list[int] = []  # the stderr the night began with, for its one line

    def end() -> None:
        line = f"{interrupts.stopped_line()}; the next night finishes what this one left\n"
        for stream in (sys.stderr, sys.stdout):
            with contextlib.suppress(Exception):
                stream.flush()
        # the real stderr: a reader's thread may have sys.stderr redirected (attack 22 F6), and while the server
        # starts file descriptor 2 is its pipe, whose forwarding the exit cuts short (attack 23 F7: exit 130, silent)
        with contextlib.suppress(OSError):
            os.write(said_to[0] if said_to else 2, line.encode(errors="backslashreplace"))
        with contextlib.suppress(Exception):
            stop_server(log_wait_s=0)  # its shutdown records to the server's log, not after the stop line
        os._exit(interrupts.exit_code())

    def stop_now(signum: int, frame: Any) -> None:
        if stopping:  # a second signal while the jobs are waited for: no more waiting
            end()
        stopping.append(signum)
        interrupts.received = signum
        close_commits(STOP_WAIT_S)  # what the line says is stored is all that is: a job's later commit is refused
        logging.disable(logging.CRITICAL)  # the stopped jobs' crash reports (Prefect's) are no news
        with contextlib.suppress(Exception):
            before_exit()
        _jobs.wait_ended(STOP_WAIT_S, stop_reads)
        for folder in list(_removed_on_stop):
            shutil.rmtree(folder, ignore_errors=True)
        end()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with contextlib.suppress(OSError):  # no stderr (closed): the line is written to none
        said_to.append(os.dup(2))
    previous = {s: signal.signal(s, stop_now) for s in (signal.SIGINT, signal.SIGTERM)}
    _stop_now = stop_now
    try:
        yield
    finally:
        _stop_now = None
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for fd in said_to:
            os.close(fd)


def configured_server() -> str | None:
    """The Prefect server PREFECT_API_URL names (environment or Prefect profile), after checking that it answers
    (one line, :class:`PrefectUnavailableError`, when it does not); None when none is configured."""
    from prefect.settings import PREFECT_API_URL

    if url := PREFECT_API_URL.value():
        check_prefect_api(url)
    return url or None


def start_prefect() -> None:
    """Start the ephemeral Prefect server (no PREFECT_API_URL set: :func:`configured_server`), with a start-up
    time that survives a loaded machine and one retry; one clear line (:class:`PrefectUnavailableError`) if it
    still fails."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_ENABLED, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    if not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return
    configured = PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
    timeouts = [max(configured, t) for t in STARTUP_TIMEOUTS_S]
    global _server
    for timeout in timeouts:
        server = _server = SubprocessASGIServer()  # the one this process runs, if any (a singleton)
        try:
            if not server.running:  # else started by an earlier night of this process
                with server_watch.marking(), _server_stderr.starting():  # the watcher first: a night killed while
                    server.start(timeout=timeout)  # its server starts stops it too
                atexit.unregister(stop_server)  # once however many times it restarts, and after Prefect's own
                atexit.register(stop_server)  # stop, which each start registers: atexit runs the last registered first
            server_watch.watch(server.server_process.pid)  # one watcher per process, however many nights
            return
        except RuntimeError:
            server.stop()  # the process that did not answer in time; the retry starts a fresh one
    raise PrefectUnavailableError(
        f"the local Prefect server did not start within {timeouts[0]} s, nor {timeouts[1]} s on retry (is the "
        "machine overloaded?); set PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS higher, or PREFECT_API_URL "
        "to a running server")


class _ServerStderr:
    """The ephemeral server's standard error, a pipe this process forwards to its own stderr while the server serves
    (its real errors show; a traceback of its own goes to :data:`SERVER_LOG`, one line said), and into
    :data:`SERVER_LOG` once the server is being stopped: a night of many task runs ended with the server's shutdown
    records under its summary, "task_run_recorder - Error flushing 1 events" and CancelledError tracebacks (attack 16
    F10), its services cancelled while they still wrote the night's last task runs (those records are lost with or
    without them)."""

    def __init__(self) -> None:
        self.stopping = False
        self.thread: threading.Thread | None = None

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """While the block starts the server, the processes this process starts write their stderr to the pipe
        (file descriptor 2 is the pipe; what this process writes meanwhile is forwarded as well)."""
        try:
            own = os.dup(2)
        except OSError:  # no stderr (closed): the server gets none either
            yield
            return
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self.stopping = False
        self.thread = threading.Thread(target=self._forward, args=(read, own), name="synthtrace-server-stderr",
                                       daemon=True)
        self.thread.start()
        try:
            yield
        finally:
            os.dup2(own, 2)  # this process's stderr again; the pipe's write end is the server's alone

    def _forward(self, read: int, own: int) -> None:
        self._log: IO[bytes] | None = None
        self._in_traceback = False
        pending = b""  # a serving line not ended yet
        try:
            while chunk := os.read(read, 65536):
                if not self.stopping:
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        self._serve(line + b"\n", own)
                    continue
                if self._log is None:
                    self._log = _open_server_log("stopping")
                if self._log is not None:
                    self._log.write(pending + chunk)
                    pending = b""
        except OSError:
            pass
        finally:
            os.close(read)
            os.close(own)
            if self._log is not None:
                self._log.close()

    def _serve(self, line: bytes, own: int) -> None:
        """One line the server wrote while serving: to the terminal (``own``), or to :data:`SERVER_LOG` within a
        traceback of its own services (attack27 A5: its event sweeper's "database is locked", 120 lines 44 min into a
        long night), which one line on the terminal says; the traceback ends at the server's next record line."""
        if line.startswith(b"Traceback (most recent call last):") and not self._in_traceback:
            self._in_traceback = True
            self._log = self._log or _open_server_log("a traceback while it served")
            os.write(own, f"warning: the local Prefect server logged a traceback of its own (kept in "
                          f"{_server_log_path()}); the night goes on\n".encode())
        elif self._in_traceback and _SERVER_RECORD.match(line):
            self._in_traceback = False
        if not self._in_traceback:
            os.write(own, line)
        elif self._log is not None:
            self._log.write(line)

    def stopped(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` for the stopped server's last records to reach :data:`SERVER_LOG`."""
        if self.thread is not None:
            self.thread.join(timeout_s)


def _server_log_path() -> Path:
    from prefect.settings import PREFECT_HOME

    return Path(PREFECT_HOME.value()) / SERVER_LOG


def _open_server_log(why: str) -> IO[bytes] | None:
    """:data:`SERVER_LOG`, to append to, its section headed by ``why``; None when it cannot be written."""
    try:
        log = _server_log_path().open("ab")
        log.write(f"--- the ephemeral server of night process {os.getpid()}: {why}\n".encode())
        return log
    except OSError:
        return None


#: the file, in PREFECT_HOME, that keeps what the ephemeral server writes while it stops, and its tracebacks
SERVER_LOG = "synthtrace-server-stop.log"
#: the first line of a record of the server's own logging (Prefect's "12:00:00.000 | ERROR | name - ..." or
#: uvicorn's "ERROR:    ..."): what ends a traceback it wrote
_SERVER_RECORD = re.compile(rb"^(\d\d:\d\d:\d\d\.\d+ \| |[A-Z]+: )")
_server_stderr = _ServerStderr()
#: seconds the stopped server's last records have to reach :data:`SERVER_LOG`
SERVER_LOG_S = 10.0


def stop_server(log_wait_s: float = SERVER_LOG_S) -> None:
    """Stop the ephemeral server this process started (at exit, or with a night stopped at once): what it writes
    while it stops goes to :data:`SERVER_LOG`, not under the night's summary; its last records are waited for at
    most ``log_wait_s`` seconds (0: a night stopped at once does not wait)."""
    if _server is None or _server.server_process is None:
        return
    _server_stderr.stopping = True
    _server.stop()
    _server_stderr.stopped(log_wait_s)


def nothing_to_do(drop: Path, wh: Warehouse, skip: list[str] | None = None,
                  found: list[dict[str, Any]] | None = None) -> NightSummary | None:
    """The summary of a night with nothing to do (no new trace, no stage pending), found without starting
    Prefect (most of such a night's time on a busy machine); None when there is work. ``found``: the new traces
    (:func:`discovered`), when known. A night whose traces all wait for their writers is one (they are listed in
    the summary; the night that takes them runs the flow), even on a warehouse that holds no run yet."""
    skipped = set(skip or ())
    if not Path(drop).is_dir():
        raise BadInputError(f"{drop}: the drop folder does not exist (or is not a folder)")
    if found is None:
        found = discovered(drop, wh)
    if _to_ingest(found):
        return None
    if not _new_warehouse(wh):
        todo, invalid = pending(wh, [j.name for j in jobs.JOBS if j.scope == "experiment" and j.name not in skipped])
        global_stages = [j.name for j in jobs.JOBS if j.scope == "warehouse" and j.name not in skipped]
        if todo or invalid or global_stages_left(wh, global_stages, fingerprint(wh)):
            return None
    report = wh.root / "report.html"
    summary = NightSummary(drop=str(drop), warehouse=str(wh.root),
                           skipped_steps=[s for s in jobs.STAGES if s in skipped],
                           up_to_date=[s for s in jobs.STAGES if s not in skipped],
                           report=str(report) if "report" not in skipped and report.is_file() else None)
    _note_left(summary, found)
    return summary


def _new_warehouse(wh: Warehouse) -> bool:
    """Whether ``wh`` holds no run and no night completed a stage on it: no stage has anything to do (a warehouse
    whose runs were all removed is not new: its report and models must follow)."""
    return not (wh.root / f"{NIGHT_RECORD}.json").exists() and not (wh.runs_dir.is_dir() and any(wh.runs_dir.iterdir()))


def run_night(drop: Path, wh: Warehouse, machine: str | None = None,
              runner: str = "thread", dask_address: str | None = None, skip: list[str] | None = None,
              progress: Progress | None = None, settle_s: float = DEFAULT_SETTLE_S,
              memory_mb: int | None = None) -> NightSummary:
    """Run the flow once in this process (ephemeral Prefect unless PREFECT_API_URL is set); ``progress`` is
    called as stages advance. ``memory_mb``: the night's memory target (MB; None: SYNTHTRACE_NIGHT_MEMORY_MB or the
    default, :func:`~synthtrace.pipelines.memory_budget.night_memory_mb`), which the ingests and experiment stages
    running side by side share (a temporary Dask cluster: as many workers as fit in it). A night with nothing to do
    returns at once, without Prefect (a configured server is checked all the same). ``settle_s``: seconds a trace's
    files must have been unchanged to be taken tonight (0: at once, for traces known to be complete). The drop
    folder's lock and the warehouse's night lock are held throughout (another night on either: one line, exit 75). A
    warehouse this process cannot write is not locked: a night with nothing to do needs no write access; one with
    work says the warehouse is read-only, nothing done."""
    check_drop(Path(drop), wh.root)  # attack 14 F12, F14: nothing done for a drop folder no night may take
    memory_mb = night_memory_mb(memory_mb)  # a bad SYNTHTRACE_NIGHT_MEMORY_MB: one line, nothing done
    # [helper edges] issue 23 A26: a configured server that does not answer is said every night, not only on one
    server = configured_server()  # with work (a night with nothing to do never reached its check)
    with contextlib.ExitStack() as held:
        held.enter_context(drop_lock(drop))
        try:
            held.enter_context(night_lock(wh, drop))
            read_only = None
        except ReadOnlyWarehouseError as exc:  # no other night can write it either
            read_only = exc
        found = discovered(drop, wh, settle_s)  # once: the flow ingests what this found, by the ids it hashed
        if (quiet := nothing_to_do(drop, wh, skip, found)) is not None:
            return quiet
        if read_only is not None:
            raise read_only
        manifest = write_manifest(held.enter_context(_removed_when_stopped(
            held.enter_context(wh.ensure().scratch(wh.root, "night")))), found)
        del found  # the flow reads it back
        if server is None:
            start_prefect()
        f = night_flow(dask_runner(dask_address, server or _server.api_url, memory_mb) if runner == "dask" else None)
        try:
            if server is not None:
                _quiet_when_server_lost()
            with watched(progress or _silent), quiet_dask() if runner == "dask" else contextlib.nullcontext():
                state = f(drop=str(drop), warehouse=str(wh.root), machine=machine, skip=list(skip or []),
                          manifest=manifest, settle_s=settle_s, memory_mb=memory_mb, return_state=True)
            send_logs()
            if state.is_failed():
                state.result()  # raises the flow's exception
            return state.result()
        except Exception as exc:
            if server is not None and (lost := server_lost(exc)) is not None:
                raise PrefectUnavailableError(
                    f"the Prefect server at {server} (PREFECT_API_URL) stopped answering during the night ({lost}); "
                    "what the night's stages committed before is stored, nothing is half-written: start the server "
                    "and run the night again to finish it") from None
            raise


def dask_runner(address: str | None, api_url: str, memory_mb: int | None = None) -> Any:
    """The Dask task runner of a night on the Prefect server at ``api_url``: on the cluster whose scheduler is at
    ``address``, or on a temporary local cluster of worker processes of one thread that report to that server
    (PREFECT_API_URL in their environment): :func:`cores` of them, or fewer, as many as the night's memory target
    ``memory_mb`` holds (:func:`~synthtrace.pipelines.memory_budget.local_workers`; an external cluster's workers are
    its own). A worker with no PREFECT_API_URL starts a Prefect server of its
    own (~220 MB), where the night's task runs are recorded, outside the night's watch: a night killed by SIGKILL
    left it running for good (attack 16 F2). An external cluster's workers are warned about
    (:func:`warn_workers_without_server`)."""
    from prefect_dask import DaskTaskRunner

    if address:
        warn_workers_without_server(address, api_url)
        return DaskTaskRunner(address=address)
    workers = local_workers(night_memory_mb(memory_mb), cores(), jobs.INGEST_CEILING_MB)
    return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True,
                                          "env": {"PREFECT_API_URL": api_url}})


#: seconds to reach an external Dask cluster's scheduler to ask its workers for their Prefect server
DASK_ASK_S = 30


def _worker_api_url() -> str | None:
    """The Prefect server a Dask worker's task runs report to (PREFECT_API_URL, environment or profile); None when
    it would start one of its own. Run on each worker (module-level: pickled by reference)."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def warn_workers_without_server(address: str, api_url: str) -> None:
    """Say on stderr (one line) which workers of the Dask cluster at ``address`` have no PREFECT_API_URL: each
    would start a Prefect server of its own (~220 MB, for as long as the worker runs) and record the night's task
    runs there, not on the night's server ``api_url``. Nothing when the cluster cannot be asked (the night then
    says why it cannot reach it)."""
    from distributed import Client

    try:
        with quiet_dask(), Client(address, timeout=DASK_ASK_S) as client:
            urls = client.run(_worker_api_url)
    except Exception:  # the runner's own connection reports an unreachable cluster
        return
    if bare := sorted(w for w, url in urls.items() if url is None):
        who = f"Dask workers {', '.join(bare)} have" if len(bare) > 1 else f"Dask worker {bare[0]} has"
        sys.stderr.write(f"warning: {who} no PREFECT_API_URL: each starts a Prefect server of its own (~220 MB, as "
                         f"long as it runs) and records the night's task runs there; start them with "
                         f"PREFECT_API_URL={api_url}\n")


@contextlib.contextmanager
def quiet_dask() -> Iterator[None]:
    """While the block runs, Dask's scheduler, nannies and client in this process log warnings and errors only:
    their INFO records (~35 lines a night: addresses, workers registered and retired) buried the night's progress and
    summary."""
    logger = logging.getLogger("distributed")
    before = logger.level
    logger.setLevel(max(before, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(before)


#: seconds the night's log records queued for the Prefect server have to reach it at the end of the night
LOG_SEND_S = 10.0


def send_logs() -> None:
    """Send the log records Prefect still holds for its server (its API log worker sends them in batches, every 2 s)
    now, while the server runs: the console script's exit stops the ephemeral server first, so a night that logged a
    warning in its last seconds ended with "--- Error logging to API --- / All connection attempts failed" under its
    summary (attack 14 F8). Waits at most :data:`LOG_SEND_S`."""
    from prefect.logging.handlers import APILogWorker

    waiting = APILogWorker.drain_all(timeout=LOG_SEND_S)
    if inspect.iscoroutine(waiting):  # called inside an event loop (a notebook): the records go in the background
        waiting.close()


#: the Prefect loggers whose records about a server that went away mid-night are its client's retries, said once
#: by the night's own error line instead (attack 10 D4: 14+ records of ~2 KB and a traceback)
SERVER_RETRY_LOGGERS = ("prefect.events.clients", "prefect._internal.concurrency", "prefect.flow_runs",
                        "prefect.task_runs")


class _ServerRetries(logging.Filter):
    """Drops a Prefect record that reports its client failing to reach the server (a transport error in its
    exception, or the events client's "Unable to connect"): :func:`run_night` says it once, at the end."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and server_lost(record.exc_info[1]) is not None:
            return False
        text = record.getMessage()
        return not ("Unable to connect to" in text or "failed to process item Event" in text
                    or "Connection refused" in text)


def _quiet_when_server_lost() -> None:
    """Install :class:`_ServerRetries` on :data:`SERVER_RETRY_LOGGERS` (once per process)."""
    for name in SERVER_RETRY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ServerRetries) for f in logger.filters):
            logger.addFilter(_ServerRetries())


def server_lost(exc: BaseException) -> str | None:
    """Why the Prefect server stopped answering, when ``exc`` (or what caused it) is a transport error of its
    client (httpx: refused, reset, timed out): attack 10 D4, a server killed mid-night ended it in four tracebacks
    and exit 1. None for any other failure."""
    import httpx

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, httpx.TransportError):
            return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        exc = exc.__cause__ or exc.__context__
    return None


def summary_dict(summary: NightSummary) -> dict[str, Any]:
    return asdict(summary)
