"""``.pcf`` files: names of states, event types and event values.

Counter labels come in several styles, all handled: ``42000050 PAPI_TOT_INS [Instr completed]``,
``42000050 (PAPI_TOT_INS) Instr completed`` and ``42000050 PAPI_TOT_INS ([Instr completed])``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from synthtrace.tracelib.errors import TraceFormatError

COUNTER_TYPE_MIN = 42_000_000
COUNTER_TYPE_MAX = 48_000_000  # exclusive: 42/43 presets, 44/45 natives, 46/47 uncore
ACTIVE_COUNTER_SET = 41_999_999

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


@dataclass
class PcfCatalog:
    """Names from a ``.pcf`` file; empty when the trace came without one."""

    states: dict[int, str] = field(default_factory=dict)
    event_labels: dict[int, str] = field(default_factory=dict)
    event_values: dict[int, dict[int, str]] = field(default_factory=dict)
    event_gradient: dict[int, int] = field(default_factory=dict)
    event_lines: dict[int, int] = field(default_factory=dict)  # 1-based line of each event type's label

    def counter_name(self, event_type: int) -> str:
        """Counter column name: the ``.pcf`` name, else the numeric type as text."""
        label = self.event_labels.get(event_type)
        return counter_name_from_label(label) if label else str(event_type)

    def value_name(self, event_type: int, value: int) -> str | None:
        return self.event_values.get(event_type, {}).get(value)


def read_pcf(path: str | Path) -> PcfCatalog:
    """Parse a ``.pcf`` file. Only the STATES and EVENT_TYPE sections are interpreted."""
    cat = PcfCatalog()
    section: str | None = None
    types_in_block: list[int] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.strip()
            if not line:
                if section == "VALUES":
                    section = None
                elif section == "EVENT_TYPE" and types_in_block:
                    section = None
                continue
            if line in {"STATES", "EVENT_TYPE", "VALUES", "STATES_COLOR", "GRADIENT_COLOR", "GRADIENT_NAMES",
                        "DEFAULT_OPTIONS", "DEFAULT_SEMANTIC"}:
                if line == "EVENT_TYPE":
                    types_in_block = []
                elif line == "VALUES" and section != "EVENT_TYPE":
                    raise TraceFormatError(path, lineno, "VALUES outside an EVENT_TYPE block")
                section = line
                continue
            if section == "STATES":
                parts = line.split(None, 1)
                if parts[0].isdigit():
                    cat.states[int(parts[0])] = parts[1] if len(parts) > 1 else ""
            elif section == "EVENT_TYPE":
                parts = line.split(None, 2)
                if len(parts) < 2 or not parts[0].lstrip("-").isdigit() or not parts[1].isdigit():
                    raise TraceFormatError(path, lineno, f"expected '<gradient> <type> <label>' in EVENT_TYPE, got {line!r}")
                etype = int(parts[1])
                cat.event_labels[etype] = parts[2] if len(parts) > 2 else ""
                cat.event_gradient[etype] = int(parts[0])
                cat.event_lines[etype] = lineno
                types_in_block.append(etype)
            elif section == "VALUES":
                parts = line.split(None, 1)
                if not parts[0].lstrip("-").isdigit():
                    raise TraceFormatError(path, lineno, f"expected '<value> <label>' in VALUES, got {line!r}")
                for etype in types_in_block:
                    cat.event_values.setdefault(etype, {})[int(parts[0])] = parts[1] if len(parts) > 1 else ""
    _check_counter_names(cat, path)
    return cat


def _check_counter_names(cat: PcfCatalog, path: str | Path) -> None:
    """Two counter types with one name would fold two counters into one column."""
    seen: dict[str, int] = {}
    for etype in sorted(t for t in cat.event_labels if is_counter_type(t)):
        name = cat.counter_name(etype)
        if name in seen and not (is_absolute_counter(etype) != is_absolute_counter(seen[name])):
            raise TraceFormatError(path, cat.event_lines[etype],
                                   f"counter name {name!r} given to event types {seen[name]} and {etype}")
        seen.setdefault(name, etype)
