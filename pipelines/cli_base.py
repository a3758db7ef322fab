"""What every command shares, without typer (the fast ``runs``/``sql`` path imports it too): the consoles, the
``error:``/``warning:``/``note:`` lines, tables that are never squeezed into a pipe, step progress bars, and the
check of a ``--warehouse`` that a command only reads.

Every text is printed literally: no markup (``run[1].prv`` stays), no emoji codes (``t.prv:100:`` stays), no
highlighting; styles are given as rich Text, never as markup inside a string.
"""
from __future__ import annotations

import contextlib
import errno
import glob
import io
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, Self

from rich.console import Console
from rich.text import Text

from synthtrace.pipelines import interrupts
from synthtrace.tracelib.atomic_file import (
    is_stream,
    output_refusal,
    place_file,
    resolved_target,
    unheld,
    write_atomically,
)
from synthtrace.tracelib.errors import BadInputError, OutputClosed
from synthtrace.tracelib.folder_tree import remove_tree
from synthtrace.tracelib.formats.gzip_name import without_gzip
from synthtrace.tracelib.printable import escaped  # [helper security2]

if TYPE_CHECKING:
    import gzip

    from rich.progress import Progress, ProgressColumn
    from rich.table import Table

    from synthtrace.warehouse.experiment import Experiment

class _Console(Console):
    """A rich console whose closed output (``| head -1``) ends the command quietly (:class:`OutputClosed`), and whose
    plain-text lines show control characters escaped (attack 18 F6: a file name's newline split a line, its escape
    sequence recoloured the terminal)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        try:
            super().print(*(escaped(o) if isinstance(o, str) else o for o in objects), **kwargs)
        except OSError as exc:  # rich ends a closed pipe itself (on_broken_pipe)
            if self.stderr:
                raise
            raise stdout_failure(exc) from None

    def on_broken_pipe(self) -> None:
        """Rich's own exits 1 (a command that failed, to a script); [helper edges] issue 23: exit 141, quietly."""
        closed_output(self.file)


console = _Console(markup=False, emoji=False, highlight=False)
err_console = _Console(stderr=True, markup=False, emoji=False, highlight=False)


def closed_output(stream: IO[str]) -> NoReturn:
    """End the command because the reader of ``stream`` closed it: what is still buffered for it, and anything
    written to it later (an exit handler's flush), goes to /dev/null instead of failing again; then
    :class:`OutputClosed`."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    raise OutputClosed


def stdout_failure(exc: OSError) -> OSError | BadInputError:
    """The error for standard output that cannot be written (``> /dev/full``, a full disk or quota under a
    redirection; attack 21 F9: "[Errno 28] No space left on device" named no output), what is still buffered for
    it dropped so that the interpreter's last flush does not fail again (exit 120 and a traceback). ``exc`` itself
    for one closed from the start (EBADF, whose line already says so). What the command stored before is said
    (attack 22 F4: ``merge EXP > /dev/full`` had stored the merge; a script seeing exit 2 ran it again)."""
    if exc.errno == errno.EBADF:
        return exc
    with contextlib.suppress(OutputClosed):
        closed_output(sys.stdout)
    done = interrupts.committed()
    stored = f"; it stored {interrupts.stored_what(done)} before, whole: only printing failed" if done else ""
    return BadInputError(f"standard output: cannot write it ({exc.strerror or exc}){stored}")


def write_stdout(text: str) -> None:
    """``text`` on standard output as it is (CSV, JSON, a rendered plan), written now: a reader that closed it
    ends the command quietly (:func:`closed_output`); one that cannot take it is :func:`stdout_failure`."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        closed_output(sys.stdout)
    except OSError as exc:
        raise stdout_failure(exc) from None


def _say(label: str, style: str, message: str) -> None:
    """``label`` and ``message`` as one line on stderr: a control character in it (a file name's newline or escape
    sequence, attack 18 F6) is shown escaped, never played by the terminal."""
    try:
        err_console.print(Text.assemble((label, style), " ", escaped(message)), soft_wrap=True)
    except OutputClosed:  # [helper edges] nobody reads stderr any more (`2>&1 | head -0`): the exit code still says
        pass  # it (an error stays exit 2, not 141)


