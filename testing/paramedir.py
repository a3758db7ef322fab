"""Paraver's own loader as the oracle: paramedir (built from the public paraver-kernel repository) computes
per-thread statistics of a trace from a histogram configuration, and these are compared with what synthtrace
reads. paramedir is not on PyPI: point ``SYNTHTRACE_PARAMEDIR`` at the binary or put it on ``PATH``
(benchmarks/results/paramedir.md says how to build it). As a speed baseline, build it with ``./configure
--with-debug-level=release``: paraver-kernel's default adds no optimisation flag (g++ -O0), which runs 5-6x slower
(benchmarks/RESULTS.md, issue 27, session of Dec 4 perf15)."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

RUNNING = "Running"
STATE_NUMBER = {RUNNING: 1}


def find_paramedir() -> Path | None:
    """The paramedir binary: ``$SYNTHTRACE_PARAMEDIR``, else ``paramedir`` on ``PATH``; None when neither."""
    found = os.environ.get("SYNTHTRACE_PARAMEDIR") or shutil.which("paramedir")
    return Path(found) if found and Path(found).is_file() else None


def _state_cfg(statistic: str) -> str:
    """A one-window configuration: the thread's state as is, and a histogram of ``statistic`` per state."""
    functions = ", ".join(f"{{{level}, {fn}}}" for level, fn in (
        ("cpu", "Active Thd"), ("appl", "Adding"), ("task", "Adding"), ("thread", "State As Is"), ("node", "Adding"),
        ("system", "Adding"), ("workload", "Adding"), ("from_obj", "All"), ("to_obj", "All"), ("tag_msg", "All"),
        ("size_msg", "All"), ("bw_msg", "All"), ("evt_type", "All"), ("evt_value", "All")))
    compose = ", ".join(f"{{{c}, As Is}}" for c in ("compose_cpu", "compose_appl", "compose_task", "compose_thread",
                                                   "compose_node", "compose_system", "compose_workload",
                                                   "topcompose1", "topcompose2"))
    return "\n".join([
        "#ParaverCFG", "ConfigFile.Version: 3.4", "ConfigFile.NumWindows: 1", "",
        "< NEW DISPLAYING WINDOW state >", "window_name state", "window_type single", "window_id 1",
        "window_units Nanoseconds", "window_maximum_y 20.000000000000", "window_minimum_y 0.000000000000",
        "window_compute_y_max false", "window_level thread", "window_scale_relative 1.000000000000",
        "window_end_time_relative 1.000000000000", "window_object appl { 1, { All } }",
        "window_begin_time_relative 0.000000000000", "window_open false",
        f"window_selected_functions {{ 14, {{ {functions} }} }}", f"window_compose_functions {{ 9, {{ {compose} }} }}",
        "", "< NEW ANALYZER2D >", f"Analyzer2D.Name: {statistic}", "Analyzer2D.ControlWindow: 1",
        "Analyzer2D.DataWindow: 1", "Analyzer2D.Accumulator: Semantic", f"Analyzer2D.Statistic: {statistic}",
        "Analyzer2D.CalculateAll: True", "Analyzer2D.HideCols: False", "Analyzer2D.HorizVert: Horizontal",
        "Analyzer2D.AnalysisLimits: Alltrace", "Analyzer2D.ComputeYScale: False", "Analyzer2D.Minimum: 0",
        "Analyzer2D.Maximum: 20", "Analyzer2D.Delta: 1", "Analyzer2D.ComputeGradient: False", ""])


@dataclass(frozen=True)
class ParamedirView:
    """What paramedir made of a trace: per (appl, task, thread), the time in ns and the number of bursts in the
    Running state, and what it printed about records it skipped."""

    running_ns: dict[tuple[int, int, int], int]
    running_bursts: dict[tuple[int, int, int], int]
    messages: str


def _column(table: Path, state: str) -> dict[tuple[int, int, int], int]:
    header, *rows = [ln.rstrip("\n").split("\t") for ln in table.read_text().splitlines() if ln.strip()]
    col = header.index(state if state in header else f"Unknown state {STATE_NUMBER[state]}")  # no .pcf: no names
    out = {}
    for r in rows:
        if r[0].startswith("THREAD "):
            appl, task, thread = (int(x) for x in r[0].removeprefix("THREAD ").split("."))
            out[(appl, task, thread)] = round(float(r[col].replace(",", "")))
    return out


def paramedir_view(paramedir: Path, prv: Path, workdir: Path, timeout_s: float = 600) -> ParamedirView:
    """Run ``paramedir`` on ``prv`` (its .pcf/.row beside it) and read back its per-thread Running statistics.
    Raises RuntimeError when paramedir writes no table (it could not load the trace)."""
    workdir.mkdir(parents=True, exist_ok=True)
    args, outputs = [str(paramedir), str(prv)], {}
    for name, stat in (("time", "Time"), ("bursts", "# Bursts")):
        cfg = workdir / f"{name}.cfg"
        cfg.write_text(_state_cfg(stat))
        outputs[name] = workdir / f"{name}.txt"
        outputs[name].unlink(missing_ok=True)
        args += [str(cfg), str(outputs[name])]
    run = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, cwd=workdir)
    if not all(p.is_file() for p in outputs.values()):
        raise RuntimeError(f"paramedir could not load {prv} (exit {run.returncode}): {run.stdout}{run.stderr}")
    return ParamedirView(_column(outputs["time"], RUNNING), _column(outputs["bursts"], RUNNING),
                         (run.stdout + run.stderr).strip())


def synthtrace_view(bursts) -> tuple[dict[tuple[int, int, int], int], dict[tuple[int, int, int], int]]:
    """The same per-thread figures from synthtrace's bursts table: (Running time in ns, number of bursts)."""
    import polars as pl

    per = bursts.group_by("appl", "task", "thread").agg(pl.col("duration_ns").sum(), pl.len())
    keys = [(a, t, h) for a, t, h in per.select("appl", "task", "thread").iter_rows()]
    return (dict(zip(keys, per["duration_ns"].to_list())), dict(zip(keys, per["len"].to_list())))
