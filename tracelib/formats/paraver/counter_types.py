"""Extrae event types of hardware counters: PAPI preset table and stable types for native/uncore counters.

Extrae numbers a PAPI preset counter ``42000000 + (preset code & 0xFFFF)`` where the preset code is its index in
PAPI's ``papiStdEventDefs.h`` (``PAPI_L1_DCM`` = 0 ... ``PAPI_TOT_INS`` = 0x32, ``PAPI_TOT_CYC`` = 0x3B,
``PAPI_REF_CYC`` = 0x6B). Native counters (``LONGEST_LAT_CACHE:MISS``) get a type in ``44000000..44999999`` and
uncore counters (names with ``::``, e.g. ``skx_unc_imc0::UNC_M_CAS_COUNT:RD``) one in ``46000000..46999999``;
Extrae's own numbers for them are per-installation hashes, so this catalogue derives a *stable* one from the
name (the same name always gets the same type, whatever other counters a trace has).
"""
from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.formats.paraver.event_types import NATIVE_BASE, PRESET_BASE, UNCORE_BASE
_RANGE = 1_000_000

#: PAPI preset names in papiStdEventDefs.h order (index = preset code) with a short description.
PAPI_PRESETS: tuple[tuple[str, str], ...] = (
    ("PAPI_L1_DCM", "L1D cache misses"), ("PAPI_L1_ICM", "L1I cache misses"),
    ("PAPI_L2_DCM", "L2D cache misses"), ("PAPI_L2_ICM", "L2I cache misses"),
    ("PAPI_L3_DCM", "L3D cache misses"), ("PAPI_L3_ICM", "L3I cache misses"),
    ("PAPI_L1_TCM", "L1 cache misses"), ("PAPI_L2_TCM", "L2 cache misses"),
    ("PAPI_L3_TCM", "L3 cache misses"), ("PAPI_CA_SNP", "Snoop Requests"),
    ("PAPI_CA_SHR", "Ex Acces shared CL"), ("PAPI_CA_CLN", "Ex Access clean CL"),
    ("PAPI_CA_INV", "Cache ln invalid"), ("PAPI_CA_ITV", "Cache ln intervene"),
    ("PAPI_L3_LDM", "L3 load misses"), ("PAPI_L3_STM", "L3 store misses"),
    ("PAPI_BRU_IDL", "Branch idle cycles"), ("PAPI_FXU_IDL", "IU idle cycles"),
    ("PAPI_FPU_IDL", "FPU idle cycles"), ("PAPI_LSU_IDL", "L/SU idle cycles"),
    ("PAPI_TLB_DM", "Data TLB misses"), ("PAPI_TLB_IM", "Instr TLB misses"),
    ("PAPI_TLB_TL", "Total TLB misses"), ("PAPI_L1_LDM", "L1 load misses"),
    ("PAPI_L1_STM", "L1 store misses"), ("PAPI_L2_LDM", "L2 load misses"),
    ("PAPI_L2_STM", "L2 store misses"), ("PAPI_BTAC_M", "BTAC miss"),
    ("PAPI_PRF_DM", "Prefetch miss"), ("PAPI_L3_DCH", "L3D cache hits"),
    ("PAPI_TLB_SD", "TLB shootdowns"), ("PAPI_CSR_FAL", "Failed store cond"),
    ("PAPI_CSR_SUC", "Good store cond"), ("PAPI_CSR_TOT", "Total store cond"),
    ("PAPI_MEM_SCY", "Stalled mem cycles"), ("PAPI_MEM_RCY", "Stalled rd cycles"),
    ("PAPI_MEM_WCY", "Stalled wr cycles"), ("PAPI_STL_ICY", "No instr issue"),
    ("PAPI_FUL_ICY", "Max instr issue"), ("PAPI_STL_CCY", "No instr done"),
    ("PAPI_FUL_CCY", "Max instr done"), ("PAPI_HW_INT", "Hdw interrupts"),
    ("PAPI_BR_UCN", "Uncond branch"), ("PAPI_BR_CN", "Cond branch"),
    ("PAPI_BR_TKN", "Cond branch taken"), ("PAPI_BR_NTK", "Cond br not taken"),
    ("PAPI_BR_MSP", "Cond br mspredictd"), ("PAPI_BR_PRC", "Cond br predicted"),
    ("PAPI_FMA_INS", "FMAs completed"), ("PAPI_TOT_IIS", "Instr issued"),
    ("PAPI_TOT_INS", "Instr completed"), ("PAPI_INT_INS", "Int instructions"),
    ("PAPI_FP_INS", "FP instructions"), ("PAPI_LD_INS", "Loads"),
    ("PAPI_SR_INS", "Stores"), ("PAPI_BR_INS", "Branches"),
    ("PAPI_VEC_INS", "Vector/SIMD instr"), ("PAPI_RES_STL", "Stalled res cycles"),
    ("PAPI_FP_STAL", "Stalled FPU cycles"), ("PAPI_TOT_CYC", "Total cycles"),
    ("PAPI_LST_INS", "L/S completed"), ("PAPI_SYC_INS", "Syncs completed"),
    ("PAPI_L1_DCH", "L1D cache hits"), ("PAPI_L2_DCH", "L2D cache hits"),
    ("PAPI_L1_DCA", "L1D cache accesses"), ("PAPI_L2_DCA", "L2D cache accesses"),
    ("PAPI_L3_DCA", "L3D cache accesses"), ("PAPI_L1_DCR", "L1D cache reads"),
    ("PAPI_L2_DCR", "L2D cache reads"), ("PAPI_L3_DCR", "L3D cache reads"),
    ("PAPI_L1_DCW", "L1D cache writes"), ("PAPI_L2_DCW", "L2D cache writes"),
    ("PAPI_L3_DCW", "L3D cache writes"), ("PAPI_L1_ICH", "L1I cache hits"),
    ("PAPI_L2_ICH", "L2I cache hits"), ("PAPI_L3_ICH", "L3I cache hits"),
    ("PAPI_L1_ICA", "L1I cache accesses"), ("PAPI_L2_ICA", "L2I cache accesses"),
    ("PAPI_L3_ICA", "L3I cache accesses"), ("PAPI_L1_ICR", "L1I cache reads"),
    ("PAPI_L2_ICR", "L2I cache reads"), ("PAPI_L3_ICR", "L3I cache reads"),
    ("PAPI_L1_ICW", "L1I cache writes"), ("PAPI_L2_ICW", "L2I cache writes"),
    ("PAPI_L3_ICW", "L3I cache writes"), ("PAPI_L1_TCH", "L1 cache hits"),
    ("PAPI_L2_TCH", "L2 cache hits"), ("PAPI_L3_TCH", "L3 cache hits"),
    ("PAPI_L1_TCA", "L1 cache accesses"), ("PAPI_L2_TCA", "L2 cache accesses"),
    ("PAPI_L3_TCA", "L3 cache accesses"), ("PAPI_L1_TCR", "L1 cache reads"),
    ("PAPI_L2_TCR", "L2 cache reads"), ("PAPI_L3_TCR", "L3 cache reads"),
    ("PAPI_L1_TCW", "L1 cache writes"), ("PAPI_L2_TCW", "L2 cache writes"),
    ("PAPI_L3_TCW", "L3 cache writes"), ("PAPI_FML_INS", "FPU multiply"),
    ("PAPI_FAD_INS", "FPU add"), ("PAPI_FDV_INS", "FPU divide"),
    ("PAPI_FSQ_INS", "FPU square root"), ("PAPI_FNV_INS", "FPU inverse"),
    ("PAPI_FP_OPS", "FP operations"), ("PAPI_SP_OPS", "SP operations"),
    ("PAPI_DP_OPS", "DP operations"), ("PAPI_VEC_SP", "SP Vector/SIMD instr"),
    ("PAPI_VEC_DP", "DP Vector/SIMD instr"), ("PAPI_REF_CYC", "Reference cycles"),
)
PAPI_CODE: dict[str, int] = {name: code for code, (name, _) in enumerate(PAPI_PRESETS)}
PAPI_DESCRIPTION: dict[str, str] = dict(PAPI_PRESETS)


