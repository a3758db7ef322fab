"""The counter columns of one run: each unique in letter case (SQL's names ignore it) and never a key column.

Both readers (Paraver's ``.pcf``, OTF2's metric members) rename a counter whose name cannot be its column (a key
column's name, a case twin of another counter's, ...); the new name must be checked again, or two counters share
one column (attack 16 F7/F7b: a case twin renamed ``NAME_TYPE`` beside a counter already so named)."""
from __future__ import annotations

from typing import NamedTuple

from synthtrace.tracelib.schema import is_reserved_column

#: the most counters one trace may hold (Paraver's counter types, OTF2's metric members): the assembler sums them
#: per burst and call, so a file defining thousands is refused in one line, not read into gigabytes
MAX_COUNTERS = 4096


class Claim(NamedTuple):
    """A column given to a counter: the column, whose it is (``event type 42000050``) and, when the counter holds
    its own name as its column, the counter's key (a Paraver event type), else None."""

    column: str
    whose: str
    own: int | None = None


class CounterColumns:
    """The columns given so far to a run's counters, and whose they are (``event type 42000050``, ``metric member
    3``)."""

    def __init__(self) -> None:
        self._taken: dict[str, Claim] = {}  # column in lower case -> its claim

    def owner(self, name: str) -> Claim | None:
        """The claim of the counter holding ``name`` in any letter case, or None."""
        return self._taken.get(name.lower())

    def claim(self, wanted: str, fallback: str, whose: str, own: int | None = None) -> str:
        """Give ``whose`` the column ``wanted``, else ``fallback``, else ``fallback_2``, ``_3`` ...: the first that
        no counter of the run holds in any letter case and that is no key column. ``own``: the counter's key, kept
        (:attr:`Claim.own`) when it gets ``wanted`` as the name it holds as its own."""
        column, n, fallback = wanted, 1, fallback.lstrip("_") or "counter"  # never private: the loop ends
        while column.lower() in self._taken or is_reserved_column(column):
            n += 1
            column = fallback if n == 2 else f"{fallback}_{n - 1}"
        self._taken[column.lower()] = Claim(column, whose, own if column == wanted else None)
        return column

    def clash_note(self, fallback: str, column: str) -> str:
        """`` ('X' being event type N's column)`` when ``column`` is not ``fallback`` (a rename renamed again), else
        empty."""
        if column == fallback or (owner := self.owner(fallback)) is None:
            return ""
        return f" ({owner[0]!r} being {owner[1]}'s column)"
