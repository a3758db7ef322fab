"""Reads a Paraver trace (``.prv`` + ``.pcf`` + ``.row``) into tidy burst and MPI-call tables.

The ``.prv`` file is streamed in chunks of whole lines (``chunk_bytes``), so memory stays bounded by the chunk
size and the per-thread tails the :class:`~tracelib.bursts.BurstAssembler` keeps, not by the trace size.
"""
from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl

from tracelib.bursts import (MPI_EVENT_SCHEMA, SAMPLE_SCHEMA, BurstAssembler, ReadSummary, RecordBatch,
                             attach_messages)
from tracelib.errors import MissingCompanionWarning, TraceFormatError, TruncatedTraceError
from tracelib.paraver.header import ParaverHeader, parse_header
from tracelib.paraver.pcf import PcfCatalog, is_absolute_counter, read_pcf
from tracelib.paraver.records import (CALLER_LINE_TYPE, CALLER_TYPE, COLLECTIVE_INFO_TYPES, MPI_EVENT_TYPES,
                                      ParsedChunk, RecordParser)
from tracelib.paraver.row import RowNames, read_row
from tracelib.schema import THREAD_KEYS

DEFAULT_CHUNK_BYTES = 32 * 1024 * 1024

MPI_KIND = {50_000_001: "point_to_point", 50_000_002: "collective", 50_000_003: "other",
            50_000_004: "other", 50_000_005: "other"}
#: Extrae's MPI call ids, used only when a trace comes without its ``.pcf``.
EXTRAE_MPI_CALLS = {
    1: "MPI_Send", 2: "MPI_Recv", 3: "MPI_Isend", 4: "MPI_Irecv", 5: "MPI_Wait", 6: "MPI_Waitall",
    7: "MPI_Bcast", 8: "MPI_Barrier", 9: "MPI_Reduce", 10: "MPI_Allreduce", 11: "MPI_Alltoall",
    12: "MPI_Alltoallv", 13: "MPI_Gather", 14: "MPI_Gatherv", 15: "MPI_Scatter", 16: "MPI_Scatterv",
    17: "MPI_Allgather", 18: "MPI_Allgatherv", 19: "MPI_Comm_rank", 20: "MPI_Comm_size", 31: "MPI_Init",
    32: "MPI_Finalize",
}
_CALLER_LINE = re.compile(r"^(?P<line>\d+) \((?P<file>[^,)]+)")


