"""Communicator members the header cannot hold (bench25 L1): ``c:1:77:3:1:5000:2`` in prime_v0 (16 tasks) was stored
without a word, while a member past 2**31 was skipped as "not of the form". Both are now one rule: a line naming a
task past all the header's tasks (or an application it does not declare) is skipped, said once with its file, its
line and what it names. A member past its own application's tasks but not past the trace's is kept: the real
LULESH traces list tasks 1..12 in the world communicator of an application of 8 tasks."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest

from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "paraver"

pytestmark = pytest.mark.skipif(not (TRACES / "prime_v0.prv").is_file(), reason="the real traces are not here")


def _with_lines(tmp_path: Path, name: str, extra: list[bytes]) -> tuple[Path, int]:
    """A copy of the real trace ``name`` whose header's communicator lines are followed by ``extra``, and the
    1-based number of the first line of ``extra``."""
    for ext in (".pcf", ".row"):
        shutil.copy(TRACES / f"{name}{ext}", tmp_path / f"t{ext}")
    lines = (TRACES / f"{name}.prv").read_bytes().split(b"\n")
    last_c = max(i for i, line in enumerate(lines[:40]) if line.startswith(b"c:"))
    lines[last_c + 1:last_c + 1] = extra
    (tmp_path / "t.prv").write_bytes(b"\n".join(lines))
    return tmp_path / "t.prv", last_c + 2


def _read(prv: Path) -> tuple[pl.DataFrame, list[str]]:
    """(the communicators' members, what was said about communicator lines) of the trace ``prv``."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        members = ParaverTrace(prv).communicators
    return members, [str(w.message) for w in said if "communicator" in str(w.message)]


IN_ALL = "(the header declares tasks 1 to 16 in all)"


@pytest.mark.parametrize(("line", "named"), [
    (b"c:1:77:3:1:5000:2", f"task 5000 {IN_ALL}"), (b"c:1:77:3:1:2:2147483648", f"task 2147483648 {IN_ALL}"),
    (b"c:1:77:2:17:1", f"task 17 {IN_ALL}"),
    (b"c:2:77:2:1:2", "application 2 (the header declares applications 1 to 1)")])
def test_a_member_the_header_lacks_is_skipped_and_said_with_its_line(tmp_path, line, named):
    prv, number = _with_lines(tmp_path, "prime_v0", [line])
    members, said = _read(prv)
    assert 77 not in members.get_column("comm").to_list()
    assert members.height == ParaverTrace(TRACES / "prime_v0.prv").communicators.height  # the others all kept
    assert said == [f"{prv}:{number}: communicator line skipped: it names {named}, so it could match no other run's "
                    "communicator"]


def test_members_past_their_application_but_within_the_trace_are_kept(tmp_path):
    """The real LULESH header (applications of 8 and 12 tasks): its world lists tasks 1..12 of application 1, kept
    as written, nothing said; a line naming task 21 (past the 20 tasks) and one naming 20 (the last): one skipped."""
    prv, number = _with_lines(tmp_path, "lulesh_4+4_with_uncores_sockets1+2.chop_5it",
                              [b"c:1:90:2:1:21", b"c:1:91:1:20"])
    members, said = _read(prv)
    world = members.filter(pl.col("comm") == 1).get_column("task").sort().to_list()
    assert world == list(range(1, 13)) and members.filter(pl.col("comm") == 91).get_column("task").to_list() == [20]
    assert len(said) == 1 and said[0].startswith(f"{prv}:{number}: ")
    assert "task 21 (the header declares tasks 1 to 20 in all)" in said[0]
