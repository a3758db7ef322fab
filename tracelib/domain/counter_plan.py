"""Counter-set planner: the fewest runs that record every wanted hardware counter (DESIGN §1, issues 8, 15).

PMU model: a hardware thread reads ``slots`` *programmable* counters at once, and besides them the quantities its
fixed-function counters record (``fixed_function``, roles of :mod:`synthtrace.tracelib.domain.counters`: Intel
instructions, core and reference cycles; AMD Zen none; Arm the cycle counter; per preset in the machine profile's
``[pmu]``). Every run carries the ``fixed`` reference counters (they validate the merge); those a fixed-function
counter records cost no slot, the others take one in every run. Wanted counters that a fixed-function counter
records come free with every run. So each run has ``slots`` minus the programmable reference counters free slots
for the wanted ones; 10 counters plus TOT_INS/TOT_CYC on an Intel PMU with 4 programmable slots need 3 runs, on
AMD Zen 3 (6 slots, no fixed counters) 3 as well, with 4 of its slots left for them. Counters declared in conflict (they
need the same
hardware counter, or the PMU refuses them together) cannot share a run. Finding the fewest runs is colouring the
conflict graph with colour classes of bounded size (bin packing with conflicts, NP-hard in general).

The search is exact: a DSATUR-ordered branch and bound (always place the counter that fits the fewest open runs;
try every run it fits, fullest first, then one new run), started from a greedy packing and pruned by lower bounds:
globally ``ceil(n / free slots)`` and, per large conflict clique Q, ``|Q|`` runs plus what the other counters need
beyond the room beside Q; per node, the runs open so far plus the overflow of the unplaced counters and a clique
among those that fit no open run. It stops as soon as a plan meets the global bound, so realistic requests (tens of
counters, a few slots) are proven optimal in milliseconds; a dense 58-counter instance with 70 % of pairs in
conflict takes seconds (tests/test_counter_plan.py checks the optimum against exhaustive enumeration). Why not an ILP:
``scipy.optimize.milp`` (HiGHS) is present through
scikit-learn, but the assignment formulation is symmetric in its runs and proves infeasibility of ``k - 1`` runs
slowly, while this search needs no dependency and no solver tolerance. A node budget guards against pathological
inputs; a plan found within it but not proven minimal says so (``CounterPlan.optimal``).

Conflicts file (``--conflicts FILE``), either plain text, one pair or group per line (names separated by commas
and/or blanks; every two names on a line conflict; ``#`` starts a comment)::

    PAPI_L1_DCM PAPI_L1_ICM
    PAPI_FP_OPS, PAPI_VEC_SP, PAPI_VEC_DP

or, for a ``.toml`` file, ``conflicts = [["PAPI_L1_DCM", "PAPI_L1_ICM"], ["PAPI_FP_OPS", "PAPI_VEC_SP"]]``.
Names are matched exactly (after trimming); conflicts naming counters that are not requested are ignored.
"""
from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from synthtrace.tracelib.printable import clipped
from synthtrace.tracelib.toml_file import read_small_text
from synthtrace.tracelib.domain.counters import check_counter_names, fixed_function
from synthtrace.tracelib.domain.papi_presets import PresetTable
from synthtrace.tracelib.errors import BadInputError

DEFAULT_FIXED = ("PAPI_TOT_INS", "PAPI_TOT_CYC")
DEFAULT_NODE_BUDGET = 2_000_000
FORMATS = ("table", "json", "extrae", "scorep")


class UnsatisfiableCountersError(BadInputError):
    """No set of runs can record the requested counters under the given slots and conflicts."""


class ConflictsFileError(BadInputError):
    """The conflicts file cannot be read: names the file, the 1-based line and the reason."""

    def __init__(self, path: str | Path, line: int | None, reason: str):
        self.path, self.line, self.reason = str(path), line, reason
        super().__init__(f"{path}:{line}: {reason}" if line is not None else f"{path}: {reason}")


