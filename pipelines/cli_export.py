"""``synthtrace export``: the merged trace for the tools users already have."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from synthtrace.pipelines.cli_app import (
    DEFAULT_WAREHOUSE,
    ReadWarehouseOption,
    err_console,
    output_file,
    write_output,
)
from synthtrace.pipelines.cli_base import OUTPUT_RULE, print_written  # [helper races] A19
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.warehouse.names import name_option


class ExportFormat(str, Enum):
    perfetto = "perfetto"
    pipit = "pipit"
    csv = "csv"


#: the file an export writes when no --output is given, by format
DEFAULT_OUTPUT = {ExportFormat.perfetto: "{experiment}.json", ExportFormat.pipit: "{experiment}.pipit.csv",
                  ExportFormat.csv: "{experiment}.csv"}


def export(
    experiment: Annotated[
        str, typer.Argument(help="Experiment to export (its merged trace, or its only run).", callback=name_option)
    ],
    format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            "-f",
            help="perfetto: Chrome/Perfetto JSON; pipit: Pipit-style events table (CSV); csv: one row per burst.",
        ),
    ] = ExportFormat.perfetto,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File to write. Default: EXPERIMENT.json (perfetto), EXPERIMENT.pipit.csv "
                     "(pipit) or EXPERIMENT.csv (csv), in the current folder. " + OUTPUT_RULE),
    ] = None,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Export an experiment's synthetic trace as Perfetto JSON, a Pipit-style events table, or CSV."""
    from synthtrace.tracelib.formats.exports import pipit_events, write_perfetto
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.export_views import load_export_tables

    output = output or Path(DEFAULT_OUTPUT[format].format(experiment=experiment))
    output_file(output)  # before reading anything
    with err_console.status(f"reading {experiment}"):
        bursts, calls = load_export_tables(Warehouse(warehouse), experiment)
    with err_console.status(f"writing {output} ({format.value})"):
        if format is ExportFormat.perfetto:
            def perfetto(p: Path) -> None:
                with p.open("wb") as fh:
                    write_perfetto(fh, bursts, calls, name=experiment)

            write_output(output, perfetto)
        elif format is ExportFormat.pipit:
            write_output(output, pipit_events(bursts, calls).write_csv)
        else:
            write_output(output, bursts.write_csv)
    n_calls = calls.height if calls is not None else 0
    print_written(f"wrote {output} ({format.value}, {bursts.height} bursts, {n_calls} MPI calls)",  # [helper races]
                  output)  # attack 7 A19: not into the data when the output is stdout


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("export"))(export)
