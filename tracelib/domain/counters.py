"""Counter catalogue: which trace counter columns measure which hardware quantity (DESIGN §7).

Traces name counters the way their tool recorded them: PAPI presets (``PAPI_L3_TCM``), native events
(``LONGEST_LAT_CACHE:MISS``), uncore events with a PMU prefix (``skx_unc_imc0::UNC_M_CAS_COUNT:RD:cpu=0``).
Metrics are written against *roles* (``ins``, ``llc_miss``, ``dram_cas``...); :func:`resolve` maps a frame's
columns to roles, and :func:`role_expr` gives one Polars expression per role (NULL where no counter is there).

Each role lists its aliases in order of preference; the first present column wins. Roles marked ``summed``
(uncore CAS counts of several memory controllers, FP_ARITH widths) add every matching column instead.
This is the one place in synthtrace that knows counter names.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

import polars as pl

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.printable import clipped


@dataclass(frozen=True)
class Role:
    """A hardware quantity and the counter names that measure it.

    ``aliases`` are exact column names in order of preference; ``patterns`` are regular expressions matched
    against the whole column name (used for uncore counters whose names carry PMU and cpu qualifiers);
    with ``summed`` every matching column is added up (e.g. the CAS counts of all memory controllers).
    """

    name: str
    description: str
    aliases: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    summed: bool = False

    def matches(self, columns: list[str]) -> list[str]:
        """The columns of ``columns`` measuring this role: all matches if summed, else the preferred one."""
        hits = [a for a in self.aliases if a in columns]
        if self.patterns:
            rx = [re.compile(p, re.IGNORECASE) for p in self.patterns]
            hits += [c for c in columns if c not in hits and any(r.fullmatch(c) for r in rx)]
        if not hits:
            return []
        return hits if self.summed else hits[:1]


def _r(name: str, description: str, *aliases: str, patterns: tuple[str, ...] = (), summed: bool = False) -> Role:
    return Role(name, description, tuple(aliases), patterns, summed)


#: Every role synthtrace derives metrics from. Order inside a role = preference.
ROLES: dict[str, Role] = {r.name: r for r in [
    _r("ins", "instructions retired", "PAPI_TOT_INS", "INST_RETIRED:ANY", "INST_RETIRED:ANY_P",
       "INST_RETIRED", "INSTRUCTIONS_RETIRED", "instructions"),
    _r("cyc", "core cycles (unhalted, at actual frequency)", "PAPI_TOT_CYC", "CPU_CLK_UNHALTED:THREAD_P",
       "CPU_CLK_UNHALTED:THREAD", "CPU_CLK_THREAD_UNHALTED:THREAD_P", "CPU_CLK_UNHALTED", "cycles"),
    _r("ref_cyc", "reference cycles (at nominal frequency)", "PAPI_REF_CYC", "CPU_CLK_UNHALTED:REF_TSC",
       "CPU_CLK_UNHALTED:REF_P", "ref-cycles"),
    _r("stall_cyc", "cycles stalled on any resource", "PAPI_RES_STL", "RESOURCE_STALLS", "RESOURCE_STALLS:ANY",
       "CYCLE_ACTIVITY:STALLS_TOTAL", "PAPI_STL_ICY"),
    _r("l1_dcm", "L1 data-cache misses", "PAPI_L1_DCM", "L1D:REPLACEMENT", "L1D_REPLACEMENT", "PAPI_L1_TCM"),
    _r("l1_icm", "L1 instruction-cache misses", "PAPI_L1_ICM", "ICACHE:MISSES", "ICACHE_64B:IFTAG_MISS",
       "ICACHE_16B:IFDATA_STALL", "FRONTEND_RETIRED:L1I_MISS", "L1I:MISSES"),
    _r("l2_dcm", "L2 misses (data, else total)", "PAPI_L2_DCM", "PAPI_L2_TCM", "L2_RQSTS:MISS",
       "L2_RQSTS:DEMAND_DATA_RD_MISS", "L2_LINES_IN:ALL"),
    _r("l3_tcm", "last-level-cache misses", "PAPI_L3_TCM", "LONGEST_LAT_CACHE:MISS", "LLC_MISSES",
       "LLC-LOAD-MISSES", "PAPI_L3_DCM", "PAPI_L3_LDM"),
    _r("br_ins", "branch instructions retired", "PAPI_BR_INS", "BR_INST_RETIRED:ALL_BRANCHES",
       "BR_INST_RETIRED", "PAPI_BR_CN"),
    _r("br_msp", "mispredicted branches", "PAPI_BR_MSP", "BR_MISP_RETIRED:ALL_BRANCHES", "BR_MISP_RETIRED"),
    _r("itlb_miss", "instruction-TLB misses", "PAPI_TLB_IM", "ITLB_MISSES:WALK_COMPLETED",
       "ITLB_MISSES:MISS_CAUSES_A_WALK", "ITLB_MISSES"),
    _r("dtlb_miss", "data-TLB misses", "PAPI_TLB_DM", "DTLB_LOAD_MISSES:WALK_COMPLETED"),
    _r("ld_ins", "load instructions", "PAPI_LD_INS", "MEM_INST_RETIRED:ALL_LOADS", "MEM_UOPS_RETIRED:ALL_LOADS"),
    _r("sr_ins", "store instructions", "PAPI_SR_INS", "MEM_INST_RETIRED:ALL_STORES", "MEM_UOPS_RETIRED:ALL_STORES"),
    _r("fp_ins", "floating-point instructions (scalar and vector)", "PAPI_FP_INS", "FP_ARITH_INST_RETIRED:ANY",
       "FP_ARITH:ANY"),
    _r("vec_ins", "vector (SIMD) floating-point instructions", "PAPI_VEC_INS", "PAPI_VEC_DP", "PAPI_VEC_SP",
       "FP_ARITH_INST_RETIRED:VECTOR", "FP_ARITH:VECTOR"),
    _r("fp_ops", "floating-point operations (FLOPs)", "PAPI_DP_OPS", "PAPI_FP_OPS", "PAPI_SP_OPS"),
    _r("dram_cas", "DRAM CAS commands (reads + writes, all memory controllers; 64 bytes each)",
       "UNC_M_CAS_COUNT:ALL", "DRAM_CAS", patterns=(r"(.*::)?UNC_M_CAS_COUNT:(RD|WR|ALL)(:.*)?",),
       summed=True),
]}

#: FP_ARITH_INST_RETIRED width classes: column suffix -> (FLOPs per instruction, is vector).
FP_ARITH_CLASSES: dict[str, tuple[int, bool]] = {
    "SCALAR_DOUBLE": (1, False), "SCALAR_SINGLE": (1, False),
    "128B_PACKED_DOUBLE": (2, True), "128B_PACKED_SINGLE": (4, True),
    "256B_PACKED_DOUBLE": (4, True), "256B_PACKED_SINGLE": (8, True),
    "512B_PACKED_DOUBLE": (8, True), "512B_PACKED_SINGLE": (16, True),
}
_FP_ARITH = re.compile(r"FP_ARITH(?:_INST_RETIRED)?:(?P<cls>[A-Z0-9_]+)", re.IGNORECASE)

#: Counter a user should record to obtain a role, for ``insufficient_counters`` messages.
PREFERRED: dict[str, str] = {name: (role.aliases[0] if role.aliases else role.patterns[0])
                             for name, role in ROLES.items()}
PREFERRED["dram_cas"] = "UNC_M_CAS_COUNT:RD/WR"


@dataclass
class CounterMap:
    """How one frame's columns map onto roles (see :func:`resolve`)."""

    columns: dict[str, list[str]] = field(default_factory=dict)  # role -> matching columns
    fp_arith: dict[str, tuple[int, bool]] = field(default_factory=dict)  # column -> (FLOPs/ins, vector)

    def has(self, role: str) -> bool:
        """True if some column measures ``role`` (it may still be NULL on some rows of a merged frame)."""
        if role in ("fp_ins", "vec_ins", "fp_ops") and self.fp_arith:
            return True
        return bool(self.columns.get(role))

    def name(self, role: str) -> str:
        """The counter name to show for ``role``: the column used if present, else the one to record."""
        cols = self.columns.get(role)
        return "+".join(cols) if cols else PREFERRED.get(role, role)

    def expr(self, role: str) -> pl.Expr:
        """The role's counts per row as Float64 (NULL where the frame has no such counter or it is NULL)."""
        if role in ("fp_ins", "vec_ins", "fp_ops") and self.fp_arith and not self.columns.get(role):
            return _fp_arith_expr(self.fp_arith, role).alias(role)
        cols = self.columns.get(role)
        if not cols:
            return pl.lit(None, pl.Float64).alias(role)
        exprs = [pl.col(c).cast(pl.Float64) for c in cols]
        # summed roles: NULL only if every part is NULL (a memory controller without a sample adds nothing)
        out = exprs[0] if len(exprs) == 1 else pl.when(pl.any_horizontal(e.is_not_null() for e in exprs)).then(
            pl.sum_horizontal(exprs))
        return out.alias(role)


