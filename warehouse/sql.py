"""Read-only SQL over the warehouse (DESIGN §11): what reaches DuckDB, what it may touch, and for how long.

Three walls, each enough on its own for what it guards:

1. DuckDB's own parser splits the text into statements; each must be a ``SELECT`` (``FROM``, ``WITH``,
   ``VALUES``, ``DESCRIBE``, ``SUMMARIZE``, ``SHOW`` parse as one) or an ``EXPLAIN`` without ``ANALYZE`` (which
   plans, never runs). ``COPY``, ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``, ``PRAGMA``, ``CALL``, DDL and DML
   are refused before anything runs.
2. The connection (:func:`synthtrace.warehouse.catalog.connect`) reads the warehouse's Parquet files that
   existed when it opened and no other file; external access is off and its configuration locked.
3. The query runs in a child process (:mod:`~synthtrace.warehouse.capped_child`), killed past its time limit
   (DuckDB has no statement timeout) or at Ctrl-C, whose memory the kernel caps: DuckDB's memory limit does not
   see every allocation (one huge scalar, issue 23 F3). DuckDB's memory and its spill files are capped too
   (:data:`DEFAULT_MEMORY_LIMIT`, :data:`DEFAULT_TEMP_LIMIT`; by default DuckDB takes 80 % of the machine's
   memory and unbounded temporary disk), and so is the result it hands over (in batches): a caller that keeps the
   result (the terminal's table, CSV or JSON) has it refused once what it holds and the query process's own growth
   pass the memory limit together (one cap for both processes); a caller that writes the batches out as they come
   (:func:`query_stream`, ``--output`` files) holds one at a time, and the result is not capped.

A query that races a writer (a run removed, an experiment re-merged) reads the warehouse as it was when it
started: its files are held by links (:mod:`~synthtrace.warehouse.snapshot`), never a refusal, never half a change.
Without write access to the warehouse's ``.staging`` it binds them by path and is answered again when a writer
changed them meanwhile (one line after a few such changes in a row), never half a change either.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from synthtrace.tracelib.errors import BadInputError
from synthtrace.warehouse import capped_child, engine, snapshot
from synthtrace.warehouse.catalog import VIEW_FILES, connect, warm_empty_views
from synthtrace.warehouse.errors import QueryError, ReadOnlyQueryError
from synthtrace.warehouse.layout import Warehouse, pid_alive
from synthtrace.warehouse.stored import damaged_runs, foreign_folders, incomplete_runs, linked_experiment_members

if TYPE_CHECKING:  # pyarrow costs ~0.3 s to import: `synthtrace sql` prints its rows without it
    import pyarrow as pa

ALLOWED = {engine.StatementType.SELECT, engine.StatementType.EXPLAIN}
#: EXPLAIN options that execute the statement they explain
_EXECUTING = {"analyze", "analyse"}
DEFAULT_TIMEOUT_S = 300.0
#: the longest time limit a query may be given, in seconds (a week); ``inf`` would mean no limit at all
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: DuckDB's memory (its buffer manager: hash tables, sorts, aggregates), and its temporary files on disk
DEFAULT_MEMORY_LIMIT = "1GiB"
DEFAULT_TEMP_LIMIT = "8GiB"
#: what the process answering a query needs beyond DuckDB's memory limit and its threads' stacks: the engine's own
#: structures, the batch being handed over, pyarrow's conversion (bytes)
ENGINE_OVERHEAD_BYTES = 256 * 2**20
_SIZE = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[kmgt]i?b|b|)", re.IGNORECASE)
_UNIT_BYTES = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
MIN_MEMORY_BYTES = 16 * 2**20
#: the largest memory or temporary-disk cap (a size past it is a typo; the kernel's limits are 64-bit)
MAX_SIZE_BYTES = 2**50
#: DuckDB type ids written to CSV as they are; nested types become JSON text, every other type DuckDB's text
_CSV_AS_IS = {"boolean", "tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint", "uinteger",
              "ubigint", "uhugeint",
              "float", "double", "decimal", "varchar", "date", "time", "timestamp", "timestamp_s", "timestamp_ms",
              "timestamp_ns", "timestamp with time zone"}
_CSV_AS_JSON = {"list", "struct", "map", "array", "union"}
#: DuckDB types (in a type's text, nested or not) that Arrow cannot write to Parquet
_NOT_PARQUET = re.compile(r"\b(INTERVAL|UNION)\b", re.IGNORECASE)
_SPILL_PREFIX = "synthtrace-sql-"
#: rows fetched at a time while the result's size is checked against the memory limit
_BATCH_ROWS = 65536
#: at most this many cells (rows x columns) fetched at a time as Python rows: 65,536 rows of a 4,107-column result
#: were ~2 GB of tuples, past the cap of the process that fetched them (attack 19 F13)
_BATCH_CELLS = 1 << 20
T = TypeVar("T")
#: the share of the memory limit a kept result may take whatever the query process itself has grown by
RESULT_SHARE = 0.25
#: words of a query that list the catalog (SHOW TABLES, DESCRIBE, information_schema.tables, duckdb_views(), ...):
#: such a query gets every view
_CATALOG_WORDS = re.compile(r"show|describe|information_schema|(duckdb|pg|pragma|sqlite)_\w*")


def _explain_executes(statement: str) -> bool:
    """True when an EXPLAIN statement carries ANALYZE (as keyword, option or quoted name): it would run."""
    for start, end in _token_spans(statement):
        if statement[start:end].strip().strip('"').lower() in _EXECUTING:
            return True
    return False


def _token_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every non-literal token, from DuckDB's tokenizer."""
    tokens = engine.tokenize(text)
    ends = [start for start, _ in tokens[1:]] + [len(text)]
    return [(start, end) for (start, kind), end in zip(tokens, ends)
            if kind not in (engine.token_type.string_const, engine.token_type.comment)]


