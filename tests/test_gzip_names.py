"""One rule for "is this gzip by its name": ``.gz`` in any case, for the traces read and the outputs written, whatever
the output's file type (attack 12, tiny items)."""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from synthtrace.tracelib.errors import BadInputError
from testing.fifo_reader import reading
from testing.traces import PRIME

pytestmark = pytest.mark.real_traces


@pytest.fixture
def gz_upper(tmp_path) -> Path:
    """PRIME gzip-compressed as ``prime_v0.prv.GZ``, its .pcf and .row beside it."""
    folder = tmp_path / "t"
    folder.mkdir()
    prv = folder / "prime_v0.prv.GZ"
    prv.write_bytes(gzip.compress(PRIME.read_bytes()))
    for suffix in (".pcf", ".row"):
        shutil.copy(PRIME.with_suffix(suffix), folder / f"prime_v0{suffix}")
    return prv


def test_a_trace_named_gz_in_any_case_is_read_as_gzip(gz_upper, tmp_path, run_cli):
    """``x.prv.GZ`` was no trace (``.prv.gz`` was matched case-sensitively); it is read as ``x.prv.gz`` is, with
    its .pcf (counters named) and the same content as the plain trace."""
    from synthtrace.tracelib.formats.source import trace_stem

    assert trace_stem(gz_upper) == "prime_v0"
    code, out, err = run_cli("ingest", gz_upper, "-w", tmp_path / "wh")
    assert code == 0 and "704 bursts" in out, err
    code, out, _ = run_cli("sql", "select column_name from (describe bursts)", "-w", tmp_path / "wh")
    assert code == 0 and "PAPI_TOT_INS" in out


def test_export_prv_refuses_a_gz_stem_in_any_case(tmp_path):
    """``--export-prv x.prv.GZ`` (a compression the writer does not make) is refused before the merge, as
    ``x.prv.gz`` is."""
    from synthtrace.pipelines.cli_merge import _export_files

    for name in ("x.prv.gz", "x.prv.GZ", "x.prv.Gz"):
        with pytest.raises(BadInputError, match="written uncompressed"):
            _export_files(tmp_path / name)


def _file_and_fifo(tmp_path: Path, run_cli, *command) -> tuple[bytes, bytes]:
    """The bytes ``synthtrace COMMAND -o X`` writes into a regular file ``ff.csv.gz`` and into a FIFO of that name
    (read by a thread while the command writes)."""
    (tmp_path / "file").mkdir()
    code, _, err = run_cli(*command, "-o", tmp_path / "file" / "ff.csv.gz")
    assert code == 0, err
    fifo = tmp_path / "ff.csv.gz"
    os.mkfifo(fifo)
    with reading(fifo) as got:  # open before the command runs: it refuses a FIFO that no process reads
        code, _, err = run_cli(*command, "-o", fifo)
    assert code == 0, err
    return (tmp_path / "file" / "ff.csv.gz").read_bytes(), bytes(got)


def test_a_fifo_named_gz_gets_gzip_as_a_file_of_that_name(gz_upper, tmp_path, run_cli):
    """A FIFO named ``ff.csv.gz`` got plain CSV where a regular ``ff.csv.gz`` gets gzip (``zcat ff.csv.gz`` failed):
    the same name gives the same bytes whatever the file type."""
    wh = tmp_path / "wh"
    assert run_cli("ingest", gz_upper, "-w", wh)[0] == 0
    in_file, in_fifo = _file_and_fifo(tmp_path, run_cli, "sql", "SELECT 42 AS answer", "-w", wh)
    assert in_fifo == in_file and gzip.decompress(in_fifo) == b'"answer"\n42\n'


def test_an_export_into_a_fifo_named_gz_gets_gzip_as_a_file_of_that_name(merged_lulesh, tmp_path, run_cli):
    """``export -o ff.csv.gz`` into a FIFO wrote plain CSV where a regular file of that name gets gzip, as ``sql``
    did (attack 12): the same bytes whatever the file type."""
    in_file, in_fifo = _file_and_fifo(tmp_path, run_cli, "export", "lulesh-8r", "--format", "csv", "-w", merged_lulesh)
    assert gzip.decompress(in_fifo) == gzip.decompress(in_file)