def content_hash(path: str | Path, block: int = 8 * 1024 * 1024) -> str:
    """SHA-256 of a file's bytes (hex): the identity of a run."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            h.update(chunk)
    return h.hexdigest()


def companion(prv: Path, suffix: str) -> Path:
    return prv.with_suffix(suffix)


class ParaverTrace:
    """One Paraver trace on disk: its header, names and resource labels, and a streaming table reader.

    >>> trace = ParaverTrace("lulesh.run0.prv")
    >>> for bursts, calls in trace.iter_tables(run_id="abc"): ...
    """

    def __init__(self, path: str | Path, *, salvage: bool = False, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.path = Path(path)
        self.salvage = salvage
        self.chunk_bytes = chunk_bytes
        self.warnings: list[str] = []
        if not self.path.is_file():
            raise TraceFormatError(self.path, None, "no such file")
        self.size = self.path.stat().st_size
        if self.size == 0:
            raise TraceFormatError(self.path, None, "empty file")
        with open(self.path, "rb") as fh:
            head = fh.read(4096)
        if b"\0" in head:
            raise TraceFormatError(self.path, 1, "binary file, not a Paraver text trace")
        first = head.split(b"\n", 1)[0]
        try:
            self.header: ParaverHeader = parse_header(first.decode("utf-8"), str(self.path))
        except UnicodeDecodeError:
            raise TraceFormatError(self.path, 1, "header is not text") from None
        self.pcf = self._companion(".pcf", read_pcf, PcfCatalog())
        self.row = self._companion(".row", read_row, RowNames())
        self._check_row()

    def _check_row(self) -> None:
        """The ``.row`` file must describe the same resources as the header."""
        h = self.header
        expected = {"CPU": h.n_cpus, "NODE": len(h.cpus_per_node), "THREAD": self.resources["n_threads"]}
        for level, n in expected.items():
            names = self.row.levels.get(level)
            if names is not None and n and len(names) != n:
                raise TraceFormatError(companion(self.path, ".row"), self.row.level_lines[level],
                                       f"LEVEL {level} lists {len(names)} names but the .prv header has {n}")

    def _companion(self, suffix: str, reader: Callable, default):
        path = companion(self.path, suffix)
        if not path.is_file():
            msg = f"{self.path}: no {suffix} file beside the trace" + (
                "; counters keep their numeric type as name" if suffix == ".pcf" else "")
            warnings.warn(msg, MissingCompanionWarning, stacklevel=3)
            self.warnings.append(msg)
            return default
        return reader(path)

    format = "paraver"

    @property
    def started_at(self):
        return self.header.started_at

    @property
    def resources(self) -> dict[str, int]:
        h = self.header
        return {"n_appl": h.n_appl, "n_tasks": sum(len(t) for t in h.threads_per_task),
                "n_threads": sum(sum(t) for t in h.threads_per_task),
                "n_nodes": len(h.cpus_per_node), "duration_ns": h.duration_ns}

    def content_files(self) -> list[Path]:
        """The .prv and, when present, the .pcf and .row (names change the tables, so they are identity too)."""
        return [self.path] + [p for p in (companion(self.path, ".pcf"), companion(self.path, ".row")) if p.is_file()]

    # ------------------------------------------------------------------ streaming
    def _chunks(self) -> Iterator[tuple[bytes, int]]:
        """Yield (whole lines, number of their first line) of the body after the header block."""
        with open(self.path, "rb") as fh:
            lineno = 1
            fh.readline()
            pending = b""
            # communicator definitions and comments directly after the header
            while True:
                pos = fh.tell()
                line = fh.readline()
                if line.startswith((b"c:", b"#")):
                    lineno += 1
                    continue
                fh.seek(pos)
                break
            first = lineno + 1
            while True:
                block = fh.read(self.chunk_bytes)
                if not block:
                    break
                buf = pending + block
                cut = buf.rfind(b"\n")
                if cut < 0:
                    pending = buf
                    continue
                body, pending = buf[: cut + 1], buf[cut + 1:]
                yield body, first
                first += body.count(b"\n")
            if pending:
                if not self.salvage:
                    raise TruncatedTraceError(self.path, first,
                        "trace cut off mid-record (no newline at the end of the last line); --salvage keeps the complete records")
                msg = f"{self.path}:{first}: dropped the incomplete last record (--salvage)"
                warnings.warn(msg, UserWarning, stacklevel=2)
                self.warnings.append(msg)

    def iter_tables(self, run_id: str, progress: Callable[[int], None] | None = None,
                    summary: ReadSummary | None = None) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
        """Yield (bursts, mpi_calls) parts in file order; ``progress`` gets bytes consumed.

        MPI calls carry collective sizes but not yet point-to-point bytes: those come from communication
        records that may appear later in the file; apply :func:`~tracelib.bursts.attach_messages` with
        ``summary.messages`` once the iteration is over.
        """
        summary = summary if summary is not None else ReadSummary()
        parser = RecordParser(self.header, self.path)
        assembler = BurstAssembler(run_id)
        converter = _EventConverter(self.pcf, self.path)
        messages = []
        for buf, first_line in self._chunks():
            chunk = parser.parse(buf, first_line)
            for k, v in chunk.n_records.items():
                summary.n_records[k] = summary.n_records.get(k, 0) + v
            batch = converter.convert(chunk)
            messages.append(batch.messages)
            bursts, calls = assembler.feed(batch, parser.horizon)
            summary.n_bursts += bursts.height
            summary.n_calls += calls.height
            if bursts.height or calls.height:
                yield bursts, calls
            if progress:
                progress(len(buf))
        bursts, calls = assembler.finish()
        summary.n_bursts += bursts.height
        summary.n_calls += calls.height
        if bursts.height or calls.height:
            yield bursts, calls
        summary.counters = list(assembler.counters)
        summary.messages = pl.concat(messages) if messages else summary.messages
        summary.last_time_ns = int(parser.horizon.get_column("time_ns").max() or 0)
        summary.warnings = self.warnings

    def read_tables(self, run_id: str = "") -> tuple[pl.DataFrame, pl.DataFrame, ReadSummary]:
        """The whole trace in memory: (bursts, mpi_calls, summary). For small traces and tests."""
        summary = ReadSummary()
        parts = list(self.iter_tables(run_id, summary=summary))
        bursts = pl.concat([b for b, _ in parts], how="diagonal_relaxed") if parts else pl.DataFrame()
        calls = pl.concat([c for _, c in parts], how="diagonal_relaxed") if parts else pl.DataFrame()
        if calls.height:
            calls = attach_messages(calls.lazy(), summary.messages).collect()
        sort = [*THREAD_KEYS]
        return (bursts.sort([*sort, "burst_seq"]) if bursts.height else bursts,
                calls.sort([*sort, "call_seq"]) if calls.height else calls, summary)


class _EventConverter:
    """Turns Paraver's numbered events into the generic samples / MPI events / messages frames."""

    def __init__(self, pcf: PcfCatalog, path: Path):
        self.pcf = pcf
        self.path = path
        self._names: dict[int, str] = {}
        self._last_absolute = pl.DataFrame(schema={**dict.fromkeys(THREAD_KEYS, pl.Int32), "type": pl.Int64, "value": pl.Int64})

    def _counter_names(self, types: list[int]) -> pl.DataFrame:
        for t in types:
            if t not in self._names:
                self._names[t] = self.pcf.counter_name(t)
        return pl.DataFrame({"type": types, "counter": [self._names[t] for t in types]},
                            schema={"type": pl.Int64, "counter": pl.String})

    def _call_names(self, pairs: pl.DataFrame) -> pl.DataFrame:
        """Names of MPI calls (type, value, first line); a value the ``.pcf`` does not list is an error."""
        rows = []
        for t, v, line in pairs.iter_rows():
            listed = self.pcf.event_values.get(t)
            if listed and v not in listed:
                raise TraceFormatError(self.path, line, f"MPI call id {v} of event type {t} is not listed in the .pcf")
            name = self.pcf.value_name(t, v) or (EXTRAE_MPI_CALLS.get(v) if not listed else None)
            rows.append((t, v, name or f"MPI_call_{v}"))
        return pl.DataFrame(rows, schema={"type": pl.Int64, "value": pl.Int64, "call": pl.String}, orient="row")

    def _call_site(self, func: int | None, line: int | None) -> str | None:
        if func is None:
            return None
        fname = self.pcf.value_name(CALLER_TYPE, func) or f"caller_{func}"
        fname = fname.split(" [", 1)[-1].rstrip("]") if " [" in fname else fname
        if not line:
            return fname
        lname = self.pcf.value_name(CALLER_LINE_TYPE, line)
        m = _CALLER_LINE.match(lname or "")
        if m and m["line"] == "0":  # unresolved: the function is all Extrae knows
            return fname
        return f"{fname} ({m['file']}:{m['line']})" if m else f"{fname} (line {line})"

    def convert(self, chunk: ParsedChunk) -> RecordBatch:
        ev = chunk.events
        is_counter = (pl.col("type") >= 42_000_000) & (pl.col("type") < 48_000_000)
        cnt = ev.filter(is_counter).with_columns(pl.col("value").cast(pl.Int64))
        types = cnt.get_column("type").unique().sort().to_list()
        absolute = [t for t in types if is_absolute_counter(t)]
        if absolute:
            cnt = self._absolute_to_delta(cnt, absolute)
        samples = cnt.join(self._counter_names(types), on="type").select(SAMPLE_SCHEMA.keys())

        mpi = ev.filter(pl.col("type").is_in(MPI_EVENT_TYPES)).with_columns(pl.col("value").cast(pl.Int64))
        entries = mpi.filter(pl.col("value") != 0)
        names = self._call_names(entries.group_by("type", "value").agg(pl.col("line").min()).sort("line"))
        mpi = mpi.join(names, on=["type", "value"], how="left").with_columns(
            pl.col("type").replace_strict(MPI_KIND, return_dtype=pl.String).alias("kind"))
        info = (ev.filter(pl.col("type").is_in([*COLLECTIVE_INFO_TYPES, CALLER_TYPE, CALLER_LINE_TYPE]))
                .with_columns(pl.col("value").cast(pl.Int64))
                .pivot(on="type", index=[*THREAD_KEYS, "time_ns"], values="value", aggregate_function="first"))
        rename = {str(COLLECTIVE_INFO_TYPES[0]): "bytes_sent", str(COLLECTIVE_INFO_TYPES[1]): "bytes_recv",
                  str(COLLECTIVE_INFO_TYPES[2]): "root", str(COLLECTIVE_INFO_TYPES[3]): "comm",
                  str(CALLER_TYPE): "_func", str(CALLER_LINE_TYPE): "_line"}
        info = info.rename({k: v for k, v in rename.items() if k in info.columns})
        for col in rename.values():
            if col not in info.columns:
                info = info.with_columns(pl.lit(None, pl.Int64).alias(col))
        sites = info.select("_func", "_line").unique().filter(pl.col("_func").is_not_null())
        site_map = pl.DataFrame(
            [(f, ln, self._call_site(f, ln)) for f, ln in sites.iter_rows()],
            schema={"_func": pl.Int64, "_line": pl.Int64, "call_site": pl.String}, orient="row")
        info = info.join(site_map, on=["_func", "_line"], how="left", nulls_equal=True)
        mpi = mpi.join(info, on=[*THREAD_KEYS, "time_ns"], how="left")
        on_entry = pl.col("call").is_not_null()
        mpi = mpi.with_columns(*[pl.when(on_entry).then(pl.col(c)).alias(c) for c in ("bytes_sent", "bytes_recv", "root", "comm", "call_site")])
        mpi = mpi.select([pl.col(k).cast(v) for k, v in MPI_EVENT_SCHEMA.items()])

        cm = chunk.comms
        messages = cm.select(
            pl.col("s_appl"), pl.col("s_task"), pl.col("s_thread"), pl.col("s_logical_ns").alias("s_time_ns"),
            pl.col("r_appl"), pl.col("r_task"), pl.col("r_thread"), pl.col("r_logical_ns").alias("r_time_ns"),
            "size", "tag")
        return RecordBatch(intervals=chunk.running.drop("line"), samples=samples, mpi=mpi, messages=messages)

    def _absolute_to_delta(self, cnt: pl.DataFrame, absolute: list[int]) -> pl.DataFrame:
        """Cumulative readings become deltas since the previous reading of the same thread and counter."""
        key = [*THREAD_KEYS, "type"]
        absr = cnt.filter(pl.col("type").is_in(absolute))
        seq = pl.concat([self._last_absolute.with_columns(pl.lit(-1, pl.Int64).alias("time_ns"), pl.lit(True).alias("_carry")),
                         absr.select(*key, "time_ns", "value").with_columns(pl.lit(False).alias("_carry"))], how="diagonal_relaxed")
        seq = seq.with_columns((pl.col("value") - pl.col("value").shift(1).over(key)).alias("_delta"))
        self._last_absolute = seq.group_by(key).agg(pl.col("value").last())
        deltas = seq.filter(~pl.col("_carry")).select(*key, "time_ns", pl.col("_delta").alias("value")).drop_nulls("value")
        rel = cnt.filter(~pl.col("type").is_in(absolute)).select(*key, "time_ns", "value")
        return pl.concat([rel, deltas])
