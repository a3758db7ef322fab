"""The nightly Prefect flow (DESIGN §9): discover new traces, ingest them, merge the experiments that changed,
classify archetypes, publish a summary and the report.

Every task is a thin wrapper around a plain library function; nothing in the inner loops knows Prefect.
A broken trace is quarantined with its reason and the night goes on.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from prefect import flow, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.states import Completed

from synthtrace.tracelib.errors import SynthtraceError
from synthtrace.warehouse import Warehouse
from synthtrace.warehouse.drop import discover, quarantine
from synthtrace.warehouse.ingest import ingest_trace

FLOW_NAME = "synthtrace-nightly"
STAGES = ("merge", "archetypes", "detect", "retrain", "report")
DEPLOYMENT_NAME = "nightly"


@dataclass
class NightSummary:
    """What one night did; the flow's result and the source of its artifacts."""

    drop: str
    warehouse: str
    ingested: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, str]] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    archetypes: dict[str, dict[str, float]] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    report: str | None = None
    skipped_steps: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def message(self) -> str:
        return (f"{len(self.ingested)} runs ingested, {len(self.quarantined)} quarantined, "
                f"{len(self.merged)} experiments merged, {len(self.alerts)} alerts"
                + (f", {len(self.errors)} stage errors" if self.errors else ""))


# ---------------------------------------------------------------------------------------------- tasks
@task(name="discover")
def discover_task(drop: str, warehouse: str) -> list[dict[str, Any]]:
    found = discover(Path(drop), Warehouse(warehouse).ensure())
    return [{"path": str(d.path), "run_id": d.run_id} for d in found]


@task(name="ingest", retries=0)
def ingest_task(item: dict[str, Any], drop: str, warehouse: str) -> dict[str, Any]:
    """Ingest one trace; a broken one is quarantined and reported instead of failing the night."""
    path = Path(item["path"])
    try:
        res = ingest_trace(Warehouse(warehouse), path)
    except SynthtraceError as exc:
        quarantine(Path(drop), path, str(exc))
        get_run_logger().warning("quarantined %s: %s", path.name, exc)
        return {"status": "quarantined", "path": str(path), "reason": str(exc)}
    return {"status": res.status, "path": str(path), "run_id": res.run_id, "run_name": res.run_name,
            "experiment": res.experiment, "n_bursts": res.n_bursts}


@task(name="stage")
def stage_task(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run one later stage ``fn(*args, **kwargs)``; bad input in one experiment is reported, not allowed to end
    the night."""
    try:
        return fn(*args, **kwargs)
    except SynthtraceError as exc:
        get_run_logger().warning("%s failed: %s", getattr(fn, "__name__", "stage"), exc)
        return {"error": str(exc), "stage": getattr(fn, "__name__", "stage"), "args": [str(a) for a in args]}


def _optional_steps() -> dict[str, Any]:
    """The later stages that exist in this installation (absent ones are reported as skipped, never faked)."""
    from synthtrace.pipelines import night_steps
    return night_steps.available()


# ---------------------------------------------------------------------------------------------- flow
@flow(name=FLOW_NAME, log_prints=False, validate_parameters=True)
def nightly_flow(drop: str, warehouse: str, machine: str | None = None,
                 skip: list[str] | None = None) -> NightSummary:
    """One night: ingest what cluster jobs dropped, merge and analyse what changed, publish the results.
    ``skip`` names later stages not to run tonight (merge, archetypes, detect, retrain, report)."""
    summary = NightSummary(drop=str(drop), warehouse=str(warehouse))
    Path(drop).mkdir(parents=True, exist_ok=True)
    found = discover_task(drop, warehouse)
    results = ingest_task.map(found, drop=drop, warehouse=warehouse).result() if found else []
    for r in results:
        if r["status"] == "quarantined":
            summary.quarantined.append({"path": r["path"], "reason": r["reason"]})
        elif r["status"] == "ingested":
            summary.ingested.append(r)
    changed = sorted({r["experiment"] for r in summary.ingested})

    steps = {k: v for k, v in _optional_steps().items() if k not in set(skip or ())}
    summary.skipped_steps = [n for n in STAGES if n not in steps]
    if "merge" in steps and changed:
        merged = stage_task.with_options(name="merge").map(
            unmapped(steps["merge"]), [[e] for e in changed], unmapped({"warehouse": warehouse})).result()
        summary.merged = [m for m in merged if m and "error" not in m]
        summary.errors += [m for m in merged if m and "error" in m]
    if "archetypes" in steps and changed:
        mixes = stage_task.with_options(name="archetypes").map(
            unmapped(steps["archetypes"]), [[e] for e in changed],
            unmapped({"warehouse": warehouse, "machine": machine})).result()
        summary.archetypes = {e: m for e, m in zip(changed, mixes) if m and "error" not in m}
        summary.errors += [m for m in mixes if m and "error" in m]
    for name, kwargs in (("detect", {}), ("retrain", {}), ("report", {"machine": machine})):
        if name in steps:
            out = stage_task.with_options(name=name)(steps[name], [], {"warehouse": warehouse, **kwargs})
            if isinstance(out, dict) and "error" in out:
                summary.errors.append(out)
            elif name == "detect":
                summary.alerts = list(out or [])
            elif name == "report":
                summary.report = out
    _publish(summary)
    return Completed(message=summary.message(), data=summary)


def _publish(summary: NightSummary) -> None:
    lines = [f"# synthtrace night: {summary.message()}", "",
             f"- drop folder: `{summary.drop}`", f"- warehouse: `{summary.warehouse}`"]
    if summary.report:
        lines.append(f"- report: `{summary.report}`")
    if summary.quarantined:
        lines += ["", "## Quarantined", *[f"- `{q['path']}`: {q['reason']}" for q in summary.quarantined]]
    if summary.archetypes:
        lines += ["", "## Archetype mix (share of time)"]
        for exp, mix in summary.archetypes.items():
            top = ", ".join(f"{k} {v:.0%}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1])[:5])
            lines.append(f"- {exp}: {top}")
    if summary.errors:
        lines += ["", "## Stage errors", *[f"- {e['stage']} {' '.join(e['args'])}: {e['error']}" for e in summary.errors]]
    if summary.skipped_steps:
        lines += ["", f"Stages not run: {', '.join(summary.skipped_steps)}"]
    create_markdown_artifact("\n".join(lines), key="night-summary", description="synthtrace nightly summary")
    create_table_artifact(summary.alerts or [{"alert": "none"}], key="night-alerts", description="regression alerts")


def run_night(drop: str | Path, warehouse: str | Path, machine: str | None = None,
              runner: str = "thread", dask_address: str | None = None, skip: list[str] | None = None) -> NightSummary:
    """Run the flow once in this process (ephemeral Prefect, no server needed)."""
    f = nightly_flow
    if runner == "dask":
        from prefect_dask import DaskTaskRunner
        f = nightly_flow.with_options(task_runner=DaskTaskRunner(address=dask_address) if dask_address
                                      else DaskTaskRunner(cluster_kwargs={"n_workers": 2, "threads_per_worker": 1,
                                                                          "processes": True}))
    state = f(drop=str(drop), warehouse=str(warehouse), machine=machine, skip=list(skip or []), return_state=True)
    if state.is_failed():
        state.result()  # raises the flow's exception
    return state.result()


def summary_dict(summary: NightSummary) -> dict[str, Any]:
    return asdict(summary)