@dataclass(frozen=True)
class CounterPlan:
    """Runs (each a list of counter names, fixed ones first) that together record every wanted counter."""

    runs: list[list[str]]
    fixed: list[str]
    wanted: list[str]
    slots: int
    lower_bound: int  # no plan can have fewer runs
    optimal: bool  # True when len(runs) is proven minimal
    nodes: int = 0  # search nodes explored
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # the pairs that applied
    free: list[str] = field(default_factory=list)  # counters of ``fixed`` + wanted that fixed-function counters record
    #: the programmable counters each planned counter takes (PAPI's native events; a name of its own when no
    #: preset table applies); counters of one run share the native events they have in common
    natives: dict[str, list[str]] = field(default_factory=dict)
    pmu: str = ""  # the PMU whose preset table gave ``natives`` ("" when none did)

    def counters_used(self, run: list[str]) -> int:
        """Programmable counters a run takes: the native events of its counters, each once."""
        return len({n for c in run if c not in self.free for n in self.natives.get(c, [c])})

    @property
    def n_runs(self) -> int:
        return len(self.runs)

    @property
    def carried(self) -> list[str]:
        """The counters every run records: the fixed reference ones and those fixed-function counters record."""
        return list(dict.fromkeys(self.fixed + self.free))

    def to_dict(self) -> dict:
        return {"n_runs": self.n_runs, "optimal": self.optimal, "lower_bound": self.lower_bound,
                "slots": self.slots, "fixed": self.fixed, "counters": self.wanted,
                "fixed_function": self.free,
                "runs": [{"run": i + 1, "counters": r, "programmable_counters": self.counters_used(r)}
                         for i, r in enumerate(self.runs)],
                "conflicts": [list(p) for p in self.conflicts], "pmu": self.pmu or None,
                "native_events": {c: n for c, n in self.natives.items() if [c] != n}}


# ---------------------------------------------------------------------------------------------- inputs
_SPLIT = re.compile(r"[,\s]+")


def parse_counter_list(text: str | None) -> list[str]:
    """``"A, B,C"`` -> ``["A", "B", "C"]`` (empty items dropped, order kept, duplicates removed)."""
    return list(dict.fromkeys(x for x in _SPLIT.split(text or "") if x))


