"""``.pcf`` files: names of states, event types and event values.

Counter labels come in several styles, all handled: ``42000050 PAPI_TOT_INS [Instr completed]``,
``42000050 (PAPI_TOT_INS) Instr completed`` and ``42000050 PAPI_TOT_INS ([Instr completed])``.
What is accepted follows Paraver's own ``.pcf`` parser (paraver-kernel, ``utils/traceparser/pcffileparser.cpp``).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.counter_columns import CounterColumns
from synthtrace.tracelib.formats.paraver.companion_text import companion_lines, file_lines, too_long
from synthtrace.tracelib.formats.paraver.event_types import COUNTER_TYPE_MAX, COUNTER_TYPE_MIN
from synthtrace.tracelib.printable import escaped
from synthtrace.tracelib.schema import is_reserved_column, unreserved_column

_PAREN_NAME = re.compile(r"^\((?P<name>[^)\s]+)\)")


def is_counter_type(event_type: int) -> bool:
    """Whether an event type carries a hardware-counter value (Extrae numbering)."""
    return COUNTER_TYPE_MIN <= event_type < COUNTER_TYPE_MAX


def is_absolute_counter(event_type: int) -> bool:
    """Extrae adds 1,000,000 to a counter's type when it emits absolute (cumulative) values."""
    return (event_type // 1_000_000) % 2 == 1


def counter_name_from_label(label: str) -> str:
    """The counter's own name in a ``.pcf`` label (first word, or the word in leading parentheses)."""
    label = label.strip()
    m = _PAREN_NAME.match(label)
    if m:
        return m["name"]
    return label.split()[0] if label else label


#: Section names of a ``.pcf`` file, as Paraver's own parser (paraver-kernel ``pcffileparser``) knows them.
SECTIONS = frozenset({"DEFAULT_OPTIONS", "DEFAULT_SEMANTIC", "STATES", "STATES_COLOR", "EVENT_TYPE",
                      "GRADIENT_COLOR", "GRADIENT_NAMES"})
_INT = re.compile(r"^-?\d{1,19}$")  # at most int64's digits: a longer number is no type or value of any record
_INT64_MAX = (1 << 63) - 1
#: longest counter name kept (characters); PAPI and perf names are under 64
MAX_COUNTER_NAME = 128


def _int64(text: str) -> int | None:
    """The integer ``text`` spells when it fits int64 (as the records' types and values do), else None."""
    if not _INT.match(text):
        return None
    value = int(text)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


@dataclass
class PcfCatalog:
    """Names from a ``.pcf`` file; empty when the trace came without one."""

    states: dict[int, str] = field(default_factory=dict)
    event_labels: dict[int, str] = field(default_factory=dict)
    event_values: dict[int, dict[int, str]] = field(default_factory=dict)
    event_gradient: dict[int, int] = field(default_factory=dict)
    event_precision: dict[int, int] = field(default_factory=dict)  # decimals Paraver shows (PRECISION lines)
    event_lines: dict[int, int] = field(default_factory=dict)  # 1-based line of each event type's label
    ignored: list[tuple[int, str]] = field(default_factory=list)  # (line, reason): lines Paraver skips too
    renamed: dict[int, str] = field(default_factory=dict)  # counter type -> its column, where two share a name
    renamed_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, what was renamed and why)
    values_cut: int = 0  # value names not kept beyond MAX_VALUE_NAME_BYTES (their values are shown by number)
    cut_line: int = 0  # 1-based line of the first of them

    def counter_name(self, event_type: int) -> str:
        """Counter column name: the ``.pcf`` name, else the numeric type as text."""
        if (renamed := self.renamed.get(event_type)) is not None:
            return renamed
        label = self.event_labels.get(event_type)
        return counter_name_from_label(label) if label else str(event_type)

    def value_name(self, event_type: int, value: int) -> str | None:
        return self.event_values.get(event_type, {}).get(value)


def read_pcf(path: str | Path) -> PcfCatalog:
    """Parse a ``.pcf`` file (see :func:`parse_pcf`), streamed a line at a time (attack 12 F10: the whole file was
    read, so one over 32 MiB, a large C++ code's caller tables, refused its trace); the caller checks its size
    against :data:`~synthtrace.tracelib.formats.paraver.companion_text.MAX_PCF_BYTES`."""
    try:
        with Path(path).open("rb") as fh:
            return _parse(file_lines(fh), path)
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot be read ({exc.strerror or exc})") from None


def parse_pcf(data: bytes, path: str | Path) -> PcfCatalog:
    """Parse the bytes of a ``.pcf`` file as Paraver does; only STATES and EVENT_TYPE blocks are interpreted.

    Lines are trimmed (tabs count as spaces); blank lines and ``#`` comments are skipped anywhere; a section name
    alone on its line starts that section; an EVENT_TYPE block holds ``<gradient> <type> <label>`` lines, optional
    ``PRECISION <n>`` lines and, after ``VALUES``, ``<value> <label>`` lines for every type of the block, until the
    next section. A line that does not parse is skipped, as Paraver skips it, and listed in ``ignored``: so is a
    number beyond int64 (Paraver's ``std::stoi`` throws on it and skips the line) and a line longer than
    :data:`~synthtrace.tracelib.formats.paraver.companion_text.MAX_LINE_BYTES` (security, issue 23 F5/F6).
    The types of one block share one value table (a block of 1,000 types and 60,000 values is one table, not 1,000).
    Value names beyond :data:`MAX_VALUE_NAME_BYTES` are not kept (counted in ``values_cut``): the file is still
    read to its end for its event types and states.
    """
    return _parse(companion_lines(data), path)


