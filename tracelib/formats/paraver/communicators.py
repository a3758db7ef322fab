"""The communicator lines of a ``.prv`` header: ``c:APPL:COMM:N:TASK1:...:TASKN`` names the N tasks (1-based, of
application APPL) of communicator COMM. Extrae numbers communicators per run, in the order the run created them
(1: MPI_COMM_WORLD, then each task's MPI_COMM_SELF, then what the program made), so an id says which communicator
it is only within its run; the members say it across runs (:mod:`synthtrace.tracelib.merge.communicators`).
Intercommunicator lines (``i:``) are not read.

The lines are parsed column-wise (numpy over the header's bytes, a few MiB of lines at a time), never one Python
object per line: a 64 MiB header of empty communicator lines held ~450 bytes per line (attack 23 F6: 2.5 GB)."""
from __future__ import annotations

from dataclasses import dataclass

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
#: numbers of this many digits or more of a line longer than a block are cut short before its parse (:func:`_shortened`)
SHORTENED_RUN = 64


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


def communicator_members(prefix: bytes, path: str) -> tuple[pl.DataFrame, list[str]]:
    """The members of the communicators the ``c:`` lines of ``prefix`` (the header and the lines after it, as the
    reader gathered them) declare: one row per (appl, comm, task) (COMMUNICATOR_SCHEMA), and what to warn of: a
    line skipped (not of the form above, its count of tasks not N, or a task or application outside 1..2**31-1),
    or every line when they list more than :data:`MAX_MEMBERS` members and lines; a communicator defined again
    with other members (attack 22: a comm id written three times had the union of their members) keeps its first
    line's and the others are said (the same members again, in any order, are one definition: members are what is
    stored). Paraver reads such lines without using them for the records, so a bad one is skipped, not refused."""
    if not prefix.endswith(b"\n"):
        prefix += b"\n"
    data = np.frombuffer(prefix, np.uint8)
    number, first, end = _communicator_lines(prefix, data)
    lines = _parsed(data, number, first, end)
    if isinstance(lines, int):
        return pl.DataFrame(schema=COMMUNICATOR_SCHEMA), [
            f"{path}:{lines}: the communicator lines list more than {MAX_MEMBERS:,} members (a line counted as one): "
            "none kept (a merge compares this run's communicator ids as numbers)"]
    kept, warnings = _first_definitions(lines, path)
    line_of_task = np.repeat(np.arange(lines.number.size), lines.counts)[np.repeat(kept, lines.counts)]
    frame = pl.DataFrame({"appl": lines.appl[line_of_task].astype(np.int32), "comm": lines.comm[line_of_task],
                          "task": lines.tasks[np.repeat(kept, lines.counts)].astype(np.int32)})
    return frame.unique(maintain_order=True), warnings