def read_conflicts(path: str | Path) -> list[tuple[str, ...]]:
    """Conflict groups from a text or TOML file (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise ConflictsFileError(path, None, "no such file")
    text = read_small_text(path, lambda reason: ConflictsFileError(path, None, reason), "conflicts file")
    if path.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConflictsFileError(path, getattr(exc, "lineno", None), f"not valid TOML ({exc})") from None
        groups = data.get("conflicts")
        if not isinstance(groups, list) or not all(isinstance(g, list) and all(isinstance(x, str) for x in g)
                                                   for g in groups):
            raise ConflictsFileError(path, None, 'expected `conflicts = [["A", "B"], ...]` (lists of counter names)')
        out = []
        for i, g in enumerate(groups):
            names = tuple(x.strip() for x in g if x.strip())
            if len(names) < 2:
                raise ConflictsFileError(
                    path, None, f"conflicts[{i}] names {len(names)} counter(s); a conflict needs two or more"
                )
            out.append(names)
        return out
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        names = tuple(x for x in _SPLIT.split(line.split("#", 1)[0]) if x)
        if not names:
            continue
        if len(names) < 2:
            raise ConflictsFileError(path, lineno,
                                     f"'{clipped(names[0])}' alone: a conflict line needs two or more counters")
        out.append(names)
    return out


def _pairs(groups: Iterable[Sequence[str]]) -> set[tuple[str, str]]:
    pairs: set[tuple[str, str]] = set()
    for g in groups:
        for i, a in enumerate(g):
            for b in g[i + 1:]:
                pairs.add((a, b) if a <= b else (b, a))
    return pairs


# ---------------------------------------------------------------------------------------------- planning
def plan_counters(wanted: Sequence[str], fixed: Sequence[str] = DEFAULT_FIXED, slots: int = 4,
                  conflicts: Iterable[Sequence[str]] = (), *, fixed_function_roles: Sequence[str] = (),
                  presets: PresetTable | None = None, check_names: bool = False,
                  node_budget: int = DEFAULT_NODE_BUDGET) -> CounterPlan:
    """The fewest runs that record every counter of ``wanted``, each run carrying ``fixed``, in ``slots``
    programmable slots; ``fixed_function_roles``: what the PMU's fixed-function counters record (no slot).

    ``presets``: the PMU's PAPI preset table: a preset takes one slot per native event PAPI programs for it (a
    derived preset several), counters of a run share their common native events, and a preset the PMU does not
    define is refused. Without it every counter takes one slot.
    ``check_names``: refuse names that are no counter (:func:`synthtrace.tracelib.domain.counters.check_counter_names`).
    Raises :class:`UnsatisfiableCountersError` when no plan exists (a wanted counter that conflicts with a fixed
    one or with itself, fixed counters that conflict with each other or outnumber the slots, a preset the PMU
    lacks or that takes more counters than it has).
    """
    fixed = list(dict.fromkeys(fixed))
    wanted_all = list(dict.fromkeys(wanted))
    if check_names:
        check_counter_names(list(dict.fromkeys(fixed + wanted_all)))
    if slots < 1:
        raise UnsatisfiableCountersError(f"--slots must be at least 1 (got {slots})")
    if not wanted_all:
        raise UnsatisfiableCountersError("no counters to plan: give --counters A,B,...")
    free = [c for c in dict.fromkeys(fixed + wanted_all) if fixed_function(c, list(fixed_function_roles))]
    carried = list(dict.fromkeys(fixed + free))  # in every run
    programmable_fixed = [c for c in fixed if c not in free]
    natives = _natives(programmable_fixed + [c for c in wanted_all if c not in carried], presets)
    base = {n for c in programmable_fixed for n in natives[c]}  # native events every run programs
    if len(base) > slots:
        took = f" ({len(base)} programmable counters)" if len(base) != len(programmable_fixed) else ""
        raise UnsatisfiableCountersError(
            f"{len(programmable_fixed)} fixed counters ({listed(programmable_fixed)}){took} do not fit in "
            f"{slots} slot(s); "
            "every run must carry them all"
        )
    todo = [c for c in wanted_all if c not in carried]
    requested = set(carried) | set(todo)
    pairs = _pairs(conflicts)
    applied = sorted(p for p in pairs if p[0] in requested and p[1] in requested)
    for a, b in applied:
        if a == b:
            raise UnsatisfiableCountersError(f"{a} is declared in conflict with itself: no run can record it")
        if a in carried and b in carried:
            raise UnsatisfiableCountersError(f"fixed counters {a} and {b} conflict, but every run must carry both")
        if a in carried or b in carried:
            f, c = (a, b) if a in carried else (b, a)
            raise UnsatisfiableCountersError(
                f"{c} conflicts with the fixed counter {f}: no run can record it, since every run carries {f}")
    shown = {c: list(n) for c, n in natives.items()}
    pmu = presets.label if presets else ""
    if not todo:
        return CounterPlan([list(carried)], fixed, wanted_all, slots, 1, True, 0, applied, free, shown, pmu)
    cap = slots - len(base)
    if cap < 1:
        raise UnsatisfiableCountersError(
            f"the {len(programmable_fixed)} fixed counters fill all {slots} slot(s): no room for {listed(todo)}")
    own = {c: [n for n in dict.fromkeys(natives[c]) if n not in base] for c in todo}
    for c in todo:
        if len(own[c]) > cap:
            raise UnsatisfiableCountersError(_too_wide(c, natives[c], cap, slots, presets))
    universe = {n: i for i, n in enumerate(dict.fromkeys(n for c in todo for n in own[c]))}
    nat = [sum(1 << universe[n] for n in own[c]) for c in todo]
    index = {c: i for i, c in enumerate(todo)}
    adj = [0] * len(todo)
    for a, b in applied:
        adj[index[a]] |= 1 << index[b]
        adj[index[b]] |= 1 << index[a]
    groups, lb, optimal, nodes = _search(adj, cap, node_budget, nat)
    runs = [list(carried) + [todo[i] for i in sorted(g)] for g in sorted(groups, key=min)]
    return CounterPlan(runs, fixed, wanted_all, slots, lb, optimal, nodes, applied, free, shown, pmu)


def _natives(counters: Sequence[str], presets: PresetTable | None) -> dict[str, tuple[str, ...]]:
    """The programmable counters each counter takes; a preset the PMU does not define is refused."""
    if presets is None:
        return {c: (c,) for c in counters}
    out: dict[str, tuple[str, ...]] = {}
    for c in counters:
        events = presets.natives(c)
        if events is None:
            raise UnsatisfiableCountersError(
                f"{c} is not available on {presets.label}: PAPI defines no {c} there "
                "(papi_avail lists a machine's presets; record its native events instead)")
        out[c] = events
    return out


def _too_wide(counter: str, events: Sequence[str], cap: int, slots: int, presets: PresetTable | None) -> str:
    """Why ``counter`` fits no run: the programmable counters it takes against those a run has free."""
    room = f"{cap} of the {slots}" if cap < slots else f"the {slots}"
    on = f" on {presets.label}" if presets else ""
    intel = " (with Hyper-Threading off, Intel cores have 8: --slots 8)" if presets and "Intel" in presets.label else ""
    return (f"{counter} takes {len(events)} programmable counters{on} (PAPI adds {listed(events)}), more than "
            f"{room} a run has free: no run can record it{intel}")


def _cliques(adj: list[int], within: int, tries: int) -> Iterator[list[int]]:
    """Greedy cliques of the conflict graph restricted to the bitmask ``within``, one per start vertex."""
    verts = [v for v in range(len(adj)) if within >> v & 1]
    for v in sorted(verts, key=lambda x: -(adj[x] & within).bit_count())[:tries]:
        clique, cand = [v], adj[v] & within
        while cand:
            u = max((u for u in verts if cand >> u & 1), key=lambda u: (adj[u] & cand).bit_count())
            clique.append(u)
            cand &= adj[u]
        yield clique


def _clique_size(adj: list[int], within: int, tries: int) -> int:
    return max((len(c) for c in _cliques(adj, within, tries)), default=0)


def _union(nat: list[int], members: int) -> int:
    """The native events (bitmask) of the counters in the bitmask ``members``."""
    out = 0
    while members:
        low = members & -members
        out |= nat[low.bit_length() - 1]
        members ^= low
    return out


def _lower_bound(adj: list[int], cap: int, nat: list[int]) -> int:
    """Runs no plan can undercut: the native events over ``cap``; and for large cliques Q of conflicting counters,
    ``|Q|`` runs plus the runs the other counters' events need beyond the room left beside Q's members (in the
    unit case, one event per counter, this is ``ceil(n / cap)`` and ``|Q|`` plus the counters beyond cap - 1
    non-conflicting ones beside each member)."""
    n = len(adj)
    everything = (1 << n) - 1
    bound = math.ceil(_union(nat, everything).bit_count() / cap)
    for clique in _cliques(adj, everything, tries=64):
        in_q = sum(1 << c for c in clique)
        events_q = _union(nat, in_q)
        others = _union(nat, everything & ~in_q) & ~events_q
        room = sum(min(cap - nat[q].bit_count(), (_union(nat, everything & ~adj[q] & ~in_q) & ~events_q).bit_count())
                   for q in clique)
        bound = max(bound, len(clique) + math.ceil(max(0, others.bit_count() - room) / cap))
    return bound


def _pack_greedily(adj: list[int], cap: int, order: list[int], nat: list[int]) -> list[list[int]]:
    """A quick plan: fill one run at a time, hardest counters (most conflicts) first. Each run scans the counters
    not placed yet, and stops at a full run when every counter has one event of its own (no other could join it):
    linear in the counters when few conflict ([helper edges] issue 23: 14,000 counters took 41 s, quadratic)."""
    distinct = all(m.bit_count() == 1 for m in nat) and len(set(nat)) == len(nat)
    left, runs = list(order), []
    while left:
        run, blocked, events, rest = [], 0, 0, []
        for i, v in enumerate(left):
            if distinct and len(run) == cap:
                rest += left[i:]
                break
            if not blocked >> v & 1 and (events | nat[v]).bit_count() <= cap:
                run.append(v)
                blocked |= adj[v]
                events |= nat[v]
            else:
                rest.append(v)
        runs.append(run)
        left = rest
    return runs


def _search(adj: list[int], cap: int, node_budget: int,
            nat: list[int] | None = None) -> tuple[list[list[int]], int, bool, int]:
    """Exact DSATUR branch and bound; returns (runs as vertex lists, lower bound, proven optimal, nodes).
    ``nat``: each counter's native events as a bitmask (default: one event of its own each); a run holds at
    most ``cap`` distinct events."""
    n = len(adj)
    nat = nat if nat is not None else [1 << v for v in range(n)]
    unit = all(m.bit_count() == 1 for m in nat) and len(set(nat)) == n  # one event each, none shared
    global_lb = _lower_bound(adj, cap, nat)
    by_degree = sorted(range(n), key=lambda v: (-adj[v].bit_count(), v))
    best = _pack_greedily(adj, cap, by_degree, nat)
    best_k = len(best)
    if best_k <= global_lb:
        return best, best_k, True, 0
    blocked: list[int] = []  # bitmask of the counters that conflict with a member of each open run
    events: list[int] = []  # bitmask of the native events each open run programs
    assign = [-1] * n
    nodes = 0
    exhausted = False

    def fitting(r: int, unplaced: int) -> int:
        """The unplaced counters run ``r`` can still take (no conflict, its events within ``cap``)."""
        room = unplaced & ~blocked[r]
        if unit:
            return room if events[r].bit_count() < cap else 0
        out = 0
        while room:
            low = room & -room
            if (events[r] | nat[low.bit_length() - 1]).bit_count() <= cap:
                out |= low
            room ^= low
        return out

    def recurse(unplaced: int, placed: int) -> bool:
        """Place one more counter; returns True to stop the whole search (optimum proven or budget spent)."""
        nonlocal best, best_k, nodes, exhausted
        nodes += 1
        if nodes > node_budget:
            exhausted = True
            return True
        k = len(events)
        if placed == n:
            if k < best_k:
                best_k = k
                best = [[v for v in range(n) if assign[v] == r] for r in range(k)]
            return best_k <= global_lb
        in_runs = 0
        for e in events:
            in_runs |= e
        needed = (_union(nat, unplaced) & ~in_runs).bit_count()  # events no open run programs yet
        free = sum(cap - e.bit_count() for e in events)
        if k + max(0, math.ceil((needed - free) / cap)) >= best_k:
            return False
        # DSATUR: the unplaced counter that fits the fewest open runs (ties: most conflicts, then first).
        # Counts per counter are kept bit-sliced: planes[i] holds bit i of every counter's number of fitting runs.
        open_runs = list(range(k))
        fit = [fitting(r, unplaced) for r in open_runs]
        planes: list[int] = []
        anywhere = 0
        for m in fit:
            anywhere |= m
            carry, i = m, 0
            while carry:
                if i == len(planes):
                    planes.append(carry)
                    break
                planes[i], carry = planes[i] ^ carry, planes[i] & carry
                i += 1
        homeless = unplaced & ~anywhere
        if homeless:  # counters that fit no open run need new runs, one per member of a conflict clique
            need = max(math.ceil(_union(nat, homeless).bit_count() / cap), _clique_size(adj, homeless, tries=2))
            if k + need >= best_k:
                return False
            fewest = homeless
        else:
            fewest = unplaced
            for plane in reversed(planes):
                if fewest & ~plane:
                    fewest &= ~plane
        choice = next(v for v in by_degree if fewest >> v & 1)
        bit = 1 << choice
        fits = [r for r, m in zip(open_runs, fit) if m & bit]
        fits.sort(key=lambda r: -events[r].bit_count())  # fullest run first: tight packings are found early
        for r in fits:
            saved_blocked, saved_events = blocked[r], events[r]
            blocked[r] |= adj[choice]
            events[r] |= nat[choice]
            assign[choice] = r
            stop = recurse(unplaced & ~bit, placed + 1)
            blocked[r], events[r] = saved_blocked, saved_events
            assign[choice] = -1
            if stop:
                return True
        if k + 1 < best_k:
            blocked.append(adj[choice])
            events.append(nat[choice])
            assign[choice] = k
            stop = recurse(unplaced & ~bit, placed + 1)
            assign[choice] = -1
            blocked.pop()
            events.pop()
            if stop:
                return True
        return False

    recurse((1 << n) - 1, 0)
    optimal = not exhausted or best_k <= global_lb
    return best, (best_k if optimal else global_lb), optimal, nodes


# ---------------------------------------------------------------------------------------------- output
def render(plan: CounterPlan, fmt: str) -> str:
    """The plan as ``table`` (plain text), ``json``, an Extrae ``<counters>`` fragment or Score-P lines."""
    if fmt == "json":
        return json.dumps(plan.to_dict(), indent=2) + "\n"
    if fmt == "scorep":
        return "".join(f"SCOREP_METRIC_PAPI={','.join(run)}\n" for run in plan.runs)
    if fmt == "extrae":
        return render_extrae(plan)
    if fmt == "table":
        return render_table(plan)
    raise BadInputError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")


def render_extrae(plan: CounterPlan) -> str:
    """An Extrae ``<counters>`` fragment with one counter set per run (set k is run k's
    ``starting-set-distribution``)."""
    lines = ["<counters enabled=\"yes\">",
             f"  <!-- {plan.n_runs} run(s); for run k set starting-set-distribution=\"k\" -->",
             "  <cpu enabled=\"yes\" starting-set-distribution=\"1\">"]
    for i, run in enumerate(plan.runs, start=1):
        lines.append(f"    <!-- run {i} -->")
        lines.append(f"    <set enabled=\"yes\" domain=\"all\" changeat-time=\"0\">{escape(','.join(run))}</set>")
    lines += ["  </cpu>", "  <network enabled=\"no\" />", "  <resource-usage enabled=\"no\" />",
              "  <memory-usage enabled=\"no\" />", "</counters>"]
    return "\n".join(lines) + "\n"


def render_table(plan: CounterPlan) -> str:
    """A plain-text table: one line per run, then :func:`table_notes` (whether the count is proven minimal)."""
    width = max(len("run"), len(str(plan.n_runs)))
    out = [f"{'run':>{width}}  counters"]
    for i, run in enumerate(plan.runs, start=1):
        out.append(f"{i:>{width}}  {', '.join(run)}")
    return "\n".join(out + table_notes(plan)) + "\n"


def table_notes(plan: CounterPlan) -> list[str]:
    """The lines under the table of runs: the programmable counters each run takes (on a PMU with presets) and
    the count of runs with whether it is proven minimal; every list in them :func:`listed` (attack 12: a plan of
    thousands of runs printed one line of all of them)."""
    out = []
    proof = ("minimal (proven)" if plan.optimal else
             f"not proven minimal (search budget spent; no plan has fewer than {plan.lower_bound})")
    n_new = len([c for c in plan.wanted if c not in plan.fixed and c not in plan.free])
    ff = f"; fixed-function: {listed(plan.free)}" if plan.free else ""
    derived = [f"{c} {len(n)}" for c, n in plan.natives.items() if len(n) > 1]
    if plan.pmu:
        used = listed([f"run {i} {plan.counters_used(r)}" for i, r in enumerate(plan.runs, start=1)])
        out.append(f"programmable counters taken ({plan.pmu}, PAPI native events, shared ones once): {used}"
                   + (f"; presets taking several: {listed(derived)}" if derived else ""))
    out.append(f"{plan.n_runs} run(s) for {n_new} counter(s) + {len(plan.fixed)} fixed in {plan.slots} "
               f"programmable slot(s){ff}: {proof}")
    return out


#: items of a list a message or a note names before saying how many more there are
LISTED = 8


def listed(items: Sequence[str], limit: int = LISTED) -> str:
    """The first ``limit`` of ``items`` joined by commas, and how many more (``A, B, ... and 19,992 more``): a
    list ``plan`` prints is never printed whole (each item :func:`~synthtrace.tracelib.printable.clipped`)."""
    shown = ", ".join(clipped(item) for item in items[:limit])
    return shown + (f" and {len(items) - limit:,} more" if len(items) > limit else "")
