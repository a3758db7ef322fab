"""Read-only SQL over the warehouse (DESIGN §11): what reaches DuckDB, what it may touch, and for how long.

Three walls, each enough on its own for what it guards:

1. DuckDB's own parser splits the text into statements; each must be a ``SELECT`` (``FROM``, ``WITH``,
   ``VALUES``, ``DESCRIBE``, ``SUMMARIZE``, ``SHOW`` parse as one) or an ``EXPLAIN`` without ``ANALYZE`` (which
   plans, never runs). ``COPY``, ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``, ``PRAGMA``, ``CALL``, DDL and DML
   are refused before anything runs.
2. The connection (:func:`synthtrace.warehouse.catalog.connect`) reads the warehouse's Parquet files that
   existed when it opened and no other file; external access is off and its configuration locked.
3. A timer interrupts a query that runs longer than its time limit (DuckDB has no statement timeout).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from synthtrace.tracelib.errors import BadInputError
from synthtrace.warehouse import engine
from synthtrace.warehouse.catalog import VIEW_FILES, connect
from synthtrace.warehouse.errors import QueryError, ReadOnlyQueryError
from synthtrace.warehouse.layout import Warehouse

if TYPE_CHECKING:  # pyarrow costs ~0.3 s to import: `synthtrace sql` prints its rows without it
    import pyarrow as pa

T = TypeVar("T")

ALLOWED = {engine.StatementType.SELECT, engine.StatementType.EXPLAIN}
#: EXPLAIN options that execute the statement they explain
_EXECUTING = {"analyze", "analyse"}
DEFAULT_TIMEOUT_S = 300.0
#: the byte that tells the Ctrl-C watcher its query has ended (no signal has this number)
_DONE = 255
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


def query(wh: Warehouse, sql: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> pa.Table:
    """Run a read-only query against the warehouse views; returns an Arrow table.

    ``timeout_s``: wall-clock limit in seconds (None: none). A file of the warehouse replaced by a concurrent
    writer between opening and reading (a night re-merging an experiment) is retried once on a fresh listing.
    """
    engine.relation_api()  # con.sql and Arrow results; pyarrow is imported anyway
    return _answer(wh, sql, timeout_s, lambda con, text: con.sql(text).to_arrow_table())


def query_rows(wh: Warehouse, sql: str, *, timeout_s: float | None = DEFAULT_TIMEOUT_S
               ) -> tuple[list[str], list[tuple[Any, ...]]]:
    """:func:`query` as (column names, rows of Python values), without importing pyarrow (the CLI's table and JSON
    output), from the engine alone (:mod:`~synthtrace.warehouse.engine`)."""
    return _answer(wh, sql, timeout_s, _fetch_rows)


def _fetch_rows(con: engine.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    con.execute(sql)
    return [d[0] for d in con.description or ()], con.fetchall()


def _answer(wh: Warehouse, sql: str, timeout_s: float | None,
            fetch: Callable[[engine.DuckDBPyConnection, str], T]) -> T:
    """Check ``sql``, run it on a sealed connection within ``timeout_s`` seconds and ``fetch`` its result."""
    wh = wh.existing()
    spill = Path(tempfile.gettempdir()) / f"synthtrace-sql-{uuid.uuid4().hex}"  # DuckDB creates it only to spill
    try:
        try:
            return _run(wh, sql, timeout_s, spill, fetch)
        except engine.IOException:
            return _run(wh, sql, timeout_s, spill, fetch)
    except engine.InterruptException:
        raise QueryError(f"query stopped after {timeout_s:g} s (its time limit; see --timeout)") from None
    except engine.PermissionException as exc:
        raise ReadOnlyQueryError(f"refused: synthtrace sql reads only the warehouse views "
                                 f"({str(exc).splitlines()[0]})") from None
    except engine.Error as exc:
        raise QueryError(f"query failed: {str(exc).splitlines()[0]}") from None
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _run(wh: Warehouse, sql: str, timeout_s: float | None, spill: Path,
         fetch: Callable[[engine.DuckDBPyConnection, str], T]) -> T:
    views = views_named(sql)
    con = connect(wh, temp_directory=spill, views=views)
    timer = threading.Timer(timeout_s, con.interrupt) if timeout_s else None
    try:
        check_read_only(sql, con)  # before anything runs; parsed by this connection (no second database)
        if timer:
            timer.start()
        with _interrupted_by_ctrl_c(con):
            try:
                return fetch(con, sql)
            except (engine.BinderException, engine.CatalogException) as exc:
                from synthtrace.warehouse.query_errors import explain

                if (said := explain(con, exc, views)) is None:
                    raise
                raise QueryError(f"query failed: {said}") from None
    finally:
        if timer:
            timer.cancel()
        con.close()


@contextlib.contextmanager
def _interrupted_by_ctrl_c(con: engine.DuckDBPyConnection) -> Iterator[None]:
    """Let Ctrl-C stop a running query. Python runs its SIGINT handler in the main thread between bytecodes, never
    while DuckDB computes there; but the C-level handler writes the signal to the wakeup fd at once, and a watcher
    thread reading it interrupts DuckDB. The KeyboardInterrupt then goes on as usual. Outside the main thread
    (where no wakeup fd can be set) the query runs as it is."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        os.close(read_fd)
        os.close(write_fd)
        yield
        return

    pressed = threading.Event()

    def watch() -> None:
        while (got := os.read(read_fd, 64)) and signal.SIGINT not in got and _DONE not in got:
            pass
        if got and signal.SIGINT in got:
            pressed.set()
            con.interrupt()

    watcher = threading.Thread(target=watch, name="synthtrace-sql-ctrl-c", daemon=True)
    watcher.start()
    stopped = False

    def stop_watcher() -> None:
        """Tell the watcher the query ended and wait for it: every byte the signal handler wrote before (a
        SIGINT) is read first, so ``pressed`` is then final."""
        nonlocal stopped
        if not stopped:
            stopped = True
            signal.set_wakeup_fd(previous)
            os.write(write_fd, bytes([_DONE]))
            watcher.join()

    try:
        yield
    except Exception:
        # DuckDB may take the pending KeyboardInterrupt itself (its "Query interrupted" RuntimeError) before the
        # watcher thread, on a loaded machine, has even read the SIGINT: wait for the watcher before deciding
        stop_watcher()
        if pressed.is_set():
            raise KeyboardInterrupt from None
        raise
    finally:
        stop_watcher()
        os.close(read_fd)
        os.close(write_fd)