def print_error(message: str) -> None:
    """One literal ``error:`` line on stderr (the message is never read as markup)."""
    _say("error:", "red", message)


def print_warning(message: str) -> None:
    """One literal ``warning:`` line on stderr."""
    _say("warning:", "yellow", message)


def print_note(message: str) -> None:
    """One literal ``note:`` line on stderr."""
    _say("note:", "dim", message)


def print_merge_coverage_notes(experiments: Iterable[Experiment]) -> None:
    """A note per experiment whose merge leaves some of its runs out, for the commands that read merges (attack 12
    F9, attack 13: archetypes, export, report, train, predict); the command's own :class:`Experiment` objects, so
    that the runs table is not read again."""
    for note in filter(None, (exp.merge_coverage_note() for exp in experiments)):
        print_note(note)


def print_table(table: Table) -> None:
    """Print a table on stdout: fitted to a terminal, at its natural width (nothing folded, ids and names whole)
    when stdout is a pipe or a file, which is read, copied and grepped. Headers and text cells are shown with
    control characters escaped: no stored value (a run's --app, a counter name) can forge lines or drive the
    terminal."""
    _escape_cells(table)  # [helper security2] issue 23 F7
    if console.is_terminal:
        console.print(table)
        return
    natural = console.measure(table, options=console.options.update_width(1 << 16)).maximum
    # a console of its own: print(width=) cannot widen one, and the shared one keeps its width for what follows
    _Console(file=console.file, width=max(console.width, natural), markup=False, emoji=False,
             highlight=False).print(table)


def _escape_cells(table: Table) -> None:  # [helper security2] issue 23 F7
    """Escape control characters (newline, ESC, ...) in the headers and text cells of ``table``, in place."""
    for column in table.columns:
        if isinstance(column.header, str):
            column.header = escaped(column.header)
        column._cells[:] = [_escaped_cell(c) for c in column._cells]


def _escaped_cell(cell: object) -> object:  # [helper security2] issue 23 F7
    if isinstance(cell, str):
        return escaped(cell)
    if isinstance(cell, Text) and not cell.plain.isprintable():
        return Text(escaped(cell.plain), style=cell.style)
    return cell


def print_written(line: str, output: Path) -> None:
    """A command's status line once it wrote ``output`` (``wrote ...``): on stdout, or on stderr when ``output`` is
    this process's stdout itself (``-o -``, ``-o /dev/stdout`` into a pipe or a terminal), where the line would land
    in the data written (attack 7 A19: a last CSV row, text after the JSON or HTML)."""
    (err_console if _is_stdout(output_path(output)) else console).print(line)


def _is_stdout(path: Path) -> bool:
    """Whether ``path`` (links followed) is the file, pipe or terminal this process's stdout writes to."""
    try:
        here, out = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False
    return (here.st_dev, here.st_ino) == (out.st_dev, out.st_ino)


def existing_warehouse(path: Path) -> Path:
    """The ``--warehouse`` of a command that only reads: refuse a path that is missing, a file, or not a warehouse
    (a read must never create one)."""
    from synthtrace.warehouse.layout import MARKER

    if not path.exists():
        raise BadInputError(f"{path}: no such warehouse (ingest traces into it first, or give --warehouse DIR)")
    if not path.is_dir():
        raise BadInputError(f"{path}: is a file, not a warehouse folder")
    # the marker is a file: a folder that holds a warehouse of the default name is not a warehouse itself
    if not (path / MARKER).is_file() and not (path / "runs").is_dir():
        raise BadInputError(f"{path}: not a synthtrace warehouse (no {MARKER} marker, no runs/ folder)")
    return path


def app_option(value: str | None) -> str | None:
    """Typer callback for ``--app``, a name stored as data and shown in tables: checked as an experiment name is
    (printable UTF-8 text, no control characters that could forge output lines)."""
    from synthtrace.warehouse.names import check_name  # [helper security2] issue 23 F7: the experiment-name rule

    return None if value is None else check_name(value, "--app")