def views_named(sql: str) -> set[str]:
    """The warehouse views ``sql`` may read: every view whose name appears in it as a word (in identifiers,
    strings and comments alike, so ``query_table('bursts')`` counts), or all of them when it lists the catalog.
    Case-insensitive, like DuckDB's names."""
    words = set(re.findall(r"\w+", sql.lower()))
    if any(_CATALOG_WORDS.fullmatch(w) for w in words):
        return set(VIEW_FILES)
    return words & VIEW_FILES.keys()


def check_utf8(text: str, what: str) -> str:
    """``text`` itself when it is UTF-8 text, else :class:`BadInputError` naming ``what`` (undecodable bytes of the
    command line arrive as lone surrogates, which neither DuckDB nor Parquet can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadInputError(f"{what} {text!r} is not UTF-8 text (at character {exc.start + 1})") from None
    return text


def check_timeout(timeout_s: float | None) -> float | None:
    """``timeout_s`` when it is a time limit a query can run under (more than 0, at most :data:`MAX_TIMEOUT_S`);
    None stays None (no limit: callers inside synthtrace only)."""
    if timeout_s is not None and not (math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise BadInputError(f"--timeout {timeout_s:g}: give a number of seconds above 0 and at most "
                            f"{MAX_TIMEOUT_S:.0f} (a week)")
    return timeout_s


def size_bytes(text: str, option: str) -> int:
    """Bytes of a size such as ``2GiB``, ``500MB`` or ``1073741824`` (``option``: how an error line names it)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise BadInputError(f"{option} {text!r}: not a size (a number with B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)")
    n = int(float(m["n"]) * _UNIT_BYTES[m["unit"].lower()])
    if n < MIN_MEMORY_BYTES:
        raise BadInputError(f"{option} {text!r}: at least {MIN_MEMORY_BYTES >> 20} MiB")
    if n > MAX_SIZE_BYTES:
        raise BadInputError(f"{option} {text!r}: at most {MAX_SIZE_BYTES >> 40} TiB")
    return n


def duckdb_limits(memory_limit: str = DEFAULT_MEMORY_LIMIT, temp_limit: str = DEFAULT_TEMP_LIMIT) -> dict[str, str]:
    """DuckDB's configuration for the memory and temporary-disk caps (checked sizes)."""
    return {"memory_limit": f"{size_bytes(memory_limit, '--memory-limit')}B",
            "max_temp_directory_size": f"{size_bytes(temp_limit, '--temp-limit')}B"}