def _fp_arith_expr(classes: dict[str, tuple[int, bool]], role: str) -> pl.Expr:
    parts = []
    for col, (flops, vector) in classes.items():
        if role == "fp_ops":
            parts.append(pl.col(col).cast(pl.Float64) * flops)
        elif role == "fp_ins" or vector:
            parts.append(pl.col(col).cast(pl.Float64))
    if not parts:
        return pl.lit(0.0)
    return pl.when(pl.all_horizontal(p.is_not_null() for p in parts)).then(pl.sum_horizontal(parts))


def resolve(columns: list[str] | pl.DataFrame | pl.LazyFrame) -> CounterMap:
    """Map the counter columns of a bursts-like frame (or a list of column names) to roles."""
    if isinstance(columns, pl.LazyFrame):
        columns = columns.collect_schema().names()
    elif isinstance(columns, pl.DataFrame):
        columns = columns.columns
    cmap = CounterMap()
    for name, role in ROLES.items():
        hits = role.matches(list(columns))
        if hits:
            cmap.columns[name] = hits
    for c in columns:
        m = _FP_ARITH.fullmatch(c)
        if m and m.group("cls").upper() in FP_ARITH_CLASSES:
            cmap.fp_arith[c] = FP_ARITH_CLASSES[m.group("cls").upper()]
    return cmap


