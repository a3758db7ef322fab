"""The ``synthtrace`` command line (DESIGN §10).

Each command group lives in its own ``pipelines/cli_*.py`` module with a ``register(app)`` function. This module
loads only the module of the command being run (:data:`COMMANDS`), so ``synthtrace --help``, ``runs`` or ``sql``
never pay for numba, the simulator or the models. It is also the one place where a
:class:`~synthtrace.tracelib.errors.SynthtraceError` or a usage mistake becomes one line on stderr and an exit
code (2 for bad input or bad usage), never a traceback.
"""
from __future__ import annotations

import difflib
import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from typer import _click  # typer >= 0.29 raises its own (vendored) click exceptions
from typer.core import TyperCommand, TyperGroup

from synthtrace import DEFAULT_WAREHOUSE, __version__
from synthtrace.tracelib.errors import BadInputError, SynthtraceError

#: command -> (module under synthtrace.pipelines that registers it, one-line help shown by ``synthtrace --help``).
#: tests/test_cli_edge.py checks this table against what the modules register.
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("cli_warehouse", "Ingest traces into the warehouse (atomic per run; a trace already there is skipped)."),
    "runs": ("cli_warehouse", "List the runs in the warehouse; `runs rm` and `runs move` put them right."),
    "sql": ("cli_warehouse", "Answer a read-only SQL query over the warehouse views (SELECT, or EXPLAIN of one; it reads no other file)."),
    "simulate": ("cli_simulate", "Simulate multi-run hardware-counter traces of MPI applications, with their ground "
                                 "truth as Parquet."),
    "plan": ("cli_plan", "Plan the fewest runs that record every counter, each run carrying the fixed reference "
                         "counters."),
    "merge": ("cli_merge", "Merge the counters of an experiment's runs into its reference run's bursts; print the "
                           "quality per counter."),
    "nightly": ("cli_nightly", "Run the nightly flow once (ephemeral Prefect, no server needed)."),
    "serve": ("cli_nightly", "Register the nightly deployment on a Prefect server and serve it on its schedule "
                             "(PREFECT_API_URL)."),
    "demo": ("cli_demo", "Simulate a small campaign (2 apps, several counter sets, a few nights, one injected "
                         "regression), run the nightly flow over it and say where to look."),
    "archetypes": ("cli_analysis", "Compute metrics and the 13 archetypes of an experiment, store them and print "
                                   "the mix."),
    "machines": ("cli_analysis", "List the machine profiles that ship with synthtrace (use one with --machine, or "
                                 "drop a machine.toml beside the traces)."),
    "report": ("cli_analysis", "Write a self-contained HTML report (archetype mix, roofline, Ridgeline, timeline, "
                               "merge quality, alerts)."),
    "train": ("cli_models", "Train a burst performance predictor, evaluate it on unseen applications and register "
                            "it."),
    "models": ("cli_models", "List every registered model version, oldest first."),
    "predict": ("cli_models", "Predict every burst of an experiment with a registered model; writes the predictions "
                              "view."),
    "detect": ("cli_models", "Find performance regressions in the nightly history of each application; writes the "
                             "regressions view."),
    "export": ("cli_export", "Export an experiment's synthetic trace as Perfetto JSON, a Pipit-style events table, "
                             "or CSV."),
}


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

    def resolve_command(self, ctx: _click.Context, args: list[str]) -> tuple[str | None, _click.Command | None, list[str]]:
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
        console.print(f"synthtrace {__version__}", highlight=False)
        raise typer.Exit(0)


app = typer.Typer(
    name="synthtrace",
    help="Merge multi-run hardware-counter traces of MPI applications into one synthetic trace and analyse it.",
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


# error text is printed literally: no emoji codes (``t.prv:100:`` stays), no markup, no highlighting
console = Console(emoji=False, highlight=False)
err_console = Console(stderr=True, emoji=False, highlight=False)


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


def print_error(message: str) -> None:
    """One literal ``error:`` line on stderr (no markup, no emoji, no highlighting of the message)."""
    err_console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)


def _usage_error(exc: _click.exceptions.ClickException) -> int:
    """One line for a usage mistake (unknown command or option, missing argument, bad value): exit 2."""
    ctx = getattr(exc, "ctx", None)
    where = f"{ctx.command_path}: " if ctx is not None and ctx.command_path else ""
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    print_error(f"{where}{exc.format_message()}{hint}".replace("\n", " "))
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    warnings.simplefilter("default")
    warnings.showwarning = lambda message, category, *a, **k: err_console.print(
        f"[yellow]warning:[/] {escape(str(message))}", soft_wrap=True)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the CLI prints its own summary
    try:
        # with standalone_mode=False click returns the code of a typer.Exit instead of raising it
        result: Any = app(args=argv, prog_name="synthtrace", standalone_mode=False)
    except SynthtraceError as exc:
        print_error(str(exc))
        return 2 if isinstance(exc, BadInputError) else exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("aborted")
        return 130
    except _click.exceptions.NoArgsIsHelpError:  # bare ``synthtrace``: the help was printed; not a mistake
        return 0
    except _click.exceptions.ClickException as exc:
        return _usage_error(exc)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
