"""Long lines in a ``.prv`` body and odd side files (issue 23, attack 14 F6, F13 and a tiny item).

A body line longer than :data:`~synthtrace.tracelib.formats.paraver.reader.MAX_RECORD_BYTES` is refused in one line
naming the file and line, with nothing stored and the memory bounded, alike on the plain and the gzip path; a run
of ``\\r`` is part of its line (only ``\\n`` ends one) while CRLF traces still read. The long-line cases lower the cap
(monkeypatch) so that they stay small; one case sits just over the real cap (1 MiB)."""
from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import synthtrace.tracelib.formats.paraver.reader as reader
from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.paraver.companion_text import MAX_COMPANION_BYTES
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
from testing.traces import PRIME, copy_trace

pytestmark = pytest.mark.real_traces

CAP = 64 << 10  # the cap the tests lower MAX_RECORD_BYTES to


def _rewritten(prv: Path, data: bytes, compress: bool) -> Path:
    """``prv`` rewritten to hold ``data``; gzip-compressed in its place (``.prv.gz``) with ``compress``."""
    if not compress:
        prv.write_bytes(data)
        return prv
    prv.unlink()
    gz = prv.with_name(prv.name + ".gz")
    gz.write_bytes(gzip.compress(data, compresslevel=1))
    return gz


def _with_line(dest: Path, line: bytes, compress: bool = False) -> tuple[Path, int]:
    """A copy of PRIME with ``line`` (its newline included) inserted after the first record line, and that line's
    1-based number; gzip-compressed (``.prv.gz``) with ``compress``."""
    prv = copy_trace(PRIME, dest)
    lines = prv.read_bytes().splitlines(keepends=True)
    at = next(i for i, text in enumerate(lines) if text[:2] in (b"1:", b"2:")) + 1
    lines.insert(at, line)
    data = b"".join(lines)
    prv = _rewritten(prv, data, compress)
    return prv, at + 1