def canonical(counter: str) -> str | None:
    """The role a single counter name measures, or None (e.g. ``LONGEST_LAT_CACHE:MISS`` -> ``l3_tcm``)."""
    for name, role in ROLES.items():
        if role.matches([counter]):
            return name
    return None


def same_quantity(a: str, b: str) -> bool:
    """True if two counter names measure the same quantity (``PAPI_L3_TCM`` ~ ``LONGEST_LAT_CACHE:MISS``)."""
    ra = canonical(a)
    return ra is not None and ra == canonical(b)


# ------------------------------------------------------------------------------------------------ names
#: PAPI's preset events (papiStdEventDefs.h, PAPI 7)
PAPI_PRESETS: frozenset[str] = frozenset(f"PAPI_{n}" for n in """
L1_DCM L1_ICM L2_DCM L2_ICM L3_DCM L3_ICM L1_TCM L2_TCM L3_TCM CA_SNP CA_SHR CA_CLN CA_INV CA_ITV L3_LDM L3_STM
BRU_IDL FXU_IDL FPU_IDL LSU_IDL TLB_DM TLB_IM TLB_TL L1_LDM L1_STM L2_LDM L2_STM BTAC_M PRF_DM L3_DCH TLB_SD
CSR_FAL CSR_SUC CSR_TOT MEM_SCY MEM_RCY MEM_WCY STL_ICY FUL_ICY STL_CCY FUL_CCY HW_INT BR_UCN BR_CN BR_TKN BR_NTK
BR_MSP BR_PRC FMA_INS TOT_IIS TOT_INS INT_INS FP_INS LD_INS SR_INS BR_INS VEC_INS RES_STL FP_STAL TOT_CYC LST_INS
SYC_INS L1_DCH L2_DCH L1_DCA L2_DCA L3_DCA L1_DCR L2_DCR L3_DCR L1_DCW L2_DCW L3_DCW L1_ICH L2_ICH L3_ICH L1_ICA
L2_ICA L3_ICA L1_ICR L2_ICR L3_ICR L1_ICW L2_ICW L3_ICW L1_TCH L2_TCH L3_TCH L1_TCA L2_TCA L3_TCA L1_TCR L2_TCR
L3_TCR L1_TCW L2_TCW L3_TCW FML_INS FAD_INS FDV_INS FSQ_INS FNV_INS FP_OPS SP_OPS DP_OPS VEC_SP VEC_DP REF_CYC
""".split())
#: a native event as libpfm4/perf name them: ``[pmu::]EVENT[:UMASK[:modifier=value]...]``
_NATIVE = re.compile(r"(?:[A-Za-z][A-Za-z0-9_]*::)?[A-Za-z][A-Za-z0-9_.]*(?::[A-Za-z0-9_.]+(?:=[A-Za-z0-9_.]+)?)+")
#: counter names that fixed-function counters record (PAPI maps its presets onto them where the PMU has them)
FIXED_FUNCTION: dict[str, frozenset[str]] = {
    "ins": frozenset({"PAPI_TOT_INS", "INST_RETIRED:ANY", "INST_RETIRED.ANY", "INSTRUCTIONS_RETIRED"}),
    "cyc": frozenset({"PAPI_TOT_CYC", "CPU_CLK_UNHALTED:THREAD", "CPU_CLK_UNHALTED.THREAD", "CPU_CLK_UNHALTED",
                      "CPU_CYCLES"}),
    "ref_cyc": frozenset({"PAPI_REF_CYC", "CPU_CLK_UNHALTED:REF_TSC", "CPU_CLK_UNHALTED.REF_TSC"}),
}


