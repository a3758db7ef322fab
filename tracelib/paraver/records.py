"""Chunked, vectorised parsing of ``.prv`` record lines into tidy Polars frames.

A chunk of whole lines is parsed by Polars' CSV reader (``:`` as separator, unsigned 64-bit fields), then
checked column-wise. Only when a chunk fails the fast parse does a line-by-line scan run, to name the exact
line and reason. Times are converted to ns with the header's time scale.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from tracelib.errors import TraceFormatError
from tracelib.paraver.header import ParaverHeader
from tracelib.paraver.pcf import COUNTER_TYPE_MAX, COUNTER_TYPE_MIN

STATE_RUNNING = 1
MPI_EVENT_TYPES = (50_000_001, 50_000_002, 50_000_003, 50_000_004, 50_000_005)
COLLECTIVE_INFO_TYPES = (50_100_001, 50_100_002, 50_100_003, 50_100_004)
CALLER_TYPE, CALLER_LINE_TYPE = 70_000_001, 80_000_001
KEPT_EVENT_TYPES = (*MPI_EVENT_TYPES, *COLLECTIVE_INFO_TYPES, CALLER_TYPE, CALLER_LINE_TYPE)

_EXTRA_COLUMNS = re.compile(r"n_extra = (\d+)")
_THREAD = ["appl", "task", "thread"]
_MAX_FIELDS = 1 << 16


@dataclass
class ParsedChunk:
    """Records of one chunk. Frames keep the 1-based ``line`` of every row for error messages."""

    running: pl.DataFrame  # appl, task, thread, cpu, start_ns, end_ns, line
    events: pl.DataFrame  # appl, task, thread, cpu, time_ns, type, value, line (counters and MPI-related)
    comms: pl.DataFrame  # s_appl, s_task, s_thread, s_lsend, s_psend, r_..., size, tag
    n_records: dict[int, int] = field(default_factory=dict)


def _diagnose(lines: list[bytes], first_line: int, path: str, header: ParaverHeader) -> TraceFormatError:
    """Find the first line of a chunk that breaks the format, for a chunk the fast parser refused."""
    lengths = {b"1": (8, 8), b"3": (15, 15)}
    for i, raw in enumerate(lines):
        lineno = first_line + i
        line = raw.rstrip(b"\r")
        if not line:
            return TraceFormatError(path, lineno, "empty line")
        if line.startswith(b"#"):
            continue
        fields = line.split(b":")
        rtype = fields[0]
        if rtype not in (b"1", b"2", b"3", b"4"):
            shown = rtype.decode("utf-8", "replace")[:20]
            return TraceFormatError(path, lineno, f"unknown record type {shown!r} (expected 1, 2, 3 or 4)")
        for k, f in enumerate(fields):
            if not f:
                return TraceFormatError(path, lineno, f"field {k + 1} is empty")
            if not f.isdigit():
                shown = f.decode("utf-8", "replace")[:20]
                return TraceFormatError(path, lineno, f"field {k + 1} {shown!r} is not a non-negative integer")
            if len(f) > 20 or int(f) >= 2**64:
                return TraceFormatError(path, lineno, f"field {k + 1} does not fit in 64 bits")
        lo, hi = lengths.get(rtype, (8, None) if rtype == b"2" else (1, None))
        if len(fields) < lo:
            return TraceFormatError(path, lineno, f"record too short: {len(fields)} fields, type {rtype.decode()} needs {lo}")
        if hi is not None and len(fields) > hi:
            return TraceFormatError(path, lineno, f"record too long: {len(fields)} fields, type {rtype.decode()} has {hi}")
        if rtype == b"2" and (len(fields) - 6) % 2:
            return TraceFormatError(path, lineno, "event record with a type and no value (odd number of fields)")
    return TraceFormatError(path, first_line, "unparseable records in this chunk")


def _read_fields(buf: bytes, width: int) -> tuple[pl.DataFrame, int]:
    """Parse ``buf`` into columns c0..c{width-1}; widens to the longest line when a line has more fields."""
    while True:
        try:
            df = pl.read_csv(
                io.BytesIO(buf), has_header=False, separator=":", quote_char=None, comment_prefix="#",
                schema={f"c{i}": pl.UInt64 for i in range(width)}, missing_columns="insert",
            )
            return df, width
        except (pl.exceptions.SchemaError, pl.exceptions.ComputeError) as exc:
            text = str(exc)
            if not (_EXTRA_COLUMNS.search(text) or "more fields than defined" in text):
                raise
            longest = max(line.count(b":") for line in buf.split(b"\n")) + 1
            if longest <= width or longest > _MAX_FIELDS:
                raise
            width = longest


class RecordParser:
    """Parses the body of one ``.prv`` file chunk by chunk, checking it against the header's resource model.

    ``parse(buf, first_line)`` takes whole lines and returns a :class:`ParsedChunk`; state carried between
    chunks (the last time of each thread) makes the time-order check span the whole file.
    """

    def __init__(self, header: ParaverHeader, path: str | Path):
        self.header = header
        self.path = str(path)
        self._width = 16
        self._last_time = pl.DataFrame(schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "time_ns": pl.Int64})
        self._thread_count = {(a + 1) * (1 << 24) + t + 1: n
                              for a, tasks in enumerate(header.threads_per_task) for t, n in enumerate(tasks)}

    @property
    def horizon(self) -> pl.DataFrame:
        """Last time (ns) seen per thread: appl, task, thread, time_ns."""
        return self._last_time

    # ------------------------------------------------------------------ helpers
    # ------------------------------------------------------------------ main
    def parse(self, buf: bytes, first_line: int) -> ParsedChunk:
        """Parse whole lines ``buf`` whose first line is line number ``first_line`` of the file."""
        try:
            df, self._width = _read_fields(buf, self._width)
        except pl.exceptions.PolarsError:
            raise _diagnose(buf.split(b"\n")[:-1], first_line, self.path, self.header) from None
        if b"#" in buf:
            # Polars skips comment lines (blank lines stay as all-null rows): map rows to lines explicitly
            lines = buf.split(b"\n")[:-1]
            kept = [i for i, ln in enumerate(lines) if not ln.startswith(b"#")]
            line_no = pl.Series("line", np.asarray(kept, dtype=np.int64) + first_line)
        else:
            line_no = pl.int_range(first_line, first_line + df.height, dtype=pl.Int64, eager=True).alias("line")
        df = df.with_columns(line_no)
        has_empty = b"::" in buf or b":\n" in buf  # a line starting with ':' shows as a null record type
        return self._split(df, has_empty)

    def _checks(self, df: pl.DataFrame, has_empty: bool) -> list[tuple[pl.Expr, pl.Expr | str]]:
        """(condition that marks a bad row, reason) in the order they are reported."""
        width = self._width
        rtype, nf = pl.col("c0"), pl.col("_nf")
        scale, end_ns, n_cpus = self.header.time_scale, self.header.duration_ns, self.header.n_cpus
        checks: list[tuple[pl.Expr, pl.Expr | str]] = []
        if has_empty:
            last = pl.max_horizontal(*(pl.when(pl.col(f"c{i}").is_not_null()).then(pl.lit(i + 1)) for i in range(width)))
            checks.append((nf != last, pl.format("field {} is empty", nf + 1)))
        checks += [
            (nf == 0, "empty line"),
            (rtype.is_null(), "field 1 is empty"),
            (~rtype.is_in([1, 2, 3, 4]), pl.format("unknown record type {} (expected 1, 2, 3 or 4)", rtype)),
            ((rtype == 1) & (nf < 8), pl.format("record too short: {} fields, a state record needs 8", nf)),
            ((rtype == 1) & (nf > 8), pl.format("record too long: {} fields, a state record has 8", nf)),
            ((rtype == 2) & (nf < 8), pl.format("record too short: {} fields, an event record needs 8", nf)),
            ((rtype == 2) & ((nf - 6) % 2 == 1), "event record with a type and no value (odd number of fields)"),
            ((rtype == 3) & (nf < 15), pl.format("record too short: {} fields, a communication record needs 15", nf)),
            ((rtype == 3) & (nf > 15), pl.format("record too long: {} fields, a communication record has 15", nf)),
            ((rtype <= 2) & (pl.col("c5") * scale > end_ns),
             pl.format("time {} is beyond the trace end in the header ({} ns)", pl.col("c5") * scale, pl.lit(end_ns))),
            ((rtype == 1) & (pl.col("c6") * scale > end_ns),
             pl.format("state ends at {} ns, beyond the trace end in the header ({} ns)", pl.col("c6") * scale, pl.lit(end_ns))),
            ((rtype == 1) & (pl.col("c6") < pl.col("c5")), "state record ends before it begins"),
        ]
        sides = [("c1", "c2", "c3", "c4", rtype <= 3)] + ([("c7", "c8", "c9", "c10", rtype == 3)] if width > 10 else [])
        for cpu, appl, task, thread, applies in sides:
            if n_cpus:
                checks.append((applies & (pl.col(cpu) > n_cpus),
                               pl.format("cpu {} outside the header's resource model ({} cpus)", pl.col(cpu), pl.lit(n_cpus))))
            n_threads = (pl.col(appl) * (1 << 24) + pl.col(task)).replace_strict(
                self._thread_count, default=0, return_dtype=pl.UInt64)
            checks.append((applies & ((pl.col(thread) > n_threads) | (pl.col(thread) < 1)),
                           pl.format("appl {} task {} thread {} outside the header's resource model",
                                     pl.col(appl), pl.col(task), pl.col(thread))))
        return checks

    def _validate(self, df: pl.DataFrame, has_empty: bool) -> None:
        """One pass over the chunk in the common case; names the first bad line and its reason otherwise."""
        checks = self._checks(df, has_empty)
        flags = df.select(*(cond.fill_null(False).alias(f"_k{i}") for i, (cond, _) in enumerate(checks)), "line")
        bad = flags.filter(pl.any_horizontal(pl.exclude("line")))
        if bad.height == 0:
            return
        line = bad.item(0, "line")
        row = df.filter(pl.col("line") == line)
        for i, (cond, reason) in enumerate(checks):
            if bad.item(0, f"_k{i}"):
                text = reason if isinstance(reason, str) else row.select(reason.alias("r")).item(0, "r")
                raise TraceFormatError(self.path, int(line), text)

    def _split(self, df: pl.DataFrame, has_empty: bool) -> ParsedChunk:
        width = self._width
        df = df.with_columns(pl.sum_horizontal(*(pl.col(f"c{i}").is_not_null() for i in range(width))).alias("_nf"))
        self._validate(df, has_empty)
        counts = dict(df.group_by("c0").len().iter_rows())

        scale = self.header.time_scale
        keys = [pl.col("c2").cast(pl.Int32).alias("appl"), pl.col("c3").cast(pl.Int32).alias("task"),
                pl.col("c4").cast(pl.Int32).alias("thread"), pl.col("c1").cast(pl.Int32).alias("cpu")]
        rtype = pl.col("c0")
        timed = df.filter(rtype <= 2).select(*keys, (pl.col("c5") * scale).cast(pl.Int64).alias("time_ns"), "line",
                                             "c0", "c6", "c7", *[f"c{i}" for i in range(8, width)])
        self._check_order(timed)

        running = timed.filter((pl.col("c0") == 1) & (pl.col("c7") == STATE_RUNNING)).select(
            *_THREAD, "cpu", pl.col("time_ns").alias("start_ns"), (pl.col("c6") * scale).cast(pl.Int64).alias("end_ns"), "line")

        ev = timed.filter(pl.col("c0") == 2).lazy()
        pairs = [ev.select(*_THREAD, "cpu", "time_ns", pl.col(f"c{6 + 2 * k}").cast(pl.Int64).alias("type"),
                           pl.col(f"c{7 + 2 * k}").alias("value"), "line")
                 for k in range((width - 6) // 2)]
        typ = pl.col("type")
        keep = typ.is_in(KEPT_EVENT_TYPES) | ((typ >= COUNTER_TYPE_MIN) & (typ < COUNTER_TYPE_MAX))
        events = pl.concat(pairs).filter(keep).collect()
        comms = self._comms(df.filter(rtype == 3), scale)
        return ParsedChunk(running=running, events=events, comms=comms, n_records=counts)

    def _check_order(self, timed: pl.DataFrame) -> None:
        """Records of one thread must come in time order (Paraver sorts by time)."""
        if timed.height == 0:
            return
        t = timed.get_column("time_ns")
        newest = self._last_time.get_column("time_ns").max()
        if t.is_sorted() and (newest is None or t[0] >= newest):
            # globally sorted (the usual case) implies sorted per thread
            per = timed.group_by(_THREAD).agg(pl.col("time_ns").last())
            self._last_time = pl.concat([self._last_time.join(per, on=_THREAD, how="anti"), per])
            return
        seq = pl.concat([
            self._last_time.with_columns(pl.lit(0, pl.Int64).alias("line")),
            timed.select(*_THREAD, "time_ns", "line"),
        ])
        back = seq.with_columns(pl.col("time_ns").shift(1).over(_THREAD).alias("_prev")).filter(pl.col("time_ns") < pl.col("_prev"))
        if back.height:
            r = back.row(0, named=True)
            raise TraceFormatError(self.path, int(r["line"]),
                f"record out of time order: {r['time_ns']} ns after {r['_prev']} ns on appl {r['appl']} task {r['task']} thread {r['thread']}")
        self._last_time = seq.group_by(_THREAD).agg(pl.col("time_ns").max())

    def _comms(self, df: pl.DataFrame, scale: int) -> pl.DataFrame:
        def side(prefix: str, first: int) -> list[pl.Expr]:
            names = ("cpu", "appl", "task", "thread", "logical_ns", "physical_ns")
            out = []
            for i, n in enumerate(names):
                col = pl.col(f"c{first + i}")
                out.append((col * scale).cast(pl.Int64).alias(prefix + n) if n.endswith("_ns") else col.cast(pl.Int32).alias(prefix + n))
            return out

        comms = df.select(*side("s_", 1), *side("r_", 7), pl.col("c13").cast(pl.Int64).alias("size"),
                          pl.col("c14").cast(pl.Int64).alias("tag"), "line")
        return comms
