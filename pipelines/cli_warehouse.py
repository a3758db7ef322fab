"""``synthtrace ingest``, ``runs`` and ``sql``: getting traces in and asking questions of them."""
from __future__ import annotations

import os
import stat
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
    print_error,
    print_note,
)
from synthtrace.pipelines.cli_base import OUTPUT_RULE, app_option, progress_bar
from synthtrace.pipelines.cli_read import (APP, EXPERIMENT, FORMAT, MEMORY_LIMIT, MIN_TIMEOUT_S, OUTPUT, SALVAGE,
                                           TEMP_LIMIT, TIMEOUT, answer_sql, list_runs)
from synthtrace.pipelines.cli_examples import epilog
from synthtrace.tracelib.errors import BadInputError, SynthtraceError
from synthtrace.tracelib.file_kind import not_a_file
from synthtrace.warehouse.names import name_option

if TYPE_CHECKING:
    from rich.progress import Progress

    from synthtrace.warehouse.run_admin import AdminResult

#: the choices of ``sql --format``, as typer lists them
OutputFormat = Enum("OutputFormat", {name: name for name in FORMAT.choices}, type=str)


def _progress() -> Progress:
    from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    return progress_bar(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        TimeRemainingColumn())


def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Trace files (.prv, .prv.gz, OTF2 .otf2 anchors) or folders (searched recursively)."),
    ],
    warehouse: WarehouseOption = DEFAULT_WAREHOUSE,
    experiment: Annotated[
        str | None,
        typer.Option(
            *EXPERIMENT.names,
            help="Experiment name (default: the folder holding each trace; "
            "its app when the folder holds several apps).",
            callback=name_option,
        ),
    ] = None,
    app: Annotated[str | None, typer.Option(*APP.names, help="Application name (default: file stem up to its first "
                                            "dot).", callback=app_option)] = None,
    date: Annotated[
        datetime | None, typer.Option(help="Start date of the run(s), when the trace header has none.")
    ] = None,
    salvage: Annotated[bool, typer.Option("/".join(SALVAGE.names),
                                          help="Keep the complete records of a trace cut off mid-record.")] = False,
) -> None:
    """Ingest traces into the warehouse (atomic per run; a trace already there is skipped)."""
    # its usual argument lists are read without typer (cli_read.FAST, from the same option descriptions)
    from synthtrace.tracelib.formats.source import find_traces, trace_bytes
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.errors import WarehouseError
    from synthtrace.pipelines.jobs import ingest as ingest_one
    from synthtrace.warehouse.ingest import experiment_names

    for p in paths:
        if (why := _not_a_trace_path(p)) is not None:
            raise BadInputError(f"{p}: {why}")
    files = find_traces(paths)
    if not files:
        raise BadInputError(f"no traces (.prv, .prv.gz or .otf2) under {', '.join(map(str, paths))}")
    wh = Warehouse(warehouse)
    experiments, notes = experiment_names(files, wh) if experiment is None else ({}, [])
    for note in notes:
        print_note(note)
    failures: list[SynthtraceError] = []
    total = sum(trace_bytes(f) for f in files)
    with wh.removed_if_unused(), _progress() as bar:
        task = bar.add_task("ingest", total=total)
        for f in files:
            bar.update(task, description=f"ingest {f.name}")
            done_before = bar.tasks[0].completed
            done_after = done_before + trace_bytes(f)

            def read(n: int, upto: int = done_after) -> None:  # never past this trace's bytes (a re-read counts)
                bar.update(task, completed=min(upto, bar.tasks[0].completed + n))
            try:
                res = ingest_one(wh, f, experiment=experiment, app=app, date=date, salvage=salvage,
                                 progress=read, default_experiment=experiments.get(f))
            except WarehouseError:  # the warehouse cannot take any trace: one error, not one per trace
                raise
            except SynthtraceError as exc:  # this trace only: the others are still ingested
                failures.append(exc)
                print_error(str(exc))
                continue
            finally:
                bar.update(task, completed=done_after)
            where = f"as {res.run_name} (run {res.run_id}, experiment {res.experiment})"
            if res.status == "already":
                console.print(f"{f}: already ingested {where}",
                              soft_wrap=True)
                continue
            console.print(f"{f}: ingested {where}: {res.n_bursts} bursts, {res.n_mpi_calls} MPI calls",
                          markup=False, emoji=False, soft_wrap=True)
            for old in res.replaced:
                console.print(f"{f}: replaces run {old}, ingested before its .pcf was beside it", soft_wrap=True)
            for note in res.notes:
                print_note(note)
    if failures:
        raise typer.Exit(max(exc.exit_code for exc in failures))


