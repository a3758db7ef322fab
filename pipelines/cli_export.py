"""``synthtrace export``: the merged trace for the tools users already have."""
from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from synthtrace.pipelines.cli_app import (
    DEFAULT_WAREHOUSE,
    ReadWarehouseOption,
    err_console,
    output_file,
    print_note,
    write_output,
)
from synthtrace.pipelines.cli_base import OUTPUT_RULE, gzip_stream, output_option, print_written  # [helper races] A19
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.tracelib.errors import BadInputError
from synthtrace.warehouse.names import name_option

if TYPE_CHECKING:
    from synthtrace.warehouse.layout import Warehouse


class ExportFormat(str, Enum):
    perfetto = "perfetto"
    pipit = "pipit"
    csv = "csv"


#: what each export format is, as the output extensions name formats (:data:`~synthtrace.pipelines.cli_read.
#: OUTPUT_EXTENSIONS`): perfetto JSON, the others CSV
EXTENSION_FORMAT = {ExportFormat.perfetto: "json", ExportFormat.pipit: "csv", ExportFormat.csv: "csv"}
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
            help="perfetto: Chrome/Perfetto JSON; pipit: Pipit's events table (CSV for pipit.Trace.from_csv: "
                 "metrics as readings, messages as MpiSend/MpiRecv rows; json.loads its Attributes before "
                 "comm_matrix); csv: one row per burst.",
        ),
    ] = ExportFormat.perfetto,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", parser=output_option,
                     help="File to write. Default: EXPERIMENT.json (perfetto), EXPERIMENT.pipit.csv "
                     "(pipit) or EXPERIMENT.csv (csv), in the current folder. " + OUTPUT_RULE),
    ] = None,
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Export an experiment's synthetic trace as Perfetto JSON, a Pipit-style events table, or CSV."""
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.export_views import export_scans, write_csv, write_perfetto, write_pipit

    output = output or Path(DEFAULT_OUTPUT[format].format(experiment=experiment))
    output_file(output)  # before reading anything
    gzipped = export_compressed(output, format)
    with err_console.status(f"reading {experiment}"):
        wh = Warehouse(warehouse)
        note = wh.experiment(experiment).merge_coverage_note()
        scans = export_scans(wh, experiment)
        try:
            n_bursts, n_calls = scans.count("bursts"), scans.count("calls")
        except Exception as exc:
            raise _changed(exc, wh, experiment) from None
    with err_console.status(f"writing {output} ({format.value})"):
        def written(p: Path) -> None:  # a window of the trace at a time (issue 23 attack 7 A21)
            with p.open("wb") as raw, (gzip_stream(raw, output) if gzipped else contextlib.nullcontext(raw)) as fh:
                try:
                    if format is ExportFormat.perfetto:
                        write_perfetto(fh, scans, experiment)
                    elif format is ExportFormat.pipit:
                        write_pipit(fh, scans)
                    else:
                        write_csv(fh, scans)
                except Exception as exc:  # fh is open: a file gone now is a stored one, never the output
                    raise _changed(exc, wh, experiment) from None

        write_output(output, written)
    print_written(f"wrote {output} ({format.value}, {n_bursts} bursts, {n_calls} MPI calls)",  # [helper races]
                  output)  # attack 7 A19: not into the data when the output is stdout
    if note is not None:
        print_note(note)


def _changed(exc: Exception, wh: Warehouse, experiment: str) -> Exception:
    """``exc``, or :class:`RunsChangedError` when it is a stored file gone while the export read it (attack 10 D5:
    ``runs rm``/``runs move`` meanwhile gave Arrow's raw "Failed to open local file", exit 2, or blamed --output)."""
    from synthtrace.pipelines.jobs import vanished
    from synthtrace.warehouse.errors import RunsChangedError

    if not vanished(exc, wh.root):
        return exc
    return RunsChangedError(f"experiment {experiment!r}: its stored files changed while it was exported (a run "
                            "removed or moved); nothing was written: run the command again")


def export_compressed(output: Path, format: ExportFormat) -> bool:
    """Whether the export to ``output`` is gzip-compressed (its name ends in ``.gz``, as ``sql --output``'s rule);
    an extension naming another format than ``format`` writes (``x.parquet`` for Perfetto JSON, ``x.json`` for
    CSV) is :class:`BadInputError` (attack 10 D3: Pipit could not open the plain CSV written to ``x.pipit.gz``). A
    device or FIFO is written into as it is, but one named ``.gz`` gets the gzip a file of that name gets (as
    ``sql --output``: a ``zcat`` reading the FIFO failed on plain text)."""
    from synthtrace.pipelines.cli_read import output_extension
    from synthtrace.tracelib.atomic_file import is_stream
    from synthtrace.tracelib.formats.gzip_name import gzip_named

    if str(output) == "-" or (is_stream(output) and not gzip_named(output)):
        return False
    named, gzipped = output_extension(output)
    if named is not None and named != EXTENSION_FORMAT[format]:
        raise BadInputError(f"--output {output}: its extension names {named}, but --format {format.value} writes "
                            f"{EXTENSION_FORMAT[format]}; name the file .{EXTENSION_FORMAT[format]} (or "
                            f".{EXTENSION_FORMAT[format]}.gz, compressed)")
    return gzipped


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("export"))(export)