def _counters(n_bytes: int) -> bytes:
    """An event record of one thread holding ``:42000050:1`` pairs up to at least ``n_bytes``, with its newline."""
    head = b"2:1:1:1:1:950067"
    return head + b":42000050:1" * (n_bytes // 11 + 1) + b"\n"


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(reader, "MAX_RECORD_BYTES", CAP, raising=False)


@pytest.mark.parametrize("compress", [False, True], ids=["prv", "prv.gz"])
@pytest.mark.parametrize("kind", ["counters", "cr"])
def test_a_body_line_beyond_the_cap_is_refused_in_one_line(tmp_path, run_cli, small_cap, kind, compress):
    """Attack 14 F6: one long line took unbounded memory (a 2 GB line 17.7 GB of RAM; a 100 MB one 2.0 GB, and
    was ingested; 2 GB of ``\\r`` 4.4 GB, ingested as sound, while the same inside a .prv.gz asked for 144 GiB).
    Now a line over the cap, a record or a run of ``\\r``, is one error naming the file and the line, exit 2,
    nothing stored; the plain and the gzip path say the same."""
    line = _counters(2 * CAP) if kind == "counters" else b"\r" * (2 * CAP) + b"\n"
    prv, lineno = _with_line(tmp_path / "t", line, compress)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{prv}:{lineno}: record longer than {CAP:,} bytes" in err, err
    assert not wh.exists()


@pytest.mark.parametrize("compress", [False, True], ids=["prv", "prv.gz"])
@pytest.mark.parametrize("kind", ["comment", "cr"])
def test_a_long_line_before_the_first_record_is_refused_as_after_it(tmp_path, small_cap, kind, compress):
    """The comments and blank lines between the header and the first record are held to the same cap (they were
    taken up to the header's 64 MiB, a run of ``\\r`` as blank lines): the same line is refused before the first
    record as after it."""
    prv = copy_trace(PRIME, tmp_path / "t")
    lines = prv.read_bytes().splitlines(keepends=True)
    lines.insert(1, b"#" + b"x" * (2 * CAP) + b"\n" if kind == "comment" else b"\n" + b"\r" * (2 * CAP) + b"\n")
    data = b"".join(lines)
    prv = _rewritten(prv, data, compress)
    with pytest.raises(TraceFormatError) as caught:
        ParaverTrace(prv).read_tables("r")
    assert caught.value.line == (2 if kind == "comment" else 3), caught.value
    assert f"record longer than {CAP:,} bytes" in caught.value.reason


@pytest.mark.parametrize("end", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_a_line_of_exactly_the_cap_is_read_and_one_byte_more_is_refused(tmp_path, end):
    """The real cap, 1 MiB: a record line (trailing blanks, which Paraver skips, make up its length) of exactly
    MAX_RECORD_BYTES bytes before its line end is read; one byte more is refused at its line. In a CRLF trace the
    ``\r`` of the line end is not the record's (attack 16: it counted, and a CRLF record of exactly 1 MiB was
    refused)."""
    def crlf(prv: Path) -> Path:
        if end == b"\r\n":
            prv.write_bytes(prv.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
        return prv

    record = _counters(1000)[:-1]
    exact = record + b" " * (reader.MAX_RECORD_BYTES - len(record)) + b"\n"
    prv = crlf(_with_line(tmp_path / "a", exact)[0])
    base = ParaverTrace(crlf(copy_trace(PRIME, tmp_path / "base"))).read_tables("r")[2].events.height
    assert ParaverTrace(prv).read_tables("r")[2].events.height > base
    prv, lineno = _with_line(tmp_path / "b", exact[:-1] + b" \n")
    with pytest.raises(TraceFormatError) as caught:
        ParaverTrace(crlf(prv)).read_tables("r")
    assert caught.value.line == lineno and f"record longer than {reader.MAX_RECORD_BYTES:,} bytes" in str(caught.value)


@pytest.mark.parametrize("at", ["prefix", "body"])
def test_a_crlf_comment_of_exactly_the_cap_is_read(tmp_path, at):
    """A comment line of exactly MAX_RECORD_BYTES bytes before its ``\r\n`` is read before the first record (the
    prefix is read apart) and after it, as an LF one is."""
    comment = b"#" + b"x" * (reader.MAX_RECORD_BYTES - 1) + b"\r\n"
    prv = _with_line(tmp_path / "t", comment)[0] if at == "body" else copy_trace(PRIME, tmp_path / "p")
    if at == "prefix":
        lines = prv.read_bytes().splitlines(keepends=True)
        prv.write_bytes(b"".join([lines[0], comment, *lines[1:]]))
    assert ParaverTrace(prv).read_tables("r")[0].height == ParaverTrace(PRIME).read_tables("r")[0].height


@pytest.mark.parametrize("compress", [False, True], ids=["prv", "prv.gz"])
def test_a_trace_whose_lines_end_with_cr_only_says_so(tmp_path, run_cli, compress):
    """Attack 16: a ``.prv`` whose lines end with CR only (an old Mac's text) was refused as "broken Paraver header:
    1 applications declared but 54018 described" (its whole text one header line); now the line says why."""
    prv = copy_trace(PRIME, tmp_path / "t")
    prv = _rewritten(prv, prv.read_bytes().replace(b"\n", b"\r"), compress)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{prv}:1: lines end with CR only" in err, err
    assert not wh.exists()


def test_a_long_line_is_refused_on_the_time_sorted_path_too(tmp_path, small_cap):
    """A trace whose records are out of time order is copied and sorted before it is read: a line over the cap
    is refused there too, at its line of the file, before anything is sorted."""
    prv = copy_trace(PRIME, tmp_path / "t")
    lines = prv.read_bytes().splitlines(keepends=True)
    records = [i for i, text in enumerate(lines) if text[:2] in (b"1:", b"2:")]
    lines[records[0]], lines[records[-1]] = lines[records[-1]], lines[records[0]]  # the last record first
    lines.insert(records[-1] + 1, _counters(2 * CAP))
    prv.write_bytes(b"".join(lines))
    with pytest.raises(TraceFormatError) as caught:
        ParaverTrace(prv).read_tables("r")
    assert caught.value.line == records[-1] + 2 and "record longer than" in caught.value.reason


_READ_PEAK = """
import sys, warnings
from pathlib import Path
from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.paraver.reader import ParaverTrace
warnings.simplefilter("ignore")
try:
    ParaverTrace(Path(sys.argv[1])).read_tables("r")
    outcome = "read"
except TraceFormatError as exc:
    outcome = str(exc)
# this process's own peak (VmHWM), not the spawning xdist worker's that ru_maxrss carries over at exec
print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) >> 10)
print(outcome)
"""


def test_a_long_record_line_is_refused_in_bounded_memory(tmp_path):
    """Attack 14 F6 at the real cap: a 64 MiB record line (the old reader took ~20 times a line's bytes: 2.0 GB for
    100 MB) is refused with its line while the reading process stays within a few hundred MiB."""
    prv, lineno = _with_line(tmp_path / "t", _counters(64 << 20))
    proc = subprocess.run([sys.executable, "-c", _READ_PEAK, str(prv)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    peak_mib, outcome = proc.stdout.splitlines()[-2:]
    assert f":{lineno}: record longer than" in outcome, outcome
    assert int(peak_mib) < 600, f"reading a trace with a 64 MiB line took {peak_mib} MiB"


class _Trickle(io.RawIOBase):
    """``data`` given at most ``piece`` bytes per read (as a pipe or a decompressor may), counting what was read."""

    def __init__(self, data: bytes, piece: int):
        self._data, self._piece, self.taken = data, piece, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self._piece, len(self._data) - self.taken)
        b[:n] = self._data[self.taken: self.taken + n]
        self.taken += n
        return n


def test_the_read_buffer_stays_bounded_and_blocks_do_not_depend_on_read_sizes(small_cap):
    """The buffer never holds more than a block and the cap: a 4 MiB line stops the read within
    ``chunk_bytes + cap`` bytes of its start (the old buffer doubled to hold the whole line). Blocks are of about
    ``chunk_bytes`` whatever each read gives, so a trickling stream (gzip, a pipe) is cut as a file is."""
    records = b"".join(b"1:1:1:1:1:%d:%d:1\n" % (i, i + 5) for i in range(20_000))
    chunk = 1 << 16

    def blocks(data: bytes, piece: int) -> tuple[list[bytes], _Trickle, Exception | None]:
        fh = _Trickle(data, piece)
        got: list[bytes] = []
        try:
            for block, _ in reader._line_blocks(fh, chunk, None):
                got.append(bytes(block))
        except Exception as exc:  # the long line's refusal
            return got, fh, exc
        return got, fh, None

    whole, _, _ = blocks(records, 1 << 30)
    trickled, _, _ = blocks(records, 1000)
    assert trickled == whole and b"".join(whole) == records
    got, fh, exc = blocks(records + b"x" * (4 << 20) + b"\n" + records, 1000)
    assert exc is not None and "record longer than" in str(exc)
    assert b"".join(got) == records and fh.taken <= len(records) + chunk + CAP + 1000


@pytest.mark.parametrize("compress", [False, True], ids=["prv", "prv.gz"])
def test_a_crlf_trace_reads_as_its_lf_copy(tmp_path, compress):
    """Traces written on Windows end their lines with ``\\r\\n``: read as the same trace with ``\\n``."""
    prv = copy_trace(PRIME, tmp_path)
    data = prv.read_bytes().replace(b"\n", b"\r\n")
    prv = _rewritten(prv, data, compress)
    crlf = ParaverTrace(prv, chunk_bytes=4096).read_tables("r")
    lf = ParaverTrace(PRIME).read_tables("r")
    assert crlf[0].equals(lf[0]) and crlf[1].equals(lf[1]) and crlf[2].warnings == ()
    assert crlf[2].events.sort(crlf[2].events.columns).equals(lf[2].events.sort(lf[2].events.columns))


# ------------------------------------------------------------------------------ F13 and the tiny item: side files
def test_a_row_beyond_the_cap_is_not_read_and_the_trace_is_ingested(tmp_path, run_cli):
    """Attack 14 F13: a sound trace whose .row was over 32 MiB was refused ("... not read", exit 2) and the night
    quarantined it. As for a .pcf, it is now not read, said in one warning naming the file, and the trace is
    ingested with default names; ingesting it again finds the same run (its content id holds the .row's bytes)."""
    prv = copy_trace(PRIME, tmp_path / "t")
    os.truncate(prv.with_suffix(".row"), MAX_COMPANION_BYTES + 1)
    wh = tmp_path / "wh"
    code, out, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0, err
    said = [line for line in err.splitlines() if str(prv.with_suffix(".row")) in line]
    assert len(said) == 1 and "not read" in said[0] and "larger than 32 MiB" in said[0], err
    code, out, _ = run_cli("sql", "select count(*) as n from bursts", "-w", wh)
    assert code == 0 and " 0 " not in out
    code, again, err = run_cli("ingest", prv, "-w", wh)
    assert code == 0 and "already" in (again + err).lower(), again + err


def test_read_row_beyond_the_cap_is_not_read_as_the_reader_does_not_read_it(tmp_path):
    """Session 15's note: `read_row` (public) still refused a .row over 32 MiB (TraceFormatError) while the trace
    reader reads the trace without it. One rule: no names, and the reader's words for why."""
    from synthtrace.tracelib.formats.paraver import read_row

    prv = copy_trace(PRIME, tmp_path / "t")
    row = prv.with_suffix(".row")
    os.truncate(row, MAX_COMPANION_BYTES + 1)
    with pytest.warns(UserWarning) as said:
        names = read_row(row)
    assert names.levels == {} and names.names("CPU") == []
    (line,) = [str(w.message) for w in said]
    assert line.startswith(f"{row}: larger than 32 MiB") and line.endswith("not read"), line
    with pytest.warns(UserWarning):
        read = ParaverTrace(prv)
    assert read.row.levels == {} and [w for w in read.warnings if w.startswith(line + ",")], read.warnings


@pytest.mark.parametrize("suffix", [".pcf", ".row"])
def test_a_side_file_that_is_a_fifo_is_said_to_be_no_regular_file(tmp_path, run_cli, suffix):
    """Attack 14, tiny item: a .pcf that is a FIFO (or a device) was reported as "no .pcf file beside the trace".
    It is said for what it is, never opened (a FIFO blocks), and the trace is ingested."""
    prv = copy_trace(PRIME, tmp_path / "t")
    side = prv.with_suffix(suffix)
    side.unlink()
    os.mkfifo(side)
    code, out, err = run_cli("ingest", prv, "-w", tmp_path / "wh")
    assert code == 0, err
    said = [line for line in err.splitlines() if str(side) in line]
    assert len(said) == 1 and "not a regular file" in said[0], err
