"""Machine profiles: the roofs that metrics and archetypes compare against (DESIGN §7).

A profile is a small TOML file (see ``tracelib/domain/machines/*.toml``)::

    name = "..."; sockets = 2; cores_per_socket = 56; frequency_ghz = 2.0; line_bytes = 64
    [peak_flops_per_cycle]  scalar = 4.0, avx2 = 16.0, avx512 = 32.0     # FLOP/cycle/core by ISA width
    [bandwidth_gbs]         dram_per_socket, l1_per_core, l2_per_core, l3_per_core, network_per_link   # GB/s
    [network]               latency_us, links_per_node
    [pmu]                   programmable = 4, fixed = ["ins", "cyc", "ref_cyc"], papi = "skx"   # counter slots
    [caches_kib]            l1d_per_core, l2_per_core, l3_per_socket, ...                          # KiB

A key outside these is refused with the file and the key (a misspelt key would otherwise leave a default unseen).

``[pmu]``: the programmable counters one hardware thread reads at once, and the quantities fixed-function
counters record without taking a slot (roles of :mod:`synthtrace.tracelib.domain.counters`: Intel ``ins``, ``cyc``,
``ref_cyc``; AMD Zen none; Arm the cycle counter). The counter planner reads it.

Which profile: ``--machine`` (a preset name or a TOML file), else a ``machine.toml`` beside the traces
(:func:`resolve_machine`), else the default preset.

Units inside :class:`Machine` methods are SI: FLOP/s, bytes/s, seconds.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.toml_file import read_toml

PRESET_DIR = Path(__file__).with_name("machines")
DEFAULT_PRESET = "marenostrum5-gpp"
#: the file a cluster drops beside its traces to name its nodes
BESIDE_FILE = "machine.toml"
#: ISA widths from narrowest to widest; the widest one a profile lists is its peak.
ISA_ORDER = ("scalar", "sse", "neon", "avx2", "sve", "avx512")
#: cache levels with a bandwidth roof, nearest the core first
CACHE_LEVELS = ("l1", "l2", "l3")


class MachineProfileError(BadInputError):
    """A machine profile cannot be read or lacks a required value."""


@dataclass(frozen=True)
class Machine:
    """One compute node's roofs. Bandwidths in GB/s as in the TOML; use the methods for bytes/s."""

    name: str
    sockets: int
    cores_per_socket: int
    frequency_ghz: float
    peak_flops_per_cycle: dict[str, float]
    bandwidth_gbs: dict[str, float]
    line_bytes: int = 64
    network_latency_us: float = 1.0
    links_per_node: int = 1
    caches_kib: dict[str, float] = field(default_factory=dict)
    source: str = ""
    pmu_programmable: int | None = None  # programmable counters per hardware thread (None: unknown)
    pmu_fixed: tuple[str, ...] = ()  # roles recorded by fixed-function counters
    pmu_papi: str | None = None  # the PMU's name in PAPI's preset tables (papi_presets.toml), None: unknown

    @property
    def label(self) -> str:
        """How reports name the profile: its name and where it came from (preset or file)."""
        return f"{self.name} ({self.source})"

    # ---------------------------------------------------------------- compute
    @property
    def cores_per_node(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def widest_isa(self) -> str:
        return [i for i in ISA_ORDER if i in self.peak_flops_per_cycle][-1]

    def peak_flops_core(self, isa: str | None = None) -> float:
        """Peak FLOP/s of one core for an ISA width (default: the widest the machine has)."""
        isa = isa or self.widest_isa
        if isa not in self.peak_flops_per_cycle:
            raise MachineProfileError(f"{self.name}: no peak for ISA {isa!r} (has {sorted(self.peak_flops_per_cycle)})")
        return self.peak_flops_per_cycle[isa] * self.frequency_ghz * 1e9

    @property
    def vector_lanes(self) -> float:
        """Double-precision FLOPs one widest-vector FP instruction does relative to a scalar one."""
        return self.peak_flops_per_cycle[self.widest_isa] / self.peak_flops_per_cycle.get("scalar", 1.0)

    def peak_ips_core(self, ipc: float = 4.0) -> float:
        """Instructions/s of one core at a sustained IPC (instruction roofline ceiling)."""
        return ipc * self.frequency_ghz * 1e9

    # ---------------------------------------------------------------- memory
    def dram_bw_socket(self) -> float:
        """Sustained DRAM bandwidth of one socket, bytes/s."""
        return self.bandwidth_gbs["dram_per_socket"] * 1e9

    def dram_share(self, ranks_per_socket: float | None = None) -> float:
        """One rank's (core's) share of its socket's DRAM bandwidth, bytes/s.

        ``ranks_per_socket`` defaults to a fully populated socket (one rank per core).
        """
        n = ranks_per_socket if ranks_per_socket and ranks_per_socket > 0 else self.cores_per_socket
        return self.dram_bw_socket() / min(float(n), float(self.cores_per_socket))

    def cache_bw_core(self, level: str) -> float | None:
        """Bandwidth of one core from a cache level (``l1``, ``l2``, ``l3``), bytes/s; None if unknown."""
        v = self.bandwidth_gbs.get(f"{level}_per_core")
        return None if v is None else v * 1e9

    def ridge(self, bandwidth: float, isa: str | None = None) -> float:
        """Operational intensity (FLOP/byte) where a bandwidth roof meets a core's compute peak."""
        return self.peak_flops_core(isa) / bandwidth

    # ---------------------------------------------------------------- network
    def link_bw(self) -> float:
        """Bandwidth of one network link, bytes/s."""
        return self.bandwidth_gbs["network_per_link"] * 1e9

    @property
    def network_latency_s(self) -> float:
        return self.network_latency_us * 1e-6

    def as_dict(self) -> dict:
        return {"name": self.name, "sockets": self.sockets, "cores_per_socket": self.cores_per_socket,
                "frequency_ghz": self.frequency_ghz, "peak_flops_per_cycle": dict(self.peak_flops_per_cycle),
                "bandwidth_gbs": dict(self.bandwidth_gbs), "line_bytes": self.line_bytes,
                "network_latency_us": self.network_latency_us, "links_per_node": self.links_per_node,
                "pmu": {"programmable": self.pmu_programmable, "fixed": list(self.pmu_fixed)}}


def presets() -> dict[str, Path]:
    """Preset name -> TOML file of the profiles that ship with synthtrace."""
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.toml"))}


#: plausible range (inclusive) of every number a profile holds, by key: a value outside it (0, a negative count,
#: NaN, inf, 1e300 GHz) is refused, never carried into a roof where it becomes a traceback or a silent nonsense
_RANGES: dict[str, tuple[float, float]] = {
    "sockets": (1, 1024), "cores_per_socket": (1, 1 << 16), "frequency_ghz": (0.01, 100.0),
    "line_bytes": (1, 1 << 16), "latency_us": (1e-6, 1e7), "links_per_node": (1, 1024),
    "peak_flops_per_cycle": (1e-6, 1e6), "bandwidth_gbs": (1e-6, 1e9), "caches_kib": (1e-6, 1 << 40),
}
#: keys that count things: whole numbers
_WHOLE = frozenset({"sockets", "cores_per_socket", "line_bytes", "links_per_node"})
#: the keys a profile may hold, per table ("" the top level; None: any key matching ``_CACHE_KEY``)
_KEYS: dict[str, tuple[str, ...] | None] = {
    "": ("name", "sockets", "cores_per_socket", "frequency_ghz", "line_bytes", "peak_flops_per_cycle",
         "bandwidth_gbs", "network", "caches_kib", "pmu"),
    "peak_flops_per_cycle": ISA_ORDER,
    "bandwidth_gbs": ("dram_per_socket", "network_per_link", *(f"{c}_per_core" for c in CACHE_LEVELS)),
    "network": ("latency_us", "links_per_node"),
    "pmu": ("programmable", "fixed", "papi"),
    "caches_kib": None,
}
#: a cache size's key: level (l1d, l1i, l2, l3, l4) and what it is per
_CACHE_KEY = re.compile(r"l(1[di]?|[234])_per_(core|socket|node)")


def _check_keys(d: dict, where: str) -> None:
    """Refuse a key no profile has (a misspelt ``cores_per_sockets`` would leave the default in force unseen)."""
    for table, known in _KEYS.items():
        values = d if not table else d.get(table)
        if not isinstance(values, dict):
            continue  # a missing or mistyped table is _table's to report
        for key in values:
            if known is None and _CACHE_KEY.fullmatch(str(key)):
                continue
            if known is not None and key in known:
                continue
            hint = difflib.get_close_matches(str(key), list(known or ()), n=1, cutoff=0.6)
            expected = (f"did you mean {hint[0]!r}?" if hint else f"known: {', '.join(known)}" if known
                        else "cache sizes are l1d/l1i/l2/l3/l4_per_core/socket/node")
            raise MachineProfileError(f"{where}{f' [{table}]' if table else ''}: unknown key {key!r} ({expected})")


def _table(d: dict, key: str, where: str, required: bool = False) -> dict:
    """The TOML table ``[key]`` of ``d`` (empty when absent and not required)."""
    if key not in d and not required:
        return {}
    v = d.get(key)
    if not isinstance(v, dict):
        raise MachineProfileError(f"{where}: [{key}] must be a table" + (" (it is missing)" if v is None else
                                  f", not {v!r}"))
    return v


def _number(table: dict, key: str, where: str, default: float | None = None, kind: str | None = None) -> float:
    """``table[key]`` checked against its :data:`_RANGES` entry (``kind``: the entry, when not ``key``); a whole
    number for the counts of :data:`_WHOLE`. Missing and no default: :class:`MachineProfileError`."""
    if key not in table:
        if default is None:
            raise MachineProfileError(f"{where}: missing {key!r}")
        return default
    v, kind = table[key], kind or key
    low, high = _RANGES[kind]
    whole = kind in _WHOLE
    if isinstance(v, bool) or not isinstance(v, int if whole else (int, float)):
        raise MachineProfileError(f"{where}: {key} = {v!r} must be a {'whole number' if whole else 'number'}")
    if not low <= v <= high:  # NaN compares false: refused too
        raise MachineProfileError(f"{where}: {key} = {v!r} must be positive, from {low:g} to {high:g}")
    return v


def _numbers(d: dict, key: str, where: str, required: bool = False) -> dict[str, float]:
    """The table ``[key]`` of numbers (GB/s, FLOP/cycle, KiB), each checked against ``key``'s range."""
    table = _table(d, key, where, required)
    return {k: float(_number(table, k, f"{where} [{key}]", kind=key)) for k in table}


def machine_from_dict(d: dict, where: str = "machine profile") -> Machine:
    """Build a :class:`Machine` from the parsed TOML table; raises :class:`MachineProfileError` naming ``where``
    (the file) and the key for any missing, mistyped, implausible or unknown value (security, issue 23 attack F1)."""
    _check_keys(d, where)
    peaks = _numbers(d, "peak_flops_per_cycle", where, required=True)
    if not any(i in peaks for i in ISA_ORDER):
        raise MachineProfileError(f"{where}: [peak_flops_per_cycle] needs at least one of {', '.join(ISA_ORDER)}")
    bw = _numbers(d, "bandwidth_gbs", where, required=True)
    for key in ("dram_per_socket", "network_per_link"):
        if key not in bw:
            raise MachineProfileError(f"{where} [bandwidth_gbs]: missing {key!r}")
    net = _table(d, "network", where)
    pmu = _table(d, "pmu", where)
    prog = pmu.get("programmable")
    if prog is not None and (not isinstance(prog, int) or isinstance(prog, bool) or not 1 <= prog <= 1024):
        raise MachineProfileError(f"{where} [pmu]: programmable must be a whole number from 1 to 1024")
    fixed = pmu.get("fixed", [])
    if not isinstance(fixed, list) or not all(isinstance(x, str) for x in fixed):
        raise MachineProfileError(f"{where} [pmu]: fixed must be a list of counter roles (e.g. [\"ins\", \"cyc\"])")
    papi = pmu.get("papi")
    if papi is not None and not isinstance(papi, str):
        raise MachineProfileError(f"{where} [pmu]: papi must be the PMU's name in PAPI's tables (e.g. \"skx\")")
    name = d.get("name")
    if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > 200:
        raise MachineProfileError(f"{where}: name must be printable text of 1 to 200 characters"
                                  + (" (it is missing)" if name is None else ""))
    return Machine(
        name=name,
        sockets=int(_number(d, "sockets", where)),
        cores_per_socket=int(_number(d, "cores_per_socket", where)),
        frequency_ghz=float(_number(d, "frequency_ghz", where)),
        peak_flops_per_cycle=peaks,
        bandwidth_gbs=bw,
        line_bytes=int(_number(d, "line_bytes", where, default=64)),
        network_latency_us=float(_number(net, "latency_us", f"{where} [network]", default=1.0)),
        links_per_node=int(_number(net, "links_per_node", f"{where} [network]", default=1)),
        caches_kib=_numbers(d, "caches_kib", where),
        source=where,
        pmu_programmable=prog,
        pmu_fixed=tuple(fixed),
        pmu_papi=papi,
    )


def load_machine(spec: str | Path | None = None) -> Machine:
    """Load a profile: a TOML file path, a preset name (see :func:`presets`) or None (default)."""
    if spec is None:
        spec = DEFAULT_PRESET
    path = Path(spec)
    known = presets()
    if not path.is_file():
        if str(spec) not in known:
            close = difflib.get_close_matches(str(spec), list(known), n=1, cutoff=0.5)
            raise MachineProfileError(f"{spec}: no such machine profile file or preset"
                                      + (f" (did you mean {close[0]}?)" if close else "")
                                      + f" (presets: {', '.join(known)})")
        path = known[str(spec)]
    data = read_toml(path, MachineProfileError, "machine profile")
    where = f"preset {path.stem}" if path.parent == PRESET_DIR else str(path)
    return machine_from_dict(data, where)


def beside(paths: list[str | Path]) -> Path | None:
    """The :data:`BESIDE_FILE` in the folder of the traces (or one of its parents up to two levels), if one
    folder's file is shared by all of them; None when there is none."""
    found = set()
    for p in paths:
        folder = Path(p).parent
        hit = next((d / BESIDE_FILE for d in (folder, folder.parent, folder.parent.parent)
                    if (d / BESIDE_FILE).is_file()), None)
        found.add(hit)
    hits = {f for f in found if f is not None}
    if len(hits) > 1:
        raise MachineProfileError(
            f"the traces have different {BESIDE_FILE} files ({', '.join(sorted(map(str, hits)))}): "
            "choose one with --machine"
        )
    return next(iter(hits), None)


def resolve_machine(spec: str | Path | None, trace_paths: list[str | Path] = ()) -> Machine:
    """``--machine`` when given, else the :data:`BESIDE_FILE` beside the traces, else the default preset."""
    if spec is not None:
        return load_machine(spec)
    found = beside(list(trace_paths))
    return load_machine(found if found is not None else None)
