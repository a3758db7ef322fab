"""The ``synthtrace`` command line (DESIGN §10).

Each command group lives in its own ``pipelines/cli_*.py`` module with a ``register(app)`` function; this module
assembles them and is the one place where :class:`~synthtrace.tracelib.errors.SynthtraceError` becomes one line on stderr
and an exit code (2 for bad input), never a traceback.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from synthtrace import DEFAULT_WAREHOUSE
from synthtrace.tracelib.errors import SynthtraceError

app = typer.Typer(
    name="synthtrace",
    help="Merge multi-run hardware-counter traces of MPI applications into one synthetic trace and analyse it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

WarehouseOption = Annotated[
    Path,
    typer.Option("--warehouse", "-w", envvar="SYNTHTRACE_WAREHOUSE",
                 help="Warehouse folder (Parquet files and catalog).", show_default=True),
]


def _register_commands() -> None:
    from synthtrace.pipelines import cli_warehouse
    cli_warehouse.register(app)
    for name in ("cli_simulate", "cli_plan", "cli_merge", "cli_nightly", "cli_demo", "cli_analysis", "cli_models",
                 "cli_export"):
        try:
            module = __import__(f"synthtrace.pipelines.{name}", fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != f"synthtrace.pipelines.{name}":
                raise
            continue
        module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    warnings.simplefilter("default")
    warnings.showwarning = lambda message, category, *a, **k: err_console.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the CLI prints its own summary
    _register_commands()
    try:
        # with standalone_mode=False click returns the code of a typer.Exit instead of raising it
        result = app(args=argv, standalone_mode=False)
    except SynthtraceError as exc:
        err_console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except Exception as exc:  # click usage errors
        import click
        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return 2
        raise
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