def check_folder(path: Path, label: str) -> Path:
    """A folder a command will write into: refuse a path that is a file or lies under one, or whose nearest
    existing folder cannot be written (read-only, not ours) (``label``: how the error line names the path).
    Nothing is created. A folder inside a warehouse is refused too (no command's output may add files there, issue 23
    item 2)."""
    from synthtrace.warehouse.layout import warehouse_holding

    if (wh := warehouse_holding(path)) is not None:
        raise BadInputError(f"{label}: lies inside the warehouse {wh}; write outputs outside it")
    blocking = next((p for p in (path, *path.parents) if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise BadInputError(f"{label}: {blocking} is a file, not a folder")
    if blocking is not None and not os.access(blocking, os.W_OK | os.X_OK):
        raise BadInputError(f"{label}: cannot write into {blocking} (read-only or not yours)")
    return path


#: the rule every output path of every command follows (tracelib/atomic_file.py), as each output option's help says it
OUTPUT_RULE = ("- is standard output (./- a file named -). An existing link is followed; a FIFO that a process reads "
               "or a character device (/dev/stdout) is written into; a folder, a block device, a socket, an unread "
               "FIFO, a path inside a warehouse or in a folder that does not exist is refused; a file is replaced "
               "whole, never left half written.")
#: where an output option's ``-`` writes: this process's standard output, as ``-o /dev/stdout`` writes
STDOUT = Path("/dev/stdout")


def _as_given(text: str) -> Path:
    """The path ``text`` names, a file or folder named ``-`` kept one: ``./-`` is ``Path('-')`` to pathlib, which
    the output options read as standard output (attack 10: ``sql -o ./-`` wrote to stdout); given absolute, it stays
    the file. ``-`` itself is left as it is."""
    path = Path(text)
    return path.absolute() if text != "-" and str(path) == "-" else path


def output_option(text: str | Path) -> Path:
    """Typer's parser of an output option's FILE (``--output``, ``--out``), which reads the text as given: typer's
    own Path drops what tells (``./-`` became ``-``, standard output; ``a.csv/`` became ``a.csv``, written as a file).
    ``-`` alone is standard output (:func:`output_path`), ``./-`` the file named ``-``; a text that ends in ``/``
    names a folder and an empty one nothing: ValueError, typer's one line naming the option. A default (a Path) is
    taken as it is."""
    if isinstance(text, Path):
        return text
    if not text:
        raise ValueError("names no file; give a file name")
    if text.endswith("/"):
        raise ValueError(f"{text} ends in /: it names a folder; give a file name")
    return _as_given(text)


def folder_option(text: str | Path) -> Path:
    """Typer's parser of a FOLDER a command writes files into (``report --plots``, ``simulate OUT_DIR``): an empty
    text names no folder (it was the current folder) and ``-`` is standard output, which holds no folder of files:
    ValueError, typer's one line naming the option; ``./-`` is the folder named ``-``. A default (a Path) is taken as
    it is."""
    if isinstance(text, Path):
        return text
    if not text:
        raise ValueError("names no folder; give one (. for the current folder)")
    if text == "-":
        raise ValueError("- is standard output, which cannot hold a folder of files; give a folder (./- for one "
                         "named -)")
    return _as_given(text)


def output_path(path: Path) -> Path:
    """The file an output option's ``path`` names: :data:`STDOUT` for ``-`` (the shell's convention, as ``cat -``
    reads stdin: ``sql -o -`` wrote a file named ``-``), else ``path`` (a file named ``-``: ``$PWD/-``)."""
    return STDOUT if str(path) == "-" else path


def output_file(path: Path, option: str = "--output", *, folder_made: bool = False) -> Path:
    """Check the FILE of an ``--output``-like ``option`` by :data:`OUTPUT_RULE` before any work: refuse a folder, a
    block device or socket (links followed), a path inside a warehouse (no command's output may replace or add a
    file there, issue 23 item 2), a path under a file, in a folder that cannot be written or in one that does not
    exist (as ``cp`` and a shell's ``>``: a mistyped folder is said, never made, and as root ``-o /x/y.json`` made
    ``/x``; attack 10), but where ``folder_made`` (``merge --export-prv``, whose stem's folder is made when it is
    written: :func:`write_outputs`). Creates nothing. ``-`` is standard output (:func:`output_path`); returns the path
    to write."""
    from synthtrace.warehouse.layout import warehouse_holding

    path = output_path(path)
    if path == STDOUT and not is_stream(path):  # a file or a socket the shell gave: written into (output_target)
        return path
    if (why := output_refusal(path)) is not None:
        raise BadInputError(f"{option} {path}: {why}")
    # the path itself, links followed: an output that is a link into a warehouse (check_folder asks of the parent)
    if (wh := warehouse_holding(path)) is not None:
        raise BadInputError(f"{option} {path}: lies inside the warehouse {wh}; write outputs outside it")
    if not is_stream(path):  # [helper edges] a stream is written into: its folder (/dev) need not be writable;
        folder = check_folder(resolved_target(path).parent, f"{option} {path}")  # a file: where it is replaced
        if not folder_made and not folder.is_dir():
            raise BadInputError(f"{option} {path}: the folder {folder} does not exist (an output's folder is not "
                                "made); make it first")
    return path


def gzip_stream(raw: IO[bytes], output: Path) -> gzip.GzipFile:
    """A gzip stream into the open file ``raw`` for the output ``output``: level 6, no time stamp (one content's
    bytes are the same every time), its header naming ``output`` without ``.gz`` (any case: attack 12, ``Q.CSV.GZ``
    kept it), the name ``gunzip -N`` restores (attack 11: it named the hidden part file the output was written as)."""
    import gzip  # only a compressed output needs it: not every command's start-up

    return gzip.GzipFile(filename=without_gzip(output.name), fileobj=raw, mode="wb", compresslevel=6, mtime=0)


def write_output(path: Path, write: Callable[[Path], object], option: str = "--output") -> None:
    """``write(path)`` into :func:`output_file` ``path`` (checked again: the work took time; its folder gone
    meanwhile is refused, not made), whole or not at all (a full disk leaves no truncated file), by
    :data:`OUTPUT_RULE`. A file that cannot be written is one line (exit 2)."""
    path = output_file(path, option)
    with output_folder(path, option), output_target(path, option) as target:
        write_atomically(target, write)


@contextlib.contextmanager
def output_target(path: Path, option: str = "--output") -> Iterator[Path]:
    """The file to write the output ``path`` (:func:`output_file`) as: ``path`` itself, but for ``-`` when the shell
    gave standard output a file (``> out``, ``>> log``) or a socket (a service's journal), a private file whose bytes
    go to standard output where the shell put them (after what ``>>`` kept) once the block ends well: renamed over
    the file, ``>> log`` lost the log; a socket was refused."""
    path = output_file(path, option)
    if path != STDOUT or is_stream(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="synthtrace-stdout-") as folder:
        part = Path(folder) / "output"
        yield part
        sys.stdout.flush()
        with open(part, "rb") as src, open(sys.stdout.fileno(), "wb", closefd=False) as out:
            shutil.copyfileobj(src, out, 1 << 20)


def write_outputs(paths: list[Path], write: Callable[[Path], object], option: str) -> None:
    """Several files written together (a Paraver trace's ``.pcf``, ``.row`` and, last, ``.prv``), all in one folder:
    ``write(folder)`` writes each under its name into a private part folder beside them, then each is put at its
    path by :data:`OUTPUT_RULE`, in order (the last appears last: a folder watcher never picks up half of them).

    The last file names the set (a Paraver reader opens the ``.prv`` and reads the companions of its name), and three
    renames are not one: killed between them, the old ``.prv`` stood beside the new ``.pcf``/``.row`` (its events
    read under another trace's names, silently). So the old last file leaves first, into the part folder, and the
    new one comes last: under the last file's name there is the old set, the new set, or, after a kill in between,
    no file at all, which every reader says (a missing trace), never a mixed set. Kept in the part folder, the old
    one is put back when placing fails before any new file is in place. A part folder is held (``flock``) while it is
    used; one nobody holds (its writer was killed) is removed by the next write into the same folder, with a warning
    naming the output. Where the last file is a stream, or a link to another file system, it is written over as
    before."""
    for p in paths:
        output_file(p, option, folder_made=True)
    first = paths[0]
    with output_folder(first, option), held_folder(first.parent, f".{first.name}", f"{option} {first}") as stage:
        write(stage)
        last = resolved_target(paths[-1])
        old = stage / f".old.{last.name}"
        moved = False
        if last.is_file() and not is_stream(last):
            with contextlib.suppress(OSError):  # another file system (a link): written over as before
                os.rename(last, old)
                moved = True
        placed = 0
        try:
            for p in paths:
                place_file(stage / p.name, output_file(p, option, folder_made=True))
                placed += 1
        except BaseException:
            if moved and placed == 0 and not last.exists():
                os.rename(old, last)
            raise


#: what a :func:`held_folder` ends with
_PART = ".part"


@contextlib.contextmanager
def held_folder(parent: Path, prefix: str, said: str | None = None) -> Iterator[Path]:
    """A new folder ``parent/PREFIX.<random>.part`` for a command's intermediate files, held locked (``flock`` on
    its descriptor, taken before it has its name; the kernel releases it with a killed process) until the block
    ends, then removed. Such folders of ``prefix`` that nobody holds (a killed command's) are removed first, with a
    warning ``said: ...`` when ``said`` names what was being written (write_outputs' part folders beside an output;
    a report's analysis parts in $TMPDIR, which a kill left there for good before)."""
    import fcntl

    for stale in parent.glob(f"{glob.escape(prefix)}.*{_PART}"):
        if stale.is_dir() and not stale.is_symlink() and unheld(stale):
            remove_tree(stale, ignore_errors=True)
            if said:
                print_warning(f"{said}: an earlier write there was stopped before it ended (killed); its part "
                              f"folder {stale.name} was removed")
    folder = parent / f"{prefix}.{uuid.uuid4().hex[:8]}{_PART}"
    new = folder.with_name(folder.name + ".new")  # locked before it has its name: never seen unheld
    new.mkdir()
    fd = os.open(new, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(OSError):  # a file system without locks: never judged stale by another
            fcntl.flock(fd, fcntl.LOCK_EX)
        new.rename(folder)
        yield folder
    finally:
        remove_tree(folder, ignore_errors=True)
        remove_tree(new, ignore_errors=True)
        os.close(fd)


@contextlib.contextmanager
def staged_folder(folder: Path, option: str) -> Iterator[Path]:
    """A private folder (hidden, beside ``folder``) to write the files of ``folder`` into; when the block ends well
    each is put at its place in ``folder`` (made if missing; a file of the same name replaced) by
    :data:`OUTPUT_RULE` (:func:`check_linked_places`, all checked before any is put), so a folder watcher (a nightly
    drop folder) never sees a file half written. A block that fails (a full disk, Ctrl-C) leaves nothing behind, not
    its files, not the folders made for them; an OSError is one line naming the file it was writing (``option``:
    how that line names ``folder``)."""
    folder = folder.absolute()
    with _folder_made(folder.parent, option, folder):
        stage = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}.part"
        try:
            stage.mkdir()
            try:
                yield stage
            except BaseException as exc:
                if (named := _named_in(exc, stage, folder)) is exc:
                    raise
                raise named from None
            placed = [(src, folder / src.relative_to(stage)) for src in sorted(stage.rglob("*")) if not src.is_dir()]
            check_linked_places(folder, (dest for _, dest in placed), option)
            made = not folder.exists()
            folder.mkdir(exist_ok=True)
            try:
                for src, dest in placed:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    place_file(src, dest)
            except BaseException:
                if made:  # nothing of this command stays in a folder it made
                    remove_tree(folder, ignore_errors=True)
                raise
        finally:
            remove_tree(stage, ignore_errors=True)


def check_linked_places(folder: Path, places: Iterable[Path], option: str) -> None:
    """Refuse by :func:`output_file` each file ``places`` of the output ``folder`` (checked when its command began:
    :func:`check_folder`) whose place a symbolic link decides, its name or a folder between being one (attack 20
    F15/F16: a link at a PNG's or a trace's name to a stored run's ``run.parquet`` was written through, the run's
    record replaced): a link into a warehouse is refused, one elsewhere followed, as for ``--output``. A place no link
    decides lies in ``folder``: one ``realpath`` per file."""
    real = resolved_target(folder)
    for place in places:
        if resolved_target(place) != real / place.relative_to(folder):
            output_file(place, option)


def _named_in(exc: BaseException, stage: Path, folder: Path) -> BaseException:
    """``exc`` of a write into ``stage`` naming the file at its place in ``folder``: the file it names, or, when it
    names none (a write() that filled the disk, a library's "os error 28"), the file of ``stage`` written last."""
    if isinstance(exc, OSError) and exc.filename and Path(exc.filename).is_relative_to(stage):
        return OSError(exc.errno, exc.strerror, str(folder / Path(exc.filename).relative_to(stage)))
    if getattr(exc, "filename", None) or not isinstance(exc, Exception):
        return exc
    files = [p for p in stage.rglob("*") if p.is_file()]
    last = max(files, key=lambda p: p.stat().st_mtime_ns) if files else None
    return _os_error(exc, folder / last.relative_to(stage) if last else folder) or exc


def _os_error(exc: BaseException, path: Path) -> OSError | None:
    """``exc`` as an OSError naming ``path`` when it is the operating system's error (see ``os_error_within``)."""
    from synthtrace.warehouse.layout import os_error_within

    return os_error_within(exc, path)


@contextlib.contextmanager
def output_folder(path: Path, option: str) -> Iterator[None]:
    """The missing folders above the output ``path`` made for the block, and removed again (those still empty) when
    it fails: a failed command leaves nothing behind; an OSError is one line naming the output (``option``: how it
    names it). For a block that writes ``path`` itself (a report); :func:`write_output` uses it."""
    with _folder_made(path.parent, option, path):
        yield


@contextlib.contextmanager
def _folder_made(folder: Path, option: str, named: Path) -> Iterator[None]:
    """``folder`` and the missing folders above it made for the block, and removed again (those still empty) when it
    fails; an OSError is one line ``option FILE: cannot write it (reason)``, FILE the error's or ``named``."""
    folder = folder.absolute()
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"{option} {named}: cannot create its folder {folder} ({exc.strerror})") from None
    try:
        yield
    except BaseException as exc:
        if not isinstance(exc, OSError) or not exc.errno:  # a library's own exception ("os error 28")
            exc = _os_error(exc, named) or exc
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:  # -o - into `| head -1`: the reader's choice
            closed_output(sys.stdout)
        if isinstance(exc, OSError):
            raise BadInputError(f"{option} {exc.filename or named}: cannot write it ({exc.strerror or exc})") from None
        raise


def progress_bar(*columns: ProgressColumn | str, transient: bool = True) -> Progress:
    """A rich progress bar on stderr with ``columns``. A transient bar (gone when done) is shown only on a
    terminal: into a pipe or a log, rich would leave an empty line after the command's last line."""
    from rich.progress import Progress

    return Progress(*columns, console=err_console, transient=transient,
                    disable=transient and not err_console.is_terminal)


class StepProgress:
    """A rich progress bar on stderr that appears once work has run ``delay_s`` seconds (short commands stay
    quiet), even while the first step still runs. Use as a context manager; call it with a step's description as
    that step ends to advance one step."""

    def __init__(self, total: int, description: str, delay_s: float = 2.0):
        self.total, self.description, self.delay_s = total, description, delay_s
        self.done = 0
        self.label = description
        self.bar: Progress | None = None
        self.t0 = time.monotonic()
        self._lock = threading.RLock()
        self._timer = threading.Timer(delay_s, self._show)
        self._timer.daemon = True

    def __enter__(self) -> Self:
        self._timer.start()
        return self

    def _show(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        with self._lock:
            if self.bar is None:
                self.bar = progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                        TimeElapsedColumn())
                self.task = self.bar.add_task(self.label, total=self.total, completed=min(self.done, self.total))
                self.bar.start()

    def __call__(self, step: str, total: int | None = None) -> None:
        """One step ended (``total``: the number of steps, where the work learns it as it goes)."""
        with self._lock:
            self.done += 1
            self.total = total or self.total
            self.label = f"{self.description}: {step}"
            if self.bar is None and time.monotonic() - self.t0 >= self.delay_s:
                self._show()
            if self.bar is not None:
                self.bar.update(self.task, total=self.total, completed=min(self.done, self.total),
                                description=self.label)

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            if self.bar is not None:
                self.bar.stop()
