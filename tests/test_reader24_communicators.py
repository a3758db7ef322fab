"""A ``.prv`` header's communicator lines read column-wise (attack 23 F6): 64 MiB of empty communicator lines
(``c:1:<id>:0``, 4.7M of them, each a communicator of no members) held ~450 bytes per line (a dict entry, a numpy
array, two ints) and the cap counted members only: 2.5 GB, no word. Each line now counts toward the cap, and the
lines are parsed with numpy over the header's bytes, a few MiB at a time."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from synthtrace.tracelib.formats.paraver import communicators
from synthtrace.tracelib.formats.paraver.communicators import communicator_members
from synthtrace.tracelib.formats.paraver.header import parse_header
from testing.held import traced_peak

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "paraver"
HEAD = b"#Paraver (01/01/2020 at 00:00):1000_ns:1(4):1:4(1:1,1:1,1:1,1:1)\n"
TASKS = (4,)  # HEAD's
TWO_APPLICATIONS = b"#Paraver (01/01/2020 at 00:00):1000_ns:1(4):2:3(1:1,1:1,1:1),2(1:1,1:1)\n"  # (3, 2) tasks


def _reference(prefix: bytes, tasks: tuple[int, ...] = TASKS
               ) -> tuple[list[tuple[int, int, int]], list[int], list[int], list[int]]:
    """The rules of ``communicator_members`` read line by line: (its rows, the lines skipped, the lines defining a
    communicator again with other members, the lines naming an application the header lacks or a task past all
    its applications' tasks)."""
    rows: list[tuple[int, int, int]] = []
    skipped, redefined, undeclared, defined = [], [], [], {}
    for number, line in enumerate(prefix.split(b"\n"), start=1):
        if not line.startswith(b"c:"):
            continue
        fields = line[2:].rstrip().split(b":")
        if not all(f.isdigit() for f in fields) or len(fields) < 3 or any(
                len(f) > limit for f, limit in zip(fields, (10, 18, 10))):
            skipped.append(number)
            continue
        appl, comm, n, *members = map(int, fields)
        if n != len(members):
            skipped.append(number)
            continue
        if not 1 <= appl <= len(tasks) or not all(1 <= t <= sum(tasks) for t in members):
            undeclared.append(number)
            continue
        if (appl, comm) in defined:
            if set(defined[(appl, comm)]) != set(members):
                redefined.append(number)
            continue
        defined[(appl, comm)] = members
        rows += [(appl, comm, t) for t in dict.fromkeys(members)]
    return rows, skipped, redefined, undeclared


def _hostile_line(rng: random.Random) -> str:
    """A communicator line, well formed or not."""
    n = rng.randint(0, 4)
    if rng.random() < 0.5:
        return f"c:{rng.randint(1, 2)}:{rng.randint(1, 3)}:{n}" + "".join(f":{rng.randint(1, 4)}" for _ in range(n))
    odd = ["0", "1", "7", str(2**31 - 1), str(2**31), "9" * 11, "9" * 19, "", " ", "x", "-1", "01"]
    listed = n + rng.choice([0, 0, -1, 1])
    fields = [rng.choice(odd), rng.choice(odd), str(n)] + [rng.choice(odd) for _ in range(listed)]
    text = "c:" + ":".join(fields)
    return text + rng.choice(["", "", " ", "\r", " \t", ":", "::1", " x"])


@pytest.mark.parametrize("block_bytes", [1, 64, communicators.BLOCK_BYTES])
def test_random_communicator_lines_are_read_by_the_documented_rules(monkeypatch, block_bytes):
    """Whatever the lines, in blocks of any size: the members of each communicator's first valid line, the first
    skipped line and the first redefinition said with their counts."""
    monkeypatch.setattr(communicators, "BLOCK_BYTES", block_bytes)
    rng = random.Random(24)
    for _ in range(300):
        lines = [_hostile_line(rng) for _ in range(rng.randint(0, 12))]
        prefix = TWO_APPLICATIONS + "\n".join(lines).encode() + rng.choice([b"\n", b""])
        rows, skipped, redefined, undeclared = _reference(prefix, (3, 2))
        frame, said = communicator_members(prefix, "t.prv", (3, 2))
        assert frame.rows() == rows, prefix
        assert [s for s in said if "skipped: not" in s] == ([f"t.prv:{skipped[0]}: communicator line skipped: not "
                                                              "'c:APPL:ID:N' followed by N task numbers" +
                                                              (f" ({len(skipped)} lines skipped)" if len(skipped) > 1
                                                               else "")] if skipped else []), prefix
        outside = [s for s in said if "could match no other run's" in s]
        assert len(outside) == bool(undeclared) and (not undeclared or outside[0].startswith(
            f"t.prv:{undeclared[0]}: ") and outside[0].endswith(
            f" ({len(undeclared)} such lines skipped)" if len(undeclared) > 1 else "communicator")), prefix
        again = [s for s in said if "defined again" in s]
        assert len(again) == bool(redefined) and (not redefined or again[0].startswith(f"t.prv:{redefined[0]}:"))


@pytest.mark.skipif(not (TRACES / "prime_v0.prv").is_file(), reason="the real traces are not here")
@pytest.mark.parametrize("name", ["lulesh_4+4_with_uncores_sockets1+2.chop_5it",
                                  "lulesh_7+1_with_uncores_sockets1+2.chop8", "prime_v0"])
def test_the_real_traces_communicators_are_read_as_their_lines_say(name):
    with (TRACES / f"{name}.prv").open("rb") as fh:
        prefix = b"".join(line for _, line in zip(range(200), fh))
    tasks = tuple(map(len, parse_header(prefix.split(b"\n", 1)[0].decode()).threads_per_task))
    frame, said = communicator_members(prefix, "t.prv", tasks)
    rows, skipped, redefined, undeclared = _reference(prefix, tasks)
    assert frame.height > 0 and frame.rows() == rows and not skipped and not redefined and not undeclared
    assert not said


def test_each_empty_communicator_line_counts_toward_the_cap(monkeypatch):
    """Lines of no members cost too: past MAX_MEMBERS lines and members none are kept, said with the line."""
    monkeypatch.setattr(communicators, "MAX_MEMBERS", 100)
    prefix = HEAD + b"".join(b"c:1:%d:0\n" % comm for comm in range(1, 151))
    frame, said = communicator_members(prefix, "t.prv", TASKS)
    assert frame.height == 0
    assert said == ["t.prv:102: the communicator lines list more than 100 members (a line counted as one): none "
                    "kept (a merge compares this run's communicator ids as numbers)"]


def test_empty_communicator_lines_hold_no_python_object_each(monkeypatch):
    """200,000 empty communicator lines: at most 120 bytes per line held at the peak (was ~440: a dict entry, an
    array and two ints per line), the lines read in blocks of 64 KiB."""
    monkeypatch.setattr(communicators, "BLOCK_BYTES", 1 << 16)
    lines = 200_000
    prefix = HEAD + b"".join(b"c:1:%d:0\n" % comm for comm in range(1, lines + 1))
    communicator_members(prefix[:4096], "t.prv", TASKS)  # what loads once
    (frame, said), peak = traced_peak(lambda: communicator_members(prefix, "t.prv", TASKS))
    assert frame.height == 0 and not said
    assert peak / lines < 120, f"{peak / lines:.0f} bytes per line"
