"""Counter-set planner: proven-minimal plans (known optima, brute force on random instances), unsatisfiable
requests, the conflicts file, every output format and the ``synthtrace plan`` command."""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthtrace.tracelib.domain.counter_plan import (
    ConflictsFileError,
    CounterPlan,
    UnsatisfiableCountersError,
    parse_counter_list,
    plan_counters,
    read_conflicts,
    render,
)
from synthtrace.tracelib.errors import BadInputError

FIXED = ["PAPI_TOT_INS", "PAPI_TOT_CYC"]


def assert_valid(plan: CounterPlan, wanted, fixed, slots, conflicts) -> None:
    """Every wanted counter in exactly one run, fixed counters in every run, slots and conflicts respected."""
    pairs = {frozenset(p) for g in conflicts for p in combinations(g, 2)}
    seen = []
    for run in plan.runs:
        assert run[: len(fixed)] == list(fixed) and len(run) <= slots
        extra = run[len(fixed):]
        assert extra, "a run without a new counter is wasted"
        seen += extra
        for a, b in combinations(extra, 2):
            assert frozenset((a, b)) not in pairs, (a, b)
    assert sorted(seen) == sorted(c for c in dict.fromkeys(wanted) if c not in fixed)


def fewest_blocks(names: list[str], ok: Callable[[list[str]], bool]) -> int:
    """The fewest blocks of a partition of ``names`` whose every block is ``ok``, by enumerating every partition
    (restricted growth strings)."""
    n, best = len(names), len(names)

    def grow(i: int, blocks: list[list[str]]) -> None:
        nonlocal best
        if len(blocks) >= best:
            return
        if i == n:
            best = len(blocks)
            return
        for b in blocks:
            b.append(names[i])
            if ok(b):
                grow(i + 1, blocks)
            b.pop()
        blocks.append([names[i]])
        grow(i + 1, blocks)
        blocks.pop()

    grow(0, [])
    return best


def brute_force_min_runs(names: list[str], cap: int, conflicts: list[tuple[str, str]]) -> int:
    """The fewest runs by enumerating every partition of the counters (restricted growth strings)."""
    bad = {frozenset(p) for p in conflicts}

    def ok(block: list[str]) -> bool:
        return len(block) <= cap and all(frozenset(p) not in bad for p in combinations(block, 2))

    return fewest_blocks(names, ok)


# ---------------------------------------------------------------------------------------------- known optima
def test_no_conflicts_needs_ceil_n_over_free_slots():
    wanted = [f"C{i}" for i in range(7)]
    plan = plan_counters(wanted, FIXED, slots=4)
    assert plan.n_runs == 4 == math.ceil(7 / 2) and plan.optimal and plan.lower_bound == 4
    assert_valid(plan, wanted, FIXED, 4, [])


def test_a_conflict_clique_needs_one_run_each():
    wanted = ["A", "B", "C", "D", "E"]
    conflicts = [("A", "B", "C", "D")]
    plan = plan_counters(wanted, FIXED, slots=6, conflicts=conflicts)
    assert plan.n_runs == 4 and plan.optimal  # E joins one of the four
    assert_valid(plan, wanted, FIXED, 6, conflicts)


def test_hub_conflicting_with_everything_runs_alone():
    """Neither bound is tight: ceil(6/2) = 3 and the largest clique is 2, yet 4 runs are needed."""
    wanted = ["HUB", "B", "C", "D", "E", "F"]
    conflicts = [("HUB", x) for x in "BCDEF"]
    plan = plan_counters(wanted, FIXED, slots=4, conflicts=conflicts)
    assert plan.n_runs == 4 and plan.optimal
    assert ["PAPI_TOT_INS", "PAPI_TOT_CYC", "HUB"] in plan.runs


def test_odd_cycle_needs_three_runs():
    wanted = [f"C{i}" for i in range(5)]
    conflicts = [(wanted[i], wanted[(i + 1) % 5]) for i in range(5)]
    plan = plan_counters(wanted, [], slots=5, conflicts=conflicts)
    assert plan.n_runs == 3 and plan.optimal