def check_read_only(query: str, con: engine.DuckDBPyConnection | None = None) -> None:
    """Raise :class:`ReadOnlyQueryError` unless every statement of ``query`` only reads. ``con``: the connection
    to parse with (default: DuckDB's default one, which costs ~50 ms to create on first use)."""
    check_utf8(query, "the query")
    try:
        statements = engine.extract_statements(query, connection=con)
    except engine.Error as exc:
        raise QueryError(f"SQL does not parse: {str(exc).splitlines()[0]}") from None
    if not statements:
        raise ReadOnlyQueryError("empty query")
    for st in statements:
        if st.type not in ALLOWED:
            kind = st.type.name.replace("_", " ")
            raise ReadOnlyQueryError(f"refused: {kind} statements are not allowed; synthtrace sql is read-only "
                                     "(SELECT, or EXPLAIN of one)")
        if st.type is engine.StatementType.EXPLAIN and _explain_executes(st.query):
            raise ReadOnlyQueryError("refused: EXPLAIN ANALYZE runs its statement; use EXPLAIN without ANALYZE")


def query(wh: Warehouse, sql: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S, flat: bool = False,
          for_parquet: bool = False, memory_limit: str = DEFAULT_MEMORY_LIMIT, temp_limit: str = DEFAULT_TEMP_LIMIT
          ) -> pa.Table:
    """Run a read-only query against the warehouse views; returns an Arrow table.

    ``timeout_s``: wall-clock limit in seconds (None: none); ``memory_limit``/``temp_limit``: the query's memory
    and temporary-disk caps (sizes such as ``2GiB``; see :func:`_answer`). ``flat``: columns as CSV can hold them
    (nested ones as JSON text, BLOBs, intervals, UUIDs ... as DuckDB's text), converted by DuckDB within the time
    limit; ``for_parquet``: columns Parquet cannot hold (intervals, unions, also inside lists and structs) as
    DuckDB's text. The warehouse is read as it was when the query started, whatever a concurrent writer removes or
    replaces meanwhile.
    """
    import pyarrow as pa

    schema, batches = query_stream(wh, sql, lambda head, items: (head, list(items)), timeout_s=timeout_s, flat=flat,
                                   for_parquet=for_parquet, memory_limit=memory_limit, temp_limit=temp_limit,
                                   kept=True)
    return pa.Table.from_batches(batches, schema=schema)


def query_stream(wh: Warehouse, sql: str, consume: Callable[[pa.Schema, Iterator[pa.RecordBatch]], T], *,
                 timeout_s: float | None = DEFAULT_TIMEOUT_S, flat: bool = False, for_parquet: bool = False,
                 memory_limit: str = DEFAULT_MEMORY_LIMIT, temp_limit: str = DEFAULT_TEMP_LIMIT, kept: bool = False
                 ) -> T:
    """:func:`query`'s answer as ``consume(schema, batches)`` makes of it, its Arrow batches handed over as the
    query process sends them (what ``consume`` returns is returned). ``kept``: ``consume`` keeps the batches (they
    are refused past the memory limit together with the query process's own growth); else it lets each go (writes
    it to a file) and the result is not capped. ``consume`` is called again, from the first batch, when the files
    of a read bound by path changed under it (see :func:`_answer`): it must start what it makes again."""
    engine.relation_api()  # con.sql and Arrow results
    weigh = _weigher(kept, memory_limit)

    def produce(con: engine.DuckDBPyConnection, text: str, send: Callable[[Any], None]) -> None:
        rel = con.sql(text)
        if (flat or for_parquet) and rel is not None:
            rel = _as_text(rel, _csv_kind if flat else _parquet_kind)
        reader = rel.to_arrow_reader(_BATCH_ROWS)
        send(reader.schema)
        for batch in _batches(reader):
            weigh(batch.nbytes)
            send(batch)

    return _answer(wh, sql, timeout_s, produce, (memory_limit, temp_limit), consume, reserve=reserve_arrow_pool)


def reserve_arrow_pool() -> None:
    """In the query process, before its memory cap is measured: pyarrow's memory pool takes the address space it
    reserves at its first allocation (mimalloc's arena: 1 GiB of data segment, a few MB of it resident), so the cap
    counts what the query uses of it, not the reservation (attack 21 F2: a result streamed at ~180 MB resident was
    refused at the default 1 GiB cap)."""
    import pyarrow as pa

    pa.allocate_buffer(1)


