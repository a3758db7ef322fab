"""``synthtrace runs`` (the listing), ``synthtrace sql`` and ``synthtrace ingest`` in their usual forms, their
arguments read without typer: interactive SQL starts like DuckDB's own shell, paying for DuckDB and rich only, and an
ingest skips typer's parse (pydantic's import and a validator per parameter: ~0.13 s of serial CPU, issue 27).

Their options are described once, here (:class:`Opt`, :class:`Arg`); the typer commands of
:mod:`~synthtrace.pipelines.cli_warehouse` declare them from these descriptions and call the same functions.
:func:`understood` takes an argument list only when it holds nothing but these options, each at most once with a
valid value, and the command's positional arguments; anything else (``--help``, a typo, a bad or missing value, a
subcommand, a value that looks like an option, an option no :class:`FastCommand` lists such as ``ingest --date``)
goes to typer, so every mistake keeps typer's message and exit code.
"""
from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthtrace import DEFAULT_WAREHOUSE
from synthtrace.pipelines.cli_base import (
    app_option,
    console,
    existing_warehouse,
    gzip_stream,
    output_file,
    output_option,
    output_path,
    print_table,
    print_warning,
    write_output,
    write_stdout,
)
from synthtrace.tracelib.errors import BadInputError, SynthtraceError
from synthtrace.tracelib.formats.gzip_name import gzip_named
from synthtrace.tracelib.printable import escaped

if TYPE_CHECKING:
    import pyarrow as pa


def _path(text: str) -> Path:
    if not text:
        raise ValueError("empty path")
    return Path(text)


