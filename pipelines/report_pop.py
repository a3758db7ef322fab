"""The POP section of the HTML report (issue 25 item 5): per application, the POP table in POP's colours (green >=
80 %, yellow >= 60 %, red below) and a scaling plot (efficiencies and speedup against cores), from the stored
``pop_metrics`` and ``pop_scaling`` tables (``synthtrace pop`` and the nightly POP stage compute them)."""
from __future__ import annotations

import base64
import html
import math
import re
from pathlib import Path

import polars as pl

from synthtrace.warehouse.layout import Warehouse

#: the rows of the table: (label, column of pop_metrics / pop_scaling, kind); kind "eff" (percent, coloured),
#: "x" (a factor), "s" (seconds), "n" (a count), "f" (a plain number)
ROWS: tuple[tuple[str, str, str], ...] = (
    ("Global efficiency", "global_efficiency", "eff"),
    ("  Parallel efficiency", "parallel_efficiency", "eff"),
    ("    Load balance", "load_balance", "eff"),
    ("    Communication efficiency", "communication_efficiency", "eff"),
    ("      Serialization efficiency", "serialization_efficiency", "eff"),
    ("      Transfer efficiency", "transfer_efficiency", "eff"),
    ("    MPI parallel efficiency", "mpi_parallel_efficiency", "eff"),
    ("      MPI load balance", "mpi_load_balance", "eff"),
    ("      MPI communication efficiency", "mpi_communication_efficiency", "eff"),
    ("    OpenMP parallel efficiency", "openmp_parallel_efficiency", "eff"),
    ("  Computation scalability", "computation_scalability", "eff"),
    ("    IPC scalability", "ipc_scalability", "eff"),
    ("    Instruction scalability", "instruction_scalability", "eff"),
    ("    Frequency scalability", "frequency_scalability", "eff"),
    ("Speedup", "speedup", "x"),
    ("Average IPC", "ipc", "f"),
    ("Average frequency (GHz)", "frequency_ghz", "f"),
    ("Runtime (s)", "runtime_ns", "s"),
    ("Runtime, ideal network (s)", "ideal_runtime_ns", "s"),
    ("Useful duration, max (s)", "useful_max_ns", "s"),
    ("Useful instructions", "useful_instructions", "n"),
)
#: POP's colour scale of an efficiency
GOOD, FAIR = 0.8, 0.6
HYBRID = {"mpi_parallel_efficiency", "mpi_load_balance", "mpi_communication_efficiency",
          "openmp_parallel_efficiency"}


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def band(value: float | None) -> str | None:
    """POP's colour band of an efficiency: ``good`` (>= 0.8, green), ``fair`` (>= 0.6, yellow), ``poor`` (red);
    None when unknown."""
    if _missing(value):
        return None
    return "good" if value >= GOOD else "fair" if value >= FAIR else "poor"


def format_value(value: object, kind: str) -> str:
    """A table cell's text by the row's kind (see :data:`ROWS`); "" when unknown."""
    if _missing(value):
        return ""
    return {"eff": f"{value:.2%}", "x": f"{value:.2f}", "s": f"{value * 1e-9:.4g}", "n": f"{value:.4g}",
            "f": f"{value:.3f}"}[kind]


_COLOURS = {"good": "#c6efce", "fair": "#ffeb9c", "poor": "#ffc7ce"}
#: the efficiencies drawn against cores
PLOTTED = ("global_efficiency", "parallel_efficiency", "load_balance", "communication_efficiency",
           "computation_scalability")


def _td(value: object, kind: str) -> str:
    colour = _COLOURS.get(band(value) or "") if kind == "eff" else None
    style = f" style='background:{colour}'" if colour else ""
    return f"<td{style}>{format_value(value, kind)}</td>"


