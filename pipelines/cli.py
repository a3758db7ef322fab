"""The ``synthtrace`` command line (DESIGN §10): :func:`main`, called by the console script's entry point
(:mod:`synthtrace.pipelines.entry`).

Each command group lives in its own ``pipelines/cli_*.py`` module with a ``register(app)`` function; the typer
application that loads them lives in :mod:`synthtrace.pipelines.cli_app`. This module imports neither typer nor
rich nor any command module at start-up: ``synthtrace``, ``--help`` and ``--version`` are answered from
:data:`COMMANDS` alone; ``runs``, ``sql`` and ``ingest`` with the options they are usually given are read without
typer's parse (:mod:`synthtrace.pipelines.cli_read`); any other command loads only the module that registers it.
It is also the one place where a :class:`~synthtrace.tracelib.errors.SynthtraceError` or a usage mistake becomes one
line on stderr and an exit code (2 for bad input or bad usage), never a traceback.
"""
from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import sys
import textwrap
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typer._click.exceptions import ClickException

#: what ``synthtrace --help`` says about the program
SUMMARY = "Merge multi-run hardware-counter traces of MPI applications into one synthetic trace and analyse it."
#: the root's options, as ``--help`` lists them (the typer app in cli_app defines them)
ROOT_OPTIONS: dict[str, str] = {
    "--version": "Print the version and exit.",
    "--install-completion": "Install completion for the current shell.",
    "--show-completion": "Show completion for the current shell (or the one named: --show-completion bash), to "
                         "copy it or customize the installation.",
    "--help": "Show this message and exit.",
}

#: command -> (module under synthtrace.pipelines that registers it, one-line help shown by ``synthtrace --help``).
#: tests/test_cli_edge.py checks this table against what the modules register.
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("cli_warehouse", "Ingest traces into the warehouse (atomic per run; a trace already there is skipped)."),
    "runs": ("cli_warehouse", "List the runs in the warehouse; `runs rm` and `runs move` put them right."),
    "sql": (
        "cli_warehouse",
        "Answer a read-only SQL query over the warehouse views (SELECT, or EXPLAIN of one; it reads no other file).",
    ),
    "simulate": (
        "cli_simulate",
        "Simulate multi-run hardware-counter traces of MPI applications, with their ground truth as Parquet.",
    ),
    "plan": (
        "cli_plan",
        "Plan the fewest runs that record every counter, each run carrying the fixed reference counters.",
    ),
    "merge": (
        "cli_merge",
        "Merge the counters of an experiment's runs into its reference run's bursts; print the quality per counter.",
    ),
    "nightly": ("cli_nightly", "Run the nightly flow once (ephemeral Prefect, no server needed)."),
    "serve": (
        "cli_nightly",
        "Register the nightly deployment on a Prefect server and serve it on its schedule (PREFECT_API_URL).",
    ),
    "demo": (
        "cli_demo",
        "Simulate a small campaign (2 apps, several counter sets, a few nights, one injected "
        "regression), run the nightly flow over it and say where to look.",
    ),
    "archetypes": (
        "cli_analysis",
        "Compute metrics and the 13 archetypes of an experiment, store them and print the mix.",
    ),
    "machines": (
        "cli_analysis",
        "List the machine profiles that ship with synthtrace (use one with --machine, or "
        "drop a machine.toml beside the traces).",
    ),
    "report": (
        "cli_analysis",
        "Write a self-contained HTML report (archetype mix, roofline, Ridgeline, timeline, merge quality, alerts).",
    ),
    "train": ("cli_models", "Train a burst performance predictor, evaluate it on unseen applications and register it."),
    "models": ("cli_models", "List every registered model version, oldest first."),
    "predict": (
        "cli_models",
        "Predict every burst of an experiment with a registered model; writes the predictions view.",
    ),
    "detect": (
        "cli_models",
        "Find performance regressions in the nightly history of each application; writes the regressions view.",
    ),
    "export": (
        "cli_export",
        "Export an experiment's synthetic trace as Perfetto JSON, a Pipit-style events table, or CSV.",
    ),
    "pop": (
        "cli_pop",
        "Print the POP efficiency table of each application (its runs as columns, by ranks), computing what is "
        "missing.",
    ),
}


def root_help(width: int | None = None) -> str:
    """The text of ``synthtrace --help``, from :data:`COMMANDS` and :data:`ROOT_OPTIONS` (nothing imported)."""
    width = width or min(shutil.get_terminal_size().columns, 100)

    def block(rows: dict[str, str]) -> list[str]:
        left = max(map(len, rows)) + 4
        return [textwrap.fill(text, width, initial_indent=f"  {name}".ljust(left), subsequent_indent=" " * left)
                for name, text in rows.items()]

    return "\n".join(["Usage: synthtrace [OPTIONS] COMMAND [ARGS]...", "", textwrap.fill(SUMMARY, width,
                      initial_indent="  ", subsequent_indent="  "), "", "Options:", *block(ROOT_OPTIONS), "",
                      "Commands:", *block({name: text for name, (_, text) in COMMANDS.items()}), ""])