def test_triangle_free_graph_needing_four_runs_is_proven():
    """The Grötzsch graph: no three counters pairwise in conflict, yet no 3 runs suffice (chromatic number 4)."""
    u = [f"U{i}" for i in range(5)]
    w = [f"W{i}" for i in range(5)]
    conflicts = [(u[i], u[(i + 1) % 5]) for i in range(5)]
    conflicts += [(w[i], u[(i - 1) % 5]) for i in range(5)] + [(w[i], u[(i + 1) % 5]) for i in range(5)]
    conflicts += [("Z", x) for x in w]
    plan = plan_counters(u + w + ["Z"], [], slots=11, conflicts=conflicts)
    assert plan.n_runs == 4 and plan.optimal
    assert_valid(plan, u + w + ["Z"], [], 11, conflicts)
    # a search budget too small to prove it says so
    rough = plan_counters(u + w + ["Z"], [], slots=11, conflicts=conflicts, node_budget=5)
    assert rough.n_runs >= 4 and not rough.optimal and rough.lower_bound == 2
    assert "not proven minimal" in render(rough, "table")


def test_forty_counters_are_planned_fast_and_exactly():
    wanted = [f"N{i:02d}" for i in range(40)]
    conflicts = [(wanted[i], wanted[j]) for i in range(40) for j in range(i + 1, 40) if (i * 7 + j * 3) % 11 == 0]
    plan = plan_counters(wanted, FIXED, slots=6, conflicts=conflicts)
    assert plan.optimal and plan.n_runs == 10
    assert_valid(plan, wanted, FIXED, 6, conflicts)


def test_fixed_and_duplicate_counters_are_not_planned_twice():
    plan = plan_counters(["PAPI_TOT_INS", "A", "A", "B"], FIXED, slots=3)
    assert plan.runs == [FIXED + ["A"], FIXED + ["B"]]
    only_fixed = plan_counters(["PAPI_TOT_CYC"], FIXED, slots=2)
    assert only_fixed.runs == [FIXED] and only_fixed.optimal


def test_no_fixed_counters():
    assert plan_counters(["A", "B", "C"], [], slots=2).n_runs == 2


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_minimal_on_random_instances_against_brute_force(data):
    n = data.draw(st.integers(1, 8), label="counters")
    names = [f"K{i}" for i in range(n)]
    cap = data.draw(st.integers(1, 4), label="free slots")
    all_pairs = list(combinations(names, 2))
    conflicts = data.draw(st.lists(st.sampled_from(all_pairs), unique=True), label="conflicts") if all_pairs else []
    n_fixed = data.draw(st.integers(0, 2), label="fixed")
    fixed = FIXED[:n_fixed]
    plan = plan_counters(names, fixed, slots=cap + n_fixed, conflicts=conflicts)
    assert plan.optimal
    assert plan.n_runs == brute_force_min_runs(names, cap, conflicts)
    assert_valid(plan, names, fixed, cap + n_fixed, conflicts)


# ---------------------------------------------------------------------------------------------- unsatisfiable
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"wanted": ["A", "B"], "conflicts": [("B", "PAPI_TOT_CYC")]},
            "B conflicts with the fixed counter PAPI_TOT_CYC",
        ),
        ({"wanted": ["A"], "fixed": ["X", "Y", "Z"], "slots": 2}, "3 fixed counters (X, Y, Z) do not fit in 2 slot(s)"),
        ({"wanted": ["A"], "slots": 2}, "fill all 2 slot(s): no room for A"),
        ({"wanted": ["A", "B"], "conflicts": [("A", "A")]}, "A is declared in conflict with itself"),
        (
            {"wanted": ["A"], "conflicts": [("PAPI_TOT_INS", "PAPI_TOT_CYC")]},
            "fixed counters PAPI_TOT_CYC and PAPI_TOT_INS conflict",
        ),
        ({"wanted": ["A"], "slots": 0}, "--slots must be at least 1"),
        ({"wanted": []}, "no counters to plan"),
    ],
)
def test_unsatisfiable_requests(kwargs, message):
    args = {"fixed": FIXED, "slots": 4, "conflicts": (), **kwargs}
    with pytest.raises(UnsatisfiableCountersError) as err:
        plan_counters(args["wanted"], args["fixed"], args["slots"], args["conflicts"])
    assert isinstance(err.value, BadInputError) and err.value.exit_code == 2
    assert message in str(err.value)


def test_conflicts_with_unrequested_counters_are_ignored():
    plan = plan_counters(["A", "B"], FIXED, slots=4, conflicts=[("A", "PAPI_L3_TCM"), ("Q", "Q")])
    assert plan.n_runs == 1 and plan.conflicts == []


