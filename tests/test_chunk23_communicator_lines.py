"""A communicator of a ``.prv`` header defined again with other members (attack 22, comms22's hostile ``c:``
lines): the real LULESH header with its ranks' communicator 14 written twice more, each time with other members.
Its members were the union of the three lines, without a word, and the merge maps communicators across runs by
their members. The first definition is kept and each other one said with its file and line; a line repeated as it
was is one definition, nothing said."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest

from synthtrace.tracelib.formats.paraver.reader import ParaverTrace

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "paraver"
LULESH = "lulesh_4+4_with_uncores_sockets1+2.chop_5it"  # + .prv, .pcf, .row

pytestmark = pytest.mark.skipif(not (TRACES / f"{LULESH}.prv").is_file(), reason="the real traces are not here")


def _with_lines(tmp_path: Path, extra: list[str]) -> Path:
    """A copy of the real LULESH trace whose header's communicator lines are followed by ``extra``."""
    for ext in (".pcf", ".row"):
        shutil.copy(TRACES / f"{LULESH}{ext}", tmp_path / f"t{ext}")
    lines = (TRACES / f"{LULESH}.prv").read_bytes().split(b"\n")
    last_c = max(i for i, line in enumerate(lines[:40]) if line.startswith(b"c:"))
    lines[last_c + 1:last_c + 1] = [e.encode() for e in extra]
    (tmp_path / "t.prv").write_bytes(b"\n".join(lines))
    return tmp_path / "t.prv"


def _read(prv: Path) -> tuple[dict[int, list[int]], list[str]]:
    """(comm -> its member tasks sorted, the warnings said) of the trace ``prv``."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        members = ParaverTrace(prv).communicators
    grouped = members.group_by("comm").agg(pl.col("task").sort())
    return (dict(zip(grouped.get_column("comm").to_list(), grouped.get_column("task").to_list())),
            [str(w.message) for w in said])


def test_a_communicator_defined_again_with_other_members_keeps_the_first_and_says_so(tmp_path):
    # the same members in another order are the same communicator to a merge (members, not ranks, are stored)
    prv = _with_lines(tmp_path, ["c:1:14:8:8:7:6:5:4:3:2:1", "c:1:14:2:1:2", "c:1:14:3:9:10:11"])
    sets, said = _read(prv)
    assert sets[14] == list(range(1, 9))  # the header's own line, first
    redefined = [s for s in said if "communicator 14" in s]
    assert len(redefined) == 1, said
    assert f"{prv}:17:" in redefined[0] and "first at line 15" in redefined[0] and "(2 lines" in redefined[0]


def test_a_line_repeated_as_it_was_is_one_definition_said_nowhere(tmp_path):
    sets, said = _read(_with_lines(tmp_path, ["c:1:14:8:1:2:3:4:5:6:7:8"]))
    assert sets[14] == list(range(1, 9)) and not [s for s in said if "communicator" in s]