class UnknownCounterError(BadInputError):
    """A counter name is neither a PAPI preset, a known native event, nor written in native ``EVENT:UMASK`` form."""


def known_names() -> set[str]:
    """Every counter name synthtrace knows: PAPI presets and the native names of the roles."""
    return (
        set(PAPI_PRESETS)
        | {a for r in ROLES.values() for a in r.aliases}
        | {n for s in FIXED_FUNCTION.values() for n in s}
    )


#: how many unknown counter names an error line names, each with its closest known name (the others are counted)
NAMED_UNKNOWN = 3
#: characters of an unknown counter name an error line quotes
QUOTED_CHARS = 60


def check_counter_names(names: list[str]) -> None:
    """Refuse names that cannot be counters: one line naming the first :data:`NAMED_UNKNOWN`, each with the closest
    known name (``PAPI_L1_DMC`` -> ``PAPI_L1_DCM``), and counting the others (``... and 19,997 more``); linear in
    ``len(names)`` (only the named ones are compared with the known names).

    Accepted: PAPI presets, the native events of the catalogue, and any native event in ``[pmu::]EVENT:UMASK``
    form (the PMU's own names cannot be listed here; the tracer checks them on the machine)."""
    known = known_names()
    bad = [name for name in names
           if not (name in known or (not name.upper().startswith("PAPI_") and _NATIVE.fullmatch(name)))]
    if not bad:
        return
    candidates = sorted(known)
    longest = max(map(len, candidates))
    said = []
    for name in bad[:NAMED_UNKNOWN]:
        # [helper edges] issue 23: a suggestion is within a quarter of the name's length, so a name much longer
        # than every known one has none (and comparing it would cost its length times theirs)
        close = closest(name.upper(), candidates) if len(name) <= 2 * longest + 8 else []
        what = "not a PAPI preset" if name.upper().startswith("PAPI_") else \
            "not a PAPI preset or a known native event, which are written EVENT:UMASK"
        said.append(f"'{clipped(name, QUOTED_CHARS)}' ({what}" + (f"; did you mean {close[0]}?)" if close else ")"))
    more = f" and {len(bad) - NAMED_UNKNOWN:,} more" if len(bad) > NAMED_UNKNOWN else ""
    raise UnknownCounterError(f"unknown counter{'s' if len(bad) > 1 else ''} " + ", ".join(said) + more)


def _osa(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions (optimal string alignment): ``DMC`` is one edit from ``DCM``."""
    prev2, prev = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def closest(name: str, candidates: list[str]) -> list[str]:
    """The candidate nearest ``name`` by edits (transpositions count one), if within a quarter of its length."""
    if not candidates:
        return []
    best = min(candidates, key=lambda c: (_osa(name, c), -difflib.SequenceMatcher(None, name, c).ratio()))
    return [best] if _osa(name, best) <= max(2, len(name) // 4) else []


def fixed_function(name: str, roles: tuple[str, ...] | list[str]) -> bool:
    """True if ``name`` is recorded by a fixed-function counter of a PMU whose fixed counters measure ``roles``."""
    return any(name in FIXED_FUNCTION.get(r, ()) for r in roles)