def _weigher(kept: bool, memory_limit: str) -> Callable[[int], None]:
    """In the query process: what weighs each item before it is sent, given its size in bytes. When the caller
    keeps the items, the result is refused (:func:`_check_result_size`) once their total passes what this process's
    own growth (:func:`~synthtrace.warehouse.capped_child.grown_bytes`) leaves of ``memory_limit``: one cap for both
    processes (attack 19 F13: the caller gathered up to the whole cap beside the query process's own 0.5 GB, a
    1.75 GB tree at the default 1 GiB). A result may always take :data:`RESULT_SHARE` of the cap (a count over wide
    files grows the query process past a 16 MiB cap by reading their metadata alone). Otherwise nothing is
    weighed."""
    budget = size_bytes(memory_limit, "--memory-limit")
    held = 0

    def weigh(size: int) -> None:
        nonlocal held
        if kept:
            held += size
            _check_result_size(held, max(budget - capped_child.grown_bytes(), int(budget * RESULT_SHARE)),
                               memory_limit)

    return weigh


def _batches(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    """The batches of ``reader``. A DuckDB error met while the result streams (a failing ``error()``, an
    allocation past the cap in its Arrow conversion) comes out of Arrow's stream interface as Arrow's exception (an
    ``OSError`` whose text is DuckDB's whole message, several lines): it is raised as DuckDB's own type again, for
    :func:`_run` to say in one line."""
    import pyarrow as pa

    batches = iter(reader)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as exc:
            text = str(exc)
            if isinstance(exc, MemoryError) or text.startswith("Out of Memory Error"):
                raise engine.OutOfMemoryException(text) from None
            raise engine.Error(text) from None
        yield batch


def _as_text(rel: Any, kind_of: Callable[[Any], str]) -> Any:
    """The relation ``rel`` with every column a file format cannot hold turned into text in DuckDB: ``kind_of``
    says, per DuckDB column type, ``"as is"``, ``"json"`` or ``"text"``."""
    exprs = []
    for i, (name, kind) in enumerate(zip(rel.columns, rel.types), start=1):
        quoted = '"' + name.replace('"', '""') + '"'
        how = kind_of(kind)
        if how == "as is":
            exprs.append(f"#{i} AS {quoted}")
        elif how == "json":
            exprs.append(f"CAST(to_json(#{i}) AS VARCHAR) AS {quoted}")
        else:
            exprs.append(f"CAST(#{i} AS VARCHAR) AS {quoted}")
    return rel.project(", ".join(exprs)) if exprs else rel


def _csv_kind(kind: Any) -> str:
    """CSV: nested columns as JSON text, every other type CSV cannot hold as DuckDB's text."""
    return "as is" if kind.id in _CSV_AS_IS else "json" if kind.id in _CSV_AS_JSON else "text"


def _parquet_kind(kind: Any) -> str:
    """Parquet: intervals and unions (Arrow's month-day-nano interval and sparse union), anywhere in the type, as
    DuckDB's text."""
    return "text" if _NOT_PARQUET.search(str(kind)) else "as is"


def query_rows(wh: Warehouse, sql: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S,
               memory_limit: str = DEFAULT_MEMORY_LIMIT, temp_limit: str = DEFAULT_TEMP_LIMIT,
               leave_out: Iterable[str] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
    """:func:`query` as (column names, rows of Python values), without importing pyarrow (the CLI's table and JSON
    output), from the engine alone (:mod:`~synthtrace.warehouse.engine`). ``leave_out``: stored folders the views
    do not read (``runs/<id>``: the damaged runs ``synthtrace runs`` lists apart)."""
    columns, batches = query_rows_stream(wh, sql, lambda head, items: (head, list(items)), timeout_s=timeout_s,
                                         memory_limit=memory_limit, temp_limit=temp_limit, leave_out=leave_out,
                                         kept=True)
    return columns, [row for batch in batches for row in batch]


def query_rows_stream(wh: Warehouse, sql: str, consume: Callable[[list[str], Iterator[list[tuple[Any, ...]]]], T],
                      *, timeout_s: float | None = DEFAULT_TIMEOUT_S, memory_limit: str = DEFAULT_MEMORY_LIMIT,
                      temp_limit: str = DEFAULT_TEMP_LIMIT, leave_out: Iterable[str] = (), kept: bool = False) -> T:
    """:func:`query_rows`' answer as ``consume(column names, batches of rows)`` makes of it, as
    :func:`query_stream` hands over Arrow batches (``kept``, and a new call from the first batch, likewise)."""
    weigh = _weigher(kept, memory_limit)

    def produce(con: engine.DuckDBPyConnection, text: str, send: Callable[[Any], None]) -> None:
        con.execute(text)
        columns = [d[0] for d in con.description or ()]
        send(columns)
        rows = max(1, min(_BATCH_ROWS, _BATCH_CELLS // max(1, len(columns))))
        while batch := con.fetchmany(rows):
            weigh(_rows_bytes(batch))
            send(batch)

    return _answer(wh, sql, timeout_s, produce, (memory_limit, temp_limit), consume, frozenset(leave_out))


def runs_rows(wh: Warehouse, sql: str) -> tuple[list[str], list[tuple[Any, ...]], list[str]]:
    """:func:`query_rows` of ``sql`` over the runs view as ``synthtrace runs`` lists it, and the warning lines that
    go with it (attack 8 B1, B2, B6): a run whose record or checksums are damaged is left out and named, with how
    to remove it, instead of failing the whole listing; a run missing a stored file is listed and named; a folder
    no commit wrote (``runs/<id>.bak``, a copied experiment) is named once (no reader reads it)."""
    damaged = damaged_runs(wh.existing().root)
    columns, rows = query_rows(wh, sql, leave_out=[f"runs/{r}" for r in damaged])
    warnings = [*foreign_folders(wh.root),
                *(f"{line}; it is not listed" for line in damaged.values()),  # each line names its runs rm
                *incomplete_runs(wh.root, damaged).values(), *linked_experiment_members(wh.root)]
    return columns, rows, warnings


def _rows_bytes(rows: list[tuple[Any, ...]]) -> int:
    """Bytes ``rows`` hold as Python objects, estimated from up to 8 of them (each row's slot in the list, its
    tuple, its values, and the values of lists and dicts among them, one level down)."""
    step = max(1, len(rows) // 8)
    sample = rows[::step]
    per_row = 8 + sum(sys.getsizeof(row) + sum(_value_bytes(v) for v in row) for row in sample) / len(sample)
    return int(per_row * len(rows))


def _value_bytes(value: Any) -> int:
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sys.getsizeof(value) + sum(sys.getsizeof(v) for v in value)
    return sys.getsizeof(value)


def _check_result_size(held: int, budget: int, memory_limit: str) -> None:
    """Refuse a result of ``held`` bytes past ``budget`` bytes (DuckDB's cap bounds what it computes, not the result
    it hands over: ``SELECT * FROM range(1e9)`` would fill the machine's memory in Python)."""
    if held > budget:
        raise QueryError(f"query result larger than its memory limit ({memory_limit}, see --memory-limit; the "
                         "result held for the terminal and the query's own memory share it): add a LIMIT, "
                         "aggregate, select fewer columns, or write it to a file with --output")


def memory_allowance(memory_limit: str) -> int:
    """Bytes the process answering a query may grow by: ``memory_limit`` (DuckDB's buffer manager, and the
    result batch it hands over) plus :data:`ENGINE_OVERHEAD_BYTES` and a reserved stack per DuckDB thread (one per
    core; each counts against the cap whether it is used or not)."""
    return (size_bytes(memory_limit, "--memory-limit") + ENGINE_OVERHEAD_BYTES
            + (os.cpu_count() or 1) * capped_child.thread_stack_bytes())


#: what a query sends back through :func:`_answer`: (connection, query text, send) -> None
Produce = Callable[[Any, str, Callable[[Any], None]], None]


def _answer(wh: Warehouse, sql: str, timeout_s: float | None, produce: Produce, caps: tuple[str, str],
            consume: Callable[[Any, Iterator[Any]], T], leave_out: frozenset[str] = frozenset(),
            reserve: Callable[[], None] | None = None) -> T:
    """Check ``sql`` and run it in a child process (:mod:`~synthtrace.warehouse.capped_child`) on a sealed
    connection over the files of the views it names, held from before it starts
    (:mod:`~synthtrace.warehouse.snapshot`: a concurrent writer cannot take them away); what ``consume(first item,
    the other items as they come)`` makes of the items ``produce`` sends (called again, from the first item, when
    the files of a read bound by path changed under it: the changed read's items end in
    :class:`~synthtrace.warehouse.snapshot.SnapshotChanged`).

    ``caps``: (memory limit, temporary-disk limit). DuckDB gets both; the child's data segment may grow by
    :func:`memory_allowance` (DuckDB builds a scalar such as ``repeat('x', 1 << 30)`` outside its memory limit) and
    it is killed after ``timeout_s`` seconds (a scalar function does not look at DuckDB's interrupt flag), or at
    Ctrl-C. ``leave_out``: stored folders not read (:func:`~synthtrace.warehouse.snapshot.pinned`); ``reserve``: run
    in the child before its cap is measured (:func:`~synthtrace.warehouse.capped_child.stream`)."""
    wh = wh.existing()
    timeout_s = check_timeout(timeout_s)
    memory_limit, temp_limit = caps
    limits = duckdb_limits(memory_limit, temp_limit)
    allowance = memory_allowance(memory_limit)
    views = views_named(sql)
    spill = _spill_folder()
    if "polars" in sys.modules:  # the child must not use Polars' thread pool (a forked child has none of its threads)
        warm_empty_views()

    def work(send: Callable[[Any], None]) -> None:
        with snapshot.pinned(wh, views, leave_out) as snap:
            snap.checked(lambda: _run(wh, sql, spill, lambda con, text: produce(con, text, send), (views, snap),
                                      limits))

    def ended(pid: int) -> None:
        snapshot.release(wh, pid)
        shutil.rmtree(spill, ignore_errors=True)

    deadline = None if timeout_s is None else time.monotonic() + timeout_s  # one limit for every attempt

    def attempt() -> T:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        # closed however consume ends (a full disk): the child is killed, not left blocked on its pipe
        with contextlib.closing(capped_child.stream(work, allowance_bytes=allowance, deadline_s=left,
                                                    on_exit=ended, reserve=reserve)) as items:
            for first in items:
                return consume(first, items)
            raise capped_child.ChildError("the child process sent no answer")

    try:  # read again (a new child) when the files, bound by path, changed under the query
        return snapshot.retried(wh, attempt)
    except capped_child.ChildTimedOut:
        raise QueryError(f"query stopped after {timeout_s:g} s (its time limit; see --timeout)") from None
    except capped_child.ChildOutOfMemory:
        raise QueryError(f"query needs more memory than its limit ({memory_limit}, see --memory-limit)") from None
    except capped_child.ChildError as exc:
        raise QueryError(f"query failed: {exc}") from None


def _spill_folder() -> Path:
    """A new name for the folder DuckDB may spill to (it creates it only to spill), after removing those of queries
    whose process was killed (a killed query's spill, up to its --temp-limit, would stay in the temporary folder
    for good): ``synthtrace-sql-<id>.<pid>`` in the temporary folder, the pid of the process that removes it."""
    tmp = Path(tempfile.gettempdir())
    for left in tmp.glob(f"{_SPILL_PREFIX}*.*"):
        pid = left.name.rsplit(".", 1)[-1]
        if pid.isdigit() and not pid_alive(int(pid)) and _own_folder(left):
            shutil.rmtree(left, ignore_errors=True)
    return tmp / f"{_SPILL_PREFIX}{uuid.uuid4().hex}.{os.getpid()}"


def _own_folder(path: Path) -> bool:
    """Whether ``path`` is a folder (not a link to one) of this user."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def _run(wh: Warehouse, sql: str, spill: Path, fetch: Callable[[engine.DuckDBPyConnection, str], None],
         listing: tuple[set[str], snapshot.Snapshot], limits: dict[str, str]) -> None:
    """In the child: ``fetch`` the answer of ``sql`` on a connection bound to ``listing`` (the views named, their
    files), every DuckDB error mapped to one line."""
    views, snap = listing
    con = None
    try:
        con = connect(wh, temp_directory=spill, views=views, settings=limits, files=snap.duckdb_files(),
                      also_allowed=snap.originals)
        check_read_only(sql, con)  # before anything runs; parsed by this connection (no second database)
        try:
            fetch(con, sql)
        except (engine.BinderException, engine.CatalogException) as exc:
            from synthtrace.warehouse.query_errors import explain

            if (said := explain(con, exc, views, wh.root)) is None:
                raise
            raise QueryError(f"query failed: {said}") from None
    except engine.PermissionException as exc:
        raise ReadOnlyQueryError(f"refused: synthtrace sql reads only the warehouse views "
                                 f"({snap.named(str(exc).splitlines()[0])})") from None
    except engine.OutOfMemoryException as exc:
        raise QueryError(f"query needs more than its memory or temporary-disk limit (see --memory-limit, "
                         f"--temp-limit): {str(exc).splitlines()[0]}") from None
    except engine.Error as exc:
        raise QueryError(f"query failed: {snap.named(str(exc).splitlines()[0])}") from None
    finally:
        if con is not None:
            con.close()
