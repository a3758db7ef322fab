"""Chunked parsing of ``.prv`` record lines into arrays and small Polars frames.

A chunk of whole lines goes through the Numba tokenizer (:mod:`synthtrace.tracelib.formats.paraver.tokenizer`) in one
pass: it
checks every line and keeps Running intervals, counter samples, the other events and communication records.
The first bad line of the file stops the read with a :class:`~synthtrace.tracelib.errors.TraceFormatError` naming the
line
and the reason. Times are converted to ns with the header's time scale.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.bursts import IntervalArrays, SampleArrays
from synthtrace.tracelib.errors import RecordsOutOfOrderError, TraceFormatError
from synthtrace.tracelib.formats.paraver import tokenizer as tk
from synthtrace.tracelib.formats.paraver.event_types import CALLER_LINE_TYPE, CALLER_TYPE, COLLECTIVE_INFO_TYPES  # noqa: F401 - their home for the simulator
from synthtrace.tracelib.formats.paraver.header import ParaverHeader

STATE_RUNNING = 1

_THREAD = ["appl", "task", "thread"]
_RECORD_NAMES = {1: ("a state record", 8), 2: ("an event record", 8), 3: ("a communication record", 15)}
_COMM_FIELDS = ("cpu", "appl", "task", "thread", "logical_ns", "physical_ns")
COMM_SCHEMA = {
    **{f"{side}{n}": (pl.Int64 if n.endswith("_ns") else pl.Int32) for side in ("s_", "r_") for n in _COMM_FIELDS},
    "size": pl.Int64,
    "tag": pl.Int64,
    "line": pl.Int64,
}


@dataclass
class EventArrays:
    """Non-counter events in file order: thread id and cpu (int32), time (int64 ns), type, value and 1-based line
    (int64)."""

    thread: np.ndarray
    cpu: np.ndarray
    time_ns: np.ndarray
    type: np.ndarray
    value: np.ndarray
    line: np.ndarray

    @classmethod
    def empty(cls) -> EventArrays:
        i32, i64 = np.empty(0, np.int32), np.empty(0, np.int64)
        return cls(i32, i32, i64, i64, i64, i64)


@dataclass
class ParsedChunk:
    """Records of one chunk. Thread ids index :attr:`RecordParser.threads`; counter codes are the tokenizer's
    slots (:attr:`RecordParser.counter_types`)."""

    running: IntervalArrays  # Running intervals (ns)
    samples: SampleArrays  # counter samples, counter = slot; absolute counters already as deltas
    events: EventArrays  # every event that is not a counter: MPI calls, collective sizes, callers, the rest
    comms: pl.DataFrame  # COMM_SCHEMA
    n_records: dict[int, int] = field(default_factory=dict)  # per record type; 0: records beyond the header's end
    #: lines dropped as a line written twice: per record type (1 state, 2 event, 3 communication), and their counter
    #: samples ("samples") and other events ("events")
    repeated: dict[int | str, int] = field(default_factory=dict)
    n_lines: int = 0


def _field_text(line: bytes, k: int) -> str:
    """Field ``k`` (1-based) of a record line, as shown in messages (at most 20 characters)."""
    parts = line.split(b":")
    f = parts[k - 1] if 1 <= k <= len(parts) else b""
    return f.decode("utf-8", "replace")[:20]


def error_reason(code: int, line: bytes, k: int, prev_ns: int, header: ParaverHeader) -> str:
    """The one-line reason for a tokenizer error ``code`` on ``line`` (without its line end)."""
    fields = line.split(b":")

    def num(i: int) -> int:  # 0-based field as an integer (the tokenizer checked it is digits)
        return int(fields[i])

    rtype = int(fields[0]) if fields[0] in (b"1", b"2", b"3", b"4") else 0
    scale = header.time_scale
    if code == tk.E_RECORD_TYPE:
        return f"unknown record type {_field_text(line, 1)!r} (expected 1, 2, 3 or 4)"
    if code == tk.E_FIELD_EMPTY:
        return f"field {k} is empty"
    if code == tk.E_NOT_DIGIT:
        return f"field {k} {_field_text(line, k)!r} is not a non-negative integer"
    if code == tk.E_NOT_64BIT:
        return f"field {k} does not fit in 64 bits"
    if code in (tk.E_SHORT, tk.E_LONG):
        what, n = _RECORD_NAMES[rtype]
        return (f"record too short: {k} fields, {what} needs {n}" if code == tk.E_SHORT
                else f"record too long: {k} fields, {what} has {n}")
    if code == tk.E_ODD:
        return "event record with a type and no value (odd number of fields)"
    if code == tk.E_STATE_BACK:
        return "state record ends before it begins"
    base = 6 * (k - 1)
    if code == tk.E_CPU:
        return f"cpu {num(base + 1)} outside the header's resource model ({header.n_cpus} cpus)"
    if code == tk.E_CPU_INT32:
        return f"cpu {num(base + 1)} does not fit in a 32-bit integer"
    if code == tk.E_THREAD:
        return (f"appl {num(base + 2)} task {num(base + 3)} thread {num(base + 4)} "
                "outside the header's resource model")
    if code == tk.E_NOT_INT64:
        what = "time" if (k in (6, 7, 12, 13) if rtype == 3 else (k == 6 or (rtype == 1 and k == 7))) else "value"
        return f"field {k} {what} {num(k - 1)} does not fit in a signed 64-bit integer" + (
            " of ns" if what == "time" else ""
        )
    if code == tk.E_ORDER:
        return (f"record out of time order: {num(5) * scale} ns after {prev_ns} ns on "
                f"appl {num(2)} task {num(3)} thread {num(4)}")
    if code == tk.E_STATE_OVERLAP:
        return (f"state record of appl {num(2)} task {num(3)} thread {num(4)} begins at {num(5) * scale} ns, before "
                f"the thread's previous state ends at {prev_ns} ns: a thread's states must not overlap")
    if code == tk.E_TOO_MANY_TYPES:
        return (f"counter type {_field_text(line, k)} is one too many: at most {tk.MAX_SLOTS} counter types "
                f"({tk.MAX_ABSOLUTE} absolute ones) per trace")
    return f"unparseable record (tokenizer code {code})"


class RecordParser:
    """Parses the body of one ``.prv`` file chunk by chunk, checking it against the header's resource model.

    ``parse(buf, first_line)`` takes whole lines and returns a :class:`ParsedChunk`; state carried between
    chunks (the last time of each thread, counter slots, absolute counter readings) makes the checks and the
    deltas span the whole file.
    """

    def __init__(self, header: ParaverHeader, path: str | Path):
        self.header = header
        self.path = str(path)
        tasks = [len(t) for t in header.threads_per_task]
        threads = [n for t in header.threads_per_task for n in t]
        self.threads: list[tuple[int, int, int]] = [
            (a + 1, t + 1, h + 1)
            for a, ts in enumerate(header.threads_per_task)
            for t, n in enumerate(ts)
            for h in range(n)
        ]
        scale = header.time_scale
        self.state = tk.TokenizerState(
            time_scale=scale, max_raw_time=header.duration_ns // scale, n_cpus=header.n_cpus,
            appl_first_task=np.concatenate([[0], np.cumsum(tasks)]).astype(np.int64),
            task_first_thread=np.concatenate([[0], np.cumsum(threads)]).astype(np.int64))
        ids = np.asarray(self.threads, dtype=np.int32).reshape(-1, 3)
        self._appl, self._task, self._thread = ids[:, 0].copy(), ids[:, 1].copy(), ids[:, 2].copy()
        self._ratios = (1 / 200, 1 / 20, 1 / 50, 1 / 1000)  # records kept per byte, for the first arrays' size

    @property
    def last_time(self) -> np.ndarray:
        """Last time (ns) seen per thread id, -1 for none (updated in place)."""
        return self.state.last_time

    @property
    def horizon(self) -> pl.DataFrame:
        """Last time (ns) seen per thread: appl, task, thread, time_ns (threads seen so far)."""
        seen = self.state.last_time >= 0
        return pl.DataFrame({"appl": self._appl[seen], "task": self._task[seen], "thread": self._thread[seen],
                             "time_ns": self.state.last_time[seen]},
                            schema={"appl": pl.Int32, "task": pl.Int32, "thread": pl.Int32, "time_ns": pl.Int64})

    @property
    def counter_types(self) -> np.ndarray:
        """Event type of each counter slot."""
        return self.state.slot_type[: self.state.n_slots]

    def thread_columns(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(appl, task, thread) int32 arrays of thread ids."""
        return self._appl[ids], self._task[ids], self._thread[ids]

    def parse(self, buf: bytes | bytearray | memoryview | np.ndarray, first_line: int) -> ParsedChunk:
        """Parse whole lines ``buf`` whose first line is line number ``first_line`` of the file."""
        arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
        if arr.size == 0:
            return ParsedChunk(IntervalArrays.empty(), SampleArrays.empty(), EventArrays.empty(),
                               pl.DataFrame(schema=COMM_SCHEMA))
        if arr[-1] != 10:
            raise ValueError("RecordParser.parse needs whole lines (the block must end with a newline)")
        n = arr.size
        cap = tuple(max(64, int(n * r * 1.2)) for r in self._ratios)
        t = tk.tokenize(arr, first_line, self.state, cap)
        if t.error[0]:
            raise self._error(arr, t.error)
        self._ratios = tuple(max(a.shape[0], 1) / n for a in (t.st_thread, t.cn_thread, t.ev_thread, t.comms))
        events = EventArrays(t.ev_thread, t.ev_cpu, t.ev_time, t.ev_type, t.ev_value, t.ev_line)
        comms = pl.DataFrame(t.comms, schema=list(COMM_SCHEMA), orient="row").cast(COMM_SCHEMA) if t.comms.shape[0] \
            else pl.DataFrame(schema=COMM_SCHEMA)
        counts = {k: int(t.n_records[k]) for k in range(5) if t.n_records[k]}
        repeated = {k: int(t.n_records[k + 4]) for k in (1, 2, 3)} | {"samples": int(t.n_records[8]),
                                                                       "events": int(t.n_records[9])}
        return ParsedChunk(running=IntervalArrays(t.st_thread, t.st_cpu, t.st_start, t.st_end),
                           samples=SampleArrays(t.cn_thread, t.cn_time, t.cn_slot, t.cn_value),
                           events=events, comms=comms, n_records=counts, n_lines=int(t.n_lines),
                           repeated={k: v for k, v in repeated.items() if v})

    def _error(self, arr: np.ndarray, err: np.ndarray) -> TraceFormatError:
        code, line, k, start, prev = (int(x) for x in err)
        end = start
        while arr[end] != 10:
            end += 1
        text = arr[start:end].tobytes()
        if text.endswith(b"\r"):
            text = text[:-1]
        kind = RecordsOutOfOrderError if code == tk.E_ORDER else TraceFormatError
        return kind(self.path, line, error_reason(code, text, k, prev, self.header))
