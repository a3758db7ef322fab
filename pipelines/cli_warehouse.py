"""``synthtrace ingest``, ``runs`` and ``sql``: getting traces in and asking questions of them."""
from __future__ import annotations

import io
import json
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from synthtrace.pipelines.cli_app import (
    DEFAULT_WAREHOUSE,
    ReadWarehouseOption,
    WarehouseOption,
    console,
    err_console,
    existing_warehouse,
    print_error,
    print_note,
)
from synthtrace.tracelib.errors import BadInputError, SynthtraceError
from synthtrace.warehouse.names import name_option

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.progress import Progress

class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


def _progress() -> Progress:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=err_console, transient=True)


def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Trace files (.prv, .prv.gz, OTF2 .otf2 anchors) or folders (searched recursively)."),
    ],
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
    experiment: Annotated[
        str | None,
        typer.Option(
            help="Experiment name (default: the folder holding each trace; "
            "its app when the folder holds several apps).",
            callback=name_option,
        ),
    ] = None,
    app: Annotated[str | None, typer.Option(help="Application name (default: file stem up to its first dot).")] = None,
    date: Annotated[
        datetime | None, typer.Option(help="Start date of the run(s), when the trace header has none.")
    ] = None,
    salvage: Annotated[bool, typer.Option(help="Keep the complete records of a trace cut off mid-record.")] = False,
) -> None:
    """Ingest traces into the warehouse (atomic per run; a trace already there is skipped)."""
    from synthtrace.tracelib.formats import find_traces, trace_bytes
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.ingest import experiment_names, ingest_trace

    for p in paths:
        if not p.exists():
            raise BadInputError(f"{p}: no such file or folder")
    files = find_traces(paths)
    if not files:
        raise BadInputError(f"no traces (.prv, .prv.gz or .otf2) under {', '.join(map(str, paths))}")
    wh = Warehouse(warehouse)
    experiments, notes = experiment_names(files, app) if experiment is None else ({}, [])
    for note in notes:
        print_note(note)
    failures: list[SynthtraceError] = []
    total = sum(trace_bytes(f) for f in files)
    with _progress() as bar:
        task = bar.add_task("ingest", total=total)
        for f in files:
            bar.update(task, description=f"ingest {f.name}")
            done_before = bar.tasks[0].completed
            try:
                res = ingest_trace(wh, f, experiment=experiment, app=app, date=date, salvage=salvage,
                                   progress=lambda n: bar.advance(task, n), default_experiment=experiments.get(f))
            except SynthtraceError as exc:  # this trace only: the others are still ingested
                failures.append(exc)
                print_error(str(exc))
                continue
            finally:
                bar.update(task, completed=done_before + trace_bytes(f))
            where = f"as {res.run_name} (run {res.run_id}, experiment {res.experiment})"
            if res.status == "already":
                console.print(f"{f}: already ingested {where}",
                              soft_wrap=True)
                continue
            console.print(f"{f}: ingested {where}: {res.n_bursts} bursts, {res.n_mpi_calls} MPI calls",
                          markup=False, emoji=False, soft_wrap=True)
            for old in res.replaced:
                console.print(f"{f}: replaces run {old}, ingested before its .pcf was beside it", soft_wrap=True)
    if failures:
        raise typer.Exit(max(exc.exit_code for exc in failures))


runs_app = typer.Typer(help="List the runs in the warehouse; `runs rm` and `runs move` put them right.")


@runs_app.callback(invoke_without_command=True)
def runs(ctx: typer.Context, warehouse: WarehouseOption = DEFAULT_WAREHOUSE) -> None:
    """List the runs in the warehouse; `runs rm` and `runs move` put them right."""
    if ctx.invoked_subcommand is not None:
        return
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.sql import query_rows

    existing_warehouse(warehouse)
    columns, rows = query_rows(Warehouse(warehouse), """
        SELECT run_name, experiment, app, started_at, n_tasks, round(duration_ns / 1e9, 3) AS duration_s,
               n_bursts, len(counters) AS n_counters, run_id
        FROM runs ORDER BY experiment, run_name""")
    _print_table(columns, rows, title=f"runs in {warehouse}")


RunRefs = Annotated[list[str], typer.Argument(metavar="RUN...", help="Runs by id (or unique id prefix) or run name.")]


@runs_app.command("rm")
def runs_rm(run_refs: RunRefs, warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE) -> None:
    """Remove runs (each removal atomic); their experiments' merged data and analysis are removed too."""
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.run_admin import remove_runs

    res = remove_runs(Warehouse(warehouse), run_refs)
    for run_id, name, exp in res.runs.select("run_id", "run_name", "experiment").iter_rows():
        console.print(f"removed run {run_id} ({name}, experiment {exp})", soft_wrap=True)
    _say_invalidated(res.invalidated)