# ---------------------------------------------------------------------------------------------- conflicts file
def test_conflicts_text_file(tmp_path):
    f = tmp_path / "conflicts.txt"
    f.write_text(
        "# same hardware counter\nPAPI_L1_DCM PAPI_L1_ICM\n\nPAPI_FP_OPS, PAPI_VEC_SP,PAPI_VEC_DP  # one group\n"
    )
    assert read_conflicts(f) == [("PAPI_L1_DCM", "PAPI_L1_ICM"), ("PAPI_FP_OPS", "PAPI_VEC_SP", "PAPI_VEC_DP")]


def test_conflicts_toml_file(tmp_path):
    f = tmp_path / "conflicts.toml"
    f.write_text('conflicts = [["A", "B"], ["C", "D", "E"]]\n')
    assert read_conflicts(f) == [("A", "B"), ("C", "D", "E")]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("c.txt", "A B\nLONELY\n", "c.txt:2: 'LONELY' alone"),
    ("c.toml", "conflicts = [[\"A\"]]\n", "conflicts[0] names 1 counter(s)"),
    ("c.toml", "conflicts = 3\n", "expected `conflicts = "),
    ("c.toml", "conflicts = [[\n", "not valid TOML"),
])
def test_bad_conflicts_files(tmp_path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(ConflictsFileError) as err:
        read_conflicts(f)
    assert message in str(err.value)


def test_a_conflicts_file_that_is_no_settings_file_is_one_short_line(tmp_path):
    """A 2 GB file without a line end was read whole (16.8 GB, 115 s) and quoted whole in the error line; a FIFO or a
    folder was "no such file" (attack 7 A22). A conflicts file is a small text file; a bad line is quoted short."""
    import os

    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(2 << 20)  # 2 MiB of NULs, no line end
    fifo, folder, long = tmp_path / "f.txt", tmp_path / "d.txt", tmp_path / "long.txt"
    os.mkfifo(fifo)
    folder.mkdir()
    long.write_text("X" * 100_000 + "\n")
    said = {}
    for f in (big, fifo, folder, long):
        with pytest.raises(ConflictsFileError) as err:
            read_conflicts(f)
        said[f.name] = str(err.value)
    assert "larger than 1024 KiB: not a conflicts file" in said["big.txt"]
    assert "not a regular file" in said["f.txt"] and "not a regular file" in said["d.txt"]
    quoted = said["long.txt"].replace(str(long), "")  # the file's path is as long as the temp folder makes it
    assert len(quoted) < 150 and "long.txt:1: 'XXXX" in said["long.txt"], said["long.txt"][:300]


def test_missing_conflicts_file(tmp_path):
    with pytest.raises(ConflictsFileError, match="no such file"):
        read_conflicts(tmp_path / "nope.txt")


def test_parse_counter_list():
    assert parse_counter_list(" A, B,,C  A ") == ["A", "B", "C"]
    assert parse_counter_list("") == []


# ---------------------------------------------------------------------------------------------- formats
@pytest.fixture
def example() -> CounterPlan:
    return plan_counters(["PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_L3_TCM", "PAPI_BR_MSP", "PAPI_FP_OPS"], FIXED, slots=4,
                         conflicts=[("PAPI_L1_DCM", "PAPI_L2_DCM")])


def test_json_format(example):
    data = json.loads(render(example, "json"))
    assert data["n_runs"] == 3 and data["optimal"] and data["lower_bound"] == 3
    assert [r["counters"][:2] for r in data["runs"]] == [FIXED] * 3
    assert data["conflicts"] == [["PAPI_L1_DCM", "PAPI_L2_DCM"]]


def test_extrae_format_is_a_counters_fragment(example):
    root = ET.fromstring(render(example, "extrae"))
    assert root.tag == "counters" and root.get("enabled") == "yes"
    cpu = root.find("cpu")
    assert cpu.get("enabled") == "yes" and cpu.get("starting-set-distribution") == "1"
    sets = cpu.findall("set")
    assert [s.text.split(",") for s in sets] == example.runs
    assert all(s.get("domain") == "all" and s.get("changeat-time") == "0" and s.get("enabled") == "yes" for s in sets)


def test_scorep_format_one_line_per_run(example):
    lines = render(example, "scorep").splitlines()
    assert lines == [f"SCOREP_METRIC_PAPI={','.join(r)}" for r in example.runs]


def test_table_format(example):
    text = render(example, "table")
    assert "3 run(s) for 5 counter(s) + 2 fixed in 4 programmable slot(s): minimal (proven)" in text
    assert text.splitlines()[1].split() == ["1", *", ".join(example.runs[0]).split()]
    with pytest.raises(BadInputError, match="unknown format"):
        render(example, "yaml")


# ---------------------------------------------------------------------------------------------- the command
def test_plan_command_formats(tmp_path, run_cli):
    conflicts = tmp_path / "conflicts.txt"
    conflicts.write_text("PAPI_L1_DCM PAPI_L2_DCM\n")
    args = ["plan", "--counters", "PAPI_L1_DCM,PAPI_L2_DCM,PAPI_BR_MSP", "--slots", "4", "--conflicts", conflicts]
    code, out, err = run_cli(*args)
    assert code == 0, err
    assert "PAPI_L1_DCM" in out and "minimal (proven)" in out
    code, out, _ = run_cli(*args, "--format", "scorep")
    assert code == 0 and out.count("SCOREP_METRIC_PAPI=PAPI_TOT_INS,PAPI_TOT_CYC,") == 2
    code, out, _ = run_cli(*args, "-f", "json", "--fixed", "PAPI_TOT_CYC")
    assert code == 0 and json.loads(out)["fixed"] == ["PAPI_TOT_CYC"] and json.loads(out)["n_runs"] == 2
    target = tmp_path / "counters.xml"
    code, out, _ = run_cli(*args, "-f", "extrae", "-o", target)
    assert code == 0 and ET.parse(target).getroot().tag == "counters"


@pytest.mark.parametrize(("extra", "message"), [
    (["--counters", "PAPI_L1_DCM,PAPI_L2_DCM", "--slots", "2", "--machine", "zen3-epyc"], "fill all 2 slot(s)"),
    (["--counters", "PAPI_L1_DCM", "--slots", "1", "--machine", "zen3-epyc"], "do not fit in 1 slot(s)"),
    (["--counters", "PAPI_L1_DCM", "--slots", "4", "--format", "yaml"], "--format 'yaml'"),
    (["--counters", "PAPI_L1_DCM", "--slots", "4", "--conflicts", "/nonexistent/c.txt"], "no such file"),
    (["--counters", "PAPI_L1_DCM", "--slots", "4", "--fixed", "", "-o", "/dev/null/x.xml"], "not a folder"),
    (["--counters", "PAPI_L1_DMC,FOO_BAR"], "'PAPI_L1_DMC' (not a PAPI preset; did you mean PAPI_L1_DCM?), 'FOO_BAR'"),
    (["--counters", "PAPI_L1_DCM", "--machine", "zen5"], "no such machine profile"),
    (["--counters", "PAPI_L1_DCM", "--slots", "0"], "--slots must be at least 1 (got 0)"),  # not the default
    (["--counters", "PAPI_L1_DCM", "--slots", "9" * 20], "--slots must be at most 256 (got 99999999999999999999)"),
])
def test_plan_command_bad_input_exits_2(run_cli, extra, message):
    code, out, err = run_cli("plan", *extra)
    assert code == 2 and message in err and "Traceback" not in err


def test_twenty_thousand_unknown_counters_are_one_short_line(run_cli, monkeypatch):
    """[helper edges] issue 23: `plan` with 20,000 unknown names compared each with every known name (about 140 s of
    CPU) and printed all 20,000 in a 1.7 MB line. The first three are named (a long one cut short), with a
    suggestion each, and the others counted; only those three are compared with the known names."""
    from synthtrace.tracelib.domain import counters

    compared: list[str] = []
    real = counters.closest
    monkeypatch.setattr(counters, "closest", lambda name, known: compared.append(name) or real(name, known))
    names = ["PAPI_L1_DMC", "X" * 100_000, *(f"FOO_{i}" for i in range(19_998))]
    code, out, err = run_cli("plan", "--counters", ",".join(names), "--slots", "4")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and len(err) < 400, err[:600]
    assert "'PAPI_L1_DMC' (not a PAPI preset; did you mean PAPI_L1_DCM?)" in err
    assert f"'{'X' * 60}...' (not a PAPI preset or a known native event" in err
    assert "'FOO_0' (" in err and "FOO_1" not in err and err.rstrip().endswith("and 19,997 more")
    assert compared == ["PAPI_L1_DMC", "FOO_0"]  # the 100,000-character name is longer than any suggestion


def test_thousands_of_counters_are_planned_in_linear_time():
    """[helper edges] issue 23: the greedy first plan scanned every counter not yet placed for each run it filled:
    quadratic (14,000 native counters, 3,500 runs: 41 s of CPU; 2.8 s now). A run that is full stops the scan when
    no other counter could join it; the plan is the same."""
    from synthtrace.tracelib.domain import counter_plan

    class Counted(list):
        looked = 0

        def __getitem__(self, i):
            Counted.looked += 1
            return super().__getitem__(i)

    n = 3000
    nat = Counted(1 << v for v in range(n))
    runs = counter_plan._pack_greedily([0] * n, 4, list(range(n)), nat)
    assert runs == [list(range(i, i + 4)) for i in range(0, n, 4)]
    assert Counted.looked <= 2 * n, Counted.looked  # was n * n / 8 = 1,125,000
    names = [f"EV{i}:UMASK" for i in range(n)]
    plan = plan_counters(names, slots=4, fixed=[], check_names=True)
    assert plan.n_runs == n // 4 and plan.optimal and sorted(c for r in plan.runs for c in r) == sorted(names)


def test_plan_command_conflict_with_fixed(tmp_path, run_cli):
    conflicts = tmp_path / "c.toml"
    # PAPI defines no PAPI_REF_CYC on Zen 3 (issue 24 item 7): a preset it has stands in for the conflicting one
    conflicts.write_text('conflicts = [["PAPI_TOT_CYC", "PAPI_BR_INS"]]\n')
    code, _, err = run_cli("plan", "--counters", "PAPI_BR_INS,PAPI_L1_DCM", "--slots", "4", "--conflicts", conflicts,
                           "--machine", "zen3-epyc")  # no fixed-function counters: every counter takes a slot
    assert code == 2 and "PAPI_BR_INS conflicts with the fixed counter PAPI_TOT_CYC" in err


# ---------------------------------------------------------------------------------------------- PMU model (issue 15)
TEN = ["PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_L3_TCM", "PAPI_BR_INS", "PAPI_BR_MSP", "PAPI_FP_INS", "PAPI_VEC_INS",
       "PAPI_L1_ICM", "PAPI_TLB_IM", "PAPI_TLB_DM"]


def test_fixed_function_counters_take_no_slot():
    from synthtrace.tracelib.domain.machine import load_machine
    intel = load_machine("skylake-sp")
    plan = plan_counters(TEN + list(FIXED), FIXED, slots=4, fixed_function_roles=intel.pmu_fixed)
    assert plan.n_runs == 3 and plan.optimal and plan.lower_bound == 3  # ceil(10 / 4): proven minimal
    assert all(len(r) - len(plan.carried) <= 4 and r[:2] == list(FIXED) for r in plan.runs)
    assert sorted(c for r in plan.runs for c in r[2:]) == sorted(TEN)
    assert plan_counters(TEN, FIXED, slots=4).n_runs == 5  # every counter in a slot: the old answer
    amd = load_machine("zen3-epyc")  # six programmable counters, no fixed-function ones: references take 2
    on_amd = plan_counters(TEN, FIXED, slots=amd.pmu_programmable, fixed_function_roles=amd.pmu_fixed)
    assert on_amd.n_runs == 3 and on_amd.free == [] and all(len(r) <= 6 for r in on_amd.runs)
    assert plan_counters(TEN + ["PAPI_L2_TCM", "PAPI_L3_DCM"], FIXED, slots=6, fixed_function_roles=()).n_runs == 3
    # a wanted counter a fixed-function counter records comes free with every run
    ref = plan_counters(["PAPI_REF_CYC", "PAPI_L1_DCM"], FIXED, slots=4, fixed_function_roles=intel.pmu_fixed)
    assert ref.n_runs == 1 and "PAPI_REF_CYC" in ref.runs[0][:3]


#: presets PAPI defines with one native event each on both Skylake-SP and Zen 4
EIGHT = ["PAPI_L1_DCM", "PAPI_BR_INS", "PAPI_BR_MSP", "PAPI_BR_CN", "PAPI_L2_DCR", "PAPI_L2_ICR", "PAPI_L2_ICM",
         "PAPI_L2_ICH"]


def test_plan_command_uses_the_machine_pmu(run_cli):
    code, out, err = run_cli("plan", "-c", ",".join(EIGHT), "--slots", "4", "--machine", "skylake-sp", "-f", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["n_runs"] == 2 and d["optimal"] and d["fixed_function"] == ["PAPI_TOT_INS", "PAPI_TOT_CYC"]
    code, out, _ = run_cli("plan", "-c", ",".join(EIGHT), "--machine", "zen4-epyc", "-f", "json")  # its 6 slots
    assert code == 0 and json.loads(out)["slots"] == 6 and json.loads(out)["n_runs"] == 2
    code, out, _ = run_cli("plan", "-c", ",".join(EIGHT), "--slots", "4", "--machine", "zen4-epyc", "-f", "json")
    assert code == 0 and json.loads(out)["n_runs"] == 4  # two of the four slots hold the references
    code, out, _ = run_cli("plan", "-c", "LONGEST_LAT_CACHE:MISS,skx_unc_imc0::UNC_M_CAS_COUNT:RD", "--slots", "4")
    assert code == 0  # native EVENT:UMASK names are the PMU's: accepted


# ---------------------------------------------------------------------------------------------- PAPI presets (issue 24)
def _papi_natives(arch: str) -> dict[str, list[str]]:
    """The preset table as stored (read here without the planner's code)."""
    import tomllib

    from synthtrace.tracelib.domain.papi_presets import TABLE

    return tomllib.loads(TABLE.read_text())[arch]["presets"]


def _programmable(run: list[str], table: dict[str, list[str]], fixed_function: set[str]) -> int:
    return len({n for c in run if c not in fixed_function for n in table.get(c, [c])})


@pytest.mark.parametrize(("machine", "arch"), [("skylake-sp", "skx"), ("icelake-sp", "icx"),
                                               ("marenostrum5-gpp", "spr")])
def test_every_run_fits_the_pmu_counting_derived_presets_natively(run_cli, machine, arch):
    """PAPI_DP_OPS and PAPI_VEC_DP are sums of 3-4 FP_ARITH events: a '4-slot' run holding them and two cache
    counters needs 7 programmable counters on Skylake-SP; the plan must fit as PAPI would program it."""
    wanted = ["PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_DP_OPS", "PAPI_VEC_DP"]
    code, out, err = run_cli("plan", "-c", ",".join(wanted), "--machine", machine, "-f", "json")
    assert code == 0, err
    d = json.loads(out)
    table = _papi_natives(arch)
    for run in d["runs"]:
        assert _programmable(run["counters"], table, set(d["fixed_function"])) <= d["slots"] == 4, run
        assert run["programmable_counters"] == _programmable(run["counters"], table, set(d["fixed_function"]))
    assert d["optimal"] and d["n_runs"] == 2  # the FP events together (they share them), the caches apart
    assert sorted(c for r in d["runs"] for c in r["counters"] if c not in d["fixed"]) == sorted(wanted)


def test_a_preset_the_pmu_does_not_define_is_refused_with_the_reason(run_cli):
    code, out, err = run_cli("plan", "-c", "PAPI_L1_DCM,PAPI_FP_OPS", "--machine", "skylake-sp")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "PAPI_FP_OPS is not available on Intel Skylake-SP" in err and "PAPI defines no PAPI_FP_OPS" in err


def test_a_preset_wider_than_the_pmu_is_refused_until_the_slots_allow_it(run_cli):
    code, out, err = run_cli("plan", "-c", "PAPI_FP_OPS", "--machine", "icelake-sp")
    assert code == 2 and "PAPI_FP_OPS takes 8 programmable counters on Intel Ice Lake-SP" in err, err
    assert "FP_ARITH_INST_RETIRED:512B_PACKED_DOUBLE" in err and "--slots 8" in err
    code, out, err = run_cli("plan", "-c", "PAPI_FP_OPS", "--machine", "icelake-sp", "--slots", "8", "-f", "json")
    assert code == 0 and json.loads(out)["runs"][0]["programmable_counters"] == 8, err


def test_amd_flops_take_a_counter_pair():
    """Zen's RETIRED_SSE_AVX_FLOPS is read with MergeEvent on two counters."""
    from synthtrace.tracelib.domain.papi_presets import preset_table

    zen3 = preset_table("amd64_fam19h_zen3")
    assert len(zen3.natives("PAPI_FP_OPS")) == 2 and len(zen3.natives("PAPI_L1_DCM")) == 1
    # 6 slots, the references take 2: FP_OPS (2) + 2 single ones fill a run, the fifth counter needs a second
    plan = plan_counters(["PAPI_FP_OPS", "PAPI_L1_DCM", "PAPI_L2_DCM", "PAPI_BR_INS"], FIXED, slots=6, presets=zen3)
    assert plan.n_runs == 2 and all(plan.counters_used(r) <= 6 for r in plan.runs)


def test_every_machine_profile_names_a_preset_table():
    from synthtrace.tracelib.domain.machine import PRESET_DIR, load_machine
    from synthtrace.tracelib.domain.papi_presets import preset_table

    for path in PRESET_DIR.glob("*.toml"):
        m = load_machine(path.stem)
        if m.pmu_papi is not None:
            t = preset_table(m.pmu_papi)
            assert t.natives("PAPI_TOT_INS") and t.natives("PAPI_TOT_CYC"), path.stem


def brute_force_with_events(names: list[str], cap: int, conflicts, events: dict[str, set[str]]) -> int:
    """The fewest runs by enumerating every partition, a run holding at most ``cap`` distinct events."""
    bad = {frozenset(p) for p in conflicts}

    def ok(b: list[str]) -> bool:
        return (len(set().union(*(events[c] for c in b))) <= cap
                and all(frozenset(p) not in bad for p in combinations(b, 2)))

    return fewest_blocks(names, ok)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_minimal_with_shared_native_events_against_brute_force(data):
    """Counters taking several events, some shared (PAPI_DP_OPS and PAPI_VEC_DP share three on Sapphire Rapids)."""
    from synthtrace.tracelib.domain.papi_presets import PresetTable

    n = data.draw(st.integers(1, 7), label="counters")
    cap = data.draw(st.integers(1, 4), label="slots")
    names = [f"PAPI_K{i}" for i in range(n)]
    pool = [f"EV{j}" for j in range(6)]
    events = {c: data.draw(st.sets(st.sampled_from(pool), min_size=1, max_size=cap), label=c) for c in names}
    all_pairs = list(combinations(names, 2))
    conflicts = data.draw(st.lists(st.sampled_from(all_pairs), unique=True), label="conflicts") if all_pairs else []
    table = PresetTable("test", "a test PMU", {c: tuple(sorted(e)) for c, e in events.items()})
    plan = plan_counters(names, [], slots=cap, conflicts=conflicts, presets=table)
    assert plan.optimal
    assert plan.n_runs == brute_force_with_events(names, cap, conflicts, events)
    assert all(plan.counters_used(r) <= cap for r in plan.runs)
    assert sorted(c for r in plan.runs for c in r) == sorted(names)


def test_every_list_plan_prints_is_bounded(tmp_path, run_cli):
    """Attack 12: ``plan`` printed its lists whole: a plan of 150 runs printed 150 table rows and one line naming
    each run, an error every fixed counter that does not fit. Each is now its first items and how many more; the
    whole plan is written with --output."""
    natives = ",".join(f"cpu::EV{i}:U" for i in range(300))  # native names in EVENT:UMASK form are accepted
    code, out, err = run_cli("plan", "-c", natives, "--slots", "2", "--fixed", "")
    assert code == 0, err
    assert "150 run(s)" in out and "and 142 more" in out and "100 more runs" in out
    assert max(map(len, out.splitlines())) < 400 and len(out.splitlines()) < 150, out
    code, out, err = run_cli("plan", "-c", natives, "--slots", "2", "--fixed", "", "-o", tmp_path / "p.txt")
    assert code == 0 and len((tmp_path / "p.txt").read_text().splitlines()) > 150, err  # every run in the file
    fixed = ",".join(f"PAPI_L{1 + i % 3}_{x}" for i in range(3) for x in ("DCM", "ICM", "TCM", "LDM", "STM"))
    code, out, err = run_cli("plan", "-c", "PAPI_FP_OPS", "--fixed", fixed, "--slots", "2", "--machine", "generic")
    assert code == 2 and "do not fit" in err and "more" in err and len(err) < 400, err
