"""The communicator lines of a ``.prv`` header: ``c:APPL:COMM:N:TASK1:...:TASKN`` names the N tasks (1-based, of
application APPL) of communicator COMM. Extrae numbers communicators per run, in the order the run created them
(1: MPI_COMM_WORLD, then each task's MPI_COMM_SELF, then what the program made), so an id says which communicator
it is only within its run; the members say it across runs (:mod:`synthtrace.tracelib.merge.communicators`).
Intercommunicator lines (``i:``) are not read.

The lines are parsed column-wise (numpy over the header's bytes, a few MiB of lines at a time), never one Python
object per line: a 64 MiB header of empty communicator lines held ~450 bytes per line (attack 23 F6: 2.5 GB)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.source import COMMUNICATOR_SCHEMA

#: members and lines kept over all lines, a line counted as one member whatever it lists (a 100,000-rank Extrae
#: run: world, a self per task and a row and column split are 200,000 lines of 400,000 members); a header listing
#: more (the header may be 64 MiB of them) keeps none: the merge then compares ids. 8.3M empty lines (64 MiB)
#: under 1 << 23 held 960 MB while read; past 1 << 22 the read stops where the count passes it
MAX_MEMBERS = 1 << 22
#: bytes of communicator lines parsed at once (the parse holds ~30 bytes per byte of a block while it runs)
BLOCK_BYTES = 4 << 20
#: digits of APPL, COMM and N at most (more: the line is skipped)
_HEAD_DIGITS = np.array([10, 18, 10])
#: a number of a line longer than a block that runs on over blocks is cut short (:func:`_cut`) once it has this many
#: digits: one more than the cut leaves (39)
SHORTENED_RUN = 40
#: what a number past int64 reads as (numpy's parse keeps its largest value)
INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class _Lines:
    """The ``c:`` lines of a header, one array element per line: its 1-based line number, APPL and COMM (0 where
    not valid), whether it is of the form above, and its task numbers (``tasks``, ``counts`` per line)."""
    number: np.ndarray  # int64
    appl: np.ndarray  # int64
    comm: np.ndarray  # int64
    valid: np.ndarray  # bool
    counts: np.ndarray  # int64, tasks per line (0 where not valid)
    tasks: np.ndarray  # int64


def communicator_members(prefix: bytes, path: str, tasks: Sequence[int]) -> tuple[pl.DataFrame, list[str]]:
    """The members of the communicators the ``c:`` lines of ``prefix`` (the header and the lines after it, as the
    reader gathered them) declare, ``tasks[a - 1]`` the tasks the header declares for application ``a``: one row
    per (appl, comm, task) (COMMUNICATOR_SCHEMA), and what to warn of: a line skipped (not of the form above or its
    count of tasks not N; or an application the header does not declare, or a task past all its applications'
    tasks: such a communicator could never match another run's), or every line when they list more than
    :data:`MAX_MEMBERS` members and lines; a communicator defined again with other members (attack 22: a comm id
    written three times had the union of their members) keeps its first line's and the others are said (the same
    members again, in any order, are one definition: members are what is stored). Paraver reads such lines without
    using them for the records (paraver-kernel keeps them as text), so a bad one is skipped, not refused."""
    if not prefix.endswith(b"\n"):
        prefix += b"\n"
    data = np.frombuffer(prefix, np.uint8)
    number, first, end = _communicator_lines(data)
    lines = _parsed(data, number, first, end)
    if isinstance(lines, int):
        return pl.DataFrame(schema=COMMUNICATOR_SCHEMA), [
            f"{path}:{lines}: the communicator lines list more than {MAX_MEMBERS:,} members (a line counted as one): "
            "none kept (a merge compares this run's communicator ids as numbers)"]
    skipped = lines.number[~lines.valid]
    warnings = [f"{path}:{skipped[0]}: communicator line skipped: not 'c:APPL:ID:N' followed by N task numbers"
                + (f" ({skipped.size} lines skipped)" if skipped.size > 1 else "")] if skipped.size else []
    lines, undeclared = _declared_only(lines, np.asarray(tasks, np.int64), path)
    kept, redefined = _first_definitions(lines, path)
    warnings += undeclared + redefined
    return _distinct_members(lines, kept), warnings


def _distinct_members(lines: _Lines, kept: np.ndarray) -> pl.DataFrame:
    """One row per distinct (appl, comm, task) of the ``kept`` lines, in their order (COMMUNICATOR_SCHEMA). The kept
    lines are of distinct (appl, comm), so a member is told apart by (its line, its task), one int64 (each task is
    declared, so under 2^31): 16 bytes a member held at most beside the lines' tasks. Polars' ``unique`` of the three
    columns held ~57 bytes a member (a 63 MiB line of 19-digit numbers: 190 MB)."""
    counts = lines.counts[kept]
    key = np.repeat(np.arange(counts.size, dtype=np.int64) << 32, counts)
    key |= lines.tasks if kept.all() else lines.tasks[np.repeat(kept, lines.counts)]
    key = pl.Series(key).unique(maintain_order=True).to_numpy()
    line = key >> 32
    return pl.DataFrame({"appl": lines.appl[kept].astype(np.int32)[line], "comm": lines.comm[kept][line],
                         "task": (key & 0xFFFFFFFF).astype(np.int32)})


def _communicator_lines(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(1-based line number, offset of the byte after ``c:``, offset of the line's ``\\n``) of each line of
    ``data`` (a header's bytes as uint8, ending with ``\\n``) that begins with ``c:``. The lines' ends are found
    :data:`BLOCK_BYTES` bytes at a time, a long line's too: 8 bytes held for every line of a header followed by 64 MiB
    of blank lines took 986 MB."""
    numbers, firsts, ends = [], [], []
    counted, begin = 0, 0  # lines ended before the window, the first byte of the first line not ended
    for window in range(0, data.size, BLOCK_BYTES):  # a line longer than a window is looked at a window at a time
        end = np.flatnonzero(data[window:window + BLOCK_BYTES] == ord("\n")) + window
        start = np.concatenate(([begin], end[:-1] + 1))
        is_c = end - start >= 2
        at = start[is_c]
        is_c[is_c] = (data[at] == ord("c")) & (data[at + 1] == ord(":"))
        numbers.append(np.flatnonzero(is_c) + counted + 1)
        firsts.append(start[is_c] + 2)
        ends.append(end[is_c])
        counted, begin = counted + end.size, (end[-1] + 1 if end.size else begin)
    return np.concatenate(numbers), np.concatenate(firsts), np.concatenate(ends)