def _parse(lines: Iterable[tuple[int, str | None]], path: str | Path) -> PcfCatalog:
    """:func:`parse_pcf` of the numbered lines of a ``.pcf`` (``None``: a line too long to read)."""
    cat = PcfCatalog()
    section: str | None = None
    budget = _Budget(str(path))
    block = _Block(budget)  # event types and value table of the current EVENT_TYPE block
    seen = False
    for lineno, raw in lines:
        seen = True
        if raw is None:
            cat.ignored.append(too_long(lineno))
            continue
        line = raw.replace("\t", " ").strip()
        if not line or line.startswith("#"):
            continue
        if budget.left < 0 and block.in_values and line not in SECTIONS:  # names no longer kept: only count
            cat.values_cut += 1
            cat.cut_line = cat.cut_line or lineno
            continue
        if line in SECTIONS:
            section, block = line, _Block(budget)
            continue
        if section == "STATES":
            parts = line.split(None, 1)
            if (state := _int64(parts[0])) is not None:
                cat.states[state] = parts[1] if len(parts) > 1 else ""
            else:
                cat.ignored.append((lineno, f"state line {_shown(line)!r} does not start with a state number"))
        elif section == "EVENT_TYPE":
            _event_line(cat, line, lineno, block)
        elif section is None:
            cat.ignored.append((lineno, f"{_shown(line)!r} before any section (EVENT_TYPE, STATES, ...)"))
    if seen and not (cat.states or cat.event_labels or section):
        cat.ignored[:0] = [(1, "no Paraver section (STATES, EVENT_TYPE, ...): not a .pcf file")]
    _check_counter_names(cat)
    return cat


def _shown(line: str, limit: int = 60) -> str:
    """The start of ``line`` for a message (shown with ``!r``, which escapes control characters)."""
    return line if len(line) <= limit else line[:limit] + "..."


#: memory (bytes, estimated: :data:`NAME_OVERHEAD` + the label's length per name) the (type, value) names of one
#: .pcf may take, table copies included; beyond it no more names are kept (``values_cut``). Paraver's own files set
#: some ten thousand names; a large C++ code's caller tables some 500,000 (86 MB by this count); a file that
#: declares types again in many blocks would have any reader copy tables without end
MAX_VALUE_NAME_BYTES = 256 << 20
#: bytes of one kept name besides its label's characters (its dict slot, key and string header)
NAME_OVERHEAD = 200


@dataclass
class _Budget:
    """What is left of :data:`MAX_VALUE_NAME_BYTES` while one file is parsed (below 0: no more names kept)."""

    path: str
    left: int = field(default_factory=lambda: MAX_VALUE_NAME_BYTES)

    def afford(self, cost: int) -> bool:
        """Spend ``cost`` bytes if they are left; False (and nothing more is kept after) when they are not."""
        if self.left >= 0 and cost <= self.left:
            self.left -= cost
            return True
        self.left = -1
        return False


@dataclass
class _Block:
    """The EVENT_TYPE block being read: its types, whether VALUES began, the value table its types share and the
    types that also had values from an earlier block (they get this block's values in their own table too)."""

    budget: _Budget
    types: list[int] = field(default_factory=list)
    in_values: bool = False
    shared: bool = False  # the block's types were given its value table
    values: dict[int, str] = field(default_factory=dict)
    own_tables: list[dict[int, str]] = field(default_factory=list)

    def add_value(self, cat: PcfCatalog, value: int, label: str, lineno: int) -> None:
        if not self.values and not self.shared:  # the block's first value: its types take the shared table
            self.shared = True
            self._share(cat)
        if not self.budget.afford((1 + len(self.own_tables)) * (NAME_OVERHEAD + len(label))):
            cat.values_cut += 1
            cat.cut_line = cat.cut_line or lineno
            return
        self.values[value] = label
        for table in self.own_tables:
            table[value] = label

    def _share(self, cat: PcfCatalog) -> None:
        for etype in dict.fromkeys(self.types):
            table = cat.event_values.setdefault(etype, self.values)
            if table is not self.values and self.budget.afford(len(table) * NAME_OVERHEAD):
                # values of an earlier block: a copy of its own, as it may be shared
                cat.event_values[etype] = table = dict(table)
                self.own_tables.append(table)


