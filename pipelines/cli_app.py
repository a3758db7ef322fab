"""The typer application of the ``synthtrace`` command line, and what every command module shares with it: the
consoles, the ``--warehouse`` options, and the printing of errors and warnings (literal text, never markup).

:mod:`synthtrace.pipelines.cli` (the entry point) imports this module only for a real command; the application
then imports only the module registering the command being run (:data:`~synthtrace.pipelines.cli.COMMANDS`).
"""
from __future__ import annotations

import difflib
import importlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Self

import typer
from rich.console import Console
from rich.text import Text
from typer import _click  # typer >= 0.29 raises its own (vendored) click exceptions
from typer.core import TyperCommand, TyperGroup

from synthtrace import DEFAULT_WAREHOUSE
from synthtrace.pipelines.cli import COMMANDS, SUMMARY
from synthtrace.tracelib.errors import BadInputError

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.table import Table

__all__ = ["DEFAULT_WAREHOUSE", "ReadWarehouseOption", "StepProgress", "WarehouseOption", "app", "console",
           "err_console", "existing_warehouse", "print_error", "print_note", "print_warning", "print_wide"]

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


# every text is printed literally: no markup (``run[1].prv`` stays), no emoji codes (``t.prv:100:`` stays), no
# highlighting; styles are given as rich Text, never as markup inside a string
console = Console(markup=False, emoji=False, highlight=False)
err_console = Console(stderr=True, markup=False, emoji=False, highlight=False)


def existing_warehouse(path: Path) -> Path:
    """The ``--warehouse`` of a command that only reads: refuse a path that is missing, a file, or not a warehouse
    (a read must never create one)."""
    from synthtrace.warehouse.layout import MARKER

    if not path.exists():
        raise BadInputError(f"{path}: no such warehouse (ingest traces into it first, or give --warehouse DIR)")
    if not path.is_dir():
        raise BadInputError(f"{path}: is a file, not a warehouse folder")
    if not (path / MARKER).exists() and not (path / "runs").is_dir():
        raise BadInputError(f"{path}: not a synthtrace warehouse (no {MARKER} marker, no runs/ folder)")
    return path


_WAREHOUSE_HELP = "Warehouse folder (Parquet files and catalog)."
WarehouseOption = Annotated[
    Path,
    typer.Option("--warehouse", "-w", envvar="SYNTHTRACE_WAREHOUSE", help=_WAREHOUSE_HELP, show_default=True),
]
#: the ``--warehouse`` of commands that only read it: must exist and be a warehouse
ReadWarehouseOption = Annotated[
    Path,
    typer.Option("--warehouse", "-w", envvar="SYNTHTRACE_WAREHOUSE", help=_WAREHOUSE_HELP, show_default=True,
                 callback=existing_warehouse),
]


def _say(label: str, style: str, message: str) -> None:
    err_console.print(Text.assemble((label, style), " ", message), soft_wrap=True)


def print_error(message: str) -> None:
    """One literal ``error:`` line on stderr (the message is never read as markup)."""
    _say("error:", "red", message)


def print_warning(message: str) -> None:
    """One literal ``warning:`` line on stderr."""
    _say("warning:", "yellow", message)


def print_note(message: str) -> None:
    """One literal ``note:`` line on stderr."""
    _say("note:", "dim", message)


class StepProgress:
    """A rich progress bar on stderr that appears once work has run ``delay_s`` seconds (short commands stay
    quiet). Use as a context manager; call it with a step's description to advance one step."""

    def __init__(self, total: int, description: str, delay_s: float = 2.0):
        self.total, self.description, self.delay_s = total, description, delay_s
        self.t0 = time.monotonic()
        self.done = 0
        self.bar: Progress | None = None

    def __enter__(self) -> Self:
        return self

    def __call__(self, step: str) -> None:
        self.done += 1
        if self.bar is None and time.monotonic() - self.t0 >= self.delay_s:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=err_console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.description, total=self.total)
        if self.bar is not None:
            self.bar.update(self.task, completed=min(self.done, self.total), description=f"{self.description}: {step}")

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def print_wide(table: Table, width: int = 170) -> None:
    """Print a table at least ``width`` columns wide (ids and names stay whole when stdout is not a terminal)."""
    Console(width=max(console.width, width), markup=False, emoji=False, highlight=False).print(table)
