"""What a trace says of the program that produced it: its binary and its own symbols (issue 28 item 3).

Runs of one program at different scales or under different file names carry the same binary and the same
user-level names; unrelated programs do not. Sources:

- Paraver (Extrae): the ``.pcf`` value tables of the caller names (event types 70000000-70000099, 30000000-30000099
  sampled), of the caller lines (80000000-80000099: ``line (file, binary)``), of OpenMP / pthread / user functions
  (60000018-60000024, lines 60000118-60000124) and of the binary's data objects (41000000-41999999:
  ``name [address range]``).
- OTF2 (Score-P): the names of the non-MPI region definitions; the executable's name, from the region of the
  whole program.

Names that every binary of a toolchain carries (reserved identifiers ``_x``/``__x`` other than mangled C++ ``_Z``,
versioned libc symbols ``x@@GLIBC``, compiler-numbered static locals ``x.1234``, MPI / OpenMP runtime objects, ``main``,
the measurement system's own regions in capitals, ``MEASUREMENT OFF``) are not the program's and are left out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: Extrae event-type ranges whose values name functions ([lo, hi) each)
_FUNCTION_TYPES = ((70000000, 70000100), (30000000, 30000100), (60000018, 60000025))
#: ... whose values are ``line (file, binary)``
_LINE_TYPES = ((80000000, 80000100), (30000100, 30000200), (60000118, 60000125))
#: ... whose values name the binary's data objects (``name [0x..-0x..]``)
_OBJECT_TYPES = ((41000000, 42000000),)
_PLACEHOLDERS = {"", "end", "unresolved", "_not_found", "main"}
_RUNTIME = re.compile(r"^(ompi_|mpi_|pmpi_|mpir_|mpich|omp_|gomp_|kmp_|__kmp|i_mpi|mca_|opal_)", re.IGNORECASE)
_LINE = re.compile(r"\((?P<file>[^,()]+),\s*(?P<binary>[^()]+)\)\s*$")


@dataclass(frozen=True)
class ProgramSymbols:
    """The binary's name (None when the trace does not say) and the program's own symbol names."""

    binary: str | None
    symbols: frozenset[str]


def _in(event_type: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= event_type < hi for lo, hi in ranges)


def _own(name: str, *, data_object: bool = False) -> bool:
    """Whether ``name`` is the program's own (not the toolchain's or the runtime's)."""
    if name.lower() in _PLACEHOLDERS or "@@" in name or _RUNTIME.match(name) or name.upper().startswith("MPI_"):
        return False
    if name.startswith("_") and not name.startswith("_Z"):
        return False
    if re.search(r"\bmain\s*\(", name) or re.fullmatch(r"[A-Z][A-Z _]+", name):  # main(...), Score-P's own
        return False
    return not (data_object and re.search(r"\.\d+$", name))


_LIBRARY = re.compile(r"\.so(\.|$)")


def _is_library(binary: str) -> bool:
    return bool(_LIBRARY.search(binary)) or binary.startswith("ld-")


def paraver_symbols(event_values: dict[int, dict[int, str]]) -> ProgramSymbols:
    """:class:`ProgramSymbols` from a ``.pcf``'s value tables (event type -> value -> label)."""
    symbols: set[str] = set()
    binaries: dict[str, int] = {}
    for etype, values in event_values.items():
        if _in(etype, _FUNCTION_TYPES) or _in(etype, _OBJECT_TYPES):
            obj = _in(etype, _OBJECT_TYPES)
            symbols.update(n for n in (re.sub(r"\s*\[[^\]]*\]\s*$", "", v).strip() for v in values.values())
                           if _own(n, data_object=obj))
        elif _in(etype, _LINE_TYPES):
            for v in values.values():
                if (m := _LINE.search(v)) and not _is_library(b := m["binary"].strip()) and b != "Unresolved":
                    binaries[b] = binaries.get(b, 0) + 1
                    if (f := m["file"].strip()) not in (".", "Unresolved", "_NOT_Found"):
                        symbols.add(f"file:{f}")
    binary = max(sorted(binaries), key=lambda b: binaries[b]) if binaries else None
    return ProgramSymbols(binary, frozenset(symbols))


def region_symbols(region_names: list[str], is_mpi: list[bool], binary: str | None = None) -> ProgramSymbols:
    """:class:`ProgramSymbols` from OTF2 region definitions (names, and whether each is an MPI region) and the
    executable the archive records (``binary``; attack 11 E3: Score-P archives named ``scorep-<date>_<id>`` were one
    app, and one experiment, per run)."""
    return ProgramSymbols(binary, frozenset(n for n, mpi in zip(region_names, is_mpi)
                                          if not mpi and not n.startswith("region_") and _own(n)))


def program_symbols(source: object) -> ProgramSymbols:
    """:class:`ProgramSymbols` of an opened trace (Paraver: its ``.pcf``; OTF2: its region definitions); empty for
    a source that carries neither."""
    pcf = getattr(source, "pcf", None)
    if pcf is not None:
        return paraver_symbols(pcf.event_values)
    defs = getattr(source, "defs", None)
    if defs is not None:
        return region_symbols(list(defs.region_names), [bool(x) for x in defs.region_is_mpi],
                              defs.program)
    return ProgramSymbols(None, frozenset())