def _communicator_lines(prefix: bytes, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(1-based line number, offset of the byte after ``c:``, offset of the line's ``\\n``) of each line of
    ``prefix`` (ending with ``\\n``; ``data``, its bytes as uint8) that begins with ``c:``. The lines' ends are
    found :data:`BLOCK_BYTES` at a time: 8 bytes held for every line of a header followed by 64 MiB of blank lines
    took 986 MB."""
    numbers, firsts, ends = [], [], []
    counted, begin = 0, 0  # lines before ``begin``, the first byte of the block
    while begin < data.size:
        stop = begin + BLOCK_BYTES
        stop = data.size if stop >= data.size else prefix.index(b"\n", stop) + 1
        end = np.flatnonzero(data[begin:stop] == ord("\n")) + begin
        start = np.concatenate(([begin], end[:-1] + 1))
        is_c = end - start >= 2
        at = start[is_c]
        is_c[is_c] = (data[at] == ord("c")) & (data[at + 1] == ord(":"))
        numbers.append(np.flatnonzero(is_c) + counted + 1)
        firsts.append(start[is_c] + 2)
        ends.append(end[is_c])
        counted, begin = counted + end.size, stop
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
    numbers (digit runs) it lists after its third, valid or not. Holds 2 bytes per byte of one line, 10 of a block
    of lines (at most 2 :data:`BLOCK_BYTES`); the parse holds ~30 (one 30 MiB line took 640 MB before the cap)."""
    span = data[first[0]:end[-1] + 1]
    digit = (span - np.uint8(ord("0"))) < 10
    starts = np.empty_like(digit)  # a digit after a non-digit (the byte before ``first`` is the ``:`` of ``c:``)
    starts[0] = digit[0]
    np.greater(digit[1:], digit[:-1], out=starts[1:])
    del digit
    if first.size == 1:  # a long line is a block of its own: counted without the 8 bytes a byte reduceat casts to
        runs = np.array([np.count_nonzero(starts)])
    else:  # an empty line's segment is its \n (not a digit)
        runs = np.add.reduceat(starts, np.column_stack((first, end)).ravel() - first[0], dtype=np.int64)[::2]
    return np.maximum(runs - 3, 0) + 1


def _block(data: np.ndarray, first: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """(appl, comm, valid, task counts, tasks) of the lines whose text after ``c:`` is ``data[first:end]``."""
    lengths = end - first
    if lengths.size == 1 and lengths[0] > BLOCK_BYTES:
        text = np.frombuffer(_shortened(data[first[0]:end[0]]) + b"\n", np.uint8)
        lengths = np.array([text.size - 1])
    elif first.size == 1:
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
    valid &= (value[head[:, 2]] == runs - 3) & (value[head[:, 0]] > 0) & (value[head[:, 0]] < 2**31)
    is_task = np.repeat(valid, runs)
    is_task[head[valid].ravel()] = False
    tasks, counts = value[is_task], np.where(valid, runs - 3, 0)
    del is_task, run_end, run_start
    out_of_range = (tasks <= 0) | (tasks >= 2**31)
    if out_of_range.any():
        valid[np.repeat(np.arange(first.size), counts)[out_of_range]] = False
        tasks = tasks[np.repeat(valid, counts)]
        counts = np.where(valid, counts, 0)
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


def _shortened(line: np.ndarray) -> bytes:
    """``line`` (a ``c:`` line's bytes after ``c:``, its \\n aside) as short a line parsed alike, looked at
    :data:`BLOCK_BYTES` at a time: ``:`` if it is not of the form (skipped either way); else without its trailing
    blanks, each number of :data:`SHORTENED_RUN` digits or more cut to at most 19 leading zeros (still longer than
    any head field's 18 digits; its value kept) and 20 significant digits (past int64: read as its largest value
    either way). A line padded with megabytes of blanks or zeros is parsed holding its numbers' bounds (8 bytes a
    number), not ~13 bytes a byte of it."""
    step, blank_at = BLOCK_BYTES, line.size
    for a in range(0, line.size, step):
        window, following = line[a:a + step], line[a + 1:a + step + 1]
        if following.size < window.size:
            following = np.append(following, np.uint8(ord("\n")))
        if _misplaced(window, following).any():
            return b":"
        if blank_at == line.size and (blanks := np.flatnonzero(_blank(window))).size:
            blank_at = a + int(blanks[0])
    body = line[:blank_at]  # digits and ':' only
    colons = np.concatenate([np.flatnonzero(body[a:a + step] == ord(":")) + a for a in range(0, body.size, step)]
                            + [np.empty(0, np.int64)])
    start, end = np.concatenate(([0], colons + 1)), np.append(colons, body.size)
    long = end - start >= SHORTENED_RUN
    start, end = start[long], end[long]
    if not start.size:
        return body.tobytes()
    significant = end.copy()  # each long number's first digit other than 0 (its end: none)
    for a in range(0, body.size, step):
        window = body[a:a + step]
        at = np.flatnonzero((window != ord("0")) & (window != ord(":"))) + a
        if not at.size:
            continue
        k = np.minimum(np.searchsorted(at, start), at.size - 1)  # the first at or after each number's start
        found = (significant == end) & (at[k] >= start) & (at[k] < end)
        significant[found] = at[k][found]
    cut_from = np.column_stack((start + 19, significant + 20)).ravel()  # sorted, disjoint spans of digits dropped
    cut_to = np.column_stack((significant, end)).ravel()
    cut = cut_from < cut_to
    cut_from, cut_to = cut_from[cut], cut_to[cut]
    kept = []
    for a in range(0, body.size, step):
        window = body[a:a + step]
        spans = slice(np.searchsorted(cut_to, a, "right"), np.searchsorted(cut_from, a + window.size))
        inside = np.zeros(window.size + 1, np.int8)
        np.add.at(inside, np.clip(cut_from[spans] - a, 0, window.size), 1)
        np.add.at(inside, np.clip(cut_to[spans] - a, 0, window.size), -1)
        kept.append(window[np.cumsum(inside[:-1], dtype=np.int8) == 0].tobytes())
    return b"".join(kept)


def _first_definitions(lines: _Lines, path: str) -> tuple[np.ndarray, list[str]]:
    """(whether each line is the first valid definition of its (appl, comm), what to warn of: the lines skipped,
    the lines defining a communicator again with other members)."""
    index = np.flatnonzero(lines.valid)
    index = index[np.lexsort((index, lines.comm[index], lines.appl[index]))]  # by (appl, comm), then line
    starts = np.ones(index.size, bool)  # each line whose (appl, comm) the line before it in this order lacks
    starts[1:] = (np.diff(lines.appl[index]) != 0) | (np.diff(lines.comm[index]) != 0)
    kept = np.zeros(lines.number.size, bool)
    kept[index[starts]] = True
    again, first = index[~starts], index[starts][np.cumsum(starts)[~starts] - 1]
    skipped = lines.number[~lines.valid]
    warnings = [f"{path}:{skipped[0]}: communicator line skipped: not 'c:APPL:ID:N' followed by N task numbers"
                + (f" ({skipped.size} lines skipped)" if skipped.size > 1 else "")] if skipped.size else []
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
