"""``synthtrace pop``: the POP efficiency table per application (DESIGN §7, issue 25). The work is in
:func:`synthtrace.pipelines.jobs.pop_tables`; this module parses the options and prints."""
from __future__ import annotations

import math
from typing import Annotated

import polars as pl
import typer
from rich.table import Table
from rich.text import Text

from synthtrace.pipelines.cli_app import DEFAULT_WAREHOUSE, ReadWarehouseOption, console, err_console, print_table
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.domain.replay import Network
from synthtrace.warehouse import Warehouse

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


def efficiency_style(value: float | None) -> str:
    """green >= 0.8, yellow >= 0.6, red below (POP's scale); dim when unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "dim"
    return "green" if value >= GOOD else "yellow" if value >= FAIR else "red"


def _cell(value: float | int | None, kind: str) -> Text:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Text("-", style="dim")
    if kind == "eff":
        return Text(f"{value:.2%}", style=efficiency_style(value))
    return Text({"x": f"{value:.2f}", "s": f"{value * 1e-9:.4g}", "n": f"{value:.4g}", "f": f"{value:.3f}"}[kind])


def _network(spec: str | None, machine: str | None) -> Network | None:
    if spec and machine:
        raise BadInputError("give --network or --machine, not both")
    if machine:
        from synthtrace.tracelib.domain.machine import load_machine

        m = load_machine(machine)
        return Network.of(m.network_latency_us, m.link_bw() / 1e9)
    if not spec:
        return None
    try:
        latency, bandwidth = (float(x) for x in spec.split(":"))
    except ValueError:
        raise BadInputError(f"--network {spec!r}: expected LATENCY_US:BANDWIDTH_GBS, e.g. 1.5:12.5") from None
    return Network.of(latency, bandwidth)


def pop_table(app: str, metrics: pl.DataFrame, scaling: pl.DataFrame, predicted: dict[str, int],
              network_label: str | None) -> Table:
    """The POP table of one application: rows = metrics, columns = its runs ordered by cores (ranks x threads)."""
    from synthtrace.tracelib.domain.pop import cores

    df = (metrics.join(scaling.drop("run_name", "app", "n_ranks", "n_threads"), on="run_id", how="left")
          .with_columns(cores().alias("_cores")).sort("_cores", "run_name"))
    hybrid = bool(df["n_threads"].fill_null(1).max() > 1)
    t = Table(title=f"POP efficiency of {app} ({scaling['scaling'].first() or 'strong'} scaling)")
    t.add_column("metric", no_wrap=True)
    for r in df.iter_rows(named=True):
        t.add_column(f"{r['run_name']}\n{r['n_ranks']} x {r['n_threads']}", justify="right")
    for label, col, kind in ROWS:
        if col in HYBRID and not hybrid:
            continue
        t.add_row(label, *[_cell(v, kind) for v in df[col].to_list()])
    if predicted:
        t.add_row(f"Runtime on {network_label} (s)", *[_cell(predicted.get(r), "s") for r in df["run_id"]])
    return t


def pop(
    names: Annotated[list[str] | None, typer.Argument(
        help="Applications or experiments (default: every application in the warehouse).")] = None,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
    scaling: Annotated[str, typer.Option(
        help="strong (the same problem on more cores) or weak (the problem grows with the cores).")] = "strong",
    network: Annotated[str | None, typer.Option(
        help="What-if: also predict each run's runtime on this network, LATENCY_US:BANDWIDTH_GBS (1.5:12.5).")
    ] = None,
    machine: Annotated[str | None, typer.Option(
        help="What-if: the network of this machine profile (a preset or TOML file), instead of --network.")] = None,
) -> None:
    """Print the POP efficiency table of each application (its runs as columns, by ranks), computing what is
    missing."""
    from synthtrace.pipelines.jobs import pop_tables
    from synthtrace.tracelib.domain.pop import missing_columns, single_scale_apps

    if scaling not in ("strong", "weak"):
        raise BadInputError(f"--scaling {scaling!r}: expected strong or weak")
    net = _network(network, machine)
    tables = pop_tables(Warehouse(warehouse), names or None, scaling=scaling, network=net)
    label = machine or (f"{net.latency_ns / 1e3:g} us, {net.bandwidth:g} GB/s" if net else None)
    for app in sorted(set(tables.metrics["app"].to_list())):
        m = tables.metrics.filter(pl.col("app") == app)
        print_table(pop_table(app, m, tables.scaling, tables.predicted, label))
        if single_scale_apps(m):
            console.print(f"{app}: every run is at one scale ({m['n_ranks'][0]} ranks x {m['n_threads'][0]} "
                          "threads): the scalability rows need runs at two scales at least", soft_wrap=True)
        reasons: dict[str, list[str]] = {}
        for col, why in missing_columns(m).items():
            reasons.setdefault(why, []).append(col)
        for why, cols in reasons.items():
            console.print(f"{app}: empty {', '.join(cols)}: {why}", soft_wrap=True)
    for note in tables.notes:
        err_console.print(note, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("pop"))(pop)