runs_app = typer.Typer(help="List the runs in the warehouse; `runs rm` and `runs move` put them right.")


@runs_app.callback(invoke_without_command=True, epilog=epilog("runs"))
def runs(ctx: typer.Context, warehouse: WarehouseOption = DEFAULT_WAREHOUSE) -> None:
    """List the runs in the warehouse; `runs rm` and `runs move` put them right."""
    if ctx.invoked_subcommand is None:
        list_runs(warehouse)


RunRefs = Annotated[list[str], typer.Argument(metavar="RUN...", help="Runs by id (or unique id prefix) or run name.")]


@runs_app.command("rm", epilog=epilog("runs rm"))
def runs_rm(run_refs: RunRefs, warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE) -> None:
    """Remove runs (each removal atomic); their experiments' merged data and analysis are removed too."""
    from synthtrace.warehouse import Warehouse
    from synthtrace.warehouse.run_admin import remove_runs

    res = remove_runs(Warehouse(warehouse), run_refs)
    for run_id, name, exp in res.runs.select("run_id", "run_name", "experiment").iter_rows():
        what = f"{name}, experiment {exp}" if name is not None else "its record damaged"  # attack 8 B6
        console.print(f"removed run {run_id} ({what})", soft_wrap=True, markup=False, emoji=False)
    _say_invalidated(res)


@runs_app.command("move", epilog=epilog("runs move"))
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
    _say_invalidated(res)


def _say_invalidated(res: AdminResult) -> None:
    for name in res.invalidated:
        console.print(f"experiment {name}: merged data and analysis removed (its runs changed); "
                      f"rebuild with `synthtrace merge {name}`", soft_wrap=True)
    for name in res.unpredicted:
        console.print(f"experiment {name}: predictions removed (its runs changed); predict again with "
                      f"`synthtrace predict --experiment {name}`", soft_wrap=True)


def sql(
    statement: Annotated[
        str, typer.Argument(metavar="QUERY", help="A SELECT over the views runs, bursts, mpi_calls, merged_bursts, ...")
    ],
    warehouse: ReadWarehouseOption = DEFAULT_WAREHOUSE,
    format: Annotated[
        OutputFormat | None,
        typer.Option(*FORMAT.names, show_default=False,
                     help="Output format (default: by the --output file's extension, .csv .json .parquet, .tsv/.txt "
                          "the table tab-separated, .gz after one gzip; else table)."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option(*OUTPUT.names, parser=OUTPUT.convert,
                                   help="Write to this file instead of the terminal. " + OUTPUT_RULE)
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(*TIMEOUT.names, min=MIN_TIMEOUT_S, show_default=False,
                     help="Stop the query after this many seconds (default: 300)."),
    ] = None,
    memory_limit: Annotated[
        str | None,
        typer.Option(*MEMORY_LIMIT.names, show_default=False,
                     help="DuckDB's memory for the query, e.g. 4GiB (default: 1GiB); more spills to disk."),
    ] = None,
    temp_limit: Annotated[
        str | None,
        typer.Option(*TEMP_LIMIT.names, show_default=False,
                     help="Temporary disk the query may spill to, e.g. 20GiB (default: 8GiB)."),
    ] = None,
) -> None:
    """Answer a read-only SQL query over the warehouse views (SELECT, or EXPLAIN of one; it reads no other file)."""
    answer_sql(statement, warehouse, format.value if format else None, output, timeout, memory_limit, temp_limit)


def _not_a_trace_path(path: Path) -> str | None:
    """Why ``path`` named on the command line cannot hold traces (missing, or neither a regular file nor a folder,
    links followed: a link to /dev/zero, a FIFO), or None."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"a link to {os.readlink(path)}, which does not exist" if path.is_symlink() else "no such file or folder"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return f"{not_a_file(path)}, not a regular file: a trace is a file or a folder of them"


def register(app: typer.Typer) -> None:
    app.command(epilog=epilog("ingest"))(ingest)
    app.add_typer(runs_app, name="runs")
    app.command(epilog=epilog("sql"))(sql)