def _quick(argv: list[str]) -> int | None:
    """Answer ``synthtrace``, ``synthtrace --help`` and ``synthtrace --version`` without building the typer
    application (most of a command's start-up); None for anything else."""
    if argv in ([], ["--help"]):
        text = root_help()
    elif argv == ["--version"]:
        from synthtrace import __version__

        text = f"synthtrace {__version__}\n"
    else:
        return None
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:  # attack 21 F9: `--help > /dev/full` was a traceback
        if exc.errno == errno.EPIPE:
            return _output_closed()
        from synthtrace.pipelines.cli_base import print_error, stdout_failure

        print_error(str(stdout_failure(exc)))
        return 2
    return 0


class _ClosedOutput(io.TextIOBase):
    """[helper security, issue 23 fresh attack] Standard output closed by the caller (``synthtrace sql ... >&-``;
    Python then sets ``sys.stdout`` to None, and the first print was an AttributeError traceback): writing to it
    is an OSError, one line at the edge, as ``echo x >&-`` says 'Bad file descriptor'."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed (the command was started with it closed)")


#: warnings a library gives about another library's code, which a user can do nothing about: pydantic 2.14 on
#: Prefect 3.9's models ("The 'alias' attribute with value 'work_pool_name' was provided to the `Field()`
#: function ..."), four lines at the start of every night and of `synthtrace demo`
LIBRARY_WARNINGS = (r"The '\w+' attribute with value .* was provided to the `Field\(\)` function",)


def show_warnings() -> None:
    """Every warning shown once where it is raised (a trace's, the analysis'), but :data:`LIBRARY_WARNINGS` and
    ResourceWarning: "unclosed file <_io.FileIO name=18 ...>" when some code's file is collected is a note to the
    developer of that code (Python hides it outside development mode), not a line a user can act on."""
    warnings.simplefilter("default")
    warnings.simplefilter("ignore", ResourceWarning)
    for message in LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def main(argv: list[str] | None = None, *, deferred: list[int] | None = None) -> int:
    """Entry point of the console script; returns the process exit code. A Ctrl-C anywhere in it, the imports
    before a command starts included, is "aborted" and exit code 130, never a traceback or a death by the signal.
    ``deferred``: the console script's (:mod:`synthtrace.pipelines.entry`) SIGINTs noted before this call, which
    then hands Ctrl-C back to Python's handler inside this guard."""
    from synthtrace.pipelines import interrupts  # [helper races] attack 6 F22/F15: SIGTERM stops as Ctrl-C does

    restore = None
    interrupts.reset()
    try:  # [helper security, issue 23 session 6 item 3] a Ctrl-C while the modules below were imported escaped
        if deferred is not None:  # bench25 M1: one before this block was a traceback
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if deferred:
                raise KeyboardInterrupt(signal.Signals(deferred[0]).name)
        from synthtrace.pipelines.address_space import configure_jemalloc, fit_to_address_space, too_small_line

        # before any library that starts threads or allocates is loaded (attack 7 A10; issue 23: Polars' jemalloc)
        limit = fit_to_address_space()
        configure_jemalloc(limit is not None)
        if (refused := too_small_line(sys.argv[1:] if argv is None else list(argv), limit)) is not None:
            # attack 20 F9: below its floor a command died in Arrow's or Polars' allocator (exit 134, no line)
            from synthtrace.pipelines.cli_base import print_error

            print_error(refused)
            return 1
        restore = interrupts.arm()  # the line says what the command had stored when it stopped
        code = _main(argv)
    except KeyboardInterrupt:
        sys.stderr.write(interrupts.stopped_line() + "\n")
        code = interrupts.exit_code()
    finally:
        if restore is not None:
            restore()
    if argv is None:  # [helper races] the console script: a signal after the command is said too (F22)
        interrupts.end_process(code)
    return code


