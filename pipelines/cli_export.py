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
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.export_views import export_scans, write_csv, write_perfetto, write_pipit

    output = output or Path(DEFAULT_OUTPUT[format].format(experiment=experiment))
    output_file(output)  # before reading anything
    with err_console.status(f"reading {experiment}"):
        scans = export_scans(Warehouse(warehouse), experiment)
        n_bursts, n_calls = scans.count("bursts"), scans.count("calls")
    with err_console.status(f"writing {output} ({format.value})"):
        def written(p: Path) -> None:  # a window of the trace at a time (issue 23 attack 7 A21)
            with p.open("wb") as fh:
                if format is ExportFormat.perfetto:
                    write_perfetto(fh, scans, experiment)
                elif format is ExportFormat.pipit:
                    write_pipit(fh, scans)
                else:
                    write_csv(fh, scans)

        write_output(output, written)
    print_written(f"wrote {output} ({format.value}, {n_bursts} bursts, {n_calls} MPI calls)",  # [helper races]
                  output)  # attack 7 A19: not into the data when the output is stdout


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("export"))(export)