def _parsed(data: np.ndarray, number: np.ndarray, first: np.ndarray, end: np.ndarray) -> _Lines | int:
    """Each ``c:`` line's fields, parsed :data:`BLOCK_BYTES` of lines at a time; or the number of the line at
    which the lines and the tasks they list pass :data:`MAX_MEMBERS` (a line of N tasks counts N + 1)."""
    long = np.flatnonzero(end - first > BLOCK_BYTES)  # a block of its own each
    cuts = np.unique(np.concatenate((np.searchsorted(first, np.arange(first[:1].sum(), end[-1:].sum(), BLOCK_BYTES)),
                                     long, long + 1, [0, first.size])))
    parts, total = [], 0
    for a, b in zip(cuts, cuts[1:]):
        counted = np.cumsum(_costs(data, first[a:b], end[a:b])) + total  # before the parse: one line may be 64 MiB
        if counted[-1] > MAX_MEMBERS:
            return int(number[a + np.flatnonzero(counted > MAX_MEMBERS)[0]])
        total = int(counted[-1])
        parts.append(_block(data, first[a:b], end[a:b]))
    appl, comm, valid, counts, tasks = ([np.concatenate([p[i] for p in parts]) for i in range(5)] if parts
                                       else [np.empty(0, np.int64)] * 5)
    return _Lines(number, appl, comm, valid.astype(bool), counts, tasks)


def _costs(data: np.ndarray, first: np.ndarray, end: np.ndarray) -> np.ndarray:
    """What each line whose text after ``c:`` is ``data[first:end]`` counts toward :data:`MAX_MEMBERS`: 1 + the
    numbers (digit runs) it lists after its third, valid or not. Holds 10 bytes per byte of a block of lines (at most
    2 :data:`BLOCK_BYTES`), and of one long line 2 bytes per byte of a :data:`BLOCK_BYTES` window of it (was 2 per
    byte of the line: the peak of a long line cut short); a line longer than a block is parsed a block at a time
    (:func:`_long_line`)."""
    if first.size == 1:
        return np.maximum(np.array([_digit_runs(data[first[0]:end[0]])]) - 3, 0) + 1
    span = data[first[0]:end[-1] + 1]
    digit = (span - np.uint8(ord("0"))) < 10
    starts = np.empty_like(digit)  # a digit after a non-digit (the byte before ``first`` is the ``:`` of ``c:``)
    starts[0] = digit[0]
    np.greater(digit[1:], digit[:-1], out=starts[1:])
    del digit
    # an empty line's segment is its \n (not a digit)
    runs = np.add.reduceat(starts, np.column_stack((first, end)).ravel() - first[0], dtype=np.int64)[::2]
    return np.maximum(runs - 3, 0) + 1


