"""``synthtrace pop``: the POP efficiency table per application (DESIGN §7, issue 25). The work is in
:func:`synthtrace.pipelines.jobs.pop_tables`; this module parses the options and prints."""
from __future__ import annotations

from typing import Annotated

import polars as pl
import typer
from rich.table import Table
from rich.text import Text

from synthtrace.pipelines.cli_app import DEFAULT_WAREHOUSE, ReadWarehouseOption, console, err_console, print_table
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.pipelines.report_pop import HYBRID, ROWS, band, format_value
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.printable import escaped
from synthtrace.tracelib.domain.replay import Network
from synthtrace.warehouse import Warehouse

#: rich styles of POP's colour bands
STYLES = {"good": "green", "fair": "yellow", "poor": "red", None: "dim"}


def _cell(value: float | int | None, kind: str) -> Text:
    text = format_value(value, kind) or "-"
    return Text(text, style=STYLES[band(value)] if kind == "eff" or text == "-" else "")


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
        # a Text header: its line break is the layout's, the run's name in it escaped (print_table escapes str ones)
        t.add_column(Text(f"{escaped(r['run_name'])}\n{r['n_ranks']} x {r['n_threads']}"), justify="right")
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