@dataclass(frozen=True)
class CounterInfo:
    """One counter: its name, Extrae event type, kind (preset | native | uncore) and a short description."""

    name: str
    event_type: int
    kind: str
    description: str


def counter_kind(name: str) -> str:
    """``preset`` for PAPI presets, ``uncore`` for names with ``::``, else ``native``."""
    if name in PAPI_CODE:
        return "preset"
    return "uncore" if "::" in name else "native"


def _hashed_type(name: str, base: int, taken: set[int]) -> int:
    """A stable type in ``base .. base + 999999`` from the name's CRC32; probes forward on a collision."""
    offset = zlib.crc32(name.encode("utf-8")) % _RANGE
    for k in range(_RANGE):
        t = base + (offset + k) % _RANGE
        if t not in taken:
            return t
    raise BadInputError(f"no free Extrae event type left for counter {name!r}")


def extrae_type(name: str) -> int:
    """The Extrae event type of one counter (presets exact, natives/uncore stable by name)."""
    kind = counter_kind(name)
    if kind == "preset":
        return PRESET_BASE + (PAPI_CODE[name] & 0xFFFF)
    return _hashed_type(name, UNCORE_BASE if kind == "uncore" else NATIVE_BASE, set())


def check_counter_name(name: str) -> None:
    """A counter name must be one word: the ``.pcf`` label's first word is its name."""
    if not name or any(ch.isspace() for ch in name) or name.startswith("("):
        raise BadInputError(f"counter name {name!r} cannot be written to a .pcf (empty, whitespace or leading '(')")


def catalogue(names: Iterable[str], overrides: Mapping[str, int] | None = None,
              descriptions: Mapping[str, str] | None = None) -> list[CounterInfo]:
    """Counter infos for ``names`` (in their order) with distinct event types.

    ``overrides`` keeps known types (e.g. the ones a source trace used); the others come from :func:`extrae_type`,
    probing past any type already taken so that two counters never share one.
    """
    overrides = dict(overrides or {})
    descriptions = dict(descriptions or {})
    names = list(dict.fromkeys(names))
    for n in names:
        check_counter_name(n)
    taken: set[int] = {overrides[n] for n in names if n in overrides}
    out: list[CounterInfo] = []
    for n in names:
        kind = counter_kind(n)
        if n in overrides:
            t = overrides[n]
        elif kind == "preset":
            t = extrae_type(n)
            if t in taken:
                raise BadInputError(f"counter {n!r}: event type {t} is already used by another counter")
        else:
            t = _hashed_type(n, UNCORE_BASE if kind == "uncore" else NATIVE_BASE, taken)
        taken.add(t)
        desc = (
            descriptions.get(n)
            or PAPI_DESCRIPTION.get(n)
            or ("Uncore counter" if kind == "uncore" else "Native counter")
        )
        out.append(CounterInfo(n, t, kind, desc))
    return out