def _event_line(cat: PcfCatalog, line: str, lineno: int, block: _Block) -> None:
    """One line of an EVENT_TYPE block (see :func:`parse_pcf`); ``block`` gets the types it declares."""
    if line == "VALUES":
        block.in_values = True
        return
    parts = line.split(None, 2)
    if parts[0] == "PRECISION":
        if len(parts) == 2 and parts[1].isdigit() and len(parts[1]) < 10:
            cat.event_precision.update(dict.fromkeys(block.types, int(parts[1])))
        else:
            cat.ignored.append((lineno, f"{_shown(line)!r} is not 'PRECISION <decimals>'"))
    elif not block.in_values:
        if len(parts) < 2 or (etype := _int64(parts[1])) is None:
            cat.ignored.append((lineno, f"{_shown(line)!r} is not '<gradient> <type> <label>' (type an int64)"))
            return
        cat.event_labels[etype] = parts[2] if len(parts) > 2 else ""
        if (gradient := _int64(parts[0])) is not None:
            cat.event_gradient[etype] = gradient
        cat.event_lines[etype] = lineno
        block.types.append(etype)
    elif (value := _int64(parts[0])) is not None:
        block.add_value(cat, value, (line.split(None, 1) + [""])[1], lineno)
    else:
        cat.ignored.append((lineno, f"{_shown(line)!r} is not '<value> <label>' (value an int64)"))


def _column_problem(name: str) -> str | None:
    """Why a counter name cannot be a column as it is (security, issue 23 F6/F7), or None."""
    if not name.isprintable():
        return "holds control characters (they would reach the terminal raw)"
    if len(name) > MAX_COUNTER_NAME:
        return f"is longer than {MAX_COUNTER_NAME} characters"
    if name == "*" or (name.startswith("^") and name.endswith("$")):
        return "is a column pattern (every column, a regular expression), not a name"
    return None


def _usable_column(name: str, etype: int) -> str:
    """The column of a counter whose name has a :func:`_column_problem`: escaped, cut, or ``counter_<type>``."""
    column = escaped(name)
    if len(column) > MAX_COUNTER_NAME:
        column = f"{column[:MAX_COUNTER_NAME - 21]}_{etype}"
    return f"counter_{etype}" if _column_problem(column) else column


def _check_counter_names(cat: PcfCatalog) -> None:
    """Two counter types with one name would fold two counters into one column: as Paraver keeps both (by type),
    the later type's column is ``NAME_TYPE`` (noted in ``renamed_lines``, which the reader warns of); so is the later
    of two names that differ only in letter case (SQL reads both as one: attack 14 F17, ``papi_tot_ins`` answered
    with ``PAPI_TOT_INS``'s values). A name that is a key column, holds control characters, is too long or is a
    pattern is renamed too (said once per file). A new name taken by another counter is renamed again (attack 16
    F7): every column unique in letter case. The one exception: a counter's relative and absolute types (Extrae
    adds 1,000,000 for the latter) of one exact name share its column."""
    columns = CounterColumns()
    unusable: list[tuple[int, str, str, int]] = []  # (line, name, why, event type)
    for etype in sorted(t for t in cat.event_labels if is_counter_type(t)):
        name, whose = cat.counter_name(etype), f"event type {etype}"
        if (problem := _column_problem(name)) is not None:
            cat.renamed[etype] = _usable_column(name, etype)
            unusable.append((cat.event_lines[etype], name, problem, etype))
            name = cat.renamed[etype]
        if is_reserved_column(name):  # security (issue 23 item 7): a counter never takes a key column's name
            fallback = unreserved_column(name, str(etype))
            cat.renamed[etype] = columns.claim(fallback, fallback, whose)
            cat.renamed_lines.append((cat.event_lines[etype], f"counter name {name!r} of event type {etype} is a "
                                      f"column of every burst: read as {cat.renamed[etype]!r}"
                                      f"{columns.clash_note(fallback, cat.renamed[etype])}"))
            continue
        owner = columns.owner(name)
        first = owner.own if owner is not None and owner.column == name else None  # the type holding it as its own
        if owner is None:
            columns.claim(name, name, whose, own=etype)
            continue
        if first is not None and is_absolute_counter(etype) != is_absolute_counter(first):
            continue
        fallback = f"{name}_{etype}"
        cat.renamed[etype] = column = columns.claim(name, fallback, whose)
        if first is not None:
            given = f"counter name {name!r} given to event types {first} and {etype}"
        elif owner.own is not None:
            given = (f"counter names {owner[0]!r} ({owner[1]}) and {name!r} (event type {etype}) differ only in letter "
                     "case, one column to SQL")
        else:
            given = (f"counter name {name!r} of event type {etype} is, to SQL, the column {owner[0]!r} given to "
                     f"{owner[1]}")
        cat.renamed_lines.append((cat.event_lines[etype], f"{given}: the second read as {column!r}"
                                  f"{columns.clash_note(fallback, column)}"))
    if unusable:
        line, name, problem, etype = unusable[0]
        more = f" ({len(unusable)} counter names renamed so)" if len(unusable) > 1 else ""
        cat.renamed_lines.append((line, f"counter name {_shown(name)!r} {problem}: read as "
                                  f"{cat.counter_name(etype)!r}{more}"))
