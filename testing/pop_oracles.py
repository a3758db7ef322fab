"""The real clients as oracles of the POP table (issue 25 item 4).

- **paramedir** (Paraver's kernel; ``SYNTHTRACE_PARAMEDIR``, see testing/paramedir.py): per thread, a counter summed
  over the useful (Running) bursts, the way BSC's modelfactors asks for it: a window of the counter's next event
  value, a window of the ``Useful`` function (1 while Running), their product, and a histogram of its ``Sum bursts``.
- **Dimemas** (``SYNTHTRACE_DIMEMAS``, else ``Dimemas`` on ``PATH``; ``prv2dim`` beside it): the trace translated with
  ``prv2dim`` and simulated on an ideal network (zero latency, no bandwidth limit, one task per node), or on a
  given latency and bandwidth; the runtime is the end time of the Paraver trace Dimemas writes.

Both are built from BSC's public repositories (/work/coord/TOOLS.md); tests skip where they are not found.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from testing.paramedir import _column, find_paramedir

__all__ = ["counter_type", "dimemas_ideal_runtime", "dimemas_runtime", "find_dimemas", "find_paramedir",
           "first_application_copy", "paramedir_useful_counter"]


def _window(wid: int, name: str, thread_fn: str, extra: list[str]) -> list[str]:
    functions = ", ".join(f"{{{level}, {fn}}}" for level, fn in (
        ("cpu", "Active Thd"), ("appl", "Adding"), ("task", "Adding"), ("thread", thread_fn), ("node", "Adding"),
        ("system", "Adding"), ("workload", "Adding"), ("from_obj", "All"), ("to_obj", "All"), ("tag_msg", "All"),
        ("size_msg", "All"), ("bw_msg", "All"), ("evt_type", "=" if extra else "All"), ("evt_value", "All")))
    return [f"< NEW DISPLAYING WINDOW {name} >", f"window_name {name}", "window_type single", f"window_id {wid}",
            "window_units Nanoseconds", "window_level thread", "window_scale_relative 1.000000000000",
            "window_end_time_relative 1.000000000000", "window_object appl { 1, { All } }",
            "window_begin_time_relative 0.000000000000", "window_open false",
            f"window_selected_functions {{ 14, {{ {functions} }} }}", *extra, ""]


def _useful_counter_cfg(event_type: int) -> str:
    """Three windows (the counter's next value, Useful, their product) and a one-column Sum bursts histogram."""
    compose = ", ".join(f"{{{c}, As Is}}" for c in ("compose_cpu", "compose_appl", "compose_task", "compose_thread",
                                                   "compose_node", "compose_system", "compose_workload",
                                                   "topcompose1", "topcompose2"))
    lines = ["#ParaverCFG", "ConfigFile.Version: 3.4", "ConfigFile.NumWindows: 3", "",
             *_window(1, "counter", "Next Evt Val", [f"window_filter_module evt_type 1 {event_type}"]),
             *_window(2, "useful", "Useful", []),
             "< NEW DISPLAYING WINDOW useful_counter >", "window_name useful_counter", "window_type composed",
             "window_id 3", "window_factors 1.000000000000 1.000000000000", "window_operation product",
             "window_identifiers 1 2", "window_units Nanoseconds", "window_level thread",
             "window_scale_relative 1.000000000000", "window_end_time_relative 1.000000000000",
             "window_object appl { 1, { All } }", "window_begin_time_relative 0.000000000000", "window_open false",
             "window_selected_functions { 5, { {appl, Adding}, {task, Adding}, {node, Adding}, {system, Adding}, "
             "{workload, Adding}, } }", f"window_compose_functions {{ 9, {{ {compose} }} }}", "",
             "< NEW ANALYZER2D >", "Analyzer2D.Name: useful_counter", "Analyzer2D.ControlWindow: 3",
             "Analyzer2D.DataWindow: 3", "Analyzer2D.Accumulator: Semantic", "Analyzer2D.Statistic: Sum bursts",
             "Analyzer2D.CalculateAll: True", "Analyzer2D.HideCols: False", "Analyzer2D.HorizVert: Horizontal",
             "Analyzer2D.AnalysisLimits: Alltrace", "Analyzer2D.ComputeYScale: False", "Analyzer2D.Minimum: 0",
             "Analyzer2D.Maximum: 1000000000000000000", "Analyzer2D.Delta: 1000000000000000000",
             "Analyzer2D.ComputeGradient: False", ""]
    return "\n".join(lines)


def counter_type(pcf: Path, name: str) -> int | None:
    """The Paraver event type the .pcf labels ``name`` (``42000050 PAPI_TOT_INS [...]`` or ``(PAPI_TOT_INS)``)."""
    pattern = re.compile(rf"^\s*\d+\s+(\d+)\s+\(?{re.escape(name)}\)?[\s\[]")
    for line in pcf.read_text(errors="replace").splitlines():
        if m := pattern.match(line):
            return int(m.group(1))
    return None


def paramedir_useful_counter(paramedir: Path, prv: Path, event_type: int, workdir: Path,
                             timeout_s: float = 600) -> dict[tuple[int, int, int], int]:
    """Per (appl, task, thread): the counter ``event_type`` summed over the thread's useful bursts, by paramedir."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg, out = workdir / f"useful_{event_type}.cfg", workdir / f"useful_{event_type}.txt"
    cfg.write_text(_useful_counter_cfg(event_type))
    out.unlink(missing_ok=True)
    run = subprocess.run([str(paramedir), str(prv), str(cfg), str(out)], capture_output=True, text=True,
                         timeout=timeout_s, cwd=workdir)
    if not out.is_file():
        raise RuntimeError(f"paramedir wrote no table for {prv} (exit {run.returncode}): {run.stdout}{run.stderr}")
    header = out.read_text().splitlines()[0].split("\t")
    return _column(out, header[1])


def find_dimemas() -> tuple[Path, Path] | None:
    """(Dimemas, prv2dim): ``$SYNTHTRACE_DIMEMAS`` (the Dimemas binary, prv2dim beside it), else both on PATH."""
    found = os.environ.get("SYNTHTRACE_DIMEMAS") or shutil.which("Dimemas")
    if not found or not Path(found).is_file():
        return None
    prv2dim = Path(found).with_name("prv2dim")
    if not prv2dim.is_file():
        prv2dim = Path(shutil.which("prv2dim") or "")
    return (Path(found), prv2dim) if prv2dim.is_file() else None


def _network_cfg(n_tasks: int, latency_us: float = 0.0, bandwidth_gbs: float = 0.0, links: int = 1) -> str:
    """A Dimemas configuration: one task per node, ``latency_us`` per message and ``bandwidth_gbs`` between nodes
    (0: instantaneous), ``links`` input and output links per node (1 serialises a node's messages; many: no
    contention, synthtrace's model)."""
    lat, mbps = latency_us * 1e-6, bandwidth_gbs * 1e3
    return "\n".join([
        "#DIMEMAS_CONFIGURATION", "",
        '"wide area network information" {"", 1, 0, 4, 0.0, 0.0, 1};;', "",
        f'"environment information" {{"", 0, "", {n_tasks}, {mbps}, 0, 1}};;', "",
        f'"multi node information" {{0, {n_tasks}, "node", 1, 1.0, 0.0, 0.0, 0, {links}, {links}, {lat}, {links}, '
        f'{links}, 0.0}};;', "",
        '"predefined mapping information" {"1 TASKS_PER_NODE"};;', "",
        '"configuration files" {"", "", "", ""};;', "",
        '"file system parameters" {0.0, 0.0, 8.0, 0, 1.0};;', ""])


_HEADER = re.compile(r"^(#Paraver \([^)]*\):[^:]+:(?:\d+\([^)]*\)|\d+)):(\d+):(\d+\([^)]*\))")


def first_application_copy(prv: Path, dest: Path) -> Path:
    """``prv`` with its first application only (header and records of the others left out; .pcf/.row copied), for
    prv2dim, whose parser refuses a header of several applications (Extrae's uncore readers in appl 2, written by
    the cutter as ``2:8(...),12(...),14``). A trace of one application is returned as it is."""
    with open(prv) as f:
        header = f.readline()
    m = _HEADER.match(header)
    if m is None or m.group(2) == "1":
        return prv
    comms = re.search(r",(\d+)\s*$", header)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / prv.name
    with open(prv) as f, open(out, "w") as w:
        f.readline()
        w.write(f"{m.group(1)}:1:{m.group(3)}" + (f",{comms.group(1)}" if comms else "") + "\n")
        for line in f:
            kind, _, rest = line.partition(":")
            fields = rest.split(":")
            if kind in ("1", "2", "3") and fields[1] != "1" or kind == "3" and fields[7] != "1":
                continue
            w.write(line)
    for suffix in (".pcf", ".row"):
        if prv.with_suffix(suffix).is_file():
            shutil.copyfile(prv.with_suffix(suffix), out.with_suffix(suffix))
    return out


def dimemas_runtime(dimemas: Path, prv2dim: Path, prv: Path, n_tasks: int, workdir: Path, *,
                    latency_us: float = 0.0, bandwidth_gbs: float = 0.0, links: int = 1,
                    timeout_s: float = 600) -> int:
    """The runtime (ns) Dimemas predicts for ``prv`` (its first application, see :func:`first_application_copy`) on
    a network (default: the ideal one): the end time of its simulated trace."""
    workdir.mkdir(parents=True, exist_ok=True)
    prv = first_application_copy(prv, workdir / "appl1")
    dim, cfg, sim = workdir / f"{prv.stem}.dim", workdir / f"{prv.stem}.network.cfg", workdir / f"{prv.stem}.sim.prv"
    conv = subprocess.run([str(prv2dim), str(prv), str(dim)], capture_output=True, text=True, timeout=timeout_s,
                          cwd=workdir)
    if not dim.is_file():
        raise RuntimeError(f"prv2dim could not translate {prv} (exit {conv.returncode}): {conv.stdout}{conv.stderr}")
    cfg.write_text(_network_cfg(n_tasks, latency_us, bandwidth_gbs, links))
    run = subprocess.run([str(dimemas), "-S", "32k", "--dim", str(dim), "-p", str(sim), str(cfg)],
                         capture_output=True, text=True, timeout=timeout_s, cwd=workdir)
    if not sim.is_file():
        raise RuntimeError(f"Dimemas simulated nothing for {prv} (exit {run.returncode}): {run.stdout}{run.stderr}")
    header = sim.open().readline()  # #Paraver (dd/mm/yy at hh:mm):END_ns:...
    end = header.split(":")[2] if header.count(":") >= 3 else ""
    m = re.match(r"(\d+)(_ns|_us)?", end.split("(")[-1]) if end else None
    if m is None:
        raise RuntimeError(f"Dimemas wrote a trace without an end time: {header!r}")
    return int(m.group(1)) * (1000 if m.group(2) == "_us" else 1)


def dimemas_ideal_runtime(dimemas: Path, prv2dim: Path, prv: Path, n_tasks: int, workdir: Path) -> int:
    """The runtime (ns) Dimemas predicts for ``prv`` on an ideal network (zero latency, instantaneous transfers)."""
    return dimemas_runtime(dimemas, prv2dim, prv, n_tasks, workdir)