def _choice(*choices: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text
    return check


def _at_least(low: float) -> Callable[[str], float]:
    def check(text: str) -> float:
        if not text.isascii():  # Python's float reads '５' (a full-width digit); typer's FLOAT does not (attack 11)
            raise ValueError(text)
        value = float(text)
        if not (math.isfinite(value) and value >= low):
            raise ValueError(text)
        return value
    return check


def _checked(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """A typer callback that refuses with :class:`BadInputError` as a converter (ValueError: typer judges it)."""
    def convert(text: str) -> Any:
        try:
            return check(text)
        except BadInputError as exc:
            raise ValueError(text) from exc
    return convert


def _experiment_name(text: str) -> str:
    from synthtrace.warehouse.names import name_option  # only an ingest pays for it

    return name_option(text)


@dataclass(frozen=True)
class Opt:
    """One option of a command: its names (the long one first), how its text becomes its value (ValueError: typer
    judges it), the environment variable it falls back to, for a choice its values and, for a flag (no text), the
    value each name sets (``--salvage``/``--no-salvage``: True, False)."""

    names: tuple[str, ...]
    convert: Callable[[str], Any]
    envvar: str | None = None
    choices: tuple[str, ...] = ()
    flags: tuple[Any, ...] = ()

    @property
    def dest(self) -> str:
        """The parameter name of the functions below."""
        return self.names[0].lstrip("-").replace("-", "_")


SQL_FORMATS = ("table", "csv", "json", "parquet")
#: the format an ``--output`` file's extension names when ``--format`` is not given (``.tsv``/``.txt``: the table as
#: tab-separated text); any of them but ``.parquet`` may end in ``.gz`` (gzip-compressed)
OUTPUT_EXTENSIONS = {".csv": "csv", ".json": "json", ".parquet": "parquet", ".tsv": "table", ".txt": "table"}
_KNOWN_OUTPUTS = ".csv, .json, .parquet, .tsv or .txt (tab-separated), .csv.gz, .json.gz, .tsv.gz, .txt.gz"
WAREHOUSE = Opt(("--warehouse", "-w"), _path, envvar="SYNTHTRACE_WAREHOUSE")
FORMAT = Opt(("--format", "-f"), _choice(*SQL_FORMATS), choices=SQL_FORMATS)
OUTPUT = Opt(("--output", "-o"), output_option)
#: the smallest --timeout, in seconds
MIN_TIMEOUT_S = 0.001
TIMEOUT = Opt(("--timeout",), _at_least(MIN_TIMEOUT_S))
MEMORY_LIMIT = Opt(("--memory-limit",), str)
TEMP_LIMIT = Opt(("--temp-limit",), str)
EXPERIMENT = Opt(("--experiment",), _checked(_experiment_name))
APP = Opt(("--app",), _checked(app_option))
SALVAGE = Opt(("--salvage", "--no-salvage"), bool, flags=(True, False))

RUNS_QUERY = """
    SELECT run_name, experiment, app, started_at, n_tasks, round(duration_ns / 1e9, 3) AS duration_s,
           n_bursts, len(counters) AS n_counters, run_id
    FROM runs ORDER BY experiment, run_name"""


def list_runs(warehouse: Path = DEFAULT_WAREHOUSE) -> None:
    """Print the runs of the warehouse, one row each."""
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import runs_rows

    columns, rows, warnings = runs_rows(Warehouse(existing_warehouse(warehouse)), RUNS_QUERY)
    print_rows(columns, rows, title=f"runs in {warehouse}")
    for line in warnings:  # a damaged run, a missing file, a folder no commit wrote: said, the rest listed
        print_warning(line)


def answer_sql(statement: str, warehouse: Path = DEFAULT_WAREHOUSE, format: str | None = None,
               output: Path | None = None, timeout: float | None = None, memory_limit: str | None = None,
               temp_limit: str | None = None) -> None:
    """Answer a read-only query in ``format`` (one of :data:`SQL_FORMATS`; None: by ``output``'s extension, else
    table) on stdout or in ``output``; ``timeout`` in seconds, ``memory_limit``/``temp_limit`` sizes (None: the
    default limits).

    An ``output`` file is written as the result comes (:func:`_stream_to_file`): this process holds a batch at a
    time (a Parquet row group at most), and the result is not capped. Standard output, a FIFO or a device gets the
    result once the query has ended whole (nothing of a refused query is shown): it is held meanwhile, within the
    memory limit together with the query's own memory (attack 19 F13)."""
    from synthtrace.tracelib.atomic_file import is_stream
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.warehouse.sql import DEFAULT_MEMORY_LIMIT, DEFAULT_TEMP_LIMIT, DEFAULT_TIMEOUT_S, query, query_rows

    wh = Warehouse(existing_warehouse(warehouse))
    if format == "parquet" and output is None:
        raise BadInputError("--format parquet needs --output FILE")
    if output is not None:
        output_file(output)  # before the query runs
    format, gzipped = output_format(output, format)
    limits = {"timeout_s": DEFAULT_TIMEOUT_S if timeout is None else timeout,
              "memory_limit": memory_limit or DEFAULT_MEMORY_LIMIT, "temp_limit": temp_limit or DEFAULT_TEMP_LIMIT}
    if output is not None and not is_stream(output_path(output)):
        _stream_to_file(wh, statement, format, output, gzipped, limits)
        return
    if format in ("csv", "parquet"):  # Arrow writes these (nested columns and all)
        # security (issue 23): for_parquet, marked one-line edit
        table = query(wh, statement, flat=format == "csv", for_parquet=format == "parquet", **limits)
        if output is None:  # shown as it comes from Arrow's batches, each made terminal-safe
            import pyarrow as pa

            safe = (_terminal_safe(pa.Table.from_batches([b], schema=table.schema)) for b in table.to_batches())
            for chunk in _csv_chunks(_terminal_safe(table.schema.empty_table()).schema, safe):
                write_stdout(chunk.decode())
        else:
            write_output(output, _file_writer(format, output, gzipped, table.schema, iter(table.to_batches())))
        return
    columns, rows = query_rows(wh, statement, **limits)
    if format == "table" and output is None:
        print_rows(columns, rows)
        return
    pieces = _text_pieces(columns, [rows], format)
    if output is None:
        for piece in pieces:
            write_stdout(piece)
    else:
        write_output(output, _file_writer(format, output, gzipped, columns, iter([rows])))


class _QueryEnded(BaseException):
    """A query's own error (:class:`SynthtraceError`) carried out of an output's write block, which reads a library's
    error text or a full disk as the output's (:func:`~synthtrace.pipelines.cli_base.write_output`): raised again
    as it was outside the block."""

    def __init__(self, error: SynthtraceError) -> None:
        super().__init__(str(error))
        self.error = error


def _stream_to_file(wh: Any, statement: str, fmt: str, output: Path, gzipped: bool, limits: dict[str, Any]) -> None:
    """The answer of ``statement`` written into the file ``output`` as its batches come (:func:`write_output`: whole
    or not at all; a refused or stopped query leaves no file)."""
    from synthtrace.warehouse.sql import query_rows_stream, query_stream

    def written(part: Path) -> None:
        try:
            if fmt in ("csv", "parquet"):
                query_stream(wh, statement, lambda schema, batches: _file_writer(fmt, output, gzipped, schema,
                                                                                 batches)(part),
                             flat=fmt == "csv", for_parquet=fmt == "parquet", **limits)
            else:
                query_rows_stream(wh, statement, lambda columns, batches: _file_writer(fmt, output, gzipped, columns,
                                                                                       batches)(part), **limits)
        except SynthtraceError as exc:
            raise _QueryEnded(exc) from None

    try:
        write_output(output, written)
    except _QueryEnded as ended:
        raise ended.error from None


#: packings a file name can promise that no output is written in (only ``.gz`` is): refused, never written plain
#: (lower case: a name is compared in lower case, ``x.CSV.BZ2`` as ``x.csv.bz2``; attack 12: ``.gzip``, ``.zstd``,
#: ``.br``, ``.sz`` and ``.snappy`` were written plain, exit 0)
UNWRITTEN_PACKINGS = frozenset({".bz2", ".xz", ".zst", ".zstd", ".zip", ".lz4", ".lzma", ".z", ".tar", ".tgz", ".7z",
                                ".gzip", ".br", ".sz", ".snappy"})


def output_extension(output: Path) -> tuple[str | None, bool]:
    """What the file name ``output`` says it holds: the format its extension before any ``.gz`` names
    (:data:`OUTPUT_EXTENSIONS`; None: none it names, ``x.xlsx``, ``x.``, ``x``) and whether it ends in ``.gz``; a
    name promising a packing no output is written in (:data:`UNWRITTEN_PACKINGS`, ``.gz.gz``) is
    :class:`BadInputError`."""
    suffixes = [s.lower() for s in output.suffixes] if not output.name.endswith(".") else []
    gzipped = bool(suffixes) and gzip_named(suffixes[-1])
    inner = suffixes[:-1] if gzipped else suffixes  # the extension before .gz
    if inner[-1:] and inner[-1] in UNWRITTEN_PACKINGS or (gzipped and inner[-1:] and gzip_named(inner[-1])):
        # attack 11: `-o x.csv.bz2 --format csv` wrote plain CSV that pandas could not open ("Invalid data stream")
        raise BadInputError(f"--output {output}: its name says {inner[-1]}, a packing synthtrace does not write; "
                            f"name it {_KNOWN_OUTPUTS}")
    return (OUTPUT_EXTENSIONS.get(inner[-1]) if inner else None), gzipped


def output_format(output: Path | None, format: str | None) -> tuple[str, bool]:
    """The format ``sql`` writes (one of :data:`SQL_FORMATS`) and whether gzip-compressed: ``format`` when given,
    else what ``output``'s extension names (:data:`OUTPUT_EXTENSIONS`; no ``output`` or ``-``: the table). A file
    ending in ``.gz`` is compressed. An extension that names no format (``x.xlsx``, ``x.``, ``x``, ``x.csv.bz2``) is
    refused without ``--format``, as is Parquet in gzip (a text table once went silently into ``x.json.gz``). A
    device or FIFO (``/dev/stdout``, ``/dev/null``, a named pipe), written into, has no extension to follow: the
    table, as on standard output; but one named ``.gz`` gets what a file of that name gets (attack 12: a FIFO
    ``ff.csv.gz`` got plain text, so ``zcat ff.csv.gz`` failed)."""
    from synthtrace.tracelib.atomic_file import is_stream

    if output is None or str(output) == "-" or (is_stream(output) and not gzip_named(output)):
        return format or "table", False
    named, gzipped = output_extension(output)  # a FIFO named x.csv.gz gets the gzip a file of that name gets
    if format is None and named is None:
        raise BadInputError(f"--output {output}: its extension names no format; use {_KNOWN_OUTPUTS}, or give "
                            "--format")
    format = format or named
    if gzipped and format == "parquet":
        raise BadInputError(f"--output {output}: Parquet is compressed inside; write it to a .parquet file")
    return format, gzipped


#: the most bytes (Arrow's) of a Parquet row group ``sql --output x.parquet`` gathers before writing it; a row group
#: is otherwise up to pyarrow's 1 Mi rows, as ``pq.write_table`` of the whole result wrote it
PARQUET_GROUP_BYTES = 128 << 20
_PARQUET_GROUP_ROWS = 1 << 20


def _file_writer(fmt: str, output: Path, gzipped: bool, head: Any, batches: Iterator[Any]) -> Callable[[Path], None]:
    """What writes a result into a file opened afresh (``output``'s part file): ``head`` and ``batches`` are the
    schema and Arrow batches (``csv``, of a ``flat`` query; ``parquet``) or the column names and batches of rows
    (``json``, ``table``); the text formats gzip-compressed when ``gzipped`` (:func:`gzip_stream`)."""
    def written(part: Path) -> None:
        if fmt == "parquet":
            _write_parquet(part, head, batches)
            return
        with part.open("wb") as raw, (gzip_stream(raw, output) if gzipped else raw) as fh:
            pieces = _csv_chunks(head, batches) if fmt == "csv" else (p.encode() for p in _text_pieces(head, batches,
                                                                                                          fmt))
            for piece in pieces:
                fh.write(piece)
    return written


def _csv_chunks(schema: pa.Schema, batches: Iterable[pa.RecordBatch | pa.Table]) -> Iterator[bytes]:
    """CSV of ``batches`` (of a ``flat`` query: nested columns as JSON text) a batch at a time, the header first:
    the bytes ``pyarrow.csv.write_csv`` makes of the whole table."""
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    writer: pacsv.CSVWriter | None = None
    for batch in batches:
        if writer is None:
            writer = pacsv.CSVWriter(buf, batch.schema)
        writer.write(batch)
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    if writer is None:  # no batch: the header alone
        pacsv.write_csv(schema.empty_table(), buf)
    else:
        writer.close()
    if buf.getvalue():
        yield buf.getvalue()


def _write_parquet(path: Path, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> None:
    """``batches`` into the Parquet file ``path`` in row groups of up to 1 Mi rows (pyarrow's default) and
    :data:`PARQUET_GROUP_BYTES`: the bytes ``pq.write_table`` made of a whole result under that size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    # opened by Python: pyarrow takes a path as UTF-8 text (attack 20 F4)
    with path.open("wb") as fh, pq.ParquetWriter(fh, schema) as writer:
        group: list[pa.RecordBatch] = []
        rows = size = 0
        wrote = False
        for batch in batches:
            group.append(batch)
            rows, size = rows + batch.num_rows, size + batch.nbytes
            while rows >= _PARQUET_GROUP_ROWS or (size >= PARQUET_GROUP_BYTES and rows):
                table = pa.Table.from_batches(group, schema=schema)
                n = min(rows, _PARQUET_GROUP_ROWS)
                writer.write_table(table.slice(0, n))
                wrote = True
                group = table.slice(n).to_batches()
                rows -= n
                size = sum(b.nbytes for b in group)
        if group or not wrote:
            writer.write_table(pa.Table.from_batches(group, schema=schema))


def _terminal_safe(table: pa.Table) -> pa.Table:
    """``table`` as standard output shows it: control characters in its column names and text cells escaped
    (:func:`~synthtrace.tracelib.printable.escaped`, as the table output and every message are), so a stored value
    cannot play on the terminal (attack 19 F5: a trace's folder named ``ESC]0;...BEL`` set the window title through
    ``sql --format csv``). Only the cells that need it are converted; a file written with ``--output`` keeps the
    values as stored."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = column.combine_chunks()
            raw = pc.fill_null(pc.invert(pc.utf8_is_printable(column)), False)
            if pc.any(raw).as_py():
                shown = [escaped(v) for v in pc.filter(column, raw).to_pylist()]
                column = pc.replace_with_mask(column, raw, pa.array(shown, type=column.type))
        columns.append(column)
    return pa.Table.from_arrays(columns, names=[escaped(n) for n in table.column_names])


def _json_value(v: object) -> object:
    """``v`` as JSON can hold it: a NaN or infinite float is null (JSON has no such number: Python's ``NaN`` token
    is refused by jq, JavaScript and every strict parser), nested lists and structs likewise."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return v


def _text_pieces(columns: list[str], batches: Iterable[list[tuple]], fmt: str) -> Iterator[str]:
    """Rows, a batch at a time, as one JSON list of records (NaN and infinities as null: the text ``json.dumps``
    makes of the whole list), or as tab-separated text with a header line."""
    if fmt == "json":
        sep = "["
        for rows in batches:
            if rows:
                yield sep + ", ".join(json.dumps(dict(zip(columns, map(_json_value, r))), default=str, indent=None,
                                                 allow_nan=False) for r in rows)
                sep = ", "
        yield ("[" if sep == "[" else "") + "]\n"
        return
    yield "\t".join(columns) + "\n"
    for rows in batches:
        if rows:
            yield "".join("\t".join("" if v is None else str(v) for v in r) + "\n" for r in rows)


def print_rows(columns: list[str], rows: list[tuple], title: str | None = None, limit: int = 200) -> None:
    """DuckDB's rows as a table (the first ``limit`` of them)."""
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    for name in columns:
        t.add_column(name, overflow="fold")
    for r in rows[:limit]:
        t.add_row(*("" if v is None else str(v) for v in r))
    print_table(t)
    if len(rows) > limit:
        console.print(f"({len(rows)} rows, first {limit} shown; use --format csv for all)")


def ingest(**params: Any) -> int | None:
    """The ``ingest`` command of :mod:`~synthtrace.pipelines.cli_warehouse` (imported when it runs) with
    ``params``; its exit code (a trace refused among others: its :class:`typer.Exit`)."""
    import typer

    from synthtrace.pipelines.cli_warehouse import ingest as command

    try:
        command(**params)
    except typer.Exit as exc:
        return exc.exit_code
    return None


@dataclass(frozen=True)
class Arg:
    """A positional parameter of a command: its name, how its text becomes its value (ValueError: typer judges
    it) and whether it takes every remaining argument, one at least, as a list (``ingest PATHS...``)."""

    name: str
    convert: Callable[[str], Any] = str
    many: bool = False


@dataclass(frozen=True)
class FastCommand:
    """A command :func:`understood` may answer: the function (its exit code, None for 0), its options and its
    positional parameters."""

    run: Callable[..., int | None]
    options: tuple[Opt, ...]
    positionals: tuple[Arg, ...] = ()


FAST: dict[str, FastCommand] = {
    "runs": FastCommand(list_runs, (WAREHOUSE,)),
    "sql": FastCommand(answer_sql, (WAREHOUSE, FORMAT, OUTPUT, TIMEOUT, MEMORY_LIMIT, TEMP_LIMIT), (Arg("statement"),)),
    "ingest": FastCommand(ingest, (WAREHOUSE, EXPERIMENT, APP, SALVAGE), (Arg("paths", _path, many=True),)),
}


def understood(args: list[str]) -> Callable[[], int | None] | None:
    """The command ``args`` asks for, ready to run (it returns its exit code, None for 0), when :data:`FAST` covers
    every argument; None otherwise (typer then parses them, and says what is wrong)."""
    if not args or (cmd := FAST.get(args[0])) is None:
        return None
    by_name = {name: opt for opt in cmd.options for name in opt.names}
    values: dict[str, Any] = {}
    positional: list[str] = []
    rest = iter(args[1:])
    try:
        for arg in rest:
            if not arg.startswith("-"):
                positional.append(arg)
                continue
            name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
            opt = by_name.get(name)
            if opt is not None and opt.flags and not eq and opt.dest not in values:
                values[opt.dest] = opt.flags[opt.names.index(name)]
                continue
            text = inline if eq else next(rest, None)
            if (opt is None or opt.flags or opt.dest in values or text is None
                    or (not eq and text.startswith("-"))):
                return None
            values[opt.dest] = opt.convert(text)
        for opt in cmd.options:
            if opt.dest not in values and opt.envvar and (env := os.environ.get(opt.envvar)):
                values[opt.dest] = opt.convert(env)
        params = _positionals(cmd.positionals, positional)
    except ValueError:
        return None
    return None if params is None else partial(cmd.run, **params, **values)


def _positionals(wanted: tuple[Arg, ...], given: list[str]) -> dict[str, Any] | None:
    """The positional parameters ``given`` as ``wanted`` names them (ValueError: a value typer judges), or None
    when their number does not fit."""
    many = bool(wanted) and wanted[-1].many
    if len(given) < len(wanted) if many else len(given) != len(wanted):
        return None
    params = {arg.name: arg.convert(text) for arg, text in zip(wanted, given)}
    if many:
        params[wanted[-1].name] = [wanted[-1].convert(text) for text in given[len(wanted) - 1:]]
    return params
