"""What a PAPI preset costs on a PMU: the native events PAPI programs for it (issue 24 item 7).

A derived preset (PAPI_FP_OPS, PAPI_VEC_DP, PAPI_L1_TCM, ...) is a sum or formula of several native events and
takes one programmable counter for each; presets recorded together share the native events they have in common.
The facts, per architecture, are in ``papi_presets.toml`` (from PAPI's own preset table); a machine profile names
its architecture in ``[pmu] papi``. A name that is no PAPI preset is a native event of its own.
"""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from synthtrace.tracelib.errors import BadInputError

TABLE = Path(__file__).with_name("papi_presets.toml")
#: the suffix of the second counter of a native event read on a counter pair
PAIR_SUFFIX = " (paired counter)"


@dataclass(frozen=True)
class PresetTable:
    """The PAPI presets one architecture defines, each as the native events it takes counters for."""

    arch: str
    label: str
    presets: dict[str, tuple[str, ...]]
    paired: frozenset[str] = frozenset()  # native events read on two counters (AMD's large-increment events)

    def natives(self, counter: str) -> tuple[str, ...] | None:
        """The counters ``counter`` occupies, one entry per programmable counter (a paired native event twice), or
        None when it is a PAPI preset this architecture does not define. Other names are native events."""
        if not counter.startswith("PAPI_"):
            events: tuple[str, ...] = (counter,)
        elif counter in self.presets:
            events = self.presets[counter]
        else:
            return None
        return tuple(x for e in events for x in ((e, e + PAIR_SUFFIX) if e in self.paired else (e,)))


@functools.cache
def _table() -> dict:
    with TABLE.open("rb") as f:
        return tomllib.load(f)


def architectures() -> list[str]:
    return sorted(_table())


def preset_table(arch: str) -> PresetTable:
    """The presets of ``arch`` (a name of :func:`architectures`, as in a profile's ``[pmu] papi``)."""
    data = _table().get(arch)
    if data is None:
        raise BadInputError(f"no PAPI preset table for the PMU {arch!r} (known: {', '.join(architectures())})")
    return PresetTable(arch, data["label"], {k: tuple(v) for k, v in data["presets"].items()},
                       frozenset(data.get("paired", ())))
