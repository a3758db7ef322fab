"""The typer application of the ``synthtrace`` command line and its ``--warehouse`` options; it re-exports what
every command module shares from :mod:`synthtrace.pipelines.cli_base` (consoles, error lines, tables, progress).

:mod:`synthtrace.pipelines.cli` (the entry point) imports this module only for a real command; the application
then imports only the module registering the command being run (:data:`~synthtrace.pipelines.cli.COMMANDS`).
"""
from __future__ import annotations

import difflib
import importlib
from pathlib import Path
from typing import Annotated

import typer
from typer import _click  # typer >= 0.29 raises its own (vendored) click exceptions
from typer.core import TyperCommand, TyperGroup

from synthtrace import DEFAULT_WAREHOUSE
from synthtrace.pipelines.cli import COMMANDS, SUMMARY
from synthtrace.pipelines.cli_base import (
    StepProgress,
    check_folder,
    console,
    err_console,
    existing_warehouse,
    output_file,
    print_error,
    print_note,
    print_table,
    print_warning,
    write_output,
)
from synthtrace.pipelines.cli_read import WAREHOUSE

__all__ = ["DEFAULT_WAREHOUSE", "ReadWarehouseOption", "StepProgress", "WarehouseOption", "app", "check_folder",
           "console", "err_console", "existing_warehouse", "output_file", "print_error", "print_note", "print_table",
           "print_warning", "write_output"]

class LazyGroup(TyperGroup):
    """The top-level group: a command's module is imported when that command runs (or its help is asked for);
    the command listing of ``--help`` comes from :data:`COMMANDS` without importing anything."""

    _listing = False

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return [*COMMANDS, *(n for n in self.commands if n not in COMMANDS)]

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            if self._listing:
                return TyperCommand(name=cmd_name, short_help=COMMANDS[cmd_name][1])
            self._load(COMMANDS[cmd_name][0])
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except _click.exceptions.UsageError as exc:
            close = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if close and "Did you mean" not in exc.message:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, close))}?"
            raise

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def _load(self, module_name: str) -> None:
        """Import ``synthtrace.pipelines.<module_name>`` and add the commands it registers."""
        sub = typer.Typer()
        importlib.import_module(f"synthtrace.pipelines.{module_name}").register(sub)
        for name, cmd in typer.main.get_group(sub).commands.items():
            self.commands.setdefault(name, cmd)


def _show_version(value: bool) -> None:
    if value:
        from synthtrace import __version__

        console.print(f"synthtrace {__version__}")
        raise typer.Exit(0)


app = typer.Typer(
    name="synthtrace",
    help=SUMMARY,
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Merge multi-run hardware-counter traces of MPI applications into one synthetic trace and analyse it."""


_WAREHOUSE_HELP = "Warehouse folder (Parquet files and catalog)."
WarehouseOption = Annotated[
    Path, typer.Option(*WAREHOUSE.names, envvar=WAREHOUSE.envvar, help=_WAREHOUSE_HELP, show_default=True),
]
#: the ``--warehouse`` of commands that only read it: must exist and be a warehouse
ReadWarehouseOption = Annotated[
    Path,
    typer.Option(*WAREHOUSE.names, envvar=WAREHOUSE.envvar, help=_WAREHOUSE_HELP, show_default=True,
                 callback=existing_warehouse),
]
