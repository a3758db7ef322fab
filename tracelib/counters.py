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

import re
from dataclasses import dataclass, field

import polars as pl


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
