"""A collective's sizes and root are judged as a point-to-point message's are (attack 25 A2, A3): a size no signed
64-bit column holds (OTF2's uint64 of 2^63 or more, one call's collectives summing past it, a negative Paraver
count) or a root that is no rank of its communicator is refused with one line naming the file, nothing stored."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from otf2.enums import CollectiveOp

from testing.otf2_variants import _Archive
from testing.traces import PRIME, copy_trace

pytestmark = pytest.mark.real_traces


def _collective_archive(root: Path, sizes: list[int], coll_root: int) -> Path:
    """2 ranks, each in one MPI_Barrier holding a Bcast record per size (bytes) rooted at ``coll_root``."""
    a = _Archive(root, ranks=2, threads=1)
    a.mpi("MPI_Barrier")
    for rank in range(2):
        e = a.events(rank)
        e.program_begin(0, "coll", [])
        e.enter(0, "main")
        e.enter(100, "MPI_Barrier", ins=5)
        for i, size in enumerate(sizes):
            e.mpi_collective_begin(110 + 20 * i)
            e.mpi_collective_end(120 + 20 * i, CollectiveOp.BCAST, a.world, coll_root, size, size)
        e.leave(200, "MPI_Barrier", ins=5)
        e.leave(300, "main")
        e.program_end(300, 0)
    return a.close()


def _refused(run_cli, trace: Path, wh: Path) -> str:
    code, out, err = run_cli("ingest", trace, "--experiment", "c", "--app", "c", "-w", wh)
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, out, err)
    assert not (wh / "runs").exists() or not any((wh / "runs").rglob("*.parquet")), "something was stored"
    return err


@pytest.mark.parametrize("sizes", [[2**63], [2**64 - 1], [2**62, 2**62]], ids=["2^63", "2^64-1", "sum_wraps"])
def test_an_otf2_collective_past_int64_is_refused(tmp_path, run_cli, sizes):
    """Stored as bytes_sent = INT64_MIN (2^63, and two of 2^62 in one call) or 0 (2^64 - 1), silently."""
    anchor = _collective_archive(tmp_path / "archive", sizes, 0)
    err = _refused(run_cli, anchor, tmp_path / "wh")
    assert "traces" in err and "a collective of" in err and "signed 64-bit" in err, err


def test_an_otf2_collective_rooted_outside_its_communicator_is_refused(tmp_path, run_cli):
    """A Bcast rooted at rank 12345 of a world of 2 kept root 12345, as a send to rank 99 is refused."""
    anchor = _collective_archive(tmp_path / "archive", [64], 12345)
    err = _refused(run_cli, anchor, tmp_path / "wh")
    assert "rank 12345" in err and "outside its 2 ranks" in err, err


def test_an_otf2_collective_within_bounds_is_read(tmp_path, run_cli):
    """The check refuses no sound collective: root 1 of 2, 2^62 bytes, kept as written."""
    anchor = _collective_archive(tmp_path / "archive", [2**62], 1)
    code, out, err = run_cli("ingest", anchor, "--experiment", "c", "--app", "c", "-w", tmp_path / "wh")
    assert code == 0, err
    code, out, err = run_cli("sql", "select root, bytes_sent from mpi_calls where root is not null", "--format",
                             "csv", "-w", tmp_path / "wh")
    assert code == 0 and f"1,{2**62}" in out, (out, err)


def _rewritten_prime(dest: Path, old: str, new: str) -> Path:
    """prime_v0 (real, 16 tasks) with every ``old`` field pair of its records rewritten to ``new``."""
    prv = copy_trace(PRIME, dest)
    text = prv.read_text()
    assert old in text
    prv.write_text(text.replace(old, new))
    return prv


@pytest.mark.parametrize("value", ["-5", "18446744073709551615"])
def test_a_paraver_collective_of_negative_size_is_refused(tmp_path, run_cli, value):
    """prime_v0's collective sizes (event 50100001) of -5 or 2^64 - 1 were stored as bytes_sent -5 / -1."""
    prv = _rewritten_prime(tmp_path / "t", ":50100001:4", f":50100001:{value}")
    err = _refused(run_cli, prv, tmp_path / "wh")
    assert re.search(r"prime_v0\.prv:\d+: a collective of -\d+ bytes", err), err