def _main(argv: list[str] | None) -> int:
    """:func:`main`, a Ctrl-C inside a command already "aborted"."""
    args = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None:  # [helper security] see _ClosedOutput
        sys.stdout = _ClosedOutput()
    for stream in (sys.stdout, sys.stderr):  # [helper security, attack 6 F10] a stream that cannot encode the data
        # (PYTHONIOENCODING=ascii, a C locale) shows it escaped, as error lines already are, never a traceback
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    if len(args) == 2 and args[0] == "--show-completion":
        # the script of a named shell, through click's completion variable: typer's own option only detects the
        # shell from the processes above, which a container or a CI job may not have
        os.environ[COMPLETE_VAR] = f"source_{args[1]}"
        args = []
    completing = COMPLETE_VAR in os.environ
    if not completing and (code := _quick(args)) is not None:
        return code
    from synthtrace.pipelines.cli_base import print_error, print_warning

    if args == ["--install-completion"] and (shell := _detected_shell()) not in COMPLETION_SHELLS:
        # typer would print "Shell None is not supported." and exit 1 (a cron job, a container, a CI step)
        print_error(f"--install-completion: {'no shell found' if shell is None else f'{shell} is not supported'} "
                    f"above this process; print the script of yours with `synthtrace --show-completion "
                    f"{'|'.join(COMPLETION_SHELLS)}` and source it from that shell's start-up file")
        return 2
    from synthtrace.pipelines.address_space import out_of_memory_line
    from synthtrace.pipelines.cli_read import understood
    from synthtrace.tracelib.errors import BadInputError, OutputClosed, SynthtraceError

    show_warnings()
    warnings.showwarning = lambda message, category, *a, **k: print_warning(str(message))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the CLI prints its own summary
    fast = None if completing else understood(args)  # runs, sql and ingest, without typer's parse
    try:
        return (fast() or 0) if fast is not None else _run_app(args)
    except OutputClosed as exc:  # [helper edges] issue 23: `| head -1`: the reader's choice, no error
        return exc.exit_code
    except SynthtraceError as exc:
        print_error(str(exc))
        return 2 if isinstance(exc, BadInputError) else exc.exit_code
    except OSError as exc:  # a path no check foresaw: a full disk, a name too long, a folder turned read-only
        if exc.errno == errno.EPIPE:  # a write to stdout (or a FIFO) whose reader has gone: as above
            return _output_closed()
        if (line := out_of_memory_line(exc)) is not None:
            print_error(line)
            return 1
        print_error(f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc))
        return 2
    except Exception as exc:  # a KeyboardInterrupt is said by main, which knows what was stored [helper races]
        if _interrupted(exc):  # Ctrl-C inside a library that wrapped it (numba's SystemError, ...)
            raise KeyboardInterrupt from exc
        if (line := out_of_memory_line(exc)) is None:
            raise
        print_error(line)
        return 1
    except BaseException as exc:  # a Rust panic (pyo3's PanicException is no Exception) for want of memory
        if (line := out_of_memory_line(exc)) is None:
            raise
        print_error(line)
        return 1


def _output_closed() -> int:
    """The exit code of a command whose output's reader has gone, what is still buffered for stdout dropped
    (:func:`~synthtrace.pipelines.cli_base.closed_output`)."""
    from synthtrace.pipelines.cli_base import closed_output
    from synthtrace.tracelib.errors import OutputClosed

    try:
        closed_output(sys.stdout)
    except OutputClosed as exc:
        return exc.exit_code


def _interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt stands anywhere in ``exc``'s chain of causes and contexts (a library may wrap
    it more than once: numba's SystemError raised while another error was being handled)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        todo += [e.__cause__, e.__context__]
    return False


#: the exit code of a command stopped by Ctrl-C (128 + SIGINT, as shells report it)
ABORTED = 130
#: the environment variable through which click prints a shell's completion script
COMPLETE_VAR = "_SYNTHTRACE_COMPLETE"
#: the shells typer installs completion for
COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _detected_shell() -> str | None:
    """The shell running synthtrace, as typer's ``--install-completion`` detects it (shellingham); None if none."""
    import shellingham

    try:
        return shellingham.detect_shell()[0]
    except shellingham.ShellDetectionFailure:
        return None


def _run_app(args: list[str]) -> int:
    """Run the typer application (imported here: typer, pydantic and rich cost ~0.25 s); a usage mistake is one
    line, exit 2."""
    import typer

    from synthtrace.pipelines.cli_app import app

    click = typer._click  # typer >= 0.29 raises its own (vendored) click exceptions
    try:
        # with standalone_mode=False click returns the code of a typer.Exit instead of raising it
        result: Any = app(args=args, prog_name="synthtrace", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort as exc:
        raise KeyboardInterrupt from exc
    except SystemExit:  # typer's own for a write to a closed pipe (exit 1), its streams made to ignore it
        if isinstance(sys.stdout, click.utils.PacifyFlushWrapper):
            return _output_closed()
        raise
    except click.exceptions.NoArgsIsHelpError:  # a group without its subcommand: the help was printed
        return 0
    except click.exceptions.ClickException as exc:
        return _usage_error(exc)
    except OSError as exc:  # attack 22 F4: typer prints a command's help itself; into `> /dev/full` it raised
        printed_by_typer = "--help" in args or COMPLETE_VAR in os.environ  # attack 23 F9: a completion
        if exc.filename is not None or exc.errno == errno.EPIPE or not printed_by_typer:  # script too
            raise
        from synthtrace.pipelines.cli_base import stdout_failure

        raise stdout_failure(exc) from None
    if result == ABORTED:  # typer turns Ctrl-C into Exit(130), which standalone_mode=False returns, silently
        raise KeyboardInterrupt
    return result if isinstance(result, int) else 0


def _usage_error(exc: ClickException) -> int:
    """One line for a usage mistake (unknown command or option, missing argument, bad value): exit 2."""
    from synthtrace.pipelines.cli_base import print_error

    ctx = getattr(exc, "ctx", None)
    where = f"{ctx.command_path}: " if ctx is not None and ctx.command_path else ""
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    print_error(f"{where}{exc.format_message()}{hint}".replace("\n", " "))
    return 2


if __name__ == "__main__":
    sys.exit(main())