@runs_app.command("move")
def runs_move(
    run_refs: RunRefs,
    experiment: Annotated[str, typer.Option("--experiment", "-e", help="Experiment the runs belong to from now on.",
                                                           callback=name_option)],
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
) -> None:
    """Assign runs to another experiment (each move atomic); the experiments they leave and join lose their merge."""
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.run_admin import move_runs

    res = move_runs(Warehouse(warehouse), run_refs, experiment)
    if res.runs.height == 0:
        console.print(f"nothing to move: the runs are already in experiment {experiment}", soft_wrap=True)
    for run_id, name, exp in res.runs.select("run_id", "run_name", "experiment").iter_rows():
        console.print(f"moved run {run_id} ({name}) from experiment {exp} to {experiment}", soft_wrap=True)
    _say_invalidated(res.invalidated)


def _say_invalidated(names: list[str]) -> None:
    for name in names:
        console.print(f"experiment {name}: merged data and analysis removed (its runs changed); "
                      f"rebuild with `synthtrace merge {name}`", soft_wrap=True)


def sql(
    statement: Annotated[
        str, typer.Argument(metavar="QUERY", help="A SELECT over the views runs, bursts, mpi_calls, merged_bursts, ...")
    ],
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = OutputFormat.table,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of the terminal.")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", min=0.001, show_default=False, help="Stop the query after this many seconds (default: 300)."
        ),
    ] = None,
) -> None:
    """Answer a read-only SQL query over the warehouse views (SELECT, or EXPLAIN of one; it reads no other file)."""
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.sql import DEFAULT_TIMEOUT_S, query, query_rows

    if format is OutputFormat.parquet and output is None:
        raise BadInputError("--format parquet needs --output FILE")
    wh, limit = Warehouse(warehouse), DEFAULT_TIMEOUT_S if timeout is None else timeout
    if format in (OutputFormat.csv, OutputFormat.parquet):  # Arrow writes these (nested columns and all)
        _write_arrow(query(wh, statement, timeout_s=limit), format, output)
        return
    columns, rows = query_rows(wh, statement, timeout_s=limit)
    if format is OutputFormat.table and output is None:
        _print_table(columns, rows)
        return
    text = _render(columns, rows, format)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)


def _write_arrow(table: pa.Table, fmt: OutputFormat, output: Path | None) -> None:
    """CSV (nested columns as JSON text) to ``output`` or stdout, or Parquet to ``output``."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if fmt is OutputFormat.parquet:
        pq.write_table(table, output)
        return
    cols = [pa.array([None if v is None else json.dumps(v, default=str) for v in col.to_pylist()], pa.string())
            if pa.types.is_nested(col.type) else col for col in table.columns]
    buf = io.BytesIO()
    pacsv.write_csv(pa.table(cols, names=table.column_names), buf)
    if output is None:
        typer.echo(buf.getvalue().decode(), nl=False)
    else:
        output.write_bytes(buf.getvalue())


def _render(columns: list[str], rows: list[tuple], fmt: OutputFormat) -> str:
    """Rows as JSON records, or as tab-separated text with a header line."""
    if fmt is OutputFormat.json:
        return json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=None) + "\n"
    lines = ["\t".join(columns), *("\t".join("" if v is None else str(v) for v in r) for r in rows)]
    return "\n".join(lines) + "\n"


def _print_table(columns: list[str], rows: list[tuple], title: str | None = None, limit: int = 200) -> None:
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    cells = [["" if v is None else str(v) for v in r] for r in rows[:limit]]
    widths = [max([len(name), *(len(r[i]) for r in cells)]) for i, name in enumerate(columns)]
    for name in columns:
        t.add_column(name, overflow="fold")
    for r in cells:
        t.add_row(*r)
    # never squeeze a table into a narrow pipe: it is read, copied and grepped (a console of its own, so that the
    # shared one keeps its width for what follows)
    if console.is_terminal:
        console.print(t)
    else:
        from rich.console import Console

        Console(file=console.file, width=max(console.width, sum(widths) + 3 * len(widths) + 1), markup=False,
                emoji=False, highlight=False).print(t)
    if len(rows) > limit:
        console.print(f"({len(rows)} rows, first {limit} shown; use --format csv for all)")


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.add_typer(runs_app, name="runs")
    app.command()(sql)