def pop_table_html(runs: pl.DataFrame) -> str:
    """One application's POP table: rows = metrics, columns = its runs (pop_metrics joined with pop_scaling,
    ordered by cores)."""
    hybrid = bool(runs["n_threads"].fill_null(1).max() > 1)
    head = "".join(f"<th>{html.escape(r['run_name'])}<br>{r['n_ranks']} x {r['n_threads']}</th>"
                   for r in runs.iter_rows(named=True))
    rows = [f"<tr><th class='l'>metric</th>{head}</tr>"]
    for label, col, kind in ROWS:
        if col in HYBRID and not hybrid:
            continue
        indent = (len(label) - len(label.lstrip())) * 4
        rows.append(f"<tr><td class='l' style='padding-left:{indent + 7}px'>{html.escape(label.strip())}</td>"
                    + "".join(_td(v, kind) for v in runs[col].to_list()) + "</tr>")
    return f"<table>{''.join(rows)}</table>"


def plot_scaling(runs: pl.DataFrame, app: str, path: Path | None = None) -> bytes:
    """Efficiencies (left axis, %) and speedup (right axis, with the ideal line) against cores."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from synthtrace.pipelines.report import figure_png

    cores = (runs["n_ranks"] * runs["n_threads"].fill_null(1)).to_numpy()
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for col in PLOTTED:
        ax.plot(cores, runs[col].fill_null(float("nan")).to_numpy() * 100, marker="o", label=col.replace("_", " "))
    ax.axhspan(GOOD * 100, 100, color=_COLOURS["good"], alpha=0.4, lw=0)
    ax.axhspan(FAIR * 100, GOOD * 100, color=_COLOURS["fair"], alpha=0.4, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cores (ranks x threads)")
    ax.set_ylabel("efficiency (%)")
    ax.set_ylim(0, max(110.0, float(runs.select(pl.max_horizontal(*PLOTTED)).max().item() or 0) * 105))
    speed = ax.twinx()
    speed.plot(cores, runs["speedup"].to_numpy(), color="black", marker="s", label="speedup")
    speed.plot(cores, cores / cores.min(), color="grey", ls=":", label="ideal speedup")
    speed.set_ylabel("speedup")
    lines = ax.get_legend_handles_labels()
    more = speed.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="lower left")
    ax.set_title(f"POP scaling of {app}")
    png = figure_png(fig, path)
    plt.close(fig)
    return png


def pop_section(wh: Warehouse, plot_dir: Path | None = None) -> str:
    """The report's POP section: per application its table and, with runs at two scales or more, its scaling plot;
    a note when ``synthtrace pop`` has not been run."""
    from synthtrace.pipelines.report import heading
    from synthtrace.tracelib.domain.pop import cores
    from synthtrace.warehouse.pop_store import read_pop_metrics, read_pop_scaling

    metrics, scaling = read_pop_metrics(wh), read_pop_scaling(wh)
    title = heading(2, "POP efficiency", "pop")
    if metrics.height == 0:
        return f"{title}<p class='note'>No POP table yet: run <code>synthtrace pop</code>.</p>"
    df = (metrics.join(scaling.drop("run_name", "app", "n_ranks", "n_threads"), on="run_id", how="left")
          .with_columns(cores().alias("_cores")).sort("app", "_cores", "run_name"))
    out = [title]
    for app in df["app"].unique(maintain_order=True).to_list():
        runs = df.filter(pl.col("app") == app)
        out.append(heading(3, f"{app} ({runs['scaling'].drop_nulls().first() or 'strong'} scaling)", f"pop-{app}"))
        out.append(pop_table_html(runs))
        if runs["_cores"].n_unique() >= 2:
            safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", app)
            png = plot_scaling(runs, app, plot_dir / f"pop_scaling_{safe}.png" if plot_dir else None)
            out.append(f"<img alt='POP scaling of {html.escape(app)}' "
                       f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
        else:
            out.append("<p class='note'>All runs at one scale: the scalability rows and the scaling plot need runs "
                       "at two scales at least.</p>")
    return "".join(out)