def _digit_runs(line: np.ndarray) -> int:
    """The runs of digits in ``line`` (bytes after a ``:``), looked at :data:`BLOCK_BYTES` at a time."""
    runs, after_digit = 0, False
    for a in range(0, line.size, BLOCK_BYTES):
        digit = (line[a:a + BLOCK_BYTES] - np.uint8(ord("0"))) < 10
        runs += np.count_nonzero(digit[1:] > digit[:-1]) + int(digit[0] and not after_digit)
        after_digit = bool(digit[-1])
    return int(runs)


def _block(data: np.ndarray, first: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """(appl, comm, valid, task counts, tasks) of the lines whose text after ``c:`` is ``data[first:end]``."""
    lengths = end - first
    if lengths.size == 1 and lengths[0] > BLOCK_BYTES:
        return _long_line(data[first[0]:end[0]])
    if first.size == 1:
        text = data[first[0]:end[0] + 1]
    else:
        inside = np.zeros(end[-1] + 2 - first[0], np.int8)
        inside[first - first[0]] = 1
        inside[end + 1 - first[0]] -= 1
        text = data[first[0]:end[-1] + 1][np.cumsum(inside[:-1], dtype=np.int8).astype(bool)]  # each \n kept
        del inside
    line_end = np.cumsum(lengths + 1) - 1  # offset of each line's \n in text
    digit = (text >= ord("0")) & (text <= ord("9"))
    wrong = _misplaced(text[:-1], text[1:])  # the text ends with a \n: nothing follows it
    valid = np.ones(first.size, bool)
    valid[np.searchsorted(line_end, np.flatnonzero(wrong))] = False
    valid &= digit[line_end - lengths]
    run_start = np.flatnonzero(digit & ~np.concatenate(([False], digit[:-1])))
    run_end = np.flatnonzero(digit & ~np.append(digit[1:], False)) + 1
    runs = np.diff(np.concatenate(([0], np.searchsorted(run_start, line_end))))
    valid &= runs >= 3
    if not valid.any():
        nothing = np.zeros(first.size, np.int64)
        return nothing, nothing, valid, nothing, np.empty(0, np.int64)
    # the digit runs as numbers, in order (a run past int64 reads as its largest value)
    spaced = np.where(digit, text, ord(" ")).tobytes()
    value = np.fromstring(spaced, dtype=np.int64, sep=" ")
    del spaced, digit
    head = np.concatenate(([0], np.cumsum(runs)[:-1]))[:, None] + np.arange(3)  # each line's first three runs
    head[~valid] = 0
    valid &= ((run_end[head] - run_start[head]) <= _HEAD_DIGITS).all(axis=1)
    valid &= value[head[:, 2]] == runs - 3
    is_task = np.repeat(valid, runs)
    is_task[head[valid].ravel()] = False
    tasks, counts = value[is_task], np.where(valid, runs - 3, 0)
    del is_task, run_end, run_start
    return np.where(valid, value[head[:, 0]], 0), np.where(valid, value[head[:, 1]], 0), valid, counts, tasks


def _blank(text: np.ndarray) -> np.ndarray:
    """Whether each byte is one bytes.rstrip strips from a line, its \\n aside: `` \\t\\r\\x0b\\x0c`` (1 byte held a
    byte: np.isin held 14)."""
    return (text == ord(" ")) | (text == ord("\t")) | (text - np.uint8(ord("\x0b")) < 3)


def _misplaced(text: np.ndarray, following: np.ndarray) -> np.ndarray:
    """Whether each byte of ``text`` (``following``: the byte after each) breaks the form of a line, ``D(:D)*`` then
    blanks (D: digits): a byte other than a digit, ':', a blank or \\n, a blank followed by other than a blank or
    \\n, a ':' by other than a digit. (A line must also begin with a digit.)"""
    space = _blank(text)
    wrong = ~((text - np.uint8(ord("0")) < 10) | space | (text == ord(":")) | (text == ord("\n")))
    wrong |= space & ~(_blank(following) | (following == ord("\n")))
    wrong |= (text == ord(":")) & (following - np.uint8(ord("0")) >= 10)
    return wrong


def _long_line(line: np.ndarray) -> tuple[np.ndarray, ...]:
    """(appl, comm, valid, task count, tasks) of one line longer than a block (``line``: its bytes after ``c:``, its
    \\n aside), as :func:`_block` reads it, parsed :data:`BLOCK_BYTES` at a time: each block's whole numbers at once,
    the number it ends inside carried into the next (cut short by :func:`_cut` while it grows). What is held is the
    line's numbers (8 bytes each) and a block's work: a 24 MiB line of 19-digit numbers held ~8 bytes a byte of it
    when parsed whole."""
    blank_at = _form_end(line)
    if blank_at is None:
        nothing = np.zeros(1, np.int64)
        return nothing, nothing, np.zeros(1, bool), nothing, np.empty(0, np.int64)
    body = line[:blank_at]  # digits and ':' only, a digit first and last
    numbers = np.empty(_digit_runs(body), np.int64)
    head_digits: list[int] = []  # the digits of the line's first three numbers
    filled, carry = 0, b""
    for a in range(0, body.size, BLOCK_BYTES):
        window = body[a:a + BLOCK_BYTES]
        colon = np.flatnonzero(window == ord(":"))
        if not colon.size:
            carry = _cut(carry + window.tobytes())
            continue
        filled = _parse_numbers(carry + window[:colon[-1]].tobytes(), numbers, filled, head_digits)
        carry = _cut(window[colon[-1] + 1:].tobytes())
    filled = _parse_numbers(carry, numbers, filled, head_digits)
    valid = (numbers.size >= 3 and all(np.array(head_digits) <= _HEAD_DIGITS)
             and numbers[2] == numbers.size - 3)
    if not valid:
        nothing = np.zeros(1, np.int64)
        return nothing, nothing, np.zeros(1, bool), nothing, np.empty(0, np.int64)
    return numbers[:1], numbers[1:2], np.ones(1, bool), np.array([numbers.size - 3]), numbers[3:]


def _parse_numbers(text: bytes, numbers: np.ndarray, filled: int, head_digits: list[int]) -> int:
    """Put the numbers of ``text`` (digits separated by single ``:``) into ``numbers`` from ``filled`` on (a number
    past int64 as its largest value, as numpy's parse keeps it) and, while ``head_digits`` holds fewer than three,
    their digit counts into it; returns where the next number goes."""
    values = np.fromstring(text.replace(b":", b" "), dtype=np.int64, sep=" ")
    numbers[filled:filled + values.size] = values
    if len(head_digits) < 3:
        head_digits += [len(field) for field in text.split(b":", 3)[:3 - len(head_digits)]]
    return filled + values.size


def _cut(digits: bytes) -> bytes:
    """``digits`` (one number, or the start of one) as a number read alike, at most 39 digits long: one of
    :data:`SHORTENED_RUN` digits or more keeps at most 19 leading zeros (still longer than any head field's 18
    digits; its value kept) and 20 significant digits (past int64: read as its largest value either way)."""
    if len(digits) < SHORTENED_RUN:
        return digits
    significant = digits.lstrip(b"0")
    return b"0" * min(len(digits) - len(significant), 19) + significant[:20]


def _form_end(line: np.ndarray) -> int | None:
    """Where the trailing blanks of ``line`` (a ``c:`` line's bytes after ``c:``, its \\n aside) begin (its length
    if none), or None if it is not of the form ``D(:D)*`` then blanks (D: digits); looked at :data:`BLOCK_BYTES` at
    a time (``np.flatnonzero`` of a block's blanks would hold 8 bytes a blank)."""
    if line.size == 0 or not ord("0") <= int(line[0]) <= ord("9"):  # a uint8 scalar would wrap, and numpy warn
        return None
    step, blank_at = BLOCK_BYTES, line.size
    for a in range(0, line.size, step):
        window, following = line[a:a + step], line[a + 1:a + step + 1]
        if following.size < window.size:
            following = np.append(following, np.uint8(ord("\n")))
        if _misplaced(window, following).any():
            return None
        if blank_at == line.size and (blank := _blank(window)).any():
            blank_at = a + int(blank.argmax())
    return blank_at


def _declared_only(lines: _Lines, tasks: np.ndarray, path: str) -> tuple[_Lines, list[str]]:
    """``lines`` without those naming an application the header does not declare (``tasks[a - 1]``: the tasks of
    application ``a``) or a task past all the applications' tasks together, and what to warn of: the first such
    line, what it names, how many there are. A member may pass its own application's tasks: both real LULESH traces
    (an application of 8 tasks beside one of 12 uncore readers) list tasks 1..12 in application 1's world and self
    communicators; but every traced rank is a task of the trace, so a member past them all is no rank at all."""
    declared = (lines.appl >= 1) & (lines.appl <= tasks.size)
    outside = (lines.tasks < 1) | (lines.tasks > tasks.sum())
    undeclared = lines.valid & ~declared
    undeclared[np.repeat(np.arange(lines.number.size, dtype=np.int32), lines.counts)[outside]] = True  # 4 B a member
    if not undeclared.any():
        return lines, []
    at = np.flatnonzero(undeclared)
    line, appl = at[0], int(lines.appl[at[0]])
    if not declared[line]:
        named = f"application {appl} (the header declares applications 1 to {tasks.size})"
    else:
        first = np.cumsum(lines.counts)[line] - lines.counts[line]
        task = int(lines.tasks[first + np.flatnonzero(outside[first:first + lines.counts[line]])[0]])
        named = (f"task {task if task < INT64_MAX else f'{INT64_MAX} or more'} (the header declares tasks 1 to "
                 f"{tasks.sum()} in all)")
    said = (f"{path}:{lines.number[line]}: communicator line skipped: it names {named}, so it could match no "
            "other run's communicator" + (f" ({at.size} such lines skipped)" if at.size > 1 else ""))
    valid = lines.valid & ~undeclared
    return replace(lines, valid=valid, counts=np.where(valid, lines.counts, 0),
                   tasks=lines.tasks[np.repeat(valid, lines.counts)]), [said]


def _first_definitions(lines: _Lines, path: str) -> tuple[np.ndarray, list[str]]:
    """(whether each line is the first valid definition of its (appl, comm), what to warn of: the lines defining a
    communicator again with other members)."""
    index = np.flatnonzero(lines.valid)
    index = index[np.lexsort((index, lines.comm[index], lines.appl[index]))]  # by (appl, comm), then line
    starts = np.ones(index.size, bool)  # each line whose (appl, comm) the line before it in this order lacks
    starts[1:] = (np.diff(lines.appl[index]) != 0) | (np.diff(lines.comm[index]) != 0)
    kept = np.zeros(lines.number.size, bool)
    kept[index[starts]] = True
    again, first = index[~starts], index[starts][np.cumsum(starts)[~starts] - 1]
    warnings = []
    other = again[_other_members(lines, again, first)]
    if other.size:
        line, of = other.min(), first[np.flatnonzero(again == other.min())[0]]
        warnings.append(f"{path}:{lines.number[line]}: communicator {lines.comm[line]} of application "
                        f"{lines.appl[line]} defined again with other members (first at line {lines.number[of]}): "
                        "the first definition kept"
                        + (f" ({other.size} lines defining a communicator again skipped)" if other.size > 1 else ""))
    return kept, warnings


def _other_members(lines: _Lines, again: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Whether line ``again[i]`` lists another set of tasks than line ``first[i]`` (order and repeats aside)."""
    if not again.size:
        return np.zeros(0, bool)
    owner = np.repeat(np.arange(lines.number.size), lines.counts)
    order = np.lexsort((lines.tasks, owner))
    owner, task = owner[order], lines.tasks[order]
    distinct = np.ones(task.size, bool)
    distinct[1:] = (np.diff(owner) != 0) | (np.diff(task) != 0)
    owner, task = owner[distinct], task[distinct]
    size = np.bincount(owner, minlength=lines.number.size)
    offset = np.concatenate(([0], np.cumsum(size)[:-1]))
    other = size[again] != size[first]
    alike = np.flatnonzero(~other)
    step = np.arange(size[again[alike]].sum()) - np.repeat(np.cumsum(size[again[alike]]) - size[again[alike]],
                                                          size[again[alike]])
    differs = task[np.repeat(offset[again[alike]], size[again[alike]]) + step] != \
        task[np.repeat(offset[first[alike]], size[again[alike]]) + step]
    other[alike[np.repeat(np.arange(alike.size), size[again[alike]])[differs]]] = True
    return other
